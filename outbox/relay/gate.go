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
func (l heldLease) Fresh() bool           { return l.h.Fresh() }
func (l heldLease) Release()              { _ = l.h.Release(l.ctx) }

// Check implements Held: a lease that is not fresh is renewed now, and the
// relay goes on only if that made it fresh (an unreachable lease store does
// not: the rows wait, pending, until it answers).
func (l heldLease) Check(ctx context.Context) error {
	if l.h.Fresh() {
		return nil
	}
	if err := l.h.Check(ctx); err != nil {
		return err
	}
	if !l.h.Fresh() {
		return lease.ErrUnavailable
	}
	return nil
}
