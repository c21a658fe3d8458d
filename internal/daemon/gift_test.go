package daemon

import (
	"bufio"
	"context"
	"database/sql"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	driver "github.com/go-sql-driver/mysql"

	"hyapp/room-service/cell"
	roomv1 "hyapp/room-service/gen/room/v1"
	"hyapp/room-service/gen/room/v1/roomv1connect"
	"hyapp/room-service/internal/poll"
	"hyapp/room-service/room"
	"hyapp/room-service/rpc"
	"hyapp/room-service/store/mysql/mysqltest"
	"hyapp/room-service/store/sqlite"
	"hyapp/room-service/wallet"
)

// shortGiftWindows make the reconciler decide within seconds: a charge is
// decided once older than wallet_reconcile_after, which must exceed
// gift_apply_window + commit_timeout + wallet_timeout.
var shortGiftWindows = []string{
	"-gift-apply-window", "1s", "-commit-timeout", "2s", "-wallet-timeout", "2s", "-wallet-reconcile-after", "6s",
}

// clients are the service's three APIs at one address.
type clients struct {
	room   roomv1connect.RoomServiceClient
	wallet roomv1connect.WalletServiceClient
	ops    roomv1connect.OperatorServiceClient
}

func clientsAt(addr string) clients {
	base := "http://" + addr
	return clients{
		room:   roomv1connect.NewRoomServiceClient(http.DefaultClient, base),
		wallet: roomv1connect.NewWalletServiceClient(http.DefaultClient, base),
		ops:    roomv1connect.NewOperatorServiceClient(http.DefaultClient, base),
	}
}

// ledgerView is what the tests read of the embedded ledger: the wallet port
// plus the journal and the totals both embedded ledgers have.
type ledgerView interface {
	wallet.Wallet
	Totals(ctx context.Context) (wallet.Totals, error)
	Entries(ctx context.Context, userID, afterEntryID int64, limit int) ([]wallet.Entry, error)
}

func ledgerOf(t *testing.T, m *Main) ledgerView {
	t.Helper()
	l, ok := m.ledger.(ledgerView)
	if !ok {
		t.Fatalf("the embedded ledger %T has no Totals/Entries", m.ledger)
	}
	return l
}

// startChildWith runs the service as a child process with extra flags and
// returns it and its address. The test kills it in cleanup.
func startChildWith(t *testing.T, dir string, args ...string) (*exec.Cmd, string) {
	t.Helper()
	return spawn(t, append([]string{"-listen", "127.0.0.1:0", "-data-dir", dir}, args...), nil)
}

// spawn runs this test binary as the service with args and extra
// environment, waits until it serves and returns it and its address. It
// reads the child's log to the end, so the child never blocks on a full
// pipe, and kills it when the test ends.
func spawn(t *testing.T, args, env []string) (*exec.Cmd, string) {
	t.Helper()
	return spawnTo(t, nil, args, env)
}

// spawnTo is spawn with the child's standard output written to stdout
// (nil: discarded).
func spawnTo(t *testing.T, stdout io.Writer, args, env []string) (*exec.Cmd, string) {
	t.Helper()
	// A gRPC port of its own: several children run at once.
	cmd := exec.Command(os.Args[0], append([]string{"-grpc-listen", "127.0.0.1:0"}, args...)...)
	cmd.Stdout = stdout
	cmd.Env = append(append(os.Environ(), childEnv+"=1"), env...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if m := servingRe.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case addr <- m[1]:
				default:
				}
			}
		}
	}()
	select {
	case a := <-addr:
		return cmd, a
	case <-time.After(60 * time.Second):
		t.Fatalf("the child %v did not start serving", args)
	}
	return nil, ""
}

// giftRoom creates roomID (owner 1), seats the receivers on seats 0.. and
// brings the others into the room without a seat.
func giftRoom(t *testing.T, c clients, roomID string, onMic, others []int64) {
	t.Helper()
	ctx := context.Background()
	if _, err := c.room.CreateRoom(ctx, connect.NewRequest(&roomv1.CreateRoomRequest{
		RoomId: roomID, CommandId: "create", OperatorUserId: 1, OwnerUserId: 1, SeatCount: 10,
	})); err != nil {
		t.Fatalf("create %s: %v", roomID, err)
	}
	for i, u := range onMic {
		if _, err := c.room.JoinRoom(ctx, connect.NewRequest(&roomv1.JoinRoomRequest{RoomId: roomID, CommandId: fmt.Sprint("join-", u), OperatorUserId: u})); err != nil {
			t.Fatalf("join %d: %v", u, err)
		}
		if _, err := c.room.TakeMic(ctx, connect.NewRequest(&roomv1.TakeMicRequest{RoomId: roomID, CommandId: fmt.Sprint("mic-", u), OperatorUserId: u, SeatIndex: int32(i)})); err != nil {
			t.Fatalf("seat %d: %v", u, err)
		}
	}
	for _, u := range others {
		if _, err := c.room.JoinRoom(ctx, connect.NewRequest(&roomv1.JoinRoomRequest{RoomId: roomID, CommandId: fmt.Sprint("join-", u), OperatorUserId: u})); err != nil {
			t.Fatalf("join %d: %v", u, err)
		}
	}
}

