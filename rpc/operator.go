package rpc

import (
	"context"
	"log/slog"
	"time"

	"connectrpc.com/connect"

	roomv1 "hyapp/room-service/gen/room/v1"
	"hyapp/room-service/gen/room/v1/roomv1connect"
	"hyapp/room-service/room"
	"hyapp/room-service/snapshot"
	"hyapp/room-service/store"
)

// OperatorStore is what OperatorHandler reads and repairs in storage (a
// store.Repository serves it).
type OperatorStore interface {
	// GetRoomMeta reads a room's metadata; found is false when the room does not exist.
	GetRoomMeta(ctx context.Context, roomID string) (store.RoomMeta, bool, error)
	// ListCommandsAfter returns the room's commands with RoomVersion > roomVersion in version order.
	ListCommandsAfter(ctx context.Context, roomID string, roomVersion int64) ([]store.CommandRecord, error)
	// GetLatestSnapshot reads the room's snapshot; found is false when there is none.
	GetLatestSnapshot(ctx context.Context, roomID string) (store.SnapshotRecord, bool, error)
	// OutboxStats summarises the outbox.
	OutboxStats(ctx context.Context) (store.OutboxStats, error)
	// RequeueDeadOutbox makes dead rows pending again, all or those of eventType, and returns how many.
	RequeueDeadOutbox(ctx context.Context, eventType string) (int, error)
}

// OperatorHandler implements room.v1.OperatorService: read-only views of a
// room's durable history, and requeueing dead outbox rows.
type OperatorHandler struct {
	repo OperatorStore
	log  *slog.Logger
	wake func() // tells the outbox relay that rows are due; may be nil
}

var _ roomv1connect.OperatorServiceHandler = (*OperatorHandler)(nil)

// NewOperatorHandler returns the OperatorService handler. wake, if set, is
// called when requeued rows are due, so the outbox relay picks them up at once.
func NewOperatorHandler(repo OperatorStore, wake func(), log *slog.Logger) *OperatorHandler {
	return &OperatorHandler{repo: repo, wake: wake, log: log}
}

// Limits of ListCommands.
const (
	defaultCommandLimit = 1000
	maxCommandLimit     = 10000
)

// ListCommands implements OperatorService.
func (h *OperatorHandler) ListCommands(ctx context.Context, r *connect.Request[roomv1.ListCommandsRequest]) (*connect.Response[roomv1.ListCommandsResponse], error) {
	m := r.Msg
	if err := room.CheckRoomID(m.GetRoomId()); err != nil {
		return nil, toConnect(ctx, h.log, err)
	}
	limit := int(m.GetLimit())
	switch {
	case limit < 0 || limit > maxCommandLimit || m.GetAfterVersion() < 0:
		return nil, toConnect(ctx, h.log, room.Errorf(room.ErrInvalidArgument, "limit must be 0..%d and after_version not negative", maxCommandLimit))
	case limit == 0:
		limit = defaultCommandLimit
	}
	if _, found, err := h.repo.GetRoomMeta(ctx, m.GetRoomId()); err != nil || !found {
		if err == nil {
			err = room.ErrRoomNotFound
		}
		return nil, toConnect(ctx, h.log, err)
	}
	recs, err := h.repo.ListCommandsAfter(ctx, m.GetRoomId(), m.GetAfterVersion())
	if err != nil {
		return nil, toConnect(ctx, h.log, err)
	}
	out := &roomv1.ListCommandsResponse{HeadVersion: m.GetAfterVersion()}
	if n := len(recs); n > 0 {
		out.HeadVersion = recs[n-1].RoomVersion
	}
	for _, c := range recs[:min(limit, len(recs))] {
		out.Commands = append(out.Commands, &roomv1.CommandLogEntry{
			RoomVersion: c.RoomVersion, CommandId: c.CommandID, CommandType: c.CommandType,
			PayloadJson: string(c.Payload), Replayable: c.Replayable, CreatedAtMs: c.CreatedAt.UnixMilli(),
		})
	}
	return connect.NewResponse(out), nil
}

// GetStoredSnapshot implements OperatorService.
func (h *OperatorHandler) GetStoredSnapshot(ctx context.Context, r *connect.Request[roomv1.GetStoredSnapshotRequest]) (*connect.Response[roomv1.GetStoredSnapshotResponse], error) {
	if err := room.CheckRoomID(r.Msg.GetRoomId()); err != nil {
		return nil, toConnect(ctx, h.log, err)
	}
	rec, found, err := h.repo.GetLatestSnapshot(ctx, r.Msg.GetRoomId())
	if err != nil {
		return nil, toConnect(ctx, h.log, err)
	}
	out := &roomv1.GetStoredSnapshotResponse{Found: found}
	if found {
		st, err := snapshot.Decode(rec.Payload)
		if err != nil {
			return nil, toConnect(ctx, h.log, err)
		}
		out.Snapshot = snapshot.ToProto(st)
	}
	return connect.NewResponse(out), nil
}

// GetOutboxStatus implements OperatorService.
func (h *OperatorHandler) GetOutboxStatus(ctx context.Context, _ *connect.Request[roomv1.GetOutboxStatusRequest]) (*connect.Response[roomv1.GetOutboxStatusResponse], error) {
	st, err := h.repo.OutboxStats(ctx)
	if err != nil {
		return nil, toConnect(ctx, h.log, err)
	}
	out := &roomv1.GetOutboxStatusResponse{Pending: st.Pending, Dead: st.Dead, Published: st.Published}
	if !st.OldestPending.IsZero() {
		out.OldestPendingAgeMs = max(time.Since(st.OldestPending).Milliseconds(), 0)
	}
	return connect.NewResponse(out), nil
}

// RequeueDeadOutbox implements OperatorService.
func (h *OperatorHandler) RequeueDeadOutbox(ctx context.Context, r *connect.Request[roomv1.RequeueDeadOutboxRequest]) (*connect.Response[roomv1.RequeueDeadOutboxResponse], error) {
	if err := room.CheckEventType(r.Msg.GetEventType()); err != nil {
		return nil, toConnect(ctx, h.log, err)
	}
	n, err := h.repo.RequeueDeadOutbox(ctx, r.Msg.GetEventType())
	if err != nil {
		return nil, toConnect(ctx, h.log, err)
	}
	if n > 0 && h.wake != nil {
		h.wake()
	}
	return connect.NewResponse(&roomv1.RequeueDeadOutboxResponse{Requeued: int64(n)}), nil
}
