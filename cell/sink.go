package cell

import (
	"context"
	"log/slog"
	"sync"

	"hyapp/room-service/room"
)

// Committed is one committed command and the events it caused, handed to
// the EventSink after its transaction committed.
type Committed struct {
	RoomID      string
	RoomVersion int64
	CommandID   string
	CommandType room.CommandType
	Operator    int64
	At          int64 // unix ms
	Events      []room.Event
}

// EventSink receives committed events after commit: the direct IM lane
// implements it. Publish is called from a cell's goroutine and must never
// block it: an implementation queues (bounded) and sheds when full. The
// slice and its events must not be modified.
type EventSink interface {
	Publish(batch []Committed)
}

// LogSink is the default EventSink: it logs committed events that have an IM
// display from its own goroutine, shedding (and counting) when its queue is full.
type LogSink struct {
	log     *slog.Logger
	queue   chan []Committed
	dropped func()
	wg      sync.WaitGroup
	once    sync.Once
	quit    chan struct{}
}

var _ EventSink = (*LogSink)(nil)

// NewLogSink starts a LogSink with a queue of size batches. onDrop, if set,
// is called for each shed batch.
func NewLogSink(log *slog.Logger, size int, onDrop func()) *LogSink {
	s := &LogSink{log: log, queue: make(chan []Committed, size), dropped: onDrop, quit: make(chan struct{})}
	s.wg.Add(1)
	go s.run()
	return s
}

// Publish implements EventSink.
func (s *LogSink) Publish(batch []Committed) {
	select {
	case s.queue <- batch:
	default:
		if s.dropped != nil {
			s.dropped()
		}
	}
}

func (s *LogSink) run() {
	defer s.wg.Done()
	for {
		select {
		case <-s.quit:
			return
		case batch := <-s.queue:
			for _, c := range batch {
				for _, ev := range c.Events {
					l := ev.Lanes()
					if !l.IM || !s.log.Enabled(context.Background(), slog.LevelDebug) {
						continue
					}
					s.log.Debug("room event", "room_id", c.RoomID, "room_version", c.RoomVersion,
						"command_id", c.CommandID, "event", string(ev.Type), "priority", string(l.Priority), "data", ev.Data)
				}
			}
		}
	}
}

// Close stops the sink's goroutine. Queued batches are dropped: the lane is best effort.
func (s *LogSink) Close() {
	s.once.Do(func() { close(s.quit) })
	s.wg.Wait()
}

// Sinks hands every batch to each sink in turn. Each must not block.
type Sinks []EventSink

// Publish implements EventSink.
func (s Sinks) Publish(batch []Committed) {
	for _, sink := range s {
		sink.Publish(batch)
	}
}

// OutboxWaker is an EventSink that calls Wake when a batch wrote outbox
// rows: the outbox relay then publishes them at once instead of at its next poll.
type OutboxWaker struct{ Wake func() }

// Publish implements EventSink.
func (w OutboxWaker) Publish(batch []Committed) {
	for _, c := range batch {
		for _, ev := range c.Events {
			if ev.Lanes().Outbox {
				w.Wake()
				return
			}
		}
	}
}
