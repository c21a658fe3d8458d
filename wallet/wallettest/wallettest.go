// Package wallettest is the one contract suite every embedded ledger runs
// (wallet/ledger on SQLite and on MySQL): wallet.Wallet as its doc comments define it,
// plus the journal and totals the ledgers expose. It asserts through the
// interface and the wallet sentinels (errors.Is), never on message text,
// and it gives every test users and keys of its own, so it can run on a
// shared database.
package wallettest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"math/big"
	mrand "math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"hyapp/room-service/room"
	"hyapp/room-service/wallet"
)

// Ledger is what the suite tests: the wallet port, the journal and the totals.
type Ledger interface {
	wallet.Wallet
	// Entries lists up to limit of the user's journal entries with an id
	// above afterEntryID, in id order.
	Entries(ctx context.Context, userID int64, afterEntryID int64, limit int) ([]wallet.Entry, error)
	// EntriesBefore lists up to limit of the user's journal entries with an
	// id below beforeEntryID (0: from the newest), newest first.
	EntriesBefore(ctx context.Context, userID int64, beforeEntryID int64, limit int) ([]wallet.Entry, error)
	// Totals sums the whole ledger from one snapshot.
	Totals(ctx context.Context) (wallet.Totals, error)
}

// Run runs the contract suite. newWallet returns the ledger a subtest uses
// and owns its cleanup (t.Cleanup); it may hand every subtest the same
// database. The totals test, which compares the whole ledger before and
// after its own changes, runs first and alone; the others then run in
// parallel.
func Run(t *testing.T, newWallet func(t *testing.T) Ledger) {
	t.Run("Totals", func(t *testing.T) { testTotals(t, newWallet(t)) })
	tests := []struct {
		name string
		fn   func(t *testing.T, l Ledger)
	}{
		{"ChargeReplay", testChargeReplay},
		{"KeyConflict", testKeyConflict},
		{"InsufficientFunds", testInsufficientFunds},
		{"BalanceNeverNegative", testBalanceNeverNegative},
		{"BadRequest", testBadRequest},
		{"Overflow", testOverflow},
		{"BatchOrder", testBatchOrder},
		{"ConcurrentSharedAccount", testConcurrentSharedAccount},
		{"ConcurrentSameKey", testConcurrentSameKey},
		{"ConcurrentMixed", testConcurrentMixed},
		{"Refund", testRefund},
		{"RefundInsufficient", testRefundInsufficient},
		{"Settle", testSettle},
		{"Pending", testPending},
		{"Credit", testCredit},
		{"CreditRetry", testCreditRetry},
		{"Entries", testEntries},
		{"CanceledContext", testCanceledContext},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, newWallet(t))
		})
	}
}

// ids hands out user ids and keys no other test uses, also across runs on
// one database: a random base, then a counter.
var ids = struct {
	user   atomic.Int64
	prefix string
	key    atomic.Int64
}{}

func init() {
	n, err := rand.Int(rand.Reader, big.NewInt(1<<40))
	if err != nil {
		panic(err)
	}
	ids.user.Store(n.Int64() << 20)
	var b [6]byte
	_, _ = rand.Read(b[:])
	ids.prefix = hex.EncodeToString(b[:])
}

func newUser() int64 { return ids.user.Add(1) }

func newKey(t testing.TB) string {
	return fmt.Sprintf("wt-%s/%s-%d", ids.prefix, shortName(t), ids.key.Add(1))
}

func shortName(t testing.TB) string {
	name := t.Name()
	for i := len(name) - 1; i >= 0; i-- {
		if name[i] == '/' {
			name = name[i+1:]
			break
		}
	}
	return name[:min(len(name), 24)]
}

func charge(key string, user, amount, reward int64) wallet.Charge {
	return wallet.Charge{Key: key, UserID: user, Amount: amount, Reward: reward, MultiplierBP: 10000 + reward, At: time.Now()}
}

func testChargeReplay(t *testing.T, l Ledger) {
	ctx := t.Context()
	u := newUser()
	mustCredit(t, l, u, 1000)
	key := newKey(t)
	at := time.Date(2030, 1, 2, 3, 4, 5, 678_901_234, time.UTC)
	first := wallet.Charge{Key: key, UserID: u, Amount: 100, Reward: 30, MultiplierBP: 3000, At: at}
	r := mustCharge(t, l, first)
	want := wallet.Receipt{Charge: first, BalanceAfter: 930, Status: wallet.StatusPending}
	want.At = at.Truncate(time.Millisecond)
	checkReceipt(t, "first charge", r, want)

	// A retry carrying another draw gets the first receipt back.
	again := first
	again.Reward, again.MultiplierBP, again.At = 500, 50000, at.Add(time.Hour)
	r = mustCharge(t, l, again)
	want.Replayed = true
	checkReceipt(t, "replay", r, want)
	mustBalance(t, l, u, 930)

	got, found, err := l.Receipt(ctx, key)
	if err != nil || !found {
		t.Fatalf("Receipt = found %v, err %v", found, err)
	}
	want.Replayed = false
	checkReceipt(t, "Receipt", got, want)

	// A replay returns the receipt whatever its status.
	if err := l.Settle(ctx, []string{key}); err != nil {
		t.Fatalf("Settle: %v", err)
	}
	r = mustCharge(t, l, again)
	want.Replayed, want.Status = true, wallet.StatusSettled
	checkReceipt(t, "replay after settle", r, want)
	mustBalance(t, l, u, 930)
	if _, found, err := l.Receipt(ctx, newKey(t)); err != nil || found {
		t.Fatalf("Receipt(unknown) = found %v, err %v; want not found", found, err)
	}
	checkAudit(t, l, u)
}

