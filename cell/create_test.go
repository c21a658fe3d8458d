package cell_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"hyapp/room-service/cell"
	"hyapp/room-service/room"
	"hyapp/room-service/store"
)

// countingRepo counts the claims and commits the engine makes; blind hides
// the rooms of its set from GetRoomMeta, as if another node created them
// between the look and the commit.
type countingRepo struct {
	store.Repository
	claims, commits atomic.Int64
	mu              sync.Mutex
	blind           map[string]bool
}

func (r *countingRepo) ClaimRoom(ctx context.Context, roomID, nodeID string) (store.Claim, error) {
	r.claims.Add(1)
	return r.Repository.ClaimRoom(ctx, roomID, nodeID)
}

func (r *countingRepo) CommitBatches(ctx context.Context, batches []store.Batch) ([]error, error) {
	r.commits.Add(1)
	return r.Repository.CommitBatches(ctx, batches)
}

func (r *countingRepo) GetRoomMeta(ctx context.Context, roomID string) (store.RoomMeta, bool, error) {
	r.mu.Lock()
	blind := r.blind[roomID]
	r.mu.Unlock()
	if blind {
		return store.RoomMeta{}, false, nil
	}
	return r.Repository.GetRoomMeta(ctx, roomID)
}

// TestACreateIsOneSharedCommit: creating a room claims nothing and writes
// nothing before its CreateRoom commits; the batch that commits it inserts
// the room's row at owner epoch 1, so concurrent creates share commits. The
// created rooms recover like any other.
func TestACreateIsOneSharedCommit(t *testing.T) {
	stores(t, func(t *testing.T, open func(testing.TB) store.Repository) {
		repo := &countingRepo{Repository: open(t)}
		reg := newRegistry(t, repo, cell.Config{NodeID: "node-c"}, nil)
		const n = 64
		prefix := fmt.Sprintf("%s-", t.Name()[len("TestACreateIsOneSharedCommit/"):])
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() { createRoom(t, reg, fmt.Sprintf("%sr%d", prefix, i)) })
		}
		wg.Wait()
		if c := repo.claims.Load(); c != 0 {
			t.Fatalf("%d claims for %d creates, want none", c, n)
		}
		if c := repo.commits.Load(); c > n {
			t.Fatalf("%d commits for %d creates", c, n)
		}
		infos, err := repo.ListRooms(t.Context(), prefix, n+1)
		if err != nil {
			t.Fatal(err)
		}
		if len(infos) != n {
			t.Fatalf("%d rooms stored, want %d", len(infos), n)
		}
		for _, info := range infos {
			if info.HeadVersion != 1 || info.OwnerEpoch != 1 || info.OwnerNode != "node-c" || info.Meta.Status != string(room.StatusOpen) || info.Meta.SeatCount != 10 {
				t.Fatalf("created room %+v", info)
			}
		}
		// Another registry recovers a created room: a claim, then the log.
		other := newRegistry(t, repo, cell.Config{NodeID: "node-d"}, nil)
		snap, err := other.Snapshot(t.Context(), prefix+"r0")
		if err != nil || snap.GetRoomVersion() != 1 || len(snap.GetSeats()) != 10 {
			t.Fatalf("recovered created room: %v, %v", snap, err)
		}
	})
}

// TestACreateThatLosesTheRaceIsFenced: a room created elsewhere between a
// create's look for it and its commit fences the commit (room_moved, nothing
// written); the retry finds the room and is answered from its log.
func TestACreateThatLosesTheRaceIsFenced(t *testing.T) {
	stores(t, func(t *testing.T, open func(testing.TB) store.Repository) {
		repo := &countingRepo{Repository: open(t), blind: map[string]bool{}}
		id := "race-" + t.Name()[len("TestACreateThatLosesTheRaceIsFenced/"):]
		first := newRegistry(t, repo, cell.Config{NodeID: "node-a"}, nil)
		createRoom(t, first, id)
		if err := first.Close(t.Context()); err != nil {
			t.Fatal(err)
		}
		repo.mu.Lock()
		repo.blind[id] = true
		repo.mu.Unlock()

		reg := newRegistry(t, repo, cell.Config{NodeID: "node-b"}, nil)
		create := env(id, "create-b", 7, &room.CreateRoom{OwnerUserID: 7, SeatCount: 8})
		if _, err := reg.Submit(t.Context(), create); !errors.Is(err, room.ErrFenced) {
			t.Fatalf("a create of a room created meanwhile: %v, want room_moved", err)
		}
		if _, err := reg.Snapshot(t.Context(), id+"-never"); !errors.Is(err, room.ErrRoomNotFound) {
			t.Fatalf("snapshot of a room never created: %v, want room_not_found", err)
		}
		repo.mu.Lock()
		repo.blind[id] = false
		repo.mu.Unlock()
		if _, err := reg.Submit(t.Context(), env(id, "create-b", 7, &room.CreateRoom{OwnerUserID: 7, SeatCount: 8})); !errors.Is(err, room.ErrRoomExists) {
			t.Fatalf("the retry: %v, want room_exists", err)
		}
		if res := mustSubmit(t, reg, env(id, "create", 1, &room.CreateRoom{OwnerUserID: 1, HostUserID: 2, SeatCount: 10, Title: "t"})); !res.Duplicate || res.RoomVersion != 1 {
			t.Fatalf("the first create retried: %+v, want its duplicate at version 1", res)
		}
		info, err := repo.ListRooms(t.Context(), id[:len(id)-1], 4)
		if err != nil || len(info) == 0 || info[0].Meta.OwnerUserID != 1 || info[0].HeadVersion != 1 {
			t.Fatalf("the room after the lost race: %+v, %v", info, err)
		}
	})
}

// TestAReadOfARefusedCreateFindsNoRoom: a room whose create was refused
// has no row and no snapshot.
func TestAReadOfARefusedCreateFindsNoRoom(t *testing.T) {
	reg := newRegistry(t, openRepo(t), cell.Config{}, nil)
	if _, err := reg.Submit(t.Context(), env("bad", "create", 1, &room.CreateRoom{OwnerUserID: 1, SeatCount: 99})); err == nil {
		t.Fatal("a create with 99 seats was accepted")
	}
	if _, err := reg.Snapshot(t.Context(), "bad"); !errors.Is(err, room.ErrRoomNotFound) {
		t.Fatalf("snapshot after a refused create: %v, want room_not_found", err)
	}
	if _, err := reg.Submit(t.Context(), env("bad", "join", 5, &room.JoinRoom{})); !errors.Is(err, room.ErrRoomNotFound) {
		t.Fatalf("join after a refused create: %v, want room_not_found", err)
	}
	createRoom(t, reg, "bad")
}
