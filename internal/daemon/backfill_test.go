package daemon

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"hyapp/room-service/cell"
	"hyapp/room-service/store"
)

// flakyDirectory fails MissingDirectory fails times, then finds no room
// without a row.
type flakyDirectory struct {
	cell.DirectoryBackfill // nil: only MissingDirectory is called
	fails, calls           int
}

func (f *flakyDirectory) MissingDirectory(context.Context, string, int) ([]string, error) {
	if f.calls++; f.calls <= f.fails {
		return nil, store.ErrUnavailable
	}
	return nil, nil
}

// TestTheDirectoryBackfillOutlastsADatabaseAway: a backfill that fails
// starts over until it completes, instead of ending (it ran once, and a
// database away at start left rooms out of the directory until a restart).
func TestTheDirectoryBackfillOutlastsADatabaseAway(t *testing.T) {
	st := &flakyDirectory{fails: 3}
	backfillDirectory(t.Context(), st, slog.New(slog.DiscardHandler), time.Millisecond)
	if st.calls != 4 {
		t.Fatalf("MissingDirectory called %d times, want 4 (three failures, then done)", st.calls)
	}

	// It ends with its context, failing or not.
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	st = &flakyDirectory{fails: 1 << 30}
	backfillDirectory(ctx, st, slog.New(slog.DiscardHandler), time.Hour)
	if st.calls != 1 {
		t.Fatalf("MissingDirectory called %d times with the context over, want 1", st.calls)
	}
}
