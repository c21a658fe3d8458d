package cell

import (
	"context"
	"errors"
	"time"

	"hyapp/room-service/room"
)

// WakeLaunch runs one wakeup of a rocket launch, as an in-memory timer or
// the scanner does, and returns the result it counted.
func WakeLaunch(r *Registry, roomID string, l room.LaunchRocket) string {
	return r.builtin.rockets.wakeLaunch(context.Background(), roomID, l)
}

// HandleInFreshCell runs one batch of requests (a nil envelope is a read)
// in a new empty cell of roomID, as a CreateRoom that found the room
// unloaded starts it, and reports which requests were answered to load the
// room as stored and why the cell stopped. The cell never runs.
func HandleInFreshCell(r *Registry, roomID string, envs []*room.Envelope) (stored []bool, stop string) {
	h, err := r.lease.Acquire(context.Background(), roomID)
	if err != nil {
		panic(err)
	}
	defer func() { _ = h.Release(context.Background()) }()
	c := r.freshCell(roomID, h)
	batch := make([]*request, len(envs))
	for i, env := range envs {
		batch[i] = &request{env: env, reply: make(chan response, 1)}
	}
	stop = c.handle(batch)
	for _, req := range batch {
		stored = append(stored, errors.Is((<-req.reply).err, errRoomExists))
	}
	return stored, stop
}

// Queued is the number of requests waiting in the room's mailbox (0 when
// the room is not loaded).
func Queued(r *Registry, roomID string) int {
	r.mu.Lock()
	c := r.cells[roomID]
	r.mu.Unlock()
	if c == nil {
		return 0
	}
	return c.mailbox.len()
}

// PresenceWake runs one presence wakeup of a loaded room now, as its timer
// does, and returns the expiries it submitted and how many committed; -1
// when the room is not loaded or a wakeup is running.
func PresenceWake(r *Registry, roomID string) (submitted, committed int) {
	rp := r.builtin.presence.room(roomID)
	if rp == nil {
		return -1, -1
	}
	rp.mu.Lock()
	if rp.running {
		rp.mu.Unlock()
		return -1, -1
	}
	rp.running = true
	rp.mu.Unlock()
	return rp.wake(context.Background())
}

// PresenceTimer is when the room's presence timer is armed for (unix ms,
// 0: not armed) and its members' earliest deadline (0: none).
func PresenceTimer(r *Registry, roomID string) (armed, earliest int64) {
	rp := r.builtin.presence.room(roomID)
	if rp == nil {
		return 0, 0
	}
	rp.mu.Lock()
	defer rp.mu.Unlock()
	return rp.dueAt, rp.dueLocked()
}

// StopsQueued is the number of stopping rooms waiting for a transaction.
func StopsQueued(r *Registry) int { return len(r.stopper.in) }

// CommitQueued is the number of room batches waiting for the group commit.
func CommitQueued(r *Registry) int { return len(r.committer.in) }

// CommitLingerOf is how long r's group commit lingers (0: never).
func CommitLingerOf(r *Registry) time.Duration { return r.committer.linger }

// SetCommitClock makes the group commit read time from now. Call it before
// the registry's first command.
func SetCommitClock(r *Registry, now func() time.Time) { r.committer.now = now }

// SubmitUnchecked submits env without room.Envelope.CheckOrigin, as builds
// before that check did: it writes a log such builds could have left.
func SubmitUnchecked(r *Registry, env *room.Envelope) (Result, error) {
	if err := env.Validate(); err != nil {
		return Result{}, err
	}
	resp, err := r.call(context.Background(), env.RoomID, env)
	return resp.result, err
}

// SweepEvery is how far ahead a room's presence sweep timer lies.
func SweepEvery(r *Registry) time.Duration { return r.builtin.presence.sweepEvery() }

// ScanTimers runs one scan of the due timers now, as RunTimers does each
// interval, and returns once every room it fired is done.
func ScanTimers(r *Registry) { r.scanTimers(context.Background()) }