func testKeyConflict(t *testing.T, l Ledger) {
	u, other := newUser(), newUser()
	mustCredit(t, l, u, 1000)
	mustCredit(t, l, other, 1000)
	key := newKey(t)
	mustCharge(t, l, charge(key, u, 100, 0))
	for _, c := range []wallet.Charge{charge(key, u, 101, 0), charge(key, other, 100, 0)} {
		if _, err := chargeOne(t, l, c); !errors.Is(err, wallet.ErrKeyConflict) {
			t.Fatalf("Charge(%+v) with a used key: err %v, want ErrKeyConflict", c, err)
		}
	}
	mustBalance(t, l, u, 900)
	mustBalance(t, l, other, 1000)
	checkAudit(t, l, u, other)
}

func testInsufficientFunds(t *testing.T, l Ledger) {
	ctx := t.Context()
	u, stranger := newUser(), newUser()
	mustCredit(t, l, u, 50)
	before := mustEntries(t, l, u)
	key := newKey(t)
	_, err := chargeOne(t, l, charge(key, u, 100, 90))
	if !errors.Is(err, wallet.ErrInsufficientFunds) {
		t.Fatalf("Charge over the balance: err %v, want ErrInsufficientFunds", err)
	}
	// The refusal says how short the balance is.
	if md := room.AsError(err).Metadata; md["balance"] != "50" || md["needed"] != "100" {
		t.Fatalf("ErrInsufficientFunds metadata = %v, want balance 50 and needed 100", md)
	}
	mustBalance(t, l, u, 50)
	if after := mustEntries(t, l, u); len(after) != len(before) {
		t.Fatalf("a refused charge wrote entries: %d before, %d after", len(before), len(after))
	}
	if _, found, err := l.Receipt(ctx, key); err != nil || found {
		t.Fatalf("Receipt of a refused charge = found %v, err %v; want not found", found, err)
	}
	if _, err := chargeOne(t, l, charge(newKey(t), stranger, 1, 0)); !errors.Is(err, wallet.ErrInsufficientFunds) {
		t.Fatalf("Charge of an unknown user: err %v, want ErrInsufficientFunds", err)
	}
	mustBalance(t, l, stranger, 0)

	// The refused key is free: once the balance covers it, it charges.
	mustCredit(t, l, u, 50)
	r := mustCharge(t, l, charge(key, u, 100, 90))
	if r.Replayed || r.BalanceAfter != 90 || r.Status != wallet.StatusPending {
		t.Fatalf("charge after credit = %+v, want a new pending charge leaving 90", r)
	}
	mustBalance(t, l, u, 90)
	checkAudit(t, l, u, stranger)
}

func testBalanceNeverNegative(t *testing.T, l Ledger) {
	u := newUser()
	mustCredit(t, l, u, 100)
	// The balance must cover the amount before the reward.
	if _, err := chargeOne(t, l, charge(newKey(t), u, 101, 1000)); !errors.Is(err, wallet.ErrInsufficientFunds) {
		t.Fatalf("Charge of 101 with a reward on 100: err %v, want ErrInsufficientFunds", err)
	}
	if r := mustCharge(t, l, charge(newKey(t), u, 100, 0)); r.BalanceAfter != 0 {
		t.Fatalf("charge of the whole balance left %d, want 0", r.BalanceAfter)
	}
	if _, err := chargeOne(t, l, charge(newKey(t), u, 1, 0)); !errors.Is(err, wallet.ErrInsufficientFunds) {
		t.Fatalf("Charge on an empty balance: err %v, want ErrInsufficientFunds", err)
	}
	mustBalance(t, l, u, 0)
	checkAudit(t, l, u)
}

func testBadRequest(t *testing.T, l Ledger) {
	ctx := t.Context()
	u := newUser()
	mustCredit(t, l, u, 1000)
	long := make([]byte, wallet.MaxKeyLen+1)
	for i := range long {
		long[i] = 'k'
	}
	bad := []wallet.Charge{
		{Key: "", UserID: u, Amount: 1},
		{Key: string(long), UserID: u, Amount: 1},
		{Key: newKey(t), UserID: 0, Amount: 1},
		{Key: newKey(t), UserID: u, Amount: 0},
		{Key: newKey(t), UserID: u, Amount: -5},
		{Key: newKey(t), UserID: u, Amount: 1, Reward: -1},
		{Key: newKey(t), UserID: u, Amount: 1, MultiplierBP: -1},
	}
	good := charge(newKey(t), u, 10, 0)
	results, err := l.Charge(ctx, append(bad, good))
	if err != nil {
		t.Fatalf("Charge: %v", err)
	}
	for i := range bad {
		if !errors.Is(results[i].Err, wallet.ErrBadRequest) {
			t.Errorf("Charge(%+v): err %v, want ErrBadRequest", bad[i], results[i].Err)
		}
	}
	if r := results[len(bad)]; r.Err != nil || r.Receipt.BalanceAfter != 990 {
		t.Fatalf("good charge among bad ones = %+v, want balance 990", r)
	}
	// A call with nothing valid changes nothing either.
	if results, err := l.Charge(ctx, bad[:1]); err != nil || !errors.Is(results[0].Err, wallet.ErrBadRequest) {
		t.Fatalf("Charge(bad only) = %+v, %v", results, err)
	}
	if results, err := l.Charge(ctx, nil); err != nil || len(results) != 0 {
		t.Fatalf("Charge(nil) = %+v, %v", results, err)
	}
	for _, c := range []struct {
		user, amount int64
		key          string
	}{{0, 1, newKey(t)}, {u, 0, newKey(t)}, {u, -1, newKey(t)}, {u, 1, ""}, {u, 1, string(long)}} {
		if _, _, err := l.Credit(ctx, c.user, c.amount, c.key); !errors.Is(err, wallet.ErrBadRequest) {
			t.Errorf("Credit(%d, %d, %q): err %v, want ErrBadRequest", c.user, c.amount, c.key, err)
		}
	}
	mustBalance(t, l, u, 990)
	checkAudit(t, l, u)
}

