package sqlstore_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"slices"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"hyapp/room-service/store"
	"hyapp/room-service/store/mysql"
	"hyapp/room-service/store/mysql/mysqltest"
	"hyapp/room-service/store/sqlite"
	"hyapp/room-service/store/sqlstore"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// claimed makes the rooms ids, claimed by node-a, and returns their epochs.
func claimed(t *testing.T, db *sqlstore.DB, ids ...string) map[string]int64 {
	t.Helper()
	epochs := map[string]int64{}
	for _, id := range ids {
		if err := db.SaveRoomMeta(t.Context(), store.RoomMeta{RoomID: id, SeatCount: 8, Status: "open"}); err != nil {
			t.Fatal(err)
		}
		c, err := db.ClaimRoom(t.Context(), id, "node-a")
		if err != nil {
			t.Fatal(err)
		}
		epochs[id] = c.Epoch
	}
	return epochs
}

// batch makes n commands of room id after base, named by tag.
func batch(id string, epoch, base int64, n int, tag string) store.Batch {
	b := store.Batch{RoomID: id, OwnerEpoch: epoch, BaseVersion: base}
	for v := base + 1; v <= base+int64(n); v++ {
		b.Commands = append(b.Commands, store.CommandRecord{RoomID: id, RoomVersion: v, CommandID: fmt.Sprintf("%s-%d", tag, v), CommandType: "T"})
	}
	return b
}

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
	epochs := claimed(t, db.DB, "a", "b", "c", "d", "e")
	if _, err := db.ClaimRoom(ctx, "b", "node-b"); err != nil {
		t.Fatal(err)
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

// TestTheLedgerIsToldOnlyOfChargesThatCommitted: LedgerHooks.Committed
// hears, after the commit, the charges of the batches that committed, in
// the order they were written, and nothing of a batch the ledger refused,
// of a fenced batch, or of a transaction that did not commit. The ledger
// here refuses the charge keyed "stale" with a conflict that names no
// charge, so the merged commit is refused and the batches commit one by
// one.
func TestTheLedgerIsToldOnlyOfChargesThatCommitted(t *testing.T) {
	for name, open := range databases {
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			db := open(t)
			var mu sync.Mutex
			var told [][]string
			var broken bool // the ledger fails as a broken connection would
			db.SetLedger(sqlstore.LedgerHooks{
				Write: func(_ context.Context, _ *sqlstore.CommitTx, _ string, charges []store.GiftCharge, _ []string, _ int64) error {
					for _, c := range charges {
						switch {
						case broken:
							return errors.New("connection lost")
						case c.Key == "stale":
							return fmt.Errorf("balance moved: %w", store.ErrConflict)
						}
					}
					return nil
				},
				Committed: func(charges []store.GiftCharge) {
					mu.Lock()
					defer mu.Unlock()
					var keys []string
					for _, c := range charges {
						keys = append(keys, c.Key)
					}
					told = append(told, keys)
				},
			})
			epochs := claimed(t, db, "a", "b", "c")
			charged := func(b store.Batch, keys ...string) store.Batch {
				for _, k := range keys {
					b.Charges = append(b.Charges, store.GiftCharge{Key: k, UserID: 10, Amount: 10, BalanceAfter: 90})
				}
				return b
			}
			batches := []store.Batch{
				charged(batch("c", epochs["c"], 0, 1, "x"), "c1"),
				charged(batch("b", epochs["b"], 0, 1, "x"), "b1", "stale"),
				charged(batch("a", epochs["a"], 0, 1, "x"), "a1", "a2"),
				charged(batch("c", epochs["c"]+1, 1, 1, "x"), "fenced"),
				charged(batch("a", epochs["a"], 1, 1, "x"), "a3"),
			}
			results, err := db.CommitBatches(ctx, batches)
			if err != nil {
				t.Fatal(err)
			}
			for i, want := range []error{nil, store.ErrConflict, nil, store.ErrFenced, nil} {
				if (want == nil) != (results[i] == nil) || !errors.Is(results[i], want) {
					t.Fatalf("batch %d: %v, want %v", i, results[i], want)
				}
			}
			want := [][]string{{"a1", "a2", "a3", "c1"}} // rooms in id order, each room's batches in order
			if !reflect.DeepEqual(told, want) {
				t.Fatalf("the ledger was told %v, want %v", told, want)
			}

			broken = true
			if _, err := db.CommitBatches(ctx, []store.Batch{charged(batch("b", epochs["b"], 0, 1, "y"), "b2")}); err == nil {
				t.Fatal("a commit whose ledger write failed: no error")
			}
			if !reflect.DeepEqual(told, want) {
				t.Fatalf("after a commit that failed, the ledger was told %v, want %v", told, want)
			}
		})
	}
}

