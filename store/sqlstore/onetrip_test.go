package sqlstore_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"testing"

	"hyapp/room-service/outbox"
	"hyapp/room-service/store"
	"hyapp/room-service/store/mysql"
	"hyapp/room-service/store/mysql/mysqltest"
	"hyapp/room-service/store/sqlite"
	"hyapp/room-service/store/sqlstore"
)

// oneConnection opens a MySQL database on a pool of one connection: a
// refused trip that left its transaction open would show its rows to the
// next reads.
func oneConnection(t *testing.T) *mysql.DB {
	db, err := mysql.Open(t.Context(), mysqltest.DSN(t), mysql.Options{MaxOpenConns: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// withOutbox gives each command of b one outbox row.
func withOutbox(b store.Batch) store.Batch {
	for _, c := range b.Commands {
		b.Outbox = append(b.Outbox, outbox.Record{EventID: fmt.Sprintf("%s/%d/0", c.RoomID, c.RoomVersion), RoomID: c.RoomID,
			RoomVersion: c.RoomVersion, EventType: "E", Payload: []byte(`{"q":"it's; DROP TABLE rooms; --"}`)})
	}
	return b
}

// TestACommitOfCommonBatchesIsOneTrip: on MySQL a commit of batches that
// only create rooms, append commands, outbox rows, a snapshot and a status
// goes as one query, writes all of it, and writes nothing when one of its
// batches does not pass its fence, repeats a command id or creates a room
// that exists; CommitBatches then decides each batch as before.
func TestACommitOfCommonBatchesIsOneTrip(t *testing.T) {
	ctx := t.Context()
	db := oneConnection(t)
	epochs := claimed(t, db.DB, "a", "b", "c")

	batches := []store.Batch{
		withOutbox(batch("a", epochs["a"], 0, 2, "x")),
		withOutbox(batch("a", epochs["a"], 2, 1, "x")),
		withOutbox(batch("b", epochs["b"], 0, 3, "x")),
		batch("c", epochs["c"], 0, 1, "x"),
		withOutbox(batch("d", 1, 0, 2, "x")),
		batch("d", 1, 2, 1, "x"),
	}
	batches[4].CreatedBy, batches[4].Status = "node-a", "open"
	batches[4].Meta = &store.RoomMeta{RoomID: "d", OwnerUserID: 7, SeatCount: 9, Mode: "party", Status: "open"}
	batches[1].Status = "closed"
	batches[2].Snapshot = &store.SnapshotRecord{RoomID: "b", RoomVersion: 3, Payload: []byte("snap\x00'b")}
	order := []int{0, 1, 2, 3, 4, 5}
	if !db.OneTrip(batches, order) {
		t.Fatal("common batches do not commit in one trip")
	}
	for name, change := range map[string]func(*store.Batch){
		"a create after a batch of its room": func(b *store.Batch) {
			b.CreatedBy = "node-a"
			b.Meta = &store.RoomMeta{RoomID: b.RoomID}
		},
		"a settle":       func(b *store.Batch) { b.Settle = []string{"k"} },
		"a timer":        func(b *store.Batch) { b.Timers = []store.Timer{{RoomID: b.RoomID, TimerID: "t"}} },
		"a done timer":   func(b *store.Batch) { b.DoneTimers = []string{"t"} },
		"new metadata":   func(b *store.Batch) { b.Meta = &store.RoomMeta{RoomID: b.RoomID} },
		"new roles":      func(b *store.Batch) { b.Roles = &store.RoomRoles{} },
		"a gap":          func(b *store.Batch) { b.BaseVersion++ },
		"another epoch":  func(b *store.Batch) { b.OwnerEpoch++ },
		"too many bytes": func(b *store.Batch) { b.Commands[0].Payload = make([]byte, 5<<20) },
	} {
		other := append([]store.Batch(nil), batches...)
		b := other[1]
		b.Commands = append([]store.CommandRecord(nil), b.Commands...)
		change(&b)
		other[1] = b
		if db.OneTrip(other, order) {
			t.Fatalf("a commit with %s takes one trip", name)
		}
	}

	// A batch that does not pass its fence: nothing is written.
	stale := append([]store.Batch(nil), batches...)
	stale[3] = batch("c", epochs["c"]-1, 0, 1, "x")
	if err := db.CommitOneTrip(ctx, stale, order); !errors.Is(err, sqlstore.ErrNotOneTrip) {
		t.Fatalf("one trip with a stale epoch: %v, want the fence moved", err)
	}
	// A command id the room has already: nothing is written.
	dup := append([]store.Batch(nil), batches...)
	dup[1] = withOutbox(batch("a", epochs["a"], 2, 1, "x"))
	dup[1].Commands[0].CommandID = dup[0].Commands[0].CommandID
	if err := db.CommitOneTrip(ctx, dup, order); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("one trip with a repeated command id: %v, want a conflict", err)
	}
	// A create of a room that exists: nothing is written.
	exists := append(append([]store.Batch(nil), batches[:3]...), withOutbox(batch("c", 1, 0, 2, "z")))
	exists[3].CreatedBy, exists[3].Status, exists[3].Meta = "node-a", "open", &store.RoomMeta{RoomID: "c", Status: "open"}
	if !db.OneTrip(exists, []int{0, 1, 2, 3}) {
		t.Fatal("a commit creating a room does not take one trip")
	}
	if err := db.CommitOneTrip(ctx, exists, []int{0, 1, 2, 3}); !errors.Is(err, sqlstore.ErrNotOneTrip) {
		t.Fatalf("one trip creating a room that exists: %v, want it refused", err)
	}
	if _, ok, err := db.GetRoomMeta(ctx, "d"); err != nil || ok {
		t.Fatalf("room d after refused trips: found %v, %v; want none", ok, err)
	}
	for _, id := range []string{"a", "b", "c"} {
		if cmds, err := db.ListCommandsAfter(ctx, id, 0); err != nil || len(cmds) != 0 {
			t.Fatalf("room %s after refused trips: %d commands, %v; want none", id, len(cmds), err)
		}
	}

	if err := db.CommitOneTrip(ctx, batches, order); err != nil {
		t.Fatalf("one trip: %v", err)
	}
	for id, head := range map[string]int64{"a": 3, "b": 3, "c": 1, "d": 3} {
		cmds, err := db.ListCommandsAfter(ctx, id, 0)
		if err != nil || int64(len(cmds)) != head {
			t.Fatalf("room %s: %d commands, %v; want %d", id, len(cmds), err, head)
		}
		rows, err := db.ListRoomOutbox(ctx, id, 10)
		if want := map[string]int{"a": 3, "b": 3, "d": 2}[id]; err != nil || len(rows) != want {
			t.Fatalf("room %s: %d outbox rows, %v; want %d", id, len(rows), err, want)
		}
		epoch, ok := epochs[id]
		if !ok {
			epoch = 1 // d, created here
		}
		for _, r := range rows {
			if r.OwnerEpoch != epoch || string(r.Payload) != `{"q":"it's; DROP TABLE rooms; --"}` {
				t.Fatalf("room %s outbox row %+v, want epoch %d and the payload as given", id, r, epoch)
			}
		}
		meta, _, err := db.GetRoomMeta(ctx, id)
		if want := map[bool]string{true: "closed", false: "open"}[id == "a"]; err != nil || meta.Status != want {
			t.Fatalf("room %s status %q, %v; want %q", id, meta.Status, err, want)
		}
		if id == "d" && (meta.OwnerUserID != 7 || meta.SeatCount != 9 || meta.Mode != "party") {
			t.Fatalf("room d created with %+v, want its create batch's metadata", meta)
		}
		c, err := db.ClaimRoom(ctx, id, "node-b")
		if err != nil || c.HeadVersion != head {
			t.Fatalf("room %s: %+v, %v; want head %d", id, c, err, head)
		}
		epochs[id] = c.Epoch
	}
	if s, ok, err := db.GetLatestSnapshot(ctx, "b"); err != nil || !ok || s.RoomVersion != 3 || string(s.Payload) != "snap\x00'b" {
		t.Fatalf("room b snapshot %+v, %v, %v; want version 3 as given", s, ok, err)
	}

	// Through CommitBatches the refused trip falls back: each batch is
	// decided alone.
	next := []store.Batch{
		withOutbox(batch("a", epochs["a"], 3, 1, "y")),
		withOutbox(batch("b", epochs["b"]-1, 3, 1, "y")),
		withOutbox(batch("c", epochs["c"], 1, 1, "y")),
		withOutbox(batch("d", 1, 0, 1, "y")),
	}
	next[3].CreatedBy, next[3].Status, next[3].Meta = "node-a", "open", &store.RoomMeta{RoomID: "d", Status: "open"}
	if !db.OneTrip(next, []int{0, 1, 2, 3}) {
		t.Fatal("the next commit does not take one trip")
	}
	var paths []string
	db.SetCommitObserver(func(path string, declined bool) { paths = append(paths, fmt.Sprint(path, " ", declined)) })
	results, err := db.CommitBatches(ctx, next)
	if err != nil || results[0] != nil || !errors.Is(results[1], store.ErrFenced) || results[2] != nil || !errors.Is(results[3], store.ErrFenced) {
		t.Fatalf("commit with a stale batch and a create of a room that exists: %v, %v; want b and d alone fenced", results, err)
	}
	for id, head := range map[string]int64{"a": 4, "b": 3, "c": 2, "d": 3} {
		if cmds, err := db.ListCommandsAfter(ctx, id, 0); err != nil || int64(len(cmds)) != head {
			t.Fatalf("room %s: %d commands, %v; want %d", id, len(cmds), err, head)
		}
	}
	if _, err := db.CommitBatches(ctx, []store.Batch{withOutbox(batch("c", epochs["c"], 2, 1, "z"))}); err != nil {
		t.Fatal(err)
	}
	if want := []string{"merged true", "one_trip false"}; !slices.Equal(paths, want) {
		t.Fatalf("the commits' paths %q, want %q", paths, want)
	}
}

// TestSQLiteNeverTakesOneTrip: SQLite runs one statement per call, and
// its commits are merged.
func TestSQLiteNeverTakesOneTrip(t *testing.T) {
	db, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "room.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	epochs := claimed(t, db.DB, "a")
	b := []store.Batch{batch("a", epochs["a"], 0, 1, "x")}
	if db.OneTrip(b, []int{0}) {
		t.Fatal("SQLite takes one trip")
	}
	var paths []string
	db.SetCommitObserver(func(path string, declined bool) { paths = append(paths, fmt.Sprint(path, " ", declined)) })
	if results, err := db.CommitBatches(t.Context(), b); err != nil || results[0] != nil {
		t.Fatalf("commit: %v, %v", results, err)
	}
	if want := []string{"merged false"}; !slices.Equal(paths, want) {
		t.Fatalf("the commit's path %q, want %q", paths, want)
	}
}

// TestAGiftCommitIsOneTrip: on MySQL a commit that charges gifts goes in
// one trip too: the ledger reads on the transaction, its writes join the
// trip's query with the gift records, and a fenced batch or a refused
// charge writes none of it.
func TestAGiftCommitIsOneTrip(t *testing.T) {
	ctx := t.Context()
	db := oneConnection(t)
	refuse := false
	db.SetLedger(sqlstore.LedgerHooks{
		Write: func(ctx context.Context, ct *sqlstore.CommitTx, insert string, charges []store.GiftCharge, _ []string, now int64) error {
			var n int
			if err := ct.Tx().QueryRowContext(ctx, `SELECT COUNT(*) FROM wallet_accounts`).Scan(&n); err != nil {
				return err
			}
			if refuse {
				return &sqlstore.StaleCharge{Key: charges[0].Key, Err: fmt.Errorf("balance moved: %w", store.ErrConflict)}
			}
			for _, c := range charges {
				if err := ct.Exec(ctx, insert+`wallet_accounts (user_id, balance, updated_at) VALUES (?, ?, ?)`, c.UserID, c.BalanceAfter, now); err != nil {
					return err
				}
			}
			return nil
		},
	})
	epochs := claimed(t, db.DB, "a")
	gift := func(epoch int64) store.Batch {
		b := withOutbox(batch("a", epoch, 0, 1, "g"))
		b.Charges = []store.GiftCharge{{Key: "a/g-1", UserID: 42, Amount: 10, BalanceAfter: 90}}
		b.Gifts = []store.GiftRecord{{RoomID: "a", RoomVersion: 1, CommandID: "g-1", SenderUserID: 42, ReceiverID: 7, GiftID: "rose", Count: 1, Value: 10, SentAt: 1}}
		return b
	}
	account := func() bool {
		var n int
		if err := db.Writer().QueryRowContext(ctx, `SELECT COUNT(*) FROM wallet_accounts WHERE user_id = 42`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 1
	}
	records := func() int {
		recs, err := db.ListGiftRecords(ctx, store.GiftRecordQuery{RoomID: "a", Limit: 10})
		if err != nil {
			t.Fatal(err)
		}
		return len(recs)
	}
	if !db.OneTrip([]store.Batch{gift(epochs["a"])}, []int{0}) {
		t.Fatal("a gift's batch does not take one trip")
	}
	if err := db.CommitOneTrip(ctx, []store.Batch{gift(epochs["a"] - 1)}, []int{0}); !errors.Is(err, sqlstore.ErrNotOneTrip) {
		t.Fatalf("one trip of a stale gift batch: %v, want it refused", err)
	}
	refuse = true
	if err := db.CommitOneTrip(ctx, []store.Batch{gift(epochs["a"])}, []int{0}); !errors.Is(err, sqlstore.ErrNotOneTrip) {
		t.Fatalf("one trip of a gift the ledger refuses: %v, want it refused", err)
	}
	if account() || records() != 0 {
		t.Fatalf("after refused trips: the account written %v, %d gift records; want neither", account(), records())
	}
	refuse = false
	if err := db.CommitOneTrip(ctx, []store.Batch{gift(epochs["a"])}, []int{0}); err != nil {
		t.Fatalf("one trip of a gift: %v", err)
	}
	if !account() || records() != 1 {
		t.Fatalf("after the trip: the account written %v, %d gift records; want both", account(), records())
	}
}
