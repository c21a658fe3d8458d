package bench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"hyapp/room-service/app"
	"hyapp/room-service/cell"
	"hyapp/room-service/gift"
	"hyapp/room-service/lease"
	"hyapp/room-service/room"
	"hyapp/room-service/store"
	"hyapp/room-service/wallet"
	"hyapp/room-service/wallet/ledger"
)

// Gift scenarios run the gift path as the daemon wires it: each send goes
// through the gift use case the RPC handler uses (app.Gifts: the sample
// catalogue's facts and lucky draw, then Submit), the room's cell charges a run of gifts with one wallet call and
// commits them, and a wallet.Settler settles the charges of committed gifts
// off the rooms' path. The wallet is the embedded ledger on the scenario's
// own database, optionally behind withLatency.

const (
	// stormSenders and stormReceivers populate the storm room: senders
	// joined, receivers seated on mics 0..7.
	stormSenders   = 500
	stormReceivers = 8
	// roomSenders and roomReceivers populate each room of GiftRooms.
	roomSenders   = 10
	roomReceivers = 2
	// giftCoins is what every sender is credited before the gifts.
	giftCoins = 1_000_000_000
	// luckyShare is the share of GiftRooms' sends that are lucky gifts.
	luckyShare = 0.02
)

// giftLedger is the embedded ledger: the wallet port, the totals the
// agreement check reads, and Close.
type giftLedger interface {
	wallet.Wallet
	Totals(ctx context.Context) (wallet.Totals, error)
	Close() error
}

// giftEngine is a registry that pays gifts, on a fresh database.
type giftEngine struct {
	repo    store.Repository
	ledger  giftLedger
	settler *wallet.Settler
	reg     *cell.Registry
	gifts   *app.Gifts
	closed  bool
}

// openGiftEngine opens a fresh repository, its ledger, the sample
// catalogue and a registry whose wallet is the ledger behind latency
// (none when latency is 0). The embedded ledger is settled by the room
// commit; a remote-style wallet by a settler after it.
func openGiftEngine(ctx context.Context, env Env, latency time.Duration) (*giftEngine, error) {
	catalogue, err := gift.New(gift.DefaultGifts(), gift.Settings{Lucky: gift.DefaultLucky(), MaxPayoutBP: 9500})
	if err != nil {
		return nil, fmt.Errorf("catalogue: %w", err)
	}
	repo, err := env.Open(ctx)
	if err != nil {
		return nil, err
	}
	ledger, err := ledger.Of(repo, ledger.Options{})
	if err != nil {
		_ = repo.Close()
		return nil, err
	}
	cfg := env.engineConfig()
	cfg.Wallet = withLatency(ledger, latency)
	var settler *wallet.Settler
	var sink cell.EventSink = nopSink{}
	if latency == 0 {
		// The embedded ledger shares the database: the room commit settles.
		cfg.SettleInCommit = true
	} else {
		// A remote wallet settles after the commit, off the critical path.
		settler = wallet.NewSettler(cfg.Wallet, nil, quiet)
		sink = cell.GiftSettler{Settle: settler.Add}
	}
	reg := cell.New(cfg, repo, lease.NewLocal(), sink, nil, quiet)
	return &giftEngine{repo: repo, ledger: ledger, settler: settler, reg: reg, gifts: app.NewGifts(catalogue, reg)}, nil
}

// stop closes the registry, then flushes the settler: after it every
// committed gift's charge has been handed to Settle. The ledger and the
// database stay open for reading.
func (e *giftEngine) stop(ctx context.Context) error {
	if e.closed {
		return nil
	}
	e.closed = true
	err := e.reg.Close(ctx)
	if e.settler != nil {
		e.settler.Close()
	}
	return err
}

// close stops the engine and closes the ledger and the database.
func (e *giftEngine) close(ctx context.Context) {
	_ = e.stop(ctx)
	_ = e.ledger.Close()
	_ = e.repo.Close()
}

