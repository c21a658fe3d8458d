package im_test

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"hyapp/room-service/im"
	"hyapp/room-service/internal/poll"
	"hyapp/room-service/room"
)

// key is an event's (room_version, seq).
type key struct{ version, seq int64 }

func (a key) less(b key) bool {
	return cmp.Or(cmp.Compare(a.version, b.version), cmp.Compare(a.seq, b.seq)) < 0
}

// view is what a client shows of a room: the kinds of docs/im-messages.md
// this test drives.
type view struct {
	users, charm []int64
	locked       []bool
	heat         int64
	top          []room.RankEntry
	level        int32
	fuel         int64
	title        string
	online       int
}

func viewOf(s *room.State) view {
	v := view{users: make([]int64, len(s.Seats)), charm: make([]int64, len(s.Seats)), locked: make([]bool, len(s.Seats)),
		heat: s.Economy.Heat, top: slices.Clone(s.Economy.Top), level: s.Economy.Rocket.Level, fuel: s.Economy.Rocket.Fuel,
		title: s.Profile.Title, online: len(s.Members)}
	for i, st := range s.Seats {
		v.users[i], v.charm[i], v.locked[i] = st.UserID, st.Charm, st.Locked
	}
	return v
}

// client follows the repair rule of docs/im-messages.md, word for word.
type client struct {
	synced, entered int64
	applied         map[string]key
	shown           map[key]bool
	played          map[key]int // display events played, by key
	view            view
	wantSnapshot    bool
}

func newClient(snap *room.State) *client {
	c := &client{applied: map[string]key{}, shown: map[key]bool{}, played: map[key]int{}}
	c.snapshot(snap)
	c.entered = snap.Version
	return c
}

// snapshot applies GetRoomSnapshot: every kind now shows version V.
func (c *client) snapshot(s *room.State) {
	c.synced, c.view, c.wantSnapshot = s.Version, viewOf(s), false
	clear(c.applied)
}

// newer reports whether k may replace the value shown for kind.
func (c *client) newer(kind string, k key) bool {
	a, ok := c.applied[kind]
	return k.version > c.synced && (!ok || a.less(k))
}

func (c *client) set(kind string, k key, apply func()) {
	if c.newer(kind, k) {
		apply()
		c.applied[kind] = k
	}
}

type wireEvent struct {
	Type        string          `json:"type"`
	RoomVersion int64           `json:"room_version"`
	Seq         int64           `json:"seq"`
	Data        json.RawMessage `json:"data"`
	Seats       []struct {
		UserID int64 `json:"user_id"`
		Locked bool  `json:"locked"`
		Charm  int64 `json:"charm"`
	} `json:"seats"`
}

func (c *client) message(t *testing.T, data []byte) {
	var m struct {
		wireEvent
		LostThrough int64             `json:"lost_through"`
		Events      []json.RawMessage `json:"events"`
	}
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	if m.LostThrough > c.synced {
		c.wantSnapshot = true
	}
	if m.Type != "Batch" {
		c.event(t, m.wireEvent)
		return
	}
	for _, raw := range m.Events {
		var e wireEvent
		if err := json.Unmarshal(raw, &e); err != nil {
			t.Fatal(err)
		}
		c.event(t, e)
	}
}

func (c *client) event(t *testing.T, e wireEvent) {
	k := key{e.RoomVersion, e.Seq}
	decode := func(v any) {
		if err := json.Unmarshal(e.Data, v); err != nil {
			t.Fatal(err)
		}
	}
	display := false
	switch room.EventType(e.Type) {
	case room.EventRoomMicChanged, room.EventRoomMicSeatLocked:
		c.set("seats", k, func() {
			for i, s := range e.Seats {
				c.view.users[i], c.view.locked[i] = s.UserID, s.Locked
			}
		})
		c.set("charm", k, func() {
			for i, s := range e.Seats {
				c.view.charm[i] = s.Charm
			}
		})
	case room.EventRoomHeatChanged:
		var d room.RoomHeatChangedEvent
		decode(&d)
		c.set("heat", k, func() { c.view.heat = d.Heat })
	case room.EventRoomRankChanged:
		var d room.RoomRankChangedEvent
		decode(&d)
		c.set("rank", k, func() { c.view.top = d.Top })
		c.set("charm", k, func() {
			for _, s := range d.Seats {
				c.view.charm[s.SeatIndex] = s.Charm
			}
		})
	case room.EventRoomRocketFuelChanged:
		var d room.RoomRocketFuelChangedEvent
		decode(&d)
		c.set("fuel", k, func() { c.view.level, c.view.fuel = d.Level, d.Fuel })
	case room.EventRoomProfileUpdated:
		var d room.RoomProfileUpdatedEvent
		decode(&d)
		c.set("profile", k, func() { c.view.title = d.Title })
	case room.EventRoomUserJoined:
		var d room.RoomUserJoinedEvent
		decode(&d)
		c.set("online", k, func() { c.view.online = d.OnlineCount })
		display = true
	case room.EventRoomUserLeft:
		var d room.RoomUserLeftEvent
		decode(&d)
		c.set("online", k, func() { c.view.online = d.OnlineCount })
		display = true
	default: // gifts, ignitions, launches, kicks, unbans, close
		display = true
	}
	if display && k.version > c.entered && !c.shown[k] {
		c.shown[k] = true
		c.played[k]++
	}
}

