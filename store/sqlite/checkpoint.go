package sqlite

import (
	"context"
	"database/sql"
	"time"
)

// WAL checkpoints run off the writer. SQLite's automatic checkpoint runs
// inside the commit that crosses its threshold, so the writer (every room
// commit and every ledger transaction) stalls while pages are copied back
// into the database file; under load that stall is the latency tail. The
// writer connection turns the automatic checkpoint off, and a connection of
// its own checkpoints in the background: PASSIVE (it never blocks the
// writer) every checkpointEvery, and, should the log still grow past
// walRestartFrames, a RESTART that waits for the writer once so the log
// starts over.
const (
	checkpointEvery  = 250 * time.Millisecond
	walRestartFrames = 1 << 16 // 256 MiB of 4 KiB pages
)

// checkpointer is the background checkpoint loop and its connection.
type checkpointer struct {
	conn *sql.DB
	stop context.CancelFunc
	done chan struct{}
}

func startCheckpointer(conn *sql.DB) *checkpointer {
	ctx, stop := context.WithCancel(context.Background())
	c := &checkpointer{conn: conn, stop: stop, done: make(chan struct{})}
	go c.run(ctx)
	return c
}

func (c *checkpointer) run(ctx context.Context) {
	defer close(c.done)
	t := time.NewTicker(checkpointEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		frames, err := c.checkpoint(ctx, "PASSIVE")
		if err == nil && frames > walRestartFrames {
			_, _ = c.checkpoint(ctx, "RESTART")
		}
		// An error (a busy database, a closing one) is retried next tick.
	}
}

// checkpoint runs one checkpoint and returns the frames in the log.
func (c *checkpointer) checkpoint(ctx context.Context, mode string) (int64, error) {
	var busy, frames, done int64
	err := c.conn.QueryRowContext(ctx, "PRAGMA wal_checkpoint("+mode+")").Scan(&busy, &frames, &done)
	return frames, err
}

// close stops the loop and closes its connection.
func (c *checkpointer) close() error {
	c.stop()
	<-c.done
	return c.conn.Close()
}
