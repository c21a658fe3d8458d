package rpc_test

import (
	"fmt"
	"testing"

	"connectrpc.com/connect"

	roomv1 "hyapp/room-service/gen/room/v1"
	"hyapp/room-service/rpc"
)

// TestSnapshotMemberLimits: a snapshot lists DefaultMemberLimit members
// unless asked for fewer or more, never more than MaxMemberLimit.
func TestSnapshotMemberLimits(t *testing.T) {
	s := start(t)
	must(t, s.rooms.CreateRoom, &roomv1.CreateRoomRequest{RoomId: "r1", CommandId: "c1", OperatorUserId: 1, OwnerUserId: 1, SeatCount: 8})
	for u := int64(1000); u < 1000+rpc.DefaultMemberLimit+5; u++ { // above panicUser and platformUser
		must(t, s.rooms.JoinRoom, &roomv1.JoinRoomRequest{RoomId: "r1", CommandId: fmt.Sprint("j", u), OperatorUserId: u})
	}
	snap := s.snapshot(t, "r1")
	if n := len(snap.GetMembers()); n != rpc.DefaultMemberLimit || snap.GetOnlineCount() != rpc.DefaultMemberLimit+5 || snap.GetMembers()[0].GetUserId() != 1000 {
		t.Fatalf("default: %d members listed of %d", n, snap.GetOnlineCount())
	}
	all := must(t, s.rooms.GetRoomSnapshot, &roomv1.GetRoomSnapshotRequest{RoomId: "r1", MemberLimit: rpc.MaxMemberLimit}).GetSnapshot()
	if n := len(all.GetMembers()); n != rpc.DefaultMemberLimit+5 {
		t.Fatalf("max: %d members", n)
	}
	_, err := s.rooms.GetRoomSnapshot(t.Context(), connect.NewRequest(&roomv1.GetRoomSnapshotRequest{RoomId: "r1", MemberLimit: rpc.MaxMemberLimit + 1}))
	wantErr(t, err, connect.CodeInvalidArgument, "invalid_argument")
}
