package sqlite

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"hyapp/room-service/internal/poll"
	"hyapp/room-service/store"
)

// TestCatchUpEndsOnAShortPass: the catch-up runs passes until one copied
// all it found and found no more than catchUpFrames frames, each pass's
// find being its log length less the copy mark of the pass before; it
// ends when a reader keeps a pass where the one before ended, with
// errHeldBack if more than heldBackFrames are left, and gives up after
// catchUpPasses when the writer outruns it.
func TestCatchUpEndsOnAShortPass(t *testing.T) {
	type result struct{ logged, copied int64 }
	// replay answers the passes in order and fails a pass past the last.
	replay := func(t *testing.T, passes ...result) (func(context.Context) (int64, int64, error), *int) {
		var n int
		return func(context.Context) (int64, int64, error) {
			if n == len(passes) {
				t.Fatalf("pass %d: the catch-up should have ended", n+1)
			}
			n++
			return passes[n-1].logged, passes[n-1].copied, nil
		}, &n
	}
	// grows is a log that grows by each of found, each pass copying it all.
	grows := func(found ...int64) []result {
		log := int64(70_000)
		var out []result
		for _, f := range found {
			log += f
			out = append(out, result{log, log})
		}
		return out
	}
	for _, tc := range []struct {
		name   string
		passes []result
		want   int
		err    error
	}{
		{"converging", grows(9000, 3800, 1600, 700, 256), 5, nil},
		{"already short", grows(40), 1, nil},
		{"nothing new", grows(0), 1, nil},
		{"outrun by the writer", grows(9000, 9000, 9000, 9000, 9000, 9000, 9000, 9000), catchUpPasses, nil},
		{"the log started over", []result{{120, 120}}, 1, nil},
		// A short find the pass could not copy whole is not caught up.
		{"a reader for a while", []result{{80_000, 75_000}, {80_100, 80_050}, {80_150, 80_150}}, 3, nil},
		// The first pass reaches the reader's mark, the second gets no further.
		{"held back by a reader", []result{{80_000, 71_000}, {80_000, 71_000}}, 2, errHeldBack},
		{"held back a few frames short", []result{{80_000, 79_700}, {80_100, 79_700}}, 2, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pass, n := replay(t, tc.passes...)
			if err := catchUp(t.Context(), pass, 70_000); !errors.Is(err, tc.err) {
				t.Fatalf("catchUp = %v, want %v", err, tc.err)
			}
			if *n != tc.want {
				t.Fatalf("%d passes, want %d", *n, tc.want)
			}
		})
	}
	t.Run("an error ends it", func(t *testing.T) {
		busy := errors.New("database is locked")
		calls := 0
		err := catchUp(t.Context(), func(context.Context) (int64, int64, error) { calls++; return 0, 0, busy }, 70_000)
		if !errors.Is(err, busy) || calls != 1 {
			t.Fatalf("catchUp = %v after %d passes, want the pass's error after one", err, calls)
		}
	})
}

// TestAPassSyncsWhatItCopied: a pass that copied frames syncs the database
// file and records the copy mark it covered, and its metrics hear it; the
// file is closed only with the database, after its connections.
func TestAPassSyncsWhatItCopied(t *testing.T) {
	var heard checkpointsHeard
	db, path := openUncopied(t, Options{Metrics: heard.metrics()}, 20)
	heard.reset()
	logged, copied, err := db.ckpt.passive(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if copied < 20 || copied != logged {
		t.Fatalf("the pass copied %d of %d frames, want all of at least 20", copied, logged)
	}
	if want := []string{"passive <nil>"}; !slices.Equal(heard.modes, want) || !slices.Equal(heard.frames, []int64{logged}) || heard.took[0] <= 0 {
		t.Fatalf("the metrics heard %v in %v with log lengths %v, want %v with %d frames", heard.modes, heard.took, heard.frames, want, logged)
	}
	if db.ckpt.synced != copied {
		t.Fatalf("the last sync covered copy mark %d, want %d", db.ckpt.synced, copied)
	}
	if fi, err := db.ckpt.file.Stat(); err != nil || !os.SameFile(fi, mustStat(t, path)) {
		t.Fatalf("the synced file is not the database file (%v)", err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if err := db.ckpt.file.Sync(); !errors.Is(err, os.ErrClosed) {
		t.Fatalf("after Close the file answers %v, want it closed", err)
	}
}

// checkpointsHeard records what a checkpointer's Metrics heard. The tests
// that use it stop the background loop first: one goroutine calls them.
type checkpointsHeard struct {
	modes  []string // mode and error
	took   []time.Duration
	frames []int64
}

// reset forgets what was heard: openUncopied stops the background passes,
// but one may have run at open before it did.
func (h *checkpointsHeard) reset() { *h = checkpointsHeard{} }

func (h *checkpointsHeard) metrics() Metrics {
	return Metrics{
		Checkpoint: func(mode string, took time.Duration, err error) {
			h.modes = append(h.modes, fmt.Sprintf("%s %v", mode, err))
			h.took = append(h.took, took)
		},
		LogFrames: func(n int64) { h.frames = append(h.frames, n) },
	}
}

// openUncopied opens a database without its background checkpoints and
// commits rows of about a page each, which nothing has copied back.
func openUncopied(t *testing.T, opts Options, rows int) (*DB, string) {
	t.Helper()
	db, path := openTemp(t, opts)
	db.ckpt.stop()
	<-db.ckpt.done
	big := strings.Repeat("x", 4000)
	for i := range rows {
		if err := db.SaveRoomMeta(t.Context(), store.RoomMeta{RoomID: fmt.Sprintf("r%02d", i), OwnerUserID: 1, SeatCount: 8, Mode: big}); err != nil {
			t.Fatal(err)
		}
	}
	return db, path
}

// TestCloseKeepsTheFileUnderAConnectionInUse: a connection still in use at
// Close keeps the checkpointer's descriptor open until it is handed back,
// since closing the descriptor would drop its lock on the file.
func TestCloseKeepsTheFileUnderAConnectionInUse(t *testing.T) {
	db, _ := openTemp(t, Options{})
	conn, err := db.read.Conn(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	closed := make(chan error, 1)
	go func() { closed <- db.Close() }()
	// Once the pools are closed, Close waits on the connection in use, and
	// the file stays open.
	poll.Until(t, 2*time.Second, "the read pool closed", func() error {
		if err := db.read.PingContext(t.Context()); err == nil {
			return errors.New("the read pool still answers")
		}
		return nil
	})
	select {
	case err := <-closed:
		t.Fatalf("Close returned (%v) with a connection in use", err)
	default:
	}
	if err := db.ckpt.file.Sync(); err != nil {
		t.Fatalf("the file answers %v while a connection is in use, want it open", err)
	}
	if err := conn.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-closed; err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := db.ckpt.file.Sync(); !errors.Is(err, os.ErrClosed) {
		t.Fatalf("after Close the file answers %v, want it closed", err)
	}
}

func mustStat(t *testing.T, path string) os.FileInfo {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi
}
