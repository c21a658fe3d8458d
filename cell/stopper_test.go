package cell_test

import (
	"context"
	"errors"
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
// until ready says the stops queued behind it, and those in it, are enough.
// A call holding a room of poison fails, as a database refuses a snapshot
// past its packet limit.
type stopCalls struct {
	store.Repository
	reg    atomic.Pointer[cell.Registry]
	ready  func(queued, inCall int) bool
	poison map[string]bool
	t      *testing.T
	mu     sync.Mutex
	calls  [][]string
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
	for deadline := time.Now().Add(30 * time.Second); first && !s.ready(cell.StopsQueued(s.reg.Load()), len(stops)); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			s.t.Errorf("%d stops queued behind the first's %d after 30 s, not enough", cell.StopsQueued(s.reg.Load()), len(stops))
			break
		}
	}
	for _, st := range stops {
		if s.poison[st.RoomID] {
			return errors.Join(store.ErrUnavailable, errors.New("packet too large"))
		}
	}
	return s.Repository.StopRooms(ctx, stops)
}

// stopTogether creates rooms prefix0 … in reg, each with a join, closes
// reg, so that they all stop at once, and returns their heads.
func stopTogether(t *testing.T, repo *stopCalls, reg *cell.Registry, prefix string, rooms int) map[string]int64 {
	t.Helper()
	repo.reg.Store(reg)
	heads := map[string]int64{}
	for r := range rooms {
		id := fmt.Sprint(prefix, r)
		createRoom(t, reg, id)
		heads[id] = mustSubmit(t, reg, env(id, "j", 9, &room.JoinRoom{})).RoomVersion
	}
	if err := reg.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	return heads
}

// TestShutdownStoresManyRoomsInFewTransactions: the rooms of a stopping
// node store their final snapshots and releases many to a transaction,
// and each room's is stored once, at its head.
func TestShutdownStoresManyRoomsInFewTransactions(t *testing.T) {
	stores(t, func(t *testing.T, open func(testing.TB) store.Repository) {
		const rooms, perTxn = 150, 32
		// The queue holds perTxn: once full, the next transaction carries that many.
		repo := &stopCalls{Repository: open(t), ready: func(queued, _ int) bool { return queued == perTxn }, t: t}
		reg := newRegistry(t, repo, cell.Config{SnapshotEvery: 1000, CommitMaxRooms: perTxn}, nil)
		prefix := fmt.Sprintf("stop-%d-", time.Now().UnixNano())
		heads := stopTogether(t, repo, reg, prefix, rooms)
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

// TestARoomThatCannotStopSpoilsNoOtherRoomsStop: when the transaction of
// many rooms' stops fails on one room, the others are written alone, so
// only that room's next owner sees a failover.
func TestARoomThatCannotStopSpoilsNoOtherRoomsStop(t *testing.T) {
	const rooms = 60
	prefix := fmt.Sprintf("poison-%d-", time.Now().UnixNano())
	// Two: should the first transaction hold one alone, the other is in the next.
	poison := map[string]bool{prefix + "0": true, prefix + "1": true}
	// Every room's stop in the first transaction or queued for the next.
	repo := &stopCalls{Repository: openRepo(t), ready: func(queued, inCall int) bool { return queued+inCall == rooms }, poison: poison, t: t}
	reg := newRegistry(t, repo, cell.Config{SnapshotEvery: 1000}, nil)
	heads := stopTogether(t, repo, reg, prefix, rooms)
	failed := false
	for _, call := range repo.calls {
		for _, id := range call {
			failed = failed || len(call) > 1 && poison[id]
		}
	}
	if !failed {
		t.Fatalf("no transaction of several stops held a room that cannot stop: %v", repo.calls)
	}
	infos, err := repo.ListRooms(context.Background(), prefix, 2*rooms)
	if err != nil {
		t.Fatal(err)
	}
	owned := map[string]string{}
	for _, info := range infos {
		owned[info.Meta.RoomID] = info.OwnerNode
	}
	for id, head := range heads {
		snap, found, err := repo.GetLatestSnapshot(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if stopped := found && snap.RoomVersion == head && owned[id] == ""; stopped == poison[id] {
			t.Fatalf("room %s: final snapshot found=%v at %d (head %d), owner %q; want it stopped cleanly unless it cannot stop",
				id, found, snap.RoomVersion, head, owned[id])
		}
	}
}