// populate joins receivers and seats them on mics 0.., and joins senders,
// in room roomID; the senders' joins go in parallel.
func (e *giftEngine) populate(ctx context.Context, roomID string, receivers, senders []int64, parallelism int) error {
	submit := func(id string, user int64, cmd room.Command) error {
		_, err := e.reg.Submit(ctx, &room.Envelope{RoomID: roomID, CommandID: id, Operator: user, Command: cmd})
		if err != nil {
			return fmt.Errorf("%s room=%s user=%d: %w", cmd.Type(), roomID, user, err)
		}
		return nil
	}
	for i, u := range receivers {
		if err := submit(fmt.Sprintf("join-%d", u), u, &room.JoinRoom{Nickname: "host"}); err != nil {
			return err
		}
		if err := submit(fmt.Sprintf("mic-%d", u), u, &room.TakeMic{SeatIndex: int32(i)}); err != nil {
			return err
		}
	}
	return parallel(parallelism, len(senders), func(i int) error {
		return submit(fmt.Sprintf("join-%d", senders[i]), senders[i], &room.JoinRoom{Nickname: "fan"})
	})
}

// credit gives every user giftCoins, in parallel; the ledger group-commits the credits.
func (e *giftEngine) credit(ctx context.Context, users []int64) error {
	return parallel(64, len(users), func(i int) error {
		_, _, err := e.ledger.Credit(ctx, users[i], giftCoins, fmt.Sprintf("bench-credit-%d", users[i]))
		return err
	})
}

// send sends one piece of a gift as the RPC handler does (app.Gifts) and
// checks that it committed for the first time.
func (e *giftEngine) send(ctx context.Context, roomID, commandID string, sender, receiver int64, giftID string) error {
	res, err := e.gifts.Send(ctx, app.GiftSend{
		RoomID: roomID, CommandID: commandID, Sender: sender, Receivers: []int64{receiver}, GiftID: giftID, Count: 1,
	})
	switch {
	case err != nil:
		return fmt.Errorf("gift room=%s command=%s: %w", roomID, commandID, err)
	case res.Duplicate:
		return fmt.Errorf("gift room=%s command=%s: answered as a duplicate", roomID, commandID)
	}
	return nil
}

func users(first int64, n int) []int64 {
	out := make([]int64, n)
	for i := range out {
		out[i] = first + int64(i)
	}
	return out
}

// GiftStorm measures one room taking total gifts from callers in flight,
// closed loop, with stormSenders senders and stormReceivers receivers on
// mic (heart x1 and rose x1 alternately, one receiver each). Three rows:
// the same room driven with plain joins (the comparison, measured in the
// same run), gifts paid by the embedded ledger, and gifts paid by a
// remote-style wallet whose every call takes remote.
func GiftStorm(ctx context.Context, env Env, callers, total int, remote time.Duration) ([]Row, error) {
	plain, err := withEngine(ctx, env, env.engineConfig(), func(reg *cell.Registry) (Row, error) {
		ids, err := createRooms(ctx, reg, "plain", 1)
		if err != nil {
			return Row{}, err
		}
		return drive(ctx, reg, fmt.Sprintf("plain joins, one room, %d callers", callers), ids, callers, total, 2000)
	})
	if err != nil {
		return nil, err
	}
	plain.Extra = "the comparison: no wallet, one log row per command"
	local, err := giftStorm(ctx, env, callers, total, 0)
	if err != nil {
		return nil, err
	}
	local.Name = fmt.Sprintf("gifts, one room, %d callers, embedded ledger", callers)
	local.Extra = fmt.Sprintf("%.0f%% of plain; target >= 5000/s: %.2fx; p99 target <= 50 ms: %.2fx",
		100*local.Rate()/plain.Rate(), local.Rate()/5000, ms(local.P99)/50)
	slow, err := giftStorm(ctx, env, callers, total, remote)
	if err != nil {
		return nil, err
	}
	slow.Name = fmt.Sprintf("gifts, one room, %d callers, wallet +%v per call", callers, remote)
	slow.Extra = fmt.Sprintf("%.0f%% of plain, %.0f%% of embedded; target >= 2000/s: %.2fx",
		100*slow.Rate()/plain.Rate(), 100*slow.Rate()/local.Rate(), slow.Rate()/2000)
	return []Row{plain, local, slow}, nil
}

