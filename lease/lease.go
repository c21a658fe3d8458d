// Package lease decides which node runs a room. A lease is an efficiency
// lock for routing and avoiding double work; it is not the fence: every
// commit is fenced by the owner epoch in the database.
package lease

import (
	"context"
	"sync"

	"hyapp/room-service/room"
)

// ErrHeld is returned by Acquire when another holder has the room.
var ErrHeld = &room.Error{Code: room.CodeUnavailable, Reason: "room_leased_elsewhere", Message: "another owner holds the room's lease"}

// Handle is one held lease.
type Handle interface {
	// Lost is closed when the lease can no longer be trusted (a renewal
	// failed or another holder took it). The holder must stop serving the room.
	Lost() <-chan struct{}
	// Release gives the lease up if it is still this handle's. It is idempotent.
	Release(ctx context.Context) error
}

// Lease hands out per-room leases.
type Lease interface {
	// Acquire takes the room's lease or returns ErrHeld. Safe for concurrent use.
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

func (h *localHandle) Release(context.Context) error {
	h.owner.mu.Lock()
	defer h.owner.mu.Unlock()
	if h.owner.held[h.roomID] == h {
		delete(h.owner.held, h.roomID)
	}
	return nil
}
