package rpc

import (
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	roomv1 "hyapp/room-service/gen/room/v1"
)

// Unknown fields are found at any depth: in the message, in a message
// inside it, in a list of them; a message without any has none.
func TestHasUnknownLooksInsideNestedMessages(t *testing.T) {
	unknown := protowire.AppendVarint(protowire.AppendTag(nil, 99, protowire.VarintType), 1)
	with := func(m proto.Message) proto.Message {
		m.ProtoReflect().SetUnknown(unknown)
		return m
	}
	for _, c := range []struct {
		name string
		m    proto.Message
		want bool
	}{
		{"flat", &roomv1.JoinRoomRequest{RoomId: "r1", CommandId: "c1", OperatorUserId: 5}, false},
		{"flat, unknown", with(&roomv1.JoinRoomRequest{RoomId: "r1"}), true},
		{"nested", &roomv1.GetRoomSnapshotResponse{Snapshot: &roomv1.RoomSnapshot{Members: []*roomv1.Member{{UserId: 5}}}}, false},
		{"nested, unknown inside", &roomv1.GetRoomSnapshotResponse{Snapshot: with(&roomv1.RoomSnapshot{}).(*roomv1.RoomSnapshot)}, true},
		{"nested, unknown in a list", &roomv1.GetRoomSnapshotResponse{Snapshot: &roomv1.RoomSnapshot{
			Members: []*roomv1.Member{{UserId: 5}, with(&roomv1.Member{UserId: 6}).(*roomv1.Member)}}}, true},
	} {
		for range 2 { // the second time, what nests says is remembered
			if got := hasUnknown(c.m.ProtoReflect()); got != c.want {
				t.Errorf("%s: hasUnknown = %v; want %v", c.name, got, c.want)
			}
		}
	}
}
