package im_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"hyapp/room-service/im"
	"hyapp/room-service/internal/poll"
	"hyapp/room-service/room"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var quiet = slog.New(slog.DiscardHandler)

// recorder keeps what was sent and when.
type recorder struct {
	mu    sync.Mutex
	sent  []sent
	block chan struct{} // when set, Send waits for it (a hanging endpoint)
}

type sent struct {
	at  time.Time
	msg im.Message
}

func (r *recorder) Send(ctx context.Context, m im.Message) error {
	if r.block != nil {
		select {
		case <-r.block:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	r.mu.Lock()
	r.sent = append(r.sent, sent{m.Released, m}) // when the budget let it go, free of scheduling jitter
	r.mu.Unlock()
	return nil
}

func (r *recorder) all() []sent {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]sent(nil), r.sent...)
}

type counts struct {
	mu     sync.Mutex
	shed   map[string]int
	merged int
}

func (c *counts) metrics() im.Metrics {
	c.shed = map[string]int{}
	return im.Metrics{
		Shed: func(p room.Priority, reason string) {
			c.mu.Lock()
			c.shed[string(p)]++
			c.mu.Unlock()
		},
		Merged: func(n int) { c.mu.Lock(); c.merged += n; c.mu.Unlock() },
	}
}

// typesIn lists the event types a message shows: its own, or those of the
// events a Batch carries.
func typesIn(t *testing.T, data []byte) []string {
	var env struct {
		Type   string            `json:"type"`
		Events []json.RawMessage `json:"events"`
	}
	if err := json.Unmarshal(data, &env); err != nil {
		t.Fatalf("message data %q: %v", data, err)
	}
	if env.Type != "Batch" {
		return []string{env.Type}
	}
	var out []string
	for _, e := range env.Events {
		out = append(out, typesIn(t, e)...)
	}
	return out
}

func countType(t *testing.T, msgs [][]byte, typ room.EventType) int {
	n := 0
	for _, m := range msgs {
		for _, got := range typesIn(t, m) {
			if got == string(typ) {
				n++
			}
		}
	}
	return n
}

func committed(roomID string, version int64, typ room.EventType, data any) []room.Committed {
	return []room.Committed{{RoomID: roomID, RoomVersion: version, At: time.Now().UnixMilli(), Events: []room.Event{{Type: typ, Data: data}}}}
}

// TestBurstStaysInBudgetAndKeepsHigh pushes a 1,000-event burst into one room:
// the group gets no more than its budget in any second, every High event
// arrives, Low and Normal are merged or shed, and the heat display arrives at
// most once a second with its last value.
func TestBurstStaysInBudgetAndKeepsHigh(t *testing.T) {
	rec := &recorder{}
	var c counts
	lane := im.New(im.Config{Budget: 20, QueueLimit: 100}, rec, c.metrics(), quiet)
	defer lane.Close()
	const n = 1000
	high := 0
	for v := int64(1); v <= n; v++ {
		switch v % 10 {
		case 0:
			lane.Publish(committed("r1", v, room.EventRoomMicChanged, &room.RoomMicChangedEvent{Action: room.MicTake, UserID: v}))
			high++
		case 1, 2, 3:
			lane.Publish(committed("r1", v, room.EventRoomUserJoined, &room.RoomUserJoinedEvent{UserID: v}))
		case 4, 5:
			lane.Publish(committed("r1", v, room.EventRoomHeatChanged, map[string]int64{"heat": v}))
		default:
			lane.Publish(committed("r1", v, room.EventRoomUserLeft, &room.RoomUserLeftEvent{UserID: v}))
		}
	}
	lastHeat := fmt.Sprint(int64(n - 5))
	poll.Until(t, 30*time.Second, "every High event and the last heat", poll.Bool(func() bool {
		gotHigh, heat := 0, ""
		for _, s := range rec.all() {
			gotHigh += countType(t, [][]byte{s.msg.Data}, room.EventRoomMicChanged)
			for _, h := range heatsIn(t, s.msg.Data) {
				heat = fmt.Sprint(h)
			}
		}
		return gotHigh == high && heat == lastHeat
	}))
	all := rec.all()
	slices.SortFunc(all, func(a, b sent) int { return a.at.Compare(b.at) })
	for i := range all {
		inWindow := 0
		for j := i; j < len(all) && all[j].at.Sub(all[i].at) < time.Second; j++ {
			inWindow++
		}
		if inWindow > 20+5 { // the budget plus its burst
			t.Fatalf("%d messages within one second, budget 20", inWindow)
		}
	}
	var heats []time.Time
	for _, s := range all {
		if len(heatsIn(t, s.msg.Data)) > 0 {
			heats = append(heats, s.at)
		}
	}
	for i := 1; i < len(heats); i++ {
		if heats[i].Sub(heats[i-1]) < time.Second {
			t.Fatalf("heat sent twice within %v", heats[i].Sub(heats[i-1]))
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.shed["High"] != 0 {
		t.Fatalf("%d High events shed", c.shed["High"])
	}
	if c.merged == 0 && c.shed["Low"]+c.shed["Normal"] == 0 {
		t.Fatal("a 1,000-event burst over a budget of 20 merged and shed nothing")
	}
}

// TestHangingEndpointNeverBlocksPublish: with every send hanging, Publish
// still returns at once and the lane does not queue without end: more rooms
// than the workers' queues hold wait, and past QueueLimit their display
// events fold into counts.
func TestHangingEndpointNeverBlocksPublish(t *testing.T) {
	rec := &recorder{block: make(chan struct{})}
	var c counts
	lane := im.New(im.Config{Budget: 1000, Workers: 2, SendTimeout: time.Hour, QueueLimit: 20}, rec, c.metrics(), quiet)
	defer lane.Close()
	defer close(rec.block)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for v := int64(1); v <= 20_000; v++ {
			lane.Publish(committed(fmt.Sprint("room-", v%200), v, room.EventRoomUserJoined, &room.RoomUserJoinedEvent{UserID: v}))
		}
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("Publish blocked behind a hanging endpoint")
	}
	poll.Until(t, 10*time.Second, "the lane to fold", poll.Bool(func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.merged > 0
	}))
}

