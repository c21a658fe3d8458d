package im_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"hyapp/room-service/cell"
	"hyapp/room-service/im"
	"hyapp/room-service/im/tencent"
	"hyapp/room-service/im/timlocal"
	"hyapp/room-service/internal/poll"
	"hyapp/room-service/lease"
	"hyapp/room-service/outbox"
	"hyapp/room-service/outbox/natsbus"
	"hyapp/room-service/outbox/relay"
	"hyapp/room-service/room"
	"hyapp/room-service/store/sqlite"
)

// world is the engine with the IM lane in front of the local Tencent endpoint.
// The lane is the cell's EventSink.
var _ cell.EventSink = (*im.Lane)(nil)

type world struct {
	local  *timlocal.Server
	client *tencent.Client
	lane   *im.Lane
	reg    *cell.Registry
	db     *sqlite.DB
	shed   map[string]int
	// superseded counts values a newer one replaced before they were sent.
	superseded int
	mu         sync.Mutex
}

// newWorld starts a world; committed, when set, gets every commit's outbox
// rows, as the outbox relay does in the daemon.
func newWorld(t *testing.T, committed func([]outbox.Record)) *world {
	t.Helper()
	w := &world{shed: map[string]int{}}
	w.local = timlocal.New(timlocal.Config{SDKAppID: 1400000001, SecretKey: "test-key", Admin: "administrator"})
	srv := httptest.NewServer(w.local)
	t.Cleanup(srv.Close)
	var err error
	w.client, err = tencent.New(tencent.Config{SDKAppID: 1400000001, SecretKey: "test-key", Admin: "administrator", Endpoint: srv.URL, Timeout: 10 * time.Second}, quiet)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.client.Close)
	w.lane = im.New(im.Config{Budget: 20}, im.TencentSender{Client: w.client}, im.Metrics{
		Shed:      func(p room.Priority, reason string) { w.mu.Lock(); w.shed[string(p)+"/"+reason]++; w.mu.Unlock() },
		Coalesced: func() { w.mu.Lock(); w.superseded++; w.mu.Unlock() },
	}, quiet)
	t.Cleanup(w.lane.Close)
	w.db, err = sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "room.db"), sqlite.Options{Synchronous: "NORMAL"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.db.Close() })
	w.reg = cell.New(cell.Config{Outbox: committed}, w.db, lease.NewLocal(), w.lane, nil, quiet)
	t.Cleanup(func() { _ = w.reg.Close(context.Background()) })
	return w
}

func (w *world) submit(t *testing.T, roomID, id string, op int64, cmd room.Command) {
	t.Helper()
	if _, err := w.reg.Submit(context.Background(), &room.Envelope{RoomID: roomID, CommandID: id, Operator: op, Command: cmd}); err != nil {
		t.Fatalf("%s: %v", id, err)
	}
}

