package cell

import (
	"context"
	"errors"
	"time"

	"hyapp/room-service/room"
	"hyapp/room-service/store"
	"hyapp/room-service/wallet"
)

// GiftResult is what a committed gift cost its sender.
type GiftResult struct {
	// BalanceAfter is the sender's COIN balance after the debit and any lucky reward.
	BalanceAfter int64
	Cost         int64
	MultiplierBP int64
	Reward       int64
}

func giftResult(g *room.SendGift) *GiftResult {
	o := g.Outcome
	return &GiftResult{BalanceAfter: o.BalanceAfter, Cost: g.Cost(), MultiplierBP: o.MultiplierBP, Reward: o.Reward}
}

func isGift(env *room.Envelope) bool {
	_, ok := env.Command.(*room.SendGift)
	return ok
}

// decideGifts decides a run of consecutive gifts: each is checked against
// the state, then all are charged with one wallet call, then each is
// applied with its charge. Gifts change no membership or seat, so checking
// them all before applying any sees what each would see in turn; the cell
// waits on the wallet once per run, not once per gift.
func (c *Cell) decideGifts(run []*pending, seen map[string]*pending, stored map[string]store.CommandRecord) {
	charges := make([]wallet.Charge, 0, len(run))
	charged := make([]*pending, 0, len(run))
	first := make(map[string]*pending, len(run))
	var repeats []*pending
	for _, p := range run {
		env := p.req.env
		if c.known(p, seen, stored) {
			continue
		}
		if f, ok := first[env.CommandID]; ok {
			p.sameAs = f // answered once the first is decided
			repeats = append(repeats, p)
			continue
		}
		first[env.CommandID] = p
		env.At = max(c.reg.cfg.Clock().UnixMilli(), c.state.LastAt)
		if err := room.CheckGift(c.state, env); err != nil {
			p.err = err
			continue
		}
		g := env.Command.(*room.SendGift)
		cost := g.Cost()
		reward, ok := room.LuckyReward(cost, g.Outcome.MultiplierBP)
		if !ok {
			p.err = room.Errorf(room.ErrInvalidArgument, "lucky reward of %d x %d bp overflows", cost, g.Outcome.MultiplierBP)
			continue
		}
		charges = append(charges, wallet.Charge{
			Key: wallet.ChargeKey(env.RoomID, env.CommandID), UserID: env.Operator, Amount: cost,
			Reward: reward, MultiplierBP: g.Outcome.MultiplierBP, At: time.UnixMilli(env.At),
		})
		charged = append(charged, p)
	}
	if len(charges) > 0 {
		c.charge(charged, charges, seen)
	}
	for _, p := range repeats {
		f := p.sameAs
		switch {
		case f.applied:
			c.answerDuplicate(p, f.result.RoomVersion, f.req.env.Command.Type(), f.payload)
		case f.logged != nil:
			c.answerDuplicate(p, f.logged.version, f.logged.typ, f.logged.payload)
		default:
			p.err = f.err
		}
	}
}

// charge pays for the checked gifts and applies those that were paid.
func (c *Cell) charge(gifts []*pending, charges []wallet.Charge, seen map[string]*pending) {
	if c.reg.cfg.Wallet == nil {
		for _, p := range gifts {
			p.err = room.Errorf(room.ErrUnavailable, "this node has no wallet to pay gifts with")
		}
		return
	}
	ctx, cancel := context.WithTimeout(c.reg.ctx, c.reg.cfg.WalletTimeout)
	start := time.Now()
	results, err := c.reg.cfg.Wallet.Charge(ctx, charges)
	cancel()
	c.reg.metrics.WalletSeconds.Observe(time.Since(start).Seconds())
	if err == nil && len(results) != len(charges) {
		err = errors.New("wallet answered a different number of charges")
	}
	if err != nil {
		// The charges may or may not exist: a retry replays them by key, and
		// the reconciler refunds what no retry commits.
		c.log.Warn("wallet charge failed; outcome unknown", "gifts", len(gifts), "err", err)
		for _, p := range gifts {
			p.err = room.Errorf(room.ErrUnavailable, "the wallet did not answer; retry with the same command_id")
		}
		return
	}
	stored, lookupErr := c.replayedInLog(gifts, results)
	window := c.reg.cfg.GiftApplyWindow.Milliseconds()
	for i, p := range gifts {
		r := results[i]
		env := p.req.env
		if rec, ok := stored[env.CommandID]; ok {
			// Charged and committed before this cell knew the id (a restart,
			// or older than the recent ids): the log answers.
			p.logged = &recentEntry{version: rec.RoomVersion, typ: room.CommandType(rec.CommandType), payload: rec.Payload}
			c.recent.add(env.CommandID, *p.logged)
			c.answerDuplicate(p, rec.RoomVersion, room.CommandType(rec.CommandType), rec.Payload)
			continue
		}
		switch {
		case r.Err == nil && r.Receipt.Replayed && lookupErr != nil:
			p.err = room.Errorf(room.ErrUnavailable, "look up a retried gift: %v; retry with the same command_id", lookupErr)
			continue
		case r.Err != nil:
			p.err = room.AsError(r.Err)
			continue
		case r.Receipt.Status == wallet.StatusRefunded:
			p.err = room.ErrGiftRefunded
			continue
		case r.Receipt.Status == wallet.StatusSettled:
			// Settled means committed, yet the log has no row (retention
			// pruned it): applying it again would count the gift twice.
			p.err = room.Errorf(room.ErrGiftExpired, "the gift's charge was settled long ago and its log row is gone; send again with a new command_id")
			continue
		case r.Receipt.Replayed && env.At-r.Receipt.At.UnixMilli() > window:
			// Too old to apply: the reconciler may be refunding it. If the
			// gift did commit, resolveRefused finds it in the log.
			p.err = room.ErrGiftExpired
			continue
		}
		g := env.Command.(*room.SendGift)
		g.Outcome.MultiplierBP, g.Outcome.Reward = r.Receipt.MultiplierBP, r.Receipt.Reward
		g.Outcome.ChargedAt, g.Outcome.BalanceAfter = r.Receipt.At.UnixMilli(), r.Receipt.BalanceAfter
		events, err := room.Apply(c.state, env)
		if err != nil {
			// Checked a moment ago against the same state: unreachable. The
			// charge stays pending and the reconciler refunds it.
			c.log.Error("checked gift refused on apply", "command_id", env.CommandID, "err", err)
			p.err = err
			continue
		}
		c.applied(p, events, seen)
	}
}

// replayedInLog reads the log rows of gifts whose charge the wallet replayed:
// those may have committed already, and the log says so before they apply
// again (which would fail on the log's unique key and reload the room).
func (c *Cell) replayedInLog(gifts []*pending, results []wallet.Result) (map[string]store.CommandRecord, error) {
	var ids []string
	for i, p := range gifts {
		if r := results[i]; r.Err == nil && r.Receipt.Replayed && r.Receipt.Status != wallet.StatusRefunded {
			ids = append(ids, p.req.env.CommandID)
		}
	}
	if len(ids) == 0 {
		return nil, nil
	}
	return c.reg.repo.GetCommands(c.reg.ctx, c.roomID, ids)
}
