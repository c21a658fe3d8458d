package cell_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"hyapp/room-service/cell"
	"hyapp/room-service/internal/poll"
	"hyapp/room-service/lease"
	"hyapp/room-service/room"
	"hyapp/room-service/store"
	"hyapp/room-service/wallet"
)

// The rocket launch timer: an ignition commits a timer row with its gift; a
// wakeup (in-memory timer or scanner) submits LaunchRocket, which the domain
// revalidates; the launch deletes the row in its own commit.

// TestRocketLaunchesOnceAtItsTime lets the in-memory timer armed after the
// ignition's commit launch the rocket, with no scanner running.
func TestRocketLaunchesOnceAtItsTime(t *testing.T) { stores(t, testRocketLaunchesOnceAtItsTime) }

func testRocketLaunchesOnceAtItsTime(t *testing.T, open func(testing.TB) store.Repository) {
	repo := &recordingRepo{Repository: open(t)}
	sink, m := &recordSink{}, cell.NewMetrics(nil)
	reg := newTimerRegistry(t, repo, rocketConfig(200*time.Millisecond, nil), lease.NewLocal(), sink, m)
	l := igniteRocket(t, reg, sink, "rk")

	poll.Until(t, 10*time.Second, "the launch", poll.Bool(func() bool { return len(launches(sink, "rk")) > 0 }))
	got := launches(sink, "rk")
	if len(got) != 1 || got[0].RocketID != l.RocketID || got[0].Level != l.Level || got[0].LaunchAt != l.LaunchAt || got[0].LaunchedAt < l.LaunchAt {
		t.Fatalf("launches %+v, want rocket %d launched once at or after %d", got, l.RocketID, l.LaunchAt)
	}
	assertLaunchCommands(t, repo, "rk", 1)
	// The ignition's batch set the timer; the launch's batch deleted it.
	ignition := repo.batchOf("gift-1")
	if len(ignition.Timers) != 1 {
		t.Fatalf("the ignition's batch set timers %+v, want one", ignition.Timers)
	}
	tm := ignition.Timers[0]
	var body room.LaunchRocket
	if err := json.Unmarshal(tm.Payload, &body); err != nil || body != l ||
		tm.TimerID != cell.RocketTimerID(l.RocketID) || tm.Kind != cell.TimerKindRocketLaunch || tm.FireAt.UnixMilli() != l.LaunchAt {
		t.Fatalf("launch timer %+v (payload %s: %v), want %s due at %d launching %+v", tm, tm.Payload, err, cell.RocketTimerID(l.RocketID), l.LaunchAt, l)
	}
	launch := repo.batchOf(cell.RocketLaunchCommandID(l.RocketID))
	if !slices.Equal(launch.DoneTimers, []string{cell.RocketTimerID(l.RocketID)}) || len(launch.Timers) != 0 {
		t.Fatalf("the launch's batch: timers %+v, done %v; want the launch timer done", launch.Timers, launch.DoneTimers)
	}
	assertNoTimer(t, repo, "rk")
	assertWakeups(t, m, map[string]float64{"launched": 1})
}

// TestRocketDuplicateWakeupIsNoop wakes one due launch twice at once (an
// in-memory timer and the scanner), then again after it launched.
func TestRocketDuplicateWakeupIsNoop(t *testing.T) { stores(t, testRocketDuplicateWakeupIsNoop) }

func testRocketDuplicateWakeupIsNoop(t *testing.T, open func(testing.TB) store.Repository) {
	repo := open(t)
	clock := &testClock{}
	sink, m := &recordSink{}, cell.NewMetrics(nil)
	reg := newTimerRegistry(t, repo, rocketConfig(time.Hour, clock), lease.NewLocal(), sink, m)
	l := igniteRocket(t, reg, sink, "dup")
	clock.jump(time.Hour + time.Second)

	results := make([]string, 2)
	var wg sync.WaitGroup
	for i := range results {
		wg.Go(func() { results[i] = cell.WakeLaunch(reg, "dup", l) })
	}
	wg.Wait()
	slices.Sort(results)
	if !slices.Equal(results, []string{"duplicate", "launched"}) {
		t.Fatalf("two wakeups at once: %v, want one launched and one duplicate", results)
	}
	if got := cell.WakeLaunch(reg, "dup", l); got != "duplicate" {
		t.Fatalf("wakeup after the launch: %s, want duplicate", got)
	}
	poll.Until(t, 5*time.Second, "the launch to reach the sink", poll.Bool(func() bool { return len(launches(sink, "dup")) > 0 }))
	if got := launches(sink, "dup"); len(got) != 1 {
		t.Fatalf("launches %+v, want one", got)
	}
	assertLaunchCommands(t, repo, "dup", 1)
	assertNoTimer(t, repo, "dup")
	assertWakeups(t, m, map[string]float64{"launched": 1, "duplicate": 2})
}

