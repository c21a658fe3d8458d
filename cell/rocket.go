package cell

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync"
	"time"

	"hyapp/room-service/lease"
	"hyapp/room-service/room"
	"hyapp/room-service/store"
)

// Durable rocket launch timers.
//
// An ignition commits, in its batch, a timer row (store.Timer) that names
// the LaunchRocket command due at the launch time; the launch's batch
// deletes the row. While the room is loaded, the cell keeps its pending
// launches in memory (added after the ignition commits, and every pending
// launch of a recovered or reloaded room) with one timer for the earliest.
// When it fires, one wakeup submits every due launch in launch order
// (launch time, then rocket id), each after the one before it committed,
// so launches due together, or overdue after a restart, commit in that
// order. A scanner (RunTimers) finds the rows of rooms no node serves (a
// crash between ignition and launch, a room passivated with a launch
// pending) and hands them to the room's cell, loading it. A wakeup submits
// LaunchRocket through the registry like any client, with a command id of
// its own per rocket, so a second wakeup of a launched rocket is a
// duplicate and changes nothing. The domain revalidates the rocket (id,
// level, launch time, business day) against the state; the lease and the
// owner epoch decide who may commit.
//
// rocketLaunches is the feature that does all of this: it adds the timer
// rows to the batches (Contribute), keeps each loaded room's launches in
// memory (Loaded, Committed, Stopped) and fires the rows the scanner finds
// (Fire).
type rocketLaunches struct {
	reg *Registry // submits launches, loads rooms, runs wakeups

	mu    sync.Mutex
	rooms map[string]*launchTimers // of the rooms loaded on this node
}

func newRocketLaunches(reg *Registry) *rocketLaunches {
	return &rocketLaunches{reg: reg, rooms: make(map[string]*launchTimers)}
}

func (rk *rocketLaunches) feature() Feature {
	return Feature{
		Contribute: rk.contribute, Loaded: rk.loaded, Committed: rk.committed, Stopped: rk.stopped,
		TimerKind: TimerKindRocketLaunch, Fire: rk.fire,
	}
}

// timers returns the in-memory launches of a room loaded here, or nil.
func (rk *rocketLaunches) timers(roomID string) *launchTimers {
	rk.mu.Lock()
	defer rk.mu.Unlock()
	return rk.rooms[roomID]
}

// TimerKindRocketLaunch is the kind of a rocket launch timer; its payload
// is the JSON of the room.LaunchRocket command to submit.
const TimerKindRocketLaunch = "rocket_launch"

const (
	// wakeTimeout bounds one wakeup: its Submit and its cleanup.
	wakeTimeout = 30 * time.Second
	// minRearm is the least delay of an in-memory timer re-armed after an
	// early wakeup, so that clocks that disagree cannot make it spin.
	minRearm = 50 * time.Millisecond
	// launchRetry holds back a launch whose wakeup failed (a full mailbox, a
	// room reloading) before its cell submits it again.
	launchRetry = time.Second
)

// Wakeup results, the label of Metrics.RocketWakeups.
const (
	wakeLaunched   = "launched"    // the launch committed
	wakeDuplicate  = "duplicate"   // the launch had committed already
	wakeNotDue     = "not_due"     // too early: re-armed in memory
	wakeStale      = "stale"       // ignited before a daily reset: row deleted
	wakeNotPending = "not_pending" // no such launch waits, or the room refuses it for good: row deleted
	wakeForeign    = "foreign"     // another node holds the room: row left to its owner
	wakeError      = "error"       // storage, shutdown, a busy room: row left for the scanner
)

// RocketTimerID is the timer id of a rocket's launch, unique in its room.
func RocketTimerID(rocketID int64) string { return "rocket/" + strconv.FormatInt(rocketID, 10) }

