package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"slices"
	"sync"
	"time"
)

// On a database with a single writer (Dialect.SingleWriter) every write
// transaction waits for the one before it, and each ends with its own
// durable flush. The relay marks rows published in transactions of its
// own, as often as room commits run, so under load half the writer's turns
// and flushes went to marks. Instead, a mark waits a moment for the next
// room commit (CommitBatches) to take it: that commit runs the mark's
// UPDATE in its own transaction, so one flush stores both. A mark that no
// commit takes within markRide (an idle database) runs in a transaction
// of its own, as it always did. A commit that fails hands the marks it
// took back to their callers, which then run them alone: a mark is never
// lost to a room commit's failure, and never changes what a room commit
// decides. A mark waits only while commits run (one began within
// markRide): on a database that commits nothing, as while a backlog drains
// after a restart, it runs at once.
const markRide = 5 * time.Millisecond

// errNotTaken tells a mark's caller that the commit that took it did not
// store it: the caller runs it alone.
var errNotTaken = errors.New("mark not taken by a commit")

// mark is one MarkOutboxPublishedBatch call waiting for a commit.
type mark struct {
	ids  []string
	done chan error // nil: stored; errNotTaken: run it alone
}

// marks are the waiting marks.
type marks struct {
	mu      sync.Mutex
	waiting []*mark
	wait    time.Duration // how long a mark waits for a commit; 0: markRide
	last    time.Time     // when the last commit took the waiting marks
}

// ride offers ids to the next room commit and reports whether one stored
// them (with its error, nil when stored, or ctx's).
func (m *marks) ride(ctx context.Context, ids []string) (stored bool, err error) {
	mk := &mark{ids: ids, done: make(chan error, 1)}
	wait := m.wait
	if wait == 0 {
		wait = markRide
	}
	m.mu.Lock()
	if time.Since(m.last) > wait {
		m.mu.Unlock()
		return false, nil // no commits run
	}
	m.waiting = append(m.waiting, mk)
	m.mu.Unlock()
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case err := <-mk.done:
		return err == nil, nil
	case <-t.C:
	case <-ctx.Done():
	}
	m.mu.Lock()
	i := slices.Index(m.waiting, mk)
	if i >= 0 {
		m.waiting = slices.Delete(m.waiting, i, i+1)
	}
	m.mu.Unlock()
	if i >= 0 {
		return false, ctx.Err()
	}
	// A commit took it: its transaction is running and ends soon.
	return <-mk.done == nil, nil
}

// take removes and returns the waiting marks.
func (m *marks) take() []*mark {
	m.mu.Lock()
	defer m.mu.Unlock()
	taken := m.waiting
	m.waiting = nil
	m.last = time.Now()
	return taken
}

// finish tells the callers of taken whether the commit that ran them
// stored them: nil, or errNotTaken.
func finish(taken []*mark, stored error) {
	for _, mk := range taken {
		mk.done <- stored
	}
}

// markIn runs the UPDATEs of taken inside tx.
func (db *DB) markIn(ctx context.Context, tx *sql.Tx, taken []*mark) error {
	if len(taken) == 0 {
		return nil
	}
	var ids []string
	for _, mk := range taken {
		ids = append(ids, mk.ids...)
	}
	return db.markPublished(ctx, tx, ids)
}