// TestRocketEarlyWakeupRearms wakes a launch before its time: nothing
// launches, the timer is armed again for the launch time and launches then.
func TestRocketEarlyWakeupRearms(t *testing.T) { stores(t, testRocketEarlyWakeupRearms) }

func testRocketEarlyWakeupRearms(t *testing.T, open func(testing.TB) store.Repository) {
	repo := open(t)
	clock := &testClock{}
	sink, m := &recordSink{}, cell.NewMetrics(nil)
	reg := newTimerRegistry(t, repo, rocketConfig(time.Hour, clock), lease.NewLocal(), sink, m)
	l := igniteRocket(t, reg, sink, "early")
	// The timer armed at ignition waits an hour. Move the clock to five
	// seconds before the launch: only a timer re-armed from now can launch
	// it soon, and the checks below run before it does.
	clock.jump(time.Hour - 5*time.Second)

	if got := cell.WakeLaunch(reg, "early", l); got != "not_due" {
		t.Fatalf("early wakeup: %s, want not_due", got)
	}
	if got := launches(sink, "early"); len(got) != 0 {
		t.Fatalf("an early wakeup launched %+v", got)
	}
	assertLaunchCommands(t, repo, "early", 0)
	if got := dueTimers(t, repo, "early"); len(got) != 1 {
		t.Fatalf("timer rows after an early wakeup: %+v, want the launch's", got)
	}
	poll.Until(t, 30*time.Second, "the re-armed launch", poll.Bool(func() bool { return len(launches(sink, "early")) > 0 }))
	if got := launches(sink, "early"); len(got) != 1 || got[0].LaunchedAt < l.LaunchAt {
		t.Fatalf("launches %+v, want one at or after %d", got, l.LaunchAt)
	}
	assertLaunchCommands(t, repo, "early", 1)
	assertNoTimer(t, repo, "early")
	// The wakeup counts its result once its submit returned, which may be
	// after the sink saw the launch.
	awaitWakeups(t, m, "launched", 1)
	if w := wakeups(t, m, "not_due"); w < 1 {
		t.Fatalf("%v not_due wakeups, want at least 1", w)
	}
}

// TestRocketStaleAfterDailyReset ignites a rocket just before the business
// day ends and wakes it on the next day, after a command reset the room's
// economy: the launch is refused as stale and its timer row deleted.
func TestRocketStaleAfterDailyReset(t *testing.T) { stores(t, testRocketStaleAfterDailyReset) }

func testRocketStaleAfterDailyReset(t *testing.T, open func(testing.TB) store.Repository) {
	repo := open(t)
	clock := &testClock{}
	clock.set(time.Now().UTC().Truncate(24 * time.Hour).Add(48*time.Hour - 2*time.Minute)) // 23:58 tomorrow
	sink, m := &recordSink{}, cell.NewMetrics(nil)
	reg := newTimerRegistry(t, repo, rocketConfig(time.Hour, clock), lease.NewLocal(), sink, m)
	l := igniteRocket(t, reg, sink, "stale")
	clock.jump(time.Hour + time.Second) // past the launch time, on the next business day
	mustSubmit(t, reg, env("stale", "next-day", 12, &room.JoinRoom{}))

	if got := cell.WakeLaunch(reg, "stale", l); got != "stale" {
		t.Fatalf("wakeup after the daily reset: %s, want stale", got)
	}
	assertNoTimer(t, repo, "stale")
	assertLaunchCommands(t, repo, "stale", 0)
	if got := launches(sink, "stale"); len(got) != 0 {
		t.Fatalf("a stale rocket launched: %+v", got)
	}
	assertWakeups(t, m, map[string]float64{"stale": 1})
}

// TestRocketForeignOwnerIsNoop wakes a due launch on a node whose lease
// says another node holds the room: nothing happens and the row stays for
// the owner, whether the wakeup is direct or the scanner's.
func TestRocketForeignOwnerIsNoop(t *testing.T) { stores(t, testRocketForeignOwnerIsNoop) }

