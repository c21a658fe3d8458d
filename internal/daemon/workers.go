package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
)

// errShuttingDown is returned by workers.Go once shutdown has begun.
var errShuttingDown = errors.New("shutting down")

// workers owns the service's long-running goroutines, as nats-server's
// startGoRoutine does: each runs under a name with a context of its own,
// shutdown stops them by name in the order it needs and waits for each, and
// none starts once shutdown has begun. It is safe for concurrent use; the
// zero value is ready.
type workers struct {
	log *slog.Logger

	mu      sync.Mutex
	closing bool
	running map[string]*worker
	order   []string // names in start order
}

type worker struct {
	cancel context.CancelFunc
	done   chan struct{} // closed when run returned; err is set then
	err    error
}

// Go starts run on a goroutine of its own under name. run must return soon
// after its context ends. An error run returns before it was asked to stop
// is logged; Stop returns it either way. Go refuses (errShuttingDown) once
// shutdown began, and refuses a name already taken.
func (w *workers) Go(name string, run func(ctx context.Context) error) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closing {
		return fmt.Errorf("start %s: %w", name, errShuttingDown)
	}
	if _, dup := w.running[name]; dup {
		return fmt.Errorf("start %s: a worker of that name is running", name)
	}
	if w.running == nil {
		w.running = map[string]*worker{}
	}
	ctx, cancel := context.WithCancel(context.Background())
	wk := &worker{cancel: cancel, done: make(chan struct{})}
	w.running[name] = wk
	w.order = append(w.order, name)
	go func() {
		defer close(wk.done)
		wk.err = run(ctx)
		if wk.err != nil && ctx.Err() == nil && w.log != nil {
			w.log.Error("worker stopped", "worker", name, "err", wk.err)
		}
	}()
	return nil
}

// Shutdown marks the start of shutdown: Go refuses from now on. The
// running workers go on until they are stopped.
func (w *workers) Shutdown() {
	w.mu.Lock()
	w.closing = true
	w.mu.Unlock()
}

// Stop cancels the named worker's context and waits for it to return, at
// most until ctx ends, and returns the worker's error. A name never started
// (or already stopped) returns nil.
func (w *workers) Stop(ctx context.Context, name string) error {
	w.mu.Lock()
	wk := w.running[name]
	w.mu.Unlock()
	if wk == nil {
		return nil
	}
	wk.cancel()
	select {
	case <-wk.done:
	case <-ctx.Done():
		return fmt.Errorf("stop %s: %w", name, ctx.Err())
	}
	w.mu.Lock()
	delete(w.running, name)
	w.order = slices.DeleteFunc(w.order, func(n string) bool { return n == name })
	w.mu.Unlock()
	return wk.err
}

// StopAll begins shutdown and stops every worker still running, the last
// started first, each bounded by ctx. It returns their errors joined.
func (w *workers) StopAll(ctx context.Context) error {
	w.Shutdown()
	w.mu.Lock()
	names := slices.Clone(w.order)
	w.mu.Unlock()
	slices.Reverse(names)
	var errs []error
	for _, name := range names {
		if err := w.Stop(ctx, name); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
