package sqlstore

import (
	"context"
	"database/sql"
	"time"

	"hyapp/room-service/store"
)

// CommitMerged runs the merged commit path alone, in a transaction of its
// own, with batches fenced in order.
func (db *DB) CommitMerged(ctx context.Context, batches []store.Batch, order []int, results []error) error {
	return db.Tx(ctx, func(tx *sql.Tx) error { return db.commitMerged(ctx, tx, batches, order, results) })
}

// RideMark offers ids to the next room commit, as MarkOutboxPublishedBatch
// does on a database with a single writer, and reports whether one stored
// them.
func (db *DB) RideMark(ctx context.Context, ids []string) (bool, error) {
	return db.marks.ride(ctx, ids)
}

// SetMarkWait sets how long a mark waits for a room commit.
func (db *DB) SetMarkWait(d time.Duration) { db.marks.wait = d }

// WaitingMarks counts the marks waiting for a room commit.
func (db *DB) WaitingMarks() int {
	db.marks.mu.Lock()
	defer db.marks.mu.Unlock()
	return len(db.marks.waiting)
}

// CommitRunning makes as if a commit that began a minute ago still runs,
// after one that took took, and a commit's length may add up to an hour
// to a mark's wait; end finishes it.
func (db *DB) CommitRunning(took time.Duration) (end func()) {
	taken, _ := db.marks.take()
	db.marks.mu.Lock()
	db.marks.last = time.Now().Add(-time.Minute)
	db.marks.took, db.marks.max = took, time.Hour
	db.marks.mu.Unlock()
	return func() { db.marks.finish(taken, time.Now().Add(-took), nil) }
}

// ErrNotOneTrip is what a one-trip commit returns when a batch does not
// pass its fence or hits a duplicate key.
var ErrNotOneTrip = errNotOneTrip

// OneTrip says whether the batches of order commit in one trip.
func (db *DB) OneTrip(batches []store.Batch, order []int) bool { return db.oneTrip(batches, order) }

// CommitOneTrip runs the one-trip commit path alone.
func (db *DB) CommitOneTrip(ctx context.Context, batches []store.Batch, order []int) error {
	return db.commitOneTrip(ctx, batches, order)
}
