package cell_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"hyapp/room-service/cell"
	"hyapp/room-service/internal/poll"
	"hyapp/room-service/room"
	"hyapp/room-service/store"
)

func TestSeatRaceExactlyOneWins(t *testing.T) { stores(t, testSeatRaceExactlyOneWins) }

func testSeatRaceExactlyOneWins(t *testing.T, open func(testing.TB) store.Repository) {
	reg := newRegistry(t, open(t), cell.Config{}, nil)
	createRoom(t, reg, "race")
	const users = 40
	for u := int64(10); u < 10+users; u++ {
		mustSubmit(t, reg, env("race", fmt.Sprintf("join-%d", u), u, &room.JoinRoom{}))
	}
	var wg sync.WaitGroup
	errs := make([]error, users)
	for i := range users {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = reg.Submit(context.Background(), env("race", fmt.Sprintf("take-%d", i), int64(10+i), &room.TakeMic{SeatIndex: 3}))
		}()
	}
	wg.Wait()
	winner := int64(-1)
	for i, err := range errs {
		switch {
		case err == nil:
			if winner != -1 {
				t.Fatalf("users %d and %d both took seat 3", winner, 10+i)
			}
			winner = int64(10 + i)
		case !errors.Is(err, room.ErrSeatOccupied):
			t.Fatalf("user %d: got %v, want seat_occupied", 10+i, err)
		}
	}
	snap, err := reg.Snapshot(context.Background(), "race")
	if err != nil {
		t.Fatal(err)
	}
	if winner == -1 || snap.GetSeats()[3].GetUserId() != winner {
		t.Fatalf("seat 3 holds %d, the winner was %d", snap.GetSeats()[3].GetUserId(), winner)
	}
}

func TestIdempotentRetries(t *testing.T) { stores(t, testIdempotentRetries) }

func testIdempotentRetries(t *testing.T, open func(testing.TB) store.Repository) {
	repo := open(t)
	reg := newRegistry(t, repo, cell.Config{RecentIDs: 1}, nil)
	createRoom(t, reg, "idem")
	join := env("idem", "join-7", 7, &room.JoinRoom{Nickname: "seven"})
	first := mustSubmit(t, reg, join)
	take := mustSubmit(t, reg, env("idem", "take-7", 7, &room.TakeMic{SeatIndex: 2}))

	// The same request again: the original answer, nothing applied twice.
	again := mustSubmit(t, reg, env("idem", "join-7", 7, &room.JoinRoom{Nickname: "seven"}))
	if !again.Duplicate || again.RoomVersion != first.RoomVersion {
		t.Fatalf("retry: got %+v, want duplicate at %d", again, first.RoomVersion)
	}
	// The same id with another request is a conflict.
	if _, err := reg.Submit(context.Background(), env("idem", "join-7", 7, &room.JoinRoom{Nickname: "other"})); !errors.Is(err, room.ErrCommandIDConflict) {
		t.Fatalf("changed request: got %v, want command_id_conflict", err)
	}
	// Two copies in flight at once: one applies, the other is its duplicate.
	var wg sync.WaitGroup
	res := make([]cell.Result, 2)
	for i := range res {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res[i] = mustSubmit(t, reg, env("idem", "bg-1", 1, &room.ChangeBackground{BackgroundURL: "b1"}))
		}()
	}
	wg.Wait()
	if res[0].RoomVersion != res[1].RoomVersion || res[0].Duplicate == res[1].Duplicate {
		t.Fatalf("concurrent copies: %+v", res)
	}
	head := res[0].RoomVersion

	// After a restart, with the recent ids gone, the log answers: a retry that
	// the rules would refuse (take-7: already on mic) and one they would apply
	// again (join-7: a rejoin) are both recognised.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := reg.Close(ctx); err != nil {
		t.Fatal(err)
	}
	reg2 := newRegistry(t, repo, cell.Config{RecentIDs: 1}, nil)
	mustSubmit(t, reg2, env("idem", "noise", 1, &room.SetChatEnabled{Enabled: false})) // evicts the replayed ids
	head++
	for _, tc := range []struct {
		e    *room.Envelope
		want int64
	}{
		{env("idem", "take-7", 7, &room.TakeMic{SeatIndex: 2}), take.RoomVersion},
		{env("idem", "join-7", 7, &room.JoinRoom{Nickname: "seven"}), first.RoomVersion},
	} {
		got := mustSubmit(t, reg2, tc.e)
		if !got.Duplicate || got.RoomVersion != tc.want {
			t.Fatalf("%s after restart: got %+v, want duplicate at %d", tc.e.CommandID, got, tc.want)
		}
	}
	if _, err := reg2.Submit(context.Background(), env("idem", "join-7", 8, &room.JoinRoom{})); !errors.Is(err, room.ErrCommandIDConflict) {
		t.Fatalf("other operator, same id after restart: got %v", err)
	}
	snap, err := reg2.Snapshot(context.Background(), "idem")
	if err != nil {
		t.Fatal(err)
	}
	if snap.GetRoomVersion() != head {
		t.Fatalf("retries moved the room to version %d, want %d", snap.GetRoomVersion(), head)
	}
	checkLog(t, repo, "idem", head)
}

