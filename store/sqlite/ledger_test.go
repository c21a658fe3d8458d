package sqlite

import (
	"errors"
	"testing"

	"hyapp/room-service/store"
	"hyapp/room-service/wallet"
	"hyapp/room-service/wallet/wallettest"
)

func openLedger(t testing.TB, db *DB) *Ledger {
	t.Helper()
	l := NewLedger(db, LedgerOptions{})
	t.Cleanup(func() { _ = l.Close() }) // before db's Close, registered earlier
	return l
}

func TestLedger(t *testing.T) {
	wallettest.Run(t, func(t *testing.T) wallettest.Ledger {
		db, _ := openTemp(t, Options{})
		return openLedger(t, db)
	})
}

// TestLedgerSharedDB runs the suite with every subtest on one ledger, as
// the rooms of a node share it.
func TestLedgerSharedDB(t *testing.T) {
	db, _ := openTemp(t, Options{})
	l := openLedger(t, db)
	wallettest.Run(t, func(*testing.T) wallettest.Ledger { return l })
}

func TestLedgerClose(t *testing.T) {
	ctx := t.Context()
	db, _ := openTemp(t, Options{})
	l := NewLedger(db, LedgerOptions{})
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

// BenchmarkChargeSQLite measures charges/s with 64 concurrent callers, each
// charging one gift at a time, on a durable (synchronous=FULL) database.
func BenchmarkChargeSQLite(b *testing.B) {
	for _, mode := range []string{"FULL", "NORMAL"} {
		b.Run(mode, func(b *testing.B) {
			db, _ := openTemp(b, Options{Synchronous: mode})
			wallettest.Bench(b, openLedger(b, db), 64)
		})
	}
}
