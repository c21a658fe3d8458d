package relay

import (
	"context"

	"hyapp/room-service/lease"
)

// LeaseGate lets a relay publish a room only while it holds the room's relay
// lease ("relay <room_id>": room ids hold no spaces, so this never names a
// room). With the in-process lease it keeps the relays of one process apart;
// with a shared lease it keeps every node's relay apart, so a node's relay
// and a sweeper never publish one room at once.
type LeaseGate struct {
	Lease lease.Lease
}

var _ Gate = LeaseGate{}

// Acquire implements Gate.
func (g LeaseGate) Acquire(ctx context.Context, roomID string) (Held, bool) {
	h, err := g.Lease.Acquire(ctx, "relay "+roomID)
	if err != nil {
		return nil, false
	}
	return heldLease{h: h, ctx: context.WithoutCancel(ctx)}, true
}

type heldLease struct {
	h   lease.Handle
	ctx context.Context
}

func (l heldLease) Lost() <-chan struct{} { return l.h.Lost() }
func (l heldLease) Release()              { _ = l.h.Release(l.ctx) }
