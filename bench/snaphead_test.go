package bench

import (
	"testing"

	"google.golang.org/protobuf/proto"

	roomv1 "hyapp/room-service/gen/room/v1"
)

func TestASnapshotHeadReadsWhatADecodeWould(t *testing.T) {
	res := &roomv1.GetRoomSnapshotResponse{RoomVersion: 42, Snapshot: &roomv1.RoomSnapshot{
		RoomId: "r-1", RoomVersion: 42, OwnerUserId: 7, Profile: &roomv1.RoomProfile{},
		Members:      []*roomv1.Member{{UserId: 1, Nickname: "a"}, {UserId: 2}, {UserId: 3, AvatarUrl: "x"}},
		Seats:        []*roomv1.MicSeat{{Index: 0, UserId: 1}},
		AdminUserIds: []int64{5, 6},
		OnlineCount:  3,
	}}
	b, err := proto.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	var h snapshotHead
	if err := h.parse(b); err != nil {
		t.Fatal(err)
	}
	want := snapshotHead{version: 42, roomID: "r-1", snapVersion: 42}
	if h != want {
		t.Fatalf("head = %+v, want %+v", h, want)
	}

	b, _ = proto.Marshal(&roomv1.GetRoomSnapshotResponse{NotModified: true, RoomVersion: 9})
	if err := h.parse(b); err != nil || h != (snapshotHead{notModified: true, version: 9}) {
		t.Fatalf("not modified: head = %+v, err %v", h, err)
	}

	for _, bad := range [][]byte{{0x1a, 0x05, 0x0a}, {0x10}, {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}} {
		if err := h.parse(bad); err == nil {
			t.Fatalf("parse(%x) = nil, want an error", bad)
		}
	}
}
