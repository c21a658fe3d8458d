// Package lease decides which node runs a room. A lease is an efficiency
// lock for routing and avoiding double work; it is not the fence: every
// commit is fenced by the owner epoch in the database.
package lease

import (
	"context"
	"sync"

	"hyapp/room-service/room"
)

// Errors of the lease, declared together. Each is retryable (unavailable).
var (
	// ErrHeld is returned by Acquire when another holder has the room.
	ErrHeld = &room.Error{Code: room.CodeUnavailable, Reason: "room_leased_elsewhere", Message: "another owner holds the room's lease"}
	// ErrLost is returned by Handle.Check once the lease is no longer this
	// handle's: another holder took it, or the handle was released.
	ErrLost = &room.Error{Code: room.CodeUnavailable, Reason: "room_lease_lost", Message: "this node no longer holds the room's lease"}
	// ErrUnavailable is returned by Acquire when the shared lease store
	// cannot be reached: no new room is taken while nobody can tell who
	// holds it.
	ErrUnavailable = &room.Error{Code: room.CodeUnavailable, Reason: "lease_unavailable", Message: "the lease store is unreachable; retry"}
)

// Handle is one held lease.
type Handle interface {
	// Lost is closed when the lease can no longer be trusted (a renewal
	// failed or another holder took it). The holder must stop serving the room.
	Lost() <-chan struct{}
	// Release gives the lease up if it is still this handle's. It is idempotent.
	Release(ctx context.Context) error
	// Check tells whether the handle may still act for the room; the holder
	// calls it before each commit. It is cheap while the lease is known to
	// be valid and otherwise asks the lease store at once. It returns
	// ErrLost only when the lease is known to be someone else's (or was
	// released); an unreachable store is not an error, because the
	// database's owner epoch fences any overlap. Safe for concurrent use.
	Check(ctx context.Context) error
	// Fresh reports whether the lease is known to be this handle's now: no
	// other holder can have taken it since it was last renewed. Unlike
	// Check it never asks the lease store, and an unreachable store does
	// not make it true: a holder that no database fences (the outbox
	// relay) stops acting when it is not, and asks Check to renew it.
	// Cheap; safe for concurrent use.
	Fresh() bool
}

// Lease hands out per-room leases.
type Lease interface {
	// Acquire takes the room's lease or returns ErrHeld (another holder has
	// it) or ErrUnavailable (a shared lease store cannot be reached). Safe
	// for concurrent use.
	Acquire(ctx context.Context, roomID string) (Handle, error)
}

// Local is the in-process lease of a single node: one holder per room within
// the process.
type Local struct {
	mu   sync.Mutex
	held map[string]*localHandle
}

var _ Lease = (*Local)(nil)

// NewLocal returns an empty in-process lease table.
func NewLocal() *Local { return &Local{held: make(map[string]*localHandle)} }

// Acquire implements Lease.
func (l *Local) Acquire(_ context.Context, roomID string) (Handle, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.held[roomID]; ok {
		return nil, ErrHeld
	}
	h := &localHandle{owner: l, roomID: roomID, lost: make(chan struct{})}
	l.held[roomID] = h
	return h, nil
}

type localHandle struct {
	owner  *Local
	roomID string
	lost   chan struct{}
}

func (h *localHandle) Lost() <-chan struct{} { return h.lost }

// Check implements Handle: a local lease is never taken away, so it only
// tells a released handle apart.
func (h *localHandle) Check(context.Context) error {
	h.owner.mu.Lock()
	defer h.owner.mu.Unlock()
	if h.owner.held[h.roomID] != h {
		return ErrLost
	}
	return nil
}

// Fresh implements Handle: a local lease never runs out.
func (h *localHandle) Fresh() bool { return true }

func (h *localHandle) Release(context.Context) error {
	h.owner.mu.Lock()
	defer h.owner.mu.Unlock()
	if h.owner.held[h.roomID] == h {
		delete(h.owner.held, h.roomID)
	}
	return nil
}
