package store_test

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"hyapp/room-service/outbox"
	"hyapp/room-service/store"
	"hyapp/room-service/store/sqlite"
)

func TestRetentionPrunesOldLogAndPublishedOutbox(t *testing.T) {
	ctx := context.Background()
	db, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "r.db"), sqlite.Options{Synchronous: "NORMAL"})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = db.Close() }()
	if err := db.SaveRoomMeta(ctx, store.RoomMeta{RoomID: "r", OwnerUserID: 1, SeatCount: 8}); err != nil {
		t.Fatal(err)
	}
	claim, err := db.ClaimRoom(ctx, "r", "n")
	if err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-time.Hour)
	b := store.Batch{RoomID: "r", OwnerEpoch: claim.Epoch, Snapshot: &store.SnapshotRecord{RoomID: "r", RoomVersion: 30, Payload: []byte("s")}}
	for v := int64(1); v <= 30; v++ {
		b.Commands = append(b.Commands, store.CommandRecord{RoomID: "r", RoomVersion: v, CommandID: fmt.Sprint("c", v), CommandType: "JoinRoom", Payload: []byte("{}"), Replayable: true, CreatedAt: old})
		b.Outbox = append(b.Outbox, outbox.Record{EventID: fmt.Sprint("r/", v, "/0"), RoomID: "r", RoomVersion: v, EventType: "RoomUserJoined", Payload: []byte("{}"), CreatedAt: old})
	}
	if res, err := db.CommitBatches(ctx, []store.Batch{b}); err != nil || res[0] != nil {
		t.Fatal(err, res)
	}
	for v := 1; v <= 10; v++ {
		if err := db.MarkOutboxPublished(ctx, fmt.Sprint("r/", v, "/0")); err != nil {
			t.Fatal(err)
		}
	}
	r := &store.Retention{Repo: db, Batch: 3, KeepVersions: 5, KeepCommandsFor: time.Minute, KeepPublishedFor: -time.Minute, Log: slog.New(slog.DiscardHandler)}
	n, err := r.Once(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Rows at or below 30-5 go (25 of them); the 10 published outbox rows go; pending ones stay.
	if n.Commands != 25 || n.Outbox != 10 || n.GiftRecords != 0 {
		t.Fatalf("pruned %+v, want 25 commands and 10 outbox rows", n)
	}
	left, err := db.ListCommandsAfter(ctx, "r", 0)
	if err != nil || len(left) != 5 || left[0].RoomVersion != 26 {
		t.Fatalf("log after retention: %d rows from %v (%v)", len(left), left, err)
	}
	pending, err := db.ListRoomOutbox(ctx, "r", 100)
	if err != nil || len(pending) != 20 {
		t.Fatalf("pending rows after retention: %d (%v)", len(pending), err)
	}
}
