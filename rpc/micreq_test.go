package rpc_test

import (
	"fmt"
	"testing"

	"connectrpc.com/connect"

	roomv1 "hyapp/room-service/gen/room/v1"
)

func seat(i int32) *int32 { return &i }

// A mic request through the API: approval set at creation, a member asks
// for any seat, is refused TakeMic, an admin approves and the member sits
// on the first free seat; a retry of the approval is answered as it was.
func TestMicRequestsThroughTheAPI(t *testing.T) {
	s := start(t)
	r := s.rooms
	must(t, r.CreateRoom, &roomv1.CreateRoomRequest{RoomId: "q", CommandId: "create", OperatorUserId: 1, OwnerUserId: 1, SeatCount: 4, MicApprovalRequired: true})
	for _, u := range []int64{1, 2, 3, 4} {
		must(t, r.JoinRoom, &roomv1.JoinRoomRequest{RoomId: "q", CommandId: fmt.Sprint("join-", u), OperatorUserId: u})
	}
	must(t, r.TakeMic, &roomv1.TakeMicRequest{RoomId: "q", CommandId: "owner-mic", OperatorUserId: 1, SeatIndex: 0})
	_, err := r.TakeMic(t.Context(), connect.NewRequest(&roomv1.TakeMicRequest{RoomId: "q", CommandId: "m2", OperatorUserId: 2, SeatIndex: 1}))
	wantErr(t, err, connect.CodeFailedPrecondition, "mic_approval_required")

	must(t, r.RequestMic, &roomv1.RequestMicRequest{RoomId: "q", CommandId: "ask-2", OperatorUserId: 2})
	must(t, r.RequestMic, &roomv1.RequestMicRequest{RoomId: "q", CommandId: "ask-3", OperatorUserId: 3, SeatIndex: seat(3)})
	_, err = r.RequestMic(t.Context(), connect.NewRequest(&roomv1.RequestMicRequest{RoomId: "q", CommandId: "ask-2b", OperatorUserId: 2}))
	wantErr(t, err, connect.CodeFailedPrecondition, "mic_request_pending")
	_, err = r.RequestMic(t.Context(), connect.NewRequest(&roomv1.RequestMicRequest{RoomId: "q", CommandId: "ask-4", OperatorUserId: 4, SeatIndex: seat(-1)}))
	wantErr(t, err, connect.CodeInvalidArgument, "bad_seat_index")

	snap := s.snapshot(t, "q")
	req := snap.GetMicRequests()
	if !snap.GetMicApprovalRequired() || len(req) != 2 || req[0].GetUserId() != 2 || req[0].GetSeatIndex() != -1 ||
		req[1].GetUserId() != 3 || req[1].GetSeatIndex() != 3 || req[0].GetExpiresAtMs()-req[0].GetAtMs() != 60_000 {
		t.Fatalf("requests in the snapshot: %v", req)
	}

	_, err = r.ApproveMicRequest(t.Context(), connect.NewRequest(&roomv1.ApproveMicRequestRequest{RoomId: "q", CommandId: "ok-by-3", OperatorUserId: 3, TargetUserId: 2}))
	wantErr(t, err, connect.CodePermissionDenied, "permission_denied")
	approve := &roomv1.ApproveMicRequestRequest{RoomId: "q", CommandId: "ok-2", OperatorUserId: 1, TargetUserId: 2}
	first := must(t, r.ApproveMicRequest, approve)
	if again := must(t, r.ApproveMicRequest, approve); again.GetRoomVersion() != first.GetRoomVersion() {
		t.Fatalf("a retried approval committed again: %d then %d", first.GetRoomVersion(), again.GetRoomVersion())
	}
	must(t, r.RejectMicRequest, &roomv1.RejectMicRequestRequest{RoomId: "q", CommandId: "no-3", OperatorUserId: 1, TargetUserId: 3})
	_, err = r.CancelMicRequest(t.Context(), connect.NewRequest(&roomv1.CancelMicRequestRequest{RoomId: "q", CommandId: "cancel-3", OperatorUserId: 3}))
	wantErr(t, err, connect.CodeFailedPrecondition, "no_mic_request")

	snap = s.snapshot(t, "q")
	if snap.GetSeats()[1].GetUserId() != 2 || len(snap.GetMicRequests()) != 0 {
		t.Fatalf("after approval: seats %v, requests %v", snap.GetSeats(), snap.GetMicRequests())
	}

	// Invitations: accepted even under approval, declined, refused twice.
	must(t, r.InviteToMic, &roomv1.InviteToMicRequest{RoomId: "q", CommandId: "inv-3", OperatorUserId: 1, TargetUserId: 3, SeatIndex: seat(3)})
	must(t, r.InviteToMic, &roomv1.InviteToMicRequest{RoomId: "q", CommandId: "inv-4", OperatorUserId: 1, TargetUserId: 4})
	_, err = r.InviteToMic(t.Context(), connect.NewRequest(&roomv1.InviteToMicRequest{RoomId: "q", CommandId: "inv-4b", OperatorUserId: 1, TargetUserId: 4}))
	wantErr(t, err, connect.CodeFailedPrecondition, "mic_invite_pending")
	if inv := s.snapshot(t, "q").GetMicInvites(); len(inv) != 2 || inv[0].GetByUserId() != 1 || inv[1].GetSeatIndex() != -1 {
		t.Fatalf("invitations in the snapshot: %v", inv)
	}
	must(t, r.AcceptMicInvite, &roomv1.AcceptMicInviteRequest{RoomId: "q", CommandId: "yes-3", OperatorUserId: 3})
	must(t, r.DeclineMicInvite, &roomv1.DeclineMicInviteRequest{RoomId: "q", CommandId: "no-4", OperatorUserId: 4})
	_, err = r.AcceptMicInvite(t.Context(), connect.NewRequest(&roomv1.AcceptMicInviteRequest{RoomId: "q", CommandId: "yes-4", OperatorUserId: 4}))
	wantErr(t, err, connect.CodeFailedPrecondition, "no_mic_invite")

	// Switching approval off lets members sit themselves.
	must(t, r.SetMicApproval, &roomv1.SetMicApprovalRequest{RoomId: "q", CommandId: "open", OperatorUserId: 1, Required: false})
	must(t, r.TakeMic, &roomv1.TakeMicRequest{RoomId: "q", CommandId: "m4", OperatorUserId: 4, SeatIndex: 2})
	_, err = r.RequestMic(t.Context(), connect.NewRequest(&roomv1.RequestMicRequest{RoomId: "q", CommandId: "ask-late", OperatorUserId: 4}))
	wantErr(t, err, connect.CodeFailedPrecondition, "already_on_mic")
	snap = s.snapshot(t, "q")
	if snap.GetMicApprovalRequired() || snap.GetSeats()[3].GetUserId() != 3 || snap.GetSeats()[2].GetUserId() != 4 || len(snap.GetMicInvites()) != 0 {
		t.Fatalf("final snapshot: %v", snap)
	}
}

