package rpc_test

import (
	"testing"

	roomv1 "hyapp/room-service/gen/room/v1"
)

// TestDisplayStringsLoseControlAndBidiCharacters: what one user writes for
// others to see is stored without control and bidi formatting characters;
// a notice keeps its line breaks; other text is unchanged.
func TestDisplayStringsLoseControlAndBidiCharacters(t *testing.T) {
	s := start(t)
	must(t, s.rooms.CreateRoom, &roomv1.CreateRoomRequest{RoomId: "r1", CommandId: "c1", OperatorUserId: 1, OwnerUserId: 1, SeatCount: 8,
		Title: "night\u202etalk\x00"})
	must(t, s.rooms.JoinRoom, &roomv1.JoinRoomRequest{RoomId: "r1", CommandId: "c2", OperatorUserId: 7,
		Nickname: "\u2067سبعة\u2069 \x1b[31mseven\u200f", Vehicle: "car\r\n3"})
	notice := "line one\nline\u2028two\t👨‍👩‍👧"
	must(t, s.rooms.UpdateProfile, &roomv1.UpdateProfileRequest{RoomId: "r1", CommandId: "c3", OperatorUserId: 1, Notice: &notice})
	snap := s.snapshot(t, "r1")
	if got := snap.GetProfile().GetTitle(); got != "nighttalk" {
		t.Errorf("title %q", got)
	}
	if got := snap.GetProfile().GetNotice(); got != "line one\nlinetwo👨‍👩‍👧" {
		t.Errorf("notice %q", got)
	}
	m := snap.GetMembers()[0]
	if m.GetNickname() != "سبعة [31mseven" || m.GetVehicle() != "car3" {
		t.Errorf("member %q %q", m.GetNickname(), m.GetVehicle())
	}
}