func testOverflow(t *testing.T, l Ledger) {
	ctx := t.Context()
	u := newUser()
	mustCredit(t, l, u, math.MaxInt64-10)
	if _, _, err := l.Credit(ctx, u, 11, newKey(t)); !errors.Is(err, wallet.ErrBadRequest) {
		t.Fatalf("Credit past MaxInt64: err %v, want ErrBadRequest", err)
	}
	if _, err := chargeOne(t, l, charge(newKey(t), u, 1, 12)); !errors.Is(err, wallet.ErrBadRequest) {
		t.Fatalf("Charge whose reward overflows: err %v, want ErrBadRequest", err)
	}
	mustBalance(t, l, u, math.MaxInt64-10)
	// Up to the limit is fine.
	if _, _, err := l.Credit(ctx, u, 10, newKey(t)); err != nil {
		t.Fatalf("Credit up to MaxInt64: %v", err)
	}
	mustBalance(t, l, u, math.MaxInt64)
	checkAudit(t, l, u)
}

func testBatchOrder(t *testing.T, l Ledger) {
	ctx := t.Context()
	u := newUser()
	mustCredit(t, l, u, 150)
	k1, k2, k3 := newKey(t), newKey(t), newKey(t)
	results, err := l.Charge(ctx, []wallet.Charge{
		charge(k1, u, 100, 0), // 150 -> 50
		charge(k2, u, 100, 0), // 50 does not cover 100
		charge(k1, u, 100, 7), // the same key again: a replay of the first
		charge(k1, u, 60, 0),  // the same key, another amount
		charge(k3, u, 50, 20), // 50 -> 0 -> 20
	})
	if err != nil {
		t.Fatalf("Charge: %v", err)
	}
	if r := results[0]; r.Err != nil || r.Receipt.BalanceAfter != 50 || r.Receipt.Replayed {
		t.Errorf("results[0] = %+v, want a charge leaving 50", r)
	}
	if r := results[1]; !errors.Is(r.Err, wallet.ErrInsufficientFunds) {
		t.Errorf("results[1] = %+v, want ErrInsufficientFunds", r)
	}
	if r := results[2]; r.Err != nil || !r.Receipt.Replayed || r.Receipt.BalanceAfter != 50 || r.Receipt.Reward != 0 {
		t.Errorf("results[2] = %+v, want a replay of results[0]", r)
	}
	if r := results[3]; !errors.Is(r.Err, wallet.ErrKeyConflict) {
		t.Errorf("results[3] = %+v, want ErrKeyConflict", r)
	}
	if r := results[4]; r.Err != nil || r.Receipt.BalanceAfter != 20 {
		t.Errorf("results[4] = %+v, want a charge leaving 20", r)
	}
	mustBalance(t, l, u, 20)

	// A reward earlier in the call pays for a later charge.
	v := newUser()
	mustCredit(t, l, v, 100)
	results, err = l.Charge(ctx, []wallet.Charge{charge(newKey(t), v, 100, 100), charge(newKey(t), v, 100, 0)})
	if err != nil || results[0].Err != nil || results[1].Err != nil || results[1].Receipt.BalanceAfter != 0 {
		t.Fatalf("Charge paid by a reward = %+v, %v", results, err)
	}
	checkAudit(t, l, u, v)
}

// testConcurrentSharedAccount has 50 callers charge one account at once,
// with keys of their own: as many succeed as the balance covers, whatever
// the order.
func testConcurrentSharedAccount(t *testing.T, l Ledger) {
	const (
		callers = 50
		credit  = 1000
		amount  = 100
		reward  = 40
	)
	u := newUser()
	mustCredit(t, l, u, credit)
	var ok, refused atomic.Int64
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() {
			_, err := chargeOne(t, l, charge(newKey(t), u, amount, reward))
			switch {
			case err == nil:
				ok.Add(1)
			case errors.Is(err, wallet.ErrInsufficientFunds):
				refused.Add(1)
			default:
				t.Errorf("Charge: %v", err)
			}
		})
	}
	wg.Wait()
	// Each success nets amount-reward; one succeeds while the balance covers amount.
	wantOK := int64(0)
	for b := int64(credit); b >= amount && wantOK < callers; b -= amount - reward {
		wantOK++
	}
	if ok.Load() != wantOK || refused.Load() != callers-wantOK {
		t.Fatalf("%d charges succeeded and %d were refused, want %d and %d", ok.Load(), refused.Load(), wantOK, callers-wantOK)
	}
	mustBalance(t, l, u, credit-wantOK*(amount-reward))
	checkAudit(t, l, u)
}