// burst is a room's command history: what the lane was given and the
// state it implies.
type burst struct {
	first   *room.State // after CreateRoom: what a client sees on entering
	final   *room.State
	commits [][]room.Committed
	gifts   []key
	last    map[string]key // the newest key of each event type
}

// newBurst applies a mixed run of commands to a room: joins, mic takes and
// leaves, seat locks, profile edits, and gifts between seated users whose
// heat, rank and fuel the lane coalesces and whose value ignites rockets.
func newBurst(t *testing.T, rooms int) burst {
	s := room.Genesis("r1", 1, 0, 10, "", room.StatusCreating)
	b := burst{last: map[string]key{}}
	at := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC).UnixMilli()
	r := rand.New(rand.NewPCG(1, 2))
	refused := map[string]int{}
	apply := func(op int64, cmd room.Command) {
		at++
		events, err := room.Apply(s, &room.Envelope{RoomID: "r1", CommandID: fmt.Sprint("c", at), Operator: op, At: at, Command: cmd})
		if err != nil {
			refused[room.AsError(err).Reason]++
			return // refused: nothing committed
		}
		c := room.Committed{RoomID: "r1", RoomVersion: s.Version, At: at, Events: events}
		for seq, ev := range events {
			k := key{s.Version, int64(seq)}
			b.last[string(ev.Type)] = k
			if ev.Type == room.EventRoomGiftSent {
				b.gifts = append(b.gifts, k)
			}
			if ev.Type == room.EventRoomMicChanged || ev.Type == room.EventRoomMicSeatLocked {
				c.Seats = slices.Clone(s.Seats)
			}
		}
		b.commits = append(b.commits, []room.Committed{c})
	}
	apply(1, &room.CreateRoom{OwnerUserID: 1, SeatCount: 10, Region: "sg"})
	if s.Version != 1 {
		t.Fatal("CreateRoom refused")
	}
	apply(1, &room.JoinRoom{Nickname: "owner"})
	first := *s // what viewOf reads, copied
	first.Seats, first.Members, first.Economy.Top = slices.Clone(s.Seats), maps.Clone(s.Members), slices.Clone(s.Economy.Top)
	b.first = &first
	for u := int64(100); u < 130; u++ {
		apply(u, &room.JoinRoom{Nickname: "n"})
	}
	for range rooms {
		u := 100 + r.Int64N(30)
		switch r.IntN(10) {
		case 0, 1:
			apply(u, &room.TakeMic{SeatIndex: r.Int32N(10)})
		case 2:
			apply(u, &room.LeaveMic{})
		case 3:
			apply(1, &room.LockMicSeat{SeatIndex: r.Int32N(10), Locked: r.IntN(2) == 0})
		case 4:
			title := fmt.Sprint("title ", at)
			apply(1, &room.UpdateProfile{Title: &title})
		case 5:
			apply(u, &room.LeaveRoom{})
			apply(u, &room.JoinRoom{Nickname: "n"})
		default:
			to := s.Seats[r.IntN(10)].UserID
			if to == 0 || to == u {
				to = 1
			}
			apply(u, &room.SendGift{ReceiverUserIDs: []int64{to}, GiftID: "rose", Count: 1 + r.Int32N(99),
				Outcome: room.GiftOutcome{Name: "Rose", Price: 10 + r.Int64N(90), Kind: room.GiftNormal}})
		}
	}
	b.final = s
	if len(b.gifts) < 100 {
		t.Fatalf("only %d gifts committed; refused: %v", len(b.gifts), refused)
	}
	return b
}

// TestClientRepairRuleEndsWithTheServerState drives the real lane with a
// burst of commits, captures what it sent, and feeds that to a client that
// follows docs/im-messages.md: in the order sent, and shuffled with
// duplicates (the rule promises the same result in any order). The client
// must end with the state the commits imply and play each gift exactly once.
func TestClientRepairRuleEndsWithTheServerState(t *testing.T) {
	b := newBurst(t, 600)
	rec := &recorder{}
	lane := im.New(im.Config{Budget: 100, QueueLimit: 100_000, CoalesceEvery: 50 * time.Millisecond}, rec, im.Metrics{}, quiet)
	defer lane.Close()
	for _, c := range b.commits {
		lane.Publish(c)
	}
	waitForLast(t, rec, b)

	msgs := rec.all()
	r := rand.New(rand.NewPCG(3, 4))
	for round := range 20 {
		order := slices.Clone(msgs)
		if round > 0 {
			r.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
			order = append(order, order[:len(order)/10]...) // some delivered twice
		}
		c := newClient(b.first)
		for _, m := range order {
			c.message(t, m.msg.Data)
		}
		if c.wantSnapshot {
			t.Fatal("the client asked for a snapshot although the lane lost nothing")
		}
		checkClient(t, round, c, b, true)
	}
}

