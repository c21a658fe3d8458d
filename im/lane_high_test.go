package im_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"hyapp/room-service/im"
	"hyapp/room-service/internal/poll"
	"hyapp/room-service/room"
)

// flaky records what it sent, like recorder, but first asks fail whether
// this attempt fails and with what.
type flaky struct {
	recorder
	mu       sync.Mutex
	attempts []im.Message
	fail     func(attempt int, m im.Message) error
}

func (f *flaky) Send(ctx context.Context, m im.Message) error {
	f.mu.Lock()
	f.attempts = append(f.attempts, m)
	err := f.fail(len(f.attempts), m)
	f.mu.Unlock()
	if err != nil {
		return err
	}
	return f.recorder.Send(ctx, m)
}

// shedCounts counts shed events by "priority/reason", and coalesced ones.
type shedCounts struct {
	mu        sync.Mutex
	shed      map[string]int
	coalesced int
}

func (c *shedCounts) metrics() im.Metrics {
	c.shed = map[string]int{}
	return im.Metrics{
		Shed:      func(p room.Priority, reason string) { c.mu.Lock(); c.shed[string(p)+"/"+reason]++; c.mu.Unlock() },
		Coalesced: func() { c.mu.Lock(); c.coalesced++; c.mu.Unlock() },
	}
}

func (c *shedCounts) get(key string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.shed[key]
}

// eventKey names one event of a message: its type and (room_version, seq).
type eventKey struct {
	typ          string
	version, seq int64
}

// eventsIn lists the events a message shows, a Batch's one by one.
func eventsIn(t *testing.T, data []byte) []eventKey {
	t.Helper()
	var env struct {
		Type        string            `json:"type"`
		RoomVersion int64             `json:"room_version"`
		Seq         int64             `json:"seq"`
		Events      []json.RawMessage `json:"events"`
	}
	if err := json.Unmarshal(data, &env); err != nil {
		t.Fatalf("message data %q: %v", data, err)
	}
	if env.Type != "Batch" {
		return []eventKey{{env.Type, env.RoomVersion, env.Seq}}
	}
	var out []eventKey
	for _, e := range env.Events {
		out = append(out, eventsIn(t, e)...)
	}
	return out
}

// delivered is the set of events the sender got, by key.
func delivered(t *testing.T, r *recorder) map[eventKey]int {
	out := map[eventKey]int{}
	for _, s := range r.all() {
		for _, k := range eventsIn(t, s.msg.Data) {
			out[k]++
		}
	}
	return out
}

func micChange(roomID string, version int64, user int64) []room.Committed {
	seats := make([]room.Seat, 10)
	seats[1].UserID = user
	return []room.Committed{{RoomID: roomID, RoomVersion: version, At: time.Now().UnixMilli(), Seats: seats,
		Events: []room.Event{{Type: room.EventRoomMicChanged, Data: &room.RoomMicChangedEvent{Action: room.MicTake, UserID: user, SeatIndex: 1}}}}}
}

