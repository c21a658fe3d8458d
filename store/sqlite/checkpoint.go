package sqlite

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"os"
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
// The interval sets how often a page that the commits keep writing (a
// room's index leaves, the rooms table, the wallet's accounts) is copied
// back: a pass copies each page once, at its newest frame. Under 1,000 rooms
// × 5 gifts/s, passes every second instead of every 250 ms wrote 16% fewer
// bytes to the disk (3.69 GB against 4.38 GB over the run) and took the
// p99 from 45-81 ms to 36-46 ms in alternated runs; passes every 2 s measured
// the same as every second. The price is a longer log between passes.
//
// A PASSIVE checkpoint alone never lets the log start over under steady
// commits: a newer frame is always there by the time it ends. So once the
// log passes restartFrames, PASSIVE passes catch up with the writer (see
// catchUp) and a RESTART runs in the writer's turn, between two of its
// transactions: it copies what the commits since the last pass added, syncs
// the database file and the log starts over (or, should a reader still be
// on the log, at the next commit). It waits for no reader: with
// busy_timeout 0 a reader on the log ends it at once, and the next tick
// tries again. So the log runs to restartFrames plus up to a tick of
// commits, more while readers hold it: 80,000-134,000 frames (310-520 MB)
// at the RESTARTs of that storm. The writer waits for the RESTART as for one
// more commit, 1-17 ms under that storm, since each pass syncs what it
// copied (see passive) and the catch-up ends on a short pass; 10-60 ms
// before, when the RESTART's sync wrote back every page copied since the
// log last started over. Before that, the RESTART ran on a connection of
// its own and held the writer lock while its busy handler waited for
// readers, 34-221 ms; under the same storm it failed to start the log over
// tick after tick, stalling the writer each time while the log grew past
// 600 MB.
const (
	checkpointEvery  = time.Second
	walRestartFrames = 1 << 16 // 256 MiB of 4 KiB pages
	catchUpFrames    = 256     // a pass that found no more than this ends the catch-up
	catchUpPasses    = 8
	heldBackFrames   = 4 * catchUpFrames // what a RESTART may copy past a reader that held a pass back
	closeWait        = 5 * time.Second   // for connections still in use at Close
)

// Metrics are the checkpointer's instruments; a nil func is not called.
// Under a writer near its ceiling, a commit's latency tail follows the
// checkpoints: a pass's sync of the database file delays the commits'
// sync of the log, and a RESTART holds the writer for its length. The
// metrics let an operator see that beside the commit times.
type Metrics struct {
	// Checkpoint hears each checkpoint the loop runs: its mode
	// (CheckpointPassive or CheckpointRestart), how long it took (a pass:
	// its copy and its sync of the database file; a RESTART: how long it
	// held the writer) and its error (a RESTART that a reader kept from
	// starting the log over fails at once and is tried again later).
	Checkpoint func(mode string, took time.Duration, err error)
	// LogFrames hears the log's length in frames, as each pass found it.
	LogFrames func(frames int64)
}

// The modes of Metrics.Checkpoint.
const (
	CheckpointPassive = "passive"
	CheckpointRestart = "restart"
)

// checkpointer is the background checkpoint loop and its connection.
type checkpointer struct {
	conn  *sql.DB // PASSIVE checkpoints
	write *sql.DB // the writer: RESTART runs in its turn
	busy  string  // the writer's busy timeout in ms, restored after a RESTART
	// file is the database file, synced after each pass that copied frames
	// (see passive). Closing a descriptor of a file drops every POSIX lock
	// the process holds on it, SQLite's included, so it is closed only
	// once every connection is (closeFile).
	file *os.File
	// synced is the copy mark the last sync of file covered.
	synced int64
	// restartFrames is the log length past which a RESTART runs.
	restartFrames int64
	metrics       Metrics
	stop          context.CancelFunc
	done          chan struct{}
}

func startCheckpointer(conn, write *sql.DB, file *os.File, busy string, restartFrames int64, m Metrics) *checkpointer {
	ctx, stop := context.WithCancel(context.Background())
	c := &checkpointer{conn: conn, write: write, file: file, busy: busy, restartFrames: restartFrames, metrics: m, stop: stop, done: make(chan struct{})}
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
			if err = catchUp(ctx, c.passive, copied); err == nil {
				_ = c.restart(ctx)
			}
		}
		// An error (a busy database, a closing one) is retried next tick.
	}
}