func credit(t *testing.T, c clients, user, amount int64) {
	t.Helper()
	res, err := c.wallet.CreditCoins(context.Background(), connect.NewRequest(&roomv1.CreditCoinsRequest{
		UserId: user, Amount: amount, IdempotencyKey: fmt.Sprint("topup-", user),
	}))
	if err != nil || res.Msg.GetDuplicate() {
		t.Fatalf("credit %d to %d: %v %v", amount, user, res, err)
	}
}

func balance(t *testing.T, c clients, user int64) int64 {
	t.Helper()
	res, err := c.wallet.GetBalance(context.Background(), connect.NewRequest(&roomv1.GetBalanceRequest{UserId: user}))
	if err != nil {
		t.Fatalf("balance of %d: %v", user, err)
	}
	return res.Msg.GetBalance()
}

func totals(t *testing.T, l ledgerView) wallet.Totals {
	t.Helper()
	tot, err := l.Totals(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return tot
}

// logRow is one command of a room's log, decoded.
type logRow struct {
	entry *roomv1.CommandLogEntry
	env   *room.Envelope
}

// gift is the row's SendGift, or nil.
func (r logRow) gift() *room.SendGift {
	g, _ := r.env.Command.(*room.SendGift)
	return g
}

// readLog reads a room's whole command log through OperatorService and
// checks that its versions are gap-free and its command ids unique.
func readLog(t *testing.T, c clients, roomID string) []logRow {
	t.Helper()
	var out []logRow
	ids := map[string]bool{}
	for {
		res, err := c.ops.ListCommands(context.Background(), connect.NewRequest(&roomv1.ListCommandsRequest{
			RoomId: roomID, AfterVersion: int64(len(out)), Limit: 10000,
		}))
		if err != nil {
			t.Fatalf("list commands of %s: %v", roomID, err)
		}
		if len(res.Msg.GetCommands()) == 0 {
			return out
		}
		for _, e := range res.Msg.GetCommands() {
			if e.GetRoomVersion() != int64(len(out)+1) {
				t.Fatalf("room %s: version %d at row %d", roomID, e.GetRoomVersion(), len(out))
			}
			if ids[e.GetCommandId()] {
				t.Fatalf("room %s: command %s is in the log twice", roomID, e.GetCommandId())
			}
			ids[e.GetCommandId()] = true
			env, err := room.DecodeCommand(roomID, e.GetCommandId(), room.CommandType(e.GetCommandType()), []byte(e.GetPayloadJson()))
			if err != nil {
				t.Fatalf("room %s: decode %s: %v", roomID, e.GetCommandId(), err)
			}
			out = append(out, logRow{entry: e, env: env})
		}
	}
}

// giftSums adds up the SendGift rows of a log: their number, cost and
// lucky rewards, in all and by sender.
type giftSums struct {
	gifts          int64
	cost, reward   int64
	costBy, gainBy map[int64]int64
}

func sumGifts(rows []logRow) giftSums {
	s := giftSums{costBy: map[int64]int64{}, gainBy: map[int64]int64{}}
	for _, r := range rows {
		g := r.gift()
		if g == nil {
			continue
		}
		s.gifts++
		s.cost += g.Cost()
		s.reward += g.Outcome.Reward
		s.costBy[r.env.Operator] += g.Cost()
		s.gainBy[r.env.Operator] += g.Outcome.Reward
	}
	return s
}

// stormGifts are the sends of the storm: normal and lucky, several counts.
var stormGifts = []struct {
	id    string
	count int32
}{{"rose", 1}, {"rose", 10}, {"heart", 1}, {"heart", 7}, {"lucky_clover", 1}, {"lucky_clover", 10}}

// TestGiftStormSurvivesSIGKILL kills the service with SIGKILL while many
// senders send gifts, then restarts it on the same data. Every acknowledged
// gift is in the log exactly once with the balance it answered; retries
// charge nothing; once the reconciler has decided every charge the crash
// left pending, the ledger's debits and rewards equal the gifts in the log
// exactly, and each sender's balance is what they were credited less what
// their committed gifts cost plus what they won.
//
// The storm goes to a few rooms, each sender into all of them at once: on
// SQLite the ledger and the rooms share one writer, so while one room
// commits, others have been charged and wait for theirs. A SIGKILL then
// leaves charges whose gifts never committed, and the reconciler must
// refund them; with a single room the kill rarely lands between a charge
// and its commit.
func TestGiftStormSurvivesSIGKILL(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a child process")
	}
	dir := t.TempDir()
	child, addr := startChildWith(t, dir, shortGiftWindows...)
	c := clientsAt(addr)
	ctx := context.Background()
	rooms := []string{"storm-0", "storm-1", "storm-2", "storm-3"}
	receivers := []int64{2, 3, 4}
	var senders []int64
	for s := range 12 {
		senders = append(senders, int64(100+s))
	}
	for _, id := range rooms {
		giftRoom(t, c, id, receivers, senders)
	}
	const credited = 1_000_000
	for _, s := range senders {
		credit(t, c, s, credited)
	}

	type ack struct {
		req *roomv1.SendGiftRequest
		res *roomv1.SendGiftResponse
	}
	// Each sender into every room at once.
	acked := loadThenKill(t, child, len(rooms)*len(senders), 1500, 90*time.Second, func(w, i int) (ack, error) {
		sender, roomID := senders[w%len(senders)], rooms[w/len(senders)]
		g := stormGifts[(w+i)%len(stormGifts)]
		to := []int64{receivers[i%len(receivers)]}
		if i%4 == 0 {
			to = append(to, receivers[(i+1)%len(receivers)])
		}
		req := &roomv1.SendGiftRequest{
			RoomId: roomID, CommandId: fmt.Sprintf("g%d-%d", w, i), OperatorUserId: sender,
			ReceiverUserIds: to, GiftId: g.id, Count: g.count,
		}
		res, err := c.room.SendGift(ctx, connect.NewRequest(req))
		if err != nil {
			return ack{}, err
		}
		return ack{req: req, res: res.Msg}, nil
	})

	m, _ := runMain(t, dir, shortGiftWindows...)
	c = clientsAt(m.Addr)
	l := ledgerOf(t, m)
	readAll := func() []logRow {
		var rows []logRow
		for _, id := range rooms {
			rows = append(rows, readLog(t, c, id)...)
		}
		return rows
	}

	// Every acknowledged gift is in the log once, as it was answered.
	byID := map[string]logRow{}
	for _, r := range readAll() {
		byID[r.env.RoomID+" "+r.entry.GetCommandId()] = r
	}
	for _, a := range acked {
		r, ok := byID[a.req.GetRoomId()+" "+a.req.GetCommandId()]
		if !ok {
			t.Fatalf("acknowledged gift %s/%s is not in the log", a.req.GetRoomId(), a.req.GetCommandId())
		}
		g := r.gift()
		if g == nil || r.entry.GetRoomVersion() != a.res.GetRoomVersion() || g.Outcome.BalanceAfter != a.res.GetCoinBalanceAfter() ||
			g.Cost() != a.res.GetCost() || g.Outcome.Reward != a.res.GetLuckyReward() {
			t.Fatalf("acknowledged gift %s answered %v; the log holds version %d %+v", a.req.GetCommandId(), a.res, r.entry.GetRoomVersion(), r.env.Command)
		}
	}

	// The reconciler settles what committed and refunds what did not; no
	// new charge is made after the restart, so nothing stays pending.
	poll.Until(t, 90*time.Second, "pending charges after the restart", func() error {
		if p := totals(t, l).Pending; p.Charges != 0 {
			return fmt.Errorf("%d charges pending", p.Charges)
		}
		return nil
	})
	before := totals(t, l)
	balances := map[int64]int64{}
	for _, s := range senders {
		balances[s] = balance(t, c, s)
	}

	// Retrying every acknowledged gift answers it again and charges nothing.
	work := make(chan ack)
	var retryWG sync.WaitGroup
	errs := make(chan error, 1)
	for range 16 {
		retryWG.Go(func() {
			for a := range work {
				res, err := c.room.SendGift(ctx, connect.NewRequest(a.req))
				if err == nil && (res.Msg.GetRoomVersion() != a.res.GetRoomVersion() || res.Msg.GetCoinBalanceAfter() != a.res.GetCoinBalanceAfter() ||
					res.Msg.GetCost() != a.res.GetCost() || res.Msg.GetLuckyReward() != a.res.GetLuckyReward()) {
					err = fmt.Errorf("answered %v, first %v", res.Msg, a.res)
				}
				if err != nil {
					select {
					case errs <- fmt.Errorf("retry of %s/%s: %w", a.req.GetRoomId(), a.req.GetCommandId(), err):
					default:
					}
				}
			}
		})
	}
	for _, a := range acked {
		work <- a
	}
	close(work)
	retryWG.Wait()
	select {
	case err := <-errs:
		t.Fatal(err)
	default:
	}
	if after := totals(t, l); after != before {
		t.Fatalf("retries changed the ledger:\nbefore %+v\nafter  %+v", before, after)
	}
	for _, s := range senders {
		if got := balance(t, c, s); got != balances[s] {
			t.Fatalf("retries changed the balance of %d: %d, was %d", s, got, balances[s])
		}
	}

	// The ledger's debits equal the committed gifts exactly.
	rows := readAll()
	sums := sumGifts(rows)
	tot := totals(t, l)
	if tot.Settled.Charges != sums.gifts || tot.Settled.Amount != sums.cost || tot.Settled.Reward != sums.reward || tot.Pending != (wallet.ChargeTotals{}) {
		t.Fatalf("the log commits %d gifts costing %d with %d won back; the ledger has settled %+v, pending %+v, refunded %+v",
			sums.gifts, sums.cost, sums.reward, tot.Settled, tot.Pending, tot.Refunded)
	}
	if d := tot.Imbalance(); d != 0 {
		t.Fatalf("the ledger's balances are %d off its journal: %+v", d, tot)
	}
	for _, s := range senders {
		want := credited - sums.costBy[s] + sums.gainBy[s]
		if got := balance(t, c, s); got != want {
			t.Fatalf("sender %d: balance %d, want credited %d - committed %d + won %d = %d", s, got, credited, sums.costBy[s], sums.gainBy[s], want)
		}
	}
	for _, r := range rows {
		g := r.gift()
		if g == nil {
			continue
		}
		rc, found, err := l.Receipt(ctx, wallet.ChargeKey(r.env.RoomID, r.entry.GetCommandId()))
		if err != nil || !found || rc.Status != wallet.StatusSettled || rc.Amount != g.Cost() || rc.Reward != g.Outcome.Reward ||
			rc.BalanceAfter != g.Outcome.BalanceAfter || rc.UserID != r.env.Operator {
			t.Fatalf("gift %s/%s in the log (%+v) has the charge %+v found=%v err=%v", r.env.RoomID, r.entry.GetCommandId(), g.Outcome, rc, found, err)
		}
	}
	t.Logf("%d gifts acknowledged before SIGKILL; the log holds %d; the reconciler refunded %d charges of gifts that never committed",
		len(acked), sums.gifts, tot.Refunded.Charges)
}

