package im_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go/jetstream"

	"hyapp/room-service/im"
	"hyapp/room-service/im/tencent"
	"hyapp/room-service/internal/poll"
	"hyapp/room-service/lease"
	"hyapp/room-service/outbox"
	"hyapp/room-service/outbox/natsbus"
	"hyapp/room-service/outbox/relay"
	"hyapp/room-service/room"
)

// controlWorld is the engine, the outbox relay into an embedded JetStream,
// and group control in front of the local Tencent endpoint.
type controlWorld struct {
	*world
	bus *natsbus.Bus

	mu         sync.Mutex
	terminated map[string]int // event type + " " + reason
	recreated  int
}

// newControlWorld starts everything; mod may change the control before it runs.
func newControlWorld(t *testing.T, mod func(*im.Control)) *controlWorld {
	t.Helper()
	bus, err := natsbus.Open(context.Background(), natsbus.Config{StoreDir: t.TempDir()}, quiet)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bus.Close() })
	var rel *relay.Relay
	w := &controlWorld{world: newWorld(t, func(rows []outbox.Record) { rel.Committed(rows) }), bus: bus, terminated: map[string]int{}}
	rel = relay.New(w.db, bus, relay.LeaseGate{Lease: lease.NewLocal()}, relay.Config{PollInterval: 10 * time.Millisecond}, relay.Metrics{}, quiet)
	control := &im.Control{Bus: bus, API: im.TencentGroups{Client: w.client}, MaxBackoff: 50 * time.Millisecond, Log: quiet,
		Metrics: im.ControlMetrics{
			Terminated: func(typ, reason string) { w.mu.Lock(); w.terminated[typ+" "+reason]++; w.mu.Unlock() },
			Recreated:  func() { w.mu.Lock(); w.recreated++; w.mu.Unlock() },
		}}
	if mod != nil {
		mod(control)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); rel.Run(ctx) }()
	go func() { defer wg.Done(); _ = control.Run(ctx) }()
	t.Cleanup(func() { cancel(); wg.Wait() })
	return w
}

func (w *controlWorld) hasGroup(id string) bool {
	_, ok := w.local.Group(id)
	return ok
}

func (w *controlWorld) banned(group string, user int64) bool {
	_, ok := w.local.Banned(group)[fmt.Sprint(user)]
	return ok
}

// TestGroupFollowsTheRoom: a title change renames the group (cut to 30
// bytes on a character boundary), disabling chat mutes every member and
// enabling it lifts that, and a group lost behind the service's back is
// created again by the next control call.
func TestGroupFollowsTheRoom(t *testing.T) {
	w := newControlWorld(t, nil)
	w.submit(t, "follow", "create", 1, &room.CreateRoom{OwnerUserID: 1, SeatCount: 8, Title: "first"})
	poll.Until(t, 30*time.Second, "the group", poll.Bool(func() bool { return w.hasGroup("follow") }))
	w.submit(t, "follow", "join", 5, &room.JoinRoom{})

	title := "ab" + strings.Repeat("夜", 10) // 32 bytes: byte 30 is inside the 10th character
	w.submit(t, "follow", "title", 1, &room.UpdateProfile{Title: &title})
	poll.Until(t, 30*time.Second, "the group to be renamed", poll.Bool(func() bool {
		g, _ := w.local.Group("follow")
		return g.Name != "first"
	}))
	if g, _ := w.local.Group("follow"); g.Name != "ab"+strings.Repeat("夜", 9) || !utf8.ValidString(g.Name) {
		t.Fatalf("group name %q (%d bytes), want the title cut to 29 bytes", g.Name, len(g.Name))
	}

	w.submit(t, "follow", "chat-off", 1, &room.SetChatEnabled{Enabled: false})
	poll.Until(t, 30*time.Second, "every member to be muted", poll.Bool(func() bool {
		g, _ := w.local.Group("follow")
		return g.ShutUpAll
	}))
	_, err := w.client.SendGroupMsg(context.Background(), tencent.Msg{GroupID: "follow", FromAccount: "5", Data: []byte(`{}`)})
	if apiCode(err) != 10017 {
		t.Fatalf("a member's message with chat disabled: %v, want 10017", err)
	}
	w.submit(t, "follow", "chat-on", 1, &room.SetChatEnabled{Enabled: true})
	poll.Until(t, 30*time.Second, "members to be unmuted", poll.Bool(func() bool {
		g, _ := w.local.Group("follow")
		return !g.ShutUpAll
	}))

	// The group disappears (dissolved in the console, a local endpoint
	// restarted): the kick creates it again and bans.
	if err := w.client.DestroyGroup(context.Background(), "follow"); err != nil {
		t.Fatal(err)
	}
	w.submit(t, "follow", "kick", 1, &room.KickUser{TargetUserID: 5})
	poll.Until(t, 30*time.Second, "the group to be created again with the ban", poll.Bool(func() bool { return w.banned("follow", 5) }))
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.recreated != 1 {
		t.Fatalf("recreated %d groups, want 1", w.recreated)
	}
}