// reloads counts the reads a room's reload starts with, and the log lookups.
type reloads struct {
	store.Repository
	metas, lookups atomic.Int64
}

func (r *reloads) GetRoomMeta(ctx context.Context, roomID string) (store.RoomMeta, bool, error) {
	r.metas.Add(1)
	return r.Repository.GetRoomMeta(ctx, roomID)
}

func (r *reloads) GetCommands(ctx context.Context, roomID string, ids []string) (map[string]store.CommandRecord, error) {
	r.lookups.Add(1)
	return r.Repository.GetCommands(ctx, roomID, ids)
}

func TestALateRetryIsAnsweredWithoutAReload(t *testing.T) {
	stores(t, testALateRetryIsAnsweredWithoutAReload)
}

// testALateRetryIsAnsweredWithoutAReload: a retry whose answer the cell no
// longer keeps (many commands came after it) is answered from one read of
// its log row; it does not reach the log's unique key and reload the room.
func testALateRetryIsAnsweredWithoutAReload(t *testing.T, open func(testing.TB) store.Repository) {
	repo := &reloads{Repository: open(t)}
	reg := newRegistry(t, repo, cell.Config{RecentIDs: 2}, nil)
	createRoom(t, reg, "late")
	first := mustSubmit(t, reg, env("late", "join-0", 100, &room.JoinRoom{Nickname: "first"}))
	for i := range 20 {
		mustSubmit(t, reg, env("late", fmt.Sprint("join-", i+1), int64(101+i), &room.JoinRoom{}))
	}
	metas, lookups := repo.metas.Load(), repo.lookups.Load()
	again := mustSubmit(t, reg, env("late", "join-0", 100, &room.JoinRoom{Nickname: "first"}))
	if !again.Duplicate || again.RoomVersion != first.RoomVersion {
		t.Fatalf("late retry: got %+v, want duplicate at %d", again, first.RoomVersion)
	}
	if n := repo.metas.Load() - metas; n != 0 {
		t.Fatalf("the late retry reloaded the room (%d reads of its row)", n)
	}
	if n := repo.lookups.Load() - lookups; n != 1 {
		t.Fatalf("%d log lookups for the late retry, want 1", n)
	}
	if _, err := reg.Submit(context.Background(), env("late", "join-0", 100, &room.JoinRoom{Nickname: "changed"})); !errors.Is(err, room.ErrCommandIDConflict) {
		t.Fatalf("the same late id with another request: got %v, want command_id_conflict", err)
	}
	checkLog(t, repo, "late", first.RoomVersion+20)
}

// checkLog asserts the room's log is gap-free from 1 to head with unique
// ids, each row decided under this build's rules revision.
func checkLog(t *testing.T, repo store.Repository, roomID string, head int64) {
	t.Helper()
	recs, err := repo.ListCommandsAfter(context.Background(), roomID, 0)
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]bool{}
	for i, r := range recs {
		if r.RoomVersion != int64(i+1) {
			t.Fatalf("log of %s: row %d has version %d", roomID, i, r.RoomVersion)
		}
		if ids[r.CommandID] {
			t.Fatalf("log of %s: command %s twice", roomID, r.CommandID)
		}
		ids[r.CommandID] = true
		env, err := room.DecodeCommand(roomID, r.CommandID, room.CommandType(r.CommandType), r.Payload)
		if err != nil || env.Rev != room.Rev {
			t.Fatalf("log of %s: row %d decodes to %+v, %v; want rules revision %d", roomID, r.RoomVersion, env, err, room.Rev)
		}
	}
	if int64(len(recs)) != head {
		t.Fatalf("log of %s has %d rows, want %d", roomID, len(recs), head)
	}
}

// blockingRepo holds every CommitBatches call until release is closed.
type blockingRepo struct {
	store.Repository
	entered chan struct{}
	release chan struct{}
	once    sync.Once
}