// TestGiftRetryAfterRestartInsideApplyWindow retries committed gifts after
// a clean restart, while their charges are still young enough to apply: the
// restarted room no longer remembers their ids, the ledger replays their
// charges, and the log must still answer them as duplicates with their
// first balance, charging and committing nothing again.
func TestGiftRetryAfterRestartInsideApplyWindow(t *testing.T) {
	dir := t.TempDir()
	m, _ := runMain(t, dir) // the default gift_apply_window, 30s, covers the restart
	c := clientsAt(m.Addr)
	ctx := context.Background()
	const roomID = "window"
	const sender = int64(100)
	giftRoom(t, c, roomID, []int64{2, 3}, []int64{sender})
	credit(t, c, sender, 10_000)
	var reqs []*roomv1.SendGiftRequest
	var first []*roomv1.SendGiftResponse
	for i, g := range stormGifts {
		req := &roomv1.SendGiftRequest{RoomId: roomID, CommandId: fmt.Sprint("w", i), OperatorUserId: sender, ReceiverUserIds: []int64{2, 3}, GiftId: g.id, Count: g.count}
		res, err := c.room.SendGift(ctx, connect.NewRequest(req))
		if err != nil {
			t.Fatal(err)
		}
		reqs, first = append(reqs, req), append(first, res.Msg)
	}
	if err := m.Close(ctx); err != nil {
		t.Fatal(err)
	}

	m, _ = runMain(t, dir)
	c = clientsAt(m.Addr)
	l := ledgerOf(t, m)
	before, head, bal := totals(t, l), len(readLog(t, c, roomID)), balance(t, c, sender)
	for i, req := range reqs {
		res, err := c.room.SendGift(ctx, connect.NewRequest(req))
		if err != nil || res.Msg.GetRoomVersion() != first[i].GetRoomVersion() || res.Msg.GetCoinBalanceAfter() != first[i].GetCoinBalanceAfter() ||
			res.Msg.GetLuckyReward() != first[i].GetLuckyReward() {
			t.Fatalf("retry of %s after the restart: %v %v, first %v", req.GetCommandId(), res, err, first[i])
		}
	}
	if got := len(readLog(t, c, roomID)); got != head {
		t.Fatalf("the retries added %d commands to the log", got-head)
	}
	if after := totals(t, l); after != before {
		t.Fatalf("the retries changed the ledger:\nbefore %+v\nafter  %+v", before, after)
	}
	if got := balance(t, c, sender); got != bal {
		t.Fatalf("the retries changed the balance: %d, was %d", got, bal)
	}
}

