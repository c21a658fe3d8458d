package mysql

import (
	"context"
	"database/sql"
	"fmt"
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
	if err := sqlrow.SettleCharges(ctx, tx, batches, now, `UPDATE wallet_charges FORCE INDEX (PRIMARY)`, mapErr); err != nil {
		return err
	}
	deletes, sets := sqlrow.MergeTimers(batches)
	for _, d := range deletes {
		if err := sqlrow.DeleteTimers(ctx, tx, d.RoomID, d.TimerIDs, mapErr); err != nil {
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
	if err := db.inTx(ctx, func(tx *sql.Tx) error { return sqlrow.DeleteTimers(ctx, tx, roomID, timerIDs, mapErr) }); err != nil {
		return fmt.Errorf("delete timers room=%s: %w", roomID, err)
	}
	return nil
}
