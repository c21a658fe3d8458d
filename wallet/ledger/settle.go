package ledger

import (
	"context"
	"database/sql"
	"fmt"
	"slices"

	"hyapp/room-service/store"
	"hyapp/room-service/store/sqlstore"
)

var _ sqlstore.SettleFunc = SettleInCommit

// SettleInCommit settles, inside a room commit's transaction tx, the
// charges of the gifts that commit (store.Batch.Settle): the embedded
// ledger's charges are confirmed by the transaction that commits their
// gifts, with no settle transaction of their own. Keys are settled in key
// order, the order the ledger locks charges in. Every key must still be
// pending: one that is not was refunded (the reconciler decided its gift
// would never commit) or is unknown, and the row lock decides between that
// refund and this commit, so the call is store.ErrConflict and the store
// refuses the batch (its cell reloads). The stores call it from
// CommitBatches; it is wired in when they open.
func SettleInCommit(ctx context.Context, tx *sql.Tx, d *sqlstore.Dialect, keys []string, now int64) error {
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