// rocketConfig writes a config file with one small rocket level.
func rocketConfig(t *testing.T, countdown time.Duration) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "room-service.yaml")
	body := fmt.Sprintf("rocket_levels:\n  - fuel: 99\n    countdown: %s\n", countdown)
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestRocketLaunchesOnceAfterCrash ignites a rocket, kills the service with
// SIGKILL before the countdown ends and restarts it: the launch happens
// (late, not lost) exactly once, and its timer row is gone.
func TestRocketLaunchesOnceAfterCrash(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a child process")
	}
	dir := t.TempDir()
	cfg := rocketConfig(t, 5*time.Second)
	child, addr := startChildWith(t, dir, "-config", cfg)
	c := clientsAt(addr)
	ctx := context.Background()
	const roomID = "rocket"
	giftRoom(t, c, roomID, []int64{2}, []int64{100})
	credit(t, c, 100, 1000)
	// rose x 99 is exactly the level's fuel: one ignition.
	if _, err := c.room.SendGift(ctx, connect.NewRequest(&roomv1.SendGiftRequest{
		RoomId: roomID, CommandId: "ignite", OperatorUserId: 100, ReceiverUserIds: []int64{2}, GiftId: "rose", Count: 99,
	})); err != nil {
		t.Fatal(err)
	}
	snap, err := c.room.GetRoomSnapshot(ctx, connect.NewRequest(&roomv1.GetRoomSnapshotRequest{RoomId: roomID}))
	if err != nil {
		t.Fatal(err)
	}
	launches := snap.Msg.GetSnapshot().GetEconomy().GetRocket().GetLaunches()
	if len(launches) != 1 {
		t.Fatalf("the gift ignited %d rockets, want 1: %v", len(launches), snap.Msg.GetSnapshot().GetEconomy())
	}
	launch := launches[0]
	if err := child.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = child.Wait()

	// The child died with the launch pending: its timer row is there and
	// the log has no launch yet.
	db, err := sqlite.Open(ctx, filepath.Join(dir, "room.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	recs, err := db.ListCommandsAfter(ctx, roomID, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if r.CommandType == string(room.CmdLaunchRocket) {
			t.Fatalf("the rocket launched before the kill (countdown too short for this machine): %s", r.CommandID)
		}
	}
	timers, err := db.ListDueTimers(ctx, cell.TimerKindRocketLaunch, time.UnixMilli(launch.GetLaunchAtMs()), 100)
	if err != nil || len(timers) != 1 || timers[0].TimerID != cell.RocketTimerID(launch.GetRocketId()) {
		t.Fatalf("before the restart: timers %+v, err %v; want the launch of rocket %d", timers, err, launch.GetRocketId())
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	m, _ := runMain(t, dir, "-config", cfg, "-rocket-scan-interval", "100ms")
	c = clientsAt(m.Addr)
	var launched []logRow
	poll.Until(t, 60*time.Second, "the rocket launch after the restart", func() error {
		launched = launched[:0]
		for _, r := range readLog(t, c, roomID) {
			if r.entry.GetCommandType() == string(room.CmdLaunchRocket) {
				launched = append(launched, r)
			}
		}
		if len(launched) == 0 {
			return fmt.Errorf("no LaunchRocket in the log")
		}
		return nil
	})
	if len(launched) != 1 {
		t.Fatalf("%d launches in the log, want 1", len(launched))
	}
	r := launched[0]
	cmd := r.env.Command.(*room.LaunchRocket)
	if r.entry.GetCommandId() != cell.RocketLaunchCommandID(launch.GetRocketId()) || cmd.RocketID != launch.GetRocketId() || cmd.LaunchAt != launch.GetLaunchAtMs() {
		t.Fatalf("launched %s %+v, want rocket %d at %d", r.entry.GetCommandId(), cmd, launch.GetRocketId(), launch.GetLaunchAtMs())
	}
	if r.entry.GetCreatedAtMs() < launch.GetLaunchAtMs() || r.env.At < launch.GetLaunchAtMs() {
		t.Fatalf("launch committed at %d (command time %d), before its launch time %d", r.entry.GetCreatedAtMs(), r.env.At, launch.GetLaunchAtMs())
	}
	due, err := m.repo.ListDueTimers(ctx, "", time.Now().Add(24*time.Hour), 100)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range due {
		if d.RoomID == roomID && d.Kind == cell.TimerKindRocketLaunch {
			t.Fatalf("a launch timer of the room is left after the launch: %+v", d)
		}
	}
	snap, err = c.room.GetRoomSnapshot(ctx, connect.NewRequest(&roomv1.GetRoomSnapshotRequest{RoomId: roomID}))
	if err != nil {
		t.Fatal(err)
	}
	if rk := snap.Msg.GetSnapshot().GetEconomy().GetRocket(); len(rk.GetLaunches()) != 0 || rk.GetIgnitions() != 1 {
		t.Fatalf("after the launch the rocket is %v, want no launch waiting and 1 ignition", rk)
	}
}

