package ledger_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"hyapp/room-service/store"
	"hyapp/room-service/store/mysql"
	"hyapp/room-service/store/mysql/mysqltest"
	"hyapp/room-service/store/sqlite"
	"hyapp/room-service/wallet"
	"hyapp/room-service/wallet/ledger"
	"hyapp/room-service/wallet/wallettest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// ledgerStore is a store the ledger can start on.
type ledgerStore interface {
	ledger.Host
	Close() error
}

// closeAtEnd closes db when t ends; register it before the ledger's
// cleanup, which must run first.
func closeAtEnd[T ledgerStore](t testing.TB, db T, err error) T {
	t.Helper()
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

func openSQLite(t testing.TB, opts sqlite.Options) *sqlite.DB {
	db, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "room.db"), opts)
	return closeAtEnd(t, db, err)
}

func openMySQL(t testing.TB, dsn string) *mysql.DB {
	db, err := mysql.Open(context.Background(), dsn, mysql.Options{})
	return closeAtEnd(t, db, err)
}

func openLedger(t testing.TB, db ledgerStore, opts ledger.Options) *ledger.Ledger {
	t.Helper()
	l := ledger.New(db.SQLStore(), opts)
	t.Cleanup(func() { _ = l.Close() }) // before db's Close, registered earlier
	return l
}

func TestLedgerSQLite(t *testing.T) {
	wallettest.Run(t, func(t *testing.T) wallettest.Ledger {
		return openLedger(t, openSQLite(t, sqlite.Options{}), ledger.Options{})
	})
}

// TestLedgerSQLiteSharedDB runs the suite with every subtest on one ledger,
// as the rooms of a node share it.
func TestLedgerSQLiteSharedDB(t *testing.T) {
	l := openLedger(t, openSQLite(t, sqlite.Options{}), ledger.Options{})
	wallettest.Run(t, func(*testing.T) wallettest.Ledger { return l })
}

// TestLedgerMySQL runs the wallet contract suite with a fresh database per subtest.
func TestLedgerMySQL(t *testing.T) {
	wallettest.Run(t, func(t *testing.T) wallettest.Ledger {
		return openLedger(t, openMySQL(t, mysqltest.DSN(t)), ledger.Options{})
	})
}

// TestLedgerMySQLSharedDB runs the suite with every subtest on one database
// and a ledger of its own, as nodes share one database in production.
func TestLedgerMySQLSharedDB(t *testing.T) {
	db := openMySQL(t, mysqltest.DSN(t))
	wallettest.Run(t, func(t *testing.T) wallettest.Ledger { return openLedger(t, db, ledger.Options{}) })
}

func TestLedgerClose(t *testing.T) {
	ctx := t.Context()
	l := ledger.New(openSQLite(t, sqlite.Options{}).SQLStore(), ledger.Options{})
	if _, _, err := l.Credit(ctx, 1, 10, "c1"); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := l.Charge(ctx, []wallet.Charge{{Key: "k", UserID: 1, Amount: 1}}); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("Charge after Close: %v, want ErrUnavailable", err)
	}
	if b, err := l.Balance(ctx, 1); err != nil || b != 10 {
		t.Fatalf("Balance after Close = %d, %v; reads go on", b, err)
	}
}