// Roles and moderation reasons through the API.
func TestRolesAndReasonsThroughTheAPI(t *testing.T) {
	s := start(t)
	seed(t, s)
	r := s.rooms
	_, err := r.TransferOwnership(t.Context(), connect.NewRequest(&roomv1.TransferOwnershipRequest{RoomId: "r1", CommandId: "give", OperatorUserId: 2, NewOwnerUserId: 3}))
	wantErr(t, err, connect.CodePermissionDenied, "permission_denied")
	_, err = r.TransferOwnership(t.Context(), connect.NewRequest(&roomv1.TransferOwnershipRequest{RoomId: "r1", CommandId: "give", OperatorUserId: 1, NewOwnerUserId: 77}))
	wantErr(t, err, connect.CodeFailedPrecondition, "not_in_room")
	must(t, r.SetHost, &roomv1.SetHostRequest{RoomId: "r1", CommandId: "host", OperatorUserId: 1, HostUserId: 3})
	must(t, r.TransferOwnership, &roomv1.TransferOwnershipRequest{RoomId: "r1", CommandId: "give", OperatorUserId: 1, NewOwnerUserId: 2})
	// The new owner acts as owner; the old one is an admin now.
	must(t, r.MuteUser, &roomv1.MuteUserRequest{RoomId: "r1", CommandId: "mute", OperatorUserId: 2, TargetUserId: 3, Permanent: true, Reason: "spam\u202e\x07 again"})
	must(t, r.KickUser, &roomv1.KickUserRequest{RoomId: "r1", CommandId: "kick", OperatorUserId: 1, TargetUserId: 3, DurationSeconds: 600, Reason: "rude"})
	_, err = r.SetHost(t.Context(), connect.NewRequest(&roomv1.SetHostRequest{RoomId: "r1", CommandId: "host-2", OperatorUserId: 1, HostUserId: 1}))
	wantErr(t, err, connect.CodePermissionDenied, "permission_denied")
	_, err = r.MuteUser(t.Context(), connect.NewRequest(&roomv1.MuteUserRequest{RoomId: "r1", CommandId: "mute-2", OperatorUserId: 2, TargetUserId: 1, Permanent: true, DurationSeconds: 5}))
	wantErr(t, err, connect.CodeInvalidArgument, "bad_duration")
	long := make([]byte, 257)
	for i := range long {
		long[i] = 'x'
	}
	_, err = r.KickUser(t.Context(), connect.NewRequest(&roomv1.KickUserRequest{RoomId: "r1", CommandId: "kick-2", OperatorUserId: 2, TargetUserId: 1, Reason: string(long)}))
	wantErr(t, err, connect.CodeInvalidArgument, "field_too_long")

	snap := s.snapshot(t, "r1")
	if snap.GetOwnerUserId() != 2 || snap.GetHostUserId() != 3 {
		t.Fatalf("owner %d host %d", snap.GetOwnerUserId(), snap.GetHostUserId())
	}
	admins := snap.GetAdminUserIds()
	if len(admins) != 2 || admins[0] != 1 || admins[1] != 2 {
		t.Fatalf("admins %v, want the old and the new owner", admins)
	}
	mutes, bans := snap.GetChatMutes(), snap.GetBans()
	if len(mutes) != 1 || !mutes[0].GetPermanent() || mutes[0].GetReason() != "spam again" || len(bans) != 1 || bans[0].GetReason() != "rude" || bans[0].GetPermanent() {
		t.Fatalf("mutes %v, bans %v", mutes, bans)
	}
	// UnbanUser lifts the ban and the permanent mute.
	must(t, r.UnbanUser, &roomv1.UnbanUserRequest{RoomId: "r1", CommandId: "pardon", OperatorUserId: 2, TargetUserId: 3})
	if snap := s.snapshot(t, "r1"); len(snap.GetChatMutes())+len(snap.GetBans()) != 0 {
		t.Fatalf("after UnbanUser: mutes %v, bans %v", snap.GetChatMutes(), snap.GetBans())
	}
	// The listing names the new owner and host.
	for _, sum := range s.listAll(t, roomv1.RoomStatus_ROOM_STATUS_UNSPECIFIED, 10) {
		if sum.GetRoomId() == "r1" && (sum.GetOwnerUserId() != 2 || sum.GetHostUserId() != 3) {
			t.Fatalf("listing: %v", sum)
		}
	}
}