// databases open a fresh database of each kind.
var databases = map[string]func(t *testing.T) *sqlstore.DB{
	"sqlite": func(t *testing.T) *sqlstore.DB {
		db, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "rooms.db"), sqlite.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = db.Close() })
		return db.DB
	},
	"mysql": func(t *testing.T) *sqlstore.DB {
		db, err := mysql.Open(t.Context(), mysqltest.DSN(t), mysql.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = db.Close() })
		return db.DB
	},
}

// TestAStaleChargeRefusesItsBatchAlone: when the ledger refuses a merged
// commit for a charge decided on a balance that moved (sqlstore.StaleCharge),
// the commit runs again merged without that charge's batch: the ledger
// writes once per transaction, never once per batch. Past maxStaleRetries
// such refusals the batches commit one by one.
func TestAStaleChargeRefusesItsBatchAlone(t *testing.T) {
	rooms := []string{"a", "b", "c", "d", "e", "f", "g"}
	for _, c := range []struct {
		name   string
		stale  []string // the rooms whose batch charges a stale key
		writes [][]string
	}{
		{"none", nil, [][]string{{"a", "b", "c", "d", "e", "f", "g"}}},
		{"one", []string{"c"}, [][]string{{"a", "b", "c", "d", "e", "f", "g"}, {"a", "b", "d", "e", "f", "g"}}},
		{"two", []string{"b", "f"}, [][]string{
			{"a", "b", "c", "d", "e", "f", "g"}, {"a", "c", "d", "e", "f", "g"}, {"a", "c", "d", "e", "g"}}},
		// Five stale batches: four merged retries, then every batch again,
		// one at a time.
		{"past the retries", []string{"a", "b", "c", "d", "e"}, [][]string{
			{"a", "b", "c", "d", "e", "f", "g"}, {"b", "c", "d", "e", "f", "g"}, {"c", "d", "e", "f", "g"},
			{"d", "e", "f", "g"}, {"e", "f", "g"}, {"a"}, {"b"}, {"c"}, {"d"}, {"e"}, {"f"}, {"g"}}},
	} {
		for name, open := range databases {
			t.Run(c.name+"/"+name, func(t *testing.T) {
				db := open(t)
				var writes [][]string
				db.SetLedger(sqlstore.LedgerHooks{
					Write: func(_ context.Context, _ *sqlstore.CommitTx, _ string, charges []store.GiftCharge, _ []string, _ int64) error {
						var keys []string
						for _, ch := range charges {
							keys = append(keys, ch.Key)
						}
						writes = append(writes, keys)
						for _, k := range keys {
							if slices.Contains(c.stale, k) {
								return &sqlstore.StaleCharge{Key: k, Err: fmt.Errorf("balance moved: %w", store.ErrConflict)}
							}
						}
						return nil
					},
				})
				epochs := claimed(t, db, rooms...)
				var batches []store.Batch
				for _, id := range slices.Backward(rooms) { // the store sorts them by room
					b := batch(id, epochs[id], 0, 1, "x")
					b.Charges = []store.GiftCharge{{Key: id, UserID: 10, Amount: 10, BalanceAfter: 90}}
					batches = append(batches, b)
				}
				want := c.writes
				if db.OneTrip(batches, []int{0, 1, 2, 3, 4, 5, 6}) && len(c.stale) > 0 {
					// On MySQL a one-trip attempt comes first, with every
					// batch; a refusal sends it to the merged path.
					want = append([][]string{c.writes[0]}, c.writes...)
				}
				results, err := db.CommitBatches(t.Context(), batches)
				if err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(writes, want) {
					t.Fatalf("the ledger wrote %v, want %v", writes, want)
				}
				listed, err := db.ListRooms(t.Context(), "", len(rooms))
				if err != nil || len(listed) != len(rooms) {
					t.Fatalf("ListRooms: %d rooms, err %v", len(listed), err)
				}
				heads := map[string]int64{}
				for _, r := range listed {
					heads[r.Meta.RoomID] = r.HeadVersion
				}
				for i, b := range batches {
					want := int64(1)
					if slices.Contains(c.stale, b.RoomID) {
						var stale *sqlstore.StaleCharge
						if !errors.Is(results[i], store.ErrConflict) || !errors.As(results[i], &stale) || stale.Key != b.RoomID {
							t.Fatalf("room %s: %v, want its stale charge refused", b.RoomID, results[i])
						}
						want = 0
					} else if results[i] != nil {
						t.Fatalf("room %s: %v, want committed", b.RoomID, results[i])
					}
					if heads[b.RoomID] != want {
						t.Fatalf("room %s: head %d, want %d", b.RoomID, heads[b.RoomID], want)
					}
				}
			})
		}
	}
}

