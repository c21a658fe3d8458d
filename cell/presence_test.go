package cell_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"hyapp/room-service/cell"
	"hyapp/room-service/internal/poll"
	"hyapp/room-service/lease"
	"hyapp/room-service/room"
	"hyapp/room-service/store"
)

// Presence: a member who is not seen for the presence timeout leaves the
// room, and a seated member offline for the mic grace loses the seat, each
// through a logged ExpirePresence the owner's cell decides on its clock.
// The tests move the registry's clock and run the room's wakeup by hand
// (cell.PresenceWake), as its timer does when the time comes.

// presenceRegistry is a registry with the default presence settings (90 s,
// grace 30 s) on the test clock.
func presenceRegistry(t testing.TB, repo store.Repository, clock *testClock, sink *recordSink) *cell.Registry {
	cfg := cell.Config{TimerScanEvery: -1, Clock: clock.Now}
	if sink == nil {
		sink = &recordSink{}
	}
	return newTimerRegistry(t, repo, cfg, lease.NewLocal(), sink, nil)
}

func join(t testing.TB, reg *cell.Registry, roomID string, users ...int64) {
	t.Helper()
	for _, u := range users {
		mustSubmit(t, reg, env(roomID, fmt.Sprintf("join-%d", u), u, &room.JoinRoom{}))
	}
}

func heartbeat(t testing.TB, reg *cell.Registry, roomID string, users ...int64) cell.HeartbeatResult {
	t.Helper()
	res, err := reg.Heartbeat(context.Background(), roomID, users)
	if err != nil {
		t.Fatalf("heartbeat %v: %v", users, err)
	}
	return res
}

// memberIDs are the room's members now, ascending.
func memberIDs(t testing.TB, reg *cell.Registry, roomID string) []int64 {
	t.Helper()
	snap, err := reg.Snapshot(context.Background(), roomID)
	if err != nil {
		t.Fatal(err)
	}
	var out []int64
	for _, m := range snap.GetMembers() {
		out = append(out, m.GetUserId())
	}
	slices.Sort(out)
	return out
}

// seatOf is the user's seat now, -1 when not seated.
func seatOf(t testing.TB, reg *cell.Registry, roomID string, user int64) int32 {
	t.Helper()
	snap, err := reg.Snapshot(context.Background(), roomID)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range snap.GetSeats() {
		if s.GetUserId() == user {
			return s.GetIndex()
		}
	}
	return -1
}

// expiries are the room's logged ExpirePresence commands.
func expiries(t testing.TB, repo store.Repository, roomID string) []room.ExpirePresence {
	t.Helper()
	recs, err := repo.ListCommandsAfter(context.Background(), roomID, 0)
	if err != nil {
		t.Fatal(err)
	}
	var out []room.ExpirePresence
	for _, r := range recs {
		if r.CommandType != string(room.CmdExpirePresence) {
			continue
		}
		e, err := room.DecodeCommand(roomID, r.CommandID, room.CmdExpirePresence, r.Payload)
		if err != nil {
			t.Fatal(err)
		}
		if e.Operator != room.SystemOperator || !e.Platform {
			t.Fatalf("an expiry logged as operator %d platform %v", e.Operator, e.Platform)
		}
		out = append(out, *e.Command.(*room.ExpirePresence))
	}
	return out
}

func wake(t testing.TB, reg *cell.Registry, roomID string, wantSubmitted, wantCommitted int) {
	t.Helper()
	if s, c := cell.PresenceWake(reg, roomID); s != wantSubmitted || c != wantCommitted {
		t.Fatalf("wakeup submitted %d expiries, %d committed; want %d and %d", s, c, wantSubmitted, wantCommitted)
	}
}

// TestHeartbeatsKeepAMemberIn: a member whose gateway beats stays; one who
// went silent leaves after the timeout, through exactly one command; a
// heartbeat for users who are not members joins nobody and counts them.
func TestHeartbeatsKeepAMemberIn(t *testing.T) { stores(t, testHeartbeatsKeepAMemberIn) }

