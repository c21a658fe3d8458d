package rpc

import (
	"context"

	"connectrpc.com/connect"

	roomv1 "hyapp/room-service/gen/room/v1"
	"hyapp/room-service/room"
)

// The handlers of mic requests and invitations, and of the room's roles.

// seatOrAny maps an optional seat_index to the domain's: absent is any seat.
func seatOrAny(seat *int32) int32 {
	if seat == nil {
		return room.AnySeat
	}
	return *seat
}

// SetMicApproval implements RoomService.
func (h *RoomHandler) SetMicApproval(ctx context.Context, r *connect.Request[roomv1.SetMicApprovalRequest]) (*connect.Response[roomv1.SetMicApprovalResponse], error) {
	return mutate(ctx, h, r.Msg, &room.SetMicApproval{Required: r.Msg.GetRequired()},
		func(v int64) *roomv1.SetMicApprovalResponse { return &roomv1.SetMicApprovalResponse{RoomVersion: v} })
}

// RequestMic implements RoomService.
func (h *RoomHandler) RequestMic(ctx context.Context, r *connect.Request[roomv1.RequestMicRequest]) (*connect.Response[roomv1.RequestMicResponse], error) {
	if s := r.Msg.SeatIndex; s != nil && *s < 0 {
		return nil, toConnect(ctx, h.log, room.Errorf(room.ErrBadSeatIndex, "seat_index %d; leave it out for any seat", *s))
	}
	return mutate(ctx, h, r.Msg, &room.RequestMic{SeatIndex: seatOrAny(r.Msg.SeatIndex)},
		func(v int64) *roomv1.RequestMicResponse { return &roomv1.RequestMicResponse{RoomVersion: v} })
}

// CancelMicRequest implements RoomService.
func (h *RoomHandler) CancelMicRequest(ctx context.Context, r *connect.Request[roomv1.CancelMicRequestRequest]) (*connect.Response[roomv1.CancelMicRequestResponse], error) {
	return mutate(ctx, h, r.Msg, &room.CancelMicRequest{},
		func(v int64) *roomv1.CancelMicRequestResponse {
			return &roomv1.CancelMicRequestResponse{RoomVersion: v}
		})
}

// ApproveMicRequest implements RoomService.
func (h *RoomHandler) ApproveMicRequest(ctx context.Context, r *connect.Request[roomv1.ApproveMicRequestRequest]) (*connect.Response[roomv1.ApproveMicRequestResponse], error) {
	return mutate(ctx, h, r.Msg, &room.ApproveMicRequest{TargetUserID: r.Msg.GetTargetUserId()},
		func(v int64) *roomv1.ApproveMicRequestResponse {
			return &roomv1.ApproveMicRequestResponse{RoomVersion: v}
		})
}

// RejectMicRequest implements RoomService.
func (h *RoomHandler) RejectMicRequest(ctx context.Context, r *connect.Request[roomv1.RejectMicRequestRequest]) (*connect.Response[roomv1.RejectMicRequestResponse], error) {
	return mutate(ctx, h, r.Msg, &room.RejectMicRequest{TargetUserID: r.Msg.GetTargetUserId()},
		func(v int64) *roomv1.RejectMicRequestResponse {
			return &roomv1.RejectMicRequestResponse{RoomVersion: v}
		})
}

// InviteToMic implements RoomService.
func (h *RoomHandler) InviteToMic(ctx context.Context, r *connect.Request[roomv1.InviteToMicRequest]) (*connect.Response[roomv1.InviteToMicResponse], error) {
	if s := r.Msg.SeatIndex; s != nil && *s < 0 {
		return nil, toConnect(ctx, h.log, room.Errorf(room.ErrBadSeatIndex, "seat_index %d; leave it out for any seat", *s))
	}
	return mutate(ctx, h, r.Msg, &room.InviteToMic{TargetUserID: r.Msg.GetTargetUserId(), SeatIndex: seatOrAny(r.Msg.SeatIndex)},
		func(v int64) *roomv1.InviteToMicResponse { return &roomv1.InviteToMicResponse{RoomVersion: v} })
}

// AcceptMicInvite implements RoomService.
func (h *RoomHandler) AcceptMicInvite(ctx context.Context, r *connect.Request[roomv1.AcceptMicInviteRequest]) (*connect.Response[roomv1.AcceptMicInviteResponse], error) {
	return mutate(ctx, h, r.Msg, &room.AcceptMicInvite{},
		func(v int64) *roomv1.AcceptMicInviteResponse { return &roomv1.AcceptMicInviteResponse{RoomVersion: v} })
}

// DeclineMicInvite implements RoomService.
func (h *RoomHandler) DeclineMicInvite(ctx context.Context, r *connect.Request[roomv1.DeclineMicInviteRequest]) (*connect.Response[roomv1.DeclineMicInviteResponse], error) {
	return mutate(ctx, h, r.Msg, &room.DeclineMicInvite{},
		func(v int64) *roomv1.DeclineMicInviteResponse {
			return &roomv1.DeclineMicInviteResponse{RoomVersion: v}
		})
}

// TransferOwnership implements RoomService.
func (h *RoomHandler) TransferOwnership(ctx context.Context, r *connect.Request[roomv1.TransferOwnershipRequest]) (*connect.Response[roomv1.TransferOwnershipResponse], error) {
	return mutate(ctx, h, r.Msg, &room.TransferOwnership{NewOwnerUserID: r.Msg.GetNewOwnerUserId()},
		func(v int64) *roomv1.TransferOwnershipResponse {
			return &roomv1.TransferOwnershipResponse{RoomVersion: v}
		})
}

// SetHost implements RoomService.
func (h *RoomHandler) SetHost(ctx context.Context, r *connect.Request[roomv1.SetHostRequest]) (*connect.Response[roomv1.SetHostResponse], error) {
	return mutate(ctx, h, r.Msg, &room.SetHost{HostUserID: r.Msg.GetHostUserId()},
		func(v int64) *roomv1.SetHostResponse { return &roomv1.SetHostResponse{RoomVersion: v} })
}
