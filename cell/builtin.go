package cell

// builtins are the features every registry runs, kept where the tests that
// drive their internals can reach them.
type builtins struct {
	rockets  *rocketLaunches
	presence *presence
}

// plugIn builds the built-in features; their hooks run in this order. A new
// feature is a file of its own and a line here: the cell does not change.
func (r *Registry) plugIn() features {
	r.builtin.rockets = newRocketLaunches(r)
	r.builtin.presence = newPresence(r)
	gifts := &giftPayments{
		wallet: r.cfg.Wallet, timeout: r.cfg.WalletTimeout, window: r.cfg.GiftApplyWindow,
		settle: r.cfg.SettleInCommit, commands: r.store, metrics: r.metrics, log: r.log,
	}
	return newFeatures(append([]Feature{
		roomCreation{}.feature(),
		rulesSwitch{rules: r.cfg.Rules}.feature(),
		gifts.feature(),
		r.builtin.rockets.feature(),
		r.builtin.presence.feature(),
		giftRecords{}.feature(),
		roomRoles{}.feature(),
		newMicExpiry(r).feature(),
	}, r.cfg.Features...)...)
}
