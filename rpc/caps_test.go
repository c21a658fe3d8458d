package rpc_test

import (
	"fmt"
	"testing"

	"connectrpc.com/connect"

	"hyapp/room-service/auth"
	roomv1 "hyapp/room-service/gen/room/v1"
	"hyapp/room-service/gen/room/v1/roomv1connect"
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

// TestRoomCreationIsRatedPerCaller: a caller over its rate is refused with
// rate_limited and creates nothing; another caller is not held back.
func TestRoomCreationIsRatedPerCaller(t *testing.T) {
	other := "other-caller-token-0123456789abcdef"
	s := startWith(t, rpc.Options{CreateRoomRate: 0.001, Callers: []auth.Caller{
		{Name: "test", Hash: auth.HashToken(token), Scopes: auth.Scopes},
		{Name: "other", Hash: auth.HashToken(other), Scopes: auth.Scopes},
	}}, quiet)
	create := func(rooms roomv1connect.RoomServiceClient, id string) error {
		_, err := rooms.CreateRoom(t.Context(), connect.NewRequest(&roomv1.CreateRoomRequest{RoomId: id, CommandId: "c", OperatorUserId: 1, OwnerUserId: 1, SeatCount: 8}))
		return err
	}
	if err := create(s.rooms, "a"); err != nil { // the burst is one room at this rate
		t.Fatal(err)
	}
	wantErr(t, create(s.rooms, "b"), connect.CodeResourceExhausted, "rate_limited")
	_, err := s.rooms.GetRoomSnapshot(t.Context(), connect.NewRequest(&roomv1.GetRoomSnapshotRequest{RoomId: "b"}))
	wantErr(t, err, connect.CodeNotFound, "room_not_found")
	if err := create(roomv1connect.NewRoomServiceClient(s.h1, s.base, withToken(other)), "b"); err != nil {
		t.Fatal(err)
	}
}