func testHeartbeatsKeepAMemberIn(t *testing.T, open func(testing.TB) store.Repository) {
	repo, clock, sink := open(t), &testClock{}, &recordSink{}
	reg := presenceRegistry(t, repo, clock, sink)
	createRoom(t, reg, "hb")
	join(t, reg, "hb", 10, 11)

	res := heartbeat(t, reg, "hb", 10, 12, 13)
	if res.Members != 1 || !slices.Equal(res.NotMembers, []int64{12, 13}) {
		t.Fatalf("heartbeat of 10, 12, 13: %+v, want 1 member and 12, 13 not", res)
	}
	for range 3 {
		clock.jump(60 * time.Second)
		heartbeat(t, reg, "hb", 10)
		if got := memberIDs(t, reg, "hb"); !slices.Contains(got, 10) {
			t.Fatalf("members %v lost the member whose gateway beats", got)
		}
	}
	// 11 was silent for 180 s: one wakeup, one command.
	wake(t, reg, "hb", 1, 1)
	if got := memberIDs(t, reg, "hb"); !slices.Equal(got, []int64{10}) {
		t.Fatalf("members %v after the silent member's timeout, want [10]", got)
	}
	wake(t, reg, "hb", 0, 0)
	got := expiries(t, repo, "hb")
	if len(got) != 1 || !slices.Equal(got[0].Leave, []int64{11}) || len(got[0].Unseat) != 0 {
		t.Fatalf("logged expiries %+v, want one leaving 11", got)
	}
	var left []*room.RoomUserLeftEvent
	for _, c := range sink.all() {
		for _, ev := range c.Events {
			if d, ok := ev.Data.(*room.RoomUserLeftEvent); ok {
				left = append(left, d)
			}
		}
	}
	if len(left) != 1 || left[0].UserID != 11 || left[0].Reason != room.LeftPresenceTimeout || left[0].OnlineCount != 1 {
		t.Fatalf("RoomUserLeft events %+v, want 11 leaving for presence_timeout with 1 online", left)
	}
	if res := heartbeat(t, reg, "hb", 11); res.Members != 0 || !slices.Equal(res.NotMembers, []int64{11}) {
		t.Fatalf("heartbeat of the member who timed out: %+v, want not a member", res)
	}
}

// TestASilentCrowdLeavesInFewCommands: 1,050 listeners whose gateway died
// leave in two commands (1,000 and 50), not one per listener.
func TestASilentCrowdLeavesInFewCommands(t *testing.T) {
	stores(t, testASilentCrowdLeavesInFewCommands)
}

