package cell

import (
	"hyapp/room-service/room"
)

// EventSink receives committed events after commit: the direct IM lane
// implements it. Publish is called from a cell's goroutine and must never
// block it: an implementation queues (bounded) and sheds when full. The
// slice and its events must not be modified.
type EventSink interface {
	Publish(batch []room.Committed)
}

// Sinks hands every batch to each sink in turn. Each must not block.
type Sinks []EventSink

// Publish implements EventSink.
func (s Sinks) Publish(batch []room.Committed) {
	for _, sink := range s {
		sink.Publish(batch)
	}
}
