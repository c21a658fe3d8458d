package cell_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"hyapp/room-service/cell"
	"hyapp/room-service/internal/poll"
	"hyapp/room-service/room"
)

// TestAFullNodePassivatesTheLeastRecentlyUsedRoom: at MaxRooms, loading
// another room passivates the room called least recently (with a final
// snapshot), not the busy one; the passivated room loads again later.
func TestAFullNodePassivatesTheLeastRecentlyUsedRoom(t *testing.T) {
	repo := openRepo(t)
	reg := newRegistry(t, repo, cell.Config{MaxRooms: 2, SnapshotEvery: 1000}, nil)
	createRoom(t, reg, "a")
	createRoom(t, reg, "b")
	head := mustSubmit(t, reg, env("b", "j", 10, &room.JoinRoom{})).RoomVersion
	mustSubmit(t, reg, env("a", "j", 10, &room.JoinRoom{})) // b is now the least recently used
	createRoom(t, reg, "c")
	if n := reg.Loaded(); n != 2 {
		t.Fatalf("%d rooms loaded, want 2", n)
	}
	snap, found, err := repo.GetLatestSnapshot(context.Background(), "b")
	if err != nil || !found || snap.RoomVersion != head {
		t.Fatalf("b's final snapshot: %v %v %v; want version %d", snap.RoomVersion, found, err, head)
	}
	if _, found, _ := repo.GetLatestSnapshot(context.Background(), "a"); found {
		t.Fatal("a was passivated, not b")
	}
	// b comes back (passivating a, now the least recent), at its version.
	if got := mustSubmit(t, reg, env("b", "j2", 11, &room.JoinRoom{})).RoomVersion; got != head+1 {
		t.Fatalf("b after passivation at version %d, want %d", got, head+1)
	}
}

// blockingSink holds the cell that publishes a command with id hold until
// release is closed.
type blockingSink struct {
	hold    string
	held    chan struct{}
	release chan struct{}
}

func (s *blockingSink) Publish(b []room.Committed) {
	for _, c := range b {
		if c.CommandID == s.hold {
			close(s.held)
			<-s.release
		}
	}
}

// TestAFullNodeOfBusyRoomsRefusesNewRooms: when every loaded room has
// queued requests, a new room is refused with node_full; the busy rooms
// are untouched.
func TestAFullNodeOfBusyRoomsRefusesNewRooms(t *testing.T) {
	repo := openRepo(t)
	sink := &blockingSink{hold: "hold", held: make(chan struct{}), release: make(chan struct{})}
	reg := newRegistry(t, repo, cell.Config{MaxRooms: 1}, sink)
	createRoom(t, reg, "a")
	release := sync.OnceFunc(func() { close(sink.release) })
	defer release() // a failed test must not leave the cell held
	done := make(chan error, 2)
	go func() {
		_, err := reg.Submit(context.Background(), env("a", "hold", 10, &room.JoinRoom{}))
		done <- err
	}()
	<-sink.held // a's cell is inside Publish
	go func() {
		_, err := reg.Submit(context.Background(), env("a", "queued", 11, &room.JoinRoom{}))
		done <- err
	}()
	// The second request waits in a's mailbox; wait until it is there.
	poll.Until(t, 5*time.Second, "a request queued in a", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		_, err := reg.Submit(ctx, env("b", "create", 1, &room.CreateRoom{OwnerUserID: 1, SeatCount: 8}))
		if errors.Is(err, room.ErrNodeFull) {
			return nil
		}
		return errors.New("b was not refused as node_full")
	})
	release()
	for range 2 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if n := reg.Loaded(); n != 1 {
		t.Fatalf("%d rooms loaded", n)
	}
	createRoom(t, reg, "b") // a is idle again: it makes room
}

// TestAReadIsAUse: a room whose snapshot was just read (without the
// mailbox) is not the least recently used one.
func TestAReadIsAUse(t *testing.T) {
	repo := openRepo(t)
	reg := newRegistry(t, repo, cell.Config{MaxRooms: 2, SnapshotEvery: 1000}, nil)
	createRoom(t, reg, "a")
	createRoom(t, reg, "b")
	for range 2 { // the first read builds the snapshot; the second is answered without the mailbox
		if _, err := reg.Snapshot(context.Background(), "a"); err != nil {
			t.Fatal(err)
		}
	}
	mustSubmit(t, reg, env("b", "j", 10, &room.JoinRoom{}))
	if _, err := reg.Snapshot(context.Background(), "a"); err != nil { // a is now the most recently used
		t.Fatal(err)
	}
	createRoom(t, reg, "c")
	if _, found, _ := repo.GetLatestSnapshot(context.Background(), "a"); found {
		t.Fatal("a was passivated right after it was read; b was the least recently used")
	}
	if _, found, _ := repo.GetLatestSnapshot(context.Background(), "b"); !found {
		t.Fatal("b, the least recently used, was not passivated")
	}
}
