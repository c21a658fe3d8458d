package ledger

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"time"

	"hyapp/room-service/store"
	"hyapp/room-service/store/sqlstore"
	"hyapp/room-service/wallet"
)

var _ sqlstore.LedgerFunc = (*Ledger)(nil).inCommit

// inCommit writes, inside a room commit's transaction tx, the ledger's part
// of the batches it commits (installed with sqlstore.DB.SetLedger, beside
// the hints' committed, which learns the charges that committed):
//   - charges (store.Batch.Charges), in order: each gift's debit, reward,
//     journal entries and charge row, written settled. The room decided
//     each on the balance Quote read or the ledger's hint (Hint); the account's balance must still be
//     what that decision started from, and the key must be new (the
//     charge row's primary key refuses one charged before). Otherwise the
//     call is store.ErrConflict and the store refuses the batch: its cell
//     reloads and decides the gifts again on the balance of now.
//   - settles (store.Batch.Settle): pending charges made before by Charge,
//     whose gifts commit now; see settle.
//
// The accounts are locked in user order, the order every ledger
// transaction takes them in.
func (l *Ledger) inCommit(ctx context.Context, ct *sqlstore.CommitTx, insert string, charges []store.GiftCharge, keys []string, now int64) error {
	tx := ct.Tx()
	if len(keys) > 0 {
		if err := settle(ctx, tx, l.db.Dialect(), keys, now); err != nil {
			return err
		}
	}
	if len(charges) == 0 {
		return nil
	}
	if l.db.Dialect().KeepPrepared {
		defer l.askToPrepare()
	}
	t := &txn{now: now, charges: map[string]*chargeRow{}, accounts: map[int64]*account{}}
	users := make(map[int64]struct{}, len(charges))
	for _, c := range charges {
		users[c.UserID] = struct{}{}
	}
	if err := l.readAccounts(ctx, tx, t, sortedKeys(users)); err != nil {
		return fmt.Errorf("read accounts: %w", err)
	}
	for _, c := range charges {
		if t.charges[c.Key] != nil {
			return fmt.Errorf("gift charge key=%q twice in one commit: %w", c.Key, store.ErrConflict)
		}
		if before, decided := t.accounts[c.UserID].balance, c.BalanceAfter+c.Amount-c.Reward; before != decided {
			l.hints.forget(c.UserID) // the room decides again on Quote's read
			return &sqlstore.StaleCharge{Key: c.Key, Err: fmt.Errorf("gift charge key=%q: user %d's balance is %d, the gift was decided on %d: %w",
				c.Key, c.UserID, before, decided, store.ErrConflict)}
		}
		r, err := t.charge(wallet.Charge{Key: c.Key, UserID: c.UserID, Amount: c.Amount, Reward: c.Reward,
			MultiplierBP: c.MultiplierBP, At: time.UnixMilli(c.AtMs)})
		if err != nil || r.BalanceAfter != c.BalanceAfter {
			return &sqlstore.StaleCharge{Key: c.Key, Err: fmt.Errorf("gift charge key=%q: balance after %d, decided %d (%v): %w",
				c.Key, r.BalanceAfter, c.BalanceAfter, err, store.ErrConflict)}
		}
	}
	for _, c := range t.created {
		c.status = wallet.StatusSettled
	}
	return l.write(ctx, tx, insert, t, func(s *stmt) error {
		if s.inline {
			return ct.Exec(ctx, s.b.String())
		}
		_, err := l.exec(ctx, tx, s)
		return err
	})
}

// askToPrepare wakes a committer when inCommit sent statements that are not
// prepared yet.
func (l *Ledger) askToPrepare() {
	if l.stmts.lacks() {
		select {
		case l.prep <- struct{}{}:
		default: // already asked
		}
	}
}

// settle settles, inside a room commit's transaction tx, the pending
// charges of the gifts that commit (store.Batch.Settle): charges a wallet
// Charge call made before the commit, confirmed by the transaction that
// commits their gifts, with no settle transaction of their own. Keys are
// settled in key order, the order the ledger locks charges in. Every key
// must still be pending: one that is not was refunded (the reconciler
// decided its gift would never commit) or is unknown, and the row lock
// decides between that refund and this commit, so the call is
// store.ErrConflict and the store refuses the batch (its cell reloads).
func settle(ctx context.Context, tx *sql.Tx, d *sqlstore.Dialect, keys []string, now int64) error {
	keys = slices.Sorted(slices.Values(keys))
	for chunk := range slices.Chunk(keys, maxInKeys) {
		q := `UPDATE wallet_charges` + d.ForceIndex("PRIMARY") +
			` SET status = 'settled', updated_at = ? WHERE status = 'pending' AND charge_key IN ` + sqlstore.In(len(chunk))
		res, err := tx.ExecContext(ctx, q, sqlstore.AppendStrings([]any{now}, chunk)...)
		if err != nil {
			return d.MapErr(err)
		}
		if n, err := res.RowsAffected(); err != nil {
			return d.MapErr(err)
		} else if n != int64(len(chunk)) {
			return fmt.Errorf("%d of %d gift charges are no longer pending: %w", int64(len(chunk))-n, len(chunk), store.ErrConflict)
		}
	}
	return nil
}
