package im_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	roomv1 "hyapp/room-service/gen/room/v1"
	"hyapp/room-service/im"
	"hyapp/room-service/internal/poll"
	"hyapp/room-service/room"
)

// failsOnce is a GroupAPI whose first call of each group that fail selects
// fails transiently, as a connection reset does.
type failsOnce struct {
	im.GroupAPI
	fail func(call string, seconds uint32) bool

	mu     sync.Mutex
	failed map[string]bool
}

func (f *failsOnce) first(group, call string, seconds uint32) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.fail(call, seconds) || f.failed[group+" "+call] {
		return nil
	}
	f.failed[group+" "+call] = true
	return errors.New("connection reset (test)")
}

func (f *failsOnce) CreateGroup(ctx context.Context, group, name string) error {
	if err := f.first(group, "create", 0); err != nil {
		return err
	}
	return f.GroupAPI.CreateGroup(ctx, group, name)
}

func (f *failsOnce) ForbidSendMsg(ctx context.Context, group string, members []string, seconds uint32) error {
	if err := f.first(group, "forbid", seconds); err != nil {
		return err
	}
	return f.GroupAPI.ForbidSendMsg(ctx, group, members, seconds)
}

// newFleetControl is a control world with a second node's group control on
// the same durable consumer, both calling Tencent through f.
func newFleetControl(t *testing.T, f *failsOnce) *controlWorld {
	t.Helper()
	f.failed = map[string]bool{}
	w := newControlWorld(t, func(c *im.Control) {
		f.GroupAPI = c.API
		c.API = f
		c.MaxBackoff = time.Second
	})
	second := &im.Control{Bus: w.bus, API: f, MaxBackoff: time.Second, Log: quiet}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = second.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return w
}

// settled waits until group control has applied every event.
func (w *controlWorld) settled(t *testing.T) {
	t.Helper()
	cons, err := w.bus.JetStream().Consumer(context.Background(), w.bus.Stream(), im.DefaultControlDurable)
	if err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 60*time.Second, "every event applied", poll.Bool(func() bool {
		info, err := cons.Info(context.Background())
		return err == nil && info.NumAckPending == 0 && info.NumPending == 0
	}))
}

// TestAFleetKeepsEachRoomsMutesInOrder: every node of a fleet runs group
// control on the one durable consumer. A mute whose call fails once is
// retried; the unmute committed after it, on whichever node it lands, must
// win, or the member stays muted in the group while the room says they may
// talk.
func TestAFleetKeepsEachRoomsMutesInOrder(t *testing.T) {
	w := newFleetControl(t, &failsOnce{fail: func(call string, seconds uint32) bool { return call == "forbid" && seconds != 0 }})
	const rooms = 16
	for i := range rooms {
		id := fmt.Sprintf("fleet-%d", i)
		w.submit(t, id, "create", 1, &room.CreateRoom{OwnerUserID: 1, SeatCount: 8})
		w.submit(t, id, "join", 5, &room.JoinRoom{})
		poll.Until(t, 30*time.Second, "group "+id, poll.Bool(func() bool { return w.hasGroup(id) }))
	}
	for i := range rooms {
		id := fmt.Sprintf("fleet-%d", i)
		w.submit(t, id, "mute", 1, &room.MuteUser{TargetUserID: 5, DurationSeconds: 600})
		w.submit(t, id, "unmute", 1, &room.MuteUser{TargetUserID: 5, DurationSeconds: 0})
	}
	w.settled(t)
	for i := range rooms {
		id := fmt.Sprintf("fleet-%d", i)
		if _, muted := w.local.Muted(id)["5"]; muted {
			t.Errorf("room %s: member 5 is muted in the group after the unmute", id)
		}
	}
}

// TestAFleetLeavesNoGroupOfAClosedRoom: a room's creation whose call fails
// once is retried after the room closed (its close applied by the other
// node, or before the retry); the group it makes would outlive the room.
func TestAFleetLeavesNoGroupOfAClosedRoom(t *testing.T) {
	w := newFleetControl(t, &failsOnce{fail: func(call string, _ uint32) bool { return call == "create" }})
	const rooms = 16
	for i := range rooms {
		id := fmt.Sprintf("short-%d", i)
		w.submit(t, id, "create", 1, &room.CreateRoom{OwnerUserID: 1, SeatCount: 8})
		w.submit(t, id, "close", 1, &room.CloseRoom{})
	}
	w.settled(t)
	for i := range rooms {
		if id := fmt.Sprintf("short-%d", i); w.hasGroup(id) {
			t.Errorf("room %s closed, its group is left", id)
		}
	}
}

func (f *failsOnce) ShutUpAllMember(ctx context.Context, group string, on bool) error {
	seconds := uint32(0)
	if on {
		seconds = 1
	}
	if err := f.first(group, "shut up all", seconds); err != nil {
		return err
	}
	return f.GroupAPI.ShutUpAllMember(ctx, group, on)
}

