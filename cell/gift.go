package cell

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"math"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"

	"hyapp/room-service/internal/obs"
	"hyapp/room-service/room"
	"hyapp/room-service/store"
	"hyapp/room-service/wallet"
)

// giftPayments is the feature that pays for gifts. A run of consecutive
// gifts is decided together: each is checked against the state, then all
// are paid for, then each applies with its charge. Gifts change no
// membership or seat, so checking them all before applying any sees what
// each would see in turn; the room waits on the wallet once per run, not
// once per gift.
//
// With the embedded ledger (Config.SettleInCommit and a wallet.Quoter) a
// run reads its senders' balances, decides each charge itself, and the
// batch that commits the gifts writes their charges, settled, in the same
// transaction (store.Batch.Charges): one transaction per run, and no
// charge left pending by a commit that failed. A balance that moved in
// between (the sender's gift in another room, a top-up) refuses the batch
// and the room decides it again. Any other wallet is charged first (a
// pending charge, its outcome recorded with the gift), and the charge is
// settled by the commit (SettleInCommit) or after it (GiftSettler).
type giftPayments struct {
	wallet   wallet.Wallet // nil: every gift is refused as unavailable
	timeout  time.Duration // one charge call
	window   time.Duration // Config.GiftApplyWindow
	settle   bool          // Config.SettleInCommit
	commands interface {
		GetCommands(ctx context.Context, roomID string, commandIDs []string) (map[string]store.CommandRecord, error)
	}
	metrics *Metrics
	log     *slog.Logger
}

func (gp *giftPayments) feature() Feature {
	return Feature{Runs: []room.CommandType{room.CmdSendGift}, Prepare: gp.prepare}
}

// prepare checks and pays for a run of gifts and fills in each paid gift's
// outcome from its charge.
func (gp *giftPayments) prepare(ctx context.Context, s *room.State, run []*room.Envelope) []Verdict {
	verdicts := make([]Verdict, len(run))
	charges := make([]wallet.Charge, 0, len(run))
	charged := make([]int, 0, len(run)) // indexes into run
	for i, env := range run {
		if err := room.CheckGift(s, env); err != nil {
			verdicts[i].Err = err
			continue
		}
		g := env.Command.(*room.SendGift)
		cost := g.Cost()
		reward, ok := room.LuckyReward(cost, g.Outcome.MultiplierBP)
		if !ok {
			verdicts[i].Err = room.Errorf(room.ErrInvalidArgument, "lucky reward of %d x %d bp overflows", cost, g.Outcome.MultiplierBP)
			continue
		}
		charges = append(charges, wallet.Charge{
			Key: wallet.ChargeKey(env.RoomID, env.CommandID), UserID: env.Operator, Amount: cost,
			Reward: reward, MultiplierBP: g.Outcome.MultiplierBP, At: time.UnixMilli(env.At),
		})
		charged = append(charged, i)
	}
	if len(charges) == 0 {
		return verdicts
	}
	refuse := func(err error) {
		for _, i := range charged {
			verdicts[i].Err = err
		}
	}
	if gp.wallet == nil {
		refuse(room.Errorf(room.ErrUnavailable, "this node has no wallet to pay gifts with"))
		return verdicts
	}
	q, inCommit := gp.wallet.(wallet.Quoter)
	inCommit = inCommit && gp.settle
	var results []wallet.Result
	var err error
	if inCommit {
		results, err = gp.quote(ctx, q, charges)
	} else {
		results, err = gp.charge(ctx, charges)
	}
	if err != nil {
		// Charged by the wallet, the charges may or may not exist: a retry
		// replays them by key, and the reconciler refunds what no retry
		// commits. Quoted, nothing changed.
		gp.log.WarnContext(ctx, "wallet call failed; outcome unknown", "room_id", run[0].RoomID, "gifts", len(charged), "err", err)
		refuse(room.Errorf(room.ErrUnavailable, "the wallet did not answer; retry with the same command_id"))
		return verdicts
	}
	gp.decide(ctx, run, charged, charges, results, inCommit, verdicts)
	return verdicts
}