// testConcurrentSameKey has many callers charge one key at once: one
// charge, the same receipt for all.
func testConcurrentSameKey(t *testing.T, l Ledger) {
	const callers = 20
	u := newUser()
	mustCredit(t, l, u, 1000)
	key := newKey(t)
	receipts := make([]wallet.Receipt, callers)
	var wg sync.WaitGroup
	for i := range callers {
		wg.Go(func() {
			r, err := chargeOne(t, l, charge(key, u, 100, int64(i)))
			if err != nil {
				t.Errorf("Charge: %v", err)
			}
			receipts[i] = r
		})
	}
	wg.Wait()
	fresh := 0
	for _, r := range receipts {
		if !r.Replayed {
			fresh++
		}
		if r.Reward != receipts[0].Reward || r.BalanceAfter != 900+r.Reward {
			t.Errorf("receipt %+v differs from %+v", r, receipts[0])
		}
	}
	if fresh != 1 {
		t.Fatalf("%d receipts are not replays, want 1", fresh)
	}
	mustBalance(t, l, u, 900+receipts[0].Reward)
	checkAudit(t, l, u)
}

// testConcurrentMixed has callers credit, charge, refund and settle a few
// shared accounts at once, and checks every balance against the answers.
func testConcurrentMixed(t *testing.T, l Ledger) {
	const (
		users   = 6
		callers = 24
		rounds  = 25
	)
	ctx := t.Context()
	accounts := make([]int64, users)
	for i := range accounts {
		accounts[i] = newUser()
		mustCredit(t, l, accounts[i], 500)
	}
	var mu sync.Mutex
	want := map[int64]int64{}
	for _, u := range accounts {
		want[u] = 500
	}
	add := func(u, delta int64) {
		mu.Lock()
		want[u] += delta
		mu.Unlock()
	}
	var wg sync.WaitGroup
	for c := range callers {
		wg.Go(func() {
			rng := mrand.New(mrand.NewPCG(uint64(c), 7))
			var mine []wallet.Charge // pending charges of this caller
			for range rounds {
				u := accounts[rng.IntN(users)]
				switch op := rng.IntN(10); {
				case op < 2:
					amount := int64(1 + rng.IntN(100))
					if _, dup, err := l.Credit(ctx, u, amount, newKey(t)); err != nil || dup {
						t.Errorf("Credit: dup %v, err %v", dup, err)
						return
					}
					add(u, amount)
				case op < 7:
					batch := make([]wallet.Charge, 1+rng.IntN(3))
					for i := range batch {
						batch[i] = charge(newKey(t), u, int64(1+rng.IntN(80)), int64(rng.IntN(40)))
					}
					results, err := l.Charge(ctx, batch)
					if err != nil {
						t.Errorf("Charge: %v", err)
						return
					}
					for i, r := range results {
						switch {
						case r.Err == nil:
							add(u, batch[i].Reward-batch[i].Amount)
							mine = append(mine, batch[i])
						case !errors.Is(r.Err, wallet.ErrInsufficientFunds):
							t.Errorf("Charge: %v", r.Err)
						}
					}
				case len(mine) > 0 && op < 9:
					c := mine[len(mine)-1]
					mine = mine[:len(mine)-1]
					switch _, err := l.Refund(ctx, c.Key); {
					case err == nil:
						add(c.UserID, c.Amount-c.Reward)
					case errors.Is(err, wallet.ErrInsufficientFunds):
					default:
						t.Errorf("Refund: %v", err)
					}
				case len(mine) > 0:
					keys := make([]string, len(mine))
					for i := range mine {
						keys[i] = mine[i].Key
					}
					if err := l.Settle(ctx, keys); err != nil {
						t.Errorf("Settle: %v", err)
					}
					mine = nil
				}
			}
		})
	}
	wg.Wait()
	for _, u := range accounts {
		mustBalance(t, l, u, want[u])
	}
	checkAudit(t, l, accounts...)
}

func testRefund(t *testing.T, l Ledger) {
	ctx := t.Context()
	u := newUser()
	mustCredit(t, l, u, 1000)
	key := newKey(t)
	c := charge(key, u, 100, 30)
	first := mustCharge(t, l, c)
	mustBalance(t, l, u, 930)

	r, err := l.Refund(ctx, key)
	if err != nil {
		t.Fatalf("Refund: %v", err)
	}
	want := first
	want.Status = wallet.StatusRefunded
	checkReceipt(t, "refund", r, want)
	mustBalance(t, l, u, 1000)

	r, err = l.Refund(ctx, key)
	if err != nil {
		t.Fatalf("Refund again: %v", err)
	}
	want.Replayed = true
	checkReceipt(t, "refund again", r, want)
	mustBalance(t, l, u, 1000)
	// The key stays used: a charge with it is a replay of the refunded charge.
	checkReceipt(t, "charge after refund", mustCharge(t, l, c), want)
	mustBalance(t, l, u, 1000)

	// Settle leaves a refunded charge alone.
	if err := l.Settle(ctx, []string{key}); err != nil {
		t.Fatalf("Settle: %v", err)
	}
	if got, _, err := l.Receipt(ctx, key); err != nil || got.Status != wallet.StatusRefunded {
		t.Fatalf("Receipt after settling a refunded charge = %+v, %v", got, err)
	}

	settled := newKey(t)
	mustCharge(t, l, charge(settled, u, 10, 0))
	if err := l.Settle(ctx, []string{settled}); err != nil {
		t.Fatalf("Settle: %v", err)
	}
	if _, err := l.Refund(ctx, settled); !errors.Is(err, wallet.ErrFinal) {
		t.Fatalf("Refund(settled): err %v, want ErrFinal", err)
	}
	if _, err := l.Refund(ctx, newKey(t)); !errors.Is(err, wallet.ErrNotFound) {
		t.Fatalf("Refund(unknown): err %v, want ErrNotFound", err)
	}
	if _, err := l.Refund(ctx, ""); !errors.Is(err, wallet.ErrBadRequest) {
		t.Fatalf("Refund(\"\"): err %v, want ErrBadRequest", err)
	}
	mustBalance(t, l, u, 990)
	checkAudit(t, l, u)
}

