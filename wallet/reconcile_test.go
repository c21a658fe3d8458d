package wallet_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"hyapp/room-service/store"
	"hyapp/room-service/store/sqlite"
	"hyapp/room-service/wallet"
	"hyapp/room-service/wallet/ledger"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// logOf says a charge's gift committed when its command id is in the
// room's log (the service also checks that the row is the charge's gift:
// cell.CommittedGifts).
func logOf(db store.Repository) wallet.Committed {
	return func(ctx context.Context, roomID string, charges []wallet.Charge) (map[string]bool, error) {
		ids := make([]string, len(charges))
		for i, c := range charges {
			_, ids[i], _ = wallet.SplitChargeKey(c.Key)
		}
		recs, err := db.GetCommands(ctx, roomID, ids)
		if err != nil {
			return nil, err
		}
		out := map[string]bool{}
		for id := range recs {
			out[id] = true
		}
		return out, nil
	}
}

func open(t *testing.T) (*sqlite.DB, *ledger.Ledger) {
	t.Helper()
	db, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "room.db"), sqlite.Options{Synchronous: "NORMAL"})
	if err != nil {
		t.Fatal(err)
	}
	l := ledger.New(db.SQLStore(), ledger.Options{})
	t.Cleanup(func() {
		_ = l.Close()
		_ = db.Close()
	})
	return db, l
}

// TestReconcilerSettlesCommittedAndRefundsTheRest charges three gifts: one
// whose command is in the log, one that never committed, one too young to
// decide. One pass settles the first, refunds the second and leaves the third.
func TestReconcilerSettlesCommittedAndRefundsTheRest(t *testing.T) {
	ctx := context.Background()
	db, l := open(t)
	const user = 42
	if _, _, err := l.Credit(ctx, user, 1000, "top-up"); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	old := now.Add(-time.Hour)
	charges := []wallet.Charge{
		{Key: wallet.ChargeKey("r1", "committed"), UserID: user, Amount: 100, Reward: 50, MultiplierBP: 5000, At: old},
		{Key: wallet.ChargeKey("r1", "lost"), UserID: user, Amount: 200, Reward: 20, MultiplierBP: 1000, At: old},
		{Key: wallet.ChargeKey("r1", "young"), UserID: user, Amount: 300, At: now},
	}
	res, err := l.Charge(ctx, charges)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		if r.Err != nil {
			t.Fatalf("charge %d: %v", i, r.Err)
		}
	}
	// The log holds the first gift only.
	if err := db.SaveRoomMeta(ctx, store.RoomMeta{RoomID: "r1", OwnerUserID: 1, SeatCount: 8, Status: "open"}); err != nil {
		t.Fatal(err)
	}
	if err := db.SaveCommand(ctx, store.CommandRecord{RoomID: "r1", RoomVersion: 1, CommandID: "committed", CommandType: "SendGift",
		Payload: []byte(`{}`), Replayable: true, CreatedAt: now}); err != nil {
		t.Fatal(err)
	}
	rec := &wallet.Reconciler{Wallet: l, Committed: logOf(db), After: time.Minute, Log: quiet}
	n, err := rec.Once(ctx)
	if err != nil || n != 2 {
		t.Fatalf("decided %d charges (%v), want 2", n, err)
	}
	want := map[string]wallet.Status{"committed": wallet.StatusSettled, "lost": wallet.StatusRefunded, "young": wallet.StatusPending}
	for id, status := range want {
		r, found, err := l.Receipt(ctx, wallet.ChargeKey("r1", id))
		if err != nil || !found || r.Status != status {
			t.Fatalf("%s: %+v found=%v err=%v, want %s", id, r, found, err, status)
		}
	}
	// 1000 - 100 + 50 (settled) - 300 (pending) ; the lost gift is undone.
	if b, err := l.Balance(ctx, user); err != nil || b != 650 {
		t.Fatalf("balance %d (%v), want 650", b, err)
	}
	// A second pass finds nothing old to decide.
	if n, err := rec.Once(ctx); err != nil || n != 0 {
		t.Fatalf("second pass decided %d (%v)", n, err)
	}
}