// charge makes the charges with one wallet call.
func (gp *giftPayments) charge(ctx context.Context, charges []wallet.Charge) ([]wallet.Result, error) {
	var results []wallet.Result
	err := gp.call(ctx, "wallet.charge", len(charges), func(ctx context.Context) (err error) {
		results, err = gp.wallet.Charge(ctx, charges)
		return err
	})
	if err == nil && len(results) != len(charges) {
		err = errors.New("wallet answered a different number of charges")
	}
	return results, err
}

// quote decides the charges the commit will make, in order, on the
// balances the ledger holds now: a later charge sees the balance an earlier
// one left, as Wallet.Charge would. A key charged before answers with its
// receipt, Replayed, as Wallet.Charge would too.
//
// A sender an earlier run of the batch charged starts from what that run
// left (deciding.left). For the others, a first decision takes the
// balances from the ledger's hints when it has them all, without a read
// (see wallet.Quoter). It reads (Quote) when a hint would refuse a gift for
// what the balance is (its funds, or a reward overflowing it), and when
// the cell decides again after the commit refused the batch
// (deciding.again): a balance that moved, or a key charged before, which
// only Quote's receipts show.
func (gp *giftPayments) quote(ctx context.Context, q wallet.Quoter, charges []wallet.Charge) ([]wallet.Result, error) {
	d := decidingOf(ctx)
	users := make([]int64, len(charges))
	keys := make([]string, len(charges))
	for k, c := range charges {
		users[k], keys[k] = c.UserID, c.Key
	}
	left, others := d.balances(users)
	if !d.again {
		if hinted, ok := q.Hint(others); ok {
			maps.Copy(hinted, left)
			if results, onBalance := decideCharges(charges, wallet.Quote{Balances: hinted}); !onBalance {
				gp.metrics.GiftBalances.WithLabelValues("hint").Inc()
				return results, nil
			}
		}
	}
	var quote wallet.Quote
	err := gp.call(ctx, "wallet.quote", len(charges), func(ctx context.Context) (err error) {
		quote, err = q.Quote(ctx, users, keys)
		return err
	})
	if err != nil {
		return nil, err
	}
	gp.metrics.GiftBalances.WithLabelValues("read").Inc()
	if quote.Balances == nil {
		quote.Balances = map[int64]int64{}
	}
	maps.Copy(quote.Balances, left) // what the read cannot see yet: this batch's earlier charges
	results, _ := decideCharges(charges, quote)
	return results, nil
}

// decideCharges decides each charge in turn on quote, which it changes;
// onBalance says one was refused for what its balance was: too little, or
// a reward that would overflow it. A hint decides no such refusal.
func decideCharges(charges []wallet.Charge, quote wallet.Quote) (results []wallet.Result, onBalance bool) {
	results = make([]wallet.Result, len(charges))
	for k, c := range charges {
		r := &results[k]
		if err := c.Check(); err != nil {
			r.Err = err
			continue
		}
		if before, ok := quote.Receipts[c.Key]; ok {
			if before.UserID != c.UserID || before.Amount != c.Amount {
				r.Err = room.Errorf(wallet.ErrKeyConflict, "charge key=%q: charged before for user=%d amount=%d", c.Key, before.UserID, before.Amount)
				continue
			}
			before.Replayed = true
			r.Receipt = before
			continue
		}
		balance := quote.Balances[c.UserID]
		if balance < c.Amount {
			r.Err, onBalance = wallet.InsufficientFunds(balance, c.Amount), true
			continue
		}
		debited := balance - c.Amount
		if c.Reward > math.MaxInt64-debited {
			r.Err, onBalance = room.Errorf(wallet.ErrBadRequest, "reward %d overflows balance %d", c.Reward, debited), true
			continue
		}
		quote.Balances[c.UserID] = debited + c.Reward
		r.Receipt = wallet.Receipt{Charge: c, BalanceAfter: debited + c.Reward, Status: wallet.StatusPending}
	}
	return results, onBalance
}

// deciding is what one decision of a batch carries from run to run, in
// the context the cell gives Prepare (Cell.decideAll).
type deciding struct {
	// again: the cell decides the batch again after the store refused it
	// (Cell.attemptFromLog).
	again bool
	// left holds, by sender, the balance the charges of the batch's earlier
	// runs leave, charged inside the commit: the commit makes a batch's
	// charges in order, so a later run of the same sender (gift, join,
	// gift) is decided on what the earlier one left, not on the balance of
	// before, which the commit would refuse every time.
	left map[int64]int64
}

