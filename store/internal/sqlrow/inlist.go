package sqlrow

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"

	"hyapp/room-service/store"
)

// maxIn caps the values of one IN (...) list.
const maxIn = 500

// in returns "(?, ?, ...)" for n values.
func in(n int) string { return "(?" + strings.Repeat(", ?", n-1) + ")" }

// SettleCharges settles, inside the batches' transaction, the embedded
// ledger's charges of the gifts they commit (store.Batch.Settle), in key
// order (the order the ledger locks them). update is the statement's head,
// "UPDATE wallet_charges" with any index hint the driver needs. Every key
// must still be pending: one that is not was refunded (the reconciler
// decided its gift would never commit), and the row lock decides between
// that refund and this commit, so the batch is refused with
// store.ErrConflict and its cell reloads. mapErr maps driver errors.
func SettleCharges(ctx context.Context, tx *sql.Tx, batches []*store.Batch, now int64, update string, mapErr func(error) error) error {
	var keys []string
	for _, b := range batches {
		keys = append(keys, b.Settle...)
	}
	slices.Sort(keys)
	for chunk := range slices.Chunk(keys, maxIn) {
		args := make([]any, 0, len(chunk)+1)
		args = append(args, now)
		for _, k := range chunk {
			args = append(args, k)
		}
		res, err := tx.ExecContext(ctx, update+` SET status = 'settled', updated_at = ? WHERE status = 'pending' AND charge_key IN `+in(len(chunk)), args...)
		if err != nil {
			return mapErr(err)
		}
		if n, err := res.RowsAffected(); err != nil {
			return mapErr(err)
		} else if n != int64(len(chunk)) {
			return fmt.Errorf("%d of %d gift charges are no longer pending: %w", int64(len(chunk))-n, len(chunk), store.ErrConflict)
		}
	}
	return nil
}

// DeleteTimers deletes the room's timers among ids inside tx; ids the room
// does not hold are ignored. mapErr maps driver errors.
func DeleteTimers(ctx context.Context, tx *sql.Tx, roomID string, ids []string, mapErr func(error) error) error {
	for chunk := range slices.Chunk(ids, maxIn) {
		args := make([]any, 0, len(chunk)+1)
		args = append(args, roomID)
		for _, id := range chunk {
			args = append(args, id)
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM room_timers WHERE room_id = ? AND timer_id IN `+in(len(chunk)), args...); err != nil {
			return mapErr(err)
		}
	}
	return nil
}