// giftStorm runs one storm on a fresh database, the wallet behind latency.
func giftStorm(ctx context.Context, env Env, callers, total int, latency time.Duration) (Row, error) {
	e, err := openGiftEngine(ctx, env, latency)
	if err != nil {
		return Row{}, err
	}
	defer e.close(ctx)
	ids, err := createRooms(ctx, e.reg, "storm", 1)
	if err != nil {
		return Row{}, err
	}
	roomID := ids[0]
	receivers, senders := users(10, stormReceivers), users(100_000, stormSenders)
	if err := e.credit(ctx, senders); err != nil {
		return Row{}, fmt.Errorf("credit senders: %w", err)
	}
	if err := e.populate(ctx, roomID, receivers, senders, 64); err != nil {
		return Row{}, err
	}
	gifts := [2]string{"heart", "rose"}
	return closedLoop("gifts", callers, total, func(_ int, i int64) error {
		return e.send(ctx, roomID, fmt.Sprintf("g-%d", i), senders[i%stormSenders], receivers[i%stormReceivers], gifts[i%2])
	})
}

// GiftRooms drives rooms rooms at perRoom gifts per second each for d,
// open loop (each send starts at its scheduled time whatever the replies
// do), luckyShare of them lucky_clover x1 and the rest heart x1. Latency
// is from the scheduled start to the reply. Then it checks that the gifts
// in the rooms' command logs agree with the ledger's charges: an error if
// they do not.
func GiftRooms(ctx context.Context, env Env, rooms int, perRoom float64, d time.Duration) ([]Row, error) {
	e, err := openGiftEngine(ctx, env, 0)
	if err != nil {
		return nil, err
	}
	defer e.close(ctx)
	ids, err := createRooms(ctx, e.reg, "gr", rooms)
	if err != nil {
		return nil, err
	}
	perRoomUsers := roomReceivers + roomSenders
	member := func(r, k int) int64 { return 1_000_000 + int64(r*perRoomUsers+k) }
	if err := e.credit(ctx, users(member(0, 0), rooms*perRoomUsers)); err != nil {
		return nil, fmt.Errorf("credit senders: %w", err)
	}
	err = parallel(64, rooms, func(r int) error {
		return e.populate(ctx, ids[r], users(member(r, 0), roomReceivers), users(member(r, roomReceivers), roomSenders), 1)
	})
	if err != nil {
		return nil, err
	}

	rate := float64(rooms) * perRoom
	n := int(rate * d.Seconds())
	if n == 0 {
		return nil, errors.New("gift rooms: no gifts to send at this rate and duration")
	}
	interval := time.Duration(float64(time.Second) / rate)
	// Which sends are lucky is drawn before the run, from a fixed seed.
	rng := rand.New(rand.NewPCG(1, 2))
	giftIDs, lucky := make([]string, n), 0
	for i := range giftIDs {
		giftIDs[i] = "heart"
		if rng.Float64() < luckyShare {
			giftIDs[i] = "lucky_clover"
			lucky++
		}
	}
	lat, elapsed, failed, err := openLoop(ctx, rate, n, func(j int) error {
		r, k := j%rooms, j/rooms
		sender, receiver := member(r, roomReceivers+k%roomSenders), member(r, k%roomReceivers)
		return e.send(ctx, ids[r], fmt.Sprintf("g-%d", k), sender, receiver, giftIDs[j])
	})
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	secs := bySecond(lat, interval) // before percentiles sorts lat
	p50, p99 := percentiles(lat)
	paced := Row{
		Name: fmt.Sprintf("%d rooms x %g gifts/s, %.0f%% lucky, open loop", rooms, perRoom, 100*luckyShare),
		Ops:  n, Elapsed: elapsed, P50: p50, P99: p99,
		Extra: fmt.Sprintf("offered %.0f/s, achieved %.0f%%; p99 target <= 50 ms: %.2fx; %d lucky, %d failed; %s",
			rate, 100*float64(n)/elapsed.Seconds()/rate, ms(p99)/50, lucky, failed, secs),
	}
	if err != nil {
		return []Row{paced}, fmt.Errorf("%d of %d gifts failed, the first: %w", failed, n, err)
	}
	if err := e.stop(ctx); err != nil {
		return []Row{paced}, err
	}
	agree, err := agreement(ctx, e, ids)
	return []Row{paced, agree}, err
}

