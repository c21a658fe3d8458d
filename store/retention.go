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

// Retention keeps the command log and the outbox from growing without end:
// every Interval it deletes, in batches of Batch rows, the command log rows
// that no recovery needs (KeepVersions below the room's snapshot and older
// than KeepCommandsFor) and the outbox rows published more than
// KeepPublishedFor ago. Small batches keep every delete transaction short.
type Retention struct {
	// Repo is the storage retention prunes.
	Repo             Pruner
	Interval         time.Duration
	Batch            int
	KeepVersions     int64
	KeepCommandsFor  time.Duration
	KeepPublishedFor time.Duration
	Log              *slog.Logger
	Now              func() time.Time
}

// Run prunes until ctx ends. Errors are logged and retried next interval.
func (r *Retention) Run(ctx context.Context) {
	t := time.NewTicker(r.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			commands, outbox, err := r.Once(ctx)
			switch {
			case err != nil && ctx.Err() == nil:
				r.Log.Warn("retention", "err", err)
			case commands+outbox > 0:
				r.Log.Info("retention pruned", "commands", commands, "outbox", outbox)
			}
		}
	}
}

// Once runs one full pass and returns the rows it deleted.
func (r *Retention) Once(ctx context.Context) (commands, outbox int, err error) {
	now := time.Now
	if r.Now != nil {
		now = r.Now
	}
	for {
		n, err := r.Repo.PruneCommands(ctx, r.KeepVersions, now().Add(-r.KeepCommandsFor), r.Batch)
		commands += n
		if err != nil {
			return commands, outbox, err
		}
		if n < r.Batch {
			break
		}
	}
	for {
		n, err := r.Repo.PruneOutbox(ctx, now().Add(-r.KeepPublishedFor), r.Batch)
		outbox += n
		if err != nil {
			return commands, outbox, err
		}
		if n < r.Batch {
			return commands, outbox, nil
		}
	}
}
