package cell_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"hyapp/room-service/cell"
	"hyapp/room-service/internal/poll"
	"hyapp/room-service/internal/servicetest"
	"hyapp/room-service/lease/redislease"
	"hyapp/room-service/room"
	"hyapp/room-service/store"
)

// gatedRecovery holds the first recovery's read of a snapshot until
// release is closed, whatever its context says.
type gatedRecovery struct {
	store.Repository
	entered chan struct{}
	release chan struct{}
	once    sync.Once
}

func (g *gatedRecovery) GetLatestSnapshot(ctx context.Context, roomID string) (store.SnapshotRecord, bool, error) {
	first := false
	g.once.Do(func() { first = true })
	if first {
		close(g.entered)
		<-g.release
	}
	return g.Repository.GetLatestSnapshot(ctx, roomID)
}

// TestCloseWaitsForARoomThatIsLoading: a room whose load began before the
// registry closed is waited for. Its load ends (the caller is told the node
// is shutting down, so a router sends it to the room's next owner) and its
// lease is released before Close returns, instead of Close abandoning the
// load's storage calls and leaving the room's lease held in Redis until it
// expires.
func TestCloseWaitsForARoomThatIsLoading(t *testing.T) {
	addr := servicetest.RedisAddr(t)
	repo := openRepo(t)
	setup := newRegistry(t, repo, cell.Config{}, nil)
	createRoom(t, setup, "loading")
	if err := setup.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	keys := redislease.Keys{Prefix: "closeload:" + t.Name() + time.Now().Format("150405.000000") + ":"}
	gated := &gatedRecovery{Repository: repo, entered: make(chan struct{}), release: make(chan struct{})}
	release := sync.OnceFunc(func() { close(gated.release) })
	cfg := cell.DefaultConfig()
	cfg.NodeID, cfg.TimerScanEvery = "a", -1
	reg := cell.New(cfg, gated, redisLease(t, addr, "a", keys, 5*time.Second), &recordSink{}, nil, quiet)
	t.Cleanup(release) // before the lease's cleanup: a failed test must not leave the load held

	submitted := make(chan error, 1)
	go func() {
		_, err := reg.Submit(context.Background(), env("loading", "j", 10, &room.JoinRoom{}))
		submitted <- err
	}()
	<-gated.entered // the room's lease is taken, its state being read
	closed := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		closed <- reg.Close(ctx)
	}()
	poll.Until(t, 5*time.Second, "the registry to stop intake", func() error {
		if _, err := reg.Snapshot(context.Background(), "other"); !errors.Is(err, room.ErrShutdown) {
			return fmt.Errorf("a read of another room: %v, want shutting_down", err)
		}
		return nil
	})
	select {
	case err := <-closed:
		t.Errorf("Close returned (%v) while a room was still loading", err)
		closed <- err
	default:
	}
	release()
	if err := <-submitted; !errors.Is(err, room.ErrShutdown) {
		t.Errorf("the command whose room was loading: %v, want shutting_down", err)
	}
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	h, err := redisLease(t, addr, "b", keys, 5*time.Second).Acquire(context.Background(), "loading")
	if err != nil {
		t.Fatalf("another node cannot take the room after Close: %v", err)
	}
	_ = h.Release(context.Background())
}