// RocketLaunchCommandID is the command id a rocket's launch is submitted
// with: every wakeup of one rocket uses it, so the log dedupes them.
func RocketLaunchCommandID(rocketID int64) string {
	return room.RocketLaunchIDPrefix + strconv.FormatInt(rocketID, 10)
}

// contribute adds to b the timer changes of one applied command's events:
// a launch timer per ignition, the end of one per launch.
func (rk *rocketLaunches) contribute(b *store.Batch, env *room.Envelope, events []room.Event, now time.Time) error {
	for _, ev := range events {
		switch d := ev.Data.(type) {
		case *room.RoomRocketIgnitedEvent:
			cmd := room.LaunchRocket{RocketID: d.RocketID, Level: d.Level, LaunchAt: d.LaunchAt, Day: d.BusinessDay}
			payload, err := json.Marshal(&cmd)
			if err != nil {
				return fmt.Errorf("encode launch timer room=%s rocket=%d: %w", env.RoomID, d.RocketID, err)
			}
			b.Timers = append(b.Timers, store.Timer{
				RoomID: env.RoomID, TimerID: RocketTimerID(d.RocketID), Kind: TimerKindRocketLaunch,
				FireAt: time.UnixMilli(d.LaunchAt), Payload: payload, CreatedAt: now,
			})
		case *room.RoomRocketLaunchedEvent:
			b.DoneTimers = append(b.DoneTimers, RocketTimerID(d.RocketID))
		}
	}
	return nil
}

// committed arms the in-memory timers of the launches a committed batch
// ignited and disarms those it launched.
func (rk *rocketLaunches) committed(batch []room.Committed) {
	var lt *launchTimers
	for _, c := range batch {
		for _, ev := range c.Events {
			switch d := ev.Data.(type) {
			case *room.RoomRocketIgnitedEvent:
				if lt = cmp.Or(lt, rk.timers(c.RoomID)); lt != nil {
					lt.arm(room.LaunchRocket{RocketID: d.RocketID, Level: d.Level, LaunchAt: d.LaunchAt, Day: d.BusinessDay})
				}
			case *room.RoomRocketLaunchedEvent:
				if lt = cmp.Or(lt, rk.timers(c.RoomID)); lt != nil {
					lt.disarm(d.RocketID)
				}
			}
		}
	}
}

// loaded replaces the room's in-memory launches with those its state
// holds; those already due launch at once, in launch order.
func (rk *rocketLaunches) loaded(s *room.State) {
	rk.mu.Lock()
	lt := rk.rooms[s.RoomID]
	if lt == nil {
		lt = &launchTimers{rk: rk, roomID: s.RoomID}
		rk.rooms[s.RoomID] = lt
	}
	rk.mu.Unlock()
	lt.reset(s.PendingLaunches())
}

// stopped forgets the room's in-memory launches and stops their timer. The
// rows stay: the room's next owner arms them again, or the scanner finds
// them.
func (rk *rocketLaunches) stopped(roomID string) {
	rk.mu.Lock()
	lt := rk.rooms[roomID]
	delete(rk.rooms, roomID)
	rk.mu.Unlock()
	if lt != nil {
		lt.stop()
	}
}

// launchTimers are a cell's in-memory launches: the launches waiting in the
// room, one timer for the earliest of them, and at most one wakeup at a
// time that submits every due launch in launch order (launch time, then
// rocket id), each after the one before it committed. They are not room
// state: the timer and the wakeup run on goroutines of their own, hence the
// mutex. A wakeup runs on the registry's wakers, never on the cell's
// goroutine.
type launchTimers struct {
	rk     *rocketLaunches
	roomID string

	mu       sync.Mutex
	stopped  bool
	pending  map[int64]waitingLaunch // by rocket id
	inFlight map[int64]bool          // taken by the running wakeup
	running  bool                    // a wakeup is submitting launches
	timer    *time.Timer             // fires at the earliest due time of pending
}