// TestAStaleChargeOfACreatedRoomGoesOneByOne: a batch that creates its
// room and whose charge is stale is refused one by one, as any conflict
// is, which leaves its room's row (creating, at version 0) for the cell's
// reload; the other batches commit.
func TestAStaleChargeOfACreatedRoomGoesOneByOne(t *testing.T) {
	for name, open := range databases {
		t.Run(name, func(t *testing.T) {
			db := open(t)
			var writes int
			db.SetLedger(sqlstore.LedgerHooks{
				Write: func(_ context.Context, _ *sqlstore.CommitTx, _ string, charges []store.GiftCharge, _ []string, _ int64) error {
					writes++
					for _, ch := range charges {
						if ch.Key == "stale" {
							return &sqlstore.StaleCharge{Key: ch.Key, Err: fmt.Errorf("balance moved: %w", store.ErrConflict)}
						}
					}
					return nil
				},
			})
			epochs := claimed(t, db, "a")
			created := batch("new", 1, 0, 1, "n")
			created.Status, created.CreatedBy = "open", "node-a"
			created.Meta = &store.RoomMeta{RoomID: "new", SeatCount: 8}
			created.Charges = []store.GiftCharge{{Key: "stale", UserID: 1, Amount: 1, BalanceAfter: 1}}
			results, err := db.CommitBatches(t.Context(), []store.Batch{created, batch("a", epochs["a"], 0, 1, "o")})
			if err != nil {
				t.Fatal(err)
			}
			if !errors.Is(results[0], store.ErrConflict) || results[1] != nil {
				t.Fatalf("results %v; want the created room's batch refused and the other committed", results)
			}
			if _, found, err := db.GetRoomMeta(t.Context(), "new"); err != nil || !found {
				t.Fatalf("the created room's row: found %v, err %v; want it left for the reload", found, err)
			}
			// Merged, then the created room's batch in its savepoint (the
			// other charges nothing); on MySQL a one-trip attempt first.
			want := 2
			if db.OneTrip([]store.Batch{created}, []int{0}) {
				want = 3
			}
			if writes != want {
				t.Fatalf("the ledger wrote %d times, want %d: one merged attempt, then one by one", writes, want)
			}
		})
	}
}

// TestAStaleChargeIsNotPinnedOnAFencedBatch: a fenced batch that carries
// the stale charge's key was never given to the ledger, so the refusal goes
// to the batch that was, and the fenced one keeps ErrFenced.
func TestAStaleChargeIsNotPinnedOnAFencedBatch(t *testing.T) {
	for name, open := range databases {
		t.Run(name, func(t *testing.T) {
			db := open(t)
			db.SetLedger(sqlstore.LedgerHooks{
				Write: func(_ context.Context, _ *sqlstore.CommitTx, _ string, charges []store.GiftCharge, _ []string, _ int64) error {
					for _, ch := range charges {
						if ch.Key == "k" {
							return &sqlstore.StaleCharge{Key: ch.Key, Err: fmt.Errorf("balance moved: %w", store.ErrConflict)}
						}
					}
					return nil
				},
			})
			epochs := claimed(t, db, "a", "b")
			fenced := batch("a", epochs["a"]+1, 0, 1, "x") // an epoch the room never had
			live := batch("b", epochs["b"], 0, 1, "x")
			for _, b := range []*store.Batch{&fenced, &live} {
				b.Charges = []store.GiftCharge{{Key: "k", UserID: 10, Amount: 10, BalanceAfter: 90}}
			}
			results, err := db.CommitBatches(t.Context(), []store.Batch{fenced, live})
			if err != nil {
				t.Fatal(err)
			}
			var stale *sqlstore.StaleCharge
			if !errors.Is(results[0], store.ErrFenced) || errors.As(results[0], &stale) {
				t.Fatalf("the fenced batch: %v, want ErrFenced alone", results[0])
			}
			if !errors.As(results[1], &stale) || stale.Key != "k" {
				t.Fatalf("the batch the ledger was given: %v, want its stale charge refused", results[1])
			}
		})
	}
}