// testRefundInsufficient refunds a charge whose reward was spent: refused,
// nothing changes, and it goes through once the balance covers the reward.
func testRefundInsufficient(t *testing.T, l Ledger) {
	ctx := t.Context()
	u := newUser()
	mustCredit(t, l, u, 100)
	lucky := newKey(t)
	mustCharge(t, l, charge(lucky, u, 100, 500)) // 100 -> 500
	mustCharge(t, l, charge(newKey(t), u, 500, 0))
	before := mustEntries(t, l, u)
	if _, err := l.Refund(ctx, lucky); !errors.Is(err, wallet.ErrInsufficientFunds) {
		t.Fatalf("Refund of a spent reward: err %v, want ErrInsufficientFunds", err)
	}
	mustBalance(t, l, u, 0)
	if after := mustEntries(t, l, u); len(after) != len(before) {
		t.Fatalf("a refused refund wrote entries: %d before, %d after", len(before), len(after))
	}
	if r, _, err := l.Receipt(ctx, lucky); err != nil || r.Status != wallet.StatusPending {
		t.Fatalf("Receipt after a refused refund = %+v, %v; want pending", r, err)
	}
	mustCredit(t, l, u, 400)
	if r, err := l.Refund(ctx, lucky); err != nil || r.Status != wallet.StatusRefunded || r.Replayed {
		t.Fatalf("Refund after credit = %+v, %v", r, err)
	}
	mustBalance(t, l, u, 0)
	checkAudit(t, l, u)
}

func testSettle(t *testing.T, l Ledger) {
	ctx := t.Context()
	u := newUser()
	mustCredit(t, l, u, 1000)
	a, b, refunded := newKey(t), newKey(t), newKey(t)
	for _, k := range []string{a, b, refunded} {
		mustCharge(t, l, charge(k, u, 10, 5))
	}
	if _, err := l.Refund(ctx, refunded); err != nil {
		t.Fatalf("Refund: %v", err)
	}
	if err := l.Settle(ctx, nil); err != nil {
		t.Fatalf("Settle(nil): %v", err)
	}
	keys := []string{a, newKey(t), refunded, a, "", b}
	for range 2 {
		if err := l.Settle(ctx, keys); err != nil {
			t.Fatalf("Settle: %v", err)
		}
	}
	for k, want := range map[string]wallet.Status{a: wallet.StatusSettled, b: wallet.StatusSettled, refunded: wallet.StatusRefunded} {
		if r, found, err := l.Receipt(ctx, k); err != nil || !found || r.Status != want {
			t.Errorf("Receipt(%s) = %+v, found %v, err %v; want %s", k, r, found, err, want)
		}
	}
	mustBalance(t, l, u, 990)
	checkAudit(t, l, u)
}

func testPending(t *testing.T, l Ledger) {
	ctx := t.Context()
	u := newUser()
	mustCredit(t, l, u, 1000)
	// A past no other test charges at, so only this test's charges are that old.
	base := time.Date(1990, 1, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(ids.user.Load()%1_000_000) * time.Minute)
	at := func(d time.Duration) time.Time { return base.Add(d) }
	mk := func(d time.Duration) wallet.Charge {
		c := charge(newKey(t), u, 10, 0)
		c.At = at(d)
		mustCharge(t, l, c)
		return c
	}
	c3, c1, c2 := mk(3*time.Second), mk(time.Second), mk(2*time.Second)
	settled, refunded := mk(500*time.Millisecond), mk(600*time.Millisecond)
	mk(time.Hour)
	if err := l.Settle(ctx, []string{settled.Key}); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Refund(ctx, refunded.Key); err != nil {
		t.Fatal(err)
	}
	got, err := l.Pending(ctx, at(3*time.Second), wallet.Cursor{}, 100)
	if err != nil {
		t.Fatalf("Pending: %v", err)
	}
	if len(got) != 2 || got[0].Key != c1.Key || got[1].Key != c2.Key {
		t.Fatalf("Pending(before c3) = %+v, want c1, c2", got)
	}
	if !got[0].At.Equal(c1.At) || got[0].Status != wallet.StatusPending || got[0].UserID != u || got[0].Amount != 10 {
		t.Fatalf("Pending receipt %+v does not match the charge %+v", got[0], c1)
	}
	if got, err := l.Pending(ctx, at(3*time.Second+time.Microsecond), wallet.Cursor{}, 100); err != nil || len(got) != 3 || got[2].Key != c3.Key {
		t.Fatalf("Pending(just after c3) = %+v, %v; want c1, c2, c3", got, err)
	}
	if got, err := l.Pending(ctx, at(time.Hour), wallet.Cursor{}, 1); err != nil || len(got) != 1 || got[0].Key != c1.Key {
		t.Fatalf("Pending(limit 1) = %+v, %v; want c1", got, err)
	}
	if got, err := l.Pending(ctx, at(time.Hour), wallet.Cursor{}, 0); err != nil || len(got) != 0 {
		t.Fatalf("Pending(limit 0) = %+v, %v; want nothing", got, err)
	}
	// Paging: after c1 come c2 and c3, after c3 nothing before the cutoff.
	first, err := l.Pending(ctx, at(time.Hour), wallet.Cursor{}, 1)
	if err != nil || len(first) != 1 {
		t.Fatalf("Pending page 1 = %+v, %v", first, err)
	}
	if got, err := l.Pending(ctx, at(time.Hour), wallet.CursorOf(first[0]), 2); err != nil || len(got) != 2 || got[0].Key != c2.Key || got[1].Key != c3.Key {
		t.Fatalf("Pending after c1 = %+v, %v; want c2, c3", got, err)
	}
	// Two charges at one millisecond are ordered by key and neither is skipped.
	twinA, twinB := mk(4*time.Second), mk(4*time.Second)
	if twinB.Key < twinA.Key {
		twinA, twinB = twinB, twinA
	}
	if got, err := l.Pending(ctx, at(5*time.Second), wallet.Cursor{At: twinA.At, Key: twinA.Key}, 10); err != nil || len(got) != 1 || got[0].Key != twinB.Key {
		t.Fatalf("Pending after the first twin = %+v, %v; want the second", got, err)
	}
	checkAudit(t, l, u)
}