// TestClientRepairRuleAfterLosses: with sends failing now and then, High is
// sent again and Normal/Low is lost; the client learns it from
// lost_through, fetches the snapshot, and still ends with the server's
// state, never playing a gift twice.
func TestClientRepairRuleAfterLosses(t *testing.T) {
	b := newBurst(t, 600)
	// Every 7th attempt fails, and every 3rd of a message without High (a
	// room's message carries High whenever it has some pending, so under a
	// slow machine most messages may).
	others := 0
	f := &flaky{fail: func(attempt int, m im.Message) error {
		if m.Priority != room.PriorityHigh {
			others++
		}
		if attempt%7 == 0 || m.Priority != room.PriorityHigh && others%3 == 0 {
			return errors.New("connection reset")
		}
		return nil
	}}
	var shed shedCounts
	lane := im.New(im.Config{Budget: 100, QueueLimit: 100_000, CoalesceEvery: 50 * time.Millisecond}, f, shed.metrics(), quiet)
	defer lane.Close()
	for _, c := range b.commits {
		lane.Publish(c)
	}
	// The last High event always arrives; Normal and Low may be lost.
	mic := b.last[string(room.EventRoomMicChanged)]
	poll.Until(t, 60*time.Second, "the last mic change, a lost event, and the newest of each type sent or lost", func() error {
		got := delivered(t, &f.recorder)
		if got[eventKey{string(room.EventRoomMicChanged), mic.version, mic.seq}] == 0 {
			return fmt.Errorf("the last mic change %v not sent", mic)
		}
		if shed.get("Normal/send_failed")+shed.get("Low/send_failed") == 0 {
			return errors.New("nothing lost yet")
		}
		lost := lostThrough(t, &f.recorder)
		for typ, k := range b.last {
			if room.LanesOf(room.EventType(typ)).IM && !supersededByKind(b, typ) && got[eventKey{typ, k.version, k.seq}] == 0 && lost < k.version {
				return fmt.Errorf("the newest %s %v neither sent nor below lost_through %d", typ, k, lost)
			}
		}
		return nil
	})
	msgs := f.all()
	r := rand.New(rand.NewPCG(5, 6))
	for round := range 10 {
		order := slices.Clone(msgs)
		r.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		c := newClient(b.first)
		for i, m := range order {
			c.message(t, m.msg.Data)
			if c.wantSnapshot && i%5 == 0 { // the snapshot comes back a little later
				c.snapshot(b.final)
			}
		}
		if c.wantSnapshot {
			c.snapshot(b.final)
		}
		checkClient(t, round, c, b, false)
	}
}

// waitForLast waits until the sender got every gift and the newest event of
// every type the burst committed.
func waitForLast(t *testing.T, rec *recorder, b burst) {
	t.Helper()
	missing := ""
	defer func() {
		if t.Failed() {
			t.Log("missing", missing)
		}
	}()
	poll.Until(t, 20*time.Second, "every gift and the newest event of each type", poll.Bool(func() bool {
		got := delivered(t, rec)
		for _, g := range b.gifts {
			if got[eventKey{string(room.EventRoomGiftSent), g.version, g.seq}] == 0 {
				missing = fmt.Sprint("gift ", g)
				return false
			}
		}
		for typ, k := range b.last {
			if supersededByKind(b, typ) {
				continue // a newer event carries the same state
			}
			if room.LanesOf(room.EventType(typ)).IM && got[eventKey{typ, k.version, k.seq}] == 0 {
				missing = fmt.Sprint(typ, k)
				return false
			}
		}
		return true
	}))
}

func checkClient(t *testing.T, round int, c *client, b burst, everyGift bool) {
	t.Helper()
	want := viewOf(b.final)
	if fmt.Sprint(c.view) != fmt.Sprint(want) {
		t.Fatalf("round %d: the client shows\n%+v\nthe server holds\n%+v", round, c.view, want)
	}
	for _, g := range b.gifts {
		if n := c.played[g]; n > 1 || everyGift && n != 1 {
			t.Fatalf("round %d: gift %v played %d times", round, g, n)
		}
	}
}

// supersededByKind reports whether the newest event of typ carries the mic
// row and a newer event of the other mic-row type does too: the lane then
// sends only the newer one.
func supersededByKind(b burst, typ string) bool {
	other := map[string]string{
		string(room.EventRoomMicChanged):    string(room.EventRoomMicSeatLocked),
		string(room.EventRoomMicSeatLocked): string(room.EventRoomMicChanged),
	}[typ]
	o, ok := b.last[other]
	return other != "" && ok && b.last[typ].less(o)
}

// lostThrough is the highest lost_through the sender got.
func lostThrough(t *testing.T, r *recorder) int64 {
	var newest int64
	for _, s := range r.all() {
		var env struct {
			LostThrough int64 `json:"lost_through"`
		}
		if err := json.Unmarshal(s.msg.Data, &env); err != nil {
			t.Fatal(err)
		}
		newest = max(newest, env.LostThrough)
	}
	return newest
}
