package im

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"hyapp/room-service/room"
)

// TestPacingBoundsEverySecond: a caller taking every call the pacing allows,
// at every millisecond, gets at most BudgetShare of the app budget plus the
// tolerance's few calls in any one-second window.
func TestPacingBoundsEverySecond(t *testing.T) {
	for _, app := range []float64{1, 20, 200, 1000} {
		interval, tolerance := Pacing(app)
		g := gcra{interval: interval, tolerance: tolerance}
		start := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
		var grants []time.Time
		for ms := range 5000 {
			now := start.Add(time.Duration(ms) * time.Millisecond)
			n := g.available(now)
			g.take(now, n)
			for range n {
				grants = append(grants, now)
			}
		}
		bound := int(app*BudgetShare) + int(tolerance/interval) + 1
		for i := range grants {
			j := i
			for j < len(grants) && grants[j].Sub(grants[i]) < time.Second {
				j++
			}
			if j-i > bound || j-i > int(app)+1 {
				t.Fatalf("app %v: %d calls within one second, bound %d", app, j-i, bound)
			}
		}
		if got := float64(len(grants)) / 5; got < app*BudgetShare*0.95 {
			t.Fatalf("app %v: %.1f calls/s granted", app, got)
		}
	}
}

// TestGroupBudgetBoundsEverySecond: a room releasing every message its
// group's limiter allows, at every millisecond, puts at most its budget
// into any one-second window (Tencent counts 40 a second per group, and
// im_group_budget may be 40), and a busy room still gets most of its
// budget.
func TestGroupBudgetBoundsEverySecond(t *testing.T) {
	for _, budget := range []float64{1, 2, 5, 20, 33, 40} {
		lim := groupLimiter(budget)
		start := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
		var grants []time.Time
		for ms := range 5000 {
			now := start.Add(time.Duration(ms) * time.Millisecond)
			for lim.AllowN(now, 1) {
				grants = append(grants, now)
			}
		}
		for i := range grants {
			j := i
			for j < len(grants) && grants[j].Sub(grants[i]) < time.Second {
				j++
			}
			if j-i > int(budget) {
				t.Fatalf("budget %v: %d messages within one second", budget, j-i)
			}
		}
		if got := float64(len(grants)) / 5; budget >= 20 && got < budget*0.85 {
			t.Fatalf("budget %v: %.1f messages/s released", budget, got)
		}
	}
}

// TestTurnOrderKeptLongerWhenLong: a crowded lane's turn order is made
// again every rosterEvery while short, less often as it grows (so making
// it costs about the same per second), and never kept past rosterMax.
func TestTurnOrderKeptLongerWhenLong(t *testing.T) {
	if got := keepFor(crowdedRooms + 1); got != rosterEvery {
		t.Fatalf("an order of %d rooms is kept %v, want %v", crowdedRooms+1, got, rosterEvery)
	}
	prev := time.Duration(0)
	for _, n := range []int{rosterRooms, 2 * rosterRooms, 8 * rosterRooms, 1000 * rosterRooms} {
		got := keepFor(n)
		if got < prev || got > rosterMax {
			t.Fatalf("an order of %d rooms is kept %v (the shorter one before it %v, at most %v)", n, got, prev, rosterMax)
		}
		if perRoom := got / time.Duration(n); n >= rosterRooms && got < rosterMax && perRoom != rosterEvery/rosterRooms {
			t.Fatalf("an order of %d rooms is kept %v: not in proportion to its length", n, got)
		}
		prev = got
	}
	if keepFor(1000*rosterRooms) != rosterMax {
		t.Fatalf("a very long order is kept %v, want %v", keepFor(1000*rosterRooms), rosterMax)
	}
}

// unreachable is a shared budget that cannot be asked.
type unreachable struct{}

func (unreachable) Take(context.Context, int) (int, error) {
	return 0, errors.New("budget store unreachable")
}

