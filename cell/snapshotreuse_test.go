package cell_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"google.golang.org/protobuf/proto"

	"hyapp/room-service/cell"
	roomv1 "hyapp/room-service/gen/room/v1"
	"hyapp/room-service/room"
	"hyapp/room-service/snapshot"
	"hyapp/room-service/store"
)

// TestReadsOfACrowdFollowItsMembers: a room large enough that its snapshot
// builds keep the members' list (over 1,000) answers reads with it after
// commands that move no member, and with the change after a join, a
// rejoin with a new nickname, a leave and a kick: each read equals the
// snapshot of the state rebuilt from the log.
func TestReadsOfACrowdFollowItsMembers(t *testing.T) { stores(t, testReadsOfACrowd) }

func testReadsOfACrowd(t *testing.T, open func(testing.TB) store.Repository) {
	repo := open(t)
	reg := newRegistry(t, repo, cell.Config{TimerScanEvery: -1}, nil)
	createRoom(t, reg, "crowd")
	var wg sync.WaitGroup
	for u := int64(100); u < 1150; u++ {
		wg.Go(func() { mustSubmit(t, reg, env("crowd", fmt.Sprint("j", u), u, &room.JoinRoom{Nickname: "a"})) })
	}
	wg.Wait()
	check := func(what string) {
		t.Helper()
		got, err := reg.Snapshot(context.Background(), "crowd")
		if err != nil {
			t.Fatal(err)
		}
		recs, err := repo.ListCommandsAfter(context.Background(), "crowd", 0)
		if err != nil {
			t.Fatal(err)
		}
		s := room.Genesis("crowd", 0, 0, 0, "", room.StatusCreating)
		for _, r := range recs {
			e, err := room.DecodeCommand("crowd", r.CommandID, room.CommandType(r.CommandType), r.Payload)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := room.Apply(s, e); err != nil {
				t.Fatalf("replay %s: %v", r.CommandID, err)
			}
		}
		if want := snapshot.ToProto(s); !equalMembers(got.GetMembers(), want.GetMembers()) {
			t.Fatalf("after %s the read lists %d members, the log %d, or they differ", what, len(got.GetMembers()), len(want.GetMembers()))
		}
	}
	check("the joins")
	mustSubmit(t, reg, env("crowd", "seat", 100, &room.TakeMic{SeatIndex: 0}))
	check("a seat")
	mustSubmit(t, reg, env("crowd", "mic", 100, &room.SetMyMic{On: false}))
	check("the mic")
	mustSubmit(t, reg, env("crowd", "rejoin", 500, &room.JoinRoom{Nickname: "b"}))
	check("a rejoin with a new nickname")
	mustSubmit(t, reg, env("crowd", "leave", 501, &room.LeaveRoom{}))
	check("a leave")
	mustSubmit(t, reg, env("crowd", "join", 5000, &room.JoinRoom{Nickname: "c"}))
	check("a join")
	mustSubmit(t, reg, env("crowd", "mic2", 100, &room.SetMyMic{On: true}))
	check("the mic again")
}

func equalMembers(a, b []*roomv1.Member) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !proto.Equal(a[i], b[i]) {
			return false
		}
	}
	return true
}
