package rpc

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"log/slog"

	"connectrpc.com/connect"

	"hyapp/room-service/app"
	"hyapp/room-service/auth"
	"hyapp/room-service/cell"
	roomv1 "hyapp/room-service/gen/room/v1"
	"hyapp/room-service/gen/room/v1/roomv1connect"
	"hyapp/room-service/gift"
	"hyapp/room-service/room"
	"hyapp/room-service/snapshot"
	"hyapp/room-service/store"
)

// Engine is what the handlers need from the room engine (a *cell.Registry).
type Engine interface {
	Submit(ctx context.Context, env *room.Envelope) (cell.Result, error)
	Snapshot(ctx context.Context, roomID string) (*roomv1.RoomSnapshot, error)
	Heartbeat(ctx context.Context, roomID string, users []int64) (cell.HeartbeatResult, error)
}

// RoomStore is what RoomHandler reads from storage (a store.Repository
// serves it): a room's metadata, and the room listing.
type RoomStore interface {
	// GetRoomMeta reads a room's metadata; found is false when the room does not exist.
	GetRoomMeta(ctx context.Context, roomID string) (store.RoomMeta, bool, error)
	// ListRooms lists rooms ordered by id, starting after afterRoomID, at most limit.
	ListRooms(ctx context.Context, afterRoomID string, limit int) ([]store.RoomInfo, error)
}

// The storage contract serves the handlers.
var (
	_ RoomStore     = store.Repository(nil)
	_ OperatorStore = store.Repository(nil)
)

// RoomHandler implements room.v1.RoomService.
type RoomHandler struct {
	engine   Engine
	rooms    RoomStore
	gifts    *app.Gifts
	robots   RobotDisplay
	platform func(userID int64) bool
	creates  *perCaller // set by NewMux from Options.CreateRoomRate
	log      *slog.Logger
	// The read models of the lists, when rooms serves them (nil: their
	// lists answer list_not_served).
	directory   DirectoryReader
	giftRecords GiftRecordReader
	wire        *snapshotWire // GetRoomSnapshot's encodings
}

// RobotDisplay shows robot display events (the IM lane).
type RobotDisplay interface {
	PublishRobot(roomID, eventType string, payload json.RawMessage)
}

// Limits of PublishRobotDisplay.
const (
	maxRobotType    = 64
	maxRobotPayload = 4096
)

// PublishRobotDisplay implements RoomService.
func (h *RoomHandler) PublishRobotDisplay(ctx context.Context, r *connect.Request[roomv1.PublishRobotDisplayRequest]) (*connect.Response[roomv1.PublishRobotDisplayResponse], error) {
	m := r.Msg
	if err := room.CheckRoomID(m.GetRoomId()); err != nil {
		return nil, toConnect(ctx, h.log, err)
	}
	if !robotType(m.GetEventType()) {
		return nil, toConnect(ctx, h.log, room.Errorf(room.ErrInvalidArgument, "event_type must be 1..%d letters, digits or _, starting with a letter", maxRobotType))
	}
	payload := []byte(m.GetPayloadJson())
	var obj map[string]any
	if len(payload) > maxRobotPayload || json.Unmarshal(payload, &obj) != nil {
		return nil, toConnect(ctx, h.log, room.Errorf(room.ErrInvalidArgument, "payload_json must be a JSON object of at most %d bytes", maxRobotPayload))
	}
	meta, found, err := h.rooms.GetRoomMeta(ctx, m.GetRoomId())
	switch {
	case err != nil:
		return nil, toConnect(ctx, h.log, err)
	case !found:
		return nil, toConnect(ctx, h.log, room.ErrRoomNotFound)
	case meta.Status == string(room.StatusClosed):
		return nil, toConnect(ctx, h.log, room.ErrRoomClosed)
	}
	h.robots.PublishRobot(m.GetRoomId(), m.GetEventType(), payload)
	return connect.NewResponse(&roomv1.PublishRobotDisplayResponse{}), nil
}

