package sqlite

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"time"
)

// WAL checkpoints run off the writer. SQLite's automatic checkpoint runs
// inside the commit that crosses its threshold, so the writer (every room
// commit and every ledger transaction) stalls while pages are copied back
// into the database file; under load that stall is the latency tail. The
// writer connection turns the automatic checkpoint off, and a connection of
// its own checkpoints in the background: PASSIVE (it never blocks the
// writer) every checkpointEvery.
//
// A PASSIVE checkpoint alone never lets the log start over under steady
// commits: a newer frame is always there by the time it ends. So once the
// log passes restartFrames, PASSIVE passes catch up with the writer and a
// RESTART runs in the writer's turn, between two of its transactions: it
// copies what the commits since the last pass added, syncs the database file
// and the log starts over (or, should a reader still be on the log, at the
// next commit). It waits for no reader: with busy_timeout 0 a reader on the
// log ends it at once, and the next tick tries again. The writer waits for
// it as for one more commit: up to 83 ms under a storm of 5,000 gifts/s, every
// 2-3 s. Before, the RESTART ran on a connection of its own and held the
// writer lock while its busy handler waited for readers, 34-221 ms; under
// the same storm it failed to start the log over tick after tick, stalling
// the writer each time while the log grew past 600 MB.
const (
	checkpointEvery  = 250 * time.Millisecond
	walRestartFrames = 1 << 16 // 256 MiB of 4 KiB pages
	catchUpFrames    = 256     // what a RESTART may be left to copy in the writer's turn
	catchUpPasses    = 4
)

// checkpointer is the background checkpoint loop and its connection.
type checkpointer struct {
	conn  *sql.DB // PASSIVE checkpoints
	write *sql.DB // the writer: RESTART runs in its turn
	busy  string  // the writer's busy timeout in ms, restored after a RESTART
	// restartFrames is the log length past which a RESTART runs.
	restartFrames int64
	stop          context.CancelFunc
	done          chan struct{}
}

func startCheckpointer(conn, write *sql.DB, busy string, restartFrames int64) *checkpointer {
	ctx, stop := context.WithCancel(context.Background())
	c := &checkpointer{conn: conn, write: write, busy: busy, restartFrames: restartFrames, stop: stop, done: make(chan struct{})}
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
		logged, copied, err := c.passive(ctx)
		if err == nil && logged > c.restartFrames {
			// Catch up off the writer first: each pass copies what was
			// committed during the one before, so the RESTART in the
			// writer's turn has a few frames left to copy.
			for range catchUpPasses {
				if err != nil || logged-copied <= catchUpFrames {
					break
				}
				logged, copied, err = c.passive(ctx)
			}
			if err == nil {
				_ = c.restart(ctx)
			}
		}
		// An error (a busy database, a closing one) is retried next tick.
	}
}

// passive runs a PASSIVE checkpoint and returns the frames in the log and
// the frames copied back into the database.
func (c *checkpointer) passive(ctx context.Context) (logged, copied int64, err error) {
	err = c.conn.QueryRowContext(ctx, "PRAGMA wal_checkpoint(PASSIVE)").Scan(new(int64), &logged, &copied)
	return logged, copied, err
}

// restart runs a RESTART checkpoint on the writer's connection, between
// two of its transactions, without waiting for readers.
func (c *checkpointer) restart(ctx context.Context) error {
	conn, err := c.write.Conn(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close() }()
	if _, err := conn.ExecContext(ctx, "PRAGMA busy_timeout = 0"); err != nil {
		return err
	}
	err = conn.QueryRowContext(ctx, "PRAGMA wal_checkpoint(RESTART)").Scan(new(int64), new(int64), new(int64))
	if _, rerr := conn.ExecContext(context.WithoutCancel(ctx), "PRAGMA busy_timeout = "+c.busy); rerr != nil {
		// A writer without its busy timeout would fail where it should
		// wait: the pool drops this connection and opens a new one.
		_ = conn.Raw(func(any) error { return driver.ErrBadConn })
		return rerr
	}
	return err
}

// close stops the loop and closes its connection.
func (c *checkpointer) close() error {
	c.stop()
	<-c.done
	return c.conn.Close()
}
