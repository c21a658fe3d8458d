package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"hyapp/room-service/store"
	"hyapp/room-service/store/internal/sqlrow"
)

// maxTimerRows caps the rows of one timer upsert (six variables a row).
const maxTimerRows = 256

// upsertTimers sets timers: a stored timer of the same room and id is replaced.
const upsertTimers = `INSERT INTO room_timers (` + sqlrow.TimerColumns + `) VALUES `
const upsertTimersTail = ` ON CONFLICT (room_id, timer_id) DO UPDATE SET
	kind = excluded.kind, fire_at_ms = excluded.fire_at_ms,
	payload = excluded.payload, created_at = excluded.created_at`

// writeTimersAndSettles settles the gift charges of batches that passed
// their fence and applies their timer changes, in their order, inside tx. Timers are rare (a rocket ignition or launch),
// so the statements are prepared for the one execution.
func writeTimersAndSettles(ctx context.Context, tx *sql.Tx, batches []*store.Batch, now int64) error {
	if err := sqlrow.SettleCharges(ctx, tx, batches, now, `UPDATE wallet_charges`, mapErr); err != nil {
		return err
	}
	deletes, sets := sqlrow.MergeTimers(batches)
	for _, d := range deletes {
		if err := sqlrow.DeleteTimers(ctx, tx, d.RoomID, d.TimerIDs, mapErr); err != nil {
			return err
		}
	}
	for len(sets) > 0 {
		chunk := sets[:min(len(sets), maxTimerRows)]
		sets = sets[len(chunk):]
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
// (fire time, room id, timer id) order. A limit of zero or less lists nothing.
func (db *DB) ListDueTimers(ctx context.Context, before time.Time, limit int) ([]store.Timer, error) {
	if limit <= 0 {
		return nil, nil
	}
	rows, err := db.read.QueryContext(ctx, `SELECT `+sqlrow.TimerColumns+` FROM room_timers
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

// DeleteTimers deletes the room's timers named by timerIDs in one write
// transaction; ids the room does not hold are ignored.
func (db *DB) DeleteTimers(ctx context.Context, roomID string, timerIDs []string) error {
	if len(timerIDs) == 0 {
		return nil
	}
	err := func() error {
		tx, err := db.write.BeginTx(ctx, nil)
		if err != nil {
			return mapErr(err)
		}
		defer func() { _ = tx.Rollback() }()
		if err := sqlrow.DeleteTimers(ctx, tx, roomID, timerIDs, mapErr); err != nil {
			return err
		}
		return mapErr(tx.Commit())
	}()
	if err != nil {
		return fmt.Errorf("delete timers room=%s: %w", roomID, err)
	}
	return nil
}