func apiCode(err error) int {
	var e *tencent.APIError
	if errors.As(err, &e) {
		return e.Code
	}
	return 0
}

// TestLongRoomIDsGetValidGroups: room ids Tencent refuses as group ids (49
// bytes, the @TGS# prefix) get a derived group id, everywhere: control
// creates the group and bans in it, the lane sends to it.
func TestLongRoomIDsGetValidGroups(t *testing.T) {
	w := newControlWorld(t, nil)
	for _, id := range []string{strings.Repeat("r", 49), "@TGS#room"} {
		group := im.GroupID(id)
		w.submit(t, id, "create", 1, &room.CreateRoom{OwnerUserID: 1, SeatCount: 8})
		w.submit(t, id, "join", 5, &room.JoinRoom{})
		w.submit(t, id, "kick", 1, &room.KickUser{TargetUserID: 5})
		poll.Until(t, 30*time.Second, "the ban in the derived group of "+id, poll.Bool(func() bool { return w.banned(group, 5) }))
		// Sent after the group exists: this lane has no recreating sender.
		w.submit(t, id, "join-6", 6, &room.JoinRoom{})
		poll.Until(t, 30*time.Second, "the lane's messages in the derived group of "+id, poll.Bool(func() bool {
			return len(w.local.Messages(group)) > 0
		}))
	}
}

// TestPermanentFailuresAreTerminated is the outage of 1,005 rooms with
// 49-byte ids, replayed with the old identity mapping: every call of those
// rooms fails for good. Their events are terminated, recorded and counted by
// reason, and a good room's kick still reaches its group; nothing stays in
// flight.
func TestPermanentFailuresAreTerminated(t *testing.T) {
	w := newControlWorld(t, func(c *im.Control) { c.GroupOf = func(id string) string { return id } })
	const bad = 30
	for i := range bad {
		id := fmt.Sprintf("%049d", i)
		w.submit(t, id, "create", 1, &room.CreateRoom{OwnerUserID: 1, SeatCount: 8})
		w.submit(t, id, "join", 5, &room.JoinRoom{})
		w.submit(t, id, "kick", 1, &room.KickUser{TargetUserID: 5})
	}
	w.submit(t, "good", "create", 1, &room.CreateRoom{OwnerUserID: 1, SeatCount: 8})
	w.submit(t, "good", "join", 5, &room.JoinRoom{})
	w.submit(t, "good", "kick", 1, &room.KickUser{TargetUserID: 5})
	poll.Until(t, 30*time.Second, "the good room's ban", poll.Bool(func() bool { return w.banned("good", 5) }))
	poll.Until(t, 30*time.Second, "every bad room's create and kick to be terminated", poll.Bool(func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.terminated["RoomCreated invalid_request"] == bad && w.terminated["RoomUserKicked invalid_request"] == bad
	}))
	js := w.bus.JetStream()
	cons, err := js.Consumer(context.Background(), w.bus.Stream(), im.DefaultControlDurable)
	if err != nil {
		t.Fatal(err)
	}
	info, err := cons.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if info.Config.MaxAckPending != im.DefaultControlMaxAckPending {
		t.Fatalf("MaxAckPending %d, want %d", info.Config.MaxAckPending, im.DefaultControlMaxAckPending)
	}
	poll.Until(t, 30*time.Second, "nothing left in flight", poll.Bool(func() bool {
		info, err := cons.Info(context.Background())
		return err == nil && info.NumAckPending == 0 && info.NumPending == 0
	}))
	dead, err := js.Stream(context.Background(), im.DefaultControlDeadStream)
	if err != nil {
		t.Fatal(err)
	}
	if n := dead.CachedInfo().State.Msgs; n != 2*bad {
		t.Fatalf("%d dead records, want %d", n, 2*bad)
	}
}

