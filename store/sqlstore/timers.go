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
		if err := db.deleteTimers(ctx, tx, d.RoomID, d.TimerIDs, 0); err != nil {
			return err
		}
	}
	return db.upsertTimers(ctx, tx, sets, now)
}

// deleteTimers deletes the room's timers among ids inside tx, those due by
// dueBy (unix ms) when it is above zero; ids the room does not hold are
// ignored.
func (db *DB) deleteTimers(ctx context.Context, tx *sql.Tx, roomID string, ids []string, dueBy int64) error {
	for chunk := range slices.Chunk(ids, maxIn) {
		q := `DELETE FROM room_timers WHERE room_id = ? AND timer_id IN ` + In(len(chunk))
		args := AppendStrings([]any{roomID}, chunk)
		if dueBy > 0 {
			q += ` AND fire_at_ms <= ?`
			args = append(args, dueBy)
		}
		if _, err := tx.ExecContext(ctx, q, args...); err != nil {
			return db.d.MapErr(err)
		}
	}
	return nil
}

// upsertTimers sets timers inside tx, each replacing the row of its room
// and id.
func (db *DB) upsertTimers(ctx context.Context, tx *sql.Tx, timers []*store.Timer, now int64) error {
	upsert := db.d.Upsert("room_id, timer_id", "kind", "fire_at_ms", "payload", "created_at")
	for chunk := range slices.Chunk(timers, maxTimerRows) {
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

// ListDueTimers returns up to limit timers of kind (every kind when it is
// empty) due at or before before, in (fire time, room id, timer id) order,
// read from the fire time index. A limit of zero or less lists nothing.
func (db *DB) ListDueTimers(ctx context.Context, kind string, before time.Time, limit int) ([]store.Timer, error) {
	if limit <= 0 {
		return nil, nil
	}
	q, args := `SELECT `+timerColumns+` FROM room_timers WHERE fire_at_ms <= ?`, []any{before.UnixMilli()}
	if kind != "" {
		q, args = q+` AND kind = ?`, append(args, kind)
	}
	rows, err := db.read.QueryContext(ctx, q+` ORDER BY fire_at_ms, room_id, timer_id LIMIT ?`, append(args, limit)...)
	out, err := ScanAll(rows, err, scanTimers)
	if err != nil {
		return nil, fmt.Errorf("list due timers before=%d: %w", before.UnixMilli(), db.d.MapErr(err))
	}
	return out, nil
}

// DeleteTimers deletes the room's timers named by timerIDs in one
// transaction, those due by dueBy when it is not zero; ids the room does
// not hold are ignored.
func (db *DB) DeleteTimers(ctx context.Context, roomID string, timerIDs []string, dueBy time.Time) error {
	if len(timerIDs) == 0 {
		return nil
	}
	by := int64(0)
	if !dueBy.IsZero() {
		by = max(dueBy.UnixMilli(), 1)
	}
	if err := db.Tx(ctx, func(tx *sql.Tx) error { return db.deleteTimers(ctx, tx, roomID, timerIDs, by) }); err != nil {
		return fmt.Errorf("delete timers room=%s: %w", roomID, err)
	}
	return nil
}

// PutTimers sets timers in one transaction, each replacing the row of its
// room and id.
func (db *DB) PutTimers(ctx context.Context, timers []store.Timer) error {
	if len(timers) == 0 {
		return nil
	}
	ptrs := make([]*store.Timer, len(timers))
	for i := range timers {
		ptrs[i] = &timers[i]
	}
	if err := db.Tx(ctx, func(tx *sql.Tx) error { return db.upsertTimers(ctx, tx, ptrs, time.Now().UnixMilli()) }); err != nil {
		return fmt.Errorf("put %d timers: %w", len(timers), err)
	}
	return nil
}
