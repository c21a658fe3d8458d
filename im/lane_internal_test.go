package im

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
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

func (s *groupService) DestroyGroup(_ context.Context, groupID string) error {
	s.destroy(groupID)
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

// TestARoomHoldsFewMessagesOutOnALane: while a room's messages are with a
// worker (a slow call), at most maxOut of them are out on their lane; the
// room's next events wait in its queue rather than behind the call on the
// worker, so they go together, in one message, once the call comes back,
// not back to back over the group's budget.
func TestARoomHoldsFewMessagesOutOnALane(t *testing.T) {
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
	// Each later event is published once another room's message went, so
	// the budget of the slow room's group refills between them.
	const later = 10
	for v := int64(2); v <= 1+later; v++ {
		l.Publish(event("busy", v, room.EventRoomRocketIgnited, &room.RoomRocketIgnitedEvent{RocketID: v}))
		l.Publish(event(other, v, room.EventRoomRocketIgnited, &room.RoomRocketIgnitedEvent{RocketID: v}))
		poll.Until(t, 10*time.Second, "the other room's message", poll.Bool(func() bool { return svc.tried(other, room.EventRoomRocketIgnited, v) }))
	}
	if out := l.outCount("busy", outHigh); out != maxOut {
		t.Fatalf("%d of the slow room's messages out, want %d", out, maxOut)
	}
	if n := l.inQueue("busy"); n == 0 {
		t.Fatalf("none of the slow room's events waits in its queue while %d messages are out", maxOut)
	}
	close(svc.gate)
	poll.Until(t, 10*time.Second, "the slow room's last event", poll.Bool(func() bool { return svc.tried("busy", room.EventRoomRocketIgnited, 1+later) }))
	svc.mu.Lock()
	defer svc.mu.Unlock()
	sends := 0
	for _, m := range svc.attempts {
		if m.GroupID == "busy" {
			sends++
		}
	}
	if sends != maxOut+1 {
		t.Fatalf("the slow room's %d events went in %d messages, want the %d out and one for the rest", 1+later, sends, maxOut)
	}
}

// outage is an IM service whose sends to the group down fail until it is
// back up; it records the attempts and the messages that went through.
type outage struct {
	mu        sync.Mutex
	up        bool
	attempts  []Message
	delivered []Message
}

func (o *outage) Send(_ context.Context, m Message) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.attempts = append(o.attempts, m)
	if m.GroupID == "down" && !o.up {
		return errors.New("503 service unavailable")
	}
	o.delivered = append(o.delivered, m)
	return nil
}

// carried reports whether a delivered message of the group carries the
// event of type typ at version.
func (o *outage) carried(group string, typ room.EventType, version int64) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	want := fmt.Sprintf(`"room_version":%d,`, version)
	for _, m := range o.delivered {
		if m.GroupID == group && eventIn(m.Data, typ, want) {
			return true
		}
	}
	return false
}

// eventIn reports whether a message's data carries an event of type typ
// whose envelope has the field want.
func eventIn(data []byte, typ room.EventType, want string) bool {
	var env struct {
		Type   string            `json:"type"`
		Events []json.RawMessage `json:"events"`
	}
	if json.Unmarshal(data, &env) != nil {
		return false
	}
	if env.Type != "Batch" {
		return env.Type == string(typ) && bytes.Contains(data, []byte(want))
	}
	for _, e := range env.Events {
		if eventIn(e, typ, want) {
			return true
		}
	}
	return false
}

// micRowEvent is the batch of one mic change with the room's mic row.
func micRowEvent(roomID string, version, user int64) []room.Committed {
	seats := make([]room.Seat, 10)
	seats[1].UserID = user
	return []room.Committed{{RoomID: roomID, RoomVersion: version, At: time.Now().UnixMilli(), Seats: seats,
		Events: []room.Event{{Type: room.EventRoomMicChanged, Data: &room.RoomMicChangedEvent{Action: room.MicTake, UserID: user, SeatIndex: 1}}}}}
}

