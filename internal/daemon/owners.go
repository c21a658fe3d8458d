package daemon

import (
	"context"
	"hash/fnv"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"hyapp/room-service/lease/redislease"
	"hyapp/room-service/room"
	"hyapp/room-service/rpc"
)

// fleetOwners tells the router which node serves a room (rpc.Owners): the
// node holding the room's lease. A room nobody holds is claimed by the node
// the call reached, unless that node is leaving: then the call goes to a
// live node that is not draining, chosen by rendezvous hashing on the room
// id, so that every leaving node sends a room to the same successor. A
// member the call could not connect to, or that did not answer within the
// hop's bound, is passed over for the next best: its record is written
// before it listens, and outlives a crash by up to three lease TTLs, so a
// member is not known to serve until a hop reaches it. With every member passed over, the call is left to this node, as
// when no other member is live.
type fleetOwners struct {
	leases   *redislease.Lease
	members  *recentMembers
	self     string
	draining *atomic.Bool
}

var _ rpc.Owners = fleetOwners{}

// Owner implements rpc.Owners.
func (o fleetOwners) Owner(ctx context.Context, roomID string, unreachable []string) (string, bool, error) {
	own, found, err := o.leases.Owner(ctx, roomID)
	switch {
	case err != nil:
		return "", false, err
	case found && own.NodeID == o.self:
		return "", false, nil
	case found:
		return own.Addr, true, nil
	case !o.draining.Load():
		return "", false, nil
	}
	members, err := o.members.get(ctx)
	if err != nil {
		return "", false, err
	}
	best, bestScore := "", uint64(0)
	for _, m := range members {
		if m.NodeID == o.self || m.Draining || m.Addr == "" || slices.Contains(unreachable, m.Addr) {
			continue
		}
		if s := rendezvous(m.NodeID, roomID); best == "" || s > bestScore {
			best, bestScore = m.Addr, s
		}
	}
	return best, best != "", nil
}

// rendezvous scores a node for a room: the highest score takes it.
func rendezvous(nodeID, roomID string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(nodeID))
	_, _ = h.Write([]byte{0})
	_, _ = h.Write([]byte(roomID))
	return h.Sum64()
}

// nodeFleet is rpc.Fleet for this node: in fleet mode the membership and
// the room leases in Redis, and the node's drain; on a single node, the
// node itself from local facts.
type nodeFleet struct {
	m    *Main
	self string
}

var _ rpc.Fleet = nodeFleet{}

// InFleet implements rpc.Fleet.
func (f nodeFleet) InFleet() bool { return f.m.members != nil }

// Drain implements rpc.Fleet. The hand-off is bounded by the shutdown
// timeout, not by the caller: a caller that gives up does not cut a room's
// final snapshot short.
func (f nodeFleet) Drain(ctx context.Context, nodeID string) (int, error) {
	switch {
	case !f.InFleet():
		return 0, rpc.ErrNotInFleet
	case nodeID != f.self:
		return 0, room.Errorf(rpc.ErrNodeNotFound, "node %q: this is node %q", nodeID, f.self)
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), f.m.Config.ShutdownTimeout)
	defer cancel()
	return f.m.drain(ctx)
}

// Addr implements rpc.Fleet: from the membership, without reading leases.
func (f nodeFleet) Addr(ctx context.Context, nodeID string) (string, bool, error) {
	if !f.InFleet() {
		return f.m.Addr, nodeID == f.self, nil
	}
	members, err := f.m.members.Members(ctx)
	if err != nil {
		return "", false, room.Errorf(room.ErrUnavailable, "read the fleet's membership: %v", err)
	}
	for _, mb := range members {
		if mb.NodeID == nodeID && mb.Addr != "" {
			return mb.Addr, true, nil
		}
	}
	return "", false, nil
}

// Nodes implements rpc.Fleet. In fleet mode a node's rooms are the room
// leases it holds (not the relay's); a node that holds leases but left the
// membership is listed as gone.
func (f nodeFleet) Nodes(ctx context.Context, roomIDs bool) ([]rpc.Node, error) {
	if !f.InFleet() {
		return []rpc.Node{{ID: f.self, Addr: f.m.Addr, Rooms: f.m.registry.Loaded(), Heartbeat: time.Now()}}, nil
	}
	members, err := f.m.members.Members(ctx)
	if err != nil {
		return nil, room.Errorf(room.ErrUnavailable, "read the fleet's membership: %v", err)
	}
	leases, err := redislease.Leases(ctx, f.m.redis, redislease.Keys{Prefix: f.m.Config.RedisKeyPrefix})
	if err != nil {
		return nil, room.Errorf(room.ErrUnavailable, "read the fleet's leases: %v", err)
	}
	held := map[string][]string{} // node id → room ids
	for id, o := range leases {
		if !strings.HasPrefix(id, "relay ") { // the relay's lease of a room
			held[o.NodeID] = append(held[o.NodeID], id)
		}
	}
	nodes := make([]rpc.Node, 0, len(members))
	for _, mb := range members {
		nodes = append(nodes, rpc.Node{ID: mb.NodeID, Addr: mb.Addr, Draining: mb.Draining, Heartbeat: mb.Heartbeat})
	}
	for id := range held {
		if !slices.ContainsFunc(nodes, func(n rpc.Node) bool { return n.ID == id }) {
			nodes = append(nodes, rpc.Node{ID: id, Gone: true}) // its leases outlive its membership until they expire
		}
	}
	slices.SortFunc(nodes, func(a, b rpc.Node) int { return strings.Compare(a.ID, b.ID) })
	for i := range nodes {
		rooms := held[nodes[i].ID]
		nodes[i].Rooms = len(rooms)
		if roomIDs {
			slices.Sort(rooms)
			nodes[i].RoomIDs = rooms
		}
	}
	return nodes, nil
}

// membersEvery is how long one read of the membership serves the calls
// that need it per call (recentMembers).
const membersEvery = time.Second

// recentMembers is the fleet's membership read at most once per
// membersEvery, the last read handed out meanwhile. A read scans Redis's
// key space, every room's lease included (redislease.Members, meant for
// occasional checks), and while a node drains, each call it gets for a
// room nobody holds needs the membership. A failed read is not tried
// again before then either. A node that joined, left or began draining
// since is seen at the next read; a hop that finds one gone tries the next
// best. Safe for concurrent use.
type recentMembers struct {
	read func(ctx context.Context) ([]redislease.Member, error)

	mu     sync.Mutex // one read at a time; guards the rest
	nodes  []redislease.Member
	err    error
	readAt time.Time
}

func newRecentMembers(read func(ctx context.Context) ([]redislease.Member, error)) *recentMembers {
	return &recentMembers{read: read}
}

// get returns the membership as last read, reading it first (within ctx)
// when the last read is membersEvery old. The slice is shared: callers
// must not modify it.
func (r *recentMembers) get(ctx context.Context) ([]redislease.Member, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if now := time.Now(); r.readAt.IsZero() || now.Before(r.readAt) || now.Sub(r.readAt) >= membersEvery {
		nodes, err := r.read(ctx)
		if ctx.Err() != nil {
			return nil, err // the caller's deadline, not the fleet's answer: not kept
		}
		r.nodes, r.err, r.readAt = nodes, err, time.Now()
	}
	return r.nodes, r.err
}
