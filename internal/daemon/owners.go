package daemon

import (
	"context"
	"hash/fnv"
	"sync/atomic"

	"hyapp/room-service/lease/redislease"
	"hyapp/room-service/rpc"
)

// fleetOwners tells the router which node serves a room (rpc.Owners): the
// node holding the room's lease. A room nobody holds is claimed by the node
// the call reached, unless that node is leaving: then the call goes to a
// live node that is not draining, chosen by rendezvous hashing on the room
// id, so that every leaving node sends a room to the same successor.
type fleetOwners struct {
	leases   *redislease.Lease
	members  *redislease.Membership
	self     string
	draining *atomic.Bool
}

var _ rpc.Owners = fleetOwners{}

// Owner implements rpc.Owners.
func (o fleetOwners) Owner(ctx context.Context, roomID string) (string, bool, error) {
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
	members, err := o.members.Members(ctx)
	if err != nil {
		return "", false, err
	}
	best, bestScore := "", uint64(0)
	for _, m := range members {
		if m.NodeID == o.self || m.Draining || m.Addr == "" {
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