func testRocketForeignOwnerIsNoop(t *testing.T, open func(testing.TB) store.Repository) {
	repo := open(t)
	ownerSink := &recordSink{}
	owner := newTimerRegistry(t, repo, rocketConfig(time.Hour, &testClock{}), lease.NewLocal(), ownerSink, nil)
	l := igniteRocket(t, owner, ownerSink, "foreign")

	clock := &testClock{}
	clock.jump(time.Hour + time.Second)
	cfg := rocketConfig(time.Hour, clock)
	cfg.NodeID, cfg.TimerScanEvery = "other", 5*time.Millisecond
	sink, m := &recordSink{}, cell.NewMetrics(nil)
	other := newTimerRegistry(t, repo, cfg, heldLease{Lease: lease.NewLocal(), room: "foreign"}, sink, m)
	if got := cell.WakeLaunch(other, "foreign", l); got != "foreign" {
		t.Fatalf("wakeup on a node that does not hold the room: %s, want foreign", got)
	}
	poll.Until(t, 10*time.Second, "the scanner to find the row", poll.Bool(func() bool { return wakeups(t, m, "foreign") >= 3 }))
	if got := dueTimers(t, repo, "foreign"); len(got) != 1 {
		t.Fatalf("timer rows after foreign wakeups: %+v, want the launch's", got)
	}
	assertLaunchCommands(t, repo, "foreign", 0)
	if got := append(launches(sink, "foreign"), launches(ownerSink, "foreign")...); len(got) != 0 {
		t.Fatalf("launched by a node that does not hold the room: %+v", got)
	}
	if other.Loaded() != 0 {
		t.Fatalf("the other node loaded %d rooms", other.Loaded())
	}
	for _, r := range []string{"launched", "duplicate", "not_due", "stale", "not_pending", "error"} {
		if w := wakeups(t, m, r); w != 0 {
			t.Fatalf("%v %s wakeups on the other node", w, r)
		}
	}
}

// TestRocketLaunchSurvivesCrash commits an ignition on a node that then
// dies without a graceful stop (its storage cut: no final snapshot, no
// launch), and starts another node with the scanner: the launch happens
// once, late but not lost.
func TestRocketLaunchSurvivesCrash(t *testing.T) { stores(t, testRocketLaunchSurvivesCrash) }

func testRocketLaunchSurvivesCrash(t *testing.T, open func(testing.TB) store.Repository) {
	repo := open(t)
	crashed := &cutRepo{Repository: repo}
	first := &recordSink{}
	cfg := rocketConfig(time.Hour, &testClock{})
	cfg.NodeID = "crashed"
	dead := newTimerRegistry(t, crashed, cfg, lease.NewLocal(), first, nil)
	l := igniteRocket(t, dead, first, "crash")
	crashed.cut.Store(true) // the node is gone: nothing it does reaches the database
	if got := dueTimers(t, repo, "crash"); len(got) != 1 {
		t.Fatalf("timer rows after the ignition: %+v, want the launch's", got)
	}

	// The next node starts after the launch time, with its own lease (the
	// dead node's expired) and the scanner.
	clock := &testClock{}
	clock.jump(time.Hour + time.Second)
	cfg = rocketConfig(time.Hour, clock)
	cfg.NodeID, cfg.TimerScanEvery = "survivor", -1
	sink, m := &recordSink{}, cell.NewMetrics(nil)
	next := newTimerRegistry(t, repo, cfg, lease.NewLocal(), sink, m)
	runScanner(t, next)

	poll.Until(t, 10*time.Second, "the launch on the next node", poll.Bool(func() bool { return len(launches(sink, "crash")) > 0 }))
	poll.Until(t, 10*time.Second, "the timer row to go", poll.Bool(func() bool { return len(dueTimers(t, repo, "crash")) == 0 }))
	got := launches(sink, "crash")
	if len(got) != 1 || got[0].RocketID != l.RocketID || got[0].LaunchedAt < l.LaunchAt {
		t.Fatalf("launches %+v, want rocket %d once, at or after %d", got, l.RocketID, l.LaunchAt)
	}
	if got := launches(first, "crash"); len(got) != 0 {
		t.Fatalf("the crashed node launched %+v", got)
	}
	assertLaunchCommands(t, repo, "crash", 1)
	awaitWakeups(t, m, "launched", 1)
	// Wakeups after the launch find nothing to do.
	if got := cell.WakeLaunch(next, "crash", l); got != "duplicate" {
		t.Fatalf("wakeup after the launch: %s, want duplicate", got)
	}
	assertLaunchCommands(t, repo, "crash", 1)
}

