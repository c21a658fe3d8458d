package sqlite

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"hyapp/room-service/store"
)

// TestCatchUpEndsOnAShortPass: the catch-up runs passes until one found no
// more than catchUpFrames frames to copy, each pass's find being its log
// length less the copy mark of the pass before, and gives up after
// catchUpPasses when the writer outruns it.
func TestCatchUpEndsOnAShortPass(t *testing.T) {
	// passes replays a log that grows by the frames in found, each pass
	// copying all it found.
	passes := func(found ...int64) (func(context.Context) (int64, int64, error), *int) {
		var n int
		var log int64 = 70_000
		return func(context.Context) (int64, int64, error) {
			if n == len(found) {
				t.Fatalf("pass %d: the catch-up should have ended", n+1)
			}
			log += found[n]
			n++
			return log, log, nil
		}, &n
	}
	t.Run("held back by a reader", func(t *testing.T) {
		// A reader's snapshot stops each pass at the same mark: the pass
		// that reached it and the one that got no further are all.
		calls := 0
		pass := func(context.Context) (int64, int64, error) { calls++; return 80_000, 71_000, nil }
		if err := catchUp(t.Context(), pass, 70_000); err != nil || calls != 2 {
			t.Fatalf("%d passes (%v), want 2", calls, err)
		}
	})
	for _, tc := range []struct {
		name  string
		found []int64
		want  int
	}{
		{"converging", []int64{9000, 3800, 1600, 700, 256}, 5},
		{"already short", []int64{40}, 1},
		{"nothing new", []int64{0}, 1},
		{"outrun by the writer", []int64{9000, 9000, 9000, 9000, 9000, 9000, 9000, 9000}, catchUpPasses},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pass, n := passes(tc.found...)
			if err := catchUp(t.Context(), pass, 70_000); err != nil {
				t.Fatal(err)
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
// file and records the copy mark it covered; the file is closed only with
// the database, after its connections.
func TestAPassSyncsWhatItCopied(t *testing.T) {
	db, path := openUncopied(t, Options{}, 20)
	logged, copied, err := db.ckpt.passive(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if copied < 20 || copied != logged {
		t.Fatalf("the pass copied %d of %d frames, want all of at least 20", copied, logged)
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

func mustStat(t *testing.T, path string) os.FileInfo {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi
}
