package main

import (
	"strings"
	"testing"
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
