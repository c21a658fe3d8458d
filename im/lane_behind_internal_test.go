// Tests of a lane whose workers fall behind.

package im

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"hyapp/room-service/internal/poll"
	"hyapp/room-service/room"
)

// countedCalls is a shared budget that grants every call asked for and
// counts them.
type countedCalls struct {
	mu      sync.Mutex
	granted int
}

func (c *countedCalls) Take(_ context.Context, n int) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.granted += n
	return n, nil
}

func (c *countedCalls) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.granted
}

// gatedSender records every send as it starts and lets each finish only
// when the test passes a token through gate (or closes it).
type gatedSender struct {
	mu    sync.Mutex
	sends []Message
	gate  chan struct{}
}

func (g *gatedSender) Send(ctx context.Context, m Message) error {
	g.mu.Lock()
	g.sends = append(g.sends, m)
	g.mu.Unlock()
	select {
	case <-g.gate:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (g *gatedSender) started() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.sends)
}

// TestAWorkerThatFallsBehindTakesNoCallItCannotUse: the rooms of a worker
// whose queue of Normal messages has one place left can all send, but only
// one message fits; a round takes calls from the shared app budget only
// for the messages it makes, not one for every room that could send. A
// call taken and not made is lost to every node sharing the budget.
func TestAWorkerThatFallsBehindTakesNoCallItCannotUse(t *testing.T) {
	for _, rooms := range []int{8, crowdedRooms + 8} {
		t.Run(fmt.Sprint(rooms, " rooms"), func(t *testing.T) { testNoCallItCannotUse(t, rooms) })
	}
}

func testNoCallItCannotUse(t *testing.T, rooms int) {
	calls := &countedCalls{}
	svc := &gatedSender{gate: make(chan struct{})}
	// An app budget large enough that a round may take a call for every
	// room that can send.
	l := New(Config{Budget: 20, AppBudget: 100_000, Workers: 1, SendTimeout: time.Hour, Calls: calls}, svc, Metrics{}, slog.New(slog.DiscardHandler))
	defer l.Close()
	released := func() int {
		l.mu.Lock()
		defer l.mu.Unlock()
		return svc.started() + len(l.rest[0])
	}
	var batch []room.Committed
	for i := range rooms {
		batch = append(batch, event(fmt.Sprint("r", i), 1, room.EventRoomUserJoined, &room.RoomUserJoinedEvent{UserID: int64(i), OnlineCount: 1})...)
	}
	l.Publish(batch)
	full := func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		return len(l.rest[0]) == cap(l.rest[0])
	}
	for sent := 1; sent <= rooms-restQueue; sent++ {
		poll.Until(t, 10*time.Second, fmt.Sprintf("send %d under way, the worker's queue full", sent), poll.Bool(func() bool {
			return svc.started() == sent && full()
		}))
		if got, want := calls.count(), released(); got != want {
			t.Fatalf("with %d sends started: %d calls taken from the app budget for %d messages made", sent, got, want)
		}
		if sent < rooms-restQueue {
			svc.gate <- struct{}{} // one call comes back: one place in the queue
		}
	}
	close(svc.gate)
	poll.Until(t, 10*time.Second, "every room's join sent", poll.Bool(func() bool { return svc.started() == rooms }))
	if got := calls.count(); got != rooms {
		t.Fatalf("%d calls taken from the app budget for %d messages", got, rooms)
	}
}

