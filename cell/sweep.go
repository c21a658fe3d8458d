package cell

import (
	"context"
	"errors"
	"slices"
	"time"

	"hyapp/room-service/lease"
	"hyapp/room-service/room"
	"hyapp/room-service/store"
)

// The presence sweep: presence runs in loaded rooms only, so a room that
// stops being loaded with members in it (a restart, a hand-off, a
// failover, an eviction) would keep them, and list them online, until
// something loads it again, which a room whose listeners' apps all died
// never gets. Every room with members therefore has one durable timer row
// (TimerKindPresence) that brings it back to a node:
//
//   - the batch that takes the room from no member to one sets it, due a
//     sweep period later (sweepEvery), and the batch whose last member
//     leaves, or that closes the room, deletes it, in the commit that
//     changes the members;
//   - when it comes due, the timer scanner of a node that serves the room,
//     or finds another node serving it, moves it on as long as the room
//     has members, and deletes it once it has none; a room no node serves
//     is loaded where the scanner found it (unless that node is full: a
//     sweep never evicts a room), its members seen at the load, so those
//     nobody sees leave a timeout later and the room unloads empty;
//   - a room loaded with members sets it too, for rooms whose members came
//     before the sweep did.
//
// The row is moved and deleted outside batches, unfenced: a row set when
// the room is empty costs one load and is then deleted, and a deletion
// only takes a row still due when it was found, never one a join set again,
// and only where the room is loaded and its members known.

// TimerKindPresence is the kind of a room's presence sweep timer.
const TimerKindPresence = "presence_sweep"

// presenceTimerID is the id of a room's one presence sweep timer.
const presenceTimerID = "presence"

// sweepEvery is how far ahead a sweep timer lies: two presence timeouts,
// within which the members of a room loaded without a break leave one by
// one before it comes due, and at least minSweepEvery, so that the rows the
// fleet's scanners move stay few: a hundred thousand rooms with members
// move 170 rows a second.
func (p *presence) sweepEvery() time.Duration {
	return max(2*time.Duration(p.timeout)*time.Millisecond, minSweepEvery)
}

const minSweepEvery = 10 * time.Minute

// sweepTimer is the room's sweep timer, due a sweep period after now.
func (p *presence) sweepTimer(roomID string, now time.Time) store.Timer {
	return store.Timer{
		RoomID: roomID, TimerID: presenceTimerID, Kind: TimerKindPresence,
		FireAt: now.Add(p.sweepEvery()), CreatedAt: now,
	}
}

// contribute sets the room's sweep timer in the batch that takes it from no
// member to one, and deletes it in the batch whose last member leaves or
// that closes the room; the last of these in a batch decides.
func (p *presence) contribute(b *store.Batch, env *room.Envelope, events []room.Event, now time.Time) error {
	for _, ev := range events {
		switch d := ev.Data.(type) {
		case *room.RoomUserJoinedEvent:
			if d.OnlineCount == 1 {
				b.DoneTimers = slices.DeleteFunc(b.DoneTimers, func(id string) bool { return id == presenceTimerID })
				b.Timers = append(dropSweep(b.Timers), p.sweepTimer(env.RoomID, now))
			}
		case *room.RoomUserLeftEvent:
			if d.OnlineCount == 0 {
				b.Timers, b.DoneTimers = dropSweep(b.Timers), append(b.DoneTimers, presenceTimerID)
			}
		case *room.RoomClosedEvent:
			b.Timers, b.DoneTimers = dropSweep(b.Timers), append(b.DoneTimers, presenceTimerID)
		}
	}
	return nil
}

func dropSweep(ts []store.Timer) []store.Timer {
	return slices.DeleteFunc(ts, func(t store.Timer) bool { return t.TimerID == presenceTimerID })
}

// fire takes a room's due sweep timer: it loads the room here unless
// another node serves it or this node is full, then moves the timer on
// while the room has members and deletes it once it has none. A room
// another node serves has its timer moved on here all the same, so that a
// serving node that does not (a build before the sweep) leaves no row due
// for the scanners to read again.
func (p *presence) fire(ctx context.Context, roomID string, due []store.Timer) {
	r := p.reg
	ctx, cancel := context.WithTimeout(ctx, wakeTimeout)
	defer cancel()
	found := time.Time{} // the latest due time found: a row set again since is later
	for _, t := range due {
		if t.FireAt.After(found) {
			found = t.FireAt
		}
	}
	log := r.log.With("room_id", roomID)
	if r.fullFor(roomID) {
		log.Debug("a room's presence sweep is due and this node is full; left to another")
		return
	}
	c, err := r.cell(ctx, roomID, false)
	switch {
	case errors.Is(err, lease.ErrHeld):
		p.moveSweep(ctx, roomID)
		return
	case err != nil && room.AsError(err).Code == room.CodeNotFound:
		p.deleteSweep(ctx, roomID, found)
		return
	case err != nil:
		log.Warn("load a room for its members' presence; the scanner retries", "err", err)
		return
	}
	c.used.Store(r.uses.Add(1)) // loaded for its members: not the first room max_rooms evicts
	switch n, loaded := p.members(roomID); {
	case !loaded:
		// The cell is stopping: its members are not known here any more.
	case n == 0:
		p.deleteSweep(ctx, roomID, found)
	default:
		p.moveSweep(ctx, roomID)
	}
}

// moveSweep sets the room's sweep timer a sweep period from now.
func (p *presence) moveSweep(ctx context.Context, roomID string) {
	if err := p.reg.store.PutTimers(ctx, []store.Timer{p.sweepTimer(roomID, p.reg.cfg.Clock())}); err != nil && ctx.Err() == nil {
		p.reg.log.Warn("set a room's presence sweep; the scanner or the next load retries", "room_id", roomID, "err", err)
	}
}

// setSweep is moveSweep on a goroutine of its own: for a room loaded with
// members, whose members may have come before the sweep.
func (p *presence) setSweep(roomID string) {
	p.reg.wakes.spawn(func(ctx context.Context) { p.moveSweep(ctx, roomID) })
}

func (p *presence) deleteSweep(ctx context.Context, roomID string, dueBy time.Time) {
	if err := p.reg.store.DeleteTimers(ctx, roomID, []string{presenceTimerID}, dueBy); err != nil {
		p.reg.log.Warn("delete an empty room's presence sweep; the scanner retries", "room_id", roomID, "err", err)
	}
}

// members is the number of members of a room loaded here, the service's
// own operator aside (a log from before room.Envelope.CheckOrigin may make
// it one, and no expiry takes it); loaded is false when the room's members
// are not known here (it is not loaded, or its cell is stopping).
func (p *presence) members(roomID string) (n int, loaded bool) {
	rp := p.room(roomID)
	if rp == nil {
		return 0, false
	}
	rp.mu.Lock()
	defer rp.mu.Unlock()
	if rp.stopped {
		return 0, false
	}
	n = len(rp.members)
	if rp.members[room.SystemOperator] != nil {
		n--
	}
	return n, true
}