// TestAFleetKeepsEachRoomsChatSwitchInOrder: as for a member's mute, a
// room's chat switched off, whose call fails once, then on again: the
// group ends open, as the room's latest event says, on whichever node each
// event lands.
func TestAFleetKeepsEachRoomsChatSwitchInOrder(t *testing.T) {
	w := newFleetControl(t, &failsOnce{fail: func(call string, seconds uint32) bool { return call == "shut up all" && seconds != 0 }})
	const rooms = 16
	for i := range rooms {
		id := fmt.Sprintf("chat-%d", i)
		w.submit(t, id, "create", 1, &room.CreateRoom{OwnerUserID: 1, SeatCount: 8})
		poll.Until(t, 30*time.Second, "group "+id, poll.Bool(func() bool { return w.hasGroup(id) }))
	}
	for i := range rooms {
		id := fmt.Sprintf("chat-%d", i)
		w.submit(t, id, "off", 1, &room.SetChatEnabled{Enabled: false})
		w.submit(t, id, "on", 1, &room.SetChatEnabled{Enabled: true})
	}
	w.settled(t)
	for i := range rooms {
		id := fmt.Sprintf("chat-%d", i)
		if g, _ := w.local.Group(id); g.ShutUpAll {
			t.Errorf("room %s: the group is shut up after the chat was switched on again", id)
		}
	}
}

// heldCalls is a GroupAPI whose bans, unbans, mutes and renames fail
// (transiently, as a connection reset does) while held.
type heldCalls struct {
	im.GroupAPI

	mu   sync.Mutex
	held bool
}

// newHeldControlWorld is a control world whose calls to Tencent go through
// a heldCalls; mod, when set, may change the control further.
func newHeldControlWorld(t *testing.T, mod func(*im.Control)) (*controlWorld, *heldCalls) {
	t.Helper()
	f := &heldCalls{}
	w := newControlWorld(t, func(c *im.Control) {
		f.GroupAPI = c.API
		c.API = f
		if mod != nil {
			mod(c)
		}
	})
	return w, f
}

func (f *heldCalls) hold(on bool) {
	f.mu.Lock()
	f.held = on
	f.mu.Unlock()
}

func (f *heldCalls) pass() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.held {
		return errors.New("connection reset (test)")
	}
	return nil
}

func (f *heldCalls) UnbanGroupMember(ctx context.Context, group string, members []string) error {
	if err := f.pass(); err != nil {
		return err
	}
	return f.GroupAPI.UnbanGroupMember(ctx, group, members)
}

func (f *heldCalls) BanGroupMember(ctx context.Context, group string, members []string, seconds uint32, reason string) error {
	if err := f.pass(); err != nil {
		return err
	}
	return f.GroupAPI.BanGroupMember(ctx, group, members, seconds, reason)
}

func (f *heldCalls) ForbidSendMsg(ctx context.Context, group string, members []string, seconds uint32) error {
	if err := f.pass(); err != nil {
		return err
	}
	return f.GroupAPI.ForbidSendMsg(ctx, group, members, seconds)
}

func (f *heldCalls) RenameGroup(ctx context.Context, group, name string) error {
	if err := f.pass(); err != nil {
		return err
	}
	return f.GroupAPI.RenameGroup(ctx, group, name)
}

// TestAnUnbanFollowedByAnEndedBanLiftsTheBan: a member kicked for good is
// unbanned, then kicked again for a second. Tencent fails the calls until
// the second ban has ended; the room's latest word on the member's ban is
// then that ban, over: the member is not banned, and the group must not
// keep the first, permanent ban the unban was to lift.
func TestAnUnbanFollowedByAnEndedBanLiftsTheBan(t *testing.T) {
	w, f := newHeldControlWorld(t, nil)
	const id = "late-unban"
	w.submit(t, id, "create", 1, &room.CreateRoom{OwnerUserID: 1, SeatCount: 8})
	w.submit(t, id, "join", 5, &room.JoinRoom{})
	w.submit(t, id, "kick", 1, &room.KickUser{TargetUserID: 5})
	poll.Until(t, 30*time.Second, "the permanent ban", poll.Bool(func() bool { return w.banned(id, 5) }))
	f.hold(true)
	w.submit(t, id, "unban", 1, &room.UnbanUser{TargetUserID: 5})
	w.submit(t, id, "kick-again", 1, &room.KickUser{TargetUserID: 5, DurationSeconds: 1})
	poll.Until(t, 10*time.Second, "the second ban to end, as the room says", func() error {
		snap, err := w.reg.Snapshot(context.Background(), id)
		if err != nil {
			return err
		}
		if n := len(snap.GetBans()); n != 0 {
			return fmt.Errorf("%d bans", n)
		}
		return nil
	})
	f.hold(false)
	w.settled(t)
	if w.banned(id, 5) {
		t.Fatalf("member 5 is still banned from the group: %v", w.local.Banned(id))
	}
}