// lockRoomRow holds a locking read of the room's row in its own
// transaction, straight to the database: the service's commits of that
// room (which fence on the row first) wait for it, while its ledger
// transactions (other tables) do not. It returns the release.
func lockRoomRow(t *testing.T, db *sql.DB, roomID string) (release func()) {
	t.Helper()
	ctx := context.Background()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var v int64
	if err := tx.QueryRowContext(ctx, `SELECT room_version FROM rooms WHERE room_id = ? FOR UPDATE`, roomID).Scan(&v); err != nil {
		_ = tx.Rollback()
		t.Fatalf("lock room %s: %v", roomID, err)
	}
	var once sync.Once
	release = func() { once.Do(func() { _ = tx.Rollback() }) }
	t.Cleanup(release)
	return release
}

// TestGiftWhoseCommitFailsChargesNothing fails gifts on MySQL whose room
// commit cannot finish: a lock the test holds on the room's row makes the
// commit time out. The embedded ledger charges a gift inside the
// transaction that commits it, so a commit that failed charged nothing: no
// charge row, the balance untouched, nothing for the reconciler to refund.
// (a) A gift retried with its command id once the database answers commits
// once, charged once, and answers the same balance on every retry. (b) A
// gift never retried leaves the balance exact.
//
// A cut of the connection (mysqltest.Proxy) cannot be aimed at the commit
// of one room; the row lock holds it back every time, on the real database.
func TestGiftWhoseCommitFailsChargesNothing(t *testing.T) {
	dsn := mysqltest.DSN(t)
	cfg, err := driver.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	connector, err := driver.NewConnector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	direct := sql.OpenDB(connector)
	t.Cleanup(func() { _ = direct.Close() })
	m, _ := runMain(t, t.TempDir(), "-mysql-dsn", dsn, "-commit-timeout", "2s")
	c := clientsAt(m.Addr)
	l := ledgerOf(t, m)
	ctx := context.Background()
	const roomID = "debit"
	const retried, abandoned = int64(100), int64(101)
	giftRoom(t, c, roomID, []int64{2}, []int64{retried, abandoned})
	const credited = 1000
	credit(t, c, retried, credited)
	credit(t, c, abandoned, credited)
	gift := func(sender int64, id string) *roomv1.SendGiftRequest {
		return &roomv1.SendGiftRequest{RoomId: roomID, CommandId: id, OperatorUserId: sender, ReceiverUserIds: []int64{2}, GiftId: "heart", Count: 7}
	}
	const cost = 70

	// failCommit sends the gift while the room's row is locked: its commit
	// times out, and with it the charge it carried.
	failCommit := func(req *roomv1.SendGiftRequest) {
		t.Helper()
		// Load the room first: loading claims the row, which the lock
		// would block before the gift is decided.
		if _, err := c.room.GetRoomSnapshot(ctx, connect.NewRequest(&roomv1.GetRoomSnapshotRequest{RoomId: roomID})); err != nil {
			t.Fatal(err)
		}
		release := lockRoomRow(t, direct, roomID)
		_, err := c.room.SendGift(ctx, connect.NewRequest(req))
		release()
		if connect.CodeOf(err) != connect.CodeUnavailable || rpc.Reason(err) != "unavailable" {
			t.Fatalf("gift %s while its commit cannot finish: %v, want unavailable", req.GetCommandId(), err)
		}
		rc, found, err := l.Receipt(ctx, wallet.ChargeKey(roomID, req.GetCommandId()))
		if err != nil || found {
			t.Fatalf("gift %s whose commit failed left a charge %+v (err %v), want none", req.GetCommandId(), rc, err)
		}
		if got := balance(t, c, req.GetOperatorUserId()); got != credited {
			t.Fatalf("balance of %d after its gift's commit failed: %d, want %d", req.GetOperatorUserId(), got, credited)
		}
	}

	// (b) The gift nobody retries.
	failCommit(gift(abandoned, "abandoned"))

	// (a) The client retries with the same command id.
	failCommit(gift(retried, "retried"))
	res, err := c.room.SendGift(ctx, connect.NewRequest(gift(retried, "retried")))
	if err != nil {
		t.Fatalf("retry once the database answers: %v", err)
	}
	if res.Msg.GetCoinBalanceAfter() != credited-cost || res.Msg.GetCost() != cost {
		t.Fatalf("retry answered %v, want balance %d after a cost of %d", res.Msg, credited-cost, cost)
	}
	for range 3 {
		again, err := c.room.SendGift(ctx, connect.NewRequest(gift(retried, "retried")))
		if err != nil || again.Msg.GetCoinBalanceAfter() != res.Msg.GetCoinBalanceAfter() || again.Msg.GetRoomVersion() != res.Msg.GetRoomVersion() {
			t.Fatalf("a further retry answered %v %v, want %v", again, err, res.Msg)
		}
	}
	if got := balance(t, c, retried); got != credited-cost {
		t.Fatalf("balance of %d after its gift and retries: %d, want %d", retried, got, credited-cost)
	}
	entries, err := l.Entries(ctx, retried, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	debits := 0
	for _, e := range entries {
		switch {
		case e.Kind == wallet.EntryGiftDebit && e.Key == wallet.ChargeKey(roomID, "retried"):
			debits++
		case e.Kind != wallet.EntryCredit:
			t.Fatalf("unexpected journal entry of %d: %+v", retried, e)
		}
	}
	if debits != 1 {
		t.Fatalf("the retried gift was debited %d times: %+v", debits, entries)
	}
	if rc, _, err := l.Receipt(ctx, wallet.ChargeKey(roomID, "retried")); err != nil || rc.Status != wallet.StatusSettled || rc.BalanceAfter != credited-cost {
		t.Fatalf("the retried gift's charge %+v (err %v), want settled at %d by its commit", rc, err, credited-cost)
	}

	// The log holds the retried gift once and the abandoned one not at all;
	// the ledger holds the one charge, settled, and nothing pending or refunded.
	sums := sumGifts(readLog(t, c, roomID))
	if sums.gifts != 1 || sums.costBy[retried] != cost || sums.costBy[abandoned] != 0 {
		t.Fatalf("the log's gifts: %+v, want only the retried one", sums)
	}
	if got := balance(t, c, abandoned); got != credited {
		t.Fatalf("balance of %d, whose gift never committed: %d, want %d", abandoned, got, credited)
	}
	tot := totals(t, l)
	if tot.Settled.Amount != cost || tot.Refunded.Charges != 0 || tot.Pending.Charges != 0 || tot.Imbalance() != 0 {
		t.Fatalf("ledger totals %+v, want %d settled and nothing pending or refunded", tot, cost)
	}
}

// TestFiftyConcurrentSendersShareOneBalance sends 50 gifts at once from
// one sender whose balance covers exactly K of them: K commit, the others
// fail with insufficient_balance, the balance ends exact and the ledger
// agrees with the log.
func TestFiftyConcurrentSendersShareOneBalance(t *testing.T) {
	// The gifts go to one room (one cell, charged in few wallet calls) or
	// spread over five (cells charging the one balance concurrently).
	run := func(t *testing.T, rooms int, args ...string) {
		m, _ := runMain(t, t.TempDir(), args...)
		c := clientsAt(m.Addr)
		l := ledgerOf(t, m)
		ctx := context.Background()
		const sender = int64(100)
		var roomIDs []string
		for r := range rooms {
			roomIDs = append(roomIDs, fmt.Sprint("shared-", r))
			giftRoom(t, c, roomIDs[r], []int64{2}, []int64{sender})
		}
		const (
			senders   = 50
			k         = 17
			cost      = 10 // heart x 1
			remainder = 7
			credited  = k*cost + remainder
		)
		credit(t, c, sender, credited)

		type outcome struct {
			id  string // room/command
			res *roomv1.SendGiftResponse
			err error
		}
		out := make(chan outcome, senders)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range senders {
			wg.Go(func() {
				roomID, id := roomIDs[i%rooms], fmt.Sprintf("gift-%d", i)
				<-start
				// A client retries what it is told to retry: rooms that
				// decided on a balance another room spent first decide again,
				// and answer unavailable if that keeps happening.
				req := &roomv1.SendGiftRequest{
					RoomId: roomID, CommandId: id, OperatorUserId: sender, ReceiverUserIds: []int64{2}, GiftId: "heart", Count: 1,
				}
				res, err := c.room.SendGift(ctx, connect.NewRequest(req))
				for connect.CodeOf(err) == connect.CodeUnavailable {
					res, err = c.room.SendGift(ctx, connect.NewRequest(req))
				}
				o := outcome{id: roomID + "/" + id, err: err}
				if err == nil {
					o.res = res.Msg
				}
				out <- o
			})
		}
		close(start)
		wg.Wait()
		close(out)

		ok := map[string]bool{}
		after := map[int64]bool{}
		refused := 0
		for o := range out {
			switch {
			case o.err == nil:
				ok[o.id] = true
				if after[o.res.GetCoinBalanceAfter()] {
					t.Fatalf("two gifts answered the balance %d", o.res.GetCoinBalanceAfter())
				}
				after[o.res.GetCoinBalanceAfter()] = true
			case rpc.Reason(o.err) == "insufficient_balance":
				refused++
			default:
				t.Fatalf("gift %s: %v, want success or insufficient_balance", o.id, o.err)
			}
		}
		if len(ok) != k || refused != senders-k {
			t.Fatalf("%d gifts committed and %d refused, want %d and %d", len(ok), refused, k, senders-k)
		}
		// The committed gifts paid one after another: balances after are
		// credited-10, credited-20, ..., remainder.
		for i := 1; i <= k; i++ {
			if !after[credited-int64(i)*cost] {
				t.Fatalf("no gift answered the balance %d: %v", credited-int64(i)*cost, after)
			}
		}
		if got := balance(t, c, sender); got != remainder {
			t.Fatalf("final balance %d, want %d", got, remainder)
		}
		var rows []logRow
		for _, id := range roomIDs {
			rows = append(rows, readLog(t, c, id)...)
		}
		sums := sumGifts(rows)
		for _, r := range rows {
			if id := r.env.RoomID + "/" + r.entry.GetCommandId(); r.gift() != nil && !ok[id] {
				t.Fatalf("gift %s is in the log but was answered as refused", id)
			}
		}
		tot := totals(t, l)
		charged := tot.Pending.Amount + tot.Settled.Amount
		if sums.gifts != k || sums.cost != k*cost || charged != sums.cost || tot.Pending.Charges+tot.Settled.Charges != k || tot.Refunded.Charges != 0 || tot.Imbalance() != 0 {
			t.Fatalf("log: %d gifts costing %d; ledger %+v", sums.gifts, sums.cost, tot)
		}
	}
	for _, rooms := range []int{1, 5} {
		t.Run(fmt.Sprintf("sqlite/rooms=%d", rooms), func(t *testing.T) { run(t, rooms) })
		t.Run(fmt.Sprintf("mysql/rooms=%d", rooms), func(t *testing.T) { run(t, rooms, "-mysql-dsn", mysqltest.DSN(t)) })
	}
}

// TestGiftBadInputChargesNothing sends gifts the catalogue or the room
// refuses: each is answered with its stable reason, the sender's balance
// is unchanged and the ledger holds no charge for any of them.
func TestGiftBadInputChargesNothing(t *testing.T) {
	m, _ := runMain(t, t.TempDir())
	c := clientsAt(m.Addr)
	l := ledgerOf(t, m)
	ctx := context.Background()
	const (
		roomID   = "bad"
		closedID = "closed"
		sender   = int64(100)
		poor     = int64(101) // credited less than a castle
		onMic    = int64(2)
		offMic   = int64(3)
		outsider = int64(999) // never joins
		credited = 1000
	)
	giftRoom(t, c, roomID, []int64{onMic}, []int64{offMic, sender, poor})
	giftRoom(t, c, closedID, []int64{onMic}, []int64{sender})
	if _, err := c.room.CloseRoom(ctx, connect.NewRequest(&roomv1.CloseRoomRequest{RoomId: closedID, CommandId: "close", OperatorUserId: 1})); err != nil {
		t.Fatal(err)
	}
	credit(t, c, sender, credited)
	credit(t, c, poor, credited)
	before := totals(t, l)

	send := func(roomID, id string, from int64, to []int64, giftID string, count int32) *roomv1.SendGiftRequest {
		return &roomv1.SendGiftRequest{RoomId: roomID, CommandId: id, OperatorUserId: from, ReceiverUserIds: to, GiftId: giftID, Count: count}
	}
	for _, tc := range []struct {
		name   string
		req    *roomv1.SendGiftRequest
		reason string
	}{
		{"unknown gift", send(roomID, "unknown", sender, []int64{onMic}, "no_such_gift", 1), "unknown_gift"},
		{"count not allowed", send(roomID, "count", sender, []int64{onMic}, "rose", 2), "count_not_allowed"},
		{"receiver not in room", send(roomID, "outsider", sender, []int64{outsider}, "rose", 1), "receiver_not_in_room"},
		{"receiver not on mic", send(roomID, "offmic", sender, []int64{offMic}, "rose", 1), "receiver_not_on_mic"},
		{"lucky receiver not on mic", send(roomID, "lucky-offmic", sender, []int64{offMic}, "lucky_clover", 1), "receiver_not_on_mic"},
		{"one of two receivers not on mic", send(roomID, "half-offmic", sender, []int64{onMic, offMic}, "rose", 1), "receiver_not_on_mic"},
		{"sender is the receiver", send(roomID, "self", sender, []int64{sender}, "rose", 1), "cannot_gift_self"},
		{"no receiver", send(roomID, "nobody", sender, nil, "rose", 1), "bad_receivers"},
		{"sender not in room", send(roomID, "stranger", outsider, []int64{onMic}, "rose", 1), "not_in_room"},
		{"insufficient balance", send(roomID, "castle", poor, []int64{offMic}, "castle", 1), "insufficient_balance"},
		{"closed room", send(closedID, "closed", sender, []int64{onMic}, "rose", 1), "room_closed"},
		{"unknown room", send("nowhere", "nowhere", sender, []int64{onMic}, "rose", 1), "room_not_found"},
		{"missing command id", send(roomID, "", sender, []int64{onMic}, "rose", 1), "missing_command_id"},
	} {
		_, err := c.room.SendGift(ctx, connect.NewRequest(tc.req))
		if got := rpc.Reason(err); got != tc.reason {
			t.Errorf("%s: %v (reason %q), want reason %s", tc.name, err, got, tc.reason)
		}
		if tc.req.GetCommandId() == "" {
			continue
		}
		if rc, found, err := l.Receipt(ctx, wallet.ChargeKey(tc.req.GetRoomId(), tc.req.GetCommandId())); err != nil || found {
			t.Errorf("%s: the ledger holds a charge for it: %+v %v", tc.name, rc, err)
		}
	}
	if after := totals(t, l); after != before {
		t.Fatalf("refused gifts changed the ledger:\nbefore %+v\nafter  %+v", before, after)
	}
	for _, u := range []int64{sender, poor} {
		if got := balance(t, c, u); got != credited {
			t.Fatalf("balance of %d after refused gifts: %d, want %d", u, got, credited)
		}
	}
	for _, id := range []string{roomID, closedID} {
		for _, r := range readLog(t, c, id) {
			if r.gift() != nil {
				t.Fatalf("room %s: a refused gift is in the log: %s", id, r.entry.GetCommandId())
			}
		}
	}

	// The same sender and receiver can pay for a valid gift: the refusals
	// above were for their reasons, not for the setup.
	res, err := c.room.SendGift(ctx, connect.NewRequest(send(roomID, "valid", sender, []int64{onMic}, "rose", 1)))
	if err != nil || res.Msg.GetCoinBalanceAfter() != credited-1 {
		t.Fatalf("a valid gift: %v %v, want balance %d", res, err, credited-1)
	}
}
