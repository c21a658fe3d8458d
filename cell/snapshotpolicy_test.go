package cell_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"

	"hyapp/room-service/cell"
	"hyapp/room-service/room"
	"hyapp/room-service/snapshot"
	"hyapp/room-service/store"
)

// TestLargeRoomSnapshotsWhenItsLogIsAsLarge checks when a room whose
// snapshot outweighs its commands stores one: not every SnapshotEvery
// commands, but once the log since the last snapshot holds as many bytes,
// at the latest after 20 × SnapshotEvery commands; and that recovery from
// what it stored equals the live state.
func TestLargeRoomSnapshotsWhenItsLogIsAsLarge(t *testing.T) {
	stores(t, testLargeRoomSnapshots)
}

func testLargeRoomSnapshots(t *testing.T, open func(testing.TB) store.Repository) {
	ctx := context.Background()
	repo := open(t)
	const every, stretch = 5, 20
	latest := func() (version int64, size int) { // 0, 0: none yet
		t.Helper()
		s, _, err := repo.GetLatestSnapshot(ctx, "big")
		if err != nil {
			t.Fatal(err)
		}
		return s.RoomVersion, len(s.Payload)
	}
	// 200 members with long names make a snapshot of tens of kilobytes.
	// Joins one at a time: every commit is one command. The log never runs
	// more than stretch × every commands past the newest snapshot.
	reg := newRegistry(t, repo, cell.Config{SnapshotEvery: every}, nil)
	createRoom(t, reg, "big")
	name := strings.Repeat("n", room.MaxShortText)
	var v int64
	for u := int64(100); u < 300; u++ {
		v = mustSubmit(t, reg, env("big", fmt.Sprint("j", u), u, &room.JoinRoom{Nickname: name, Vehicle: name})).RoomVersion
		if at, _ := latest(); v-at >= stretch*every {
			t.Fatalf("at version %d the newest snapshot is at %d: more than %d x %d commands behind", v, at, stretch, every)
		}
	}
	mustSubmit(t, reg, env("big", "seat", 100, &room.TakeMic{SeatIndex: 3}))
	// A graceful stop stores a snapshot of the whole room; the next load
	// starts from it with an empty log behind.
	if err := reg.Close(ctx); err != nil {
		t.Fatal(err)
	}
	first, size := latest()
	if first != v+1 || size < 20_000 {
		t.Fatalf("after a graceful stop at version %d the newest snapshot is at %d, of %d bytes", v+1, first, size)
	}
	reg = newRegistry(t, repo, cell.Config{SnapshotEvery: every}, nil)
	on := true // TakeMic opens the mic
	mic := func(n int) {
		t.Helper()
		for range n {
			on = !on
			v = mustSubmit(t, reg, env("big", fmt.Sprint("m", v), 100, &room.SetMyMic{On: on})).RoomVersion
		}
	}
	// Small commands, far more than every but far fewer bytes than the
	// snapshot, store none until the stretch is reached.
	mic(stretch*every - 1)
	if got, _ := latest(); got != first {
		t.Fatalf("a snapshot at %d, %d small commands after the one at %d of %d bytes; want none before %d commands",
			got, v-first, first, size, stretch*every)
	}
	mic(1)
	next, _ := latest()
	if next != first+stretch*every {
		t.Fatalf("the newest snapshot is at %d; want one at %d (%d x %d commands after %d)", next, first+stretch*every, stretch, every, first)
	}
	// Recovery from the stored snapshot and its tail is the live state.
	mic(3)
	live, err := reg.Snapshot(ctx, "big")
	if err != nil {
		t.Fatal(err)
	}
	st, err := snapshot.FromProto(live)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := snapshot.Encode(st)
	meta, _, err := repo.GetRoomMeta(ctx, "big")
	if err != nil {
		t.Fatal(err)
	}
	rec, err := cell.Recover(ctx, repo, meta)
	if err != nil {
		t.Fatal(err)
	}
	if rec.SnapshotVersion != next || rec.SnapshotBytes == 0 || len(rec.Replayed) != 3 {
		t.Fatalf("recovered from the snapshot at %d (%d bytes) plus %d commands; want %d plus 3", rec.SnapshotVersion, rec.SnapshotBytes, len(rec.Replayed), next)
	}
	if got, _ := snapshot.Encode(rec.State); !bytes.Equal(got, want) {
		t.Fatal("recovery differs from the live state")
	}
}