// waitingLaunch is a launch and the earliest time it may be submitted.
type waitingLaunch struct {
	launch room.LaunchRocket
	// notBefore (unix ms) holds back a launch the room found early or that
	// failed, so that clocks that disagree cannot make a wakeup spin.
	notBefore int64
}

func (w waitingLaunch) dueAt() int64 { return max(w.launch.LaunchAt, w.notBefore) }

// compareLaunches orders launches by launch time, then rocket id: the order
// room.Rocket.Launches keeps and launches commit in.
func compareLaunches(a, b room.LaunchRocket) int {
	return cmp.Or(cmp.Compare(a.LaunchAt, b.LaunchAt), cmp.Compare(a.RocketID, b.RocketID))
}

func (lt *launchTimers) now() int64 { return lt.rk.reg.cfg.Clock().UnixMilli() }

// arm adds the launch, due at its launch time.
func (lt *launchTimers) arm(l room.LaunchRocket) { lt.add([]room.LaunchRocket{l}, 0) }

// rearm adds the launch again, due no sooner than minRearm from now.
func (lt *launchTimers) rearm(l room.LaunchRocket) {
	lt.add([]room.LaunchRocket{l}, lt.now()+minRearm.Milliseconds())
}

// add adds launches (replacing a rocket's earlier entry) held back until
// notBefore; a launch the running wakeup holds is left to it.
func (lt *launchTimers) add(ls []room.LaunchRocket, notBefore int64) {
	lt.mu.Lock()
	defer lt.mu.Unlock()
	if lt.stopped {
		return
	}
	if lt.pending == nil {
		lt.pending = make(map[int64]waitingLaunch)
	}
	for _, l := range ls {
		if !lt.inFlight[l.RocketID] {
			lt.pending[l.RocketID] = waitingLaunch{launch: l, notBefore: notBefore}
		}
	}
	lt.schedule()
}

// reset replaces every launch with ls.
func (lt *launchTimers) reset(ls []room.RocketLaunch) {
	lt.mu.Lock()
	if !lt.stopped {
		clear(lt.pending)
	}
	lt.mu.Unlock()
	cmds := make([]room.LaunchRocket, len(ls))
	for i := range ls {
		cmds[i] = *ls[i].LaunchCommand()
	}
	lt.add(cmds, 0)
}

// disarm forgets the rocket's launch.
func (lt *launchTimers) disarm(rocketID int64) {
	lt.mu.Lock()
	defer lt.mu.Unlock()
	delete(lt.pending, rocketID)
	lt.schedule()
}

// stop forgets every launch and stops the timer; later arms do nothing. The
// rows stay: the next owner of the room arms them again, or the scanner
// finds them.
func (lt *launchTimers) stop() {
	lt.mu.Lock()
	defer lt.mu.Unlock()
	lt.stopped = true
	clear(lt.pending)
	lt.schedule()
}

// schedule sets the timer for the due time of the launch first in launch
// order (see takeDue); the running wakeup schedules when it ends. lt.mu is
// held.
func (lt *launchTimers) schedule() {
	if lt.running && !lt.stopped {
		return
	}
	var next waitingLaunch
	found := false
	for _, w := range lt.pending {
		if !found || compareLaunches(w.launch, next.launch) < 0 {
			next, found = w, true
		}
	}
	d := time.Duration(max(next.dueAt()-lt.now(), 0)) * time.Millisecond
	switch {
	case !found || lt.stopped:
		if lt.timer != nil {
			lt.timer.Stop()
		}
	case lt.timer == nil:
		lt.timer = time.AfterFunc(d, lt.fire)
	default:
		lt.timer.Reset(d)
	}
}

// fire starts the wakeup unless one is running.
func (lt *launchTimers) fire() {
	lt.mu.Lock()
	defer lt.mu.Unlock()
	if lt.stopped || lt.running {
		return
	}
	lt.running = true
	lt.rk.reg.wakes.spawn(lt.launchDue)
}

