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