func (b *blockingRepo) CommitBatches(ctx context.Context, batches []store.Batch) ([]error, error) {
	b.once.Do(func() { close(b.entered) })
	<-b.release
	return b.Repository.CommitBatches(ctx, batches)
}

func TestFullMailboxAnswersAtOnce(t *testing.T) {
	repo := openRepo(t)
	setup := newRegistry(t, repo, cell.Config{}, nil)
	createRoom(t, setup, "busy")
	if err := setup.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	blocked := &blockingRepo{Repository: repo, entered: make(chan struct{}), release: make(chan struct{})}
	reg := newRegistry(t, blocked, cell.Config{MailboxSize: 2}, nil)
	release := sync.OnceFunc(func() { close(blocked.release) })
	defer release() // a failed test must not leave the commit held
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		mustSubmit(t, reg, env("busy", "first", 1, &room.ChangeBackground{BackgroundURL: "x"}))
	}()
	<-blocked.entered // the cell is now stuck in its commit
	const n = 10
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := reg.Submit(context.Background(), env("busy", fmt.Sprintf("c%d", i), 1, &room.ChangeBackground{BackgroundURL: fmt.Sprint(i)}))
			errs <- err
		}()
	}
	full := 0
	for range n - 2 { // exactly two fit the mailbox; the rest must come back without waiting for the commit
		if err := <-errs; errors.Is(err, room.ErrMailboxFull) {
			full++
		} else {
			t.Fatalf("while the mailbox is full: got %v, want mailbox_full", err)
		}
	}
	release()
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("queued command after release: %v", err)
		}
	}
	if full != n-2 {
		t.Fatalf("%d mailbox_full answers, want %d", full, n-2)
	}
}

func TestPanicInCellIsIsolated(t *testing.T) {
	repo := openRepo(t)
	sink := &recordSink{panic: "boom"}
	reg := newRegistry(t, repo, cell.Config{}, sink)
	createRoom(t, reg, "p1")
	createRoom(t, reg, "p2")
	// The panic strikes after the commit, while the cell hands events over.
	res := mustSubmit(t, reg, env("p1", "boom", 1, &room.ChangeBackground{BackgroundURL: "x"}))
	poll.Until(t, 5*time.Second, "the panicked cell to unload", poll.Bool(func() bool { return reg.Loaded() == 1 }))
	// The room rebuilds from storage and goes on; the other room never noticed.
	next := mustSubmit(t, reg, env("p1", "after", 1, &room.SetChatEnabled{Enabled: false}))
	if next.RoomVersion != res.RoomVersion+1 {
		t.Fatalf("after the panic: version %d, want %d", next.RoomVersion, res.RoomVersion+1)
	}
	snap, err := reg.Snapshot(context.Background(), "p1")
	if err != nil {
		t.Fatal(err)
	}
	if snap.GetProfile().GetBackgroundUrl() != "x" || snap.GetProfile().GetChatEnabled() {
		t.Fatalf("rebuilt state lost a committed command: %v", snap.GetProfile())
	}
	mustSubmit(t, reg, env("p2", "fine", 1, &room.SetChatEnabled{Enabled: false}))
}

func TestIdleRoomPassivatesWithFinalSnapshot(t *testing.T) {
	repo := openRepo(t)
	reg := newRegistry(t, repo, cell.Config{IdleTimeout: 20 * time.Millisecond, SnapshotEvery: 1000}, nil)
	createRoom(t, reg, "idle")
	var head int64
	for i := range 5 {
		head = mustSubmit(t, reg, env("idle", fmt.Sprintf("j%d", i), int64(10+i), &room.JoinRoom{})).RoomVersion
	}
	poll.Until(t, 5*time.Second, "the idle room to unload", poll.Bool(func() bool { return reg.Loaded() == 0 }))
	// Unloading stores a final snapshot at the head.
	poll.Until(t, 5*time.Second, "the final snapshot", poll.Bool(func() bool {
		snap, found, err := repo.GetLatestSnapshot(context.Background(), "idle")
		return err == nil && found && snap.RoomVersion == head
	}))
	meta, _, err := repo.GetRoomMeta(context.Background(), "idle")
	if err != nil {
		t.Fatal(err)
	}
	rec, err := cell.Recover(context.Background(), repo, meta)
	if err != nil {
		t.Fatal(err)
	}
	if len(rec.Replayed) != 0 || rec.State.Version != head {
		t.Fatalf("reload after passivation replays %d commands to version %d", len(rec.Replayed), rec.State.Version)
	}
	if got := mustSubmit(t, reg, env("idle", "back", 10, &room.LeaveRoom{})).RoomVersion; got != head+1 {
		t.Fatalf("command after reload at version %d, want %d", got, head+1)
	}
}