type bigGift struct{ Value int64 }

func (g bigGift) RegionalDisplay() (string, bool) { return "sg", g.Value >= 1000 }

func TestBigEventsAlsoGoToTheRegionalGroup(t *testing.T) {
	rec := &recorder{}
	lane := im.New(im.Config{RegionalGroups: map[string]string{"sg": "region-sg"}}, rec, im.Metrics{}, quiet)
	defer lane.Close()
	lane.Publish(committed("r1", 1, room.EventRoomMicChanged, bigGift{Value: 10}))
	lane.Publish(committed("r1", 2, room.EventRoomMicChanged, bigGift{Value: 5000}))
	groups := map[string]int{}
	poll.Until(t, 10*time.Second, "three events", poll.Bool(func() bool {
		clear(groups)
		for _, s := range rec.all() {
			groups[s.msg.GroupID] += len(typesIn(t, s.msg.Data))
		}
		return groups["r1"]+groups["region-sg"] == 3
	}))
	if groups["r1"] != 2 || groups["region-sg"] != 1 {
		t.Fatalf("messages by group: %v", groups)
	}
}

// heatsIn lists the heat values a message carries, alone or in a Batch.
func heatsIn(t *testing.T, data []byte) []int64 {
	var env struct {
		Type   string            `json:"type"`
		Data   json.RawMessage   `json:"data"`
		Events []json.RawMessage `json:"events"`
	}
	if err := json.Unmarshal(data, &env); err != nil {
		t.Fatalf("message data %q: %v", data, err)
	}
	if env.Type == string(room.EventRoomHeatChanged) {
		var heat struct {
			Heat int64 `json:"heat"`
		}
		if err := json.Unmarshal(env.Data, &heat); err != nil {
			t.Fatal(err)
		}
		return []int64{heat.Heat}
	}
	var out []int64
	for _, e := range env.Events {
		out = append(out, heatsIn(t, e)...)
	}
	return out
}

// TestOverflowFoldsDisplayEventsIntoCounts: over its queue limit a room's
// oldest joins fold into a count that goes with its next message; the
// newest join (the online count) is always sent itself.
func TestOverflowFoldsDisplayEventsIntoCounts(t *testing.T) {
	rec := &recorder{}
	var c counts
	lane := im.New(im.Config{QueueLimit: 10}, rec, c.metrics(), quiet)
	defer lane.Close()
	var batch []room.Committed
	for v := int64(1); v <= 30; v++ {
		batch = append(batch, committed("r1", v, room.EventRoomUserJoined, &room.RoomUserJoinedEvent{UserID: v, OnlineCount: int(v)})...)
	}
	lane.Publish(batch)
	poll.Until(t, 10*time.Second, "a message", poll.Bool(func() bool { return len(rec.all()) > 0 }))
	var m struct {
		RoomID string         `json:"room_id"`
		Folded map[string]int `json:"folded"`
	}
	data := rec.all()[0].msg.Data
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	keys := eventsIn(t, data)
	if m.RoomID != "r1" || m.Folded[string(room.EventRoomUserJoined)] != 20 || len(keys) != 10 || keys[9].version != 30 {
		t.Fatalf("room %q, folded %v, events %v; want 20 folded and the newest 10 sent", m.RoomID, m.Folded, keys)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.shed) != 0 {
		t.Fatalf("shed %v; display events over the limit fold instead", c.shed)
	}
}