// TestRocketRearmedOnLoad passivates a room with a launch pending (its
// final snapshot holds the launch, its timers stop) and loads it again after
// the launch time, with no scanner: the load arms the due launch, which
// fires at once.
func TestRocketRearmedOnLoad(t *testing.T) { stores(t, testRocketRearmedOnLoad) }

func testRocketRearmedOnLoad(t *testing.T, open func(testing.TB) store.Repository) {
	repo := open(t)
	clock := &testClock{}
	cfg := rocketConfig(time.Hour, clock)
	cfg.IdleTimeout = 20 * time.Millisecond
	sink, m := &recordSink{}, cell.NewMetrics(nil)
	reg := newTimerRegistry(t, repo, cfg, lease.NewLocal(), sink, m)
	l := igniteRocket(t, reg, sink, "idle-rk")
	poll.Until(t, 5*time.Second, "the room to passivate", poll.Bool(func() bool { return reg.Loaded() == 0 }))
	poll.Until(t, 5*time.Second, "the final snapshot", poll.Bool(func() bool {
		snap, found, err := repo.GetLatestSnapshot(context.Background(), "idle-rk")
		return err == nil && found && snap.RoomVersion == 5 // create, the switch to the configured rules, two joins, the gift
	}))

	clock.jump(time.Hour + time.Second)
	if _, err := reg.Snapshot(context.Background(), "idle-rk"); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 10*time.Second, "the launch after the load", poll.Bool(func() bool { return len(launches(sink, "idle-rk")) > 0 }))
	if got := launches(sink, "idle-rk"); len(got) != 1 || got[0].RocketID != l.RocketID {
		t.Fatalf("launches %+v, want rocket %d once", got, l.RocketID)
	}
	assertLaunchCommands(t, repo, "idle-rk", 1)
	assertNoTimer(t, repo, "idle-rk")
	awaitWakeups(t, m, "launched", 1)
}

// runScanner runs reg's timer scanner every 10 ms until the test ends.
func runScanner(t testing.TB, reg *cell.Registry) {
	ctx, cancel := context.WithCancel(context.Background())
	var scanner sync.WaitGroup
	scanner.Go(func() { reg.RunTimers(ctx, 10*time.Millisecond) })
	t.Cleanup(func() {
		cancel()
		scanner.Wait()
	})
}

// rocketConfig is a registry config whose rooms have one rocket level that
// a gift of 100 coins ignites, launching countdown later; gifts are paid by
// a wallet that never runs out. A nil clock is the real one. The scanner
// is off unless a test turns it on.
func rocketConfig(countdown time.Duration, clock *testClock) cell.Config {
	cfg := cell.Config{
		Rules:  &room.Rules{Location: time.UTC, RankSize: 10, RocketLevels: []room.RocketLevel{{Fuel: 100, Countdown: countdown}}},
		Wallet: &freeWallet{}, TimerScanEvery: -1,
	}
	if clock != nil {
		cfg.Clock = clock.Now
	}
	return cfg
}

func newTimerRegistry(t testing.TB, repo store.Repository, cfg cell.Config, l lease.Lease, sink cell.EventSink, m *cell.Metrics) *cell.Registry {
	t.Helper()
	reg := cell.New(cfg, repo, l, sink, m, quiet)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := reg.Close(ctx); err != nil {
			t.Errorf("close registry: %v", err)
		}
	})
	return reg
}

// igniteRocket creates the room and has user 10 send user 11
// a gift of 100 coins: rocket 1 ignites. It returns the launch to come.
func igniteRocket(t testing.TB, reg *cell.Registry, sink *recordSink, roomID string) room.LaunchRocket {
	t.Helper()
	createRoom(t, reg, roomID)
	return igniteRocketIn(t, reg, sink, roomID)
}