// TestAHighMessageToSendAgainDoesNotWaitForAFullWorker: a room's High
// message waits to be sent again (its send failed) and, in front of it, a
// Normal message Tencent refused for frequency, which goes again first.
// While the worker of the room's Normal messages has its queue full (its
// calls are slow), the Normal message cannot go; the High message, on a
// lane of its own, goes once its backoff is over, and so do the room's
// High events held behind it.
func TestAHighMessageToSendAgainDoesNotWaitForAFullWorker(t *testing.T) {
	svc := newGroupService()
	svc.hold = "" // the messages filling the worker
	l := New(Config{Budget: 20, Workers: 1, SendTimeout: time.Hour}, svc, Metrics{}, slog.New(slog.DiscardHandler))
	defer l.Close()
	defer close(svc.gate)
	for range cap(l.rest[0]) + 1 { // one with the worker, the rest waiting
		l.rest[0] <- Message{}
	}
	now := time.Now()
	l.failed(Message{RoomID: "r", GroupID: "r", Type: "RoomRocketIgnited", Priority: room.PriorityHigh, version: 1,
		Data: []byte(`{"room_version":1,"seq":0,"type":"RoomRocketIgnited"}`), Queued: now, since: now}, "send_failed")
	l.failed(Message{RoomID: "r", GroupID: "r", Type: "RoomUserJoined", Priority: room.PriorityNormal, version: 2,
		Data: []byte(`{"room_version":2,"seq":0,"type":"RoomUserJoined"}`), Queued: now, since: now}, "rate_limited")
	l.Publish(event("r", 3, room.EventRoomRocketLaunched, &room.RoomRocketLaunchedEvent{RocketID: 1}))
	poll.Until(t, 5*time.Second, "the High message sent again", poll.Bool(func() bool { return svc.tried("r", room.EventRoomRocketIgnited, 1) }))
	poll.Until(t, 5*time.Second, "the High event held behind it", poll.Bool(func() bool { return svc.tried("r", room.EventRoomRocketLaunched, 3) }))
	if svc.tried("r", room.EventRoomUserJoined, 2) {
		t.Fatal("the Normal message went while its worker's queue was full")
	}
	if n := len(l.rest[0]); n != cap(l.rest[0]) {
		t.Fatalf("the worker's queue holds %d, want it still full", n)
	}
}

// TestTheMessageKeptForHighIsNotSpentOnANormalOneSentAgain: a room whose
// group has one message of its budget left may send only High (it keeps
// the last for High, see restTokens). With a High event to send and, in
// front of it, a Normal message to send again (refused for frequency), the
// call it gets sends the High event, not the Normal message, which waits
// until two are left.
func TestTheMessageKeptForHighIsNotSpentOnANormalOneSentAgain(t *testing.T) {
	svc := &gatedSender{gate: make(chan struct{})}
	l := New(Config{Budget: 20, Tick: time.Hour, SendTimeout: time.Hour}, svc, Metrics{}, slog.New(slog.DiscardHandler))
	defer l.Close()
	defer close(svc.gate)
	now := time.Now()
	l.mu.Lock()
	q := l.queueLocked("r", "r", false)
	if !q.limiter.AllowN(now, 1) {
		l.mu.Unlock()
		t.Fatal("no message of the budget")
	}
	l.ready["r"] = true
	q.retry = append(q.retry, Message{RoomID: "r", GroupID: "r", Type: "RoomUserJoined", Priority: room.PriorityNormal, version: 1,
		Data: []byte(`{"room_version":1,"seq":0,"type":"RoomUserJoined"}`), Queued: now, since: now, attempts: 1})
	if l.eligibleLocked(q, now) {
		l.mu.Unlock()
		t.Fatal("a room with one message of its budget left may send a Normal message")
	}
	l.enqueueLocked("r", q, &item{typ: "RoomRocketIgnited", priority: room.PriorityHigh, env: &envelope{Type: "RoomRocketIgnited", RoomID: "r", RoomVersion: 2}, version: 2, queued: now}, false)
	l.releaseLocked(now, 1)
	l.mu.Unlock()
	poll.Until(t, 5*time.Second, "the call's send", poll.Bool(func() bool { return svc.started() == 1 }))
	svc.mu.Lock()
	m := svc.sends[0]
	svc.mu.Unlock()
	if m.Priority != room.PriorityHigh || !typeIn(m.Data, room.EventRoomRocketIgnited) {
		t.Fatalf("the last message of the budget went to a %s message %s, not to the High event", m.Priority, m.Data)
	}
}

