package daemon

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// TestWorkersStopInOrderAndRefuseAfterShutdown: Stop waits for the named
// worker and returns its error, StopAll stops the rest last-started first,
// and once shutdown began Go refuses.
func TestWorkersStopInOrderAndRefuseAfterShutdown(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	var w workers
	var mu sync.Mutex
	var stopped []string
	boom := errors.New("boom")
	for _, name := range []string{"a", "b", "c"} {
		err := w.Go(name, func(ctx context.Context) error {
			<-ctx.Done()
			mu.Lock()
			stopped = append(stopped, name)
			mu.Unlock()
			if name == "b" {
				return boom
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Go("a", func(context.Context) error { return nil }); err == nil {
		t.Fatal("a second worker named a started")
	}
	ctx := context.Background()
	if err := w.Stop(ctx, "b"); !errors.Is(err, boom) {
		t.Fatalf("Stop(b) = %v, want its error", err)
	}
	if err := w.StopAll(ctx); err != nil {
		t.Fatal(err)
	}
	if want := []string{"b", "c", "a"}; !slices.Equal(stopped, want) {
		t.Fatalf("stopped %v, want %v", stopped, want)
	}
	if err := w.Go("late", func(context.Context) error { return nil }); !errors.Is(err, errShuttingDown) {
		t.Fatalf("Go after shutdown = %v, want errShuttingDown", err)
	}
	if err := w.Stop(ctx, "a"); err != nil {
		t.Fatalf("Stop of a stopped worker = %v", err)
	}
}

// TestWorkersStopIsBounded: a worker that ignores its context does not hold
// Stop past the caller's deadline.
func TestWorkersStopIsBounded(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	var w workers
	release := make(chan struct{})
	if err := w.Go("stuck", func(context.Context) error { <-release; return nil }); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := w.Stop(ctx, "stuck"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Stop = %v, want the deadline", err)
	}
	close(release)
	if err := w.Stop(context.Background(), "stuck"); err != nil {
		t.Fatal(err)
	}
}