// launchDue submits the due launches, in launch order, until none is due.
// A launch that is not due yet or failed stops the run, and it goes back
// with every launch after it, held back a little: launching a later rocket
// first is what the order forbids.
func (lt *launchTimers) launchDue(ctx context.Context) {
	for {
		due := lt.takeDue()
		if len(due) == 0 {
			return
		}
		rest, result := lt.rk.wakeLaunches(ctx, lt.roomID, due)
		lt.mu.Lock()
		clear(lt.inFlight)
		lt.mu.Unlock()
		switch result {
		case wakeNotDue:
			lt.add(rest, lt.now()+minRearm.Milliseconds())
		case wakeError:
			lt.add(rest, lt.now()+launchRetry.Milliseconds())
		}
	}
}

// takeDue removes the due launches and returns them in launch order,
// up to the first launch held back (one that failed or was early, due
// again a little later): a launch after it in launch order waits for it,
// even when its own time has come. When none is due it ends the run and
// schedules the timer.
func (lt *launchTimers) takeDue() []room.LaunchRocket {
	lt.mu.Lock()
	defer lt.mu.Unlock()
	now := lt.now()
	var due []room.LaunchRocket
	if !lt.stopped {
		waiting := slices.SortedFunc(maps.Values(lt.pending), func(a, b waitingLaunch) int { return compareLaunches(a.launch, b.launch) })
		for _, w := range waiting {
			if w.dueAt() > now {
				break
			}
			due = append(due, w.launch)
			delete(lt.pending, w.launch.RocketID)
		}
	}
	if len(due) == 0 {
		lt.running = false
		lt.schedule()
		return nil
	}
	if lt.inFlight == nil {
		lt.inFlight = make(map[int64]bool)
	}
	for _, l := range due {
		lt.inFlight[l.RocketID] = true
	}
	return due
}

// rearm arms the launch again in the room, if it is loaded on this node
// now: a room that is not is armed by its next load, or found by the
// scanner.
func (rk *rocketLaunches) rearm(roomID string, l room.LaunchRocket) {
	if lt := rk.timers(roomID); lt != nil {
		lt.rearm(l)
	}
}

// wakeLaunches submits launches one after the other, each once the one
// before it committed, so that they commit in the order given. It stops at
// the first that is not due, belongs to another node or failed, and returns
// it with those after it and its result; a launch that can never commit
// (stale, not pending) does not hold up the rest.
func (rk *rocketLaunches) wakeLaunches(ctx context.Context, roomID string, ls []room.LaunchRocket) ([]room.LaunchRocket, string) {
	for i, l := range ls {
		switch result := rk.wakeLaunch(ctx, roomID, l); result {
		case wakeLaunched, wakeDuplicate, wakeStale, wakeNotPending:
		default:
			return ls[i:], result
		}
	}
	return nil, ""
}

// wakeLaunch submits the launch and acts on the answer; it returns the
// result it counted.
func (rk *rocketLaunches) wakeLaunch(ctx context.Context, roomID string, l room.LaunchRocket) string {
	ctx, cancel := context.WithTimeout(ctx, wakeTimeout)
	defer cancel()
	r := rk.reg
	submit := func(id string) (Result, error) {
		cmd := l
		return r.Submit(ctx, &room.Envelope{RoomID: roomID, CommandID: id, Operator: room.SystemOperator, Platform: true, Command: &cmd})
	}
	res, err := submit(RocketLaunchCommandID(l.RocketID))
	if errors.Is(err, room.ErrCommandIDConflict) {
		// Another command holds the launch's id, logged before the service
		// kept its prefix (room.ReservedCommandID): launch under a unique
		// one. The room itself refuses a second launch of the rocket.
		res, err = submit(RocketLaunchCommandID(l.RocketID) + "/" + uniqueSuffix())
	}
	result := wakeResult(res, err)
	r.metrics.RocketWakeups.WithLabelValues(result).Inc()
	log := r.log.With("room_id", roomID, "rocket_id", l.RocketID, "result", result)
	switch result {
	case wakeNotDue:
		rk.rearm(roomID, l)
	case wakeStale, wakeNotPending:
		// Nothing will ever launch it: delete the row so that the scanner
		// stops finding it. Should this fail, the next wakeup deletes it.
		if err := r.store.DeleteTimers(ctx, roomID, []string{RocketTimerID(l.RocketID)}, time.Time{}); err != nil {
			log.Warn("delete a launch timer that can no longer launch", "err", err)
		}
	case wakeError:
		log.Warn("rocket launch wakeup failed; the scanner retries", "err", err)
	}
	log.Debug("rocket launch wakeup", "err", err)
	return result
}