func TestShutdownDrainsAndSnapshotsEveryRoom(t *testing.T) {
	repo := openRepo(t)
	reg := newRegistry(t, repo, cell.Config{SnapshotEvery: 1000}, nil)
	heads := map[string]int64{}
	for r := range 5 {
		id := fmt.Sprintf("s%d", r)
		createRoom(t, reg, id)
		heads[id] = mustSubmit(t, reg, env(id, "j", 9, &room.JoinRoom{})).RoomVersion
	}
	if err := reg.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Submit(context.Background(), env("s0", "late", 9, &room.LeaveRoom{})); !errors.Is(err, room.ErrShutdown) {
		t.Fatalf("after close: got %v, want shutting_down", err)
	}
	for id, head := range heads {
		snap, found, err := repo.GetLatestSnapshot(context.Background(), id)
		if err != nil || !found || snap.RoomVersion != head {
			t.Fatalf("room %s: final snapshot found=%v version=%d err=%v, want %d", id, found, snap.RoomVersion, err, head)
		}
	}
}

func TestUnknownRoomAndBadInputChangeNothing(t *testing.T) {
	repo := openRepo(t)
	reg := newRegistry(t, repo, cell.Config{}, nil)
	if _, err := reg.Submit(context.Background(), env("ghost", "c", 1, &room.JoinRoom{})); !errors.Is(err, room.ErrRoomNotFound) {
		t.Fatalf("unknown room: got %v", err)
	}
	if _, err := reg.Snapshot(context.Background(), "ghost"); !errors.Is(err, room.ErrRoomNotFound) {
		t.Fatalf("unknown room snapshot: got %v", err)
	}
	if _, err := reg.Submit(context.Background(), env("r", "", 1, &room.JoinRoom{})); !errors.Is(err, room.ErrMissingCommandID) {
		t.Fatalf("missing command id: got %v", err)
	}
	if rooms, err := repo.ListRooms(context.Background(), "", 10); err != nil || len(rooms) != 0 {
		t.Fatalf("bad input created rooms: %v %v", rooms, err)
	}
	createRoom(t, reg, "closed")
	mustSubmit(t, reg, env("closed", "close", 1, &room.CloseRoom{}))
	if _, err := reg.Submit(context.Background(), env("closed", "j", 5, &room.JoinRoom{})); !errors.Is(err, room.ErrRoomClosed) {
		t.Fatalf("closed room: got %v", err)
	}
	// A retry of the committed CloseRoom is still answered.
	if res := mustSubmit(t, reg, env("closed", "close", 1, &room.CloseRoom{})); !res.Duplicate {
		t.Fatalf("retry of CloseRoom: %+v", res)
	}
	// CreateRoom on an existing room is refused, its own retry answered.
	if _, err := reg.Submit(context.Background(), env("closed", "create2", 1, &room.CreateRoom{OwnerUserID: 1, SeatCount: 8})); !errors.Is(err, room.ErrRoomClosed) {
		t.Fatalf("create over a closed room: got %v", err)
	}
	createRoom(t, reg, "open")
	if _, err := reg.Submit(context.Background(), env("open", "create2", 1, &room.CreateRoom{OwnerUserID: 1, SeatCount: 8})); !errors.Is(err, room.ErrRoomExists) {
		t.Fatalf("create over an open room: got %v", err)
	}
	if res := mustSubmit(t, reg, env("open", "create", 1, &room.CreateRoom{OwnerUserID: 1, HostUserID: 2, SeatCount: 10, Title: "t"})); !res.Duplicate || res.RoomVersion != 1 {
		t.Fatalf("retry of CreateRoom: %+v", res)
	}
	meta, _, _ := repo.GetRoomMeta(context.Background(), "closed")
	if meta.Status != string(room.StatusClosed) {
		t.Fatalf("rooms.status of a closed room is %q", meta.Status)
	}
}

