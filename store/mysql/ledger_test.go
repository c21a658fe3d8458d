package mysql

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"hyapp/room-service/store/mysql/mysqltest"
	"hyapp/room-service/wallet"
	"hyapp/room-service/wallet/wallettest"
)

func openLedger(t testing.TB, db *DB) *Ledger {
	t.Helper()
	l := NewLedger(db, LedgerOptions{})
	t.Cleanup(func() { _ = l.Close() }) // before db's Close, registered earlier
	return l
}

// TestLedger runs the wallet contract suite with a fresh database per subtest.
func TestLedger(t *testing.T) {
	wallettest.Run(t, func(t *testing.T) wallettest.Ledger {
		return openLedger(t, openDSN(t, mysqltest.DSN(t), Options{}))
	})
}

// TestLedgerSharedDB runs the suite with every subtest on one database and
// a ledger of its own, as nodes share one database in production.
func TestLedgerSharedDB(t *testing.T) {
	db := openDSN(t, mysqltest.DSN(t), Options{})
	wallettest.Run(t, func(t *testing.T) wallettest.Ledger { return openLedger(t, db) })
}

// BenchmarkChargeMySQL measures charges/s with 64 concurrent callers, each
// charging one gift at a time, by number of committers.
func BenchmarkChargeMySQL(b *testing.B) {
	for _, workers := range []int{1, 2, 4} {
		b.Run(fmt.Sprintf("workers=%d", workers), func(b *testing.B) {
			db := openDSN(b, mysqltest.DSN(b), Options{})
			l := NewLedger(db, LedgerOptions{Workers: workers})
			b.Cleanup(func() { _ = l.Close() })
			wallettest.Bench(b, l, 64)
		})
	}
}

// TestLedgerTwoNodes has the ledgers of two nodes, four committers each,
// race on one database: on new accounts, on one credit key, on one charge
// key. Every race ends in exactly one write, through the duplicate key
// that sends the loser's transaction round again.
func TestLedgerTwoNodes(t *testing.T) {
	ctx := t.Context()
	dsn := mysqltest.DSN(t)
	nodes := []*Ledger{openLedger(t, openDSN(t, dsn, Options{})), openLedger(t, openDSN(t, dsn, Options{}))}
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
