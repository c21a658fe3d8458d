package cell

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
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

// TimerKindRocketLaunch is the kind of a rocket launch timer; its payload
// is the JSON of the room.LaunchRocket command to submit.
const TimerKindRocketLaunch = "rocket_launch"

const (
	// timerScanLimit is the most due timers one scan reads.
	timerScanLimit = 500
	// timerScanWorkers bounds the wakeups one scan runs at once: each may
	// load a room.
	timerScanWorkers = 8
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
	return "rocket-launch/" + strconv.FormatInt(rocketID, 10)
}

// addTimers adds to b the timer changes of one applied command's events:
// a launch timer per ignition, the end of one per launch.
func (c *Cell) addTimers(b *store.Batch, events []room.Event, now time.Time) error {
	for _, ev := range events {
		switch d := ev.Data.(type) {
		case *room.RoomRocketIgnitedEvent:
			cmd := room.LaunchRocket{RocketID: d.RocketID, Level: d.Level, LaunchAt: d.LaunchAt, Day: d.BusinessDay}
			payload, err := json.Marshal(&cmd)
			if err != nil {
				return fmt.Errorf("encode launch timer room=%s rocket=%d: %w", c.roomID, d.RocketID, err)
			}
			b.Timers = append(b.Timers, store.Timer{
				RoomID: c.roomID, TimerID: RocketTimerID(d.RocketID), Kind: TimerKindRocketLaunch,
				FireAt: time.UnixMilli(d.LaunchAt), Payload: payload, CreatedAt: now,
			})
		case *room.RoomRocketLaunchedEvent:
			b.DoneTimers = append(b.DoneTimers, RocketTimerID(d.RocketID))
		}
	}
	return nil
}

// armCommitted arms the in-memory timers of the launches a committed batch
// ignited and disarms those it launched.
func (c *Cell) armCommitted(cmds []*pending) {
	for _, p := range cmds {
		if !p.applied || p.result.Duplicate {
			continue
		}
		for _, ev := range p.events {
			switch d := ev.Data.(type) {
			case *room.RoomRocketIgnitedEvent:
				c.timers.arm(room.LaunchRocket{RocketID: d.RocketID, Level: d.Level, LaunchAt: d.LaunchAt, Day: d.BusinessDay})
			case *room.RoomRocketLaunchedEvent:
				c.timers.disarm(d.RocketID)
			}
		}
	}
}

// armPending replaces the cell's in-memory launches with those its state
// holds; those already due launch at once, in launch order.
func (c *Cell) armPending() {
	if c.timers == nil {
		// Set once, before the cell is published: wakeups read the field.
		c.timers = &launchTimers{reg: c.reg, roomID: c.roomID}
	}
	c.timers.reset(c.state.PendingLaunches())
}

// launchTimers are a cell's in-memory launches: the launches waiting in the
// room, one timer for the earliest of them, and at most one wakeup at a
// time that submits every due launch in launch order (launch time, then
// rocket id), each after the one before it committed. They are not room
// state: the timer and the wakeup run on goroutines of their own, hence the
// mutex. A wakeup runs on the registry's wakers, never on the cell's
// goroutine.
type launchTimers struct {
	reg    *Registry
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

func (lt *launchTimers) now() int64 { return lt.reg.cfg.Clock().UnixMilli() }

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
	if lt == nil {
		return
	}
	lt.mu.Lock()
	defer lt.mu.Unlock()
	lt.stopped = true
	clear(lt.pending)
	lt.schedule()
}

