package cell

import (
	"context"
	"maps"
	"slices"
	"sync"
	"time"

	"hyapp/room-service/store"
)

// Durable timers: rows (store.Timer) a Feature sets and deletes with the
// batches it contributes to, each of a kind that one Feature fires. The
// scanner finds the rows no in-memory timer will fire.

const (
	// timerScanLimit is the most due timers one scan reads.
	timerScanLimit = 500
	// timerScanWorkers bounds the rooms one scan fires at once: each may
	// load a room.
	timerScanWorkers = 8
)

// RunTimers scans for due timers every interval (and once at once) until
// ctx ends or the registry closes, and hands each room's due timers to the
// Feature that fires their kind (a rocket launch is submitted to its room,
// which loads the room if no node serves it). It wakes what no in-memory
// timer will: the rooms of a node that crashed, rooms passivated with a
// timer pending, wakeups that failed. A scan fires a few rooms at a time
// and finishes before the next begins. New starts one unless
// Config.TimerScanEvery is negative; more are harmless, as every firing is
// idempotent. An interval of zero or less is the default TimerScanEvery.
func (r *Registry) RunTimers(ctx context.Context, every time.Duration) {
	if every <= 0 {
		every = DefaultConfig().TimerScanEvery
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(r.wakes.ctx, cancel)()
	ticker := time.NewTicker(every)
	defer ticker.Stop()
	for {
		r.scanTimers(ctx)
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}

// scanTimers hands the timers due now to the features that fire them, one
// room at a time per feature, timerScanWorkers at once. Each kind this node
// fires is read on its own, up to timerScanLimit rows: rows of one kind
// that stay due (of a kind from a newer node, which this node leaves to
// those) hold back no other kind.
func (r *Registry) scanTimers(ctx context.Context) {
	var due []store.Timer
	for _, kind := range slices.Sorted(maps.Keys(r.features.timers)) {
		rows, err := r.store.ListDueTimers(ctx, kind, r.cfg.Clock(), timerScanLimit)
		if err != nil {
			if ctx.Err() == nil {
				r.log.Warn("scan due timers", "kind", kind, "err", err)
			}
			return
		}
		due = append(due, rows...)
	}
	type target struct {
		f      *Feature
		roomID string
	}
	var order []target
	byTarget := make(map[target][]store.Timer)
	for _, t := range due {
		f := r.features.timers[t.Kind]
		k := target{f, t.RoomID}
		if _, seen := byTarget[k]; !seen {
			order = append(order, k)
		}
		byTarget[k] = append(byTarget[k], t)
	}
	sem := make(chan struct{}, timerScanWorkers)
	var wg sync.WaitGroup
	defer wg.Wait()
	for _, k := range order {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return
		}
		wg.Go(func() {
			defer func() { <-sem }()
			k.f.Fire(ctx, k.roomID, byTarget[k])
		})
	}
}

// wakers runs the wakeups of in-memory timers: goroutines the registry owns,
// refused once it closes, cancelled and waited for by Close.
type wakers struct {
	ctx    context.Context
	cancel context.CancelFunc

	mu     sync.Mutex
	closed bool
	wg     sync.WaitGroup
}

func newWakers(parent context.Context) *wakers {
	ctx, cancel := context.WithCancel(parent)
	return &wakers{ctx: ctx, cancel: cancel}
}

// spawn runs f on a goroutine of its own, unless the registry is closing.
func (w *wakers) spawn(f func(ctx context.Context)) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return
	}
	w.wg.Go(func() { f(w.ctx) })
}

// stop refuses new wakeups and cancels those running.
func (w *wakers) stop() {
	w.mu.Lock()
	w.closed = true
	w.mu.Unlock()
	w.cancel()
}

// wait waits for the wakeups that are running.
func (w *wakers) wait() { w.wg.Wait() }
