package cell_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"hyapp/room-service/cell"
	"hyapp/room-service/internal/poll"
	"hyapp/room-service/lease"
	"hyapp/room-service/room"
	"hyapp/room-service/store"
)

// heldPrefix says another node holds every room whose id starts with prefix.
type heldPrefix struct {
	lease.Lease
	prefix string
}

func (h heldPrefix) Acquire(ctx context.Context, roomID string) (lease.Handle, error) {
	if strings.HasPrefix(roomID, h.prefix) {
		return nil, lease.ErrHeld
	}
	return h.Lease.Acquire(ctx, roomID)
}

// Due sweep rows of rooms other nodes serve, more than one scan reads, hold
// back no rocket launch, and the scan moves them on: they are not read
// again until their next period.
func TestSweepsOfRoomsServedElsewhereHoldBackNoLaunch(t *testing.T) {
	repo, ctx := openRepo(t), context.Background()
	first := &recordSink{}
	a := newTimerRegistry(t, repo, rocketConfig(time.Second, nil), lease.NewLocal(), first, nil)
	igniteRocket(t, a, first, "rk")
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
	var ts []store.Timer
	for i := range 600 {
		ts = append(ts, store.Timer{RoomID: fmt.Sprintf("g%04d", i), TimerID: "presence", Kind: cell.TimerKindPresence, FireAt: time.Now().Add(-time.Hour)})
	}
	if err := repo.PutTimers(ctx, ts); err != nil {
		t.Fatal(err)
	}
	sink := &recordSink{}
	reg := newTimerRegistry(t, repo, rocketConfig(time.Second, nil), heldPrefix{Lease: lease.NewLocal(), prefix: "g"}, sink, nil)
	poll.Until(t, 10*time.Second, "rocket 1 launched by the scanner", poll.Bool(func() bool {
		cell.ScanTimers(reg)
		return len(launches(sink, "rk")) == 1
	}))
	cell.ScanTimers(reg)
	due, err := repo.ListDueTimers(ctx, cell.TimerKindPresence, time.Now(), 1000)
	if err != nil {
		t.Fatal(err)
	}
	if len(due) != 0 {
		t.Fatalf("%d sweep rows of rooms served elsewhere still due after two scans", len(due))
	}
}

// A room its sweep loaded is used: on a full node the next load evicts
// the room used least recently before it, and the sweep itself never
// evicts a room to load one.
func TestASweepNeverEvictsAndIsNotEvictedFirst(t *testing.T) {
	repo, clock, ctx := openRepo(t), &testClock{}, context.Background()
	before := presenceRegistry(t, repo, clock, nil)
	for _, id := range []string{"ghost", "a", "b"} {
		createRoom(t, before, id)
	}
	join(t, before, "ghost", 10, 11)
	if err := before.Close(ctx); err != nil {
		t.Fatal(err)
	}
	clock.jump(10 * time.Hour) // ghost's sweep is due
	node := func(loaded ...string) *cell.Registry {
		reg := cell.New(cell.Config{TimerScanEvery: -1, Clock: clock.Now, MaxRooms: 2}, repo, lease.NewLocal(), &recordSink{}, nil, quiet)
		for _, id := range loaded {
			if _, err := reg.Snapshot(ctx, id); err != nil {
				t.Fatal(err)
			}
		}
		return reg
	}

	full := node("a", "b")
	cell.ScanTimers(full)
	armed, _ := cell.PresenceTimer(full, "ghost")
	loaded := full.Loaded()
	if err := full.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if armed != 0 || loaded != 2 {
		t.Fatalf("a full node loaded ghost for its sweep (%d rooms loaded)", loaded)
	}

	reg := node("a")
	t.Cleanup(func() { _ = reg.Close(context.Background()) })
	cell.ScanTimers(reg)
	if armed, _ := cell.PresenceTimer(reg, "ghost"); armed == 0 {
		t.Fatal("ghost was not loaded by its sweep on a node with room for it")
	}
	if _, err := reg.Snapshot(ctx, "b"); err != nil { // full: a, used before ghost, goes
		t.Fatal(err)
	}
	if armed, _ := cell.PresenceTimer(reg, "ghost"); armed == 0 {
		t.Fatal("ghost, loaded by its sweep after a's last use, was evicted first")
	}
}

// A cell that stops without a hand-off (here a commit that fails) forgets
// its members before it leaves the routing table; a sweep that meets the
// room in between leaves its row, which brings the room back.
func TestASweepLeavesTheRowOfARoomWhoseCellStops(t *testing.T) {
	repo, clock, ctx := openRepo(t), &testClock{}, context.Background()
	cr := &cutRepo{Repository: repo}
	var armed atomic.Bool
	entered, release := make(chan struct{}), make(chan struct{})
	hold := cell.Feature{Stopped: func(roomID string) {
		if roomID == "g" && armed.CompareAndSwap(true, false) {
			close(entered)
			<-release // presence's hook ran before: the cell is routed to without its members
		}
	}}
	reg := newTimerRegistry(t, cr, cell.Config{TimerScanEvery: -1, Clock: clock.Now, Features: []cell.Feature{hold}}, lease.NewLocal(), &recordSink{}, nil)
	createRoom(t, reg, "g")
	join(t, reg, "g", 10, 11)
	clock.jump(cell.SweepEvery(reg) + time.Second) // the sweep is due
	armed.Store(true)
	cr.cut.Store(true) // the next commit fails: the cell stops
	failed := make(chan error, 1)
	go func() { _, err := reg.Submit(ctx, env("g", "join-12", 12, &room.JoinRoom{})); failed <- err }()
	<-entered
	cr.cut.Store(false)
	cell.ScanTimers(reg)
	close(release)
	if err := <-failed; err == nil {
		t.Fatal("the join whose commit failed was answered as committed")
	}
	if n := len(sweepTimers(t, repo, "g")); n != 1 {
		t.Fatalf("%d sweep rows for room g, unloaded with members 10 and 11: nothing would load it again", n)
	}
}

// A member the service's own operator (logged before the service refused
// it) holds no expiry back: the others nobody sees leave.
func TestTheServicesOperatorAsAMemberHoldsNoExpiryBack(t *testing.T) {
	repo, clock := openRepo(t), &testClock{}
	reg := presenceRegistry(t, repo, clock, nil)
	createRoom(t, reg, "sys")
	if _, err := cell.SubmitUnchecked(reg, env("sys", "join-sys", room.SystemOperator, &room.JoinRoom{})); err != nil {
		t.Fatal(err)
	}
	join(t, reg, "sys", 10)
	clock.jump(91 * time.Second)
	wake(t, reg, "sys", 1, 1)
	if got := memberIDs(t, reg, "sys"); slices.Contains(got, 10) {
		t.Fatalf("members %v: 10, whom nobody saw for 91 s, is still in the room", got)
	}
}