func TestEventsReachSinkAfterCommitWithLanes(t *testing.T) {
	repo := openRepo(t)
	sink := &recordSink{}
	reg := newRegistry(t, repo, cell.Config{}, sink)
	createRoom(t, reg, "ev")
	mustSubmit(t, reg, env("ev", "j", 5, &room.JoinRoom{}))
	mustSubmit(t, reg, env("ev", "t", 5, &room.TakeMic{SeatIndex: 1}))
	mustSubmit(t, reg, env("ev", "l", 5, &room.LeaveRoom{}))
	// The sink hears of a command right after its caller got the answer.
	poll.Until(t, 5*time.Second, "the sink to see 4 commands", poll.Bool(func() bool { return len(sink.all()) == 4 }))
	got := sink.all()
	// The outbox holds exactly the durable events, in order, with unique ids.
	rows, err := repo.ListRoomOutbox(context.Background(), "ev", 100)
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, c := range got {
		for _, ev := range c.Events {
			if ev.Lanes().Outbox {
				want = append(want, fmt.Sprintf("%d/%s", c.RoomVersion, ev.Type))
			}
		}
	}
	var have []string
	for _, r := range rows {
		have = append(have, fmt.Sprintf("%d/%s", r.RoomVersion, r.EventType))
		if r.EventID != fmt.Sprintf("ev/%d/%d", r.RoomVersion, r.Seq) {
			t.Fatalf("event id %q", r.EventID)
		}
	}
	if fmt.Sprint(have) != fmt.Sprint(want) {
		t.Fatalf("outbox rows %v, want %v", have, want)
	}
	// Leaving the room closes the mic interval first, then the user leaves.
	if fmt.Sprint(have) != "[1/RoomCreated 2/RoomUserJoined 3/RoomMicChanged 4/RoomMicChanged 4/RoomUserLeft]" {
		t.Fatalf("unexpected outbox rows %v", have)
	}
}

// TestSnapshotHidesEndedRestrictions queries a room after a ban ended and
// before its next command: the answer has the room's version and no ban.
func TestSnapshotHidesEndedRestrictions(t *testing.T) {
	clock := &testClock{}
	reg := newRegistry(t, openRepo(t), cell.Config{Clock: clock.Now}, nil)
	createRoom(t, reg, "bans")
	v := mustSubmit(t, reg, env("bans", "kick", 1, &room.KickUser{TargetUserID: 7, DurationSeconds: 60})).RoomVersion
	snap, err := reg.Snapshot(context.Background(), "bans")
	if err != nil || len(snap.GetBans()) != 1 {
		t.Fatalf("bans %v (%v), want the kick's", snap.GetBans(), err)
	}
	clock.jump(61 * time.Second)
	snap, err = reg.Snapshot(context.Background(), "bans")
	if err != nil || len(snap.GetBans()) != 0 || snap.GetRoomVersion() != v {
		t.Fatalf("after the ban ended: bans %v, version %d (%v); want none at version %d", snap.GetBans(), snap.GetRoomVersion(), err, v)
	}
}

// TestAReadDoesNotWaitBehindACommit: while the cell is stuck in a commit,
// a snapshot read answers at once with the last committed version, and
// once the command is answered a read sees it.
func TestAReadDoesNotWaitBehindACommit(t *testing.T) {
	repo := openRepo(t)
	setup := newRegistry(t, repo, cell.Config{}, nil)
	createRoom(t, setup, "read")
	if err := setup.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	blocked := &blockingRepo{Repository: repo, entered: make(chan struct{}), release: make(chan struct{})}
	reg := newRegistry(t, blocked, cell.Config{}, nil)
	var release sync.Once
	defer release.Do(func() { close(blocked.release) }) // a failed check must not leave the commit stuck
	if snap, err := reg.Snapshot(context.Background(), "read"); err != nil || snap.GetRoomVersion() != 1 {
		t.Fatalf("snapshot: version %d, %v", snap.GetRoomVersion(), err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		mustSubmit(t, reg, env("read", "change", 1, &room.ChangeBackground{BackgroundURL: "x"}))
	}()
	<-blocked.entered // the cell is now stuck in its commit
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	snap, err := reg.Snapshot(ctx, "read")
	cancel()
	if err != nil || snap.GetRoomVersion() != 1 {
		t.Fatalf("snapshot during the commit: version %d, %v; want 1 at once", snap.GetRoomVersion(), err)
	}
	release.Do(func() { close(blocked.release) })
	<-done
	if snap, err := reg.Snapshot(context.Background(), "read"); err != nil || snap.GetRoomVersion() != 2 || snap.GetProfile().GetBackgroundUrl() != "x" {
		t.Fatalf("snapshot after the answer: version %d, background %q, %v; want 2, x", snap.GetRoomVersion(), snap.GetProfile().GetBackgroundUrl(), err)
	}
}
