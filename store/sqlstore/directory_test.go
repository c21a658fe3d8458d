package sqlstore_test

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"hyapp/room-service/store"
	"hyapp/room-service/store/mysql"
	"hyapp/room-service/store/mysql/mysqltest"
	"hyapp/room-service/store/sqlite"
	"hyapp/room-service/store/sqlstore"
)

// readModels opens each database the read models run on: SQLite, and
// MariaDB when it is reachable.
func readModels() map[string]func(t testing.TB) *sqlstore.DB {
	return map[string]func(t testing.TB) *sqlstore.DB{
		"sqlite": func(t testing.TB) *sqlstore.DB {
			db, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "room.db"), sqlite.Options{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = db.Close() })
			return db.SQLStore()
		},
		"mysql": func(t testing.TB) *sqlstore.DB {
			db, err := mysql.Open(context.Background(), mysqltest.DSN(t), mysql.Options{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = db.Close() })
			return db.SQLStore()
		},
	}
}

// TestDirectory: rows are fenced by (epoch, version); each order pages
// across pages with every room once; filters select by status, region and mode.
func TestDirectory(t *testing.T) {
	for name, open := range readModels() {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			db := open(t)
			var rows []store.DirectoryRow
			for i := range 23 {
				rows = append(rows, store.DirectoryRow{
					RoomID: fmt.Sprintf("r%02d", i), OwnerEpoch: 2, RoomVersion: 10, OwnerNode: "a", Status: "open",
					OwnerUserID: int64(i), SeatCount: 8, Mode: []string{"chat", "game"}[i%2], Region: []string{"sa", "eg", "ae"}[i%3],
					Title: "t", OnlineCount: int32(i % 5), Heat: int64(i % 4 * 100), CreatedAt: int64(1000 + i%6),
				})
			}
			rows[22].Status = "closed"
			if err := db.UpsertDirectory(ctx, rows); err != nil {
				t.Fatal(err)
			}

			// The fence: an older epoch, or an older version of the same epoch, changes nothing.
			stale := rows[0]
			stale.OnlineCount, stale.OwnerEpoch, stale.RoomVersion, stale.OwnerNode = 99, 1, 50, "stale"
			older := rows[1]
			older.OnlineCount, older.RoomVersion = 99, 9
			newer := rows[2]
			newer.OnlineCount, newer.OwnerEpoch, newer.RoomVersion, newer.OwnerNode = 4, 3, 10, "b"
			same := rows[3]
			same.Title = "again" // the same version again: the row is rewritten alike
			if err := db.UpsertDirectory(ctx, []store.DirectoryRow{stale, older, newer, same}); err != nil {
				t.Fatal(err)
			}
			got, err := db.GetDirectory(ctx, []string{"r00", "r01", "r02", "r03", "nope"})
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != 4 || got["r00"] != rows[0] || got["r01"] != rows[1] || got["r02"] != newer || got["r03"] != same {
				t.Fatalf("after fenced writes: %+v", got)
			}
			rows[2], rows[3] = newer, same

			// Rows the backfill writes never replace a row.
			backfilled := rows[4]
			backfilled.OwnerEpoch, backfilled.Title = 0, "backfill"
			fresh := store.DirectoryRow{RoomID: "zz", Status: "creating", Title: "backfill"}
			if err := db.InsertDirectoryIfMissing(ctx, []store.DirectoryRow{backfilled, fresh}); err != nil {
				t.Fatal(err)
			}
			if got, err := db.GetDirectory(ctx, []string{"r04", "zz"}); err != nil || got["r04"] != rows[4] || got["zz"] != fresh {
				t.Fatalf("insert if missing: %+v %v", got, err)
			}

			for _, order := range []store.DirectoryOrder{store.OrderHeat, store.OrderOnline, store.OrderNewest} {
				for _, f := range []struct{ status, region, mode string }{
					{"open", "", ""}, {"open", "sa", ""}, {"open", "", "game"}, {"open", "eg", "chat"}, {"closed", "", ""},
				} {
					var want []store.DirectoryRow
					for _, r := range rows {
						if r.Status == f.status && (f.region == "" || r.Region == f.region) && (f.mode == "" || r.Mode == f.mode) {
							want = append(want, r)
						}
					}
					slices.SortFunc(want, func(a, b store.DirectoryRow) int {
						if a.Value(order) != b.Value(order) {
							return int(b.Value(order) - a.Value(order))
						}
						return -strings.Compare(a.RoomID, b.RoomID)
					})
					q := store.DirectoryQuery{Order: order, Status: f.status, Region: f.region, Mode: f.mode, Limit: 4}
					var listed []store.DirectoryRow
					for range 20 {
						page, err := db.ListDirectory(ctx, q)
						if err != nil {
							t.Fatal(err)
						}
						listed = append(listed, page...)
						if len(page) < q.Limit {
							break
						}
						last := page[len(page)-1]
						q.After = &store.DirectoryCursor{Value: last.Value(order), RoomID: last.RoomID}
					}
					if !slices.Equal(listed, want) {
						t.Errorf("%s %+v: listed %v\nwant %v", order, f, roomIDs(listed), roomIDs(want))
					}
				}
			}
		})
	}
}

