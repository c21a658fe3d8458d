package natsbus

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"hyapp/room-service/outbox"
)

// Short sequences of many rooms share fast batches.
//
// A relay that publishes a thousand rooms at once hands PublishInOrder a row
// or two per room: each commit of a room writes about that many. A fast
// batch may carry the rows of many rooms: the broker stores its messages in
// order as they come and nothing past a gap, so what it holds of each room's
// rows in a batch is always their first ones, in order, as when a batch holds
// one room's rows. So while enough short sequences run at once (minRun), a new
// one waits for others to fill a batch with it (see gatherWait and
// queueWait); a batch with fewer than minRun rows, and every sequence of a
// quiet bus, goes one row at a time as before, without waiting. With 256
// rooms publishing a row at a time each, a row costs the process 19-21 µs of
// CPU in shared batches against 25-35 µs alone, each after the ack of the
// one before (BenchmarkPublishInOrderManyRooms, the embedded server).
//
// A sequence is in one batch at a time, and a room has one sequence at a time
// (its relay chain), so a room's rows are never in two batches at once. When
// a batch fails, each sequence in it goes on one row at a time from its first
// row the broker did not acknowledge, as a failed run does (see
// PublishInOrder).

// gatherWait is the longest the first short sequence in the queue waits
// for others to fill a batch with it.
const gatherWait = 2 * time.Millisecond

// queueWait is the longest a short sequence waits in the queue: the batches
// before it go one at a time, and one may take its publish timeouts on a slow
// broker. Past it the sequence goes alone, so that none waits for many
// batches' timeouts, which the duplicate window does not cover.
const queueWait = 10 * gatherWait

// testHookSend, when set by a test, runs before each batch of rows goes out.
var testHookSend func(rows int)

// gatherer sends the fast batches of short sequences, one batch at a time,
// on a goroutine of its own.
type gatherer struct {
	active atomic.Int64 // short sequences in progress

	mu     sync.Mutex
	queue  []*gathered // waiting for a batch, oldest first
	rows   int         // rows in queue
	closed bool

	signal chan struct{} // a sequence queued
	ctx    context.Context
	stop   context.CancelFunc
	done   chan struct{} // closed when run returned
}

// gathered is one short sequence waiting for, or in, a batch.
type gathered struct {
	rows []outbox.Record
	each func(i int) bool
	over chan struct{} // closed when the batch is over, or the sequence is to go alone

	// Set before over is closed:
	acked   int  // rows the broker acknowledged, each called for them
	stopped bool // each returned false
}

func newGatherer() *gatherer {
	ctx, stop := context.WithCancel(context.Background())
	return &gatherer{signal: make(chan struct{}, 1), ctx: ctx, stop: stop, done: make(chan struct{})}
}

// publish is PublishInOrder for fewer than minRun rows on a stream that takes
// fast batches.
func (g *gatherer) publish(ctx context.Context, b *Bus, rows []outbox.Record, each func(i int) bool) (int, error) {
	defer g.active.Add(-1)
	if g.active.Add(1) < minRun {
		return b.publishSingly(ctx, rows, each) // too few at once to fill a batch
	}
	s := &gathered{rows: rows, each: each, over: make(chan struct{})}
	if !g.push(s) {
		return b.publishSingly(ctx, rows, each)
	}
	t := time.NewTimer(queueWait)
	defer t.Stop()
	select {
	case <-s.over:
	case <-t.C:
		if g.drop(s) {
			return b.publishSingly(ctx, rows, each)
		}
		<-s.over // in a batch: its end is bounded by the publish timeouts
	case <-ctx.Done():
		if g.drop(s) {
			return 0, publishErr(rows[0], ctx.Err())
		}
		<-s.over
	}
	done := s.acked
	switch {
	case done == len(rows) || s.stopped:
		return done, nil
	case ctx.Err() != nil:
		return done, publishErr(rows[done], ctx.Err())
	}
	n, err := b.publishSingly(ctx, rows[done:], func(i int) bool { return each(done + i) })
	return done + n, err
}

// push queues s for a batch; false once the gatherer stopped.
func (g *gatherer) push(s *gathered) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return false
	}
	g.queue = append(g.queue, s)
	g.rows += len(s.rows)
	select {
	case g.signal <- struct{}{}:
	default:
	}
	return true
}

// drop takes s out of the queue; false when a batch has it already.
func (g *gatherer) drop(s *gathered) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	for i, q := range g.queue {
		if q == s {
			g.queue = append(g.queue[:i], g.queue[i+1:]...)
			g.rows -= len(s.rows)
			return true
		}
	}
	return false
}

// take removes whole sequences from the front of the queue, up to maxRun
// rows, and returns them with their rows.
func (g *gatherer) take() ([]*gathered, int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	n, rows := 0, 0
	for n < len(g.queue) && rows+len(g.queue[n].rows) <= maxRun {
		rows += len(g.queue[n].rows)
		n++
	}
	taken := make([]*gathered, n)
	copy(taken, g.queue)
	g.queue = append(g.queue[:0], g.queue[n:]...)
	g.rows -= rows
	return taken, rows
}

// queued is the number of rows waiting for a batch.
func (g *gatherer) queued() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.rows
}

// run sends batches until close: whatever is queued once minRun rows are,
// or gatherWait after the first of them queued.
func (g *gatherer) run(b *Bus) {
	defer close(g.done)
	for {
		for g.queued() == 0 {
			select {
			case <-g.signal:
			case <-g.ctx.Done():
				return
			}
		}
		if g.queued() < minRun {
			t := time.NewTimer(gatherWait)
		wait:
			for g.queued() < minRun {
				select {
				case <-g.signal:
				case <-t.C:
					break wait
				case <-g.ctx.Done():
					break wait
				}
			}
			t.Stop()
		}
		batch, rows := g.take()
		if rows >= minRun && g.ctx.Err() == nil {
			g.send(b, batch, rows)
		}
		for _, s := range batch {
			close(s.over) // what was not acknowledged goes alone
		}
	}
}

// send publishes the sequences' rows as one fast batch, each sequence's in
// order, and records what the broker acknowledged of each.
func (g *gatherer) send(b *Bus, batch []*gathered, rows int) {
	if testHookSend != nil {
		testHookSend(rows)
	}
	flat := make([]outbox.Record, 0, rows)
	for _, s := range batch {
		flat = append(flat, s.rows...)
	}
	k, start := 0, 0 // the sequence of flat's row i, and where its rows start
	n, err := b.publishRun(g.ctx, flat, func(i int) bool {
		for i-start >= len(batch[k].rows) {
			start += len(batch[k].rows)
			k++
		}
		s := batch[k]
		s.acked = i - start + 1
		s.stopped = !s.each(i-start) || s.stopped // each hears of every acknowledged row
		return true
	})
	if err != nil {
		b.log.Debug("fast batch of many rooms failed: its rooms go on one row at a time",
			"rows", rows, "rooms", len(batch), "acknowledged", n, "err", err)
	}
}

// close stops the gatherer: the sequences it holds go alone (and fail on
// the closed connection), and it waits for the batch under way.
func (g *gatherer) close() {
	g.mu.Lock()
	g.closed = true
	queue := g.queue
	g.queue, g.rows = nil, 0
	g.mu.Unlock()
	g.stop()
	<-g.done
	for _, s := range queue {
		close(s.over)
	}
}