// TestLedgerTwoNodes has the ledgers of two nodes, two committers each,
// race on one MySQL database: on new accounts, on one credit key, on one
// charge key. Every race ends in exactly one write, through the duplicate
// key that sends the loser's transaction round again.
func TestLedgerTwoNodes(t *testing.T) {
	ctx := t.Context()
	dsn := mysqltest.DSN(t)
	nodes := []*ledger.Ledger{
		openLedger(t, openMySQL(t, dsn), ledger.Options{}),
		openLedger(t, openMySQL(t, dsn), ledger.Options{}),
	}
	const (
		users   = 40
		callers = 8 // per node and user
	)
	var dups, replays atomic.Int64
	var wg sync.WaitGroup
	for u := int64(1); u <= users; u++ {
		for _, l := range nodes {
			for range callers {
				wg.Go(func() {
					credit := fmt.Sprintf("credit-%d", u)
					if _, dup, err := l.Credit(ctx, u, 100, credit); err != nil {
						t.Errorf("Credit user=%d: %v", u, err)
						return
					} else if dup {
						dups.Add(1)
					}
					results, err := l.Charge(ctx, []wallet.Charge{{Key: fmt.Sprintf("gift-%d", u), UserID: u, Amount: 30, Reward: 5}})
					if err == nil {
						err = results[0].Err
					}
					if err != nil {
						t.Errorf("Charge user=%d: %v", u, err)
						return
					}
					if results[0].Receipt.Replayed {
						replays.Add(1)
					}
				})
			}
		}
	}
	wg.Wait()
	each := int64(users * (2*callers - 1))
	if dups.Load() != each || replays.Load() != each {
		t.Fatalf("%d duplicate credits and %d replayed charges, want %d each", dups.Load(), replays.Load(), each)
	}
	for u := int64(1); u <= users; u++ {
		if b, err := nodes[0].Balance(ctx, u); err != nil || b != 75 {
			t.Fatalf("Balance(%d) = %d, %v; want 75", u, b, err)
		}
	}
	totals, err := nodes[1].Totals(ctx)
	if err != nil || totals.Imbalance() != 0 || totals.Pending.Charges != users || totals.Credits != users {
		t.Fatalf("Totals = %+v, %v", totals, err)
	}
}

// BenchmarkChargeSQLite measures charges/s with 64 concurrent callers, each
// charging one gift at a time, on a durable (synchronous=FULL) database.
func BenchmarkChargeSQLite(b *testing.B) {
	for _, mode := range []string{"FULL", "NORMAL"} {
		b.Run(mode, func(b *testing.B) {
			wallettest.Bench(b, openLedger(b, openSQLite(b, sqlite.Options{Synchronous: mode}), ledger.Options{}), 64)
		})
	}
}

// BenchmarkChargeMySQL measures charges/s with 64 concurrent callers, each
// charging one gift at a time, by number of committers.
func BenchmarkChargeMySQL(b *testing.B) {
	for _, workers := range []int{1, 2, 4} {
		b.Run(fmt.Sprintf("workers=%d", workers), func(b *testing.B) {
			wallettest.Bench(b, openLedger(b, openMySQL(b, mysqltest.DSN(b)), ledger.Options{Workers: workers}), 64)
		})
	}
}

// TestATopUpLeavesItsBalanceAsTheHint: the balance a credit leaves is the
// hint the sender's next gift is decided on, without a read; a refused
// credit changes nothing and leaves none.
func TestATopUpLeavesItsBalanceAsTheHint(t *testing.T) {
	for name, open := range map[string]func(t *testing.T) ledgerStore{
		"sqlite": func(t *testing.T) ledgerStore { return openSQLite(t, sqlite.Options{}) },
		"mysql":  func(t *testing.T) ledgerStore { return openMySQL(t, mysqltest.DSN(t)) },
	} {
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			l := openLedger(t, open(t), ledger.Options{})
			if b, ok := l.Hint([]int64{7}); ok {
				t.Fatalf("hint %v before any write", b)
			}
			if _, _, err := l.Credit(ctx, 7, 500, "top-up-1"); err != nil {
				t.Fatal(err)
			}
			if _, _, err := l.Credit(ctx, 7, 250, "top-up-2"); err != nil {
				t.Fatal(err)
			}
			if b, ok := l.Hint([]int64{7}); !ok || b[7] != 750 {
				t.Fatalf("hint %v (%v) after two top-ups, want 750", b, ok)
			}
			if _, _, err := l.Credit(ctx, 8, -1, "top-up-3"); err == nil {
				t.Fatal("a negative credit was taken")
			}
			if b, ok := l.Hint([]int64{8}); ok {
				t.Fatalf("hint %v after a refused credit, want none", b)
			}
			res, err := l.Charge(ctx, []wallet.Charge{{Key: "charge-1", UserID: 7, Amount: 50, At: time.Now()}})
			if err != nil || res[0].Err != nil {
				t.Fatalf("charge: %v %+v", err, res)
			}
			if b, ok := l.Hint([]int64{7}); !ok || b[7] != 700 {
				t.Fatalf("hint %v (%v) after a charge, want 700", b, ok)
			}
		})
	}
}