// TestReconcilerLeavesAnUnrefundableChargePending: a lucky win that was
// spent cannot be taken back; the charge stays pending and nothing moves.
func TestReconcilerLeavesAnUnrefundableChargePending(t *testing.T) {
	ctx := context.Background()
	db, l := open(t)
	const user = 7
	if _, _, err := l.Credit(ctx, user, 100, "top-up"); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-time.Hour)
	key := wallet.ChargeKey("r2", "win")
	// Pays 100, wins 1000: balance 1000.
	if res, err := l.Charge(ctx, []wallet.Charge{{Key: key, UserID: user, Amount: 100, Reward: 1000, MultiplierBP: 100_000, At: old}}); err != nil || res[0].Err != nil {
		t.Fatalf("charge: %v %v", err, res)
	}
	// The winnings are spent on a gift that committed elsewhere.
	if res, err := l.Charge(ctx, []wallet.Charge{{Key: wallet.ChargeKey("r3", "spend"), UserID: user, Amount: 950, At: time.Now()}}); err != nil || res[0].Err != nil {
		t.Fatalf("spend: %v %v", err, res)
	}
	rec := &wallet.Reconciler{Wallet: l, Committed: logOf(db), After: time.Minute, Log: quiet}
	if _, err := rec.Once(ctx); err != nil {
		t.Fatal(err)
	}
	r, _, err := l.Receipt(ctx, key)
	if err != nil || r.Status != wallet.StatusPending {
		t.Fatalf("unrefundable charge: %+v %v, want pending", r, err)
	}
	if b, err := l.Balance(ctx, user); err != nil || b != 50 {
		t.Fatalf("balance %d (%v), want 50", b, err)
	}
	if _, err := l.Refund(ctx, key); !errors.Is(err, wallet.ErrInsufficientFunds) {
		t.Fatalf("refund: %v", err)
	}
}

// TestSettlerSettlesWhatItIsGiven: keys added before Close are settled.
func TestSettlerSettlesWhatItIsGiven(t *testing.T) {
	ctx := context.Background()
	_, l := open(t)
	if _, _, err := l.Credit(ctx, 9, 100, "top-up"); err != nil {
		t.Fatal(err)
	}
	var keys []string
	var charges []wallet.Charge
	for _, id := range []string{"a", "b", "c"} {
		k := wallet.ChargeKey("r4", id)
		keys = append(keys, k)
		charges = append(charges, wallet.Charge{Key: k, UserID: 9, Amount: 10, At: time.Now()})
	}
	if _, err := l.Charge(ctx, charges); err != nil {
		t.Fatal(err)
	}
	s := wallet.NewSettler(l, nil, quiet)
	s.Add(keys[:2]...)
	s.Close()
	s.Add(keys[2]) // after Close: dropped, left to the reconciler
	for i, k := range keys {
		r, _, err := l.Receipt(ctx, k)
		want := wallet.StatusSettled
		if i == 2 {
			want = wallet.StatusPending
		}
		if err != nil || r.Status != want {
			t.Fatalf("%s: %s (%v), want %s", k, r.Status, err, want)
		}
	}
}

func TestChargeKeyRoundTrip(t *testing.T) {
	roomID, cmd, ok := wallet.SplitChargeKey(wallet.ChargeKey("room/1", "cmd/2"))
	if !ok || roomID != "room/1" || cmd != "cmd/2" {
		t.Fatalf("split: %q %q %v", roomID, cmd, ok)
	}
	for _, bad := range []string{"", "nospace", " x", "x "} {
		if _, _, ok := wallet.SplitChargeKey(bad); ok {
			t.Fatalf("%q split as a gift key", bad)
		}
	}
}

