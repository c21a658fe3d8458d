package main

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	roomv1 "hyapp/room-service/gen/room/v1"
	"hyapp/room-service/rpc"
)

// roomToken is a caller's token with the room scope alone, as a gateway's.
const roomToken = "room-token-0123456789abcdef-0123456"

// TestRoomsWithTheRoomScopeAlone: rooms lists rooms (ListRooms, scope room)
// for a caller without the operator scope, as the service's token caller
// (ROOM_TOKEN: room and act-as-any) is; only the held= column, which needs
// ListNodes, is left out.
func TestRoomsWithTheRoomScopeAlone(t *testing.T) {
	m := startMain(t, "-listen", "127.0.0.1:0", "-tokens", "viewer="+roomToken+":room+act-as-any")
	t.Setenv("ROOM_ADDR", "http://"+m.Addr)
	t.Setenv("ROOM_TOKEN", roomToken)
	mustRun(t, "call", "CreateRoom", `{"room_id":"r1","command_id":"c1","operator_user_id":1,"owner_user_id":1,"seat_count":4}`)
	if out := mustRun(t, "rooms"); !strings.HasPrefix(out, "r1\tstatus=open ") || strings.Contains(out, "held=") {
		t.Fatalf("rooms:\n%s", out)
	}
}

// TestSnapshotShowsEveryMemberByDefault: snapshot's -members is 0 (all)
// unless set, and shows a room of more members than GetRoomSnapshot lists
// unless asked (rpc.DefaultMemberLimit) whole.
func TestSnapshotShowsEveryMemberByDefault(t *testing.T) {
	t.Setenv("ROOM_ADDR", startServer(t))
	t.Setenv("ROOM_TOKEN", testToken)
	mustRun(t, "call", "CreateRoom", `{"room_id":"big","command_id":"c","operator_user_id":1,"owner_user_id":1,"seat_count":4}`)
	c := newClient(options{addr: os.Getenv("ROOM_ADDR"), token: testToken, timeout: time.Minute})
	defer c.close()
	const members = rpc.DefaultMemberLimit + 1
	// Sixteen joins at a time, each user once.
	users := make(chan int64, members)
	for u := range int64(members) {
		users <- 100 + u
	}
	close(users)
	var joins sync.WaitGroup
	errs := make(chan error, members)
	for range 16 {
		joins.Go(func() {
			for u := range users {
				_, err := c.rooms.JoinRoom(t.Context(), connect.NewRequest(&roomv1.JoinRoomRequest{
					RoomId: "big", CommandId: fmt.Sprintf("j%d", u), OperatorUserId: u}))
				errs <- err
			}
		})
	}
	joins.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	var snap roomv1.RoomSnapshot
	decode(t, mustRun(t, "snapshot", "big"), &snap)
	if snap.GetOnlineCount() != members || len(snap.GetMembers()) != members {
		t.Fatalf("snapshot: %d members of %d online; want all %d", len(snap.GetMembers()), snap.GetOnlineCount(), members)
	}
}