// TestAnOutageKeepsOneHighMessageToSendAgain: while a room's High message
// waits to be sent again, its new High events wait in its queue (a newer
// mic row superseding the older) instead of each becoming a message that
// fails and waits too: through an outage the room sends only that one
// message again, and once the service is back, the newest mic row and
// every ignition arrive, and no mic row newer than the first but older
// than the newest.
func TestAnOutageKeepsOneHighMessageToSendAgain(t *testing.T) {
	svc := &outage{}
	l := New(Config{Budget: 20, Workers: 2}, svc, Metrics{}, slog.New(slog.DiscardHandler))
	defer l.Close()
	other := "other"
	for i := 0; shard(other, 2) == shard("down", 2); i++ {
		other = fmt.Sprintf("other%d", i)
	}
	l.Publish(micRowEvent("down", 1, 101))
	poll.Until(t, 10*time.Second, "the first failure", poll.Bool(func() bool { return l.retryLen("down") == 1 }))
	const n = 30
	for v := int64(2); v <= n; v++ {
		if v%10 == 0 {
			l.Publish(event("down", v, room.EventRoomRocketIgnited, &room.RoomRocketIgnitedEvent{RocketID: v}))
		} else {
			l.Publish(micRowEvent("down", v, 100+v))
		}
		// The other room's messages, each sent before the next event,
		// give the failing room's budget time to refill.
		l.Publish(event(other, v, room.EventRoomRocketIgnited, &room.RoomRocketIgnitedEvent{RocketID: v}))
		poll.Until(t, 10*time.Second, "the other room's message", poll.Bool(func() bool { return svc.carried(other, room.EventRoomRocketIgnited, v) }))
	}
	svc.mu.Lock()
	var first *Message
	for i, m := range svc.attempts {
		if m.GroupID != "down" {
			continue
		}
		if first == nil {
			first = &svc.attempts[i]
		} else if m.Random != first.Random || !bytes.Equal(m.Data, first.Data) {
			svc.mu.Unlock()
			t.Fatalf("through the outage the room sent %s beside the message it was sending again", m.Data)
		}
	}
	// While the service is held, the one message is either waiting to be
	// sent again or out with a worker, trying.
	if got := l.retryOrOut("down"); got != 1 {
		svc.mu.Unlock()
		t.Fatalf("%d messages wait to be sent again or are out, want 1", got)
	}
	svc.up = true
	svc.mu.Unlock()
	poll.Until(t, 30*time.Second, "the newest mic row and every ignition", poll.Bool(func() bool {
		for v := int64(10); v <= n; v += 10 {
			if !svc.carried("down", room.EventRoomRocketIgnited, v) {
				return false
			}
		}
		return svc.carried("down", room.EventRoomMicChanged, n-1)
	}))
	for v := int64(2); v < n-1; v++ {
		if svc.carried("down", room.EventRoomMicChanged, v) {
			t.Fatalf("mic row %d, superseded during the outage, was sent after it", v)
		}
	}
}

// retryOrOut is the number of the room's messages waiting to be sent again
// or out on a lane.
func (l *Lane) retryOrOut(key string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if q := l.rooms[key]; q != nil {
		return len(q.retry) + q.out[outHigh] + q.out[outRest]
	}
	return 0
}

func (l *Lane) retryLen(key string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if q := l.rooms[key]; q != nil {
		return len(q.retry)
	}
	return 0
}

// TestAFrequencyRefusalLeavesAHighMessagesBackoff: a message refused for
// frequency goes again first, at once, but a High message waiting to be
// sent again keeps its own backoff: a new failure does not shorten it.
func TestAFrequencyRefusalLeavesAHighMessagesBackoff(t *testing.T) {
	l := New(Config{}, &outage{}, Metrics{}, slog.New(slog.DiscardHandler))
	defer l.Close()
	start := time.Now()
	l.failed(Message{RoomID: "down", GroupID: "down", Priority: room.PriorityHigh, attempts: 6}, "send_failed")
	l.failed(Message{RoomID: "down", GroupID: "down", Priority: room.PriorityNormal}, "rate_limited")
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, m := range l.rooms["down"].retry {
		if m.Priority == room.PriorityHigh && m.due.Before(start.Add(retryBackoff(7))) {
			t.Fatalf("the High message is due %v after its failure, its backoff is %v", m.due.Sub(start), retryBackoff(7))
		}
	}
}