// TestGiftRecords: records commit with their batch (not with a fenced
// one) and page newest first by room, sender and receiver.
func TestGiftRecords(t *testing.T) {
	for name, open := range readModels() {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			db := open(t)
			for _, id := range []string{"a", "b"} {
				if err := db.SaveRoomMeta(ctx, store.RoomMeta{RoomID: id, SeatCount: 8, Status: "open"}); err != nil {
					t.Fatal(err)
				}
				if _, err := db.ClaimRoom(ctx, id, "n"); err != nil {
					t.Fatal(err)
				}
			}
			// 5 versions per room; each is a gift from user 1 to users 2 and 3.
			var batches []store.Batch
			for _, id := range []string{"a", "b"} {
				b := store.Batch{RoomID: id, OwnerEpoch: 1}
				for v := int64(1); v <= 5; v++ {
					cmd := fmt.Sprint("g", v)
					b.Commands = append(b.Commands, store.CommandRecord{RoomID: id, RoomVersion: v, CommandID: cmd, CommandType: "SendGift"})
					for _, to := range []int64{2, 3} {
						b.Gifts = append(b.Gifts, store.GiftRecord{RoomID: id, RoomVersion: v, CommandID: cmd, SenderUserID: 1, ReceiverID: to,
							GiftID: "rose", Count: 2, Value: 2, SentAt: 1000 + v})
					}
				}
				batches = append(batches, b)
			}
			fenced := store.Batch{RoomID: "a", OwnerEpoch: 7, BaseVersion: 5, Commands: []store.CommandRecord{{RoomID: "a", RoomVersion: 6, CommandID: "x", CommandType: "SendGift"}},
				Gifts: []store.GiftRecord{{RoomID: "a", RoomVersion: 6, CommandID: "x", SenderUserID: 1, ReceiverID: 2, GiftID: "rose", Count: 1}}}
			results, err := db.CommitBatches(ctx, append(batches, fenced))
			if err != nil || results[0] != nil || results[1] != nil || results[2] == nil {
				t.Fatalf("commit: %v %v", results, err)
			}
			page := func(q store.GiftRecordQuery) []store.GiftRecord {
				var out []store.GiftRecord
				for range 20 {
					got, err := db.ListGiftRecords(ctx, q)
					if err != nil {
						t.Fatal(err)
					}
					out = append(out, got...)
					if len(got) < q.Limit {
						return out
					}
					q.BeforeID = got[len(got)-1].RecordID
				}
				t.Fatal("never ended")
				return nil
			}
			byRoom := page(store.GiftRecordQuery{RoomID: "a", Limit: 3})
			if len(byRoom) != 10 || byRoom[0].RoomVersion != 5 || byRoom[9].RoomVersion != 1 || byRoom[0].SentAt != 1005 ||
				!slices.IsSortedFunc(byRoom, func(x, y store.GiftRecord) int { return int(y.RecordID - x.RecordID) }) {
				t.Fatalf("by room: %+v", byRoom)
			}
			if got := page(store.GiftRecordQuery{UserID: 1, Limit: 7}); len(got) != 20 {
				t.Fatalf("sent by 1: %d", len(got))
			}
			received := page(store.GiftRecordQuery{UserID: 3, Received: true, Limit: 4})
			if len(received) != 10 || received[0].ReceiverID != 3 || received[0].RoomID != "b" {
				t.Fatalf("received by 3: %+v", received)
			}
			if got := page(store.GiftRecordQuery{UserID: 3, Limit: 4}); len(got) != 0 {
				t.Fatalf("sent by 3: %+v", got)
			}
			// Retention: the records sent before 1003 (versions 1 and 2,
			// 8 records) go, oldest first, a batch at a time.
			pruned := 0
			for {
				n, err := db.PruneGiftRecords(ctx, time.UnixMilli(1003), 3)
				if err != nil {
					t.Fatal(err)
				}
				if pruned += n; n < 3 {
					break
				}
			}
			if left := page(store.GiftRecordQuery{RoomID: "a", Limit: 50}); pruned != 8 || len(left) != 6 || left[len(left)-1].RoomVersion != 3 {
				t.Fatalf("pruned %d gift records, room a keeps %+v; want 8 pruned, versions 3 to 5 kept", pruned, left)
			}
			missing, err := db.MissingDirectory(ctx, "", 10)
			if err != nil || !slices.Equal(missing, []string{"a", "b"}) {
				t.Fatalf("rooms missing from the directory: %v %v", missing, err)
			}
		})
	}
}