// TestStuckChargesDoNotBlockTheOnesAfterThem: a full page of charges that
// cannot be refunded (spent lucky wins) comes first; the lost gift of
// another user behind them is still refunded in the same pass.
func TestStuckChargesDoNotBlockTheOnesAfterThem(t *testing.T) {
	ctx := context.Background()
	db, l := open(t)
	old := time.Now().Add(-time.Hour)
	stuckCharges(t, l, 10, 600, old) // more than a page
	if _, _, err := l.Credit(ctx, 20, 50, "c20"); err != nil {
		t.Fatal(err)
	}
	lost := wallet.ChargeKey("r3", "lost")
	if res, err := l.Charge(ctx, []wallet.Charge{{Key: lost, UserID: 20, Amount: 50, At: old.Add(time.Minute)}}); err != nil || res[0].Err != nil {
		t.Fatalf("charge: %v %v", err, res)
	}
	rec := &wallet.Reconciler{Wallet: l, Committed: logOf(db), After: time.Minute, Log: quiet}
	if _, err := rec.Once(ctx); err != nil {
		t.Fatal(err)
	}
	if r, _, err := l.Receipt(ctx, lost); err != nil || r.Status != wallet.StatusRefunded {
		t.Fatalf("the lost gift behind 600 stuck charges: %+v (%v), want refunded", r, err)
	}
	if b, err := l.Balance(ctx, 20); err != nil || b != 50 {
		t.Fatalf("balance of user 20: %d (%v), want 50", b, err)
	}
}

// stuckCharges makes n pending charges of user, at old and the
// milliseconds after, that cannot be refunded: lucky wins spent on a gift
// that committed. It returns their keys, oldest first.
func stuckCharges(t *testing.T, l wallet.Wallet, user int64, n int, old time.Time) []string {
	t.Helper()
	ctx := context.Background()
	if _, _, err := l.Credit(ctx, user, int64(n), fmt.Sprintf("c%d", user)); err != nil {
		t.Fatal(err)
	}
	var charges []wallet.Charge
	var keys []string
	for i := range n {
		k := wallet.ChargeKey("r", fmt.Sprintf("lucky-%d-%03d", user, i))
		keys = append(keys, k)
		charges = append(charges, wallet.Charge{Key: k, UserID: user,
			Amount: 1, Reward: 100, MultiplierBP: 1_000_000, At: old.Add(time.Duration(i) * time.Millisecond)})
	}
	if res, err := l.Charge(ctx, charges); err != nil || res[0].Err != nil {
		t.Fatalf("charge: %v %v", err, res[0].Err)
	}
	b, err := l.Balance(ctx, user)
	if err != nil {
		t.Fatal(err)
	}
	spend := wallet.ChargeKey("r2", fmt.Sprintf("spend-%d", user))
	if res, err := l.Charge(ctx, []wallet.Charge{{Key: spend, UserID: user, Amount: b, At: time.Now()}}); err != nil || res[0].Err != nil {
		t.Fatalf("spend: %v %v", err, res)
	}
	if err := l.Settle(ctx, []string{spend}); err != nil {
		t.Fatal(err)
	}
	return keys
}