// igniteRocketIn is igniteRocket in a room that exists.
func igniteRocketIn(t testing.TB, reg *cell.Registry, sink *recordSink, roomID string) room.LaunchRocket {
	t.Helper()
	mustSubmit(t, reg, env(roomID, "join-10", 10, &room.JoinRoom{}))
	mustSubmit(t, reg, env(roomID, "join-11", 11, &room.JoinRoom{}))
	mustSubmit(t, reg, env(roomID, "gift-1", 10, &room.SendGift{
		ReceiverUserIDs: []int64{11}, GiftID: "rose", Count: 1,
		Outcome: room.GiftOutcome{Name: "rose", Price: 100, Kind: room.GiftNormal},
	}))
	var ignited []*room.RoomRocketIgnitedEvent
	poll.Until(t, 5*time.Second, "the ignition", poll.Bool(func() bool {
		ignited = eventsOf[*room.RoomRocketIgnitedEvent](sink, roomID, room.EventRoomRocketIgnited)
		return len(ignited) > 0
	}))
	if len(ignited) != 1 || ignited[0].RocketID != 1 {
		t.Fatalf("ignitions %+v, want rocket 1", ignited)
	}
	d := ignited[0]
	return room.LaunchRocket{RocketID: d.RocketID, Level: d.Level, LaunchAt: d.LaunchAt, Day: d.BusinessDay}
}

func eventsOf[T any](sink *recordSink, roomID string, typ room.EventType) []T {
	var out []T
	for _, c := range sink.all() {
		for _, ev := range c.Events {
			if c.RoomID == roomID && ev.Type == typ {
				out = append(out, ev.Data.(T))
			}
		}
	}
	return out
}

func launches(sink *recordSink, roomID string) []*room.RoomRocketLaunchedEvent {
	return eventsOf[*room.RoomRocketLaunchedEvent](sink, roomID, room.EventRoomRocketLaunched)
}

// assertLaunchCommands checks the room's log holds n LaunchRocket commands.
func assertLaunchCommands(t testing.TB, repo store.Repository, roomID string, n int) {
	t.Helper()
	recs, err := repo.ListCommandsAfter(context.Background(), roomID, 0)
	if err != nil {
		t.Fatal(err)
	}
	got := 0
	for _, r := range recs {
		if r.CommandType == string(room.CmdLaunchRocket) {
			got++
		}
	}
	if got != n {
		t.Fatalf("room %s logged %d LaunchRocket commands, want %d", roomID, got, n)
	}
}

// dueTimers lists the room's launch timer rows, due or not.
func dueTimers(t testing.TB, repo store.Repository, roomID string) []store.Timer {
	t.Helper()
	return timerRows(t, repo, roomID, cell.TimerKindRocketLaunch)
}

// timerRows lists the room's timer rows of kind, due or not.
func timerRows(t testing.TB, repo store.Repository, roomID, kind string) []store.Timer {
	t.Helper()
	all, err := repo.ListDueTimers(context.Background(), kind, time.Now().Add(1000*time.Hour), 10_000)
	if err != nil {
		t.Fatal(err)
	}
	var out []store.Timer
	for _, tm := range all {
		if tm.RoomID == roomID {
			out = append(out, tm)
		}
	}
	return out
}

func assertNoTimer(t testing.TB, repo store.Repository, roomID string) {
	t.Helper()
	if got := dueTimers(t, repo, roomID); len(got) != 0 {
		t.Fatalf("room %s still has launch timer rows %+v", roomID, got)
	}
}

func wakeups(t testing.TB, m *cell.Metrics, result string) float64 {
	t.Helper()
	var pb dto.Metric
	if err := m.RocketWakeups.WithLabelValues(result).Write(&pb); err != nil {
		t.Fatal(err)
	}
	return pb.GetCounter().GetValue()
}

// awaitWakeups waits until n wakeups with result are counted, and checks
// no more are. A wakeup counts its result once its submit returned, which
// may be after the sink saw the launch.
func awaitWakeups(t testing.TB, m *cell.Metrics, result string, n float64) {
	t.Helper()
	poll.Until(t, 10*time.Second, fmt.Sprintf("%v %s wakeups", n, result), poll.Bool(func() bool { return wakeups(t, m, result) >= n }))
	if got := wakeups(t, m, result); got != n {
		t.Fatalf("%v %s wakeups, want %v", got, result, n)
	}
}

// assertWakeups checks every wakeup counter, once those in want are
// counted: those not in want are zero.
func assertWakeups(t testing.TB, m *cell.Metrics, want map[string]float64) {
	t.Helper()
	for r, n := range want {
		awaitWakeups(t, m, r, n)
	}
	for _, r := range []string{"launched", "duplicate", "not_due", "stale", "not_pending", "foreign", "error"} {
		if got := wakeups(t, m, r); got != want[r] {
			t.Fatalf("%s wakeups = %v, want %v", r, got, want[r])
		}
	}
}

// testClock is the real clock moved by an offset the test sets.
// testClock is the wall clock, moved by jump and set. Late in the UTC day
// it starts ten hours back, so that the hour or so the tests jump never
// crosses midnight, where the rocket's (UTC) day ends.
type testClock struct{ off atomic.Int64 }

