package cell_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"hyapp/room-service/cell"
	"hyapp/room-service/internal/poll"
	"hyapp/room-service/room"
	"hyapp/room-service/store"
)

// gatedRepo tells each CommitBatches call's command count on sizes and
// holds it until a token arrives on release (or release is closed).
type gatedRepo struct {
	store.Repository
	sizes   chan int
	release chan struct{}
	once    sync.Once
}

// open lets every commit through from now on.
func (g *gatedRepo) open() { g.once.Do(func() { close(g.release) }) }

func (g *gatedRepo) CommitBatches(ctx context.Context, batches []store.Batch) ([]error, error) {
	n := 0
	for _, b := range batches {
		n += len(b.Commands)
	}
	g.sizes <- n
	<-g.release
	return g.Repository.CommitBatches(ctx, batches)
}

// lingerRoom creates roomID and returns a registry over it whose commits
// pass the gate, with a linger far longer than any test waits, and its
// metrics.
func lingerRoom(t *testing.T, roomID string) (*cell.Registry, *gatedRepo, *cell.Metrics) {
	t.Helper()
	repo := openRepo(t)
	setup := newRegistry(t, repo, cell.Config{}, nil)
	createRoom(t, setup, roomID)
	if err := setup.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	gated := &gatedRepo{Repository: repo, sizes: make(chan int, 256), release: make(chan struct{})}
	m := cell.NewMetrics(nil)
	reg := newRegistryWith(t, gated, cell.Config{Linger: time.Hour}, nil, m)
	t.Cleanup(gated.open) // first: a failed test must not leave a commit held
	return reg, gated, m
}

// submitAll sends changes id0..id(n-1) to roomID, each in its own
// goroutine, and returns a wait for their answers.
func submitAll(t *testing.T, reg *cell.Registry, roomID, id string, n int) func() {
	t.Helper()
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if _, err := reg.Submit(ctx, env(roomID, fmt.Sprintf("%s%d", id, i), 1, &room.ChangeBackground{BackgroundURL: fmt.Sprintf("%s%d", id, i)})); err != nil {
				t.Errorf("%s%d: %v", id, i, err)
			}
		}()
	}
	return wg.Wait
}

// nextCommit returns the command count of the next commit to reach the gate.
func nextCommit(t *testing.T, g *gatedRepo) int {
	t.Helper()
	select {
	case n := <-g.sizes:
		return n
	case <-time.After(10 * time.Second):
		t.Fatal("no commit reached the store")
		return 0
	}
}

// TestABusyRoomWaitsForMoreCommands: a room whose last batch held four
// commands and that finds one queued when its commit ends waits for more
// instead of committing the one, and the 32nd queued command ends the wait
// at once (the linger here is an hour).
func TestABusyRoomWaitsForMoreCommands(t *testing.T) {
	reg, gated, m := lingerRoom(t, "busy")
	first := submitAll(t, reg, "busy", "a", 1)
	if n := nextCommit(t, gated); n != 1 {
		t.Fatalf("first commit: %d commands, want 1", n)
	}
	second := submitAll(t, reg, "busy", "b", 4)
	poll.Until(t, 10*time.Second, "four queued commands", poll.Bool(func() bool { return cell.Queued(reg, "busy") == 4 }))
	gated.release <- struct{}{}
	if n := nextCommit(t, gated); n != 4 {
		t.Fatalf("second commit: %d commands, want the 4 queued", n)
	}
	third := submitAll(t, reg, "busy", "c", 1)
	poll.Until(t, 10*time.Second, "one queued command", poll.Bool(func() bool { return cell.Queued(reg, "busy") == 1 }))
	gated.release <- struct{}{}
	lingersWithoutCommit(t, gated, m.Lingers)
	rest := submitAll(t, reg, "busy", "d", 31)
	if n := nextCommit(t, gated); n != 32 {
		t.Fatalf("third commit: %d commands, want the 32 queued by then", n)
	}
	gated.open()
	first()
	second()
	third()
	rest()
}

