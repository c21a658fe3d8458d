package rpc

import (
	"context"

	"connectrpc.com/connect"

	roomv1 "hyapp/room-service/gen/room/v1"
	"hyapp/room-service/gen/room/v1/roomv1connect"
	"hyapp/room-service/room"
)

// route says where one procedure is served.
type route struct {
	// hop calls the procedure on the node at addr; nil: every node serves
	// the procedure itself (it names no room, or reads only durable state
	// that every node sees alike).
	hop hopFunc
	// node: the call names a node (node_id) and that node serves it, not
	// its room's owner.
	node bool
	// idempotent: a hop whose outcome is unknown may be sent again. Every
	// room command carries a command_id, and reads are safe; a call that is
	// not idempotent is sent again only when the hop was never sent.
	idempotent bool
}

// hopFunc sends req to the node at addr with header and returns its answer.
type hopFunc func(ctx context.Context, hc connect.HTTPClient, addr string, req connect.AnyRequest, header map[string]string) (connect.AnyResponse, error)

// routes is the one table of where every procedure of every service is
// served. A test built from the service descriptors checks that no method
// is missing, so a new RPC cannot be forgotten.
var routes = map[string]route{
	// Room commands: all carry a command_id and are idempotent.
	roomv1connect.RoomServiceCreateRoomProcedure:       owned[roomv1.CreateRoomRequest, roomv1.CreateRoomResponse](roomv1connect.RoomServiceCreateRoomProcedure),
	roomv1connect.RoomServiceCloseRoomProcedure:        owned[roomv1.CloseRoomRequest, roomv1.CloseRoomResponse](roomv1connect.RoomServiceCloseRoomProcedure),
	roomv1connect.RoomServiceJoinRoomProcedure:         owned[roomv1.JoinRoomRequest, roomv1.JoinRoomResponse](roomv1connect.RoomServiceJoinRoomProcedure),
	roomv1connect.RoomServiceLeaveRoomProcedure:        owned[roomv1.LeaveRoomRequest, roomv1.LeaveRoomResponse](roomv1connect.RoomServiceLeaveRoomProcedure),
	roomv1connect.RoomServiceTakeMicProcedure:          owned[roomv1.TakeMicRequest, roomv1.TakeMicResponse](roomv1connect.RoomServiceTakeMicProcedure),
	roomv1connect.RoomServiceLeaveMicProcedure:         owned[roomv1.LeaveMicRequest, roomv1.LeaveMicResponse](roomv1connect.RoomServiceLeaveMicProcedure),
	roomv1connect.RoomServiceMoveMicProcedure:          owned[roomv1.MoveMicRequest, roomv1.MoveMicResponse](roomv1connect.RoomServiceMoveMicProcedure),
	roomv1connect.RoomServiceKickFromMicProcedure:      owned[roomv1.KickFromMicRequest, roomv1.KickFromMicResponse](roomv1connect.RoomServiceKickFromMicProcedure),
	roomv1connect.RoomServiceLockMicSeatProcedure:      owned[roomv1.LockMicSeatRequest, roomv1.LockMicSeatResponse](roomv1connect.RoomServiceLockMicSeatProcedure),
	roomv1connect.RoomServiceMuteMicSeatProcedure:      owned[roomv1.MuteMicSeatRequest, roomv1.MuteMicSeatResponse](roomv1connect.RoomServiceMuteMicSeatProcedure),
	roomv1connect.RoomServiceSetMyMicProcedure:         owned[roomv1.SetMyMicRequest, roomv1.SetMyMicResponse](roomv1connect.RoomServiceSetMyMicProcedure),
	roomv1connect.RoomServiceKickUserProcedure:         owned[roomv1.KickUserRequest, roomv1.KickUserResponse](roomv1connect.RoomServiceKickUserProcedure),
	roomv1connect.RoomServiceMuteUserProcedure:         owned[roomv1.MuteUserRequest, roomv1.MuteUserResponse](roomv1connect.RoomServiceMuteUserProcedure),
	roomv1connect.RoomServiceUnbanUserProcedure:        owned[roomv1.UnbanUserRequest, roomv1.UnbanUserResponse](roomv1connect.RoomServiceUnbanUserProcedure),
	roomv1connect.RoomServiceSetAdminProcedure:         owned[roomv1.SetAdminRequest, roomv1.SetAdminResponse](roomv1connect.RoomServiceSetAdminProcedure),
	roomv1connect.RoomServiceUpdateProfileProcedure:    owned[roomv1.UpdateProfileRequest, roomv1.UpdateProfileResponse](roomv1connect.RoomServiceUpdateProfileProcedure),
	roomv1connect.RoomServiceChangeBackgroundProcedure: owned[roomv1.ChangeBackgroundRequest, roomv1.ChangeBackgroundResponse](roomv1connect.RoomServiceChangeBackgroundProcedure),
	roomv1connect.RoomServiceSetChatEnabledProcedure:   owned[roomv1.SetChatEnabledRequest, roomv1.SetChatEnabledResponse](roomv1connect.RoomServiceSetChatEnabledProcedure),
	roomv1connect.RoomServiceSendGiftProcedure:         owned[roomv1.SendGiftRequest, roomv1.SendGiftResponse](roomv1connect.RoomServiceSendGiftProcedure),
	roomv1connect.RoomServiceGetRoomSnapshotProcedure:  owned[roomv1.GetRoomSnapshotRequest, roomv1.GetRoomSnapshotResponse](roomv1connect.RoomServiceGetRoomSnapshotProcedure),
	// Robot display events go out on the owner's IM lane, in order with
	// the room's own events; the call has no command_id, so a hop whose
	// outcome is unknown is not sent again.
	roomv1connect.RoomServicePublishRobotDisplayProcedure: {
		hop: hop[roomv1.PublishRobotDisplayRequest, roomv1.PublishRobotDisplayResponse](roomv1connect.RoomServicePublishRobotDisplayProcedure),
	},
	// Listings read the shared database or the configuration.
	roomv1connect.RoomServiceListRoomsProcedure: {},
	roomv1connect.RoomServiceListGiftsProcedure: {},
	// Wallets are keyed by user, not room.
	roomv1connect.WalletServiceCreditCoinsProcedure: {},
	roomv1connect.WalletServiceGetBalanceProcedure:  {},
	// Operator views read a room's durable log and stored snapshot, which
	// every node reads alike; the outbox is shared.
	roomv1connect.OperatorServiceListCommandsProcedure:      {},
	roomv1connect.OperatorServiceGetStoredSnapshotProcedure: {},
	roomv1connect.OperatorServiceGetOutboxStatusProcedure:   {},
	roomv1connect.OperatorServiceRequeueDeadOutboxProcedure: {},
	// The fleet's membership is read from Redis by any node; a drain is
	// served by the node it names.
	roomv1connect.OperatorServiceListNodesProcedure: {},
	roomv1connect.OperatorServiceDrainProcedure: {
		hop: hop[roomv1.DrainRequest, roomv1.DrainResponse](roomv1connect.OperatorServiceDrainProcedure), node: true,
	},
	// Presence lives in the owner's memory; a heartbeat is safe to repeat.
	roomv1connect.RoomServiceHeartbeatProcedure: owned[roomv1.HeartbeatRequest, roomv1.HeartbeatResponse](roomv1connect.RoomServiceHeartbeatProcedure),
	// Members are read from the room's live state at its owner; gift
	// records and the journal from the shared database.
	roomv1connect.RoomServiceListMembersProcedure:         owned[roomv1.ListMembersRequest, roomv1.ListMembersResponse](roomv1connect.RoomServiceListMembersProcedure),
	roomv1connect.RoomServiceListGiftRecordsProcedure:     {},
	roomv1connect.WalletServiceListWalletEntriesProcedure: {},
	// Mic requests and invitations, and the room's roles: room commands.
	roomv1connect.RoomServiceSetMicApprovalProcedure:    owned[roomv1.SetMicApprovalRequest, roomv1.SetMicApprovalResponse](roomv1connect.RoomServiceSetMicApprovalProcedure),
	roomv1connect.RoomServiceRequestMicProcedure:        owned[roomv1.RequestMicRequest, roomv1.RequestMicResponse](roomv1connect.RoomServiceRequestMicProcedure),
	roomv1connect.RoomServiceCancelMicRequestProcedure:  owned[roomv1.CancelMicRequestRequest, roomv1.CancelMicRequestResponse](roomv1connect.RoomServiceCancelMicRequestProcedure),
	roomv1connect.RoomServiceApproveMicRequestProcedure: owned[roomv1.ApproveMicRequestRequest, roomv1.ApproveMicRequestResponse](roomv1connect.RoomServiceApproveMicRequestProcedure),
	roomv1connect.RoomServiceRejectMicRequestProcedure:  owned[roomv1.RejectMicRequestRequest, roomv1.RejectMicRequestResponse](roomv1connect.RoomServiceRejectMicRequestProcedure),
	roomv1connect.RoomServiceInviteToMicProcedure:       owned[roomv1.InviteToMicRequest, roomv1.InviteToMicResponse](roomv1connect.RoomServiceInviteToMicProcedure),
	roomv1connect.RoomServiceAcceptMicInviteProcedure:   owned[roomv1.AcceptMicInviteRequest, roomv1.AcceptMicInviteResponse](roomv1connect.RoomServiceAcceptMicInviteProcedure),
	roomv1connect.RoomServiceDeclineMicInviteProcedure:  owned[roomv1.DeclineMicInviteRequest, roomv1.DeclineMicInviteResponse](roomv1connect.RoomServiceDeclineMicInviteProcedure),
	roomv1connect.RoomServiceTransferOwnershipProcedure: owned[roomv1.TransferOwnershipRequest, roomv1.TransferOwnershipResponse](roomv1connect.RoomServiceTransferOwnershipProcedure),
	roomv1connect.RoomServiceSetHostProcedure:           owned[roomv1.SetHostRequest, roomv1.SetHostResponse](roomv1connect.RoomServiceSetHostProcedure),
}

// owned is the route of an idempotent procedure its room's owner serves.
func owned[Req, Res any](procedure string) route {
	return route{hop: hop[Req, Res](procedure), idempotent: true}
}

// hop returns the hopFunc of procedure: a Connect-protocol call with the
// protobuf codec that sends the request message as it was decoded here.
func hop[Req, Res any](procedure string) hopFunc {
	return func(ctx context.Context, hc connect.HTTPClient, addr string, req connect.AnyRequest, header map[string]string) (connect.AnyResponse, error) {
		msg, ok := req.Any().(*Req)
		if !ok {
			return nil, room.Errorf(room.ErrInternal, "route of %s: request is a %T", procedure, req.Any())
		}
		out := connect.NewRequest(msg)
		for k, v := range header {
			out.Header().Set(k, v)
		}
		res, err := connect.NewClient[Req, Res](hc, "http://"+addr+procedure).CallUnary(ctx, out)
		if err != nil {
			return nil, err // a nil *connect.Response[Res] would not be a nil AnyResponse
		}
		return res, nil
	}
}