// TestCommandBurstKeepsTheGroupInBudget runs a burst of joins and mic
// changes through the engine: Tencent's 40/s never drops anything, the group
// sees at most its budget, and every mic change arrives or is superseded by
// a newer mic row that arrives.
func TestCommandBurstKeepsTheGroupInBudget(t *testing.T) {
	w := newWorld(t, nil)
	if err := w.client.CreateGroup(context.Background(), "burst", "burst"); err != nil {
		t.Fatal(err)
	}
	w.submit(t, "burst", "create", 1, &room.CreateRoom{OwnerUserID: 1, SeatCount: 10})
	mic := 0
	for i := range 1000 {
		user := int64(100 + i)
		w.submit(t, "burst", fmt.Sprint("j", i), user, &room.JoinRoom{Nickname: "n"})
		if i%10 == 0 { // a High event: a seat taken and left again
			w.submit(t, "burst", fmt.Sprint("t", i), user, &room.TakeMic{SeatIndex: 1})
			w.submit(t, "burst", fmt.Sprint("l", i), user, &room.LeaveMic{})
			mic += 2
		}
	}
	seen := func() int {
		var data [][]byte
		for _, m := range w.local.Messages("burst") {
			data = append(data, []byte(m.Data))
		}
		return countType(t, data, room.EventRoomMicChanged)
	}
	poll.Until(t, 60*time.Second, "every mic change in the group or superseded", func() error {
		w.mu.Lock()
		defer w.mu.Unlock()
		if n := seen(); n+w.superseded != mic {
			return fmt.Errorf("%d of %d mic changes reached the group, %d superseded; shed %v; stats %+v", n, mic, w.superseded, w.shed, w.local.Stats("burst"))
		}
		return nil
	})
	// Every mic message carries the whole mic row after the change.
	for _, m := range w.local.Messages("burst") {
		var env struct {
			Type   string            `json:"type"`
			Seats  []json.RawMessage `json:"seats"`
			Events []struct {
				Type  string            `json:"type"`
				Seats []json.RawMessage `json:"seats"`
			} `json:"events"`
		}
		if err := json.Unmarshal([]byte(m.Data), &env); err != nil {
			t.Fatal(err)
		}
		if env.Type == string(room.EventRoomMicChanged) && len(env.Seats) != 10 {
			t.Fatalf("mic message with %d seats: %s", len(env.Seats), m.Data)
		}
		for _, e := range env.Events {
			if e.Type == string(room.EventRoomMicChanged) && len(e.Seats) != 10 {
				t.Fatalf("batched mic event with %d seats", len(e.Seats))
			}
		}
	}
	// Over the whole run the group got no more than the budget allows: 20 a
	// second plus the burst of 5 (arrival times carry HTTP jitter, so the
	// long-run count is what is checked, not any one second).
	st := w.local.Stats("burst")
	msgs := w.local.Messages("burst")
	span := msgs[len(msgs)-1].Time.Sub(msgs[0].Time).Seconds()
	if st.Dropped != 0 || float64(len(msgs)) > 20*(span+1)+5 {
		t.Fatalf("%d messages in %.1fs, stats %+v: the lane let Tencent drop messages or went over its budget of 20", len(msgs), span, st)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for k, n := range w.shed {
		if k[:4] == "High" {
			t.Fatalf("%d High events shed (%s)", n, k)
		}
	}
}

// TestHangingIMNeverFailsCommands: with the IM endpoint hanging, commands
// commit and answer as usual.
func TestHangingIMNeverFailsCommands(t *testing.T) {
	w := newWorld(t, nil)
	w.local.SetFaults(timlocal.Faults{Hang: true})
	defer w.local.SetFaults(timlocal.Faults{})
	w.submit(t, "hang", "create", 1, &room.CreateRoom{OwnerUserID: 1, SeatCount: 10})
	for i := range 300 {
		w.submit(t, "hang", fmt.Sprint("j", i), int64(100+i), &room.JoinRoom{})
		w.submit(t, "hang", fmt.Sprint("t", i), int64(100+i), &room.TakeMic{SeatIndex: 2})
		w.submit(t, "hang", fmt.Sprint("l", i), int64(100+i), &room.LeaveMic{})
	}
}

// TestLostMuteIsRetriedFromTheOutbox: group control rides the durable outbox;
// a forbid_send_msg that fails past the client's retries is delivered again
// until Tencent accepts it.
func TestLostMuteIsRetriedFromTheOutbox(t *testing.T) {
	bus, err := natsbus.Open(context.Background(), natsbus.Config{StoreDir: t.TempDir()}, quiet)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bus.Close() })
	var rel *relay.Relay
	w := newWorld(t, func(rows []outbox.Record) { rel.Committed(rows) })
	rel = relay.New(w.db, bus, relay.LeaseGate{Lease: lease.NewLocal()}, relay.Config{PollInterval: 10 * time.Millisecond}, relay.Metrics{}, quiet)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); rel.Run(ctx) }()
	control := &im.Control{Bus: bus, API: im.TencentGroups{Client: w.client}, MaxBackoff: 50 * time.Millisecond, Log: quiet}
	go func() { defer wg.Done(); _ = control.Run(ctx) }()
	t.Cleanup(func() { cancel(); wg.Wait() })

	w.submit(t, "ctl", "create", 1, &room.CreateRoom{OwnerUserID: 1, SeatCount: 10})
	poll.Until(t, 30*time.Second, "the group to be created from RoomCreated", poll.Bool(func() bool {
		for _, g := range w.local.Groups() {
			if g == "ctl" {
				return true
			}
		}
		return false
	}))
	w.submit(t, "ctl", "join", 5, &room.JoinRoom{})
	w.local.SetFaults(timlocal.Faults{FailNext: 10}) // more failures than one call retries
	w.submit(t, "ctl", "mute", 1, &room.MuteUser{TargetUserID: 5, DurationSeconds: 600})
	poll.Until(t, 30*time.Second, "the mute to reach the group", poll.Bool(func() bool {
		_, muted := w.local.Muted("ctl")["5"]
		return muted
	}))
	w.submit(t, "ctl", "kick", 1, &room.KickUser{TargetUserID: 5, DurationSeconds: 0})
	poll.Until(t, 30*time.Second, "the ban to reach the group", poll.Bool(func() bool {
		_, banned := w.local.Banned("ctl")["5"]
		return banned
	}))
	w.submit(t, "ctl", "unban", 1, &room.UnbanUser{TargetUserID: 5})
	poll.Until(t, 30*time.Second, "the ban to be lifted", poll.Bool(func() bool {
		_, banned := w.local.Banned("ctl")["5"]
		return !banned
	}))
}

