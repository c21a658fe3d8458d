package cell_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"hyapp/room-service/cell"
	"hyapp/room-service/room"
	"hyapp/room-service/store"
)

// stopCalls records each StopRooms call's rooms; its first call waits
// until a transaction's worth of stops queued behind it.
type stopCalls struct {
	store.Repository
	reg   atomic.Pointer[cell.Registry]
	wait  int
	t     *testing.T
	mu    sync.Mutex
	calls [][]string
}

func (s *stopCalls) StopRooms(ctx context.Context, stops []store.RoomStop) error {
	s.mu.Lock()
	first := len(s.calls) == 0
	ids := make([]string, len(stops))
	for i, st := range stops {
		ids[i] = st.RoomID
	}
	s.calls = append(s.calls, ids)
	s.mu.Unlock()
	// Not poll.Until: this runs on the stopper's goroutine, not the test's.
	for deadline := time.Now().Add(30 * time.Second); first && cell.StopsQueued(s.reg.Load()) < s.wait; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			s.t.Errorf("%d stops queued behind the first after 30 s, want %d", cell.StopsQueued(s.reg.Load()), s.wait)
			break
		}
	}
	return s.Repository.StopRooms(ctx, stops)
}

// TestShutdownStoresManyRoomsInFewTransactions: the rooms of a stopping
// node store their final snapshots and releases many to a transaction,
// and each room's is stored once, at its head.
func TestShutdownStoresManyRoomsInFewTransactions(t *testing.T) {
	stores(t, func(t *testing.T, open func(testing.TB) store.Repository) {
		const rooms, perTxn = 150, 32
		repo := &stopCalls{Repository: open(t), wait: perTxn, t: t}
		reg := newRegistry(t, repo, cell.Config{SnapshotEvery: 1000, CommitMaxRooms: perTxn}, nil)
		repo.reg.Store(reg)
		heads := map[string]int64{}
		prefix := fmt.Sprintf("stop-%d-", time.Now().UnixNano())
		for r := range rooms {
			id := fmt.Sprint(prefix, r)
			createRoom(t, reg, id)
			heads[id] = mustSubmit(t, reg, env(id, "j", 9, &room.JoinRoom{})).RoomVersion
		}
		if err := reg.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		seen := map[string]int{}
		for _, call := range repo.calls {
			if len(call) > perTxn {
				t.Fatalf("a transaction of %d stops, past the bound of %d", len(call), perTxn)
			}
			for _, id := range call {
				seen[id]++
			}
		}
		if len(repo.calls) < 2 || len(repo.calls[1]) != perTxn {
			t.Fatalf("the transactions' sizes after the first's wait: %d calls, want the second to carry %d stops", len(repo.calls), perTxn)
		}
		infos, err := repo.ListRooms(context.Background(), prefix, 2*rooms)
		if err != nil {
			t.Fatal(err)
		}
		released := 0
		for _, info := range infos {
			if _, ok := heads[info.Meta.RoomID]; ok && info.OwnerNode == "" {
				released++
			}
		}
		if released != rooms {
			t.Fatalf("%d rooms released, want %d", released, rooms)
		}
		for id, head := range heads {
			if seen[id] != 1 {
				t.Fatalf("room %s stopped in %d transactions, want 1", id, seen[id])
			}
			snap, found, err := repo.GetLatestSnapshot(context.Background(), id)
			if err != nil || !found || snap.RoomVersion != head {
				t.Fatalf("room %s: final snapshot found=%v version=%d err=%v, want %d", id, found, snap.RoomVersion, err, head)
			}
		}
		t.Logf("%d rooms in %d transactions", rooms, len(repo.calls))
	})
}