// TestAPassGoesOnWhereTheLastStopped: more stuck charges than a pass reads
// come first. Each pass goes on after the last, so the lost gift behind
// them is refunded by the second; a pass that reads to the end goes on
// from the oldest, where a charge that can be refunded now is.
func TestAPassGoesOnWhereTheLastStopped(t *testing.T) {
	ctx := context.Background()
	db, l := open(t)
	old := time.Now().Add(-time.Hour)
	stuck := stuckCharges(t, l, 10, 3, old)
	if _, _, err := l.Credit(ctx, 20, 50, "c20"); err != nil {
		t.Fatal(err)
	}
	lost := wallet.ChargeKey("r3", "lost")
	if res, err := l.Charge(ctx, []wallet.Charge{{Key: lost, UserID: 20, Amount: 50, At: old.Add(time.Minute)}}); err != nil || res[0].Err != nil {
		t.Fatalf("charge: %v %v", err, res)
	}
	rec := &wallet.Reconciler{Wallet: l, Committed: logOf(db), After: time.Minute, Log: quiet, PassLimit: 2}
	status := func(key string) wallet.Status {
		t.Helper()
		r, _, err := l.Receipt(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		return r.Status
	}
	if n, err := rec.Once(ctx); err != nil || n != 0 || status(lost) != wallet.StatusPending {
		t.Fatalf("first pass: %d decided (%v), the lost gift %s; want two stuck charges read and nothing decided", n, err, status(lost))
	}
	if n, err := rec.Once(ctx); err != nil || n != 1 || status(lost) != wallet.StatusRefunded {
		t.Fatalf("second pass: %d decided (%v), the lost gift %s; want it refunded", n, err, status(lost))
	}
	// The oldest stuck charge can be refunded now.
	if _, _, err := l.Credit(ctx, 10, 100, "c10-again"); err != nil {
		t.Fatal(err)
	}
	if n, err := rec.Once(ctx); err != nil || n != 1 || status(stuck[0]) != wallet.StatusRefunded {
		t.Fatalf("third pass: %d decided (%v), the oldest charge %s; want it refunded", n, err, status(stuck[0]))
	}
	// A pass that laps stops where it began: it reads each charge once.
	m := wallet.NewMetrics(nil)
	rec.Metrics, rec.PassLimit = m, 100
	if _, err := rec.Once(ctx); err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(m.Reconciled.WithLabelValues("stuck")); got != 2 {
		t.Fatalf("the lapping pass met %v stuck charges, want each of the two left once", got)
	}
}

// refusing is a wallet that fails the refunds of some keys with an error
// of its own (neither stuck nor gone: a frozen account, say).
type refusing struct {
	wallet.Wallet
	keys map[string]bool
}

func (f refusing) Refund(ctx context.Context, key string) (wallet.Receipt, error) {
	if f.keys[key] {
		return wallet.Receipt{}, errors.New("account frozen")
	}
	return f.Wallet.Refund(ctx, key)
}

// TestARefundTheWalletFailsIsPassedOver: the wallet fails the refund of
// the oldest charge. The pass says so, and still refunds the lost gift
// behind it and settles the committed one; past refundFailures failures
// the page's other refunds wait, while its settles go ahead.
func TestARefundTheWalletFailsIsPassedOver(t *testing.T) {
	ctx := context.Background()
	db, l := open(t)
	if _, _, err := l.Credit(ctx, 10, 1000, "c10"); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-time.Hour)
	var charges []wallet.Charge
	for i, id := range []string{"frozen-1", "lost", "committed", "frozen-2", "frozen-3", "waits"} {
		charges = append(charges, wallet.Charge{Key: wallet.ChargeKey("r", id), UserID: 10, Amount: 10, At: old.Add(time.Duration(i) * time.Second)})
	}
	if res, err := l.Charge(ctx, charges); err != nil || res[0].Err != nil {
		t.Fatalf("charge: %v %+v", err, res)
	}
	if err := db.SaveRoomMeta(ctx, store.RoomMeta{RoomID: "r", OwnerUserID: 1, SeatCount: 8, Status: "open"}); err != nil {
		t.Fatal(err)
	}
	if err := db.SaveCommand(ctx, store.CommandRecord{RoomID: "r", RoomVersion: 1, CommandID: "committed", CommandType: "SendGift",
		Payload: []byte(`{}`), Replayable: true, CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	frozen := map[string]bool{}
	for _, id := range []string{"frozen-1", "frozen-2", "frozen-3"} {
		frozen[wallet.ChargeKey("r", id)] = true
	}
	rec := &wallet.Reconciler{Wallet: refusing{Wallet: l, keys: frozen}, Committed: logOf(db), After: time.Minute, Log: quiet}
	if _, err := rec.Once(ctx); err == nil || !strings.Contains(err.Error(), "account frozen") {
		t.Fatalf("the pass: %v, want the wallet's refusal", err)
	}
	for id, want := range map[string]wallet.Status{"frozen-1": wallet.StatusPending, "lost": wallet.StatusRefunded,
		"committed": wallet.StatusSettled, "frozen-3": wallet.StatusPending, "waits": wallet.StatusPending} {
		if r, _, err := l.Receipt(ctx, wallet.ChargeKey("r", id)); err != nil || r.Status != want {
			t.Fatalf("%s: %s (%v), want %s", id, r.Status, err, want)
		}
	}
	// The wallet answers again: the next pass refunds what waited.
	rec.Wallet = l
	if _, err := rec.Once(ctx); err != nil {
		t.Fatal(err)
	}
	if r, _, err := l.Receipt(ctx, wallet.ChargeKey("r", "waits")); err != nil || r.Status != wallet.StatusRefunded {
		t.Fatalf("waits: %s (%v), want refunded", r.Status, err)
	}
}