type decidingKey struct{}

// withDeciding gives ctx a new decision's deciding.
func withDeciding(ctx context.Context, again bool) context.Context {
	return context.WithValue(ctx, decidingKey{}, &deciding{again: again})
}

// decidingOf returns ctx's deciding; a context without one is a first
// decision that carries nothing.
func decidingOf(ctx context.Context) *deciding {
	if d, ok := ctx.Value(decidingKey{}).(*deciding); ok {
		return d
	}
	return &deciding{}
}

// balances returns the balance of each of users the batch's earlier runs
// left, and the users they left none for: all of them, with no map, in
// the common batch of one run.
func (d *deciding) balances(users []int64) (left map[int64]int64, others []int64) {
	if len(d.left) == 0 {
		return nil, users
	}
	left = make(map[int64]int64, len(users))
	for _, u := range users {
		if b, ok := d.left[u]; ok {
			left[u] = b
		} else {
			others = append(others, u)
		}
	}
	return left, others
}

// call runs one wallet call with its timeout, span and latency metric.
func (gp *giftPayments) call(ctx context.Context, name string, charges int, f func(ctx context.Context) error) error {
	callCtx, cancel := context.WithTimeout(ctx, gp.timeout)
	defer cancel()
	callCtx, span := obs.Start(callCtx, name)
	defer span.End()
	start := time.Now()
	err := f(callCtx)
	obs.Observe(callCtx, gp.metrics.WalletSeconds, time.Since(start).Seconds())
	if span.IsRecording() {
		span.SetAttributes(attribute.Int("wallet.charges", charges))
		if err != nil {
			span.SetStatus(codes.Error, err.Error())
		}
	}
	return err
}

// decide records the verdict of each paid gift run[charged[k]] from
// results[k], the answer to charges[k]. inCommit says the charges not
// replayed are the commit's to make.
func (gp *giftPayments) decide(ctx context.Context, run []*room.Envelope, charged []int, charges []wallet.Charge, results []wallet.Result, inCommit bool, verdicts []Verdict) {
	stored, lookupErr := gp.replayedInLog(ctx, run, charged, results)
	d := decidingOf(ctx)
	if d.left == nil {
		d.left = map[int64]int64{}
	}
	window := gp.window.Milliseconds()
	for k, i := range charged {
		r, env := results[k], run[i]
		v := &verdicts[i]
		if rec, ok := stored[env.CommandID]; ok {
			// Charged and committed before this cell knew the id (a restart,
			// or older than the recent ids): the log answers.
			v.Logged = &rec
			continue
		}
		switch {
		case r.Err == nil && r.Receipt.Replayed && lookupErr != nil:
			v.Err = room.Errorf(room.ErrUnavailable, "look up a retried gift: %v; retry with the same command_id", lookupErr)
		case r.Err != nil:
			v.Err = room.AsError(r.Err)
		case r.Receipt.Status == wallet.StatusRefunded:
			v.Err = room.ErrGiftRefunded
		case r.Receipt.Status == wallet.StatusSettled:
			// Settled means committed, yet the log has no row (retention
			// pruned it): applying it again would count the gift twice.
			v.Err = room.Errorf(room.ErrGiftExpired, "the gift's charge was settled long ago and its log row is gone; send again with a new command_id")
		case r.Receipt.Replayed && env.At-r.Receipt.At.UnixMilli() > window:
			// Too old to apply: the reconciler may be refunding it. If the
			// gift did commit, the cell finds it in the log among the refusals.
			v.Err = room.ErrGiftExpired
		default:
			g := env.Command.(*room.SendGift)
			g.Outcome.MultiplierBP, g.Outcome.Reward = r.Receipt.MultiplierBP, r.Receipt.Reward
			g.Outcome.ChargedAt, g.Outcome.BalanceAfter = r.Receipt.At.UnixMilli(), r.Receipt.BalanceAfter
			v.Commit = gp.commit(charges[k], r.Receipt, inCommit)
			if inCommit && !r.Receipt.Replayed {
				d.left[r.Receipt.UserID] = r.Receipt.BalanceAfter
			}
		}
	}
}