// slowCreator is a groupService whose CreateGroup waits for gate, after
// telling entered it began.
type slowCreator struct {
	*groupService
	entered chan struct{}
	gate    chan struct{}
}

func (c slowCreator) CreateGroup(ctx context.Context, groupID, name string) error {
	close(c.entered)
	<-c.gate
	return c.groupService.CreateGroup(ctx, groupID, name)
}

// TestARoomThatClosesWhileItsGroupIsMadeAgainKeepsNoGroup: a send finds
// its group missing (group control, behind the lane, has not made it yet)
// and makes it; the room closes meanwhile and group control makes and
// dissolves the group before that create lands. The lane dissolves the
// group it made again.
func TestARoomThatClosesWhileItsGroupIsMadeAgainKeepsNoGroup(t *testing.T) {
	svc := newGroupService()
	svc.destroy("r1")
	cr := slowCreator{groupService: svc, entered: make(chan struct{}), gate: make(chan struct{})}
	l := New(Config{Budget: 20}, RecreatingSender{Sender: svc, Groups: cr}, Metrics{}, slog.New(slog.DiscardHandler))
	defer l.Close()
	l.Publish(event("r1", 1, room.EventRoomRocketIgnited, &room.RoomRocketIgnitedEvent{RocketID: 1}))
	select {
	case <-cr.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the send did not make the group again")
	}
	l.Publish(event("r1", 2, room.EventRoomClosed, &room.RoomClosedEvent{}))
	svc.destroy("r1") // group control: made, then dissolved
	poll.Until(t, 10*time.Second, "the lane to know the room closed", poll.Bool(func() bool { return l.closedFunc("r1")() }))
	close(cr.gate)
	poll.Until(t, 10*time.Second, "the RoomClosed send", poll.Bool(func() bool { return svc.tried("r1", room.EventRoomClosed, 2) }))
	svc.mu.Lock()
	defer svc.mu.Unlock()
	if !svc.gone["r1"] {
		t.Fatalf("the closed room's group exists again after group control dissolved it (%d creates by the lane)", svc.created)
	}
}

// outCount is the number of the room's messages out on the lane.
func (l *Lane) outCount(key string, lane int) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if q := l.rooms[key]; q != nil {
		return q.out[lane]
	}
	return 0
}

// outOn reports whether the room has a message out on the lane.
func (l *Lane) outOn(key string, lane int) bool { return l.outCount(key, lane) > 0 }

// TestAHighEventDoesNotWaitForANormalCall: while the worker of a room's
// Normal messages is busy with another group's slow call, and the room's
// own Normal message waits behind it, the room's High event goes at once,
// on its own lane; the Normal message goes once the call comes back.
func TestAHighEventDoesNotWaitForANormalCall(t *testing.T) {
	svc := newGroupService()
	svc.hold = "other"
	l := New(Config{Budget: 20, Workers: 1, SendTimeout: time.Hour}, svc, Metrics{}, slog.New(slog.DiscardHandler))
	defer l.Close()
	l.Publish(event("other", 1, room.EventRoomUserJoined, &room.RoomUserJoinedEvent{UserID: 4, OnlineCount: 1}))
	poll.Until(t, 10*time.Second, "the other group's call under way", poll.Bool(func() bool { return l.inQueue("other") == 0 && len(l.rest[0]) == 0 }))
	l.Publish(event("r1", 1, room.EventRoomUserJoined, &room.RoomUserJoinedEvent{UserID: 5, OnlineCount: 1}))
	poll.Until(t, 10*time.Second, "r1's Normal message out", poll.Bool(func() bool { return l.outOn("r1", outRest) }))
	l.Publish(event("r1", 2, room.EventRoomRocketIgnited, &room.RoomRocketIgnitedEvent{RocketID: 2}))
	poll.Until(t, 10*time.Second, "r1's High event sent", poll.Bool(func() bool { return svc.tried("r1", room.EventRoomRocketIgnited, 2) }))
	if svc.tried("r1", room.EventRoomUserJoined, 1) {
		t.Fatal("r1's Normal message went before the call it waits behind came back")
	}
	close(svc.gate)
	poll.Until(t, 10*time.Second, "r1's Normal message sent", poll.Bool(func() bool { return svc.tried("r1", room.EventRoomUserJoined, 1) }))
}

