package rpc

import (
	roomv1 "hyapp/room-service/gen/room/v1"
	"hyapp/room-service/gen/room/v1/roomv1connect"

	"hyapp/room-service/auth"
)

// access says who may call one procedure.
type access struct {
	// scope is the scope the caller must hold.
	scope auth.Scope
	// actor reads the user the call acts for (operator_user_id, or the
	// user whose balance is read); nil: the call acts for no user. A
	// caller without act-as-any must assert that user (X-Room-User).
	actor func(req any) int64
	// audit: every call is logged with its caller, scope and user.
	audit bool
	// anyUser: the call vouches for many users at once (Heartbeat), so
	// its caller must hold act-as-any besides the scope.
	anyUser bool
}

// operatorOf reads operator_user_id, which every room command has.
func operatorOf(req any) int64 {
	if m, ok := req.(interface{ GetOperatorUserId() int64 }); ok {
		return m.GetOperatorUserId()
	}
	return 0
}

// userOf reads user_id.
func userOf(req any) int64 {
	if m, ok := req.(interface{ GetUserId() int64 }); ok {
		return m.GetUserId()
	}
	return 0
}

var (
	roomCommand = access{scope: auth.Room, actor: operatorOf}
	roomQuery   = access{scope: auth.Room}
	operatorRPC = access{scope: auth.Operator, audit: true}
)

// accessTable is the one table of who may call every procedure of every
// service. A test built from the service descriptors checks that no method
// is missing and that each refuses a call without credentials, with a
// wrong one and without its scope, so a new RPC cannot skip it. A
// procedure missing here is refused (missing_scope).
var accessTable = map[string]access{
	roomv1connect.RoomServiceCreateRoomProcedure:       roomCommand,
	roomv1connect.RoomServiceCloseRoomProcedure:        roomCommand,
	roomv1connect.RoomServiceJoinRoomProcedure:         roomCommand,
	roomv1connect.RoomServiceLeaveRoomProcedure:        roomCommand,
	roomv1connect.RoomServiceTakeMicProcedure:          roomCommand,
	roomv1connect.RoomServiceLeaveMicProcedure:         roomCommand,
	roomv1connect.RoomServiceMoveMicProcedure:          roomCommand,
	roomv1connect.RoomServiceKickFromMicProcedure:      roomCommand,
	roomv1connect.RoomServiceLockMicSeatProcedure:      roomCommand,
	roomv1connect.RoomServiceMuteMicSeatProcedure:      roomCommand,
	roomv1connect.RoomServiceSetMyMicProcedure:         roomCommand,
	roomv1connect.RoomServiceKickUserProcedure:         roomCommand,
	roomv1connect.RoomServiceMuteUserProcedure:         roomCommand,
	roomv1connect.RoomServiceUnbanUserProcedure:        roomCommand,
	roomv1connect.RoomServiceSetAdminProcedure:         roomCommand,
	roomv1connect.RoomServiceUpdateProfileProcedure:    roomCommand,
	roomv1connect.RoomServiceChangeBackgroundProcedure: roomCommand,
	roomv1connect.RoomServiceSetChatEnabledProcedure:   roomCommand,
	roomv1connect.RoomServiceSendGiftProcedure:         roomCommand,
	// Reads of a room, the room listing and the catalogue act for nobody.
	roomv1connect.RoomServiceGetRoomSnapshotProcedure: roomQuery,
	roomv1connect.RoomServiceListRoomsProcedure:       roomQuery,
	roomv1connect.RoomServiceListGiftsProcedure:       roomQuery,
	// Robot atmosphere is shown by a backend, for no user.
	roomv1connect.RoomServicePublishRobotDisplayProcedure: roomQuery,
	// Top-ups mint coins: their own scope, every call audited.
	roomv1connect.WalletServiceCreditCoinsProcedure: {scope: auth.WalletCredit, audit: true},
	// A balance is the user's own.
	roomv1connect.WalletServiceGetBalanceProcedure: {scope: auth.Room, actor: userOf},
	// Operator views and repairs, and the fleet.
	roomv1connect.OperatorServiceListCommandsProcedure:      operatorRPC,
	roomv1connect.OperatorServiceGetStoredSnapshotProcedure: operatorRPC,
	roomv1connect.OperatorServiceGetOutboxStatusProcedure:   operatorRPC,
	roomv1connect.OperatorServiceRequeueDeadOutboxProcedure: operatorRPC,
	roomv1connect.OperatorServiceListNodesProcedure:         operatorRPC,
	roomv1connect.OperatorServiceDrainProcedure:             operatorRPC,
	// A heartbeat keeps many users present at once: a caller that may only
	// act for the users it asserts could keep anyone's seat taken, so it
	// needs act-as-any as well.
	roomv1connect.RoomServiceHeartbeatProcedure: {scope: auth.Room, anyUser: true},
	// A room's members are shown to anyone in the lobby.
	roomv1connect.RoomServiceListMembersProcedure: roomQuery,
	// Gift records and a wallet's journal are the user's own: a caller
	// without act-as-any lists those of the asserted user only (gift
	// records by user_id, not by room).
	roomv1connect.RoomServiceListGiftRecordsProcedure:     {scope: auth.Room, actor: userOf},
	roomv1connect.WalletServiceListWalletEntriesProcedure: {scope: auth.Room, actor: userOf},
	// Mic requests and invitations, and the room's roles: room commands.
	roomv1connect.RoomServiceSetMicApprovalProcedure:    roomCommand,
	roomv1connect.RoomServiceRequestMicProcedure:        roomCommand,
	roomv1connect.RoomServiceCancelMicRequestProcedure:  roomCommand,
	roomv1connect.RoomServiceApproveMicRequestProcedure: roomCommand,
	roomv1connect.RoomServiceRejectMicRequestProcedure:  roomCommand,
	roomv1connect.RoomServiceInviteToMicProcedure:       roomCommand,
	roomv1connect.RoomServiceAcceptMicInviteProcedure:   roomCommand,
	roomv1connect.RoomServiceDeclineMicInviteProcedure:  roomCommand,
	roomv1connect.RoomServiceTransferOwnershipProcedure: roomCommand,
	roomv1connect.RoomServiceSetHostProcedure:           roomCommand,
}

// The request types the actor funcs read.
var (
	_ interface{ GetOperatorUserId() int64 } = (*roomv1.SendGiftRequest)(nil)
	_ interface{ GetUserId() int64 }         = (*roomv1.GetBalanceRequest)(nil)
	_ interface{ GetUserId() int64 }         = (*roomv1.ListGiftRecordsRequest)(nil)
	_ interface{ GetUserId() int64 }         = (*roomv1.ListWalletEntriesRequest)(nil)
)
