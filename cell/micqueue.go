package cell

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"time"

	"hyapp/room-service/lease"
	"hyapp/room-service/room"
)

// Expiry of mic requests and invitations.
//
// The domain treats an entry whose expiry has passed as absent; removing it
// is the internal ExpireMicQueue command, so that the removal is logged,
// replayed, in the snapshot and shown through IM like any other change.
// micExpiry is the feature that submits it: while a room is loaded it keeps
// the expiry of each pending entry in memory (all of them when the room
// loads, then from the RoomMicRequestChanged and RoomMicInviteChanged
// events of each committed batch) and one timer for the earliest. When it
// fires, a wakeup submits ExpireMicQueue through the registry like any
// client, with a command id naming the expiry it is for, so a second wakeup
// for the same expiry is a duplicate.
//
// No timer row is written: the entries are in the room's state, so a room
// that loads (on this node or the next) arms its timer from them and
// submits at once what expired while nobody served it. Until then nobody
// can act on such an entry either: every command treats it as absent.
type micExpiry struct {
	reg *Registry

	mu    sync.Mutex
	rooms map[string]*micTimer // of the rooms loaded on this node
}

func newMicExpiry(reg *Registry) *micExpiry {
	return &micExpiry{reg: reg, rooms: make(map[string]*micTimer)}
}

func (x *micExpiry) feature() Feature {
	return Feature{Loaded: x.loaded, Committed: x.committed, Stopped: x.stopped}
}

// micRetry holds back a wakeup that failed (a full mailbox, a room
// reloading) before the room's timer tries again.
const micRetry = time.Second

// MicExpiryCommandID is the command id of the ExpireMicQueue submitted for
// entries expiring at (unix ms): unique in the room, as every later entry
// expires later.
func MicExpiryCommandID(at int64) string { return room.MicExpiryIDPrefix + strconv.FormatInt(at, 10) }

// micKey names one entry: a request or an invitation, and its user.
type micKey struct {
	invite bool
	user   int64
}

// micTimer is one loaded room's pending expiries and its timer. It is not
// room state: the timer and the wakeup run on goroutines of their own,
// hence the mutex.
type micTimer struct {
	x      *micExpiry
	roomID string

	mu        sync.Mutex
	stopped   bool
	running   bool             // a wakeup is submitting
	expiry    map[micKey]int64 // unix ms each entry expires at
	notBefore int64            // unix ms: a failed wakeup holds the next back
	timer     *time.Timer
}

func (x *micExpiry) timerOf(roomID string) *micTimer {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.rooms[roomID]
}

// loaded replaces the room's expiries with those of its state; those
// already past are submitted at once.
func (x *micExpiry) loaded(s *room.State) {
	x.mu.Lock()
	mt := x.rooms[s.RoomID]
	if mt == nil {
		mt = &micTimer{x: x, roomID: s.RoomID}
		x.rooms[s.RoomID] = mt
	}
	x.mu.Unlock()
	mt.mu.Lock()
	defer mt.mu.Unlock()
	mt.expiry = make(map[micKey]int64, len(s.MicRequests)+len(s.MicInvites))
	for _, e := range s.MicRequests {
		mt.expiry[micKey{false, e.UserID}] = e.ExpiresAt
	}
	for _, e := range s.MicInvites {
		mt.expiry[micKey{true, e.UserID}] = e.ExpiresAt
	}
	mt.notBefore = 0
	mt.schedule()
}

// committed follows the entries the batch added or removed. Any batch of
// a room with entries also sets its timer again, from the clock now: a
// clock that stepped forward brings the expiry forward with it.
func (x *micExpiry) committed(batch []room.Committed) {
	if len(batch) == 0 {
		return
	}
	mt := x.timerOf(batch[0].RoomID)
	if mt == nil {
		return
	}
	defer mt.reschedule()
	for _, c := range batch {
		for _, ev := range c.Events {
			var key micKey
			var pending bool
			var expires int64
			switch d := ev.Data.(type) {
			case *room.RoomMicRequestChangedEvent:
				key, pending, expires = micKey{false, d.UserID}, d.Pending, d.ExpiresAt
			case *room.RoomMicInviteChangedEvent:
				key, pending, expires = micKey{true, d.UserID}, d.Pending, d.ExpiresAt
			case *room.RoomClosedEvent:
				mt.clear() // closing drops the queue without an event per entry
				continue
			default:
				continue
			}
			mt.set(key, pending, expires)
		}
	}
}

