package cell

import (
	"context"
	"errors"
	"log/slog"
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
// are charged with one wallet call, then each applies with its charge.
// Gifts change no membership or seat, so checking them all before applying
// any sees what each would see in turn; the room waits on the wallet once
// per run, not once per gift. With the embedded ledger (Config.
// SettleInCommit) the batch that commits a gift settles its charge.
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
	f := Feature{Runs: []room.CommandType{room.CmdSendGift}, Prepare: gp.prepare}
	if gp.settle {
		f.Contribute = gp.settleInCommit
	}
	return f
}

// prepare checks and charges a run of gifts and fills in each paid gift's
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
	if len(charges) > 0 {
		gp.charge(ctx, run, charged, charges, verdicts)
	}
	return verdicts
}

// charge pays for the checked gifts run[charged[i]] with charges[i] and
// records each one's verdict.
func (gp *giftPayments) charge(ctx context.Context, run []*room.Envelope, charged []int, charges []wallet.Charge, verdicts []Verdict) {
	refuse := func(err error) {
		for _, i := range charged {
			verdicts[i].Err = err
		}
	}
	if gp.wallet == nil {
		refuse(room.Errorf(room.ErrUnavailable, "this node has no wallet to pay gifts with"))
		return
	}
	callCtx, cancel := context.WithTimeout(ctx, gp.timeout)
	callCtx, span := obs.Start(callCtx, "wallet.charge")
	start := time.Now()
	results, err := gp.wallet.Charge(callCtx, charges)
	obs.Observe(callCtx, gp.metrics.WalletSeconds, time.Since(start).Seconds())
	if span.IsRecording() {
		span.SetAttributes(attribute.Int("wallet.charges", len(charges)))
		if err != nil {
			span.SetStatus(codes.Error, err.Error())
		}
	}
	span.End()
	cancel()
	if err == nil && len(results) != len(charges) {
		err = errors.New("wallet answered a different number of charges")
	}
	if err != nil {
		// The charges may or may not exist: a retry replays them by key, and
		// the reconciler refunds what no retry commits.
		gp.log.WarnContext(ctx, "wallet charge failed; outcome unknown", "room_id", run[0].RoomID, "gifts", len(charged), "err", err)
		refuse(room.Errorf(room.ErrUnavailable, "the wallet did not answer; retry with the same command_id"))
		return
	}
	stored, lookupErr := gp.replayedInLog(ctx, run, charged, results)
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
		}
	}
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

// settleInCommit settles a committed gift's charge in the transaction that
// commits it.
func (gp *giftPayments) settleInCommit(b *store.Batch, env *room.Envelope, _ []room.Event, _ time.Time) error {
	if env.Command.Type() == room.CmdSendGift {
		b.Settle = append(b.Settle, wallet.ChargeKey(env.RoomID, env.CommandID))
	}
	return nil
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