// TestAWorkerThatFallsBehindLosesNoDisplayEvent: while a worker's queue of
// Normal and Low messages is full (its calls are slow), the rooms it sends
// for keep their display events queued, where they fold into counts and
// go in one message later, instead of having messages made for them and
// lost (send_queue_full), with a lost_through for clients to repair. A
// room with High to send still sends it, on the High lane, with what it
// has queued.
func TestAWorkerThatFallsBehindLosesNoDisplayEvent(t *testing.T) {
	svc := newGroupService()
	svc.hold = "slow"
	shed := map[string]int{}
	var mu sync.Mutex
	l := New(Config{Budget: 20, Workers: 1}, svc, Metrics{Shed: func(p room.Priority, reason string) {
		mu.Lock()
		shed[string(p)+"/"+reason]++
		mu.Unlock()
	}}, slog.New(slog.DiscardHandler))
	defer l.Close()
	l.Publish(event("slow", 1, room.EventRoomUserJoined, &room.RoomUserJoinedEvent{UserID: 1, OnlineCount: 1}))
	poll.Until(t, 10*time.Second, "the slow call under way", poll.Bool(func() bool { return l.inQueue("slow") == 0 }))
	rooms := cap(l.rest[0]) + 8
	for i := range rooms {
		l.Publish(event(fmt.Sprint("r", i), 1, room.EventRoomUserJoined, &room.RoomUserJoinedEvent{UserID: 2, OnlineCount: 1}))
	}
	poll.Until(t, 10*time.Second, "the worker's queue full", poll.Bool(func() bool { return len(l.rest[0]) == cap(l.rest[0]) }))
	l.Publish(event("r0", 2, room.EventRoomRocketIgnited, &room.RoomRocketIgnitedEvent{RocketID: 1}))
	last := fmt.Sprint("r", rooms-1)
	l.Publish(event(last, 2, room.EventRoomRocketIgnited, &room.RoomRocketIgnitedEvent{RocketID: 1}))
	poll.Until(t, 10*time.Second, "the High events sent", poll.Bool(func() bool {
		return svc.tried("r0", room.EventRoomRocketIgnited, 2) && svc.tried(last, room.EventRoomRocketIgnited, 2)
	}))
	close(svc.gate)
	poll.Until(t, 10*time.Second, "every room's join sent", poll.Bool(func() bool {
		for i := range rooms {
			if !svc.tried(fmt.Sprint("r", i), room.EventRoomUserJoined, 1) {
				return false
			}
		}
		return true
	}))
	mu.Lock()
	defer mu.Unlock()
	if len(shed) > 0 {
		t.Fatalf("events lost while the worker fell behind: %v", shed)
	}
	svc.mu.Lock()
	defer svc.mu.Unlock()
	for _, m := range svc.attempts {
		if m.GroupID == last && typeIn(m.Data, room.EventRoomUserJoined) && !typeIn(m.Data, room.EventRoomRocketIgnited) {
			t.Fatalf("%s's join went in a message of its own, not with its High event: %s", last, m.Data)
		}
		if bytes.Contains(m.Data, []byte("lost_through")) {
			t.Fatalf("a message told clients to repair: %s", m.Data)
		}
	}
}
