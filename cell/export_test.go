package cell

import (
	"context"

	"hyapp/room-service/room"
)

// WakeLaunch runs one wakeup of a rocket launch, as an in-memory timer or
// the scanner does, and returns the result it counted.
func WakeLaunch(r *Registry, roomID string, l room.LaunchRocket) string {
	return r.wakeLaunch(context.Background(), roomID, l)
}
