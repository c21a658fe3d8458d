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
// and flushes went to marks. Instead, a mark waits for the next room
// commit (CommitBatches) to take it: that commit runs the mark's UPDATE in
// its own transaction, so one flush stores both. A commit that fails hands
// the marks it took back to their callers, which then run them alone: a
// mark is never lost to a room commit's failure, and never changes what a
// room commit decides.
//
// A mark waits only while commits run: one is running, or one began
// within markRide. On a database that commits nothing, as while a backlog
// drains after a restart, it runs at once. It waits for the next commit at
// most markRide beyond twice what the last commit took (at most
// markRideMax): a commit that runs follows the one before it, so under
// load the next one takes the mark, and one that does not come (the load
// stopped) leaves the mark to run alone. Until this bound counted the
// commit's length, a mark gave up after markRide alone, and under 1,000
// rooms of joins on a 2-core machine, where a commit took 15-25 ms, nearly
// every mark ran alone: the relay's marks were 6% of the service's CPU and
// a second transaction beside each room commit.
const (
	markRide    = 5 * time.Millisecond
	markRideMax = 250 * time.Millisecond
)

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
	wait    time.Duration // how long a mark waits for a commit beyond its length; 0: markRide
	last    time.Time     // when the last commit took the waiting marks
	running int           // commits that took their marks and have not finished
	took    time.Duration // how long the last commit that finished ran
	max     time.Duration // the most a commit's length adds to the wait; 0: markRideMax
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
	if m.running == 0 && time.Since(m.last) > wait {
		m.mu.Unlock()
		return false, nil // no commits run
	}
	longest := m.max
	if longest == 0 {
		longest = markRideMax
	}
	wait += min(2*m.took, longest)
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

// take starts a commit: it removes and returns the waiting marks, for the
// commit to store, and the commit's start, for finish.
func (m *marks) take() ([]*mark, time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	taken := m.waiting
	m.waiting = nil
	m.last = time.Now()
	m.running++
	return taken, m.last
}

// finish ends the commit that began at start and tells the callers of
// taken whether it stored their marks: nil, or errNotTaken.
func (m *marks) finish(taken []*mark, start time.Time, stored error) {
	m.mu.Lock()
	m.running--
	m.took = time.Since(start)
	m.mu.Unlock()
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
