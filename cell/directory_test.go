package cell_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"hyapp/room-service/cell"
	"hyapp/room-service/internal/poll"
	"hyapp/room-service/room"
	"hyapp/room-service/store"
	"hyapp/room-service/store/sqlstore"
)

// directoryDB is what the directory tests read and write.
type directoryDB interface {
	cell.DirectoryStore
	cell.DirectoryBackfill
	ListDirectory(ctx context.Context, q store.DirectoryQuery) ([]store.DirectoryRow, error)
	GetDirectory(ctx context.Context, roomIDs []string) (map[string]store.DirectoryRow, error)
}

var _ directoryDB = (*sqlstore.DB)(nil)

// TestDirectoryCatchesUp: the projector, writing every second, shows
// commands in the directory within seconds.
func TestDirectoryCatchesUp(t *testing.T) {
	stores(t, func(t *testing.T, open func(testing.TB) store.Repository) {
		repo := open(t)
		db := repo.(directoryDB)
		dir := cell.NewDirectory(db, "a", 0, quiet)
		ctx, stop := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); dir.Run(ctx) }()
		t.Cleanup(func() { stop(); <-done })
		reg := newRegistry(t, repo, cell.Config{NodeID: "a", Features: []cell.Feature{dir.Feature()}}, nil)
		for i := range 5 {
			id := fmt.Sprint("r", i)
			createRoom(t, reg, id)
			for u := range i {
				mustSubmit(t, reg, env(id, fmt.Sprint("j", u), int64(10+u), &room.JoinRoom{}))
			}
		}
		mustSubmit(t, reg, env("r4", "mic", 10, &room.TakeMic{SeatIndex: 3}))
		poll.Until(t, 5*time.Second, "the directory shows every room's members", func() error {
			rows, err := db.ListDirectory(context.Background(), store.DirectoryQuery{Order: store.OrderOnline, Status: "open", Limit: 10})
			if err != nil {
				return err
			}
			if len(rows) != 5 {
				return fmt.Errorf("%d rows", len(rows))
			}
			for i, r := range rows {
				if want := int32(4 - i); r.OnlineCount != want || r.RoomID != fmt.Sprint("r", want) {
					return fmt.Errorf("row %d: %s online %d", i, r.RoomID, r.OnlineCount)
				}
			}
			if rows[0].SeatsTaken != 1 || rows[0].Title != "t" || rows[0].OwnerNode != "a" || rows[0].RoomVersion != 6 {
				return fmt.Errorf("busiest room: %+v", rows[0])
			}
			return nil
		})
	})
}

// TestDirectoryFencesAStaleOwner: a node that lost a room cannot overwrite
// the row the room's next owner wrote; and a room without a row gets one
// from the backfill, which any owner's row then replaces.
func TestDirectoryFencesAStaleOwner(t *testing.T) {
	stores(t, func(t *testing.T, open func(testing.TB) store.Repository) {
		ctx := context.Background()
		repo := open(t)
		db := repo.(directoryDB)
		dirA := cell.NewDirectory(db, "a", time.Hour, quiet)
		dirB := cell.NewDirectory(db, "b", time.Hour, quiet)
		regA := newRegistry(t, repo, cell.Config{NodeID: "a", Features: []cell.Feature{dirA.Feature()}}, nil)
		regB := newRegistry(t, repo, cell.Config{NodeID: "b", Features: []cell.Feature{dirB.Feature()}}, nil)
		createRoom(t, regA, "r")
		mustSubmit(t, regA, env("r", "j1", 10, &room.JoinRoom{}))
		// B takes the room over (a new epoch) and commits one more join.
		mustSubmit(t, regB, env("r", "j2", 11, &room.JoinRoom{}))
		if err := dirB.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		if err := dirA.Flush(ctx); err != nil { // A's row of the room is older: refused
			t.Fatal(err)
		}
		got, err := db.GetDirectory(ctx, []string{"r"})
		if err != nil {
			t.Fatal(err)
		}
		if r := got["r"]; r.OwnerNode != "b" || r.OnlineCount != 2 || r.RoomVersion != 3 {
			t.Fatalf("after the stale owner's write: %+v", r)
		}

		// A room created with no projector running has no row until the backfill.
		regC := newRegistry(t, repo, cell.Config{NodeID: "c"}, nil)
		createRoom(t, regC, "old")
		mustSubmit(t, regC, env("old", "j1", 10, &room.JoinRoom{}))
		n, err := cell.Backfill(ctx, db)
		if err != nil || n != 1 {
			t.Fatalf("backfill wrote %d rows: %v", n, err)
		}
		got, err = db.GetDirectory(ctx, []string{"old", "r"})
		if err != nil {
			t.Fatal(err)
		}
		if r := got["old"]; r.OnlineCount != 1 || r.RoomVersion != 2 || r.OwnerEpoch != 0 || r.Status != "open" || got["r"].OwnerNode != "b" {
			t.Fatalf("backfilled: %+v", got)
		}
		if n, err := cell.Backfill(ctx, db); err != nil || n != 0 {
			t.Fatalf("a second backfill wrote %d rows: %v", n, err)
		}
	})
}