// TestAFleetThatLosesTheSharedBudgetKeepsToTheAppBudget: while the shared
// budget cannot be asked, each of a fleet's n nodes spends 1/n of the app
// budget alone (a quarter while the fleet's size is not known), so the
// fleet together keeps to the app budget and, with the size known, spends
// nearly all of it that whole calls a second per node allow (see
// TestAFleetThatLosesTheSharedBudgetKeepsToItInEverySecond: 40 nodes get 4
// each, not 4.75).
func TestAFleetThatLosesTheSharedBudgetKeepsToTheAppBudget(t *testing.T) {
	const app = 200
	for _, nodes := range []int{0, 1, 2, 4, 10, 40} {
		cfg := Config{AppBudget: app, Calls: unreachable{}}
		if nodes > 0 {
			cfg.Nodes = func() int { return nodes }
		}
		l := New(cfg, &outage{}, Metrics{}, slog.New(slog.DiscardHandler))
		start := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
		granted := 0
		for ms := range 10_000 { // the dispatcher only: no room is pending
			granted += l.takeShared(context.Background(), start.Add(time.Duration(ms)*time.Millisecond), 1000)
		}
		l.Close()
		fleet := nodes
		if nodes == 0 { // not known: a quarter each
			fleet = unknownNodes
		}
		perSecond := float64(granted) / 10 * float64(fleet)
		if perSecond > app {
			t.Fatalf("%d nodes: the fleet spends %.1f calls/s alone, over the app budget %d", nodes, perSecond, app)
		}
		interval, tolerance := Pacing(app)
		whole := fleet * ((int(app*BudgetShare) + int(tolerance/interval) + 1) / fleet) // whole calls a second per node
		if perSecond < float64(whole)*0.95 {
			t.Fatalf("%d nodes: the fleet spends %.1f calls/s alone, well under the app budget %d", nodes, perSecond, app)
		}
	}
}

// TestAFleetThatLosesTheSharedBudgetKeepsToItInEverySecond: the nodes of a
// fleet lose Redis together, so their own spending starts in step. Tencent
// counts calls per second: in no one second may the fleet's calls, all
// together, pass what the shared budget grants in one at most, whatever
// the fleet's size (up to that many nodes: each makes a call at least).
func TestAFleetThatLosesTheSharedBudgetKeepsToItInEverySecond(t *testing.T) {
	const app = 200
	interval, tolerance := Pacing(app)
	bound := int(app*BudgetShare) + int(tolerance/interval) + 1 // the shared budget's (TestPacingBoundsEverySecond)
	for _, nodes := range []int{1, 2, 3, 4, 7, 10, 20, 30, 35, 40, 45, 60, 100} {
		start := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
		per := make([]int, 5_000) // calls granted in each millisecond, by the whole fleet
		for range nodes {
			l := New(Config{AppBudget: app, Calls: unreachable{}, Nodes: func() int { return nodes }}, &outage{}, Metrics{}, slog.New(slog.DiscardHandler))
			for ms := range per {
				per[ms] += l.takeShared(context.Background(), start.Add(time.Duration(ms)*time.Millisecond), 1000)
			}
			l.Close()
		}
		most, window := 0, 0
		for ms := range per {
			window += per[ms]
			if ms >= 1000 {
				window -= per[ms-1000]
			}
			most = max(most, window)
		}
		if most > bound {
			t.Errorf("%d nodes: the fleet alone makes %d calls in one second, over the %d the shared budget grants", nodes, most, bound)
		}
	}
}

// stuck is an IM service whose sends wait until the lane closes.
type stuck struct{}

func (stuck) Send(ctx context.Context, _ Message) error {
	<-ctx.Done()
	return ctx.Err()
}

// TestABusyRoomKeepsOneMessageOfItsBudgetForHigh: a room whose group has a
// burst of two (a budget of 20 or more) sends display events only while
// two messages of its budget are left, so a High event finds the last one;
// with a smaller budget (a burst of one) display events may take it.
func TestABusyRoomKeepsOneMessageOfItsBudgetForHigh(t *testing.T) {
	join := func(now time.Time) *item {
		return &item{typ: "RoomUserJoined", priority: room.PriorityNormal, env: &envelope{}, queued: now, merge: true}
	}
	for _, c := range []struct {
		budget float64
		spent  int
		rest   bool // display events may go
	}{{20, 0, true}, {20, 1, false}, {40, 2, true}, {40, 3, false}, {10, 0, true}} {
		l := New(Config{Budget: c.budget, Tick: time.Hour}, stuck{}, Metrics{}, slog.New(slog.DiscardHandler))
		now := time.Now()
		l.mu.Lock()
		q := l.queueLocked("r", "r", false)
		if c.spent > 0 && !q.limiter.AllowN(now, c.spent) {
			t.Fatalf("budget %v: %d messages not allowed", c.budget, c.spent)
		}
		l.enqueueLocked("r", q, join(now), false)
		if got := l.eligibleLocked(q, now); got != c.rest {
			t.Errorf("budget %v, %d of the burst spent: display events may go: %v, want %v", c.budget, c.spent, got, c.rest)
		}
		l.enqueueLocked("r", q, &item{typ: "RoomRocketIgnited", priority: room.PriorityHigh, env: &envelope{}, queued: now}, false)
		if !l.eligibleLocked(q, now) {
			t.Errorf("budget %v, %d of the burst spent: a High event may not go", c.budget, c.spent)
		}
		l.mu.Unlock()
		l.Close()
	}
}