func testCredit(t *testing.T, l Ledger) {
	ctx := t.Context()
	u, other := newUser(), newUser()
	key := newKey(t)
	if b, dup, err := l.Credit(ctx, u, 100, key); err != nil || dup || b != 100 {
		t.Fatalf("Credit = %d, dup %v, err %v; want 100", b, dup, err)
	}
	if b, dup, err := l.Credit(ctx, u, 100, key); err != nil || !dup || b != 100 {
		t.Fatalf("Credit again = %d, dup %v, err %v; want 100, duplicate", b, dup, err)
	}
	mustCharge(t, l, charge(newKey(t), u, 30, 0))
	// A duplicate answers as the first credit did, not with today's balance.
	if b, dup, err := l.Credit(ctx, u, 100, key); err != nil || !dup || b != 100 {
		t.Fatalf("Credit after a charge = %d, dup %v, err %v; want the first answer 100, duplicate", b, dup, err)
	}
	if _, _, err := l.Credit(ctx, u, 99, key); !errors.Is(err, wallet.ErrKeyConflict) {
		t.Fatalf("Credit with another amount: err %v, want ErrKeyConflict", err)
	}
	if _, _, err := l.Credit(ctx, other, 100, key); !errors.Is(err, wallet.ErrKeyConflict) {
		t.Fatalf("Credit to another user: err %v, want ErrKeyConflict", err)
	}
	// A credit key and a charge key live apart.
	if b, dup, err := l.Credit(ctx, u, 5, newKey(t)); err != nil || dup || b != 75 {
		t.Fatalf("second Credit = %d, dup %v, err %v; want 75", b, dup, err)
	}
	mustBalance(t, l, u, 75)
	mustBalance(t, l, other, 0)

	// Concurrent credits with one key credit once.
	shared, v := newKey(t), newUser()
	var dups atomic.Int64
	var wg sync.WaitGroup
	for range 10 {
		wg.Go(func() {
			_, dup, err := l.Credit(ctx, v, 7, shared)
			if err != nil {
				t.Errorf("Credit: %v", err)
			}
			if dup {
				dups.Add(1)
			}
		})
	}
	wg.Wait()
	if dups.Load() != 9 {
		t.Fatalf("%d of 10 concurrent credits were duplicates, want 9", dups.Load())
	}
	mustBalance(t, l, v, 7)
	checkAudit(t, l, u, other, v)
}

// testCreditRetry: a retried credit answers the balance right after the
// original credit, whatever came after it, and a key reused for another
// user or amount is refused and changes nothing.
func testCreditRetry(t *testing.T, l Ledger) {
	ctx := t.Context()
	u, other := newUser(), newUser()
	k1, k2 := newKey(t), newKey(t)
	steps := []struct {
		name   string
		user   int64
		amount int64
		key    string
		want   int64
		dup    bool
	}{
		{"credit k1", u, 100, k1, 100, false},
		{"credit k2", u, 50, k2, 150, false},
		{"retry k1", u, 100, k1, 100, true},
		{"retry k2", u, 50, k2, 150, true},
	}
	for _, s := range steps {
		if b, dup, err := l.Credit(ctx, s.user, s.amount, s.key); err != nil || dup != s.dup || b != s.want {
			t.Fatalf("%s: balance %d, dup %v, err %v; want %d, dup %v", s.name, b, dup, err, s.want, s.dup)
		}
	}
	conflicts := []struct {
		name         string
		user, amount int64
	}{
		{"another amount", u, 101},
		{"another user", other, 100},
	}
	for _, c := range conflicts {
		b, dup, err := l.Credit(ctx, c.user, c.amount, k1)
		if !errors.Is(err, wallet.ErrKeyConflict) || room.AsError(err).Reason != wallet.ErrKeyConflict.Reason {
			t.Fatalf("retry k1 with %s: balance %d, dup %v, err %v; want ErrKeyConflict", c.name, b, dup, err)
		}
	}
	mustBalance(t, l, u, 150)
	mustBalance(t, l, other, 0)
	checkAudit(t, l, u, other)
}

