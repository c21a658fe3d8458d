package cell_test

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"hyapp/room-service/cell"
	"hyapp/room-service/lease"
	"hyapp/room-service/store"
)

// downRepo is a repository whose database went away: every claim fails.
type downRepo struct {
	store.Repository
	down atomic.Bool
}

func (r *downRepo) ClaimRoom(ctx context.Context, roomID, nodeID string) (store.Claim, error) {
	if r.down.Load() {
		return store.Claim{}, errors.New("dial tcp 127.0.0.1:3306: connect: connection refused")
	}
	return r.Repository.ClaimRoom(ctx, roomID, nodeID)
}

// TestAStorageOutageIsLoggedOnceASecond: while the database is away, every
// call for a room that is not loaded tries to load it and fails. 300 such
// calls write a line or two to the log, saying how many were held back,
// not a line each: an outage is when the log matters most.
func TestAStorageOutageIsLoggedOnceASecond(t *testing.T) {
	repo := &downRepo{Repository: openRepo(t)}
	lines := &messageCounter{}
	reg := cell.New(cell.Config{TimerScanEvery: -1}, repo, lease.NewLocal(), &recordSink{}, nil, slog.New(lines))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = reg.Close(ctx)
	})
	for _, id := range []string{"o1", "o2", "o3"} {
		createRoom(t, reg, id)
	}
	if err := reg.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	reg = cell.New(cell.Config{TimerScanEvery: -1}, repo, lease.NewLocal(), &recordSink{}, nil, slog.New(lines))
	repo.down.Store(true)
	start := time.Now()
	for i := range 300 {
		if _, err := reg.Snapshot(t.Context(), []string{"o1", "o2", "o3"}[i%3]); err == nil {
			t.Fatal("a room loaded without its database")
		}
	}
	if n, most := lines.count("recover room"), 1+int64(time.Since(start)/time.Second); n > most || n == 0 {
		t.Fatalf("300 failed loads in an outage logged %d lines; want one a second (%d)", n, most)
	}
}

// messageCounter is a slog.Handler that counts the records by message.
type messageCounter struct {
	mu sync.Mutex
	n  map[string]int64
}

func (h *messageCounter) Enabled(context.Context, slog.Level) bool { return true }

func (h *messageCounter) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.n == nil {
		h.n = map[string]int64{}
	}
	h.n[r.Message]++
	return nil
}

func (h *messageCounter) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *messageCounter) WithGroup(string) slog.Handler      { return h }

func (h *messageCounter) count(msg string) int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n[msg]
}
