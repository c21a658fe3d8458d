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
	// ListCommandsPage returns at most limit of the room's commands with
	// RoomVersion > roomVersion in version order, and the room's head version.
	ListCommandsPage(ctx context.Context, roomID string, roomVersion int64, limit int) ([]store.CommandRecord, int64, error)
	// GetLatestSnapshot reads the room's snapshot; found is false when there is none.
	GetLatestSnapshot(ctx context.Context, roomID string) (store.SnapshotRecord, bool, error)
	// OutboxStats summarises the outbox.
	OutboxStats(ctx context.Context, countPublished int64) (store.OutboxStats, error)
	// RequeueDeadOutbox makes dead rows pending again, all or those of eventType, and returns how many.
	RequeueDeadOutbox(ctx context.Context, eventType string) (int, error)
}

// OperatorHandler implements room.v1.OperatorService: read-only views of a
// room's durable history, requeueing dead outbox rows, and the fleet's
// nodes (list, drain).
type OperatorHandler struct {
	repo  OperatorStore
	log   *slog.Logger
	wake  func() // tells the outbox relay that rows are due; may be nil
	fleet Fleet  // set by NewMux from Options.Fleet; nil: Drain answers not_in_fleet, ListNodes lists nothing
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
	recs, head, err := h.repo.ListCommandsPage(ctx, m.GetRoomId(), m.GetAfterVersion(), limit)
	if err != nil {
		return nil, toConnect(ctx, h.log, err)
	}
	out := &roomv1.ListCommandsResponse{HeadVersion: max(head, m.GetAfterVersion())}
	for _, c := range recs {
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

// statusPublishedCount is the most published rows GetOutboxStatus counts:
// MariaDB reads a million in about 0.7 s. Past it the status says "more".
const statusPublishedCount = 1_000_000

// GetOutboxStatus implements OperatorService.
func (h *OperatorHandler) GetOutboxStatus(ctx context.Context, _ *connect.Request[roomv1.GetOutboxStatusRequest]) (*connect.Response[roomv1.GetOutboxStatusResponse], error) {
	st, err := h.repo.OutboxStats(ctx, statusPublishedCount)
	if err != nil {
		return nil, toConnect(ctx, h.log, err)
	}
	out := &roomv1.GetOutboxStatusResponse{Pending: st.Pending, Dead: st.Dead, Published: st.Published, PublishedMore: st.PublishedMore}
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

// Node is one node of the fleet, as the fleet's membership shows it.
type Node struct {
	ID        string
	Addr      string // host:port; "" for a node that is gone
	Rooms     int    // rooms whose lease it holds
	Draining  bool
	Heartbeat time.Time // its last heartbeat, by its clock
	Gone      bool      // it holds leases but left the membership
	RoomIDs   []string  // the rooms it holds, when asked for
}

// Fleet is this node's view and control of the fleet. The daemon adapts
// the fleet's membership and this node's rooms to it.
type Fleet interface {
	// InFleet tells whether the service runs as a fleet, not a single node.
	InFleet() bool
	// Nodes lists the nodes ordered by id, with their room ids if
	// roomIDs; a single node lists itself.
	Nodes(ctx context.Context, roomIDs bool) ([]Node, error)
	// Addr returns the API address of the live node nodeID; found is false
	// when no live node has that id.
	Addr(ctx context.Context, nodeID string) (addr string, found bool, err error)
	// Drain drains this node, nodeID: it marks the node draining and
	// hands off every room it holds, keeping the node up as a router, and
	// returns the rooms handed off, 0 when the node was drained already.
	// A single node answers ErrNotInFleet, another id ErrNodeNotFound
	// (the router sends a call to the node it names), and both change
	// nothing.
	Drain(ctx context.Context, nodeID string) (int, error)
}

// Errors of the fleet's operator calls.
var (
	// ErrNodeNotFound: no live node has the id.
	ErrNodeNotFound = &room.Error{Code: room.CodeNotFound, Reason: "node_not_found", Message: "no live node has this id"}
	// ErrNotInFleet: the service runs as a single node (no redis_url).
	ErrNotInFleet = &room.Error{Code: room.CodeRejected, Reason: "not_in_fleet", Message: "the service runs as a single node"}
)

// maxNodeID bounds a node id.
const maxNodeID = 128

// checkNodeID refuses an empty or oversized node id.
func checkNodeID(id string) error {
	if id == "" || len(id) > maxNodeID {
		return room.Errorf(room.ErrInvalidArgument, "node_id must be 1..%d bytes", maxNodeID)
	}
	return nil
}

// Drain implements OperatorService. The router sends the call to the node
// it names, which drains itself.
func (h *OperatorHandler) Drain(ctx context.Context, r *connect.Request[roomv1.DrainRequest]) (*connect.Response[roomv1.DrainResponse], error) {
	id := r.Msg.GetNodeId()
	if err := checkNodeID(id); err != nil {
		return nil, toConnect(ctx, h.log, err)
	}
	if h.fleet == nil {
		return nil, toConnect(ctx, h.log, ErrNotInFleet)
	}
	n, err := h.fleet.Drain(ctx, id)
	if err != nil {
		return nil, toConnect(ctx, h.log, err)
	}
	h.log.InfoContext(ctx, "node drained", "node_id", id, "rooms_handed_off", n)
	return connect.NewResponse(&roomv1.DrainResponse{NodeId: id, RoomsHandedOff: int64(n)}), nil
}

// ListNodes implements OperatorService.
func (h *OperatorHandler) ListNodes(ctx context.Context, r *connect.Request[roomv1.ListNodesRequest]) (*connect.Response[roomv1.ListNodesResponse], error) {
	out := &roomv1.ListNodesResponse{}
	if h.fleet == nil {
		return connect.NewResponse(out), nil
	}
	out.Fleet = h.fleet.InFleet()
	nodes, err := h.fleet.Nodes(ctx, r.Msg.GetRoomIds())
	if err != nil {
		return nil, toConnect(ctx, h.log, err)
	}
	for _, n := range nodes {
		fn := &roomv1.FleetNode{NodeId: n.ID, Addr: n.Addr, Rooms: int64(n.Rooms), Draining: n.Draining, Gone: n.Gone, RoomIds: n.RoomIDs}
		if !n.Heartbeat.IsZero() {
			fn.HeartbeatMs = n.Heartbeat.UnixMilli()
		}
		out.Nodes = append(out.Nodes, fn)
	}
	return connect.NewResponse(out), nil
}