// catchUp runs PASSIVE passes off the writer until one of them copied all
// it found and found at most catchUpFrames frames, or catchUpPasses have
// run: what is left for the RESTART in the writer's turn is then what the
// writer committed during that short last pass. A pass reports the log's
// length when it began and its copy mark when it ended, so what it found is
// its log length less the copy mark of the pass before; copied is the mark
// of the pass that saw the log past its bound.
//
// The frames a pass finds are those committed while the one before ran, and
// a pass lasts about as long as its frames take to reach the disk (about
// 17 µs per page here, for the database file's sync), so under a steady
// writer each pass finds fewer than the last and the passes converge: two
// to six passes under a storm of 5,000 gifts/s. A reader's snapshot stops a
// pass at its mark, and a pass that got no further than the one before
// ends the catch-up. The ledger's balance reads do that often under a gift
// storm, a few hundred frames short and gone a moment later, so with at
// most heldBackFrames left the RESTART runs (and fails at once, should the
// reader still be there); with more left, catchUp answers errHeldBack and
// the RESTART waits for the next tick instead of copying, in the writer's
// turn, what the reader held back. Past catchUpPasses the RESTART runs all
// the same: the log's bound matters more than one stall.
//
// The catch-up this replaced compared a pass's log length with its own copy
// mark, which a pass always reaches, so it never ran a second pass and left
// the RESTART hundreds to thousands of frames.
func catchUp(ctx context.Context, pass func(context.Context) (logged, copied int64, err error), copied int64) error {
	for range catchUpPasses {
		logged, next, err := pass(ctx)
		if err != nil {
			return err
		}
		if next == copied && next < logged {
			if logged-next <= heldBackFrames {
				return nil // a RESTART copies it, or fails at once should the reader stay
			}
			return errHeldBack
		}
		found := logged - copied // negative once the log has started over
		copied = next
		if found <= catchUpFrames && next == logged {
			return nil
		}
	}
	return nil
}

// errHeldBack is catchUp's answer when a reader's snapshot keeps a pass
// from copying further.
var errHeldBack = errors.New("a reader holds the checkpoint back")

// passive runs a PASSIVE checkpoint, syncs the database file if it copied
// frames, and returns the frames in the log and the frames copied back into
// the database.
//
// SQLite syncs the database file only at the end of a pass that copied the
// whole log; under steady commits a newer frame is always there by then,
// so the passes copy without a sync and the pages stay in the kernel's cache
// until the RESTART's sync, which then writes back every page copied since
// the log last started over, in the writer's turn: 10-60 ms under a storm of
// 5,000 gifts/s, about 17 µs per page on this machine's disk. Synced here,
// after each pass, they go to the disk while the writer goes on, and the
// RESTART's sync writes only what it copied itself.
func (c *checkpointer) passive(ctx context.Context) (logged, copied int64, err error) {
	defer c.observe(CheckpointPassive, time.Now(), &err)
	if err = c.conn.QueryRowContext(ctx, "PRAGMA wal_checkpoint(PASSIVE)").Scan(new(int64), &logged, &copied); err != nil {
		return logged, copied, err
	}
	if c.metrics.LogFrames != nil {
		c.metrics.LogFrames(logged)
	}
	if copied > 0 && copied != c.synced { // -1: a pass that could not run
		if err = c.file.Sync(); err != nil {
			return logged, copied, err
		}
		c.synced = copied
	}
	return logged, copied, nil
}

// restart runs a RESTART checkpoint on the writer's connection, between
// two of its transactions, without waiting for readers.
func (c *checkpointer) restart(ctx context.Context) (err error) {
	conn, err := c.write.Conn(ctx)
	if err != nil {
		c.observe(CheckpointRestart, time.Now(), &err)
		return err
	}
	// The writer is this checkpoint's from here: what is observed is how
	// long it held the writer, not how long it waited for its turn.
	defer c.observe(CheckpointRestart, time.Now(), &err)
	defer func() { _ = conn.Close() }()
	if _, err := conn.ExecContext(ctx, "PRAGMA busy_timeout = 0"); err != nil {
		return err
	}
	var busy int64 // 1: a reader was on the log, which did not start over
	err = conn.QueryRowContext(ctx, "PRAGMA wal_checkpoint(RESTART)").Scan(&busy, new(int64), new(int64))
	if _, rerr := conn.ExecContext(context.WithoutCancel(ctx), "PRAGMA busy_timeout = "+c.busy); rerr != nil {
		// A writer without its busy timeout would fail where it should
		// wait: the pool drops this connection and opens a new one.
		_ = conn.Raw(func(any) error { return driver.ErrBadConn })
		return rerr
	}
	if err == nil && busy != 0 {
		err = errLogInUse
	}
	return err
}

// errLogInUse is a RESTART's answer when a reader on the log kept it from
// starting the log over.
var errLogInUse = errors.New("wal restart: a reader is on the log; it did not start over")

// observe tells the metrics of a checkpoint that began at start and ended
// with *err.
func (c *checkpointer) observe(mode string, start time.Time, err *error) {
	if c.metrics.Checkpoint != nil {
		c.metrics.Checkpoint(mode, time.Since(start), *err)
	}
}

// close stops the loop and closes its connection; closeFile, once every
// other connection is closed, closes the file.
func (c *checkpointer) close() error {
	c.stop()
	<-c.done
	return c.conn.Close()
}

// closeFile closes the file once none of pools has a connection open. A
// closed pool closes a connection still in use when it is handed back, so
// Close waits for those, up to closeWait; past it the file stays open (the
// runtime closes it with the garbage it becomes), since closing it under a
// connection would drop that connection's lock on the file. In-process
// connections do not depend on those locks (SQLite tracks its own per
// file); another process opening the file does.
func (c *checkpointer) closeFile(pools ...*sql.DB) error {
	deadline := time.Now().Add(closeWait)
	for {
		open := 0
		for _, p := range pools {
			open += p.Stats().OpenConnections
		}
		if open == 0 {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("close sqlite: %d connections still in use after %s; the database file stays open", open, closeWait)
		}
		time.Sleep(time.Millisecond)
	}
	if err := c.file.Close(); err != nil && !errors.Is(err, os.ErrClosed) {
		return err
	}
	return nil
}
