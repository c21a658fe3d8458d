package mysql

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"time"

	"hyapp/room-service/store"
	"hyapp/room-service/store/internal/sqlrow"
)

// maxTimerRows caps the rows of one timer upsert.
const maxTimerRows = 256

// upsertTimers sets timers: a stored timer of the same room and id is
// replaced. VALUES() is what both MariaDB and MySQL 8.0 accept (MySQL
// deprecates it in favour of a row alias MariaDB does not have).
const upsertTimers = `INSERT INTO room_timers (` + sqlrow.TimerColumns + `) VALUES `
const upsertTimersTail = ` ON DUPLICATE KEY UPDATE
	kind = VALUES(kind), fire_at_ms = VALUES(fire_at_ms),
	payload = VALUES(payload), created_at = VALUES(created_at)`

// writeTimersAndSettles settles the gift charges of batches that passed
// their fence and applies their timer changes,
// in their order, inside tx, touching rows in (room id, timer id) order.
// Timers are rare (a rocket ignition or launch), so the statements are not
// kept prepared: they would count against max_prepared_stmt_count on every
// connection.
func writeTimersAndSettles(ctx context.Context, tx *sql.Tx, batches []*store.Batch, now int64) error {
	if err := settleCharges(ctx, tx, batches, now); err != nil {
		return err
	}
	deletes, sets := sqlrow.MergeTimers(batches)
	for _, d := range deletes {
		if err := deleteTimers(ctx, tx, d.RoomID, d.TimerIDs); err != nil {
			return err
		}
	}
	for chunk := range chunks(sets, maxTimerRows) {
		args := make([]any, 0, 6*len(chunk))
		for _, t := range chunk {
			args = sqlrow.TimerArgs(args, t, now)
		}
		q := upsertTimers + `(?, ?, ?, ?, ?, ?)` + strings.Repeat(`, (?, ?, ?, ?, ?, ?)`, len(chunk)-1) + upsertTimersTail
		if _, err := tx.ExecContext(ctx, q, args...); err != nil {
			return mapErr(err)
		}
	}
	return nil
}

// settleCharges settles, in the batches' transaction, the ledger charges of
// the gifts they commit (store.Batch.Settle). A charge that is no longer
// pending refuses the batch with store.ErrConflict.
func settleCharges(ctx context.Context, tx *sql.Tx, batches []*store.Batch, now int64) error {
	var keys []string
	for _, b := range batches {
		keys = append(keys, b.Settle...)
	}
	slices.Sort(keys) // rows locked in key order, as the ledger locks them
	for len(keys) > 0 {
		chunk := keys[:min(len(keys), maxInIDs)]
		keys = keys[len(chunk):]
		args := make([]any, 0, len(chunk)+1)
		args = append(args, now)
		for _, k := range chunk {
			args = append(args, k)
		}
		q := `UPDATE wallet_charges FORCE INDEX (PRIMARY) SET status = 'settled', updated_at = ? WHERE status = 'pending' AND charge_key IN (` + placeholders(len(chunk)) + `)`
		res, err := tx.ExecContext(ctx, q, args...)
		if err != nil {
			return mapErr(err)
		}
		// Every key must still be pending: one that is not was refunded (the
		// reconciler decided its gift would never commit). The row lock
		// decides between the refund and this commit; the loser of a race
		// must not commit, so the batch is refused and its cell reloads.
		if n, err := res.RowsAffected(); err != nil {
			return mapErr(err)
		} else if n != int64(len(chunk)) {
			return fmt.Errorf("%d of %d gift charges are no longer pending: %w", int64(len(chunk))-n, len(chunk), store.ErrConflict)
		}
	}
	return nil
}

// deleteTimers deletes the room's timers among ids inside tx.
func deleteTimers(ctx context.Context, tx *sql.Tx, roomID string, ids []string) error {
	for chunk := range chunks(ids, maxInIDs) {
		args := make([]any, 0, len(chunk)+1)
		args = append(args, roomID)
		args = append(args, anys(chunk)...)
		q := `DELETE FROM room_timers WHERE room_id = ? AND timer_id IN (` + placeholders(len(chunk)) + `)`
		if _, err := tx.ExecContext(ctx, q, args...); err != nil {
			return mapErr(err)
		}
	}
	return nil
}

// ListDueTimers returns up to limit timers due at or before before, in
// (fire time, room id, timer id) order, read from the fire time index. A
// limit of zero or less lists nothing.
func (db *DB) ListDueTimers(ctx context.Context, before time.Time, limit int) ([]store.Timer, error) {
	if limit <= 0 {
		return nil, nil
	}
	rows, err := db.db.QueryContext(ctx, `SELECT `+sqlrow.TimerColumns+` FROM room_timers
		WHERE fire_at_ms <= ? ORDER BY fire_at_ms, room_id, timer_id LIMIT ?`, before.UnixMilli(), limit)
	var out []store.Timer
	if err == nil {
		out, err = sqlrow.ScanTimers(rows)
	}
	if err != nil {
		return nil, fmt.Errorf("list due timers before=%d: %w", before.UnixMilli(), mapErr(err))
	}
	return out, nil
}

// DeleteTimers deletes the room's timers named by timerIDs in one
// transaction; ids the room does not hold are ignored.
func (db *DB) DeleteTimers(ctx context.Context, roomID string, timerIDs []string) error {
	if len(timerIDs) == 0 {
		return nil
	}
	if err := db.inTx(ctx, func(tx *sql.Tx) error { return deleteTimers(ctx, tx, roomID, timerIDs) }); err != nil {
		return fmt.Errorf("delete timers room=%s: %w", roomID, err)
	}
	return nil
}