// TestAQuietRoomNeverWaits: a room taking one command at a time, and a
// room whose busy batch left nothing queued, commit at once (the linger
// here is an hour: a wait would time the calls out).
func TestAQuietRoomNeverWaits(t *testing.T) {
	reg, gated, m := lingerRoom(t, "quiet")
	gated.open()
	for i := range 3 {
		submitAll(t, reg, "quiet", fmt.Sprintf("one%d-", i), 1)()
		if n := nextCommit(t, gated); n != 1 {
			t.Fatalf("commit %d: %d commands, want 1", i, n)
		}
	}
	// A batch of four that leaves nothing behind: the next command, alone,
	// is not held for company.
	reg2, gated2, m2 := lingerRoom(t, "burst")
	first := submitAll(t, reg2, "burst", "a", 1)
	nextCommit(t, gated2)
	burst := submitAll(t, reg2, "burst", "b", 4)
	poll.Until(t, 10*time.Second, "four queued commands", poll.Bool(func() bool { return cell.Queued(reg2, "burst") == 4 }))
	gated2.open()
	if n := nextCommit(t, gated2); n != 4 {
		t.Fatalf("burst commit: %d commands, want 4", n)
	}
	first()
	burst()
	// The answers go out before the room looks at its mailbox again: the
	// next command is sent once the room has found it empty.
	poll.Until(t, 10*time.Second, "the room to wait for its mailbox", poll.Bool(func() bool { return testutil.ToFloat64(m2.WorkingCells) == 0 }))
	submitAll(t, reg2, "burst", "alone", 1)()
	if n := nextCommit(t, gated2); n != 1 {
		t.Fatalf("commit after the burst: %d commands, want 1", n)
	}
	if l, l2 := testutil.ToFloat64(m.Lingers), testutil.ToFloat64(m2.Lingers); l != 0 || l2 != 0 {
		t.Fatalf("lingers %v and %v, want none", l, l2)
	}
}

// TestClosingEndsALinger: a registry closed while its room lingers (here
// for an hour) commits what the room holds and closes, without waiting
// the linger out.
func TestClosingEndsALinger(t *testing.T) {
	reg, gated, m := lingerRoom(t, "closing")
	first := submitAll(t, reg, "closing", "a", 1)
	nextCommit(t, gated)
	second := submitAll(t, reg, "closing", "b", 4)
	poll.Until(t, 10*time.Second, "four queued commands", poll.Bool(func() bool { return cell.Queued(reg, "closing") == 4 }))
	gated.release <- struct{}{}
	nextCommit(t, gated)
	third := submitAll(t, reg, "closing", "c", 1)
	poll.Until(t, 10*time.Second, "one queued command", poll.Bool(func() bool { return cell.Queued(reg, "closing") == 1 }))
	gated.release <- struct{}{}
	closeWhileLingering(t, reg, gated, m.Lingers, first, second, third) // third: the lingering command
}

// lingersWithoutCommit waits until lingers counts one wait and fails if a
// commit reached the store meanwhile.
func lingersWithoutCommit(t *testing.T, gated *gatedRepo, lingers prometheus.Counter) {
	t.Helper()
	poll.Until(t, 10*time.Second, "a linger", poll.Bool(func() bool { return testutil.ToFloat64(lingers) == 1 }))
	select {
	case n := <-gated.sizes:
		t.Fatalf("a commit of %d commands while lingering", n)
	default:
	}
}

// closeWhileLingering waits until lingers counts one wait, lets every
// commit through, closes reg and then waits for the answers: each submit,
// the held one too, must have committed without error.
func closeWhileLingering(t *testing.T, reg *cell.Registry, gated *gatedRepo, lingers prometheus.Counter, answers ...func()) {
	t.Helper()
	poll.Until(t, 10*time.Second, "a linger", poll.Bool(func() bool { return testutil.ToFloat64(lingers) == 1 }))
	gated.open()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	closed := make(chan error, 1)
	go func() { closed <- reg.Close(ctx) }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatalf("close while lingering: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("close while lingering has not returned")
	}
	for _, wait := range answers {
		wait()
	}
}
