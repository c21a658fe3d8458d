package bench

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

func TestOpenLoopSendsEveryCallOnceAndCountsFromItsDueTime(t *testing.T) {
	const n, rate = 200, 20_000.0
	interval := time.Duration(float64(time.Second) / rate)
	var sent [n]atomic.Int32
	var first time.Time // when call 0 went out: no earlier than the run's start
	var ended [n]time.Time
	firstSent := make(chan struct{})
	lat, _, failed, err := openLoop(context.Background(), rate, n, func(i int) error {
		sent[i].Add(1)
		if i == 0 {
			first = time.Now()
			close(firstSent)
		} else {
			<-firstSent
		}
		ended[i] = time.Now()
		return nil
	})
	if err != nil || failed != 0 {
		t.Fatalf("openLoop: %d failed, %v", failed, err)
	}
	for i := range sent {
		if got := sent[i].Load(); got != 1 {
			t.Fatalf("call %d sent %d times, want once", i, got)
		}
	}
	// Call i was due at most i intervals after call 0 went out, so its
	// latency is at least the time from then to its answer: the time it
	// waited for the generator counts, as a caller's would.
	late := 0
	for i := range lat {
		due := first.Add(time.Duration(i) * interval)
		if min := ended[i].Sub(due); lat[i] < min {
			t.Fatalf("latency of call %d %v, want >= %v (from its due time to its answer)", i, lat[i], min)
		}
		if ended[i].Sub(due) > interval {
			late++
		}
	}
	t.Logf("%d of %d calls answered more than an interval after they were due", late, n)
}

func TestOpenLoopCountsFailuresAndStopsWithItsContext(t *testing.T) {
	boom := errors.New("boom")
	_, _, failed, err := openLoop(context.Background(), 50_000, 100, func(i int) error {
		if i%4 == 0 {
			return boom
		}
		return nil
	})
	if failed != 25 || !errors.Is(err, boom) {
		t.Fatalf("openLoop = %d failed, %v; want 25 failed, %v", failed, err, boom)
	}

	ctx, cancel := context.WithCancel(context.Background())
	var calls atomic.Int64
	_, _, _, err = openLoop(ctx, 1000, 1_000_000, func(i int) error {
		if calls.Add(1) == 10 {
			cancel()
		}
		return nil
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("openLoop with its context cancelled = %v, want %v", err, context.Canceled)
	}
	if got := calls.Load(); got >= 1_000_000 {
		t.Fatalf("openLoop sent all %d calls after its context ended", got)
	}
}