// TestACrowdedLaneGivesAFreedPlaceToTheRoomWaitingLongest: in a crowded
// lane whose worker's queue is full, the rooms waiting on it cannot be in
// the turn order, which is then used up at once. When a call comes back
// and frees a place, the room waiting longest (here over a second, which
// counts as High) takes it, not a room whose event just arrived; with no
// such room, the place does not stay empty until the next turn order.
func TestACrowdedLaneGivesAFreedPlaceToTheRoomWaitingLongest(t *testing.T) {
	for _, newcomer := range []bool{true, false} {
		t.Run(fmt.Sprint("newcomer=", newcomer), func(t *testing.T) {
			l := New(Config{Budget: 20, Workers: 1, Tick: time.Hour, SendTimeout: time.Hour}, stuck{}, Metrics{}, slog.New(slog.DiscardHandler))
			defer l.Close()
			for range cap(l.rest[0]) + 1 { // one with the worker, the rest waiting
				l.rest[0] <- Message{}
			}
			start := time.Now()
			l.mu.Lock()
			defer l.mu.Unlock()
			join := func(at time.Time) *item {
				return &item{typ: "RoomUserJoined", priority: room.PriorityNormal, env: &envelope{Type: "RoomUserJoined"}, queued: at, merge: true}
			}
			for i := range crowdedRooms + 1 {
				key := fmt.Sprint("old", i)
				l.enqueueLocked(key, l.queueLocked(key, key, false), join(start.Add(-2*time.Second)), false)
			}
			clear(l.roster.fresh) // waiting since before the last turn order
			if got := l.rosterLocked(start, 1); len(got) != 0 {
				t.Fatalf("%d rooms can send while their worker's queue is full", len(got))
			}
			<-l.rest[0] // a call came back: one place
			if newcomer {
				l.enqueueLocked("new", l.queueLocked("new", "new", false), join(start), false)
			}
			l.releaseLocked(start.Add(10*time.Millisecond), 1)
			if len(l.rest[0]) != cap(l.rest[0]) {
				t.Fatal("the freed place went to no room")
			}
			var last Message
			for range cap(l.rest[0]) {
				last = <-l.rest[0]
			}
			if !strings.HasPrefix(last.RoomID, "old") {
				t.Fatalf("the freed place went to %s, not to a room waiting for 2s", last.RoomID)
			}
		})
	}
}

// TestANormalMessageToSendAgainGoesInARoomBusyWithHigh: a room whose High
// events come faster than its group's budget refills spends every message
// of the budget on High, so it never has the two a message without High
// needs (restTokens). Its Normal message refused for frequency, which no
// later message can carry, must still go once it has waited a second, as
// a room waiting that long counts as High (promoteAfter); it must not wait
// for the room's High events to stop, while newer Normal events go ahead
// of it in the High messages.
func TestANormalMessageToSendAgainGoesInARoomBusyWithHigh(t *testing.T) {
	l := New(Config{Budget: 20, Workers: 1, Tick: time.Hour, SendTimeout: time.Hour}, stuck{}, Metrics{}, slog.New(slog.DiscardHandler))
	defer l.Close()
	// Each worker holds a message of its own for ever: the test takes what
	// the lane releases from the workers' queues.
	l.high[0] <- Message{}
	l.rest[0] <- Message{}
	poll.Until(t, 5*time.Second, "both workers busy", poll.Bool(func() bool { return len(l.high[0])+len(l.rest[0]) == 0 }))
	start := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	q := l.queueLocked("r", "r", false)
	if !q.limiter.AllowN(start, 1) {
		t.Fatal("no message of the budget")
	}
	l.ready["r"] = true
	q.retry = append(q.retry, Message{RoomID: "r", GroupID: "r", Type: "RoomUserJoined", Priority: room.PriorityNormal, version: 1,
		Data: []byte(`{"room_version":1,"seq":0,"type":"RoomUserJoined"}`), Queued: start, Released: start, since: start, attempts: 1})
	highSent := 0
	for ms := 0; ms <= 3000; ms += 10 {
		now := start.Add(time.Duration(ms) * time.Millisecond)
		if ms%50 == 0 { // 20 High events a second, over the group's rate of 18
			v := int64(2 + ms)
			l.enqueueLocked("r", q, &item{typ: "RoomUserMuted", priority: room.PriorityHigh,
				env: &envelope{Type: "RoomUserMuted", RoomID: "r", RoomVersion: v}, version: v, queued: now}, false)
		}
		l.releaseLocked(now, 1)
		for len(l.high[0]) > 0 {
			q.back(<-l.high[0])
			highSent++
		}
		if len(l.rest[0]) > 0 {
			if m := <-l.rest[0]; m.Type == "RoomUserJoined" && m.version == 1 {
				if waited := now.Sub(start); waited > promoteAfter+200*time.Millisecond {
					t.Fatalf("the Normal message went again after %v", waited)
				}
				if highSent == 0 {
					t.Fatal("no High message went before it")
				}
				return
			}
		}
	}
	t.Fatalf("the Normal message did not go again in 3s of a room busy with High (%d High messages sent)", highSent)
}

