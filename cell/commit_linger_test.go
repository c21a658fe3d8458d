package cell_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"hyapp/room-service/cell"
	"hyapp/room-service/internal/poll"
	"hyapp/room-service/room"
)

// manyRooms creates rooms r0..r(n-1) and returns a registry over them whose
// commits pass the gate, with a group-commit linger of linger, its
// metrics, and a move of the group commit's clock, which stands still
// otherwise. Each test command goes to a room of its own, so a
// commit's command count is its room count.
func manyRooms(t *testing.T, n int, linger time.Duration) (*cell.Registry, *gatedRepo, *cell.Metrics, func(time.Duration)) {
	t.Helper()
	repo := openRepo(t)
	setup := newRegistry(t, repo, cell.Config{}, nil)
	for i := range n {
		createRoom(t, setup, fmt.Sprintf("r%d", i))
	}
	if err := setup.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	gated := &gatedRepo{Repository: repo, sizes: make(chan int, 256), release: make(chan struct{})}
	m := cell.NewMetrics(nil)
	reg := newRegistryWith(t, gated, cell.Config{CommitLinger: linger}, nil, m)
	var now atomic.Int64
	now.Store(time.Now().UnixNano())
	cell.SetCommitClock(reg, func() time.Time { return time.Unix(0, now.Load()) })
	t.Cleanup(gated.open) // first: a failed test must not leave a commit held
	// Load every room now: a room's first command would otherwise reach
	// the group commit only after its recovery.
	for i := range n {
		if _, err := reg.Snapshot(context.Background(), fmt.Sprintf("r%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	return reg, gated, m, func(d time.Duration) { now.Add(int64(d)) }
}

// submitRooms sends one change (a new command) to each of rooms
// r(from)..r(to-1), each in its own goroutine, and returns a wait for
// their answers.
func submitRooms(t *testing.T, reg *cell.Registry, from, to int) func() {
	t.Helper()
	call := submitted.Add(1)
	done := make(chan struct{}, to-from)
	for i := from; i < to; i++ {
		go func() {
			defer func() { done <- struct{}{} }()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			id := fmt.Sprintf("r%d", i)
			cmd := fmt.Sprintf("bg%d", call)
			if _, err := reg.Submit(ctx, env(id, cmd, 1, &room.ChangeBackground{BackgroundURL: cmd})); err != nil {
				t.Errorf("%s: %v", id, err)
			}
		}()
	}
	return func() {
		for range to - from {
			<-done
		}
	}
}

var submitted atomic.Int64

// commitQueued waits until n room batches wait for the group commit.
func commitQueued(t *testing.T, reg *cell.Registry, n int) {
	t.Helper()
	poll.Until(t, 10*time.Second, fmt.Sprintf("%d rooms queued for the group commit", n),
		poll.Bool(func() bool { return cell.CommitQueued(reg) == n }))
}

// queueThenCommit sends one change to each of rooms r(from)..r(to-1) while
// a commit is held, lets that commit go, expects the next one to carry
// exactly those rooms, and returns a wait for their answers.
func queueThenCommit(t *testing.T, reg *cell.Registry, gated *gatedRepo, from, to int) func() {
	t.Helper()
	wait := submitRooms(t, reg, from, to)
	commitQueued(t, reg, to-from)
	gated.release <- struct{}{}
	if n := nextCommit(t, gated); n != to-from {
		t.Fatalf("commit of rooms r%d..r%d: %d rooms, want the %d queued", from, to-1, n, to-from)
	}
	return wait
}

// TestManyRoomsCommitTogether: once a transaction carried four rooms with
// more queued behind it, the group commit waits for more rooms instead of
// committing the one it found, even when that room came just under ten
// lingers after the transaction ended, and the 64th queued room ends the wait at once (the
// linger here is an hour).
func TestManyRoomsCommitTogether(t *testing.T) {
	reg, gated, m, advance := manyRooms(t, 69, time.Hour)
	first := submitRooms(t, reg, 0, 1)
	if n := nextCommit(t, gated); n != 1 {
		t.Fatalf("first commit: %d rooms, want 1", n)
	}
	second := queueThenCommit(t, reg, gated, 1, 5) // no wait after a transaction of one room
	if got := testutil.ToFloat64(m.CommitLingers); got != 0 {
		t.Fatalf("%v lingers after a transaction of one room; want 0", got)
	}
	advance(10 * time.Hour) // a long transaction: idleness counts from its end
	gated.release <- struct{}{}
	second()
	advance(10*time.Hour - time.Nanosecond)
	third := submitRooms(t, reg, 5, 6)
	lingersWithoutCommit(t, gated, m.CommitLingers)
	rest := submitRooms(t, reg, 6, 69)
	if n := nextCommit(t, gated); n != 64 {
		t.Fatalf("third commit: %d rooms, want the 64 queued by then", n)
	}
	gated.open()
	first()
	third()
	rest()
}

// TestFewRoomsCommitAtOnce: after a transaction of fewer than four rooms,
// and after one of four rooms that ended ten lingers or more before the
// next room came, the group commit commits what it finds at once (the
// linger here is an hour: a wait would time the calls out).
func TestFewRoomsCommitAtOnce(t *testing.T) {
	reg, gated, m, advance := manyRooms(t, 9, time.Hour)
	first := submitRooms(t, reg, 0, 1)
	if n := nextCommit(t, gated); n != 1 {
		t.Fatalf("first commit: %d rooms, want 1", n)
	}
	three := queueThenCommit(t, reg, gated, 1, 4)
	lone := queueThenCommit(t, reg, gated, 4, 5) // after a transaction of three
	four := queueThenCommit(t, reg, gated, 5, 9)
	gated.release <- struct{}{}
	first()
	three()
	lone()
	four()
	// The next room comes ten lingers after the transaction of four: the
	// node is not busy, and the room is not held for company.
	advance(10 * time.Hour)
	later := submitRooms(t, reg, 0, 1)
	if n := nextCommit(t, gated); n != 1 {
		t.Fatalf("a lone room's commit: %d rooms, want 1", n)
	}
	gated.open()
	later()
	if got := testutil.ToFloat64(m.CommitLingers); got != 0 {
		t.Fatalf("%v lingers; want 0", got)
	}
}

// TestClosingEndsACommitLinger: closing the node while the group commit
// waits an hour for more rooms commits the room it holds and returns.
func TestClosingEndsACommitLinger(t *testing.T) {
	reg, gated, m, _ := manyRooms(t, 6, time.Hour)
	first := submitRooms(t, reg, 0, 1)
	nextCommit(t, gated)
	second := queueThenCommit(t, reg, gated, 1, 5)
	third := submitRooms(t, reg, 5, 6)
	commitQueued(t, reg, 1)
	gated.release <- struct{}{}
	closeWhileLingering(t, reg, gated, m.CommitLingers, first, second, third) // third: the held room
	if n := nextCommit(t, gated); n != 1 {
		t.Fatalf("the held commit: %d rooms, want 1", n)
	}
}

// TestACommitLingerEnds: a group commit that lingers for company and gets
// none commits the room it holds once the linger (here 5 ms) is over.
func TestACommitLingerEnds(t *testing.T) {
	reg, gated, m, _ := manyRooms(t, 5, 5*time.Millisecond)
	first := submitRooms(t, reg, 0, 1)
	nextCommit(t, gated)
	second := queueThenCommit(t, reg, gated, 1, 5)
	third := submitRooms(t, reg, 0, 1)
	commitQueued(t, reg, 1)
	gated.open()
	if n := nextCommit(t, gated); n != 1 {
		t.Fatalf("the lingering commit: %d rooms, want 1", n)
	}
	first()
	second()
	third()
	if got := testutil.ToFloat64(m.CommitLingers); got != 1 {
		t.Fatalf("%v lingers; want 1", got)
	}
}

// TestOnlyALoneCommitWorkerLingers: with several group-commit workers, as
// on MySQL, none lingers; a single one (SQLite's) does.
func TestOnlyALoneCommitWorkerLingers(t *testing.T) {
	for _, c := range []struct {
		workers int
		want    time.Duration
	}{{1, time.Millisecond}, {2, 0}, {4, 0}} {
		reg := newRegistry(t, openRepo(t), cell.Config{CommitWorkers: c.workers, CommitLinger: time.Millisecond}, nil)
		if got := cell.CommitLingerOf(reg); got != c.want {
			t.Errorf("%d workers linger %v; want %v", c.workers, got, c.want)
		}
	}
}
