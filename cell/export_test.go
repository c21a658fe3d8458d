package cell

import (
	"context"

	"hyapp/room-service/room"
)

// WakeLaunch runs one wakeup of a rocket launch, as an in-memory timer or
// the scanner does, and returns the result it counted.
func WakeLaunch(r *Registry, roomID string, l room.LaunchRocket) string {
	return r.builtin.rockets.wakeLaunch(context.Background(), roomID, l)
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
