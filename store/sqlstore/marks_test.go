package sqlstore_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"hyapp/room-service/outbox"
	"hyapp/room-service/store"
	"hyapp/room-service/store/sqlite"
)

// markRoom is a SQLite database with a claimed room whose first batch
// committed n pending outbox rows; next returns the room's next batch.
func markRoom(t *testing.T, n int) (db *sqlite.DB, ids []string, next func() store.Batch) {
	t.Helper()
	ctx := t.Context()
	db, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "marks.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	if err := db.SaveRoomMeta(ctx, store.RoomMeta{RoomID: "r", SeatCount: 8, Status: "open"}); err != nil {
		t.Fatal(err)
	}
	claim, err := db.ClaimRoom(ctx, "r", "node-a")
	if err != nil {
		t.Fatal(err)
	}
	base := int64(0)
	next = func() store.Batch {
		base++
		b := store.Batch{RoomID: "r", OwnerEpoch: claim.Epoch, BaseVersion: base - 1,
			Commands: []store.CommandRecord{{RoomID: "r", RoomVersion: base, CommandID: fmt.Sprintf("c-%d", base), CommandType: "T"}}}
		return b
	}
	first := next()
	for seq := range n {
		id := fmt.Sprintf("r/1/%d", seq)
		first.Outbox = append(first.Outbox, outbox.Record{EventID: id, RoomID: "r", RoomVersion: 1, Seq: int32(seq),
			EventType: "T", Payload: []byte(`{}`), NextAttemptAt: time.Now()})
		ids = append(ids, id)
	}
	mustCommitAll(t, db, first)
	return db, ids, next
}

func mustCommitAll(t *testing.T, db *sqlite.DB, batches ...store.Batch) {
	t.Helper()
	results, err := db.CommitBatches(t.Context(), batches)
	if err != nil {
		t.Fatal(err)
	}
	for i, err := range results {
		if err != nil {
			t.Fatalf("batch %d: %v", i, err)
		}
	}
}

// waitForMark polls until a mark waits for a room commit.
func waitForMark(t *testing.T, db *sqlite.DB) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); db.WaitingMarks() == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no mark waits for a commit")
		}
	}
}

func pending(t *testing.T, db *sqlite.DB) int64 {
	t.Helper()
	st, err := db.OutboxStats(t.Context(), 0)
	if err != nil {
		t.Fatal(err)
	}
	return st.Pending
}

// within is what done gives within 10 s; the test fails without it
// rather than wait out a mark.
func within(t *testing.T, done <-chan error) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("the mark did not end")
		return nil
	}
}

// TestAMarkRidesTheNextCommit: with a single writer, a mark that finds a
// room commit coming is stored by that commit's transaction.
func TestAMarkRidesTheNextCommit(t *testing.T) {
	db, ids, next := markRoom(t, 3)
	db.SetMarkWait(time.Hour) // only a commit ends the ride
	type ride struct {
		stored bool
		err    error
	}
	done := make(chan ride, 1)
	go func() {
		stored, err := db.RideMark(t.Context(), ids[:2])
		done <- ride{stored, err}
	}()
	waitForMark(t, db)
	mustCommitAll(t, db, next())
	select {
	case r := <-done:
		if r.err != nil || !r.stored {
			t.Fatalf("ride: stored %v, err %v; want stored by the commit", r.stored, r.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the commit did not take the waiting mark")
	}
	if n := pending(t, db); n != 1 {
		t.Fatalf("%d rows pending after the commit that stored the mark, want 1", n)
	}
}

// TestAMarkWaitsThroughALongCommit: a mark that comes while a commit runs
// waits for the next commit, however long ago the running one began, and
// the next one stores it. A mark that gave up after its wait alone ran in
// a transaction of its own whenever commits took longer than that wait.
func TestAMarkWaitsThroughALongCommit(t *testing.T) {
	db, ids, next := markRoom(t, 2)
	db.SetMarkWait(time.Millisecond)
	end := db.CommitRunning(time.Minute)
	done := make(chan error, 1)
	go func() {
		stored, err := db.RideMark(t.Context(), ids[:1])
		if err == nil && !stored {
			err = errors.New("not stored by a commit")
		}
		done <- err
	}()
	waitForMark(t, db)
	end()
	mustCommitAll(t, db, next())
	if err := within(t, done); err != nil {
		t.Fatalf("ride during a long commit: %v", err)
	}
	if n := pending(t, db); n != 1 {
		t.Fatalf("%d rows pending after the commit that stored the mark, want 1", n)
	}
}

// TestAMarkACommitDidNotStoreRunsAlone: a commit that fails hands the marks
// it took back, and MarkOutboxPublishedBatch stores them in a transaction
// of its own; with no commit at all it does so after the wait.
func TestAMarkACommitDidNotStoreRunsAlone(t *testing.T) {
	db, ids, next := markRoom(t, 2)
	db.SetMarkWait(time.Hour) // only a commit ends the ride
	done := make(chan error, 1)
	go func() { done <- db.MarkOutboxPublishedBatch(t.Context(), ids[:1]) }()
	waitForMark(t, db)
	canceled, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := db.CommitBatches(canceled, []store.Batch{next()}); err == nil {
		t.Fatal("a commit on a canceled context succeeded")
	}
	if err := within(t, done); err != nil {
		t.Fatalf("mark after a failed commit: %v", err)
	}
	if n := pending(t, db); n != 1 {
		t.Fatalf("%d rows pending, want 1: the mark is stored", n)
	}
	// A mark whose context ends before any commit takes it stores nothing.
	if stored, err := db.RideMark(canceled, ids); stored || err == nil {
		t.Fatalf("ride on a canceled context: stored %v, err %v", stored, err)
	}
	if n := db.WaitingMarks(); n != 0 {
		t.Fatalf("%d marks left waiting", n)
	}
	// No commit comes: after its wait the mark runs alone.
	db.SetMarkWait(time.Millisecond)
	if err := db.MarkOutboxPublishedBatch(t.Context(), ids[1:]); err != nil {
		t.Fatal(err)
	}
	if n := pending(t, db); n != 0 {
		t.Fatalf("%d rows pending, want 0", n)
	}
}
