package bench

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"hyapp/room-service/room"
	"hyapp/room-service/wallet"
)

// counting is a Wallet that counts the calls that reach it.
type counting struct{ calls int }

func (c *counting) Charge(context.Context, []wallet.Charge) ([]wallet.Result, error) {
	c.calls++
	return nil, nil
}
func (c *counting) Settle(context.Context, []string) error { c.calls++; return nil }
func (c *counting) Refund(context.Context, string) (wallet.Receipt, error) {
	c.calls++
	return wallet.Receipt{}, nil
}
func (c *counting) Receipt(context.Context, string) (wallet.Receipt, bool, error) {
	c.calls++
	return wallet.Receipt{}, false, nil
}
func (c *counting) Pending(context.Context, time.Time, wallet.Cursor, int) ([]wallet.Receipt, error) {
	c.calls++
	return nil, nil
}
func (c *counting) Credit(context.Context, int64, int64, string) (int64, bool, error) {
	c.calls++
	return 0, false, nil
}
func (c *counting) Balance(context.Context, int64) (int64, error) { c.calls++; return 0, nil }

func calls(ctx context.Context, w wallet.Wallet) []error {
	_, e1 := w.Charge(ctx, nil)
	e2 := w.Settle(ctx, nil)
	_, e3 := w.Refund(ctx, "k")
	_, _, e4 := w.Receipt(ctx, "k")
	_, e5 := w.Pending(ctx, time.Now(), wallet.Cursor{}, 1)
	_, _, e6 := w.Credit(ctx, 1, 1, "k")
	_, e7 := w.Balance(ctx, 1)
	return []error{e1, e2, e3, e4, e5, e6, e7}
}

func TestWithLatency(t *testing.T) {
	const d = 2 * time.Millisecond
	inner := &counting{}
	w := withLatency(inner, d)
	start := time.Now()
	for i, err := range calls(t.Context(), w) {
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	if inner.calls != 7 {
		t.Fatalf("%d calls reached the wallet, want 7", inner.calls)
	}
	if elapsed := time.Since(start); elapsed < 7*d {
		t.Fatalf("7 calls took %v, want at least %v", elapsed, 7*d)
	}

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	inner.calls = 0
	for i, err := range calls(ctx, withLatency(inner, time.Hour)) {
		if !errors.Is(err, room.ErrUnavailable) || !errors.Is(err, context.Canceled) {
			t.Fatalf("call %d with a canceled ctx: %v, want ErrUnavailable wrapping context.Canceled", i, err)
		}
	}
	if inner.calls != 0 {
		t.Fatalf("%d calls reached the wallet after the ctx ended", inner.calls)
	}
	if withLatency(inner, 0) != wallet.Wallet(inner) {
		t.Fatal("WithLatency(w, 0) is not w")
	}
}

func TestBySecondFindsTheSecondsOfTheTail(t *testing.T) {
	interval := 100 * time.Millisecond // ten a second
	lat := make([]time.Duration, 35)   // three seconds and a half
	for i := range lat {
		lat[i] = time.Duration(i%10+1) * time.Millisecond
	}
	lat[14] = 80 * time.Millisecond // second 1
	lat[31] = 60 * time.Millisecond // the half second 3
	before := slices.Clone(lat)
	s := bySecond(lat, interval)
	want := seconds{first: 10 * time.Millisecond, worst: 80 * time.Millisecond, worstAt: 1, over: 2, of: 4}
	if s != want {
		t.Fatalf("bySecond = %+v, want %+v", s, want)
	}
	if !slices.Equal(lat, before) {
		t.Fatal("bySecond modified its input")
	}
}
