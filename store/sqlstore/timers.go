package sqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"time"

	"hyapp/room-service/store"
)

// maxTimerRows caps the rows of one timer upsert (six values a row).
const maxTimerRows = 256

// writeTimersAndSettles writes the embedded ledger's part of the batches
// that passed their fence (their gift charges and settles, through the
// ledger's LedgerHooks.Write), inserts their gift records and applies their timer
// changes, in their order, inside tx, touching rows in (room id, timer id)
// order. Timers are rare (a rocket ignition or launch), so their
// statements are not kept prepared. insert starts the INSERTs of the gift
// records and the ledger's rows: "INSERT INTO ", or
// Dialect.InsertOrRollback in a merged commit.
func (db *DB) writeTimersAndSettles(ctx context.Context, tx *sql.Tx, insert string, batches []*store.Batch, now int64) error {
	if err := db.writeGiftRecords(ctx, tx, insert, batches); err != nil {
		return err
	}
	var charges []store.GiftCharge
	var keys []string
	for _, b := range batches {
		charges = append(charges, b.Charges...)
		keys = append(keys, b.Settle...)
	}
	if len(charges) > 0 || len(keys) > 0 {
		ledger := db.ledger.Load()
		if ledger == nil {
			return fmt.Errorf("%d gift charges to make and %d to settle and no ledger: %w", len(charges), len(keys), store.ErrConflict)
		}
		if err := ledger.Write(ctx, &CommitTx{tx: tx}, insert, charges, keys, now); err != nil {
			return err
		}
	}
	deletes, sets := mergeTimers(batches)
	for _, d := range deletes {
		if err := db.deleteTimers(ctx, tx, d.RoomID, d.TimerIDs); err != nil {
			return err
		}
	}
	upsert := db.d.Upsert("room_id, timer_id", "kind", "fire_at_ms", "payload", "created_at")
	for chunk := range slices.Chunk(sets, maxTimerRows) {
		args := make([]any, 0, 6*len(chunk))
		for _, t := range chunk {
			args = timerArgs(args, t, now)
		}
		q := `INSERT INTO room_timers (` + timerColumns + `) VALUES ` + Values(`(?, ?, ?, ?, ?, ?)`, len(chunk)) + upsert
		if _, err := tx.ExecContext(ctx, q, args...); err != nil {
			return db.d.MapErr(err)
		}
	}
	return nil
}

// deleteTimers deletes the room's timers among ids inside tx; ids the room
// does not hold are ignored.
func (db *DB) deleteTimers(ctx context.Context, tx *sql.Tx, roomID string, ids []string) error {
	for chunk := range slices.Chunk(ids, maxIn) {
		q := `DELETE FROM room_timers WHERE room_id = ? AND timer_id IN ` + In(len(chunk))
		if _, err := tx.ExecContext(ctx, q, AppendStrings([]any{roomID}, chunk)...); err != nil {
			return db.d.MapErr(err)
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
	rows, err := db.read.QueryContext(ctx, `SELECT `+timerColumns+` FROM room_timers
		WHERE fire_at_ms <= ? ORDER BY fire_at_ms, room_id, timer_id LIMIT ?`, before.UnixMilli(), limit)
	out, err := ScanAll(rows, err, scanTimers)
	if err != nil {
		return nil, fmt.Errorf("list due timers before=%d: %w", before.UnixMilli(), db.d.MapErr(err))
	}
	return out, nil
}

// DeleteTimers deletes the room's timers named by timerIDs in one
// transaction; ids the room does not hold are ignored.
func (db *DB) DeleteTimers(ctx context.Context, roomID string, timerIDs []string) error {
	if len(timerIDs) == 0 {
		return nil
	}
	if err := db.Tx(ctx, func(tx *sql.Tx) error { return db.deleteTimers(ctx, tx, roomID, timerIDs) }); err != nil {
		return fmt.Errorf("delete timers room=%s: %w", roomID, err)
	}
	return nil
}