// TestAMessageThatDoesNotDecodeHoldsBackNoRoom: a message on a room's
// subject that is no room event (another publisher's, a damaged one) is
// terminated by its own delivery ("undecodable"); the events before it that
// read the stream for a later event of their state must go on past it, not
// fail on it and be retried for ever, holding the room's later events back.
func TestAMessageThatDoesNotDecodeHoldsBackNoRoom(t *testing.T) {
	w, f := newHeldControlWorld(t, nil)
	const id = "poisoned"
	w.submit(t, id, "create", 1, &room.CreateRoom{OwnerUserID: 1, SeatCount: 8, Title: "first"})
	w.submit(t, id, "join", 5, &room.JoinRoom{})
	poll.Until(t, 30*time.Second, "the group", poll.Bool(func() bool { return w.hasGroup(id) }))
	f.hold(true)
	w.submit(t, id, "mute", 1, &room.MuteUser{TargetUserID: 5, DurationSeconds: 600})
	title := "second"
	w.submit(t, id, "title", 1, &room.UpdateProfile{Title: &title})
	poll.Until(t, 30*time.Second, "the events in the stream", poll.Bool(func() bool {
		ev, _, err := w.bus.LatestOfRoom(context.Background(), id, string(room.EventRoomProfileUpdated))
		return err == nil && ev != nil
	}))
	for _, typ := range []room.EventType{room.EventRoomUserMuted, room.EventRoomProfileUpdated} {
		if _, err := w.bus.JetStream().Publish(context.Background(), w.bus.Subject(string(typ), id), []byte("not a room event")); err != nil {
			t.Fatal(err)
		}
	}
	f.hold(false)
	poll.Until(t, 15*time.Second, "the mute and the rename applied past the messages that do not decode", poll.Bool(func() bool {
		_, muted := w.local.Muted(id)["5"]
		g, _ := w.local.Group(id)
		return muted && g.Name == "second"
	}))
}

// countedStream counts group control's reads of the stream.
type countedStream struct {
	im.EventStream
	reads atomic.Int64
}

func (s *countedStream) NextOfRoom(ctx context.Context, roomID, eventType string, seq uint64) (*roomv1.RoomEvent, uint64, error) {
	s.reads.Add(1)
	return s.EventStream.NextOfRoom(ctx, roomID, eventType, seq)
}

func (s *countedStream) LatestOfRoom(ctx context.Context, roomID, eventType string) (*roomv1.RoomEvent, uint64, error) {
	s.reads.Add(1)
	return s.EventStream.LatestOfRoom(ctx, roomID, eventType)
}

// TestABacklogOfMutesCostsReadsInProportion: a room's backlog of member
// events (a Tencent outage in a busy room, a consumer made again) is
// applied with a bounded number of stream reads per event. Each event
// looks for a later one of its member's state among the room's events of
// its type, before and after its calls; read one by one from the event on,
// a backlog of n costs n² reads, and one long enough cannot be read within
// an event's call timeout at all: the event then fails, is retried and
// fails again, for ever, holding its room back.
func TestABacklogOfMutesCostsReadsInProportion(t *testing.T) {
	s := &countedStream{}
	w, f := newHeldControlWorld(t, func(c *im.Control) {
		s.EventStream = c.Bus
		c.Bus = s
	})
	const id, n = "busy", 200
	w.submit(t, id, "create", 1, &room.CreateRoom{OwnerUserID: 1, SeatCount: 8})
	poll.Until(t, 30*time.Second, "the group", poll.Bool(func() bool { return w.hasGroup(id) }))
	f.hold(true)
	for u := range int64(n) {
		w.submit(t, id, fmt.Sprint("mute-", u), 1, &room.MuteUser{TargetUserID: 100 + u, DurationSeconds: 600})
	}
	poll.Until(t, 30*time.Second, "the backlog in the stream", poll.Bool(func() bool {
		ev, _, err := w.bus.LatestOfRoom(context.Background(), id, string(room.EventRoomUserMuted))
		return err == nil && ev != nil && strings.Contains(ev.GetPayloadJson(), fmt.Sprint(`"user_id":`, 100+n-1))
	}))
	before := s.reads.Load() // the reads of the first mute's tries so far may fall on either side: a few hundred
	f.hold(false)
	w.settled(t)
	if len(w.local.Muted(id)) != n {
		t.Fatalf("%d members muted, want %d", len(w.local.Muted(id)), n)
	}
	reads := s.reads.Load() - before
	t.Logf("%d reads for a backlog of %d mutes", reads, n)
	if reads > 10*n {
		t.Fatalf("a backlog of %d mutes took %d reads of the stream (%.0f an event), want at most %d", n, reads, float64(reads)/n, 10*n)
	}
}