// TestASnapshotPastThePacketLimitSpoilsNoOtherBatch: MySQL takes no
// statement larger than max_allowed_packet (the connection is dropped), so
// a room whose snapshot outgrew it (100,000 members with 200-byte avatar
// URLs make 23 MiB; MariaDB's default is 16 MiB) cannot store it. The
// commit leaves that snapshot out: the other rooms' batches and the big
// room's own commands commit, and a snapshot that fits is stored as before.
// The rooms' stops leave it out too, so the big room is still released.
func TestASnapshotPastThePacketLimitSpoilsNoOtherBatch(t *testing.T) {
	ctx := t.Context()
	db := databases["mysql"](t)
	var limit int
	if err := db.Writer().QueryRowContext(ctx, `SELECT @@max_allowed_packet`).Scan(&limit); err != nil {
		t.Fatal(err)
	}
	var leftOut []int64 // the versions the observer heard of
	db.SetSnapshotLeftOut(func(s *store.SnapshotRecord, max int) {
		if s.RoomID != "big" || max != limit {
			t.Errorf("left out: room %s at a limit of %d", s.RoomID, max)
		}
		leftOut = append(leftOut, s.RoomVersion)
	})
	epochs := claimed(t, db, "big", "small")
	big := batch("big", epochs["big"], 0, 1, "x")
	big.Snapshot = &store.SnapshotRecord{RoomID: "big", RoomVersion: 1, Payload: bytes.Repeat([]byte("m"), limit)}
	results, err := db.CommitBatches(ctx, []store.Batch{big, batch("small", epochs["small"], 0, 1, "x")})
	if err != nil || results[0] != nil || results[1] != nil {
		t.Fatalf("a commit beside a snapshot past the packet limit: %v, %v; want both batches committed", results, err)
	}
	for _, id := range []string{"big", "small"} {
		if cmds, err := db.ListCommandsAfter(ctx, id, 0); err != nil || len(cmds) != 1 {
			t.Fatalf("room %s: %d commands, %v; want 1", id, len(cmds), err)
		}
	}
	if _, found, err := db.GetLatestSnapshot(ctx, "big"); err != nil || found {
		t.Fatalf("the big room's snapshot: found %v, %v; want none stored", found, err)
	}

	fits := batch("big", epochs["big"], 1, 1, "y")
	fits.Snapshot = &store.SnapshotRecord{RoomID: "big", RoomVersion: 2, Payload: bytes.Repeat([]byte("m"), limit/2)}
	if results, err := db.CommitBatches(ctx, []store.Batch{fits}); err != nil || results[0] != nil {
		t.Fatalf("a snapshot of half the packet limit: %v, %v", results, err)
	}
	if s, found, err := db.GetLatestSnapshot(ctx, "big"); err != nil || !found || s.RoomVersion != 2 || len(s.Payload) != limit/2 {
		t.Fatalf("the big room's snapshot: version %d of %d bytes, found %v, %v; want version 2 stored whole", s.RoomVersion, len(s.Payload), found, err)
	}

	stops := []store.RoomStop{
		{RoomID: "big", Epoch: epochs["big"], Release: true,
			Snapshot: &store.SnapshotRecord{RoomID: "big", RoomVersion: 3, Payload: bytes.Repeat([]byte("m"), limit)}},
		{RoomID: "small", Epoch: epochs["small"], Release: true},
	}
	if err := db.StopRooms(ctx, stops); err != nil {
		t.Fatalf("stops beside a snapshot past the packet limit: %v", err)
	}
	for _, id := range []string{"big", "small"} {
		if c, err := db.ClaimRoom(ctx, id, "node-b"); err != nil || c.PreviousNode != "" {
			t.Fatalf("room %s after its stop: %+v, %v; want it released", id, c, err)
		}
	}
	if !slices.Equal(leftOut, []int64{1, 3}) {
		t.Fatalf("the observer heard of snapshots %v left out, want [1 3]", leftOut)
	}
}