// TestFailedHighIsSentAgain: High messages whose sends fail (an error, a
// timeout, a drop by Tencent's frequency control) are sent again until they
// go through, and never counted as shed. A message Tencent dropped goes
// again with a new Random (Tencent would drop the same one as a duplicate);
// one that failed otherwise keeps its Random (it may have arrived).
func TestFailedHighIsSentAgain(t *testing.T) {
	tries := map[string][]im.Message{} // attempts by message data
	f := &flaky{fail: func(_ int, m im.Message) error {
		tries[string(m.Data)] = append(tries[string(m.Data)], m)
		switch len(tries[string(m.Data)]) {
		case 1:
			return errors.New("connection reset")
		case 2:
			return im.ErrDropped
		}
		return nil
	}}
	var c shedCounts
	lane := im.New(im.Config{Budget: 1000}, f, c.metrics(), quiet)
	defer lane.Close()
	const n = 30
	for v := int64(1); v <= n; v++ {
		// Without the mic row: each must be delivered, none supersedes another.
		lane.Publish(committed("r1", v, room.EventRoomMicChanged, &room.RoomMicChangedEvent{Action: room.MicTake, UserID: 100 + v}))
	}
	poll.Until(t, 30*time.Second, "every mic change", poll.Bool(func() bool { return len(delivered(t, &f.recorder)) == n }))
	for k, got := range delivered(t, &f.recorder) {
		if got != 1 || k.typ != string(room.EventRoomMicChanged) || k.seq != 0 {
			t.Fatalf("event %+v delivered %d times", k, got)
		}
	}
	if n := c.get("High/send_failed") + c.get("High/dropped_by_im"); n != 0 {
		t.Fatalf("%d High events counted as shed", n)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, s := range f.all() {
		try := tries[string(s.msg.Data)]
		if len(try) != 3 {
			t.Fatalf("a message sent after %d attempts, want 3", len(try))
		}
		if try[0].Random != try[1].Random || try[1].Random == try[2].Random {
			t.Fatalf("Random %d after an error, %d after a drop, %d sent", try[0].Random, try[1].Random, try[2].Random)
		}
	}
}

// TestHighSurvivesAnOutageBounded: while the endpoint is down, a room's
// High queue stays bounded by superseding older mic rows with the newest
// one, and every other High event (an ignition) is kept; once the endpoint
// is back, the newest mic row and every ignition arrive, nothing High shed.
func TestHighSurvivesAnOutageBounded(t *testing.T) {
	var down sync.Mutex
	up := false
	f := &flaky{fail: func(int, im.Message) error {
		down.Lock()
		defer down.Unlock()
		if !up {
			return errors.New("503 service unavailable")
		}
		return nil
	}}
	var c shedCounts
	lane := im.New(im.Config{Budget: 1000, QueueLimit: 10}, f, c.metrics(), quiet)
	defer lane.Close()
	const n = 200
	for v := int64(1); v <= n; v++ {
		if v%20 == 0 {
			lane.Publish(committed("r1", v, room.EventRoomRocketIgnited, &room.RoomRocketIgnitedEvent{RocketID: v}))
			continue
		}
		lane.Publish(micChange("r1", v, 100+v))
	}
	poll.Until(t, 30*time.Second, "failed attempts", poll.Bool(func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		return len(f.attempts) > 3
	}))
	down.Lock()
	up = true
	down.Unlock()
	poll.Until(t, 30*time.Second, "the newest mic row and every ignition", poll.Bool(func() bool {
		got := delivered(t, &f.recorder)
		ignitions := 0
		for k := range got {
			if k.typ == string(room.EventRoomRocketIgnited) {
				ignitions++
			}
		}
		return got[eventKey{string(room.EventRoomMicChanged), n - 1, 0}] == 1 && ignitions == n/20
	}))
	for k, v := range c.shed {
		if k[:4] == "High" {
			t.Fatalf("%d High events shed (%s)", v, k)
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.coalesced == 0 {
		t.Fatal("no mic row superseded while 190 queued behind a queue limit of 10")
	}
}

// TestHighOfAClosedRoomEnds: once a room's RoomClosed is queued its group is
// going away, so a High message that then fails is dropped (room_closed)
// instead of being sent again without end.
func TestHighOfAClosedRoomEnds(t *testing.T) {
	f := &flaky{fail: func(int, im.Message) error { return errors.New("group dismissed") }}
	var c shedCounts
	lane := im.New(im.Config{Budget: 1000}, f, c.metrics(), quiet)
	defer lane.Close()
	lane.Publish([]room.Committed{{RoomID: "r1", RoomVersion: 9, Events: []room.Event{
		{Type: room.EventRoomMicChanged, Data: &room.RoomMicChangedEvent{Action: room.MicRoomClose, UserID: 7}},
		{Type: room.EventRoomClosed, Data: &room.RoomClosedEvent{}},
	}}})
	poll.Until(t, 30*time.Second, "the closed room's messages to end", poll.Bool(func() bool { return c.get("High/room_closed") > 0 }))
	if n := c.get("High/send_failed"); n != 0 {
		t.Fatalf("%d High events counted as send_failed", n)
	}
	// Rounds go on for another room; none of them tells the closed room of
	// its loss, since a group recreated for that notice would outlive the room.
	f.mu.Lock()
	tried := len(f.attempts)
	f.mu.Unlock()
	for v := int64(1); v <= 3; v++ {
		lane.Publish(micChange("r2", v, 7))
		poll.Until(t, 30*time.Second, "the other room's message", poll.Bool(func() bool {
			f.mu.Lock()
			defer f.mu.Unlock()
			return len(f.attempts) > 0 && f.attempts[len(f.attempts)-1].RoomID == "r2" && len(f.attempts) >= tried+int(v)
		}))
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, m := range f.attempts[tried:] {
		if m.RoomID == "r1" {
			t.Fatalf("after its RoomClosed the closed room was sent %s", m.Data)
		}
	}
}

// TestHighRefusedForGoodIsShedNotSentAgain: a High message Tencent refuses
// for good (content security: TencentSender returns an *im.PermanentError)
// is tried once and counted shed with the refusal's reason, and the room's
// next messages tell clients of the loss.
func TestHighRefusedForGoodIsShedNotSentAgain(t *testing.T) {
	refused := func(m im.Message) bool { return strings.Contains(string(m.Data), `"room_version":1,`) }
	f := &flaky{fail: func(_ int, m im.Message) error {
		if refused(m) {
			return &im.PermanentError{Reason: "tencent_80001", Err: errors.New("tencent im send_group_msg: error 80001 (invalid request): content security")}
		}
		return nil
	}}
	var c shedCounts
	lane := im.New(im.Config{}, f, c.metrics(), quiet)
	defer lane.Close()
	lane.Publish(committed("r1", 1, room.EventRoomRocketIgnited, &room.RoomRocketIgnitedEvent{RocketID: 1}))
	poll.Until(t, 10*time.Second, "the refused message counted shed", poll.Bool(func() bool { return c.get("High/tencent_80001") == 1 }))
	lane.Publish(committed("r1", 2, room.EventRoomRocketIgnited, &room.RoomRocketIgnitedEvent{RocketID: 2}))
	poll.Until(t, 10*time.Second, "the next ignition", poll.Bool(func() bool {
		return delivered(t, &f.recorder)[eventKey{string(room.EventRoomRocketIgnited), 2, 0}] == 1
	}))
	for _, s := range f.all() {
		var m struct {
			LostThrough int64 `json:"lost_through"`
		}
		if err := json.Unmarshal(s.msg.Data, &m); err != nil {
			t.Fatal(err)
		}
		if m.LostThrough != 1 {
			t.Fatalf("a message after the refused one without its lost_through: %s", s.msg.Data)
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	tries := 0
	for _, m := range f.attempts {
		if refused(m) {
			tries++
		}
	}
	if tries != 1 {
		t.Fatalf("the refused message was tried %d times; shed %v", tries, c.shed)
	}
}

// TestALossNoticeRefusedForGoodIsNotSentAgain: when Tencent refuses every
// message of a room for good, the refused event's loss is told once: the
// notice, refused too, is not told again while other rooms go on sending.
func TestALossNoticeRefusedForGoodIsNotSentAgain(t *testing.T) {
	f := &flaky{fail: func(_ int, m im.Message) error {
		if m.RoomID == "r1" {
			return &im.PermanentError{Reason: "tencent_10004", Err: errors.New("tencent im send_group_msg: error 10004 (invalid request): bad parameter")}
		}
		return nil
	}}
	var c shedCounts
	lane := im.New(im.Config{}, f, c.metrics(), quiet)
	defer lane.Close()
	lane.Publish(committed("r1", 1, room.EventRoomRocketIgnited, &room.RoomRocketIgnitedEvent{RocketID: 1}))
	poll.Until(t, 10*time.Second, "the refused notice", poll.Bool(func() bool { return c.get("Low/tencent_10004") == 1 }))
	for v := int64(1); v <= 5; v++ {
		lane.Publish(committed("r2", v, room.EventRoomRocketIgnited, &room.RoomRocketIgnitedEvent{RocketID: v}))
		poll.Until(t, 10*time.Second, "the other room's message", poll.Bool(func() bool { return len(f.all()) == int(v) }))
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	tries := 0
	for _, m := range f.attempts {
		if m.RoomID == "r1" {
			tries++
		}
	}
	if tries != 2 {
		t.Fatalf("%d sends for the refused event and its notice, want 2; shed %v", tries, c.shed)
	}
}

// TestLostEventsRaiseLostThrough: when the lane sheds events of a room
// (queue full), its later messages carry lost_through, the newest version
// it lost, and every event carries its seq.
func TestLostEventsRaiseLostThrough(t *testing.T) {
	rec := &recorder{}
	var c shedCounts
	lane := im.New(im.Config{Budget: 5, QueueLimit: 10}, rec, c.metrics(), quiet)
	defer lane.Close()
	// Admin changes carry state (admin:<user>), so over the queue limit they
	// are lost, not folded into a count.
	for v := int64(1); v <= 100; v++ {
		lane.Publish(committed("r1", v, room.EventRoomAdminChanged, &room.RoomAdminChangedEvent{UserID: v}))
	}
	lane.Publish(micChange("r1", 101, 7))
	gift := string(room.EventRoomAdminChanged)
	poll.Until(t, 30*time.Second, "the mic change and the last gift", poll.Bool(func() bool {
		got := delivered(t, rec)
		return got[eventKey{string(room.EventRoomMicChanged), 101, 0}] == 1 && got[eventKey{gift, 100, 0}] == 1
	}))
	got := delivered(t, rec)
	var missing []int64
	for v := int64(1); v <= 100; v++ {
		if got[eventKey{gift, v, 0}] == 0 {
			missing = append(missing, v)
		}
	}
	if len(missing) == 0 || len(missing) != c.get("Normal/queue_full") {
		t.Fatalf("%d gifts missing, %d shed", len(missing), c.get("Normal/queue_full"))
	}
	var newest int64
	for _, s := range rec.all() {
		var env struct {
			LostThrough int64 `json:"lost_through"`
		}
		if err := json.Unmarshal(s.msg.Data, &env); err != nil {
			t.Fatal(err)
		}
		newest = max(newest, env.LostThrough)
	}
	if newest != missing[len(missing)-1] {
		t.Fatalf("lost_through %d, the newest gift shed is %d", newest, missing[len(missing)-1])
	}
}

// TestLossOfTheLastMessageIsTold: when a room's last message is lost, the
// room sends a message with no event carrying its lost_through, so clients
// learn of the loss although nothing newer comes.
func TestLossOfTheLastMessageIsTold(t *testing.T) {
	f := &flaky{fail: func(attempt int, _ im.Message) error {
		if attempt == 1 {
			return errors.New("connection reset")
		}
		return nil
	}}
	var c shedCounts
	lane := im.New(im.Config{}, f, c.metrics(), quiet)
	defer lane.Close()
	lane.Publish(committed("r1", 5, room.EventRoomGiftSent, &room.RoomGiftSentEvent{SenderUserID: 7}))
	poll.Until(t, 10*time.Second, "the notice", poll.Bool(func() bool { return len(f.all()) == 1 }))
	var m struct {
		Type        string            `json:"type"`
		RoomID      string            `json:"room_id"`
		Events      []json.RawMessage `json:"events"`
		LostThrough int64             `json:"lost_through"`
	}
	if err := json.Unmarshal(f.all()[0].msg.Data, &m); err != nil {
		t.Fatal(err)
	}
	if m.Type != "Batch" || m.RoomID != "r1" || len(m.Events) != 0 || m.LostThrough != 5 || c.get("Normal/send_failed") != 1 {
		t.Fatalf("notice %+v, shed %v", m, c.shed)
	}
}