// TestARoundMakesAMessageForEveryCallWhenARoomWithHighHasANormalToSendAgain:
// a room with High events to send counts in a round as sending on the High
// lane, which needs no place in its worker's queue of Normal messages. If
// its call went to its Normal message to send again (refused for
// frequency), that message would take the place counted for another room
// of the worker, whose call, taken from the shared app budget, would then
// be lost to every node; and the room's High events would wait for
// another turn. The room sends its High events; the other room its join.
func TestARoundMakesAMessageForEveryCallWhenARoomWithHighHasANormalToSendAgain(t *testing.T) {
	calls := &countedCalls{}
	l := New(Config{Budget: 20, AppBudget: 100_000, Workers: 1, Tick: time.Hour, SendTimeout: time.Hour, Calls: calls}, stuck{}, Metrics{}, slog.New(slog.DiscardHandler))
	defer l.Close()
	// Each worker holds a message of its own for ever, and the queue of
	// Normal messages has one place left.
	l.high[0] <- Message{}
	l.rest[0] <- Message{}
	poll.Until(t, 5*time.Second, "both workers busy", poll.Bool(func() bool { return len(l.high[0])+len(l.rest[0]) == 0 }))
	l.rest[0] <- Message{}
	now := time.Now()
	l.mu.Lock()
	a := l.queueLocked("a", "a", false)
	a.retry = append(a.retry, Message{RoomID: "a", GroupID: "a", Type: "RoomUserJoined", Priority: room.PriorityNormal, version: 1,
		Data: []byte(`{"room_version":1,"seq":0,"type":"RoomUserJoined"}`), Queued: now, Released: now, since: now, attempts: 1})
	l.enqueueLocked("a", a, &item{typ: "RoomUserMuted", priority: room.PriorityHigh,
		env: &envelope{Type: "RoomUserMuted", RoomID: "a", RoomVersion: 2}, version: 2, queued: now}, false)
	b := l.queueLocked("b", "b", false)
	l.enqueueLocked("b", b, &item{typ: "RoomUserJoined", priority: room.PriorityNormal, merge: true,
		env: &envelope{Type: "RoomUserJoined", RoomID: "b", RoomVersion: 1}, version: 1, queued: now.Add(-10 * time.Millisecond)}, false)
	l.mu.Unlock()
	l.round(context.Background(), now, false)
	l.mu.Lock()
	defer l.mu.Unlock()
	var made []Message
	for len(l.high[0]) > 0 {
		made = append(made, <-l.high[0])
	}
	<-l.rest[0] // the test's own
	for len(l.rest[0]) > 0 {
		made = append(made, <-l.rest[0])
	}
	if got := calls.count(); got != len(made) {
		t.Fatalf("%d calls taken from the app budget for %d messages made", got, len(made))
	}
	high := false
	for _, m := range made {
		high = high || m.RoomID == "a" && m.Priority == room.PriorityHigh
	}
	if !high {
		t.Fatalf("room a's High event did not go: %d messages made", len(made))
	}
}
