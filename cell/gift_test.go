package cell_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"hyapp/room-service/cell"
	"hyapp/room-service/internal/poll"
	"hyapp/room-service/room"
	"hyapp/room-service/store"
	"hyapp/room-service/store/mysql"
	"hyapp/room-service/store/mysql/mysqltest"
	"hyapp/room-service/wallet"
	"hyapp/room-service/wallet/ledger"
)

// ledgerOf opens the embedded ledger in the repository's own database.
type testLedger interface {
	wallet.Wallet
	Totals(ctx context.Context) (wallet.Totals, error)
	Close() error
}

func ledgerOf(t testing.TB, repo store.Repository) testLedger {
	t.Helper()
	l, err := ledger.Of(repo, ledger.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// flaky wraps a wallet: while fail is set, Charge does its work and then
// reports an error, as a wallet whose answer is lost after it debited.
type flaky struct {
	wallet.Wallet
	fail  atomic.Bool
	calls atomic.Int64
}

func (f *flaky) Charge(ctx context.Context, charges []wallet.Charge) ([]wallet.Result, error) {
	f.calls.Add(1)
	res, err := f.Wallet.Charge(ctx, charges)
	if err == nil && f.fail.Load() {
		return nil, errors.New("wallet connection reset after the debit")
	}
	return res, err
}

// giftRoom makes a room where user 10 (sender, credited) and user 11
// (receiver, seated) are in.
func giftRoom(t *testing.T, reg *cell.Registry, l wallet.Wallet, roomID string, credit int64) {
	t.Helper()
	createRoom(t, reg, roomID)
	mustSubmit(t, reg, env(roomID, "j10", 10, &room.JoinRoom{}))
	mustSubmit(t, reg, env(roomID, "j11", 11, &room.JoinRoom{}))
	mustSubmit(t, reg, env(roomID, "m11", 11, &room.TakeMic{SeatIndex: 0}))
	if credit > 0 {
		if _, _, err := l.Credit(context.Background(), 10, credit, "credit-"+roomID); err != nil {
			t.Fatal(err)
		}
	}
}

// creditElsewhere tops up user by amount as another node's ledger would,
// straight to the shared table: this node's ledger holds no hint of it, so
// the sender's next gift here is decided on a read.
func creditElsewhere(t *testing.T, repo store.Repository, user, amount int64) {
	t.Helper()
	w := repo.(ledger.Host).SQLStore().Writer()
	res, err := w.ExecContext(context.Background(), `UPDATE wallet_accounts SET balance = balance + ? WHERE user_id = ?`, amount, user)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		if _, err := w.ExecContext(context.Background(), `INSERT INTO wallet_accounts (user_id, balance, updated_at) VALUES (?, ?, ?)`,
			user, amount, time.Now().UnixMilli()); err != nil {
			t.Fatal(err)
		}
	}
}

func heart(roomID, commandID string, count int32) *room.Envelope {
	return env(roomID, commandID, 10, &room.SendGift{ReceiverUserIDs: []int64{11}, GiftID: "heart", Count: count,
		Outcome: room.GiftOutcome{Name: "Heart", Price: 10, Kind: room.GiftNormal, ReceiversOnMic: true}})
}

// paid is what the engine recorded of a submitted gift's charge: for a
// retry, what the first attempt paid. ChargedAt is zero when it recorded none.
func paid(e *room.Envelope) room.GiftOutcome { return e.Command.(*room.SendGift).Outcome }

func balance(t *testing.T, l wallet.Wallet, user int64) int64 {
	t.Helper()
	b, err := l.Balance(context.Background(), user)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestGiftIsChargedOnceAndRetriesAnswerTheSameBalance(t *testing.T) {
	stores(t, func(t *testing.T, open func(testing.TB) store.Repository) {
		repo := open(t)
		l := ledgerOf(t, repo)
		reg := newRegistry(t, repo, cell.Config{Wallet: l, SettleInCommit: true}, nil)
		giftRoom(t, reg, l, "g", 1000)
		sent := heart("g", "gift-1", 7)
		first := mustSubmit(t, reg, sent)
		if o := paid(sent); o.ChargedAt == 0 || o.BalanceAfter != 930 || sent.Command.(*room.SendGift).Cost() != 70 || first.Duplicate {
			t.Fatalf("first send: %+v %+v", first, o)
		}
		// The charge was settled by the commit that answered.
		if r, found, err := l.Receipt(context.Background(), wallet.ChargeKey("g", "gift-1")); err != nil || !found || r.Status != wallet.StatusSettled {
			t.Fatalf("charge after the commit: %+v found=%v err=%v, want settled", r, found, err)
		}
		retry := heart("g", "gift-1", 7)
		again := mustSubmit(t, reg, retry)
		if o := paid(retry); !again.Duplicate || again.RoomVersion != first.RoomVersion || o.ChargedAt == 0 || o.BalanceAfter != 930 {
			t.Fatalf("retry: %+v %+v", again, o)
		}
		// A retry with another count is a different request.
		if _, err := reg.Submit(context.Background(), heart("g", "gift-1", 1)); !errors.Is(err, room.ErrCommandIDConflict) {
			t.Fatalf("changed retry: %v", err)
		}
		// After a restart the log answers, with the same balance.
		reg2 := newRegistry(t, repo, cell.Config{Wallet: l}, nil)
		if err := reg.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		lateRetry := heart("g", "gift-1", 7)
		late := mustSubmit(t, reg2, lateRetry)
		if o := paid(lateRetry); !late.Duplicate || o.ChargedAt == 0 || o.BalanceAfter != 930 {
			t.Fatalf("retry after restart: %+v %+v", late, o)
		}
		if b := balance(t, l, 10); b != 930 {
			t.Fatalf("balance %d, want 930", b)
		}
		snap, err := reg2.Snapshot(context.Background(), "g")
		if err != nil {
			t.Fatal(err)
		}
		if h := snap.GetEconomy().GetHeat(); h != 70 {
			t.Fatalf("heat %d, want 70 (one gift)", h)
		}
	})
}

func TestGiftTheWalletRefusesChangesNothing(t *testing.T) {
	repo := openRepo(t)
	l := ledgerOf(t, repo)
	reg := newRegistry(t, repo, cell.Config{Wallet: l}, nil)
	giftRoom(t, reg, l, "g", 69)
	before, err := reg.Snapshot(context.Background(), "g")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Submit(context.Background(), heart("g", "too-much", 7)); !errors.Is(err, room.ErrInsufficientBalance) {
		t.Fatalf("70 coins from 69: %v", err)
	}
	after, err := reg.Snapshot(context.Background(), "g")
	if err != nil {
		t.Fatal(err)
	}
	if after.GetRoomVersion() != before.GetRoomVersion() || after.GetEconomy().GetHeat() != 0 || balance(t, l, 10) != 69 {
		t.Fatalf("a refused gift changed something: version %d->%d heat %d balance %d",
			before.GetRoomVersion(), after.GetRoomVersion(), after.GetEconomy().GetHeat(), balance(t, l, 10))
	}
	tot, err := l.Totals(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if tot.Pending.Charges+tot.Settled.Charges+tot.Refunded.Charges != 0 {
		t.Fatalf("a refused gift left charges: %+v", tot)
	}
}

// TestLostWalletAnswerThenRetry: the wallet debits but its answer is lost.
// The gift is answered unavailable and applies nothing; the retry replays
// the charge by key, commits, and the sender paid once.
func TestLostWalletAnswerThenRetry(t *testing.T) {
	repo := openRepo(t)
	l := &flaky{Wallet: ledgerOf(t, repo)}
	reg := newRegistry(t, repo, cell.Config{Wallet: l}, nil)
	giftRoom(t, reg, l, "g", 1000)
	l.fail.Store(true)
	if _, err := reg.Submit(context.Background(), heart("g", "gift-1", 7)); !errors.Is(err, room.ErrUnavailable) {
		t.Fatalf("lost wallet answer: %v", err)
	}
	if b := balance(t, l, 10); b != 930 {
		t.Fatalf("the debit happened: balance %d, want 930", b)
	}
	l.fail.Store(false)
	retry := heart("g", "gift-1", 7)
	res := mustSubmit(t, reg, retry)
	if res.Duplicate || paid(retry).BalanceAfter != 930 {
		t.Fatalf("retry: %+v %+v", res, paid(retry))
	}
	if b := balance(t, l, 10); b != 930 {
		t.Fatalf("charged twice: balance %d", b)
	}
}

// TestExpiredChargeIsNotAppliedAndIsRefunded: a retry arriving after the
// apply window does not commit; the reconciler then refunds the charge.
func TestExpiredChargeIsNotAppliedAndIsRefunded(t *testing.T) {
	repo := openRepo(t)
	ledger := ledgerOf(t, repo)
	l := &flaky{Wallet: ledger}
	var now atomic.Int64
	now.Store(time.Now().UnixMilli())
	clock := func() time.Time { return time.UnixMilli(now.Load()) }
	reg := newRegistry(t, repo, cell.Config{Wallet: l, Clock: clock, GiftApplyWindow: 10 * time.Second}, nil)
	giftRoom(t, reg, l, "g", 1000)
	l.fail.Store(true)
	if _, err := reg.Submit(context.Background(), heart("g", "gift-1", 7)); !errors.Is(err, room.ErrUnavailable) {
		t.Fatalf("lost wallet answer: %v", err)
	}
	l.fail.Store(false)
	now.Add((11 * time.Second).Milliseconds())
	if _, err := reg.Submit(context.Background(), heart("g", "gift-1", 7)); !errors.Is(err, room.ErrGiftExpired) {
		t.Fatalf("retry after the window: %v", err)
	}
	rec := &wallet.Reconciler{Wallet: ledger, Committed: cell.CommittedGifts(repo), After: 10 * time.Second, Clock: func() time.Time { return clock().Add(time.Second) }, Log: quiet}
	if n, err := rec.Once(context.Background()); err != nil || n != 1 {
		t.Fatalf("reconciled %d (%v), want the one expired charge", n, err)
	}
	if b := balance(t, l, 10); b != 1000 {
		t.Fatalf("balance %d after the refund, want 1000", b)
	}
	// The key is spent: a further retry is told the gift was refunded.
	if _, err := reg.Submit(context.Background(), heart("g", "gift-1", 7)); !errors.Is(err, room.ErrGiftRefunded) {
		t.Fatalf("retry after the refund: %v", err)
	}
}

// TestConcurrentGiftsShareOneBalance: 50 gifts race for a balance that
// covers 20 of them; exactly 20 commit, the balance ends at 0, and the
// rooms' heat adds up to what was charged. The gifts are charged by the
// wallet before the commit, or inside the commit; and, charged inside the
// commit, sent in one room or spread over two. Each of two rooms decides on
// a balance the other may spend before it commits: the commit refuses what
// was decided on a spent balance, the room decides again, and the client
// retries what it is told to retry.
func TestConcurrentGiftsShareOneBalance(t *testing.T) {
	stores(t, func(t *testing.T, open func(testing.TB) store.Repository) {
		for _, c := range []struct {
			inCommit bool
			rooms    []string // the runs share the MySQL database: each has its rooms
		}{{false, []string{"wallet"}}, {true, []string{"commit"}}, {true, []string{"two-a", "two-b"}}} {
			t.Run(fmt.Sprintf("in_commit=%v/rooms=%d", c.inCommit, len(c.rooms)), func(t *testing.T) {
				concurrentGiftsShareOneBalance(t, open(t), c.inCommit, c.rooms)
			})
		}
	})
}

func concurrentGiftsShareOneBalance(t *testing.T, repo store.Repository, inCommit bool, rooms []string) {
	l := ledgerOf(t, repo)
	reg := newRegistry(t, repo, cell.Config{Wallet: l, SettleInCommit: inCommit}, nil)
	node := giftNode{reg, l}
	nodes := make([]giftNode, len(rooms))
	for i := range nodes {
		nodes[i] = node
	}
	giftsShareOneBalance(t, rooms, nodes)
}

// TestGiftsOnTwoNodesShareOneBalance: the same as
// TestConcurrentGiftsShareOneBalance with the two rooms on two nodes that
// share one MySQL database, each with its own ledger, so that each node's
// balance hints miss every charge the other node makes: a gift decided on
// a stale hint is refused by its commit and decided again on a read.
func TestGiftsOnTwoNodesShareOneBalance(t *testing.T) {
	dsn := mysqltest.DSN(t)
	var nodes []giftNode
	for range 2 {
		db, err := mysql.Open(context.Background(), dsn, mysql.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = db.Close() })
		l := ledgerOf(t, db)
		nodes = append(nodes, giftNode{newRegistry(t, db, cell.Config{Wallet: l, SettleInCommit: true}, nil), l})
	}
	giftsShareOneBalance(t, []string{"node-a", "node-b"}, nodes)
}

// giftNode is a registry and the ledger its gifts are paid from.
type giftNode struct {
	reg *cell.Registry
	l   testLedger
}

// giftsShareOneBalance sends 50 gifts of 70 coins from one sender, who has
// 20 gifts' worth, spread over rooms, rooms[i] held by nodes[i]: exactly 20
// commit and 30 are refused for the balance.
func giftsShareOneBalance(t *testing.T, rooms []string, nodes []giftNode) {
	ctx := context.Background()
	giftRoom(t, nodes[0].reg, nodes[0].l, rooms[0], 20*70) // each run leaves the balance at 0
	for i, id := range rooms[1:] {
		giftRoom(t, nodes[i+1].reg, nodes[i+1].l, id, 0)
	}
	var wg sync.WaitGroup
	var ok, broke atomic.Int64
	errs := make(chan error, 50)
	for i := range 50 {
		wg.Go(func() {
			for {
				_, err := nodes[i%len(rooms)].reg.Submit(ctx, heart(rooms[i%len(rooms)], fmt.Sprint("gift-", i), 7))
				switch {
				case err == nil:
					ok.Add(1)
				case errors.Is(err, room.ErrInsufficientBalance):
					broke.Add(1)
				case errors.Is(err, room.ErrUnavailable) && len(rooms) > 1:
					continue // decided twice on a spent balance: retry, as told
				default:
					errs <- err
				}
				return
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	l := nodes[0].l
	if ok.Load() != 20 || broke.Load() != 30 || balance(t, l, 10) != 0 {
		t.Fatalf("%d committed, %d refused, balance %d; want 20, 30, 0", ok.Load(), broke.Load(), balance(t, l, 10))
	}
	var heat int64
	for i, id := range rooms {
		snap, err := nodes[i].reg.Snapshot(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		heat += snap.GetEconomy().GetHeat()
	}
	if heat != 20*70 {
		t.Fatalf("heat %d, want %d", heat, 20*70)
	}
}

// movingBalance is the embedded ledger with move, run once right after a
// room took its first balances to decide gifts on (Quote's read or the
// ledger's hint): what happens to the sender's balance between the room's
// decision and its commit. hinted says that first decision was on a hint.
type movingBalance struct {
	testLedger
	once   sync.Once
	move   func()
	hinted atomic.Bool
}

func (m *movingBalance) Quote(ctx context.Context, users []int64, keys []string) (wallet.Quote, error) {
	q, err := m.testLedger.(wallet.Quoter).Quote(ctx, users, keys)
	m.once.Do(m.move)
	return q, err
}

func (m *movingBalance) Hint(users []int64) (map[int64]int64, bool) {
	b, ok := m.testLedger.(wallet.Quoter).Hint(users)
	if ok {
		m.once.Do(func() {
			m.hinted.Store(true)
			m.move()
		})
	}
	return b, ok
}

// TestAGiftOnABalanceThatMovedIsDecidedAgain: the sender's balance changes
// after the room decided a gift charged inside its commit and before the
// commit. The commit refuses the batch, and the room decides the gift again
// on the balance of now: a top-up in between is in the balance the gift
// records; a spend in between that leaves too little refuses the gift.
// Nothing is charged but what committed. The same holds whether the room
// read the balance (a sender topped up on another node) or took the
// ledger's hint (a sender who gave before).
func TestAGiftOnABalanceThatMovedIsDecidedAgain(t *testing.T) {
	stores(t, func(t *testing.T, open func(testing.TB) store.Repository) {
		ctx := context.Background()
		for _, hinted := range []bool{false, true} {
			// The subtests share the MySQL database: each has its room, and
			// counts from the balance the sender has when it starts.
			suffix := map[bool]string{false: "-read", true: "-hint"}[hinted]
			// prepare funds the room's sender on another node, and gives
			// it a hint when hinted: a first gift, decided on a read,
			// whose commit leaves the hint.
			prepare := func(t *testing.T, reg *cell.Registry, repo store.Repository, roomID string) {
				t.Helper()
				giftRoom(t, reg, nil, roomID, 0)
				creditElsewhere(t, repo, 10, 1000)
				if hinted {
					mustSubmit(t, reg, heart(roomID, "gift-0", 1))
				}
			}
			check := func(t *testing.T, m *movingBalance) {
				t.Helper()
				if m.hinted.Load() != hinted {
					t.Fatalf("decided on a hint: %v, want %v", m.hinted.Load(), hinted)
				}
			}
			// setup makes the room name+suffix on a fresh store, prepared, whose
			// ledger runs move once after the room's next decision.
			setup := func(t *testing.T, name string, move func(l testLedger)) (testLedger, *movingBalance, *cell.Registry, string) {
				t.Helper()
				repo := open(t)
				l := ledgerOf(t, repo)
				var moving atomic.Bool
				m := &movingBalance{testLedger: l, move: func() {
					if moving.Load() {
						move(l)
					}
				}}
				reg := newRegistry(t, repo, cell.Config{Wallet: m, SettleInCommit: true}, nil)
				roomID := name + suffix
				prepare(t, reg, repo, roomID)
				m.once = sync.Once{}
				moving.Store(true)
				return l, m, reg, roomID
			}
			t.Run("top-up"+suffix, func(t *testing.T) {
				l, m, reg, roomID := setup(t, "top", func(l testLedger) {
					if _, _, err := l.Credit(ctx, 10, 500, "top-up"+suffix); err != nil {
						t.Error(err)
					}
				})
				want := balance(t, l, 10) + 500 - 70
				sent := heart(roomID, "gift-1", 7)
				mustSubmit(t, reg, sent)
				check(t, m)
				if o := paid(sent); o.BalanceAfter != want || balance(t, l, 10) != want {
					t.Fatalf("gift recorded balance %d, ledger holds %d; want %d (with the top-up, less 70) for both", o.BalanceAfter, balance(t, l, 10), want)
				}
				if r, found, err := l.Receipt(ctx, wallet.ChargeKey(roomID, "gift-1")); err != nil || !found || r.Status != wallet.StatusSettled || r.BalanceAfter != want {
					t.Fatalf("charge %+v found=%v err=%v; want settled at balance %d", r, found, err, want)
				}
			})
			t.Run("spent"+suffix, func(t *testing.T) {
				l, m, reg, roomID := setup(t, "spent", func(l testLedger) {
					spend := balance(t, l, 10) - 20
					if res, err := l.Charge(ctx, []wallet.Charge{{Key: "elsewhere" + suffix, UserID: 10, Amount: spend, At: time.Now()}}); err != nil || res[0].Err != nil {
						t.Errorf("spend elsewhere: %v %+v", err, res)
					}
				})
				heatBefore := heatOf(t, reg, roomID)
				if _, err := reg.Submit(ctx, heart(roomID, "gift-1", 7)); !errors.Is(err, room.ErrInsufficientBalance) {
					t.Fatalf("gift after the balance was spent: %v, want insufficient_balance", err)
				}
				check(t, m)
				if _, found, err := l.Receipt(ctx, wallet.ChargeKey(roomID, "gift-1")); err != nil || found || balance(t, l, 10) != 20 {
					t.Fatalf("charge found=%v err=%v balance %d; want no charge and 20 left", found, err, balance(t, l, 10))
				}
				if h := heatOf(t, reg, roomID); h != heatBefore {
					t.Fatalf("heat %d, was %d: the refused gift counted", h, heatBefore)
				}
			})
		}
	})
}

func heatOf(t *testing.T, reg *cell.Registry, roomID string) int64 {
	t.Helper()
	snap, err := reg.Snapshot(context.Background(), roomID)
	if err != nil {
		t.Fatal(err)
	}
	return snap.GetEconomy().GetHeat()
}

// TestAGiftAHintWouldRefuseIsDecidedOnARead: another node credited the
// sender, which this node's ledger did not see, so its hint is lower than
// the balance. A gift the hint cannot pay for is decided on a read, not
// refused, and charged on the balance of now.
func TestAGiftAHintWouldRefuseIsDecidedOnARead(t *testing.T) {
	stores(t, func(t *testing.T, open func(testing.TB) store.Repository) {
		ctx := context.Background()
		repo := open(t)
		l := ledgerOf(t, repo)
		m := &movingBalance{testLedger: l, move: func() {}}
		reg := newRegistry(t, repo, cell.Config{Wallet: m, SettleInCommit: true}, nil)
		giftRoom(t, reg, l, "low", 100)
		mustSubmit(t, reg, heart("low", "gift-0", 1)) // read, then the hint: 90
		if b, ok := l.(wallet.Quoter).Hint([]int64{10}); !ok || b[10] != balance(t, l, 10) {
			t.Fatalf("hint %v (%v) after a committed gift, want the balance %d", b, ok, balance(t, l, 10))
		}
		// Another node's top-up: straight to the shared table.
		if _, err := repo.(ledger.Host).SQLStore().Writer().ExecContext(ctx,
			`UPDATE wallet_accounts SET balance = balance + 1000 WHERE user_id = 10`); err != nil {
			t.Fatal(err)
		}
		want := balance(t, l, 10) - 200
		sent := heart("low", "gift-1", 20) // 200 coins: more than the hint
		if _, err := reg.Submit(ctx, sent); err != nil {
			t.Fatalf("gift the balance pays and the hint does not: %v", err)
		}
		if o := paid(sent); o.BalanceAfter != want || balance(t, l, 10) != want {
			t.Fatalf("gift recorded balance %d, ledger holds %d; want %d for both", o.BalanceAfter, balance(t, l, 10), want)
		}
	})
}

// TestARetriedGiftDecidedOnAHintIsAnsweredFromTheLog: a retry of a
// committed gift reaches a room that no longer knows its id, while the
// ledger holds a hint for its sender. Decided on the hint, its charge is
// refused by the commit (the key was charged), and the room answers it
// from the log: the first answer, charged once.
func TestARetriedGiftDecidedOnAHintIsAnsweredFromTheLog(t *testing.T) {
	stores(t, func(t *testing.T, open func(testing.TB) store.Repository) {
		repo := open(t)
		l := ledgerOf(t, repo)
		first := newRegistry(t, repo, cell.Config{Wallet: l, SettleInCommit: true}, nil)
		giftRoom(t, first, l, "again", 1000)
		sent := mustSubmit(t, first, heart("again", "gift-1", 7))
		if err := first.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		m := &movingBalance{testLedger: l, move: func() {}}
		reg := newRegistry(t, repo, cell.Config{Wallet: m, SettleInCommit: true}, nil)
		mustSubmit(t, reg, env("again", "j12", 12, &room.JoinRoom{})) // loaded; gift-1 is below its snapshot
		retry := heart("again", "gift-1", 7)
		r, err := reg.Submit(context.Background(), retry)
		if o := paid(retry); err != nil || !r.Duplicate || r.RoomVersion != sent.RoomVersion || o.BalanceAfter != 930 {
			t.Fatalf("retry: %+v gift=%+v err=%v; want the first answer (version %d, balance 930)", r, o, err, sent.RoomVersion)
		}
		if !m.hinted.Load() {
			t.Fatal("the retry was not decided on a hint first")
		}
		if b := balance(t, l, 10); b != 930 {
			t.Fatalf("balance %d, want 930: charged once", b)
		}
	})
}

// TestAGiftWhoseKeyWasChargedIsDecidedAgainOnARead: a gift's key was
// charged before (pending, through the wallet's Charge) and its sender has
// a hint. Decided on the hint as a new charge, the commit refuses it (the
// key is taken); decided again, the room reads the receipt instead of
// trusting the hint once more, and the gift commits with the charge made
// before, settled, charged once.
func TestAGiftWhoseKeyWasChargedIsDecidedAgainOnARead(t *testing.T) {
	stores(t, func(t *testing.T, open func(testing.TB) store.Repository) {
		ctx := context.Background()
		repo := open(t)
		l := ledgerOf(t, repo)
		reg := newRegistry(t, repo, cell.Config{Wallet: l, SettleInCommit: true}, nil)
		giftRoom(t, reg, l, "taken", 1000)
		res, err := l.Charge(ctx, []wallet.Charge{{Key: wallet.ChargeKey("taken", "gift-1"), UserID: 10, Amount: 70, At: time.Now()}})
		if err != nil || res[0].Err != nil {
			t.Fatalf("charge: %v %+v", err, res)
		}
		mustSubmit(t, reg, heart("taken", "gift-0", 1)) // the hint: 920 - 10
		if _, ok := l.(wallet.Quoter).Hint([]int64{10}); !ok {
			t.Fatal("no hint after a committed gift")
		}
		sent := heart("taken", "gift-1", 7)
		if _, err := reg.Submit(ctx, sent); err != nil {
			t.Fatalf("gift whose charge was made before: %v", err)
		}
		if o := paid(sent); o.BalanceAfter != 930 {
			t.Fatalf("gift recorded balance %d, want 930, the charge made before", o.BalanceAfter)
		}
		if r, found, err := l.Receipt(ctx, wallet.ChargeKey("taken", "gift-1")); err != nil || !found || r.Status != wallet.StatusSettled {
			t.Fatalf("charge %+v found=%v err=%v; want settled", r, found, err)
		}
		if b := balance(t, l, 10); b != 920 {
			t.Fatalf("balance %d, want 920: 70 and 10, each charged once", b)
		}
	})
}

// TestWithoutWalletGiftsAreUnavailable: a node with no wallet refuses gifts.
func TestWithoutWalletGiftsAreUnavailable(t *testing.T) {
	repo := openRepo(t)
	l := ledgerOf(t, repo)
	reg := newRegistry(t, repo, cell.Config{}, nil)
	giftRoom(t, reg, l, "g", 100)
	if _, err := reg.Submit(context.Background(), heart("g", "gift-1", 1)); !errors.Is(err, room.ErrUnavailable) {
		t.Fatalf("gift without a wallet: %v", err)
	}
}

// refundFirst is a wallet that loses every race to the reconciler: right
// after charging, the charge is refunded, as the reconciler would refund a
// charge it found too old while its gift was still on the way to commit.
type refundFirst struct{ wallet.Wallet }

func (r refundFirst) Charge(ctx context.Context, charges []wallet.Charge) ([]wallet.Result, error) {
	res, err := r.Wallet.Charge(ctx, charges)
	if err != nil {
		return nil, err
	}
	for _, c := range charges {
		if _, err := r.Wallet.Refund(ctx, c.Key); err != nil {
			return nil, err
		}
	}
	return res, nil
}

// TestRefundedChargeCannotCommit: the commit that would settle a charge
// the reconciler refunded meanwhile is refused, so no gift commits unpaid.
func TestRefundedChargeCannotCommit(t *testing.T) {
	stores(t, func(t *testing.T, open func(testing.TB) store.Repository) {
		repo := open(t)
		l := ledgerOf(t, repo)
		reg := newRegistry(t, repo, cell.Config{Wallet: refundFirst{l}, SettleInCommit: true}, nil)
		giftRoom(t, reg, l, "g", 1000)
		if _, err := reg.Submit(context.Background(), heart("g", "gift-1", 7)); !errors.Is(err, room.ErrGiftRefunded) {
			t.Fatalf("gift whose charge was refunded before its commit: %v, want gift_refunded", err)
		}
		if _, found, err := repo.GetCommand(context.Background(), "g", "gift-1"); err != nil || found {
			t.Fatalf("the unpaid gift is in the log: found=%v err=%v", found, err)
		}
		if b := balance(t, l, 10); b != 1000 {
			t.Fatalf("balance %d, want 1000", b)
		}
		// The room goes on: the next command commits.
		mustSubmit(t, reg, env("g", "j12", 12, &room.JoinRoom{}))
	})
}

// gatedWallet holds its first Charge until the gate opens; entered closes
// when that Charge has begun.
type gatedWallet struct {
	wallet.Wallet
	once    sync.Once
	entered chan struct{}
	gate    chan struct{}
}

func (g *gatedWallet) Charge(ctx context.Context, charges []wallet.Charge) ([]wallet.Result, error) {
	g.once.Do(func() {
		close(g.entered)
		<-g.gate
	})
	return g.Wallet.Charge(ctx, charges)
}

// TestRepeatedRetryOfALoggedGiftInOneRun: two copies of a committed gift's
// id arrive in one run after the room forgot the id; both are answered from
// the log with the first balance.
func TestRepeatedRetryOfALoggedGiftInOneRun(t *testing.T) {
	repo := openRepo(t)
	l := ledgerOf(t, repo)
	first := newRegistry(t, repo, cell.Config{Wallet: l, SettleInCommit: true}, nil)
	giftRoom(t, first, l, "g", 1000)
	sent := mustSubmit(t, first, heart("g", "gift-1", 7))
	if err := first.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	g := &gatedWallet{Wallet: l, entered: make(chan struct{}), gate: make(chan struct{})}
	reg := newRegistry(t, repo, cell.Config{Wallet: g, SettleInCommit: true}, nil)
	mustSubmit(t, reg, env("g", "j12", 12, &room.JoinRoom{})) // loaded; gift-1 is below its snapshot
	retries := []*room.Envelope{heart("g", "blocker", 1), heart("g", "gift-1", 7), heart("g", "gift-1", 7)}
	results, errs := behindABlocker(t, reg, g.entered, g.gate, retries)
	for i := 1; i < 3; i++ {
		r := results[i]
		if o := paid(retries[i]); errs[i] != nil || !r.Duplicate || r.RoomVersion != sent.RoomVersion || o.ChargedAt == 0 || o.BalanceAfter != 930 {
			t.Fatalf("retry %d: %+v gift=%+v err=%v; want the first answer (version %d, balance 930)", i, r, o, errs[i], sent.RoomVersion)
		}
	}
	if b := balance(t, l, 10); b != 920 {
		t.Fatalf("balance %d, want 920 (the gift once, the blocker once)", b)
	}
}

// TestSettledChargeWithoutLogRowIsNotAppliedAgain: a charge settled long
// ago whose log row is gone (retention) is answered gift_expired, never
// applied a second time.
func TestSettledChargeWithoutLogRowIsNotAppliedAgain(t *testing.T) {
	repo := openRepo(t)
	l := ledgerOf(t, repo)
	reg := newRegistry(t, repo, cell.Config{Wallet: l, SettleInCommit: true}, nil)
	giftRoom(t, reg, l, "g", 1000)
	key := wallet.ChargeKey("g", "pruned")
	if res, err := l.Charge(context.Background(), []wallet.Charge{{Key: key, UserID: 10, Amount: 70, At: time.Now()}}); err != nil || res[0].Err != nil {
		t.Fatalf("charge: %v %v", err, res)
	}
	if err := l.Settle(context.Background(), []string{key}); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Submit(context.Background(), heart("g", "pruned", 7)); !errors.Is(err, room.ErrGiftExpired) {
		t.Fatalf("retry of a settled gift with no log row: %v, want gift_expired", err)
	}
	snap, err := reg.Snapshot(context.Background(), "g")
	if err != nil {
		t.Fatal(err)
	}
	if h := snap.GetEconomy().GetHeat(); h != 0 || balance(t, l, 10) != 930 {
		t.Fatalf("heat %d balance %d: the gift counted again or was charged again", h, balance(t, l, 10))
	}
}

// TestGiftSettledAfterCommit runs the path of a wallet that is not the
// room store's own database: SettleInCommit off, so the commit settles
// nothing, and GiftSettler hands the committed gifts' keys to a
// wallet.Settler, which settles them once the gift committed. A gift the
// room refuses is never charged, so nothing is left to settle for it.
func TestGiftSettledAfterCommit(t *testing.T) {
	stores(t, func(t *testing.T, open func(testing.TB) store.Repository) {
		repo := open(t)
		l := ledgerOf(t, repo)
		settler := wallet.NewSettler(l, nil, quiet)
		t.Cleanup(settler.Close)
		reg := newRegistry(t, repo, cell.Config{Wallet: l}, cell.GiftSettler{Settle: settler.Add})
		giftRoom(t, reg, l, "remote", 1000)
		sent := heart("remote", "gift-1", 7)
		mustSubmit(t, reg, sent)
		key := wallet.ChargeKey("remote", "gift-1")
		poll.Until(t, 10*time.Second, "the settler to settle the committed gift", func() error {
			r, found, err := l.Receipt(context.Background(), key)
			if err != nil || !found || r.Status != wallet.StatusSettled {
				return fmt.Errorf("charge %+v found=%v err=%v", r, found, err)
			}
			return nil
		})
		if o := paid(sent); o.BalanceAfter != 930 || balance(t, l, 10) != 930 {
			t.Fatalf("balance after %d, now %d; want 930", o.BalanceAfter, balance(t, l, 10))
		}
		if _, err := reg.Submit(context.Background(), env("remote", "gift-2", 10, &room.SendGift{ReceiverUserIDs: []int64{12}, GiftID: "heart", Count: 1,
			Outcome: room.GiftOutcome{Name: "Heart", Price: 10, Kind: room.GiftNormal}})); !errors.Is(err, room.ErrReceiverNotInRoom) {
			t.Fatalf("gift to a user not in the room: %v", err)
		}
		if _, found, err := l.Receipt(context.Background(), wallet.ChargeKey("remote", "gift-2")); err != nil || found {
			t.Fatalf("the refused gift was charged: found=%v err=%v", found, err)
		}
	})
}

// TestGiftInABatchThatConflicts: a gift charged in a batch whose commit
// hits a command id the room had forgotten (a rejoin retried after a
// restart) is charged once: the room reloads, answers the retry from the
// log, and commits the gift with its replayed charge, settled.
func TestGiftInABatchThatConflicts(t *testing.T) {
	stores(t, func(t *testing.T, open func(testing.TB) store.Repository) {
		repo := open(t)
		l := ledgerOf(t, repo)
		first := newRegistry(t, repo, cell.Config{Wallet: l, SettleInCommit: true}, nil)
		giftRoom(t, first, l, "g", 1000)
		joined, found, err := repo.GetCommand(context.Background(), "g", "j10")
		if err != nil || !found {
			t.Fatalf("the join's log row: found=%v err=%v", found, err)
		}
		if err := first.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		g := &gatedWallet{Wallet: l, entered: make(chan struct{}), gate: make(chan struct{})}
		reg := newRegistry(t, repo, cell.Config{Wallet: g, SettleInCommit: true}, nil)
		sent := heart("g", "gift-2", 7)
		results, errs := behindABlocker(t, reg, g.entered, g.gate, []*room.Envelope{heart("g", "blocker", 1), env("g", "j10", 10, &room.JoinRoom{}), sent})
		if errs[0] != nil || errs[1] != nil || errs[2] != nil {
			t.Fatalf("errors %v", errs)
		}
		if r := results[1]; !r.Duplicate || r.RoomVersion != joined.RoomVersion {
			t.Fatalf("rejoin retry: %+v, want a duplicate at %d", r, joined.RoomVersion)
		}
		if r, o := results[2], paid(sent); r.Duplicate || o.ChargedAt == 0 || o.BalanceAfter != 920 {
			t.Fatalf("gift: %+v %+v, want committed with balance 920", r, o)
		}
		if b := balance(t, l, 10); b != 920 {
			t.Fatalf("balance %d, want 920 (the blocker once, the gift once)", b)
		}
		if r, found, err := l.Receipt(context.Background(), wallet.ChargeKey("g", "gift-2")); err != nil || !found || r.Status != wallet.StatusSettled {
			t.Fatalf("gift charge %+v found=%v err=%v, want settled", r, found, err)
		}
		checkLog(t, repo, "g", results[2].RoomVersion)
	})
}

// TestTwoCopiesOfAGiftInOneRun: two copies of a new gift's command id in
// one run are charged once and applied once; the second copy is answered
// as the first's duplicate, with what the first paid.
func TestTwoCopiesOfAGiftInOneRun(t *testing.T) {
	stores(t, func(t *testing.T, open func(testing.TB) store.Repository) {
		repo := open(t)
		l := ledgerOf(t, repo)
		g := &gatedWallet{Wallet: l, entered: make(chan struct{}), gate: make(chan struct{})}
		reg := newRegistry(t, repo, cell.Config{Wallet: g, SettleInCommit: true}, nil)
		giftRoom(t, reg, l, "g", 1000)
		copies := []*room.Envelope{heart("g", "blocker", 1), heart("g", "gift-1", 7), heart("g", "gift-1", 7)}
		results, errs := behindABlocker(t, reg, g.entered, g.gate, copies)
		if errs[1] != nil || errs[2] != nil || results[1].RoomVersion != results[2].RoomVersion || results[1].Duplicate == results[2].Duplicate {
			t.Fatalf("copies: %+v, errors %v", results[1:], errs[1:])
		}
		for i := 1; i < 3; i++ {
			if o := paid(copies[i]); o.ChargedAt == 0 || o.BalanceAfter != 920 {
				t.Fatalf("copy %d paid %+v, want balance 920", i, o)
			}
		}
		if b := balance(t, l, 10); b != 920 {
			t.Fatalf("balance %d, want 920", b)
		}
		checkLog(t, repo, "g", results[1].RoomVersion)
	})
}

// behindABlocker submits cmds[0] and, once the room waits inside it
// (entered), queues the others in order; then it opens gate, so that the
// queued commands form the room's next batch, and returns every answer.
func behindABlocker(t *testing.T, reg *cell.Registry, entered, gate chan struct{}, cmds []*room.Envelope) ([]cell.Result, []error) {
	t.Helper()
	roomID := cmds[0].RoomID
	results, errs := make([]cell.Result, len(cmds)), make([]error, len(cmds))
	open := sync.OnceFunc(func() { close(gate) })
	defer open() // a failed test must not leave the room waiting
	var wg sync.WaitGroup
	wg.Go(func() { results[0], errs[0] = reg.Submit(context.Background(), cmds[0]) })
	<-entered
	for i := 1; i < len(cmds); i++ {
		wg.Go(func() { results[i], errs[i] = reg.Submit(context.Background(), cmds[i]) })
		poll.Until(t, 10*time.Second, fmt.Sprintf("%s queued", cmds[i].CommandID), poll.Bool(func() bool { return cell.Queued(reg, roomID) == i }))
	}
	open()
	wg.Wait()
	return results, errs
}

// gatedQuoter is the embedded ledger whose first balance lookup (Hint or
// Quote) waits for gate, closing entered when that lookup has begun.
type gatedQuoter struct {
	testLedger
	once    sync.Once
	entered chan struct{}
	gate    chan struct{}
}

func (g *gatedQuoter) wait() {
	g.once.Do(func() {
		close(g.entered)
		<-g.gate
	})
}

func (g *gatedQuoter) Quote(ctx context.Context, users []int64, keys []string) (wallet.Quote, error) {
	g.wait()
	return g.testLedger.(wallet.Quoter).Quote(ctx, users, keys)
}

func (g *gatedQuoter) Hint(users []int64) (map[int64]int64, bool) {
	g.wait()
	return g.testLedger.(wallet.Quoter).Hint(users)
}

// TestASendersGiftsOnEitherSideOfAnotherCommand: one batch holds a gift, a
// join and a second gift of the same sender, so its gifts form two runs,
// both charged inside the one commit. The second run is decided on the
// balance the first leaves, which is what the commit finds when it makes
// the charges in order: both gifts commit, each charged once.
func TestASendersGiftsOnEitherSideOfAnotherCommand(t *testing.T) {
	stores(t, func(t *testing.T, open func(testing.TB) store.Repository) {
		repo := open(t)
		l := ledgerOf(t, repo)
		g := &gatedQuoter{testLedger: l, entered: make(chan struct{}), gate: make(chan struct{})}
		reg := newRegistry(t, repo, cell.Config{Wallet: g, SettleInCommit: true}, nil)
		giftRoom(t, reg, l, "g", 1000)
		cmds := []*room.Envelope{heart("g", "blocker", 1), heart("g", "gift-1", 7), env("g", "j12", 12, &room.JoinRoom{}), heart("g", "gift-2", 7)}
		results, errs := behindABlocker(t, reg, g.entered, g.gate, cmds)
		for i, err := range errs {
			if err != nil {
				t.Fatalf("%s: %v", cmds[i].CommandID, err)
			}
		}
		for i, want := range map[int]int64{1: 920, 3: 850} {
			if o := paid(cmds[i]); o.ChargedAt == 0 || o.BalanceAfter != want {
				t.Fatalf("%s paid %+v, want balance %d", cmds[i].CommandID, o, want)
			}
		}
		if b := balance(t, l, 10); b != 850 {
			t.Fatalf("balance %d, want 850 (the blocker and both gifts, once each)", b)
		}
		if h := heatOf(t, reg, "g"); h != 150 {
			t.Fatalf("heat %d, want 150", h)
		}
		checkLog(t, repo, "g", results[3].RoomVersion)
	})
}

// countingQuoter is the embedded ledger counting the reads rooms make.
type countingQuoter struct {
	testLedger
	reads atomic.Int64
}

func (c *countingQuoter) Quote(ctx context.Context, users []int64, keys []string) (wallet.Quote, error) {
	c.reads.Add(1)
	return c.testLedger.(wallet.Quoter).Quote(ctx, users, keys)
}

func (c *countingQuoter) Hint(users []int64) (map[int64]int64, bool) {
	return c.testLedger.(wallet.Quoter).Hint(users)
}

// TestASenderWhoGaveBeforeIsDecidedWithoutARead: a sender topped up on
// another node has its first gift here decided on a read, and every later
// one on the hint its commits left, with no read; a sender topped up
// through this node's ledger gives on the hint the top-up left, with no
// read at all. Each gift is charged what it cost.
func TestASenderWhoGaveBeforeIsDecidedWithoutARead(t *testing.T) {
	stores(t, func(t *testing.T, open func(testing.TB) store.Repository) {
		for _, here := range []bool{false, true} {
			repo := open(t)
			l := ledgerOf(t, repo)
			c := &countingQuoter{testLedger: l}
			reg := newRegistry(t, repo, cell.Config{Wallet: c, SettleInCommit: true}, nil)
			// The MySQL subtests share a database: each has its room, and
			// counts from the balance its sender starts with.
			roomID, reads := "often-elsewhere", int64(1)
			if here {
				roomID, reads = "often-here", 0
				giftRoom(t, reg, l, roomID, 1000)
			} else {
				giftRoom(t, reg, nil, roomID, 0)
				creditElsewhere(t, repo, 10, 1000)
			}
			start := balance(t, l, 10)
			for i := range 20 {
				sent := heart(roomID, fmt.Sprintf("gift-%d", i), 1)
				mustSubmit(t, reg, sent)
				if o, want := paid(sent), start-int64(10*(i+1)); o.BalanceAfter != want {
					t.Fatalf("gift %d recorded balance %d, want %d", i, o.BalanceAfter, want)
				}
			}
			if n := c.reads.Load(); n != reads {
				t.Fatalf("topped up here: %v; %d reads for 20 gifts of one sender, want %d", here, n, reads)
			}
			if b := balance(t, l, 10); b != start-200 {
				t.Fatalf("balance %d, want %d", b, start-200)
			}
		}
	})
}

// TestTheReconcilerSettlesOnlyTheChargesOwnGift: a gift charged before its
// commit (a wallet the room cannot quote) reuses the command id of a join
// the room no longer remembers; its commit meets the join's log row and it
// is refused. The reconciler finds a row of that id, but not the charge's
// gift, and refunds it. Neither another sender nor another amount of the
// same id makes a row the charge's gift.
func TestTheReconcilerSettlesOnlyTheChargesOwnGift(t *testing.T) {
	for _, settleInCommit := range []bool{false, true} {
		t.Run(fmt.Sprintf("settle in commit %v", settleInCommit), func(t *testing.T) {
			stores(t, func(t *testing.T, open func(testing.TB) store.Repository) {
				ctx := context.Background()
				repo := open(t)
				ledger := ledgerOf(t, repo)
				l := &flaky{Wallet: ledger} // hides the ledger's quotes: the gift is charged first
				cfg := cell.Config{Wallet: l, SettleInCommit: settleInCommit}
				first := newRegistry(t, repo, cfg, nil)
				giftRoom(t, first, l, "g", 1000) // j10 is user 10's join
				if err := first.Close(ctx); err != nil {
					t.Fatal(err)
				}
				reg := newRegistry(t, repo, cfg, nil) // remembers no command id
				if _, err := reg.Submit(ctx, heart("g", "j10", 7)); !errors.Is(err, room.ErrCommandIDConflict) {
					t.Fatalf("a gift with the join's id: %v, want command_id_conflict", err)
				}
				mustSubmit(t, reg, heart("g", "gift-1", 7))

				committed := cell.CommittedGifts(repo)
				for _, c := range []struct {
					charge wallet.Charge
					want   bool
				}{
					{wallet.Charge{Key: wallet.ChargeKey("g", "gift-1"), UserID: 10, Amount: 70}, true},
					{wallet.Charge{Key: wallet.ChargeKey("g", "j10"), UserID: 10, Amount: 70}, false},
					{wallet.Charge{Key: wallet.ChargeKey("g", "gift-1"), UserID: 11, Amount: 70}, false},
					{wallet.Charge{Key: wallet.ChargeKey("g", "gift-1"), UserID: 10, Amount: 80}, false},
					{wallet.Charge{Key: wallet.ChargeKey("g", "gift-2"), UserID: 10, Amount: 70}, false},
				} {
					found, err := committed(ctx, "g", []wallet.Charge{c.charge})
					_, id, _ := wallet.SplitChargeKey(c.charge.Key)
					if err != nil || found[id] != c.want {
						t.Fatalf("CommittedGifts(%+v) = %v, %v; want %v", c.charge, found, err, c.want)
					}
				}

				rec := &wallet.Reconciler{Wallet: ledger, Committed: committed, After: time.Minute,
					Clock: func() time.Time { return time.Now().Add(2 * time.Minute) }, Log: quiet}
				if _, err := rec.Once(ctx); err != nil {
					t.Fatal(err)
				}
				if r, found, err := ledger.Receipt(ctx, wallet.ChargeKey("g", "j10")); err != nil || !found || r.Status != wallet.StatusRefunded {
					t.Fatalf("the refused gift's charge: %+v found=%v (%v), want refunded", r, found, err)
				}
				if b := balance(t, ledger, 10); b != 930 {
					t.Fatalf("balance %d, want 1000 less the one gift that committed", b)
				}
			})
		})
	}
}
