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
//   - the batch that takes the room from no member to one sets it, due
//     sweepRounds presence timeouts later, and the batch whose last member
//     leaves, or that closes the room, deletes it, in the commit that
//     changes the members;
//   - when it comes due, the timer scanner of the node that serves the room
//     moves it on as long as the room has members, and deletes it once it
//     has none; a room no node serves is loaded where the scanner found it,
//     its members seen at the load, so those nobody sees leave a timeout
//     later and the room unloads empty;
//   - a room loaded with members sets it too, for rooms whose members came
//     before the sweep did.
//
// The row is moved and deleted outside batches, unfenced: a row set when
// the room is empty costs one load and is then deleted, and a deletion
// only takes a row still due when it was found, never one a join set again.

// TimerKindPresence is the kind of a room's presence sweep timer.
const TimerKindPresence = "presence_sweep"

// presenceTimerID is the id of a room's one presence sweep timer.
const presenceTimerID = "presence"

// sweepRounds is how many presence timeouts a sweep timer lies ahead: in
// a room loaded without a break its members leave, one by one, before it
// comes due, and a room that lost its node is loaded again within that.
const sweepRounds = 2

// sweepTimer is the room's sweep timer, due sweepRounds presence timeouts
// after now.
func (p *presence) sweepTimer(roomID string, now time.Time) store.Timer {
	return store.Timer{
		RoomID: roomID, TimerID: presenceTimerID, Kind: TimerKindPresence,
		FireAt: now.Add(sweepRounds * time.Duration(p.timeout) * time.Millisecond), CreatedAt: now,
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
// another node serves it, then moves the timer on while the room has
// members and deletes it once it has none.
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
	if _, err := r.cell(ctx, roomID, false); err != nil {
		switch {
		case errors.Is(err, lease.ErrHeld):
			// Another node serves the room: its scanner moves the timer.
		case room.AsError(err).Code == room.CodeNotFound:
			p.deleteSweep(ctx, roomID, found)
		default:
			log.Warn("load a room for its members' presence; the scanner retries", "err", err)
		}
		return
	}
	if p.members(roomID) == 0 {
		p.deleteSweep(ctx, roomID, found)
		return
	}
	if err := r.store.PutTimers(ctx, []store.Timer{p.sweepTimer(roomID, r.cfg.Clock())}); err != nil {
		log.Warn("move a room's presence sweep on; the scanner retries", "err", err)
	}
}

// setSweep sets the room's sweep timer, on a goroutine of its own: for a
// room loaded with members, whose members may have come before the sweep.
func (p *presence) setSweep(roomID string) {
	p.reg.wakes.spawn(func(ctx context.Context) {
		if err := p.reg.store.PutTimers(ctx, []store.Timer{p.sweepTimer(roomID, p.reg.cfg.Clock())}); err != nil && ctx.Err() == nil {
			p.reg.log.Warn("set a loaded room's presence sweep", "room_id", roomID, "err", err)
		}
	})
}

func (p *presence) deleteSweep(ctx context.Context, roomID string, dueBy time.Time) {
	if err := p.reg.store.DeleteTimers(ctx, roomID, []string{presenceTimerID}, dueBy); err != nil {
		p.reg.log.Warn("delete an empty room's presence sweep; the scanner retries", "room_id", roomID, "err", err)
	}
}

// members is the number of members of a room loaded here (0 when it is not).
func (p *presence) members(roomID string) int {
	rp := p.room(roomID)
	if rp == nil {
		return 0
	}
	rp.mu.Lock()
	defer rp.mu.Unlock()
	return len(rp.members)
}
