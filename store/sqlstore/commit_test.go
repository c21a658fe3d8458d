package sqlstore_test

import (
	"errors"
	"fmt"
	"testing"

	"go.uber.org/goleak"

	"hyapp/room-service/store"
	"hyapp/room-service/store/mysql"
	"hyapp/room-service/store/mysql/mysqltest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestBulkFence runs the merged path alone on MySQL, on enough rooms for
// the bulk fence. Through CommitBatches a batch wrongly let through would
// mostly hit the log's primary key and be caught by the isolated path;
// here it fails.
func TestBulkFence(t *testing.T) {
	ctx := t.Context()
	db, err := mysql.Open(ctx, mysqltest.DSN(t), mysql.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	epochs := map[string]int64{}
	for _, id := range []string{"a", "b", "c", "d", "e"} {
		if err := db.SaveRoomMeta(ctx, store.RoomMeta{RoomID: id, SeatCount: 8, Status: "open"}); err != nil {
			t.Fatal(err)
		}
		c, err := db.ClaimRoom(ctx, id, "node-a")
		if err != nil {
			t.Fatal(err)
		}
		epochs[id] = c.Epoch
	}
	if _, err := db.ClaimRoom(ctx, "b", "node-b"); err != nil {
		t.Fatal(err)
	}
	// batch makes n commands of room id after base, named by tag.
	batch := func(id string, epoch, base int64, n int, tag string) store.Batch {
		b := store.Batch{RoomID: id, OwnerEpoch: epoch, BaseVersion: base}
		for v := base + 1; v <= base+int64(n); v++ {
			b.Commands = append(b.Commands, store.CommandRecord{RoomID: id, RoomVersion: v, CommandID: fmt.Sprintf("%s-%d", tag, v), CommandType: "T"})
		}
		return b
	}
	batches := []store.Batch{
		batch("e", epochs["e"], 0, 0, "x"),
		batch("d", epochs["d"], 0, 1, "x"),
		batch("a", epochs["a"], 0, 1, "x"),
		batch("b", epochs["b"], 0, 1, "x"),
		batch("d", epochs["d"], 0, 1, "behind"),
		batch("c", epochs["c"], 2, 1, "x"),
		batch("a", epochs["a"], 1, 1, "x"),
		batch("zz", 1, 0, 1, "x"),
	}
	batches[0].Status = "closed"
	fenced := []bool{false, false, false, true, true, true, false, true}
	order := []int{2, 6, 3, 5, 1, 4, 0, 7} // by room id, each room's batches in input order
	results := make([]error, len(batches))
	if err := db.CommitMerged(ctx, batches, order, results); err != nil {
		t.Fatalf("commitMerged: %v", err)
	}
	for i, r := range results {
		if errors.Is(r, store.ErrFenced) != fenced[i] || (r != nil && !fenced[i]) {
			t.Fatalf("batch %d (room %s): %v, want fenced %v", i, batches[i].RoomID, r, fenced[i])
		}
	}
	for id, head := range map[string]int64{"a": 2, "b": 0, "c": 0, "d": 1, "e": 0} {
		c, err := db.ClaimRoom(ctx, id, "node-c")
		if err != nil || c.HeadVersion != head {
			t.Fatalf("room %s: %+v, %v; want head %d", id, c, err, head)
		}
		if want := map[bool]string{true: "closed", false: "open"}[id == "e"]; c.Meta.Status != want {
			t.Fatalf("room %s status %q, want %q", id, c.Meta.Status, want)
		}
	}
}