func testEntries(t *testing.T, l Ledger) {
	ctx := t.Context()
	u := newUser()
	credit := newKey(t)
	if _, _, err := l.Credit(ctx, u, 1000, credit); err != nil {
		t.Fatal(err)
	}
	plain, lucky := newKey(t), newKey(t)
	mustCharge(t, l, charge(plain, u, 100, 0))
	mustCharge(t, l, charge(lucky, u, 200, 50))
	if _, err := l.Refund(ctx, lucky); err != nil {
		t.Fatal(err)
	}
	got := mustEntries(t, l, u)
	want := []wallet.Entry{
		{UserID: u, Kind: wallet.EntryCredit, Amount: 1000, BalanceAfter: 1000, Key: credit},
		{UserID: u, Kind: wallet.EntryGiftDebit, Amount: -100, BalanceAfter: 900, Key: plain},
		{UserID: u, Kind: wallet.EntryGiftDebit, Amount: -200, BalanceAfter: 700, Key: lucky},
		{UserID: u, Kind: wallet.EntryLuckyReward, Amount: 50, BalanceAfter: 750, Key: lucky},
		{UserID: u, Kind: wallet.EntryRefund, Amount: 200, BalanceAfter: 950, Key: lucky},
		{UserID: u, Kind: wallet.EntryRefundReward, Amount: -50, BalanceAfter: 900, Key: lucky},
	}
	if len(got) != len(want) {
		t.Fatalf("entries = %+v, want %d", got, len(want))
	}
	for i := range want {
		g := got[i]
		if g.CreatedAt.IsZero() || time.Since(g.CreatedAt) > time.Hour {
			t.Errorf("entry %d created at %v", i, g.CreatedAt)
		}
		g.EntryID, g.CreatedAt = 0, time.Time{}
		if g != want[i] {
			t.Errorf("entry %d = %+v, want %+v", i, g, want[i])
		}
	}
	// Paging.
	page, err := l.Entries(ctx, u, got[1].EntryID, 2)
	if err != nil || len(page) != 2 || page[0].EntryID != got[2].EntryID || page[1].EntryID != got[3].EntryID {
		t.Fatalf("Entries(after 2nd, limit 2) = %+v, %v", page, err)
	}
	if page, err := l.Entries(ctx, u, got[len(got)-1].EntryID, 10); err != nil || len(page) != 0 {
		t.Fatalf("Entries(after last) = %+v, %v", page, err)
	}
	if page, err := l.Entries(ctx, u, 0, 0); err != nil || len(page) != 0 {
		t.Fatalf("Entries(limit 0) = %+v, %v", page, err)
	}
	// Newest first, paged by the last id returned.
	var back []wallet.Entry
	for before := int64(0); ; {
		page, err := l.EntriesBefore(ctx, u, before, 4)
		if err != nil {
			t.Fatal(err)
		}
		back = append(back, page...)
		if len(page) < 4 {
			break
		}
		before = page[len(page)-1].EntryID
	}
	if len(back) != len(got) {
		t.Fatalf("EntriesBefore pages = %d entries, want %d", len(back), len(got))
	}
	for i := range back {
		if back[i] != got[len(got)-1-i] {
			t.Fatalf("EntriesBefore entry %d = %+v, want %+v", i, back[i], got[len(got)-1-i])
		}
	}
	if page, err := l.EntriesBefore(ctx, u, got[0].EntryID, 10); err != nil || len(page) != 0 {
		t.Fatalf("EntriesBefore(the first) = %+v, %v", page, err)
	}
	checkAudit(t, l, u)
}

func testTotals(t *testing.T, l Ledger) {
	ctx := t.Context()
	before, err := l.Totals(ctx)
	if err != nil {
		t.Fatalf("Totals: %v", err)
	}
	if d := before.Imbalance(); d != 0 {
		t.Fatalf("ledger is off by %d before the test: %+v", d, before)
	}
	u, v := newUser(), newUser()
	mustCredit(t, l, u, 1000)
	mustCredit(t, l, v, 500)
	keys := make([]string, 6)
	for i := range keys {
		keys[i] = newKey(t)
	}
	mustCharge(t, l, charge(keys[0], u, 100, 10))
	mustCharge(t, l, charge(keys[1], u, 200, 0))
	mustCharge(t, l, charge(keys[2], v, 50, 25))
	mustCharge(t, l, charge(keys[3], v, 60, 0))
	mustCharge(t, l, charge(keys[4], u, 70, 700))
	if _, err := chargeOne(t, l, charge(keys[5], v, 10_000, 0)); !errors.Is(err, wallet.ErrInsufficientFunds) {
		t.Fatalf("Charge over the balance: %v", err)
	}
	if err := l.Settle(ctx, keys[:2]); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Refund(ctx, keys[2]); err != nil {
		t.Fatal(err)
	}
	after, err := l.Totals(ctx)
	if err != nil {
		t.Fatalf("Totals: %v", err)
	}
	diff := func(a, b wallet.ChargeTotals) wallet.ChargeTotals {
		return wallet.ChargeTotals{Charges: a.Charges - b.Charges, Amount: a.Amount - b.Amount, Reward: a.Reward - b.Reward}
	}
	checks := []struct {
		name      string
		got, want wallet.ChargeTotals
	}{
		{"settled", diff(after.Settled, before.Settled), wallet.ChargeTotals{Charges: 2, Amount: 300, Reward: 10}},
		{"pending", diff(after.Pending, before.Pending), wallet.ChargeTotals{Charges: 2, Amount: 130, Reward: 700}},
		{"refunded", diff(after.Refunded, before.Refunded), wallet.ChargeTotals{Charges: 1, Amount: 50, Reward: 25}},
		{"credits", wallet.ChargeTotals{Charges: after.Credits - before.Credits, Amount: after.Credited - before.Credited},
			wallet.ChargeTotals{Charges: 2, Amount: 1500}},
		{"accounts", wallet.ChargeTotals{Charges: after.Accounts - before.Accounts, Amount: after.Balances - before.Balances},
			wallet.ChargeTotals{Charges: 2, Amount: 1500 - 300 - 130 + 10 + 700}},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s grew by %+v, want %+v", c.name, c.got, c.want)
		}
	}
	if d := after.Imbalance(); d != 0 {
		t.Fatalf("ledger is off by %d: %+v", d, after)
	}
	checkAudit(t, l, u, v)
}

