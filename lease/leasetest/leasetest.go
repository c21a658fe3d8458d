// Package leasetest is the contract every lease.Lease keeps, one suite run
// against each implementation.
package leasetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"hyapp/room-service/lease"
)

// Run runs the contract. open returns two leases that compete for the same
// rooms, as two nodes would (an in-process lease returns itself twice), and
// a room id no other test uses.
func Run(t *testing.T, open func(t *testing.T) (a, b lease.Lease, roomID string)) {
	ctx := context.Background()
	t.Run("exclusive", func(t *testing.T) {
		a, b, id := open(t)
		h := acquire(t, a, id)
		defer release(t, h)
		for name, l := range map[string]lease.Lease{"same": a, "other": b} {
			if _, err := l.Acquire(ctx, id); !errors.Is(err, lease.ErrHeld) {
				t.Errorf("%s lease acquired a held room: got %v, want ErrHeld", name, err)
			}
		}
		if err := h.Check(ctx); err != nil {
			t.Errorf("holder's check: %v", err)
		}
		select {
		case <-h.Lost():
			t.Error("a held lease reported lost")
		default:
		}
	})
	t.Run("release then acquire", func(t *testing.T) {
		a, b, id := open(t)
		h := acquire(t, a, id)
		release(t, h)
		if err := h.Check(ctx); !errors.Is(err, lease.ErrLost) {
			t.Errorf("released handle's check: got %v, want ErrLost", err)
		}
		h2 := acquire(t, b, id)
		release(t, h2)
	})
	t.Run("stale release keeps the new holder", func(t *testing.T) {
		a, b, id := open(t)
		h := acquire(t, a, id)
		release(t, h)
		h2 := acquire(t, b, id)
		defer release(t, h2)
		release(t, h) // idempotent, and never another holder's
		if _, err := a.Acquire(ctx, id); !errors.Is(err, lease.ErrHeld) {
			t.Fatalf("a stale release freed the new holder's lease: %v", err)
		}
		if err := h2.Check(ctx); err != nil {
			t.Errorf("new holder's check: %v", err)
		}
	})
	t.Run("concurrent acquirers: one wins", func(t *testing.T) {
		a, b, id := open(t)
		const n = 16
		var wg sync.WaitGroup
		handles := make(chan lease.Handle, n)
		errs := make(chan error, n)
		for i := range n {
			l := a
			if i%2 == 1 {
				l = b
			}
			wg.Go(func() {
				h, err := l.Acquire(ctx, id)
				if err != nil {
					errs <- err
					return
				}
				handles <- h
			})
		}
		wg.Wait()
		close(handles)
		close(errs)
		var won []lease.Handle
		for h := range handles {
			won = append(won, h)
		}
		for _, h := range won {
			release(t, h)
		}
		if len(won) != 1 {
			t.Errorf("%d acquirers won, want 1", len(won))
		}
		for err := range errs {
			if !errors.Is(err, lease.ErrHeld) {
				t.Errorf("a loser got %v, want ErrHeld", err)
			}
		}
	})
	t.Run("rooms are independent", func(t *testing.T) {
		a, b, id := open(t)
		h1 := acquire(t, a, id)
		defer release(t, h1)
		h2 := acquire(t, b, fmt.Sprint(id, "-other"))
		defer release(t, h2)
	})
}

func acquire(t *testing.T, l lease.Lease, id string) lease.Handle {
	t.Helper()
	h, err := l.Acquire(context.Background(), id)
	if err != nil {
		t.Fatalf("acquire room=%s: %v", id, err)
	}
	return h
}

func release(t *testing.T, h lease.Handle) {
	t.Helper()
	if err := h.Release(context.Background()); err != nil {
		t.Errorf("release: %v", err)
	}
}
