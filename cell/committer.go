package cell

import (
	"context"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"hyapp/room-service/internal/obs"
	"hyapp/room-service/store"
)

// committer merges the batches of many cells into few transactions: node
// level group commit. Each worker takes whatever is queued (up to maxRooms
// batches or maxCommands commands) and commits it in one CommitBatches call,
// so under load one fsync covers many rooms. workers bounds the parallel
// transactions (1 suits SQLite's single writer; a few suit MySQL).
//
// A lone worker whose last transaction carried commitLingerAfter rooms or
// more, and that takes the next room less than commitLingerIdle lingers
// after it ended but finds fewer than commitLingerTarget queued, waits up
// to linger for that many before it commits fewer (see Config.CommitLinger).
type committer struct {
	store       batchStore
	in          chan *commitReq
	maxRooms    int
	maxCommands int
	timeout     time.Duration
	linger      time.Duration
	stopping    <-chan struct{} // ends a linger: the node is draining
	now         func() time.Time
	metrics     *Metrics
	quit        chan struct{}
	wg          sync.WaitGroup
}

const (
	commitLingerAfter  = 4
	commitLingerTarget = 64
	commitLingerIdle   = 10 // a worker idle this many lingers is not busy
)

// batchStore commits batches: Store's CommitBatches.
type batchStore interface {
	CommitBatches(ctx context.Context, batches []store.Batch) (results []error, err error)
}

type commitReq struct {
	batch store.Batch
	done  chan error
	trace trace.SpanContext // the cell's commit span when traced
}

func newCommitter(st batchStore, cfg Config, stopping <-chan struct{}, m *Metrics) *committer {
	c := &committer{
		store: st, in: make(chan *commitReq, 4*cfg.CommitMaxRooms), maxRooms: cfg.CommitMaxRooms,
		maxCommands: cfg.CommitMaxCommands, timeout: cfg.CommitTimeout,
		stopping: stopping, now: time.Now, metrics: m, quit: make(chan struct{}),
	}
	if cfg.CommitWorkers == 1 {
		// Several workers share the queue: while one waited for company,
		// the others would take the rooms it waits for. On MariaDB the
		// in-process engine ran 2-13% faster without (docs/benchmarks.md).
		c.linger = cfg.CommitLinger
	}
	for range cfg.CommitWorkers {
		c.wg.Add(1)
		go c.work()
	}
	return c
}

// commit queues b and waits for its outcome. Once queued, the outcome is
// awaited whatever happens to the caller: an abandoned commit would leave
// the cell not knowing its own state.
// sc is the cell's commit span: the transaction's span joins its trace.
func (c *committer) commit(sc trace.SpanContext, b store.Batch) error {
	req := &commitReq{batch: b, done: make(chan error, 1), trace: sc}
	select {
	case c.in <- req:
	case <-c.quit:
		return store.ErrUnavailable
	}
	return <-req.done
}

func (c *committer) work() {
	defer c.wg.Done()
	reqs := make([]*commitReq, 0, c.maxRooms)
	batches := make([]store.Batch, 0, c.maxRooms)
	n := 0 // commands in batches
	add := func(r *commitReq) {
		reqs, batches = append(reqs, r), append(batches, r.batch)
		n += len(r.batch.Commands)
	}
	full := func() bool { return len(reqs) >= c.maxRooms || n >= c.maxCommands }
	target := min(commitLingerTarget, c.maxRooms)
	wait := time.NewTimer(time.Hour)
	wait.Stop()
	wide := false // the transaction before carried many rooms
	var ended time.Time
	for {
		select {
		case <-c.quit:
			return
		case first := <-c.in:
			reqs, batches, n = reqs[:0], batches[:0], 0
			add(first)
		more:
			for !full() {
				select {
				case r := <-c.in:
					add(r)
				default:
					break more
				}
			}
			if c.linger > 0 && wide && c.now().Sub(ended) < commitLingerIdle*c.linger && len(reqs) < target && !full() {
				// Many rooms commit at once, and few are queued now: a
				// moment more makes this transaction carry several times
				// as many for the same fixed cost (a transaction, a sync
				// of the log).
				c.metrics.CommitLingers.Inc()
				wait.Reset(c.linger)
			linger:
				for len(reqs) < target && !full() {
					select {
					case r := <-c.in:
						add(r)
					case <-wait.C:
						break linger
					case <-c.stopping:
						break linger
					}
				}
				wait.Stop()
			}
			wide, ended = len(reqs) >= commitLingerAfter, c.flush(reqs, batches)
			clear(reqs)
		}
	}
}

// flush commits batches in one transaction, answers reqs, and returns when
// the transaction ended (before the answers: a caller answered may send
// the room's next command at once, and idleness counts from the end).
func (c *committer) flush(reqs []*commitReq, batches []store.Batch) (ended time.Time) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	// One transaction serves many commands: its span is in the trace of
	// the first traced one and links the others.
	ctx, span := obs.StartFor(ctx, "store.commit", parents(reqs, func(r *commitReq) trace.SpanContext { return r.trace }))
	defer span.End()
	start := time.Now()
	results, err := c.store.CommitBatches(ctx, batches)
	ended = c.now()
	obs.Observe(ctx, c.metrics.CommitSeconds, time.Since(start).Seconds())
	c.metrics.TxnRooms.Observe(float64(len(batches)))
	if span.IsRecording() {
		commands := 0
		for _, b := range batches {
			commands += len(b.Commands)
		}
		span.SetAttributes(attribute.Int("db.batch_rooms", len(batches)), attribute.Int("db.batch_commands", commands))
		if err != nil {
			span.SetStatus(codes.Error, err.Error())
		}
	}
	for i, r := range reqs {
		switch {
		case err != nil:
			r.done <- err
		case i < len(results):
			r.done <- results[i]
		default:
			r.done <- store.ErrUnavailable
		}
	}
	clear(batches) // drop references to payloads
	return ended
}

// close stops the workers after the batches they hold. Callers must have
// stopped every cell first.
func (c *committer) close() {
	close(c.quit)
	c.wg.Wait()
}
