package im

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"hyapp/room-service/internal/poll"
	"hyapp/room-service/room"
)

// groupService is an IM service whose groups can go away: a send to a
// group that is gone fails with ErrGroupNotFound until the group is
// created again. A send to the group named hold waits for gate.
type groupService struct {
	mu       sync.Mutex
	gone     map[string]bool
	created  int
	attempts []Message
	hold     string
	gate     chan struct{}
}

func newGroupService() *groupService {
	return &groupService{gone: map[string]bool{}, gate: make(chan struct{})}
}

func (s *groupService) Send(ctx context.Context, m Message) error {
	if m.GroupID == s.hold {
		select {
		case <-s.gate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.attempts = append(s.attempts, m)
	if s.gone[m.GroupID] {
		return fmt.Errorf("send group=%s: %w", m.GroupID, ErrGroupNotFound)
	}
	return nil
}

func (s *groupService) CreateGroup(_ context.Context, groupID, _ string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.created++
	delete(s.gone, groupID)
	return nil
}

// destroy takes a group away, as group control does on RoomClosed.
func (s *groupService) destroy(group string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gone[group] = true
}

// tried reports whether a send of a message of the group carrying an event
// of type typ at version was made.
func (s *groupService) tried(group string, typ room.EventType, version int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range s.attempts {
		if m.GroupID == group && m.version >= version && typeIn(m.Data, typ) {
			return true
		}
	}
	return false
}

func (s *groupService) createdGroups() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.created
}

// typeIn reports whether a message's data carries an event of type typ.
func typeIn(data []byte, typ room.EventType) bool {
	return bytes.Contains(data, []byte(`"type":"`+string(typ)+`"`))
}

// event is the batch of one committed event of a room.
func event(roomID string, version int64, typ room.EventType, data any) []room.Committed {
	return []room.Committed{{RoomID: roomID, RoomVersion: version, At: time.Now().UnixMilli(), Events: []room.Event{{Type: typ, Data: data}}}}
}

// TestNoMessageOfAClosedRoomRecreatesItsGroup: once a room's RoomClosed is
// queued its group is dissolved on purpose, so a later message of the room
// that finds the group gone (here its coalesced heat, due a second after
// the last one) does not create it again.
func TestNoMessageOfAClosedRoomRecreatesItsGroup(t *testing.T) {
	svc := newGroupService()
	l := New(Config{Budget: 20}, RecreatingSender{Sender: svc, Groups: svc}, Metrics{}, slog.New(slog.DiscardHandler))
	defer l.Close()
	l.Publish(event("c1", 1, room.EventRoomHeatChanged, map[string]any{"heat": 1}))
	poll.Until(t, 10*time.Second, "the first heat", poll.Bool(func() bool { return svc.tried("c1", room.EventRoomHeatChanged, 1) }))
	l.Publish(event("c1", 2, room.EventRoomHeatChanged, map[string]any{"heat": 2}))
	l.Publish(event("c1", 3, room.EventRoomClosed, &room.RoomClosedEvent{}))
	poll.Until(t, 10*time.Second, "the RoomClosed message", poll.Bool(func() bool { return svc.tried("c1", room.EventRoomClosed, 3) }))
	svc.destroy("c1")
	poll.Until(t, 10*time.Second, "the second heat", poll.Bool(func() bool { return svc.tried("c1", room.EventRoomHeatChanged, 2) }))
	if n := svc.createdGroups(); n != 0 {
		t.Fatalf("a closed room's group was created again %d times", n)
	}
}

// TestAMessageWaitingAsItsRoomClosesDoesNotRecreateTheGroup: a message
// released before its room's RoomClosed but sent after it (it waited for
// its worker behind another group's slow call) does not create the
// dissolved group again either.
func TestAMessageWaitingAsItsRoomClosesDoesNotRecreateTheGroup(t *testing.T) {
	svc := newGroupService()
	svc.hold = "slow"
	l := New(Config{Budget: 20, Workers: 1}, RecreatingSender{Sender: svc, Groups: svc}, Metrics{}, slog.New(slog.DiscardHandler))
	defer l.Close()
	l.Publish(event("slow", 1, room.EventRoomRocketIgnited, &room.RoomRocketIgnitedEvent{RocketID: 1}))
	poll.Until(t, 10*time.Second, "the slow group's call to hang", poll.Bool(func() bool { return l.inQueue("slow") == 0 }))
	l.Publish(event("c2", 1, room.EventRoomRocketIgnited, &room.RoomRocketIgnitedEvent{RocketID: 1}))
	poll.Until(t, 10*time.Second, "the message released to the busy worker", poll.Bool(func() bool { return l.inQueue("c2") == 0 }))
	l.Publish(event("c2", 2, room.EventRoomClosed, &room.RoomClosedEvent{}))
	svc.destroy("c2")
	close(svc.gate)
	poll.Until(t, 10*time.Second, "the waiting message's send", poll.Bool(func() bool { return svc.tried("c2", room.EventRoomRocketIgnited, 1) }))
	poll.Until(t, 10*time.Second, "the RoomClosed message's send", poll.Bool(func() bool { return svc.tried("c2", room.EventRoomClosed, 2) }))
	if n := svc.createdGroups(); n != 0 {
		t.Fatalf("a closed room's group was created again %d times", n)
	}
}

// inQueue is how many events of a room wait to be released.
func (l *Lane) inQueue(key string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	q := l.rooms[key]
	if q == nil {
		return 0
	}
	return len(q.retry) + len(q.high) + len(q.normal) + len(q.low) + len(q.coalesced)
}

// TestARoomReleasesNothingWhileItsMessageIsOut: while a room's message is
// with a worker (a slow call), the room's next events wait in its queue
// rather than behind the call on the worker, so they go together, in one
// message, once it comes back, not back to back over the group's budget.
func TestARoomReleasesNothingWhileItsMessageIsOut(t *testing.T) {
	svc := newGroupService()
	svc.hold = "busy"
	l := New(Config{Budget: 20, Workers: 2}, svc, Metrics{}, slog.New(slog.DiscardHandler))
	defer l.Close()
	other := "other"
	for i := 0; shard(other, 2) == shard("busy", 2); i++ {
		other = fmt.Sprintf("other%d", i)
	}
	l.Publish(event("busy", 1, room.EventRoomRocketIgnited, &room.RoomRocketIgnitedEvent{RocketID: 1}))
	poll.Until(t, 10*time.Second, "the slow call", poll.Bool(func() bool { return l.inQueue("busy") == 0 }))
	for v := int64(2); v <= 6; v++ {
		l.Publish(event("busy", v, room.EventRoomRocketIgnited, &room.RoomRocketIgnitedEvent{RocketID: v}))
	}
	// Another room's messages, each sent before the next is published, let
	// the budget of the slow room's group refill several times over.
	for v := int64(1); v <= 8; v++ {
		l.Publish(event(other, v, room.EventRoomRocketIgnited, &room.RoomRocketIgnitedEvent{RocketID: v}))
		poll.Until(t, 10*time.Second, "the other room's message", poll.Bool(func() bool { return svc.tried(other, room.EventRoomRocketIgnited, v) }))
	}
	if n := l.inQueue("busy"); n != 5 {
		t.Fatalf("%d of the slow room's 5 later events wait in its queue while its call is out", n)
	}
	close(svc.gate)
	poll.Until(t, 10*time.Second, "the slow room's last event", poll.Bool(func() bool { return svc.tried("busy", room.EventRoomRocketIgnited, 6) }))
	svc.mu.Lock()
	defer svc.mu.Unlock()
	sends := 0
	for _, m := range svc.attempts {
		if m.GroupID == "busy" {
			sends++
		}
	}
	if sends != 2 {
		t.Fatalf("the slow room's 6 events went in %d messages, want its first and one for the rest", sends)
	}
}