// wakeResult classifies the answer to a LaunchRocket.
func wakeResult(res Result, err error) string {
	switch {
	case err == nil && res.Duplicate:
		return wakeDuplicate
	case err == nil:
		return wakeLaunched
	case errors.Is(err, room.ErrRocketNotDue):
		return wakeNotDue
	case errors.Is(err, room.ErrRocketStale):
		return wakeStale
	case errors.Is(err, room.ErrRocketNotPending):
		return wakeNotPending
	case errors.Is(err, lease.ErrHeld):
		return wakeForeign
	case errors.Is(err, room.ErrCommandIDConflict):
		return wakeNotPending // the rocket's command id launched something else
	}
	switch room.AsError(err).Code {
	case room.CodeRejected, room.CodeInvalid, room.CodeNotFound, room.CodePermission:
		// The room refuses the launch for good (closed, gone): no wakeup
		// will ever change that.
		return wakeNotPending
	}
	return wakeError
}

// decodeTimer returns the launch a due timer row names; ok is false for a
// row this node cannot read.
func (rk *rocketLaunches) decodeTimer(t store.Timer) (l room.LaunchRocket, ok bool) {
	if err := json.Unmarshal(t.Payload, &l); err != nil {
		rk.reg.metrics.RocketWakeups.WithLabelValues(wakeError).Inc()
		rk.reg.log.Error("undecodable launch timer", "room_id", t.RoomID, "timer_id", t.TimerID, "err", err)
		return l, false
	}
	return l, true
}

// fire gives a room's due launch timers to the room on this node, loading
// it if need be. The scanner does not submit them itself: the room's one
// wakeup at a time is what keeps launches in order, and a loaded room has
// armed every launch its state holds.
func (rk *rocketLaunches) fire(ctx context.Context, roomID string, due []store.Timer) {
	var ls []room.LaunchRocket
	for _, t := range due {
		if l, ok := rk.decodeTimer(t); ok {
			ls = append(ls, l)
		}
	}
	if len(ls) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, wakeTimeout)
	defer cancel()
	r := rk.reg
	_, err := r.cell(ctx, roomID, false)
	if err == nil {
		if lt := rk.timers(roomID); lt != nil {
			for _, l := range ls {
				lt.arm(l)
			}
		}
		return
	}
	result := wakeResult(Result{}, err)
	r.metrics.RocketWakeups.WithLabelValues(result).Add(float64(len(ls)))
	log := r.log.With("room_id", roomID, "result", result)
	switch result {
	case wakeStale, wakeNotPending:
		// The room is gone or refuses launches for good: delete the rows so
		// that the scanner stops finding them.
		ids := make([]string, len(ls))
		for i, l := range ls {
			ids[i] = RocketTimerID(l.RocketID)
		}
		if err := r.store.DeleteTimers(ctx, roomID, ids, time.Time{}); err != nil {
			log.Warn("delete launch timers that can no longer launch", "err", err)
		}
	case wakeError:
		log.Warn("wake a room for its due launches; the scanner retries", "err", err)
	}
	log.Debug("rocket launch wakeup", "err", err)
}