// TestControlIsDeliveredOnlyWhatItActsOn: the joins of a room are
// published to the stream but never delivered to group control's consumer,
// which takes the room's creation and the kick (on the embedded server,
// which filters by several subjects).
func TestControlIsDeliveredOnlyWhatItActsOn(t *testing.T) {
	w := newControlWorld(t, nil)
	const joins = 40
	w.submit(t, "quiet", "create", 1, &room.CreateRoom{OwnerUserID: 1, SeatCount: 8})
	for u := range int64(joins) {
		w.submit(t, "quiet", fmt.Sprint("join-", u), 100+u, &room.JoinRoom{})
	}
	w.submit(t, "quiet", "kick", 1, &room.KickUser{TargetUserID: 100})
	poll.Until(t, 30*time.Second, "the ban", poll.Bool(func() bool { return w.banned(im.GroupID("quiet"), 100) }))
	ctx := context.Background()
	cons, err := w.bus.JetStream().Consumer(ctx, w.bus.Stream(), im.DefaultControlDurable)
	if err != nil {
		t.Fatal(err)
	}
	var info *jetstream.ConsumerInfo
	poll.Until(t, 30*time.Second, "nothing left in flight", poll.Bool(func() bool {
		info, err = cons.Info(ctx)
		return err == nil && info.NumAckPending == 0 && info.NumPending == 0
	}))
	if info.Delivered.Consumer != 2 {
		t.Errorf("control was delivered %d events, want 2 (the creation and the kick), filters %q",
			info.Delivered.Consumer, info.Config.FilterSubjects)
	}
	stream, err := w.bus.JetStream().Stream(ctx, w.bus.Stream())
	if err != nil {
		t.Fatal(err)
	}
	if got := stream.CachedInfo().State.Msgs; got < joins+2 {
		t.Errorf("the stream holds %d events, want at least %d", got, joins+2)
	}
}

// failing is a GroupAPI whose calls on one group fail (transiently) until
// released, and which records the order of the calls that passed.
type failing struct {
	im.GroupAPI
	group string

	mu       sync.Mutex
	released bool
	calls    []string
}

func (f *failing) pass(group, call string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if group == f.group && !f.released {
		return errors.New("connection reset (test)")
	}
	f.calls = append(f.calls, group+" "+call)
	return nil
}

func (f *failing) ForbidSendMsg(ctx context.Context, group string, members []string, seconds uint32) error {
	if err := f.pass(group, fmt.Sprintf("forbid %d", seconds)); err != nil {
		return err
	}
	return f.GroupAPI.ForbidSendMsg(ctx, group, members, seconds)
}

func (f *failing) BanGroupMember(ctx context.Context, group string, members []string, seconds uint32, reason string) error {
	if err := f.pass(group, "ban"); err != nil {
		return err
	}
	return f.GroupAPI.BanGroupMember(ctx, group, members, seconds, reason)
}