func testASilentCrowdLeavesInFewCommands(t *testing.T, open func(testing.TB) store.Repository) {
	repo, clock := open(t), &testClock{}
	reg := presenceRegistry(t, repo, clock, nil)
	createRoom(t, reg, "crowd")
	const n = 1050
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for u := int64(100); u < 100+n; u++ {
		wg.Go(func() {
			if _, err := reg.Submit(context.Background(), env("crowd", fmt.Sprintf("join-%d", u), u, &room.JoinRoom{})); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	mustSubmit(t, reg, env("crowd", "seat-100", 100, &room.TakeMic{SeatIndex: 0}))
	clock.jump(91 * time.Second)
	wake(t, reg, "crowd", 2, 2)
	if got := memberIDs(t, reg, "crowd"); len(got) != 0 {
		t.Fatalf("%d members left after the crowd's timeout", len(got))
	}
	if seatOf(t, reg, "crowd", 100) != -1 {
		t.Fatal("the seated listener kept the seat")
	}
	got := expiries(t, repo, "crowd")
	total := 0
	for _, e := range got {
		total += len(e.Leave)
		if len(e.Leave) > room.MaxPresenceExpiries || len(e.Unseat) != 0 {
			t.Fatalf("an expiry of %d leaving and %d unseated", len(e.Leave), len(e.Unseat))
		}
	}
	if len(got) != 2 || total != n {
		t.Fatalf("%d expiries for %d users, want 2 for %d", len(got), total, n)
	}
}

// TestAnOfflineSeatedMemberKeepsTheSeatWithinTheGrace: after a logout, a
// seated member who comes back within the grace keeps the seat and nothing
// is logged for them; one who does not loses the seat after it and stays
// in the room; a seated member whose gateway went silent counts as offline
// after a third of the timeout, and leaves the room at the timeout.
func TestAnOfflineSeatedMemberKeepsTheSeatWithinTheGrace(t *testing.T) {
	stores(t, testAnOfflineSeatedMemberKeepsTheSeat)
}

func testAnOfflineSeatedMemberKeepsTheSeat(t *testing.T, open func(testing.TB) store.Repository) {
	repo, clock, sink := open(t), &testClock{}, &recordSink{}
	reg := presenceRegistry(t, repo, clock, sink)
	createRoom(t, reg, "grace")
	join(t, reg, "grace", 10, 11, 12)
	for i, u := range []int64{10, 11, 12} {
		mustSubmit(t, reg, env("grace", fmt.Sprintf("take-%d", u), u, &room.TakeMic{SeatIndex: int32(i)}))
	}
	event := clock.Now().UnixMilli()
	if n := reg.UserOffline(10, event); n != 1 {
		t.Fatalf("logout of 10 marked %d rooms, want 1", n)
	}
	reg.UserOffline(11, event)
	if n := reg.UserOffline(99, event); n != 0 {
		t.Fatalf("logout of a user in no room marked %d rooms", n)
	}
	clock.jump(20 * time.Second)
	wake(t, reg, "grace", 0, 0) // within the grace: nothing
	reg.UserOnline(10, event+20_000)
	reg.UserOffline(10, event+1) // a late callback, older than the login: dropped
	heartbeat(t, reg, "grace", 12)

	clock.jump(15 * time.Second) // 35 s after the logout
	wake(t, reg, "grace", 1, 1)
	if s := seatOf(t, reg, "grace", 11); s != -1 {
		t.Fatalf("11, offline past the grace, still on seat %d", s)
	}
	if s := seatOf(t, reg, "grace", 10); s != 0 {
		t.Fatalf("10, back within the grace, is on seat %d, want 0", s)
	}
	if got := memberIDs(t, reg, "grace"); !slices.Equal(got, []int64{10, 11, 12}) {
		t.Fatalf("members %v: losing a seat is not leaving the room", got)
	}
	got := expiries(t, repo, "grace")
	if len(got) != 1 || len(got[0].Leave) != 0 || !slices.Equal(got[0].Unseat, []room.SeatExpiry{{UserID: 11, SeatIndex: 1}}) {
		t.Fatalf("logged expiries %+v, want one taking 11 off seat 1", got)
	}
	var actions []string
	for _, c := range sink.all() {
		for _, ev := range c.Events {
			if d, ok := ev.Data.(*room.RoomMicChangedEvent); ok && d.UserID == 11 {
				actions = append(actions, d.Action)
			}
		}
	}
	if !slices.Equal(actions, []string{room.MicTake, room.MicOffline}) {
		t.Fatalf("11's mic actions %v, want take then mic_offline", actions)
	}

	// 12 beat 20 s after sitting down; silent since, offline 30 s later,
	// the seat goes after the grace: 80 s after sitting down.
	clock.jump(25 * time.Second) // 60 s
	heartbeat(t, reg, "grace", 10)
	wake(t, reg, "grace", 0, 0)
	clock.jump(21 * time.Second) // 81 s
	heartbeat(t, reg, "grace", 10)
	wake(t, reg, "grace", 1, 1)
	if s := seatOf(t, reg, "grace", 12); s != -1 {
		t.Fatalf("12, silent for a third of the timeout plus the grace, still on seat %d", s)
	}
	if got := memberIDs(t, reg, "grace"); !slices.Contains(got, 12) {
		t.Fatalf("members %v: 12 left before the timeout", got)
	}
	clock.jump(30 * time.Second) // 111 s: 12 silent for 91 s, 11 for 111 s since its logout
	heartbeat(t, reg, "grace", 10)
	wake(t, reg, "grace", 1, 1)
	if got := memberIDs(t, reg, "grace"); !slices.Equal(got, []int64{10}) {
		t.Fatalf("members %v after the timeout, want [10]", got)
	}
	if s := seatOf(t, reg, "grace", 10); s != 0 {
		t.Fatalf("10 lost seat 0 (now %d) while its gateway beat", s)
	}
}

// TestRecoveryGivesMembersAFreshTimeout: presence lives in memory on the
// owner; a room loaded again (a restart, a hand-off) counts every member
// as seen at the load.
func TestRecoveryGivesMembersAFreshTimeout(t *testing.T) { stores(t, testRecoveryGivesAFreshTimeout) }

func testRecoveryGivesAFreshTimeout(t *testing.T, open func(testing.TB) store.Repository) {
	repo, clock := open(t), &testClock{}
	first := cell.New(cell.Config{TimerScanEvery: -1, Clock: clock.Now}, repo, lease.NewLocal(), &recordSink{}, nil, quiet)
	createRoom(t, first, "fresh")
	join(t, first, "fresh", 10, 11)
	clock.jump(80 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := first.Close(ctx); err != nil {
		t.Fatal(err)
	}

	reg := presenceRegistry(t, repo, clock, nil)
	if got := memberIDs(t, reg, "fresh"); !slices.Equal(got, []int64{10, 11}) { // loads the room
		t.Fatalf("members %v after the reload", got)
	}
	clock.jump(20 * time.Second) // 100 s after the joins, 20 s after the load
	wake(t, reg, "fresh", 0, 0)
	if got := memberIDs(t, reg, "fresh"); len(got) != 2 {
		t.Fatalf("members %v: the reload did not give a fresh timeout", got)
	}
	clock.jump(71 * time.Second) // 91 s after the load
	wake(t, reg, "fresh", 1, 1)
	if got := memberIDs(t, reg, "fresh"); len(got) != 0 {
		t.Fatalf("members %v 91 s after the load", got)
	}
}

// TestPresenceTimerFires: with a real clock and a short timeout, the
// room's own timer removes a silent member.
func TestPresenceTimerFires(t *testing.T) {
	repo := openRepo(t)
	reg := newTimerRegistry(t, repo, cell.Config{TimerScanEvery: -1, PresenceTimeout: time.Second, MicOfflineGrace: time.Second},
		lease.NewLocal(), &recordSink{}, nil)
	createRoom(t, reg, "timer")
	join(t, reg, "timer", 10)
	poll.Until(t, 15*time.Second, "the silent member to leave", poll.Bool(func() bool {
		return len(memberIDs(t, reg, "timer")) == 0
	}))
	if got := expiries(t, repo, "timer"); len(got) != 1 || !slices.Equal(got[0].Leave, []int64{10}) {
		t.Fatalf("logged expiries %+v, want one leaving 10", got)
	}
}

// TestHeartbeatRefusesBadInput names a stable reason for each bad
// heartbeat, and loads no room for it.
func TestHeartbeatRefusesBadInput(t *testing.T) {
	reg := presenceRegistry(t, openRepo(t), &testClock{}, nil)
	createRoom(t, reg, "bad")
	many := make([]int64, room.MaxHeartbeatUsers+1)
	for i := range many {
		many[i] = int64(i + 1)
	}
	for _, tc := range []struct {
		name   string
		roomID string
		users  []int64
		reason string
	}{
		{"no room id", "", []int64{1}, "missing_room_id"},
		{"a room id with a space", "a b", []int64{1}, "invalid_argument"},
		{"no users", "bad", nil, "too_many_users"},
		{"too many users", "bad", many, "too_many_users"},
		{"user 0", "bad", []int64{5, 0}, "bad_user_id"},
		{"a negative user", "bad", []int64{-3}, "bad_user_id"},
		{"no such room", "nope", []int64{1}, "room_not_found"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := reg.Heartbeat(context.Background(), tc.roomID, tc.users)
			if got := room.AsError(err).Reason; err == nil || got != tc.reason {
				t.Fatalf("heartbeat: %v, want %s", err, tc.reason)
			}
		})
	}
}

// TestThePresenceTimerIsNeverLate: a commit re-arms the room's timer from
// the deadlines it moved alone (a crowded room is not walked on every
// commit), yet after any run of joins, seats taken, granted and left,
// heartbeats and leaves, the timer is armed no later than the earliest deadline.
func TestThePresenceTimerIsNeverLate(t *testing.T) {
	repo, clock := openRepo(t), &testClock{}
	reg := presenceRegistry(t, repo, clock, nil)
	mustSubmit(t, reg, env("due", "create", 1, &room.CreateRoom{OwnerUserID: 1, SeatCount: 10, MicApproval: true}))
	never := func(step string) {
		t.Helper()
		armed, earliest := cell.PresenceTimer(reg, "due")
		if earliest != 0 && (armed == 0 || armed > (earliest+999)/1000*1000) {
			t.Fatalf("%s: the timer is armed for %d, after the earliest deadline %d", step, armed, earliest)
		}
	}
	// The owner seats 10 with the request 10 made 20 s earlier: losing the
	// seat (silent 30 s, grace 30 s from the request) comes before anyone
	// leaves (90 s), and only the owner's commit tells.
	join(t, reg, "due", 1, 10) // the owner, who approves mic requests
	mustSubmit(t, reg, env("due", "request", 10, &room.RequestMic{SeatIndex: 2}))
	clock.jump(20 * time.Second)
	mustSubmit(t, reg, env("due", "approve", 1, &room.ApproveMicRequest{TargetUserID: 10}))
	never("seated by the owner")

	r := rand.New(rand.NewPCG(3, 4))
	users := []int64{10, 11, 12, 13, 14, 15, 16, 17}
	for step := range 300 {
		u := users[r.IntN(len(users))]
		id := fmt.Sprint("c-", step)
		var cmd room.Command
		op := u
		switch r.IntN(7) {
		case 0:
			cmd = &room.JoinRoom{}
		case 1:
			cmd, op = &room.TakeMic{SeatIndex: int32(r.IntN(4))}, 1 // the owner sits down; others must ask
		case 2:
			cmd = &room.LeaveMic{}
		case 3:
			cmd = &room.LeaveRoom{}
		case 4:
			cmd = &room.RequestMic{SeatIndex: int32(r.IntN(4))}
		case 5:
			cmd, op = &room.ApproveMicRequest{TargetUserID: u}, 1 // seats u: a deadline the operator's commit moves
		default:
			heartbeat(t, reg, "due", u)
		}
		if cmd != nil {
			_, _ = reg.Submit(context.Background(), env("due", id, op, cmd)) // refusals (not a member, seat taken) are part of the run
		}
		clock.jump(time.Duration(r.IntN(8)) * time.Second)
		never(fmt.Sprint("step ", step))
	}
}

// A member who times out of the room takes their mic request with them
// (presence_timeout 30 s, shorter than a request's minute): the admin's
// approval that comes after finds nobody to seat.
func TestAMemberWhoTimesOutTakesTheirMicRequest(t *testing.T) {
	repo, clock := openRepo(t), &testClock{}
	reg := newTimerRegistry(t, repo, cell.Config{TimerScanEvery: -1, Clock: clock.Now, PresenceTimeout: 30 * time.Second},
		lease.NewLocal(), &recordSink{}, nil)
	mustSubmit(t, reg, env("appr", "create", 1, &room.CreateRoom{OwnerUserID: 1, HostUserID: 2, SeatCount: 10, Title: "t", MicApproval: true}))
	join(t, reg, "appr", 10)
	mustSubmit(t, reg, env("appr", "req", 10, &room.RequestMic{SeatIndex: room.AnySeat}))
	clock.jump(31 * time.Second)
	wake(t, reg, "appr", 1, 1)
	if got := memberIDs(t, reg, "appr"); len(got) != 0 {
		t.Fatalf("members %v, want 10 gone", got)
	}
	snap, err := reg.Snapshot(context.Background(), "appr")
	if err != nil {
		t.Fatal(err)
	}
	if n := len(snap.GetMicRequests()); n != 0 {
		t.Fatalf("%d mic requests left after their user timed out", n)
	}
	if _, err := reg.Submit(context.Background(), env("appr", "approve", 1, &room.ApproveMicRequest{TargetUserID: 10})); err == nil {
		t.Fatalf("an approval seated 10, who timed out of the room, on seat %d", seatOf(t, reg, "appr", 10))
	}
}

// A member who leaves and joins again within one committed batch is a
// member to Tencent IM's state callbacks: UserOffline reaches the room.
func TestALeaveAndRejoinInOneBatchKeepsTheMemberKnown(t *testing.T) {
	repo, clock := openRepo(t), &testClock{}
	setup := newRegistry(t, repo, cell.Config{}, nil)
	createRoom(t, setup, "idx")
	join(t, setup, "idx", 10)
	if err := setup.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	blocked := &blockingRepo{Repository: repo, entered: make(chan struct{}), release: make(chan struct{})}
	reg := newTimerRegistry(t, blocked, cell.Config{TimerScanEvery: -1, Clock: clock.Now}, lease.NewLocal(), &recordSink{}, nil)
	release := sync.OnceFunc(func() { close(blocked.release) })
	defer release()
	var wg sync.WaitGroup
	submit := func(e *room.Envelope) {
		wg.Go(func() {
			if _, err := reg.Submit(context.Background(), e); err != nil {
				t.Errorf("%s: %v", e.CommandID, err)
			}
		})
	}
	// The first join's commit holds the room while the leave and the
	// rejoin queue behind it: the two go in one batch.
	submit(env("idx", "first", 20, &room.JoinRoom{}))
	<-blocked.entered
	submit(env("idx", "leave", 10, &room.LeaveRoom{}))
	poll.Until(t, 5*time.Second, "the leave queued", poll.Bool(func() bool { return cell.Queued(reg, "idx") == 1 }))
	submit(env("idx", "rejoin", 10, &room.JoinRoom{}))
	poll.Until(t, 5*time.Second, "the rejoin queued", poll.Bool(func() bool { return cell.Queued(reg, "idx") == 2 }))
	release()
	wg.Wait()
	if got := memberIDs(t, reg, "idx"); len(got) != 2 {
		t.Fatalf("members %v, want 10 and 20", got)
	}
	if n := reg.UserOffline(10, clock.Now().UnixMilli()); n != 1 {
		t.Fatalf("UserOffline(10) reached %d rooms; 10 is a member of the loaded room idx", n)
	}
}

// TestMembersOfARoomNoNodeServesLeaveInTime: a room that stopped being
// loaded with members in it (here a restart) is loaded again by the timer
// scanner once its presence sweep comes due, though nobody calls for it,
// and its members nobody sees leave a presence timeout later; its sweep
// timer goes with its last member.
func TestMembersOfARoomNoNodeServesLeaveInTime(t *testing.T) {
	stores(t, testMembersOfARoomNoNodeServesLeaveInTime)
}

func testMembersOfARoomNoNodeServesLeaveInTime(t *testing.T, open func(testing.TB) store.Repository) {
	repo, clock, ctx := open(t), &testClock{}, context.Background()
	before := presenceRegistry(t, repo, clock, nil)
	createRoom(t, before, "ghost")
	join(t, before, "ghost", 10, 11)
	if n := len(sweepTimers(t, repo, "ghost")); n != 1 {
		t.Fatalf("%d presence sweep timers of a room with members, want 1", n)
	}
	if err := before.Close(ctx); err != nil {
		t.Fatal(err)
	}

	cfg := cell.Config{TimerScanEvery: 10 * time.Millisecond, Clock: clock.Now}
	after := newTimerRegistry(t, repo, cfg, lease.NewLocal(), &recordSink{}, nil)
	clock.jump(cell.SweepEvery(after) + time.Second) // the sweep is due
	poll.Until(t, 10*time.Second, "the room loaded by its sweep", poll.Bool(func() bool { return after.Loaded() == 1 }))
	// Loaded, the room's sweep lies ahead again.
	poll.Until(t, 10*time.Second, "the sweep moved on", poll.Bool(func() bool {
		ts := sweepTimers(t, repo, "ghost")
		return len(ts) == 1 && ts[0].FireAt.After(clock.Now())
	}))
	clock.jump(90*time.Second + time.Second)
	wake(t, after, "ghost", 1, 1)
	if got := memberIDs(t, after, "ghost"); len(got) != 0 {
		t.Fatalf("members %v nobody saw are still in the room", got)
	}
	if n := len(sweepTimers(t, repo, "ghost")); n != 0 {
		t.Fatalf("%d presence sweep timers left in a room without members", n)
	}
}

// sweepTimers lists the room's presence sweep timers, due or not.
func sweepTimers(t testing.TB, repo store.Repository, roomID string) []store.Timer {
	t.Helper()
	return timerRows(t, repo, roomID, cell.TimerKindPresence)
}