func robotType(t string) bool {
	if t == "" || len(t) > maxRobotType || !(t[0] >= 'A' && t[0] <= 'Z' || t[0] >= 'a' && t[0] <= 'z') {
		return false
	}
	for i := 0; i < len(t); i++ {
		c := t[i]
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

var _ roomv1connect.RoomServiceHandler = (*RoomHandler)(nil)

// NewRoomHandler returns the RoomService handler. Gifts are sent from
// catalogue, robot display events are shown through robots (the IM lane);
// engine, rooms, catalogue and robots are required. platform reports
// whether a user is platform staff, who may act as any room's owner (nil:
// nobody is); staff act as such only on calls whose caller holds the
// platform scope. When rooms also reads the room directory
// (DirectoryReader) and gift records (GiftRecordReader), as the SQL stores
// do, the hot list and ListGiftRecords are served from it.
func NewRoomHandler(engine Engine, rooms RoomStore, catalogue *gift.Catalogue, robots RobotDisplay, platform func(int64) bool, log *slog.Logger) *RoomHandler {
	if platform == nil {
		platform = func(int64) bool { return false }
	}
	h := &RoomHandler{
		engine: engine, rooms: rooms, gifts: app.NewGifts(catalogue, engine), robots: robots, platform: platform, log: log,
		wire: newSnapshotWire(),
	}
	h.directory, _ = rooms.(DirectoryReader)
	h.giftRecords, _ = rooms.(GiftRecordReader)
	return h
}

// header is what every mutating request has.
type header interface {
	GetRoomId() string
	GetCommandId() string
	GetOperatorUserId() int64
}

// mutate runs one command and wraps the committed version in its response.
func mutate[Resp any](ctx context.Context, h *RoomHandler, req header, cmd room.Command, wrap func(version int64) *Resp) (*connect.Response[Resp], error) {
	env := &room.Envelope{
		RoomID: req.GetRoomId(), CommandID: req.GetCommandId(), Operator: req.GetOperatorUserId(),
		Platform: h.asPlatform(ctx, req.GetOperatorUserId()), Command: cmd,
	}
	res, err := h.engine.Submit(ctx, env)
	if env.Platform {
		h.auditPlatform(ctx, env, err)
	}
	if err != nil {
		return nil, toConnect(ctx, h.log, err)
	}
	return connect.NewResponse(wrap(res.RoomVersion)), nil
}

// asPlatform reports whether a call acts as platform staff: its user is
// listed as staff and its caller holds the platform scope.
func (h *RoomHandler) asPlatform(ctx context.Context, user int64) bool {
	p, ok := principalOf(ctx)
	return ok && p.has(auth.Platform) && h.platform(user)
}

// auditPlatform logs a command run with platform rights.
func (h *RoomHandler) auditPlatform(ctx context.Context, env *room.Envelope, err error) {
	p, _ := principalOf(ctx)
	outcome := "ok"
	if err != nil {
		outcome = room.AsError(err).Reason
	}
	h.log.InfoContext(ctx, "audit", "caller", p.name(), "scope", auth.Platform, "user", env.Operator,
		"command", env.Command.Type(), "room_id", env.RoomID, "command_id", env.CommandID, "outcome", outcome)
}

// CreateRoom implements RoomService.
func (h *RoomHandler) CreateRoom(ctx context.Context, r *connect.Request[roomv1.CreateRoomRequest]) (*connect.Response[roomv1.CreateRoomResponse], error) {
	m := r.Msg
	if p, _ := principalOf(ctx); !p.dev && !h.creates.allow(p.name()) {
		return nil, toConnect(ctx, h.log, room.Errorf(ErrRateLimited, "caller %s", p.name()))
	}
	return mutate(ctx, h, m, &room.CreateRoom{
		OwnerUserID: m.GetOwnerUserId(), HostUserID: m.GetHostUserId(), SeatCount: m.GetSeatCount(),
		Mode: display(m.GetMode(), false), Region: display(m.GetRegion(), false), Title: display(m.GetTitle(), false),
		MicApproval: m.GetMicApprovalRequired(),
	}, func(v int64) *roomv1.CreateRoomResponse { return &roomv1.CreateRoomResponse{RoomVersion: v} })
}

// CloseRoom implements RoomService.
func (h *RoomHandler) CloseRoom(ctx context.Context, r *connect.Request[roomv1.CloseRoomRequest]) (*connect.Response[roomv1.CloseRoomResponse], error) {
	return mutate(ctx, h, r.Msg, &room.CloseRoom{},
		func(v int64) *roomv1.CloseRoomResponse { return &roomv1.CloseRoomResponse{RoomVersion: v} })
}

// JoinRoom implements RoomService.
func (h *RoomHandler) JoinRoom(ctx context.Context, r *connect.Request[roomv1.JoinRoomRequest]) (*connect.Response[roomv1.JoinRoomResponse], error) {
	m := r.Msg
	return mutate(ctx, h, m, &room.JoinRoom{
		Nickname: display(m.GetNickname(), false), AvatarURL: display(m.GetAvatarUrl(), false),
		Vehicle: display(m.GetVehicle(), false), EntryEffect: display(m.GetEntryEffect(), false),
	}, func(v int64) *roomv1.JoinRoomResponse { return &roomv1.JoinRoomResponse{RoomVersion: v} })
}

// LeaveRoom implements RoomService.
func (h *RoomHandler) LeaveRoom(ctx context.Context, r *connect.Request[roomv1.LeaveRoomRequest]) (*connect.Response[roomv1.LeaveRoomResponse], error) {
	return mutate(ctx, h, r.Msg, &room.LeaveRoom{},
		func(v int64) *roomv1.LeaveRoomResponse { return &roomv1.LeaveRoomResponse{RoomVersion: v} })
}

// TakeMic implements RoomService.
func (h *RoomHandler) TakeMic(ctx context.Context, r *connect.Request[roomv1.TakeMicRequest]) (*connect.Response[roomv1.TakeMicResponse], error) {
	return mutate(ctx, h, r.Msg, &room.TakeMic{SeatIndex: r.Msg.GetSeatIndex()},
		func(v int64) *roomv1.TakeMicResponse { return &roomv1.TakeMicResponse{RoomVersion: v} })
}

// LeaveMic implements RoomService.
func (h *RoomHandler) LeaveMic(ctx context.Context, r *connect.Request[roomv1.LeaveMicRequest]) (*connect.Response[roomv1.LeaveMicResponse], error) {
	return mutate(ctx, h, r.Msg, &room.LeaveMic{},
		func(v int64) *roomv1.LeaveMicResponse { return &roomv1.LeaveMicResponse{RoomVersion: v} })
}

// MoveMic implements RoomService.
func (h *RoomHandler) MoveMic(ctx context.Context, r *connect.Request[roomv1.MoveMicRequest]) (*connect.Response[roomv1.MoveMicResponse], error) {
	return mutate(ctx, h, r.Msg, &room.MoveMic{ToSeatIndex: r.Msg.GetToSeatIndex()},
		func(v int64) *roomv1.MoveMicResponse { return &roomv1.MoveMicResponse{RoomVersion: v} })
}

// KickFromMic implements RoomService.
func (h *RoomHandler) KickFromMic(ctx context.Context, r *connect.Request[roomv1.KickFromMicRequest]) (*connect.Response[roomv1.KickFromMicResponse], error) {
	return mutate(ctx, h, r.Msg, &room.KickFromMic{TargetUserID: r.Msg.GetTargetUserId()},
		func(v int64) *roomv1.KickFromMicResponse { return &roomv1.KickFromMicResponse{RoomVersion: v} })
}

// LockMicSeat implements RoomService.
func (h *RoomHandler) LockMicSeat(ctx context.Context, r *connect.Request[roomv1.LockMicSeatRequest]) (*connect.Response[roomv1.LockMicSeatResponse], error) {
	return mutate(ctx, h, r.Msg, &room.LockMicSeat{SeatIndex: r.Msg.GetSeatIndex(), Locked: r.Msg.GetLocked()},
		func(v int64) *roomv1.LockMicSeatResponse { return &roomv1.LockMicSeatResponse{RoomVersion: v} })
}

// MuteMicSeat implements RoomService.
func (h *RoomHandler) MuteMicSeat(ctx context.Context, r *connect.Request[roomv1.MuteMicSeatRequest]) (*connect.Response[roomv1.MuteMicSeatResponse], error) {
	return mutate(ctx, h, r.Msg, &room.MuteMicSeat{SeatIndex: r.Msg.GetSeatIndex(), Muted: r.Msg.GetMuted()},
		func(v int64) *roomv1.MuteMicSeatResponse { return &roomv1.MuteMicSeatResponse{RoomVersion: v} })
}

// SetMyMic implements RoomService.
func (h *RoomHandler) SetMyMic(ctx context.Context, r *connect.Request[roomv1.SetMyMicRequest]) (*connect.Response[roomv1.SetMyMicResponse], error) {
	return mutate(ctx, h, r.Msg, &room.SetMyMic{On: r.Msg.GetOn()},
		func(v int64) *roomv1.SetMyMicResponse { return &roomv1.SetMyMicResponse{RoomVersion: v} })
}

// KickUser implements RoomService.
func (h *RoomHandler) KickUser(ctx context.Context, r *connect.Request[roomv1.KickUserRequest]) (*connect.Response[roomv1.KickUserResponse], error) {
	return mutate(ctx, h, r.Msg, &room.KickUser{
		TargetUserID: r.Msg.GetTargetUserId(), DurationSeconds: r.Msg.GetDurationSeconds(), Reason: display(r.Msg.GetReason(), false),
	},
		func(v int64) *roomv1.KickUserResponse { return &roomv1.KickUserResponse{RoomVersion: v} })
}

// MuteUser implements RoomService.
func (h *RoomHandler) MuteUser(ctx context.Context, r *connect.Request[roomv1.MuteUserRequest]) (*connect.Response[roomv1.MuteUserResponse], error) {
	return mutate(ctx, h, r.Msg, &room.MuteUser{
		TargetUserID: r.Msg.GetTargetUserId(), DurationSeconds: r.Msg.GetDurationSeconds(),
		Permanent: r.Msg.GetPermanent(), Reason: display(r.Msg.GetReason(), false),
	},
		func(v int64) *roomv1.MuteUserResponse { return &roomv1.MuteUserResponse{RoomVersion: v} })
}

// UnbanUser implements RoomService.
func (h *RoomHandler) UnbanUser(ctx context.Context, r *connect.Request[roomv1.UnbanUserRequest]) (*connect.Response[roomv1.UnbanUserResponse], error) {
	return mutate(ctx, h, r.Msg, &room.UnbanUser{TargetUserID: r.Msg.GetTargetUserId()},
		func(v int64) *roomv1.UnbanUserResponse { return &roomv1.UnbanUserResponse{RoomVersion: v} })
}

// SetAdmin implements RoomService.
func (h *RoomHandler) SetAdmin(ctx context.Context, r *connect.Request[roomv1.SetAdminRequest]) (*connect.Response[roomv1.SetAdminResponse], error) {
	return mutate(ctx, h, r.Msg, &room.SetAdmin{TargetUserID: r.Msg.GetTargetUserId(), Admin: r.Msg.GetAdmin()},
		func(v int64) *roomv1.SetAdminResponse { return &roomv1.SetAdminResponse{RoomVersion: v} })
}

// UpdateProfile implements RoomService.
func (h *RoomHandler) UpdateProfile(ctx context.Context, r *connect.Request[roomv1.UpdateProfileRequest]) (*connect.Response[roomv1.UpdateProfileResponse], error) {
	m := r.Msg
	return mutate(ctx, h, m, &room.UpdateProfile{
		Title: displayPtr(m.Title, false), Notice: displayPtr(m.Notice, true), CoverURL: displayPtr(m.CoverUrl, false),
	},
		func(v int64) *roomv1.UpdateProfileResponse { return &roomv1.UpdateProfileResponse{RoomVersion: v} })
}

// ChangeBackground implements RoomService.
func (h *RoomHandler) ChangeBackground(ctx context.Context, r *connect.Request[roomv1.ChangeBackgroundRequest]) (*connect.Response[roomv1.ChangeBackgroundResponse], error) {
	return mutate(ctx, h, r.Msg, &room.ChangeBackground{BackgroundURL: display(r.Msg.GetBackgroundUrl(), false)},
		func(v int64) *roomv1.ChangeBackgroundResponse {
			return &roomv1.ChangeBackgroundResponse{RoomVersion: v}
		})
}

// SetChatEnabled implements RoomService.
func (h *RoomHandler) SetChatEnabled(ctx context.Context, r *connect.Request[roomv1.SetChatEnabledRequest]) (*connect.Response[roomv1.SetChatEnabledResponse], error) {
	return mutate(ctx, h, r.Msg, &room.SetChatEnabled{Enabled: r.Msg.GetEnabled()},
		func(v int64) *roomv1.SetChatEnabledResponse { return &roomv1.SetChatEnabledResponse{RoomVersion: v} })
}

// Bounds of GetRoomSnapshot's member list: a hot room holds tens of
// thousands of members, and one call must not copy them all.
const (
	DefaultMemberLimit = 1000
	MaxMemberLimit     = 10_000
)

// GetRoomSnapshot implements RoomService.
func (h *RoomHandler) GetRoomSnapshot(ctx context.Context, r *connect.Request[roomv1.GetRoomSnapshotRequest]) (*connect.Response[roomv1.GetRoomSnapshotResponse], error) {
	m := r.Msg
	if err := room.CheckRoomID(m.GetRoomId()); err != nil {
		return nil, toConnect(ctx, h.log, err)
	}
	if m.GetKnownVersion() < 0 || m.GetMemberLimit() < 0 || m.GetMemberLimit() > MaxMemberLimit {
		return nil, toConnect(ctx, h.log, room.Errorf(room.ErrInvalidArgument, "known_version may not be negative, member_limit must be 0..%d", MaxMemberLimit))
	}
	limit := int(m.GetMemberLimit())
	if limit == 0 {
		limit = DefaultMemberLimit
	}
	snap, err := h.engine.Snapshot(ctx, m.GetRoomId())
	if err != nil {
		return nil, toConnect(ctx, h.log, err)
	}
	out := &roomv1.GetRoomSnapshotResponse{RoomVersion: snap.GetRoomVersion()}
	if m.GetKnownVersion() != 0 && m.GetKnownVersion() == snap.GetRoomVersion() {
		out.NotModified = true
	} else {
		h.wire.answer(out, r.Header().Get("Content-Type"), snap, limit, func() *roomv1.RoomSnapshot { return snapshot.WithMemberLimit(snap, limit) })
	}
	return connect.NewResponse(out), nil
}

// ListRooms implements RoomService.
func (h *RoomHandler) ListRooms(ctx context.Context, r *connect.Request[roomv1.ListRoomsRequest]) (*connect.Response[roomv1.ListRoomsResponse], error) {
	m := r.Msg
	size, err := pageSize(m.GetPageSize())
	if err != nil {
		return nil, toConnect(ctx, h.log, err)
	}
	if m.GetOrderBy() != roomv1.RoomOrder_ROOM_ORDER_UNSPECIFIED {
		return h.listHot(ctx, m, size)
	}
	if m.GetRegion() != "" || m.GetMode() != "" {
		return nil, toConnect(ctx, h.log, room.Errorf(room.ErrInvalidArgument, "region and mode filter the hot list: set order_by"))
	}
	var want room.Status
	if m.GetStatus() != roomv1.RoomStatus_ROOM_STATUS_UNSPECIFIED {
		var ok bool
		if want, ok = snapshot.StatusFromProto(m.GetStatus()); !ok {
			return nil, toConnect(ctx, h.log, room.Errorf(room.ErrInvalidArgument, "unknown status %d", m.GetStatus()))
		}
	}
	after, err := base64.RawURLEncoding.DecodeString(m.GetPageToken())
	if err != nil {
		return nil, toConnect(ctx, h.log, room.Errorf(ErrInvalidPageToken, "bad page_token"))
	}
	rooms, err := h.rooms.ListRooms(ctx, string(after), size)
	if err != nil {
		return nil, toConnect(ctx, h.log, err)
	}
	var dir map[string]store.DirectoryRow
	if h.directory != nil && len(rooms) > 0 {
		ids := make([]string, len(rooms))
		for i, ri := range rooms {
			ids[i] = ri.Meta.RoomID
		}
		if dir, err = h.directory.GetDirectory(ctx, ids); err != nil {
			return nil, toConnect(ctx, h.log, err)
		}
	}
	out := &roomv1.ListRoomsResponse{}
	for _, ri := range rooms {
		if want != "" && room.Status(ri.Meta.Status) != want {
			continue
		}
		s := &roomv1.RoomSummary{
			RoomId: ri.Meta.RoomID, OwnerUserId: ri.Meta.OwnerUserID, HostUserId: ri.Meta.HostUserID,
			SeatCount: ri.Meta.SeatCount, Mode: ri.Meta.Mode, Status: snapshot.StatusToProto(room.Status(ri.Meta.Status)),
			RoomVersion: ri.HeadVersion, OwnerEpoch: ri.OwnerEpoch, OwnerNode: ri.OwnerNode,
		}
		if d, ok := dir[ri.Meta.RoomID]; ok {
			withDirectory(s, &d)
		}
		out.Rooms = append(out.Rooms, s)
	}
	if len(rooms) == size {
		out.NextPageToken = base64.RawURLEncoding.EncodeToString([]byte(rooms[len(rooms)-1].Meta.RoomID))
	}
	return connect.NewResponse(out), nil
}