// testCanceledContext: a caller whose context has ended is told the outcome
// is unknown (store unavailable), with the context's error in the chain.
func testCanceledContext(t *testing.T, l Ledger) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	u := newUser()
	if _, err := l.Charge(ctx, []wallet.Charge{charge(newKey(t), u, 1, 0)}); !errors.Is(err, room.ErrUnavailable) || !errors.Is(err, context.Canceled) {
		t.Fatalf("Charge(canceled) = %v, want ErrUnavailable wrapping context.Canceled", err)
	}
	if _, _, err := l.Credit(ctx, u, 1, newKey(t)); !errors.Is(err, room.ErrUnavailable) {
		t.Fatalf("Credit(canceled) = %v, want ErrUnavailable", err)
	}
	mustBalance(t, l, u, 0)
}

// checkAudit checks each user's journal: the entries add up to the
// balance, each entry's balance_after is the previous one's plus its
// amount, and no balance was ever negative.
func checkAudit(t *testing.T, l Ledger, users ...int64) {
	t.Helper()
	for _, u := range users {
		var sum int64
		entries := mustEntries(t, l, u)
		for i, e := range entries {
			if e.UserID != u {
				t.Errorf("user %d: entry %+v belongs to another user", u, e)
			}
			sum += e.Amount
			if e.BalanceAfter != sum || e.BalanceAfter < 0 {
				t.Errorf("user %d: entry %d %+v has balance_after %d, want %d (the sum so far)", u, i, e, e.BalanceAfter, sum)
			}
			if i > 0 && e.EntryID <= entries[i-1].EntryID {
				t.Errorf("user %d: entry ids out of order: %d after %d", u, e.EntryID, entries[i-1].EntryID)
			}
		}
		mustBalance(t, l, u, sum)
	}
}

func mustEntries(t *testing.T, l Ledger, u int64) []wallet.Entry {
	t.Helper()
	var all []wallet.Entry
	after := int64(0)
	for {
		page, err := l.Entries(t.Context(), u, after, 100)
		if err != nil {
			t.Fatalf("Entries user=%d: %v", u, err)
		}
		all = append(all, page...)
		if len(page) < 100 {
			return all
		}
		after = page[len(page)-1].EntryID
	}
}

func mustCredit(t *testing.T, l Ledger, u, amount int64) {
	t.Helper()
	if _, dup, err := l.Credit(t.Context(), u, amount, newKey(t)); err != nil || dup {
		t.Fatalf("Credit(%d, %d): dup %v, err %v", u, amount, dup, err)
	}
}

func mustBalance(t *testing.T, l Ledger, u, want int64) {
	t.Helper()
	got, err := l.Balance(t.Context(), u)
	if err != nil {
		t.Fatalf("Balance(%d): %v", u, err)
	}
	if got != want {
		t.Fatalf("Balance(%d) = %d, want %d", u, got, want)
	}
}

// chargeOne charges c alone; a call-wide error fails the test.
func chargeOne(t *testing.T, l Ledger, c wallet.Charge) (wallet.Receipt, error) {
	t.Helper()
	results, err := l.Charge(t.Context(), []wallet.Charge{c})
	if err != nil {
		t.Errorf("Charge(%+v): %v", c, err)
		return wallet.Receipt{}, err
	}
	if len(results) != 1 {
		t.Fatalf("Charge of one returned %d results", len(results))
	}
	return results[0].Receipt, results[0].Err
}

func mustCharge(t *testing.T, l Ledger, c wallet.Charge) wallet.Receipt {
	t.Helper()
	r, err := chargeOne(t, l, c)
	if err != nil {
		t.Fatalf("Charge(%+v): %v", c, err)
	}
	return r
}

func checkReceipt(t *testing.T, what string, got, want wallet.Receipt) {
	t.Helper()
	if !got.At.Equal(want.At) {
		t.Fatalf("%s: At = %v, want %v", what, got.At, want.At)
	}
	got.At, want.At = time.Time{}, time.Time{}
	if got != want {
		t.Fatalf("%s = %+v, want %+v", what, got, want)
	}
}

// Bench measures charges per second through w with callers concurrent
// callers, each charging one gift at a time for a sender of its own (as
// the rooms of a node do), and reports it as charges/s.
func Bench(b *testing.B, w wallet.Wallet, callers int) {
	ctx := b.Context()
	users := make([]int64, callers)
	for i := range users {
		users[i] = newUser()
		if _, _, err := w.Credit(ctx, users[i], math.MaxInt64/2, newKey(b)); err != nil {
			b.Fatalf("Credit: %v", err)
		}
	}
	prefix := newKey(b)
	var next atomic.Int64
	b.ResetTimer()
	var wg sync.WaitGroup
	for c := range callers {
		wg.Go(func() {
			for {
				n := next.Add(1)
				if n > int64(b.N) {
					return
				}
				ch := wallet.Charge{Key: fmt.Sprintf("%s/%d", prefix, n), UserID: users[c], Amount: 10, Reward: n % 3, At: time.Now()}
				results, err := w.Charge(ctx, []wallet.Charge{ch})
				if err == nil {
					err = results[0].Err
				}
				if err != nil {
					b.Errorf("Charge: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "charges/s")
}