// TestFailingRoomHoldsBackOnlyItself: while one room's calls keep failing,
// other rooms' events go through; once its calls pass again, its held-back
// events are applied in their order, the mute as the unmute stored after it
// says (the latest event of the member's mute decides it): unmute, unmute,
// ban.
func TestFailingRoomHoldsBackOnlyItself(t *testing.T) {
	var f *failing
	w := newControlWorld(t, func(c *im.Control) {
		f = &failing{GroupAPI: c.API, group: "stuck"}
		c.API = f
	})
	for _, id := range []string{"stuck", "free"} {
		w.submit(t, id, "create", 1, &room.CreateRoom{OwnerUserID: 1, SeatCount: 8})
		w.submit(t, id, "join", 5, &room.JoinRoom{})
		poll.Until(t, 30*time.Second, "group "+id, poll.Bool(func() bool { return w.hasGroup(id) }))
	}
	w.submit(t, "stuck", "mute", 1, &room.MuteUser{TargetUserID: 5, DurationSeconds: 600})
	w.submit(t, "stuck", "unmute", 1, &room.MuteUser{TargetUserID: 5, DurationSeconds: 0})
	w.submit(t, "stuck", "kick", 1, &room.KickUser{TargetUserID: 5})
	w.submit(t, "free", "kick", 1, &room.KickUser{TargetUserID: 5})
	poll.Until(t, 30*time.Second, "the other room's ban", poll.Bool(func() bool { return w.banned("free", 5) }))
	if w.banned("stuck", 5) {
		t.Fatal("the failing room's kick went before its mutes")
	}
	f.mu.Lock()
	f.released = true
	f.mu.Unlock()
	poll.Until(t, 30*time.Second, "the failing room's ban", poll.Bool(func() bool { return w.banned("stuck", 5) }))
	f.mu.Lock()
	defer f.mu.Unlock()
	var stuck []string
	for _, c := range f.calls {
		if strings.HasPrefix(c, "stuck ") {
			stuck = append(stuck, c)
		}
	}
	if want := []string{"stuck forbid 0", "stuck forbid 0", "stuck ban"}; strings.Join(stuck, ",") != strings.Join(want, ",") {
		t.Fatalf("the failing room's calls went %v, want %v", stuck, want)
	}
	if _, muted := w.local.Muted("stuck")["5"]; muted {
		t.Fatal("the unmute was applied before the mute")
	}
}

// TestControlStoppedAsItStartsStopsCleanly: a service stopped while group
// control sets up its consumer stops without an error; a broken consumer
// setup on a live context still is one.
func TestControlStoppedAsItStartsStopsCleanly(t *testing.T) {
	bus, err := natsbus.Open(context.Background(), natsbus.Config{StoreDir: t.TempDir()}, quiet)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bus.Close() })
	control := &im.Control{Bus: bus, Log: quiet}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := control.Run(ctx); err != nil {
		t.Fatalf("stopped before it started: %v", err)
	}
	bad := &im.Control{Bus: bus, Durable: "no.dots.allowed", Log: quiet}
	if err := bad.Run(t.Context()); err == nil || !strings.Contains(err.Error(), "im control consumer") {
		t.Fatalf("a consumer the broker refuses: %v", err)
	}
}

// TestGroupControlGoesOnWhenTheStreamIsMadeAgain: the room event stream
// is deleted while the service runs (an operator, a broker that lost its
// store). The bus makes it again at the next publish (0180f7b), "as at
// start": group control, which consumes that stream, must follow the rooms
// again too, not wait on the consumer that went with the old stream.
func TestGroupControlGoesOnWhenTheStreamIsMadeAgain(t *testing.T) {
	w := newControlWorld(t, nil)
	w.submit(t, "remade", "create", 1, &room.CreateRoom{OwnerUserID: 1, SeatCount: 8, Title: "first"})
	poll.Until(t, 30*time.Second, "the group", poll.Bool(func() bool { return w.hasGroup("remade") }))

	if err := w.bus.JetStream().DeleteStream(context.Background(), w.bus.Stream()); err != nil {
		t.Fatal(err)
	}
	title := "second"
	w.submit(t, "remade", "title", 1, &room.UpdateProfile{Title: &title})
	poll.Until(t, 30*time.Second, "the group renamed after the stream was made again", poll.Bool(func() bool {
		g, _ := w.local.Group("remade")
		return g.Name == "second"
	}))
}
