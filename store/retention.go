package store

import (
	"context"
	"log/slog"
	"time"
)

// Pruner is what Retention needs of the storage: the two prunes of the
// Repository, with the same contract.
type Pruner interface {
	// PruneCommands deletes up to limit command log rows no recovery
	// needs and returns how many it deleted (see Repository).
	PruneCommands(ctx context.Context, keepVersions int64, before time.Time, limit int) (int, error)
	// PruneOutbox deletes up to limit outbox rows published before
	// before and returns how many it deleted (see Repository).
	PruneOutbox(ctx context.Context, before time.Time, limit int) (int, error)
}

// GiftRecordPruner deletes old gift records (the SQL stores do).
type GiftRecordPruner interface {
	// PruneGiftRecords deletes up to limit gift records sent before before
	// and returns how many it deleted.
	PruneGiftRecords(ctx context.Context, before time.Time, limit int) (int, error)
}

// Retention keeps the command log, the outbox and the gift records from
// growing without end: every Interval it deletes, in batches of Batch rows,
// the command log rows that no recovery needs (KeepVersions below the
// room's snapshot and older than KeepCommandsFor), the outbox rows
// published more than KeepPublishedFor ago and, when GiftRecords is set,
// the gift records older than KeepGiftRecordsFor. Small batches keep every
// delete transaction short.
type Retention struct {
	// Repo is the storage retention prunes.
	Repo             Pruner
	Interval         time.Duration
	Batch            int
	KeepVersions     int64
	KeepCommandsFor  time.Duration
	KeepPublishedFor time.Duration
	// GiftRecords, when set, is pruned of records older than
	// KeepGiftRecordsFor (the history ListGiftRecords shows).
	GiftRecords        GiftRecordPruner
	KeepGiftRecordsFor time.Duration
	Log                *slog.Logger
	Now                func() time.Time
}

// Pruned counts the rows one pass deleted.
type Pruned struct{ Commands, Outbox, GiftRecords int }

// Run prunes until ctx ends. Errors are logged and retried next interval.
func (r *Retention) Run(ctx context.Context) {
	t := time.NewTicker(r.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			n, err := r.Once(ctx)
			switch {
			case err != nil && ctx.Err() == nil:
				r.Log.Warn("retention", "err", err)
			case n != Pruned{}:
				r.Log.Info("retention pruned", "commands", n.Commands, "outbox", n.Outbox, "gift_records", n.GiftRecords)
			}
		}
	}
}

// Once runs one full pass and returns the rows it deleted.
func (r *Retention) Once(ctx context.Context) (Pruned, error) {
	now := time.Now
	if r.Now != nil {
		now = r.Now
	}
	var n Pruned
	err := r.drain(&n.Commands, func() (int, error) {
		return r.Repo.PruneCommands(ctx, r.KeepVersions, now().Add(-r.KeepCommandsFor), r.Batch)
	})
	if err == nil {
		err = r.drain(&n.Outbox, func() (int, error) { return r.Repo.PruneOutbox(ctx, now().Add(-r.KeepPublishedFor), r.Batch) })
	}
	if err == nil && r.GiftRecords != nil {
		err = r.drain(&n.GiftRecords, func() (int, error) {
			return r.GiftRecords.PruneGiftRecords(ctx, now().Add(-r.KeepGiftRecordsFor), r.Batch)
		})
	}
	return n, err
}

// drain runs prune until a batch comes back short, adding what it deleted to total.
func (r *Retention) drain(total *int, prune func() (int, error)) error {
	for {
		n, err := prune()
		*total += n
		if err != nil || n < r.Batch {
			return err
		}
	}
}