// commit is what a paid gift commits with: the charge the commit makes
// (inCommit and not replayed), the settle of a pending charge made before
// (SettleInCommit), or nothing (a GiftSettler settles after the commit).
func (gp *giftPayments) commit(c wallet.Charge, r wallet.Receipt, inCommit bool) func(b *store.Batch) {
	switch {
	case inCommit && !r.Replayed:
		gc := store.GiftCharge{Key: c.Key, UserID: c.UserID, Amount: c.Amount, Reward: c.Reward,
			MultiplierBP: c.MultiplierBP, BalanceAfter: r.BalanceAfter, AtMs: r.At.UnixMilli()}
		return func(b *store.Batch) { b.Charges = append(b.Charges, gc) }
	case gp.settle:
		return func(b *store.Batch) { b.Settle = append(b.Settle, c.Key) }
	}
	return nil
}

// replayedInLog reads the log rows of gifts whose charge the wallet replayed:
// those may have committed already, and the log says so before they apply
// again (which would fail on the log's unique key and reload the room).
func (gp *giftPayments) replayedInLog(ctx context.Context, run []*room.Envelope, charged []int, results []wallet.Result) (map[string]store.CommandRecord, error) {
	var ids []string
	for k, i := range charged {
		if r := results[k]; r.Err == nil && r.Receipt.Replayed && r.Receipt.Status != wallet.StatusRefunded {
			ids = append(ids, run[i].CommandID)
		}
	}
	if len(ids) == 0 {
		return nil, nil
	}
	return gp.commands.GetCommands(ctx, run[0].RoomID, ids)
}

// GiftSettler is an EventSink that hands the charge keys of committed gifts
// to Settle (a wallet.Settler's Add): their charges are confirmed off the
// rooms' critical path.
type GiftSettler struct{ Settle func(keys ...string) }

// Publish implements EventSink.
func (g GiftSettler) Publish(batch []room.Committed) {
	var keys []string
	for _, c := range batch {
		if c.CommandType == room.CmdSendGift {
			keys = append(keys, wallet.ChargeKey(c.RoomID, c.CommandID))
		}
	}
	if len(keys) > 0 {
		g.Settle(keys...)
	}
}

// CommittedGifts tells the wallet's reconciler which pending charges have
// their gift in the room's command log (wallet.Committed): the SendGift of
// the charge's command id, sent by the charge's user for its amount. A row
// of that id that is another command, or another user's gift, is not: a
// gift refused because its id was taken (the room no longer remembered the
// id, and its commit met the log's row) was charged first by a wallet the
// room calls before it commits, and that charge is refunded. A SendGift row
// this build cannot read (a newer one wrote it) is taken as the charge's
// gift: its key names this room and command.
func CommittedGifts(repo store.Repository) wallet.Committed {
	return func(ctx context.Context, roomID string, charges []wallet.Charge) (map[string]bool, error) {
		ids := make([]string, 0, len(charges))
		for _, c := range charges {
			if _, id, ok := wallet.SplitChargeKey(c.Key); ok {
				ids = append(ids, id)
			}
		}
		recs, err := repo.GetCommands(ctx, roomID, ids)
		if err != nil {
			return nil, err
		}
		found := make(map[string]bool, len(recs))
		for _, c := range charges {
			_, id, _ := wallet.SplitChargeKey(c.Key)
			if rec, ok := recs[id]; ok && giftOf(roomID, rec, c) {
				found[id] = true
			}
		}
		return found, nil
	}
}

// giftOf reports whether rec is the gift charged by c.
func giftOf(roomID string, rec store.CommandRecord, c wallet.Charge) bool {
	if room.CommandType(rec.CommandType) != room.CmdSendGift {
		return false
	}
	env, err := room.DecodeCommand(roomID, rec.CommandID, room.CmdSendGift, rec.Payload)
	if err != nil {
		return true
	}
	return env.Operator == c.UserID && env.Command.(*room.SendGift).Cost() == c.Amount
}