// TestPruneGiftRecordsStopsAMinutePastTheCut: retention reads the records
// in commit order only up to the first one sent a minute after the cut. A
// record sent before the cut but committed after one sent within that
// minute (clocks of two nodes, a slow commit) still goes; one committed
// after a record sent later than that waits for it.
func TestPruneGiftRecordsStopsAMinutePastTheCut(t *testing.T) {
	cut := time.UnixMilli(10_000_000)
	for name, open := range readModels() {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			db := open(t)
			if err := db.SaveRoomMeta(ctx, store.RoomMeta{RoomID: "a", SeatCount: 8, Status: "open"}); err != nil {
				t.Fatal(err)
			}
			claim, err := db.ClaimRoom(ctx, "a", "n")
			if err != nil {
				t.Fatal(err)
			}
			// In commit order: old, 30 s after the cut, old, 2 min after it, old.
			sent := []time.Time{cut.Add(-time.Hour), cut.Add(30 * time.Second), cut.Add(-time.Hour), cut.Add(2 * time.Minute), cut.Add(-time.Hour)}
			b := store.Batch{RoomID: "a", OwnerEpoch: claim.Epoch}
			for i, at := range sent {
				v, cmd := int64(i+1), fmt.Sprint("g", i+1)
				b.Commands = append(b.Commands, store.CommandRecord{RoomID: "a", RoomVersion: v, CommandID: cmd, CommandType: "SendGift"})
				b.Gifts = append(b.Gifts, store.GiftRecord{RoomID: "a", RoomVersion: v, CommandID: cmd, SenderUserID: 1, ReceiverID: 2,
					GiftID: "rose", Count: 1, Value: 1, SentAt: at.UnixMilli()})
			}
			if res, err := db.CommitBatches(ctx, []store.Batch{b}); err != nil || res[0] != nil {
				t.Fatalf("commit: %v %v", res, err)
			}
			if n, err := db.PruneGiftRecords(ctx, cut, 100); err != nil || n != 2 {
				t.Fatalf("PruneGiftRecords = %d, %v; want 2 (versions 1 and 3)", n, err)
			}
			left, err := db.ListGiftRecords(ctx, store.GiftRecordQuery{RoomID: "a", Limit: 10})
			if err != nil {
				t.Fatal(err)
			}
			var versions []int64
			for _, r := range left {
				versions = append(versions, r.RoomVersion)
			}
			if !slices.Equal(versions, []int64{5, 4, 2}) {
				t.Fatalf("records left, newest first: versions %v, want [5 4 2]", versions)
			}
		})
	}
}

func roomIDs(rows []store.DirectoryRow) []string {
	out := make([]string, len(rows))
	for i, r := range rows {
		out[i] = r.RoomID
	}
	return out
}

// BenchmarkHotList reads pages of 100 of the hot list by heat, the first
// and the one after it, from a directory of 20,000 open rooms, alternately
// with and without a region filter.
func BenchmarkHotList(b *testing.B) {
	for name, open := range readModels() {
		b.Run(name, func(b *testing.B) {
			ctx := context.Background()
			db := open(b)
			rows := make([]store.DirectoryRow, 20_000)
			for i := range rows {
				rows[i] = store.DirectoryRow{RoomID: fmt.Sprintf("room-%05d", i), OwnerEpoch: 1, Status: "open",
					Region: []string{"sa", "eg", "ae", "kw"}[i%4], Mode: "chat", OnlineCount: int32(i % 300), Heat: int64(i * 7919 % 100_000)}
			}
			if err := db.UpsertDirectory(ctx, rows); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				q := store.DirectoryQuery{Order: store.OrderHeat, Status: "open", Limit: 100}
				if i%2 == 1 {
					q.Region = "eg"
				}
				page, err := db.ListDirectory(ctx, q)
				if err != nil || len(page) != 100 {
					b.Fatalf("%d rows: %v", len(page), err)
				}
				last := page[99]
				q.After = &store.DirectoryCursor{Value: last.Heat, RoomID: last.RoomID}
				if page, err = db.ListDirectory(ctx, q); err != nil || len(page) != 100 {
					b.Fatalf("%d rows: %v", len(page), err)
				}
			}
		})
	}
}
