package cell

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
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
// deletes the row. While the room is loaded, the cell keeps an in-memory
// timer per pending launch (armed after the ignition commits, and for every
// pending launch of a recovered or reloaded room) that fires the launch on
// time. A scanner (RunTimers) finds the rows of rooms no node serves: a
// crash between ignition and launch, or a room passivated with a launch
// pending. Either wakeup submits LaunchRocket through the registry like any
// client, with a command id of its own per rocket, so a second wakeup of a
// launched rocket is a duplicate and changes nothing. The domain revalidates
// the rocket (id, level, launch time, business day) against the state; the
// lease and the owner epoch decide who may commit.

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

// armPending replaces the cell's in-memory timers with one per launch its
// state holds; those already due fire at once.
func (c *Cell) armPending() {
	if c.timers == nil {
		// Set once, before the cell is published: wakeups read the field.
		c.timers = &launchTimers{reg: c.reg, roomID: c.roomID}
	}
	c.timers.disarmAll()
	for _, l := range c.state.PendingLaunches() {
		c.timers.arm(*l.LaunchCommand())
	}
}

// launchTimers are a cell's in-memory launch timers. They are not room
// state: their callbacks run on timer goroutines, hence the mutex. A fired
// timer hands its wakeup to the registry's wakers and returns, so a wakeup
// never runs on the cell's goroutine.
type launchTimers struct {
	reg    *Registry
	roomID string

	mu      sync.Mutex
	stopped bool
	armed   map[int64]*time.Timer // by rocket id
}

// arm sets the launch's timer for its launch time, replacing one the rocket has.
func (lt *launchTimers) arm(l room.LaunchRocket) {
	lt.armAfter(l, time.Duration(l.LaunchAt-lt.reg.cfg.Clock().UnixMilli())*time.Millisecond)
}

func (lt *launchTimers) armAfter(l room.LaunchRocket, d time.Duration) {
	lt.mu.Lock()
	defer lt.mu.Unlock()
	if lt.stopped {
		return
	}
	if old := lt.armed[l.RocketID]; old != nil {
		old.Stop()
	}
	if lt.armed == nil {
		lt.armed = make(map[int64]*time.Timer)
	}
	var t *time.Timer
	t = time.AfterFunc(max(d, 0), func() {
		lt.mu.Lock()
		current := lt.armed[l.RocketID] == t
		if current {
			delete(lt.armed, l.RocketID)
		}
		lt.mu.Unlock()
		if current {
			lt.reg.wakes.spawn(func(ctx context.Context) { lt.reg.wakeLaunch(ctx, lt.roomID, l) })
		}
	})
	lt.armed[l.RocketID] = t
}

// disarm stops the rocket's timer.
func (lt *launchTimers) disarm(rocketID int64) {
	lt.mu.Lock()
	defer lt.mu.Unlock()
	if t := lt.armed[rocketID]; t != nil {
		t.Stop()
		delete(lt.armed, rocketID)
	}
}

// disarmAll stops every timer.
func (lt *launchTimers) disarmAll() {
	lt.mu.Lock()
	defer lt.mu.Unlock()
	for id, t := range lt.armed {
		t.Stop()
		delete(lt.armed, id)
	}
}

// stop stops every timer; later arms do nothing. The rows stay: the next
// owner of the room arms them again, or the scanner finds them.
func (lt *launchTimers) stop() {
	if lt == nil {
		return
	}
	lt.mu.Lock()
	lt.stopped = true
	lt.mu.Unlock()
	lt.disarmAll()
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
	d := time.Duration(l.LaunchAt-r.cfg.Clock().UnixMilli()) * time.Millisecond
	c.timers.armAfter(l, max(d, minRearm))
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

// fireTimer fires one due timer row found by the scanner.
func (r *Registry) fireTimer(ctx context.Context, t store.Timer) {
	if t.Kind != TimerKindRocketLaunch {
		// A kind this node does not know, from a newer node: left to those.
		r.log.Debug("due timer of an unknown kind", "room_id", t.RoomID, "timer_id", t.TimerID, "kind", t.Kind)
		return
	}
	var l room.LaunchRocket
	if err := json.Unmarshal(t.Payload, &l); err != nil {
		r.metrics.RocketWakeups.WithLabelValues(wakeError).Inc()
		r.log.Error("undecodable launch timer", "room_id", t.RoomID, "timer_id", t.TimerID, "err", err)
		return
	}
	r.wakeLaunch(ctx, t.RoomID, l)
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

// scanTimers fires the timers due now, timerScanWorkers at a time.
func (r *Registry) scanTimers(ctx context.Context) {
	due, err := r.repo.ListDueTimers(ctx, r.cfg.Clock(), timerScanLimit)
	if err != nil {
		if ctx.Err() == nil {
			r.log.Warn("scan due timers", "err", err)
		}
		return
	}
	sem := make(chan struct{}, timerScanWorkers)
	var wg sync.WaitGroup
	defer wg.Wait()
	for _, t := range due {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return
		}
		wg.Go(func() {
			defer func() { <-sem }()
			r.fireTimer(ctx, t)
		})
	}
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
