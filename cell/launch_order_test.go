package cell_test

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"hyapp/room-service/cell"
	"hyapp/room-service/internal/poll"
	"hyapp/room-service/lease"
	"hyapp/room-service/room"
	"hyapp/room-service/store"
)

// Rockets launch in launch order: launch time, then rocket id, whether they
// fall due together while the room is loaded or are overdue when a node
// starts after a crash.

// TestRocketsDueTogetherLaunchInIDOrder ignites eight rockets with one gift
// (every level has the same countdown, so all fall due at once) and lets
// the cell's timer launch them: they commit in rocket id order.
func TestRocketsDueTogetherLaunchInIDOrder(t *testing.T) {
	stores(t, testRocketsDueTogetherLaunchInIDOrder)
}

func testRocketsDueTogetherLaunchInIDOrder(t *testing.T, open func(testing.TB) store.Repository) {
	repo := open(t)
	cfg := levelsConfig(nil, 300*time.Millisecond, 300*time.Millisecond, 300*time.Millisecond, 300*time.Millisecond)
	sink := &recordSink{}
	reg := newTimerRegistry(t, repo, cfg, lease.NewLocal(), sink, nil)
	igniteRockets(t, reg, sink, "together", 8)

	poll.Until(t, 10*time.Second, "eight launches", poll.Bool(func() bool { return len(launches(sink, "together")) == 8 }))
	assertLaunchOrder(t, repo, "together", 1, 2, 3, 4, 5, 6, 7, 8)
}

// TestOverdueRocketsLaunchInOrderAfterRestart ignites eight rockets with
// one gift on a node that then crashes. The levels' countdowns differ, so
// rocket ids are not in launch-time order, and each launch time is shared
// by two rockets. The next node starts after every launch time with the
// scanner: the launches commit by launch time, then rocket id.
func TestOverdueRocketsLaunchInOrderAfterRestart(t *testing.T) {
	stores(t, testOverdueRocketsLaunchInOrderAfterRestart)
}

func testOverdueRocketsLaunchInOrderAfterRestart(t *testing.T, open func(testing.TB) store.Repository) {
	repo := open(t)
	crashed := &cutRepo{Repository: repo}
	first := &recordSink{}
	cfg := levelsConfig(&testClock{}, 40*time.Minute, 10*time.Minute, 30*time.Minute, 20*time.Minute)
	cfg.NodeID = "crashed"
	dead := newTimerRegistry(t, crashed, cfg, lease.NewLocal(), first, nil)
	igniteRockets(t, dead, first, "overdue", 8)
	crashed.cut.Store(true)

	clock := &testClock{}
	clock.jump(time.Hour)
	cfg = levelsConfig(clock, 40*time.Minute, 10*time.Minute, 30*time.Minute, 20*time.Minute)
	cfg.NodeID = "survivor"
	sink := &recordSink{}
	next := newTimerRegistry(t, repo, cfg, lease.NewLocal(), sink, nil)
	runScanner(t, next)

	poll.Until(t, 10*time.Second, "eight launches on the next node", poll.Bool(func() bool { return len(launches(sink, "overdue")) == 8 }))
	// Launch times: level 0 (rockets 1, 5) +40m, level 1 (2, 6) +10m,
	// level 2 (3, 7) +30m, level 3 (4, 8) +20m.
	assertLaunchOrder(t, repo, "overdue", 2, 6, 4, 8, 3, 7, 1, 5)
	poll.Until(t, 10*time.Second, "the timer rows to go", poll.Bool(func() bool { return len(dueTimers(t, repo, "overdue")) == 0 }))
}

// levelsConfig is rocketConfig with one level of 100 fuel per countdown.
func levelsConfig(clock *testClock, countdowns ...time.Duration) cell.Config {
	cfg := rocketConfig(0, clock)
	cfg.Rules.RocketLevels = nil
	for _, d := range countdowns {
		cfg.Rules.RocketLevels = append(cfg.Rules.RocketLevels, room.RocketLevel{Fuel: 100, Countdown: d})
	}
	return cfg
}

// igniteRockets creates the room and has user 10 send user 11 one gift of
// n x 100 coins, which ignites rockets 1 to n.
func igniteRockets(t testing.TB, reg *cell.Registry, sink *recordSink, roomID string, n int32) {
	t.Helper()
	createRoom(t, reg, roomID)
	mustSubmit(t, reg, env(roomID, "join-10", 10, &room.JoinRoom{}))
	mustSubmit(t, reg, env(roomID, "join-11", 11, &room.JoinRoom{}))
	mustSubmit(t, reg, env(roomID, "gift-1", 10, &room.SendGift{
		ReceiverUserIDs: []int64{11}, GiftID: "rose", Count: n,
		Outcome: room.GiftOutcome{Name: "rose", Price: 100, Kind: room.GiftNormal},
	}))
	poll.Until(t, 5*time.Second, "the ignitions", poll.Bool(func() bool {
		return len(eventsOf[*room.RoomRocketIgnitedEvent](sink, roomID, room.EventRoomRocketIgnited)) == int(n)
	}))
}

// assertLaunchOrder checks the room's log holds exactly the launches of
// the rockets, in this order of room version.
func assertLaunchOrder(t testing.TB, repo store.Repository, roomID string, rockets ...int64) {
	t.Helper()
	recs, err := repo.ListCommandsAfter(context.Background(), roomID, 0)
	if err != nil {
		t.Fatal(err)
	}
	var got, want []string
	for _, r := range recs {
		if r.CommandType == string(room.CmdLaunchRocket) {
			got = append(got, r.CommandID)
		}
	}
	for _, id := range rockets {
		want = append(want, cell.RocketLaunchCommandID(id))
	}
	if !slices.Equal(got, want) {
		t.Fatalf("room %s launched\n%v\nwant\n%v", roomID, got, want)
	}
}

// TestALaunchThatFailedStillLaunchesFirst ignites rockets 1 and 2 with one
// gift, due 200 ms and 700 ms later. The first wakeup of rocket 1 fails
// (the room is briefly unavailable) and rocket 1 is held back a second
// before it is submitted again; rocket 2 falls due meanwhile. It waits for
// rocket 1: the launches commit in launch order.
func TestALaunchThatFailedStillLaunchesFirst(t *testing.T) {
	repo := openRepo(t)
	cfg := levelsConfig(nil, 200*time.Millisecond, 700*time.Millisecond)
	var failed atomic.Bool
	cfg.Features = []cell.Feature{{Admit: func(_ context.Context, env *room.Envelope) error {
		if l, ok := env.Command.(*room.LaunchRocket); ok && l.RocketID == 1 && failed.CompareAndSwap(false, true) {
			return room.Errorf(room.ErrUnavailable, "room %s is restarting; retry", env.RoomID)
		}
		return nil
	}}}
	sink := &recordSink{}
	reg := newTimerRegistry(t, repo, cfg, lease.NewLocal(), sink, nil)
	igniteRockets(t, reg, sink, "held", 2)

	poll.Until(t, 10*time.Second, "two launches", poll.Bool(func() bool { return len(launches(sink, "held")) == 2 }))
	if !failed.Load() {
		t.Fatal("rocket 1's first wakeup did not fail")
	}
	assertLaunchOrder(t, repo, "held", 1, 2)
}
