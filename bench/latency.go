package bench

import (
	"context"
	"fmt"
	"time"

	"hyapp/room-service/room"
	"hyapp/room-service/wallet"
)

// withLatency returns w behind a delay: every method waits d before it
// calls w, as a remote wallet whose every call takes d would: a simulation
// the gift scenarios use to see how the gift path copes with a slow wallet. A ctx that ends
// during the wait returns room.ErrUnavailable (wrapping the context's
// error) and w is not called. A d of zero or less returns w itself.
func withLatency(w wallet.Wallet, d time.Duration) wallet.Wallet {
	if d <= 0 {
		return w
	}
	return &latency{w: w, d: d}
}

type latency struct {
	w wallet.Wallet
	d time.Duration
}

func (l *latency) wait(ctx context.Context) error {
	timer := time.NewTimer(l.d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return fmt.Errorf("wallet latency: %w (%w)", room.ErrUnavailable, ctx.Err())
	case <-timer.C:
		return nil
	}
}

func (l *latency) Charge(ctx context.Context, charges []wallet.Charge) ([]wallet.Result, error) {
	if err := l.wait(ctx); err != nil {
		return nil, err
	}
	return l.w.Charge(ctx, charges)
}

func (l *latency) Settle(ctx context.Context, keys []string) error {
	if err := l.wait(ctx); err != nil {
		return err
	}
	return l.w.Settle(ctx, keys)
}

func (l *latency) Refund(ctx context.Context, key string) (wallet.Receipt, error) {
	if err := l.wait(ctx); err != nil {
		return wallet.Receipt{}, err
	}
	return l.w.Refund(ctx, key)
}

func (l *latency) Receipt(ctx context.Context, key string) (wallet.Receipt, bool, error) {
	if err := l.wait(ctx); err != nil {
		return wallet.Receipt{}, false, err
	}
	return l.w.Receipt(ctx, key)
}

func (l *latency) Pending(ctx context.Context, before time.Time, after wallet.Cursor, limit int) ([]wallet.Receipt, error) {
	if err := l.wait(ctx); err != nil {
		return nil, err
	}
	return l.w.Pending(ctx, before, after, limit)
}

func (l *latency) Credit(ctx context.Context, userID, amount int64, key string) (int64, bool, error) {
	if err := l.wait(ctx); err != nil {
		return 0, false, err
	}
	return l.w.Credit(ctx, userID, amount, key)
}

func (l *latency) Balance(ctx context.Context, userID int64) (int64, error) {
	if err := l.wait(ctx); err != nil {
		return 0, err
	}
	return l.w.Balance(ctx, userID)
}
