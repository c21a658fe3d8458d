package lease

import (
	"context"
	"errors"
	"testing"
)

func TestLocalOneHolderPerRoom(t *testing.T) {
	ctx := context.Background()
	l := NewLocal()
	h1, err := l.Acquire(ctx, "r1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Acquire(ctx, "r1"); !errors.Is(err, ErrHeld) {
		t.Fatalf("second acquire: got %v, want ErrHeld", err)
	}
	if _, err := l.Acquire(ctx, "r2"); err != nil {
		t.Fatalf("other room: %v", err)
	}
	if err := h1.Release(ctx); err != nil {
		t.Fatal(err)
	}
	h3, err := l.Acquire(ctx, "r1")
	if err != nil {
		t.Fatalf("acquire after release: %v", err)
	}
	// A stale handle's release must not free the new holder's lease.
	if err := h1.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Acquire(ctx, "r1"); !errors.Is(err, ErrHeld) {
		t.Fatalf("stale release freed the lease: %v", err)
	}
	select {
	case <-h3.Lost():
		t.Fatal("local lease reported lost")
	default:
	}
}