// seconds is how an open-loop run's latency spread over its seconds (by
// scheduled start): the p99 of its first second, and of its worst, and how
// many seconds had a p99 over 50 ms. A tail confined to a few seconds is a
// stall (a warm-up, a checkpoint); one spread over all of them is a load
// the run cannot carry.
type seconds struct {
	first, worst time.Duration
	worstAt      int // the worst second, from 0
	over, of     int // seconds with a p99 over 50 ms, of all
}

func (s seconds) String() string {
	return fmt.Sprintf("p99 of second 0: %.0f ms, of the worst (second %d): %.0f ms; %d of %d seconds over 50 ms",
		ms(s.first), s.worstAt, ms(s.worst), s.over, s.of)
}

// bySecond groups lat (in schedule order, interval apart) by second and
// returns how their p99 spread. It does not modify lat.
func bySecond(lat []time.Duration, interval time.Duration) seconds {
	per := max(1, int(time.Second/interval))
	var s seconds
	for i := 0; i < len(lat); i += per {
		_, p99 := percentiles(slices.Clone(lat[i:min(i+per, len(lat))]))
		if s.of == 0 {
			s.first = p99
		}
		if p99 > s.worst {
			s.worst, s.worstAt = p99, s.of
		}
		if p99 > 50*time.Millisecond {
			s.over++
		}
		s.of++
	}
	return s
}

// agreement sums the SendGift commands in the rooms' logs and compares
// them with the ledger's charges that are pending or settled (refunded
// ones are gifts that never committed). Run it after e.stop.
func agreement(ctx context.Context, e *giftEngine, roomIDs []string) (Row, error) {
	start := time.Now()
	var logged wallet.ChargeTotals
	for _, id := range roomIDs {
		recs, err := e.repo.ListCommandsAfter(ctx, id, 0)
		if err != nil {
			return Row{}, err
		}
		for _, rec := range recs {
			if room.CommandType(rec.CommandType) != room.CmdSendGift {
				continue
			}
			env, err := room.DecodeCommand(id, rec.CommandID, room.CmdSendGift, rec.Payload)
			if err != nil {
				return Row{}, fmt.Errorf("decode gift room=%s command=%s: %w", id, rec.CommandID, err)
			}
			g := env.Command.(*room.SendGift)
			logged.Charges++
			logged.Amount += g.Cost()
			logged.Reward += g.Outcome.Reward
		}
	}
	t, err := e.ledger.Totals(ctx)
	if err != nil {
		return Row{}, err
	}
	charged := wallet.ChargeTotals{
		Charges: t.Pending.Charges + t.Settled.Charges,
		Amount:  t.Pending.Amount + t.Settled.Amount,
		Reward:  t.Pending.Reward + t.Settled.Reward,
	}
	row := Row{
		Name: fmt.Sprintf("ledger = log: %d gifts, %d coins charged, %d rewarded", logged.Charges, logged.Amount, logged.Reward),
		Ops:  int(logged.Charges), Elapsed: time.Since(start),
		Extra: fmt.Sprintf("ledger: %d settled, %d pending, %d refunded; balances off by %d",
			t.Settled.Charges, t.Pending.Charges, t.Refunded.Charges, t.Imbalance()),
	}
	if charged != logged || t.Imbalance() != 0 {
		row.Name = fmt.Sprintf("ledger != log: log %d gifts, %d charged, %d rewarded; ledger %d, %d, %d",
			logged.Charges, logged.Amount, logged.Reward, charged.Charges, charged.Amount, charged.Reward)
		return row, fmt.Errorf("the ledger disagrees with the command logs: log %+v, ledger %+v, imbalance %d", logged, charged, t.Imbalance())
	}
	return row, nil
}