// TestLaneRecreatesMissingGroup: with no group on the IM side (never
// created, or lost by a restarted endpoint), the lane's first send creates
// it and the message arrives; a RoomClosed message never brings a dissolved
// group back.
func TestLaneRecreatesMissingGroup(t *testing.T) {
	w := newWorld(t, nil)
	var mu sync.Mutex
	recreated := 0
	lane := im.New(im.Config{Budget: 20}, im.RecreatingSender{
		Sender: im.TencentSender{Client: w.client}, Groups: im.TencentGroups{Client: w.client},
		Recreated: func() { mu.Lock(); recreated++; mu.Unlock() },
	}, im.Metrics{}, quiet)
	t.Cleanup(lane.Close)
	lane.Publish([]room.Committed{{RoomID: "lost", RoomVersion: 2, At: 1, Events: []room.Event{
		{Type: room.EventRoomMicChanged, Data: map[string]any{"user_id": 7}},
	}}})
	poll.Until(t, 30*time.Second, "the message in a recreated group", poll.Bool(func() bool { return len(w.local.Messages("lost")) == 1 }))
	if g, _ := w.local.Group("lost"); g.Type != "AVChatRoom" || g.Name != "lost" {
		t.Fatalf("recreated group %+v, want an AVChatRoom named after the room", g)
	}

	lane.Publish([]room.Committed{{RoomID: "gone", RoomVersion: 9, At: 1, Events: []room.Event{
		{Type: room.EventRoomClosed, Data: map[string]any{"operator_user_id": 1}},
	}}})
	lane.Publish([]room.Committed{{RoomID: "lost", RoomVersion: 3, At: 1, Events: []room.Event{
		{Type: room.EventRoomMicChanged, Data: map[string]any{"user_id": 8}},
	}}})
	poll.Until(t, 30*time.Second, "the next message", poll.Bool(func() bool { return len(w.local.Messages("lost")) == 2 }))
	poll.Until(t, 30*time.Second, "the RoomClosed send to be given up", poll.Bool(func() bool { return w.local.Calls("send_group_msg") >= 4 }))
	if _, ok := w.local.Group("gone"); ok {
		t.Fatal("a RoomClosed message created its dissolved group again")
	}
	mu.Lock()
	defer mu.Unlock()
	if recreated != 1 {
		t.Fatalf("recreated %d groups, want 1", recreated)
	}
}