// TestACommitRefusesOnlyTheBatchWhoseChargeWasMade: a room commit whose
// batches charge gifts, one of them with a key charged before, refuses that
// batch alone (the merged attempt rolls back whole and runs again without
// it) and charges the others exactly once.
func TestACommitRefusesOnlyTheBatchWhoseChargeWasMade(t *testing.T) {
	type db interface {
		ledgerStore
		store.Repository
	}
	for name, open := range map[string]func(t *testing.T) db{
		"sqlite": func(t *testing.T) db { return openSQLite(t, sqlite.Options{}) },
		"mysql":  func(t *testing.T) db { return openMySQL(t, mysqltest.DSN(t)) },
	} {
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			repo := open(t)
			l := openLedger(t, repo, ledger.Options{})
			epochs := map[string]int64{}
			for _, id := range []string{"a", "b"} {
				if err := repo.SaveRoomMeta(ctx, store.RoomMeta{RoomID: id, SeatCount: 8, Status: "open"}); err != nil {
					t.Fatal(err)
				}
				c, err := repo.ClaimRoom(ctx, id, "node-a")
				if err != nil {
					t.Fatal(err)
				}
				epochs[id] = c.Epoch
			}
			for _, u := range []int64{1, 2} {
				if _, _, err := l.Credit(ctx, u, 100, fmt.Sprintf("top-up-%d", u)); err != nil {
					t.Fatal(err)
				}
			}
			// batch charges amount to user in room id at version v, deciding on balance.
			batch := func(id string, v int64, key string, user, amount, balance int64) store.Batch {
				return store.Batch{RoomID: id, OwnerEpoch: epochs[id], BaseVersion: v - 1,
					Commands: []store.CommandRecord{{RoomID: id, RoomVersion: v, CommandID: fmt.Sprintf("%s-%d", id, v), CommandType: "SendGift"}},
					Charges:  []store.GiftCharge{{Key: key, UserID: user, Amount: amount, BalanceAfter: balance - amount, AtMs: 1}}}
			}
			commit := func(batches ...store.Batch) []error {
				t.Helper()
				results, err := repo.CommitBatches(ctx, batches)
				if err != nil {
					t.Fatal(err)
				}
				return results
			}
			if r := commit(batch("a", 1, "k1", 1, 10, 100)); r[0] != nil {
				t.Fatal(r[0])
			}
			r := commit(batch("a", 2, "k1", 1, 10, 90), batch("b", 1, "k2", 2, 30, 100))
			if !errors.Is(r[0], store.ErrConflict) || r[1] != nil {
				t.Fatalf("results %v; want the charged key refused and the other batch committed", r)
			}
			for u, want := range map[int64]int64{1: 90, 2: 70} {
				if got, err := l.Balance(ctx, u); err != nil || got != want {
					t.Fatalf("user %d: balance %d, err %v; want %d", u, got, err, want)
				}
			}
			rooms, err := repo.ListRooms(ctx, "", 10)
			if err != nil || len(rooms) != 2 || rooms[0].Meta.RoomID != "a" || rooms[0].HeadVersion != 1 || rooms[1].HeadVersion != 1 {
				t.Fatalf("rooms %+v, err %v; want a and b at head 1: the refused batch wrote nothing", rooms, err)
			}

			// The same sender again, topped up back to 100: a batch
			// charging k1 again (refused: charged before) and one charging
			// a new key, both decided on 100. The second must not be
			// refused for a balance only the first one's charge would have
			// moved.
			if _, _, err := l.Credit(ctx, 1, 10, "top-up-again"); err != nil {
				t.Fatal(err)
			}
			r = commit(batch("a", 2, "k1", 1, 10, 100), batch("b", 2, "k3", 1, 10, 100))
			if !errors.Is(r[0], store.ErrConflict) || r[1] != nil {
				t.Fatalf("results %v; want the charged key refused and the other batch committed", r)
			}
			if got, err := l.Balance(ctx, 1); err != nil || got != 90 {
				t.Fatalf("user 1: balance %d, err %v; want 90", got, err)
			}
		})
	}
}