var clockShift = func() time.Duration {
	if time.Now().UTC().Hour() >= 20 {
		return -10 * time.Hour
	}
	return 0
}()

func (c *testClock) Now() time.Time       { return time.Now().Add(clockShift + time.Duration(c.off.Load())) }
func (c *testClock) jump(d time.Duration) { c.off.Add(int64(d)) }
func (c *testClock) set(at time.Time)     { c.off.Store(int64(time.Until(at) - clockShift)) }

// recordingRepo keeps every batch committed through it.
type recordingRepo struct {
	store.Repository
	mu      sync.Mutex
	batches []store.Batch
}

func (r *recordingRepo) CommitBatches(ctx context.Context, batches []store.Batch) ([]error, error) {
	results, err := r.Repository.CommitBatches(ctx, batches)
	if err == nil {
		r.mu.Lock()
		for i, b := range batches {
			if results[i] == nil {
				r.batches = append(r.batches, b)
			}
		}
		r.mu.Unlock()
	}
	return results, err
}

// batchOf returns the committed batch holding the command.
func (r *recordingRepo) batchOf(commandID string) store.Batch {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, b := range r.batches {
		for _, c := range b.Commands {
			if c.CommandID == commandID {
				return b
			}
		}
	}
	return store.Batch{}
}

// cutRepo fails every write once cut, as a node that died would never write again.
type cutRepo struct {
	store.Repository
	cut atomic.Bool
}

var errCut = errors.Join(store.ErrUnavailable, errors.New("the node crashed"))

func (r *cutRepo) CommitBatches(ctx context.Context, batches []store.Batch) ([]error, error) {
	if r.cut.Load() {
		return nil, errCut
	}
	return r.Repository.CommitBatches(ctx, batches)
}

func (r *cutRepo) StopRooms(ctx context.Context, stops []store.RoomStop) error {
	if r.cut.Load() {
		return errCut
	}
	return r.Repository.StopRooms(ctx, stops)
}

func (r *cutRepo) ClaimRoom(ctx context.Context, roomID, nodeID string) (store.Claim, error) {
	if r.cut.Load() {
		return store.Claim{}, errCut
	}
	return r.Repository.ClaimRoom(ctx, roomID, nodeID)
}

func (r *cutRepo) DeleteTimers(ctx context.Context, roomID string, ids []string, dueBy time.Time) error {
	if r.cut.Load() {
		return errCut
	}
	return r.Repository.DeleteTimers(ctx, roomID, ids, dueBy)
}

// heldLease says another node holds one room.
type heldLease struct {
	lease.Lease
	room string
}

func (h heldLease) Acquire(ctx context.Context, roomID string) (lease.Handle, error) {
	if roomID == h.room {
		return nil, lease.ErrHeld
	}
	return h.Lease.Acquire(ctx, roomID)
}

// freeWallet pays every gift: a charge is recorded once per key and never fails.
type freeWallet struct {
	mu      sync.Mutex
	charges map[string]wallet.Receipt
}

const freeBalance = 1 << 40

func (w *freeWallet) Charge(_ context.Context, charges []wallet.Charge) ([]wallet.Result, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.charges == nil {
		w.charges = make(map[string]wallet.Receipt)
	}
	out := make([]wallet.Result, len(charges))
	for i, c := range charges {
		r, ok := w.charges[c.Key]
		if !ok {
			r = wallet.Receipt{Charge: c, BalanceAfter: freeBalance, Status: wallet.StatusPending}
			w.charges[c.Key] = r
		}
		r.Replayed = ok
		out[i] = wallet.Result{Receipt: r}
	}
	return out, nil
}

func (w *freeWallet) Settle(context.Context, []string) error { return nil }

func (w *freeWallet) Refund(_ context.Context, key string) (wallet.Receipt, error) {
	return wallet.Receipt{}, wallet.ErrNotFound
}

func (w *freeWallet) Receipt(_ context.Context, key string) (wallet.Receipt, bool, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	r, ok := w.charges[key]
	return r, ok, nil
}

func (w *freeWallet) Pending(context.Context, time.Time, wallet.Cursor, int) ([]wallet.Receipt, error) {
	return nil, nil
}

func (w *freeWallet) Credit(context.Context, int64, int64, string) (int64, bool, error) {
	return freeBalance, false, nil
}

func (w *freeWallet) Balance(context.Context, int64) (int64, error) { return freeBalance, nil }