// TestOverflowFoldsGiftsIntoCombos: over the queue limit, gifts fold into
// one combo per sender and gift, with their pieces and value summed.
func TestOverflowFoldsGiftsIntoCombos(t *testing.T) {
	rec := &recorder{}
	lane := im.New(im.Config{QueueLimit: 10}, rec, im.Metrics{}, quiet)
	defer lane.Close()
	var batch []room.Committed
	for v := int64(1); v <= 30; v++ {
		batch = append(batch, committed("r1", v, room.EventRoomGiftSent,
			&room.RoomGiftSentEvent{SenderUserID: 100 + v%2, GiftID: "rose", GiftName: "Rose", Count: 3, Cost: 30})...)
	}
	lane.Publish(batch)
	poll.Until(t, 10*time.Second, "a message", poll.Bool(func() bool { return len(rec.all()) > 0 }))
	var m struct {
		FoldedGifts []struct {
			Sender int64 `json:"sender_user_id"`
			Count  int64 `json:"count"`
			Cost   int64 `json:"cost"`
			Gifts  int   `json:"gifts"`
		} `json:"folded_gifts"`
	}
	data := rec.all()[0].msg.Data
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	if len(m.FoldedGifts) != 2 || m.FoldedGifts[0].Gifts+m.FoldedGifts[1].Gifts != 20 ||
		m.FoldedGifts[0].Count != 3*int64(m.FoldedGifts[0].Gifts) || m.FoldedGifts[1].Cost != 30*int64(m.FoldedGifts[1].Gifts) {
		t.Fatalf("combos %+v; want two senders' 20 gifts", m.FoldedGifts)
	}
	if n := len(eventsIn(t, data)); n != 10 {
		t.Fatalf("%d gifts sent one by one, want the newest 10", n)
	}
}

// encodeCounter is event data that counts its encodings.
type encodeCounter struct {
	N     int64
	count *atomic.Int64
}

func (e encodeCounter) MarshalJSON() ([]byte, error) {
	e.count.Add(1)
	return json.Marshal(map[string]int64{"n": e.N})
}

// TestSupersededEventsAreNeverEncoded: a room whose profile changes far
// faster than its group's budget sends only the newest profile, and the
// lane encodes only what it sends, not each superseded change.
func TestSupersededEventsAreNeverEncoded(t *testing.T) {
	rec := &recorder{block: make(chan struct{})}
	lane := im.New(im.Config{Budget: 5}, rec, im.Metrics{}, quiet)
	defer lane.Close()
	var encoded atomic.Int64
	const n = 500
	for v := int64(1); v <= n; v++ {
		lane.Publish(committed("r1", v, room.EventRoomProfileUpdated, encodeCounter{N: v, count: &encoded}))
	}
	close(rec.block)
	poll.Until(t, 30*time.Second, "the newest profile", poll.Bool(func() bool {
		for _, s := range rec.all() {
			if bytes.Contains(s.msg.Data, []byte(`"n":500`)) {
				return true
			}
		}
		return false
	}))
	if got := encoded.Load(); got > int64(len(rec.all()))+1 {
		t.Fatalf("%d profile changes encoded for %d messages sent", got, len(rec.all()))
	}
}

// TestFoldedRobotTypesKeepAMessageWithinMaxBytes: robot display events
// fold by their type, which the caller names (up to 64 bytes). A burst of
// many types over the queue limit still leaves every message within
// MaxBytes: Tencent refuses a larger one, and the events it carries with
// it are lost.
func TestFoldedRobotTypesKeepAMessageWithinMaxBytes(t *testing.T) {
	rec := &recorder{}
	lane := im.New(im.Config{QueueLimit: 10}, rec, im.Metrics{}, quiet)
	defer lane.Close()
	for i := range 1000 {
		lane.PublishRobot("r1", fmt.Sprintf("robot_%058d", i), json.RawMessage(`{}`))
	}
	poll.Until(t, 10*time.Second, "a message", poll.Bool(func() bool { return len(rec.all()) > 0 }))
	for _, s := range rec.all() {
		if n := len(s.msg.Data); n > 8000 {
			t.Fatalf("a message of %d bytes, over MaxBytes (8000)", n)
		}
	}
}
