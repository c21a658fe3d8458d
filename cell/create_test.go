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
	"hyapp/room-service/internal/poll"
	"hyapp/room-service/room"
	"hyapp/room-service/store"
)

// countingRepo counts the claims, commits and room lookups the engine makes.
type countingRepo struct {
	store.Repository
	claims, commits, looks atomic.Int64
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
	r.looks.Add(1)
	return r.Repository.GetRoomMeta(ctx, roomID)
}

// TestACreateIsOneSharedCommit: creating a room reads nothing, claims
// nothing and writes nothing before its CreateRoom commits; the batch that commits it inserts
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
		if c, l := repo.claims.Load(), repo.looks.Load(); c != 0 || l != 0 {
			t.Fatalf("%d claims and %d lookups for %d creates, want none", c, l, n)
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

// storedRoom creates a room on a registry of its own, which then stops:
// the room has a row and no cell.
func storedRoom(t *testing.T, repo store.Repository, id string) {
	t.Helper()
	first := newRegistry(t, repo, cell.Config{NodeID: "node-a"}, nil)
	createRoom(t, first, id)
	if err := first.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// createHeldAtCommit submits, on a registry of its own, a create of the
// stored room with a command id of its own, and returns once the create's
// commit is held: the room's cell is empty and its create waits. release
// lets the commit go on; refused hears the create's answer.
func createHeldAtCommit(t *testing.T, repo store.Repository, id string) (reg *cell.Registry, refused <-chan error, release func()) {
	t.Helper()
	blocked := &blockingRepo{Repository: repo, entered: make(chan struct{}), release: make(chan struct{})}
	reg = newRegistry(t, blocked, cell.Config{NodeID: "node-held"}, nil)
	release = sync.OnceFunc(func() { close(blocked.release) })
	t.Cleanup(release) // before the registry closes: a failed check leaves no commit waiting
	answer := make(chan error, 1)
	go func() {
		_, err := reg.Submit(t.Context(), env(id, "create-held", 7, &room.CreateRoom{OwnerUserID: 7, SeatCount: 8}))
		answer <- err
	}()
	<-blocked.entered
	return reg, answer, release
}

// TestACreateOfAStoredRoomIsAnsweredFromIt: a create of a room that has a
// row but no cell here starts without a read; its commit finds the row and
// inserts nothing, and the create is decided again on the room as stored:
// room_exists for another command id, the first answer for a retry of the
// create that made it. No caller sees the refused commit.
func TestACreateOfAStoredRoomIsAnsweredFromIt(t *testing.T) {
	stores(t, func(t *testing.T, open func(testing.TB) store.Repository) {
		repo := &countingRepo{Repository: open(t)}
		id := "stored-" + t.Name()[len("TestACreateOfAStoredRoomIsAnsweredFromIt/"):]
		storedRoom(t, repo, id)
		reg := newRegistry(t, repo, cell.Config{NodeID: "node-b"}, nil)
		if _, err := reg.Submit(t.Context(), env(id, "create-b", 7, &room.CreateRoom{OwnerUserID: 7, SeatCount: 8})); !errors.Is(err, room.ErrRoomExists) {
			t.Fatalf("a create of a stored room: %v, want room_exists", err)
		}
		if c := repo.claims.Load(); c != 1 {
			t.Fatalf("%d claims, want 1: the room loaded as stored after the refused commit", c)
		}
		if res := mustSubmit(t, reg, env(id, "create", 1, &room.CreateRoom{OwnerUserID: 1, HostUserID: 2, SeatCount: 10, Title: "t"})); !res.Duplicate || res.RoomVersion != 1 {
			t.Fatalf("the first create retried: %+v, want its duplicate at version 1", res)
		}
		info, err := repo.ListRooms(t.Context(), id[:len(id)-1], 4)
		if err != nil || len(info) == 0 || info[0].Meta.OwnerUserID != 1 || info[0].HeadVersion != 1 || info[0].OwnerEpoch != 2 {
			t.Fatalf("the room after the creates: %+v, %v; want owner 1 at version 1, claimed once more", info, err)
		}
		// The same from a room's queued requests: a retry of the first
		// create waits behind one the commit refuses, then is answered by
		// the room as stored.
		other := id + "-q"
		storedRoom(t, repo, other)
		queued, refused, release := createHeldAtCommit(t, repo, other)
		type answer struct {
			res cell.Result
			err error
		}
		retried := make(chan answer, 1)
		go func() {
			res, err := queued.Submit(t.Context(), env(other, "create", 1, &room.CreateRoom{OwnerUserID: 1, HostUserID: 2, SeatCount: 10, Title: "t"}))
			retried <- answer{res, err}
		}()
		poll.Until(t, 10*time.Second, "the retry queued behind the refused create", poll.Bool(func() bool { return cell.Queued(queued, other) == 1 }))
		release()
		if err := <-refused; !errors.Is(err, room.ErrRoomExists) {
			t.Fatalf("a create of a stored room: %v, want room_exists", err)
		}
		if a := <-retried; a.err != nil || !a.res.Duplicate || a.res.RoomVersion != 1 {
			t.Fatalf("the queued retry: %+v, %v; want its duplicate at version 1", a.res, a.err)
		}
	})
}

// TestAStoredRoomIsNotMissingToCallsBesideACreate: a join or a read that
// reaches the empty cell a create started for a stored room before the
// create does (they raced for its mailbox) makes the cell look for the
// room: it stops, and they are answered by the room as stored. In a room
// that has no row they are answered room_not_found, as before any create.
func TestAStoredRoomIsNotMissingToCallsBesideACreate(t *testing.T) {
	repo := &countingRepo{Repository: openRepo(t)}
	storedRoom(t, repo, "kept")
	reg := newRegistry(t, repo, cell.Config{NodeID: "node-b"}, nil)
	batch := []*room.Envelope{env("kept", "join", 5, &room.JoinRoom{}), nil}
	if stored, stop := cell.HandleInFreshCell(reg, "kept", batch); !stored[0] || !stored[1] || stop != "exists" {
		t.Fatalf("a join and a read in an empty cell of a stored room: loaded as stored %v, stop %q; want both, exists", stored, stop)
	}
	if res := mustSubmit(t, reg, env("kept", "join", 5, &room.JoinRoom{})); res.RoomVersion != 2 {
		t.Fatalf("the join submitted again: %+v, want version 2", res)
	}
	looks := repo.looks.Load()
	batch = []*room.Envelope{env("nowhere", "join", 5, &room.JoinRoom{}), nil}
	if stored, stop := cell.HandleInFreshCell(reg, "nowhere", batch); stored[0] || stored[1] || stop != "" {
		t.Fatalf("a join and a read in an empty cell of a missing room: loaded as stored %v, stop %q; want neither, none", stored, stop)
	}
	if n := repo.looks.Load() - looks; n != 1 {
		t.Fatalf("%d lookups of the missing room, want 1", n)
	}
}

// TestAHeartbeatDoesNotCountMembersOfAnUnsureRoom: while a create of a
// stored room waits for the commit that will find the row, the room's
// heartbeat is told to retry instead of hearing that its members are not
// members; after, it counts them.
func TestAHeartbeatDoesNotCountMembersOfAnUnsureRoom(t *testing.T) {
	repo := openRepo(t)
	first := newRegistry(t, repo, cell.Config{NodeID: "node-a"}, nil)
	createRoom(t, first, "beat")
	mustSubmit(t, first, env("beat", "join", 5, &room.JoinRoom{}))
	if err := first.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	reg, refused, release := createHeldAtCommit(t, repo, "beat") // its cell is empty
	if res, err := reg.Heartbeat(t.Context(), "beat", []int64{5}); !errors.Is(err, room.ErrUnavailable) {
		t.Fatalf("a heartbeat while the create is unsure: %+v, %v; want unavailable", res, err)
	}
	release()
	if err := <-refused; !errors.Is(err, room.ErrRoomExists) {
		t.Fatalf("a create of a stored room: %v, want room_exists", err)
	}
	if res, err := reg.Heartbeat(t.Context(), "beat", []int64{5}); err != nil || res.Members != 1 {
		t.Fatalf("a heartbeat of the room as stored: %+v, %v; want its one member", res, err)
	}
}

// TestManyCreatesOfAStoredRoomAreAnswered: creates that arrive together for
// a stored room that is not loaded (clients retrying after a restart) all
// get the room's answer: room_exists, or the first answer for a retry of
// the create that made it; none is told the room is restarting.
func TestManyCreatesOfAStoredRoomAreAnswered(t *testing.T) {
	repo := &countingRepo{Repository: openRepo(t)}
	const rooms, callers = 10, 24
	for i := range rooms {
		storedRoom(t, repo, fmt.Sprintf("crowd-%d", i))
	}
	reg := newRegistry(t, repo, cell.Config{NodeID: "node-b"}, nil)
	errs := make(chan error, rooms*callers)
	var wg sync.WaitGroup
	for i := range rooms {
		id := fmt.Sprintf("crowd-%d", i)
		for j := range callers {
			wg.Go(func() {
				if j%2 == 0 { // a retry of the create that made the room
					res, err := reg.Submit(t.Context(), env(id, "create", 1, &room.CreateRoom{OwnerUserID: 1, HostUserID: 2, SeatCount: 10, Title: "t"}))
					if err != nil || !res.Duplicate || res.RoomVersion != 1 {
						errs <- fmt.Errorf("retried create of %s: %+v, %v; want its duplicate at version 1", id, res, err)
					}
					return
				}
				if _, err := reg.Submit(t.Context(), env(id, fmt.Sprintf("create-%d", j), 1, &room.CreateRoom{OwnerUserID: 1, SeatCount: 8})); !errors.Is(err, room.ErrRoomExists) {
					errs <- fmt.Errorf("create of %s: %v, want room_exists", id, err)
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
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