// stopped forgets the room's expiries; its next load arms them again.
func (x *micExpiry) stopped(roomID string) {
	x.mu.Lock()
	mt := x.rooms[roomID]
	delete(x.rooms, roomID)
	x.mu.Unlock()
	if mt != nil {
		mt.mu.Lock()
		mt.stopped = true
		mt.schedule()
		mt.mu.Unlock()
	}
}

func (mt *micTimer) now() int64 { return mt.x.reg.cfg.Clock().UnixMilli() }

// set records an entry's expiry, or forgets the entry; committed
// reschedules once the batch is followed.
func (mt *micTimer) set(key micKey, pending bool, expires int64) {
	mt.mu.Lock()
	defer mt.mu.Unlock()
	if pending {
		mt.expiry[key] = expires
	} else {
		delete(mt.expiry, key)
	}
}

func (mt *micTimer) reschedule() {
	mt.mu.Lock()
	defer mt.mu.Unlock()
	mt.schedule()
}

func (mt *micTimer) clear() {
	mt.mu.Lock()
	defer mt.mu.Unlock()
	clear(mt.expiry)
}

// next returns the earliest expiry, 0 when there is none. mt.mu is held.
func (mt *micTimer) next() int64 {
	next := int64(0)
	for _, at := range mt.expiry {
		if next == 0 || at < next {
			next = at
		}
	}
	return next
}

// schedule sets the timer for the earliest expiry (no sooner than
// notBefore); the running wakeup schedules when it ends. mt.mu is held.
func (mt *micTimer) schedule() {
	next := mt.next()
	switch {
	case mt.stopped || next == 0:
		if mt.timer != nil {
			mt.timer.Stop()
		}
		return
	case mt.running:
		return
	}
	d := time.Duration(max(max(next, mt.notBefore)-mt.now(), 0)) * time.Millisecond
	if mt.timer == nil {
		mt.timer = time.AfterFunc(d, mt.fire)
	} else {
		mt.timer.Reset(d)
	}
}

// fire starts a wakeup for the earliest expiry, if it has come.
func (mt *micTimer) fire() {
	mt.mu.Lock()
	defer mt.mu.Unlock()
	if mt.stopped || mt.running {
		return
	}
	due := mt.next()
	if due == 0 {
		return
	}
	if now := mt.now(); due > now || mt.notBefore > now {
		mt.schedule() // early: clocks disagree
		return
	}
	mt.running = true
	mt.x.reg.wakes.spawn(func(ctx context.Context) { mt.wake(ctx, due) })
}

// wake submits ExpireMicQueue for the entries expiring at due and acts on
// the answer.
func (mt *micTimer) wake(ctx context.Context, due int64) {
	ctx, cancel := context.WithTimeout(ctx, wakeTimeout)
	defer cancel()
	r := mt.x.reg
	_, err := r.Submit(ctx, &room.Envelope{
		RoomID: mt.roomID, CommandID: MicExpiryCommandID(due),
		Operator: room.SystemOperator, Platform: true, Command: &room.ExpireMicQueue{},
	})
	retry := false
	var code room.Code
	if err != nil {
		code = room.AsError(err).Code
	}
	switch {
	case err == nil, errors.Is(err, room.ErrMicQueueNotDue), errors.Is(err, room.ErrCommandIDConflict):
		// Committed (its events removed the entries), or the room holds no
		// entry this timer still knew of.
	case errors.Is(err, lease.ErrHeld):
		// Another node serves the room; its cell arms its own timer.
	case code == room.CodeRejected, code == room.CodeInvalid, code == room.CodeNotFound, code == room.CodePermission:
		// The room refuses for good (closed, gone).
	default:
		retry = true
		r.log.Warn("mic queue expiry failed; retrying", "room_id", mt.roomID, "err", err)
	}
	mt.mu.Lock()
	defer mt.mu.Unlock()
	mt.running = false
	if retry {
		mt.notBefore = mt.now() + micRetry.Milliseconds()
	} else {
		// What the room removed, or never held, is done with.
		for k, at := range mt.expiry {
			if at <= due {
				delete(mt.expiry, k)
			}
		}
	}
	mt.schedule()
}