// schedule sets the timer for the earliest due time; the running wakeup
// schedules when it ends. lt.mu is held.
func (lt *launchTimers) schedule() {
	if lt.running && !lt.stopped {
		return
	}
	next, found := int64(0), false
	for _, w := range lt.pending {
		if !found || w.dueAt() < next {
			next, found = w.dueAt(), true
		}
	}
	d := time.Duration(max(next-lt.now(), 0)) * time.Millisecond
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
	lt.reg.wakes.spawn(lt.launchDue)
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
		rest, result := lt.reg.wakeLaunches(ctx, lt.roomID, due)
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

// takeDue removes the due launches and returns them in launch order; when
// none is due it ends the run and schedules the timer.
func (lt *launchTimers) takeDue() []room.LaunchRocket {
	lt.mu.Lock()
	defer lt.mu.Unlock()
	now := lt.now()
	var due []room.LaunchRocket
	if !lt.stopped {
		for id, w := range lt.pending {
			if w.dueAt() <= now {
				due = append(due, w.launch)
				delete(lt.pending, id)
			}
		}
	}
	if len(due) == 0 {
		lt.running = false
		lt.schedule()
		return nil
	}
	slices.SortFunc(due, compareLaunches)
	if lt.inFlight == nil {
		lt.inFlight = make(map[int64]bool)
	}
	for _, l := range due {
		lt.inFlight[l.RocketID] = true
	}
	return due
}

// rearm arms the launch again in the cell that serves the room on this
// node now, if any: a room that is not loaded here is armed by its next
// load, or found by the scanner.
func (r *Registry) rearm(roomID string, l room.LaunchRocket) {
	r.mu.Lock()
	c := r.cells[roomID]
	r.mu.Unlock()
	if c == nil || c.timers == nil {
		return
	}
	c.timers.rearm(l)
}

// wakeLaunches submits launches one after the other, each once the one
// before it committed, so that they commit in the order given. It stops at
// the first that is not due, belongs to another node or failed, and returns
// it with those after it and its result; a launch that can never commit
// (stale, not pending) does not hold up the rest.
func (r *Registry) wakeLaunches(ctx context.Context, roomID string, ls []room.LaunchRocket) ([]room.LaunchRocket, string) {
	for i, l := range ls {
		switch result := r.wakeLaunch(ctx, roomID, l); result {
		case wakeLaunched, wakeDuplicate, wakeStale, wakeNotPending:
		default:
			return ls[i:], result
		}
	}
	return nil, ""
}

// wakeLaunch submits the launch and acts on the answer; it returns the
// result it counted.
func (r *Registry) wakeLaunch(ctx context.Context, roomID string, l room.LaunchRocket) string {
	ctx, cancel := context.WithTimeout(ctx, wakeTimeout)
	defer cancel()
	cmd := l
	res, err := r.Submit(ctx, &room.Envelope{
		RoomID: roomID, CommandID: RocketLaunchCommandID(l.RocketID),
		Operator: room.SystemOperator, Platform: true, Command: &cmd,
	})
	result := wakeResult(res, err)
	r.metrics.RocketWakeups.WithLabelValues(result).Inc()
	log := r.log.With("room_id", roomID, "rocket_id", l.RocketID, "result", result)
	switch result {
	case wakeNotDue:
		r.rearm(roomID, l)
	case wakeStale, wakeNotPending:
		// Nothing will ever launch it: delete the row so that the scanner
		// stops finding it. Should this fail, the next wakeup deletes it.
		if err := r.repo.DeleteTimers(ctx, roomID, []string{RocketTimerID(l.RocketID)}); err != nil {
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

// RunTimers scans for due timers every interval (and once at once) until
// ctx ends or the registry closes, and fires each: a rocket launch is
// submitted to its room, which loads the room if no node serves it. It
// wakes what no in-memory timer will: the rooms of a node that crashed,
// rooms passivated with a launch pending, wakeups that failed. A scan
// runs a few wakeups at a time and finishes before the next begins.
// New starts one unless Config.TimerScanEvery is negative; more are
// harmless, as every wakeup is idempotent. An interval of zero or less is
// the default TimerScanEvery.
func (r *Registry) RunTimers(ctx context.Context, every time.Duration) {
	if every <= 0 {
		every = DefaultConfig().TimerScanEvery
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(r.wakes.ctx, cancel)()
	ticker := time.NewTicker(every)
	defer ticker.Stop()
	for {
		r.scanTimers(ctx)
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}

// scanTimers hands the timers due now to their rooms, timerScanWorkers
// rooms at a time: each room's cell on this node, loaded if need be, takes
// its due launches and submits them with its own in launch order.
func (r *Registry) scanTimers(ctx context.Context) {
	due, err := r.repo.ListDueTimers(ctx, r.cfg.Clock(), timerScanLimit)
	if err != nil {
		if ctx.Err() == nil {
			r.log.Warn("scan due timers", "err", err)
		}
		return
	}
	var rooms []string
	byRoom := make(map[string][]room.LaunchRocket)
	for _, t := range due {
		l, ok := r.decodeTimer(t)
		if !ok {
			continue
		}
		if _, seen := byRoom[t.RoomID]; !seen {
			rooms = append(rooms, t.RoomID)
		}
		byRoom[t.RoomID] = append(byRoom[t.RoomID], l)
	}
	sem := make(chan struct{}, timerScanWorkers)
	var wg sync.WaitGroup
	defer wg.Wait()
	for _, roomID := range rooms {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return
		}
		wg.Go(func() {
			defer func() { <-sem }()
			r.wakeRoom(ctx, roomID, byRoom[roomID])
		})
	}
}

// decodeTimer returns the launch a due timer row names; ok is false for a
// row this node cannot fire.
func (r *Registry) decodeTimer(t store.Timer) (l room.LaunchRocket, ok bool) {
	if t.Kind != TimerKindRocketLaunch {
		// A kind this node does not know, from a newer node: left to those.
		r.log.Debug("due timer of an unknown kind", "room_id", t.RoomID, "timer_id", t.TimerID, "kind", t.Kind)
		return l, false
	}
	if err := json.Unmarshal(t.Payload, &l); err != nil {
		r.metrics.RocketWakeups.WithLabelValues(wakeError).Inc()
		r.log.Error("undecodable launch timer", "room_id", t.RoomID, "timer_id", t.TimerID, "err", err)
		return l, false
	}
	return l, true
}

// wakeRoom gives a room's due launches to its cell on this node, loading
// the room if need be. The scanner does not submit them itself: the cell's
// one wakeup at a time is what keeps launches in order, and a loaded room
// has armed every launch its state holds.
func (r *Registry) wakeRoom(ctx context.Context, roomID string, ls []room.LaunchRocket) {
	ctx, cancel := context.WithTimeout(ctx, wakeTimeout)
	defer cancel()
	c, err := r.cell(ctx, roomID)
	if err == nil {
		for _, l := range ls {
			c.timers.arm(l)
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
		if err := r.repo.DeleteTimers(ctx, roomID, ids); err != nil {
			log.Warn("delete launch timers that can no longer launch", "err", err)
		}
	case wakeError:
		log.Warn("wake a room for its due launches; the scanner retries", "err", err)
	}
	log.Debug("rocket launch wakeup", "err", err)
}

// wakers runs the wakeups of in-memory timers: goroutines the registry owns,
// refused once it closes, cancelled and waited for by Close.
type wakers struct {
	ctx    context.Context
	cancel context.CancelFunc

	mu     sync.Mutex
	closed bool
	wg     sync.WaitGroup
}

func newWakers(parent context.Context) *wakers {
	ctx, cancel := context.WithCancel(parent)
	return &wakers{ctx: ctx, cancel: cancel}
}

// spawn runs f on a goroutine of its own, unless the registry is closing.
func (w *wakers) spawn(f func(ctx context.Context)) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return
	}
	w.wg.Go(func() { f(w.ctx) })
}

// stop refuses new wakeups and cancels those running.
func (w *wakers) stop() {
	w.mu.Lock()
	w.closed = true
	w.mu.Unlock()
	w.cancel()
}

// wait waits for the wakeups that are running.
func (w *wakers) wait() { w.wg.Wait() }
