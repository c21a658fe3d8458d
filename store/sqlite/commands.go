package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"hyapp/room-service/store"
	"hyapp/room-service/store/internal/sqlrow"
)

const commandColumns = `room_id, room_version, command_id, command_type, payload, replayable, created_at`

// maxInIDs caps the ids of one IN (...) list in GetCommands.
const maxInIDs = 500

// SaveCommand appends one command and advances the head, in one write
// transaction. The record must be the room's next version (head+1) and its
// command id new in the room, otherwise store.ErrConflict; an unknown room is
// store.ErrNotFound. It checks no owner epoch.
func (db *DB) SaveCommand(ctx context.Context, record store.CommandRecord) error {
	if err := db.saveCommand(ctx, record); err != nil {
		return fmt.Errorf("save command room=%s version=%d command=%s: %w",
			record.RoomID, record.RoomVersion, record.CommandID, err)
	}
	return nil
}

func (db *DB) saveCommand(ctx context.Context, record store.CommandRecord) error {
	tx, err := db.write.BeginTx(ctx, nil)
	if err != nil {
		return mapErr(err)
	}
	defer func() { _ = tx.Rollback() }()
	now := time.Now().UnixMilli() // after the wait for the writer
	res, err := tx.StmtContext(ctx, db.advanceHead).ExecContext(ctx, record.RoomVersion, now, record.RoomID, record.RoomVersion-1)
	if err != nil {
		return mapErr(err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return mapErr(err)
	} else if n == 0 {
		var head int64
		err := tx.QueryRowContext(ctx, `SELECT room_version FROM rooms WHERE room_id = ?`, record.RoomID).Scan(&head)
		if errors.Is(err, sql.ErrNoRows) {
			return store.ErrNotFound
		}
		if err != nil {
			return mapErr(err)
		}
		return fmt.Errorf("head is %d: %w", head, store.ErrConflict)
	}
	if err := db.insertCommands.exec(ctx, tx, 1, func(dst []any, _ int) []any {
		return sqlrow.CommandArgs(dst, &record, now)
	}); err != nil {
		return err
	}
	return mapErr(tx.Commit())
}

// GetCommand reads one committed command by its id; found is false when the
// room has no such command.
func (db *DB) GetCommand(ctx context.Context, roomID string, commandID string) (store.CommandRecord, bool, error) {
	c, err := sqlrow.ScanCommand(db.getCommand.QueryRowContext(ctx, roomID, commandID))
	if errors.Is(err, sql.ErrNoRows) {
		return store.CommandRecord{}, false, nil
	}
	if err != nil {
		return store.CommandRecord{}, false, fmt.Errorf("get command room=%s command=%s: %w", roomID, commandID, mapErr(err))
	}
	return c, true, nil
}

// GetCommands reads the committed commands among commandIDs, keyed by command
// id; ids the room does not have are absent from the map.
func (db *DB) GetCommands(ctx context.Context, roomID string, commandIDs []string) (map[string]store.CommandRecord, error) {
	out := make(map[string]store.CommandRecord, len(commandIDs))
	for len(commandIDs) > 0 {
		chunk := commandIDs[:min(len(commandIDs), maxInIDs)]
		commandIDs = commandIDs[len(chunk):]
		args := make([]any, 0, len(chunk)+1)
		args = append(args, roomID)
		for _, id := range chunk {
			args = append(args, id)
		}
		q := `SELECT ` + commandColumns + ` FROM room_command_log WHERE room_id = ? AND command_id IN (?` +
			strings.Repeat(", ?", len(chunk)-1) + `)`
		if err := db.queryCommands(ctx, q, args, func(c store.CommandRecord) { out[c.CommandID] = c }); err != nil {
			return nil, fmt.Errorf("get commands room=%s: %w", roomID, err)
		}
	}
	return out, nil
}

// ListCommandsAfter returns the room's commands with a version above
// roomVersion, in version order.
func (db *DB) ListCommandsAfter(ctx context.Context, roomID string, roomVersion int64) ([]store.CommandRecord, error) {
	var out []store.CommandRecord
	rows, err := db.listCommands.QueryContext(ctx, roomID, roomVersion)
	if err == nil {
		err = sqlrow.Collect(rows, func(c store.CommandRecord) { out = append(out, c) })
	}
	if err != nil {
		return nil, fmt.Errorf("list commands room=%s after=%d: %w", roomID, roomVersion, mapErr(err))
	}
	return out, nil
}

func (db *DB) queryCommands(ctx context.Context, query string, args []any, each func(store.CommandRecord)) error {
	rows, err := db.read.QueryContext(ctx, query, args...)
	if err != nil {
		return mapErr(err)
	}
	return mapErr(sqlrow.Collect(rows, each))
}

// CommitBatches commits the batches in one write transaction, so one durable
// commit covers them all. Each batch is fenced on its own, inside a savepoint:
//   - a batch whose commands are not versions BaseVersion+1.. in order, or
//     whose commands, outbox rows or snapshot name another room, or whose
//     snapshot is beyond its head, is store.ErrConflict and writes nothing;
//   - a batch whose room is missing or whose owner epoch or head differs from
//     the batch's is store.ErrFenced and writes nothing;
//   - a batch that hits a duplicate command id or event id is
//     store.ErrConflict and writes nothing;
//   - otherwise it advances the head, sets the status when given, appends
//     its commands and pending outbox rows (stamped with the batch's owner
//     epoch), deletes its done timers, sets its timers and stores its
//     snapshot unless a newer one is stored.
//
// Later batches see earlier ones, so consecutive batches of one room commit
// together. A non-nil err means the transaction did not commit, or may not
// have: no batch is known to be committed.
func (db *DB) CommitBatches(ctx context.Context, batches []store.Batch) ([]error, error) {
	if len(batches) == 0 {
		return nil, nil
	}
	results := make([]error, len(batches))
	valid := 0
	for i := range batches {
		if err := sqlrow.ValidateBatch(&batches[i]); err != nil {
			results[i] = fmt.Errorf("commit batch room=%s base=%d: %w", batches[i].RoomID, batches[i].BaseVersion, err)
			continue
		}
		valid++
	}
	if valid == 0 {
		return results, nil
	}
	if ok, err := db.commitMerged(ctx, batches, results); ok || err != nil {
		return results, err
	}
	// A duplicate key somewhere: commit batch by batch, each in a savepoint,
	// so only the batch that holds it is refused.
	for i := range results {
		if errors.Is(results[i], store.ErrFenced) {
			results[i] = nil // decided again below
		}
	}
	return db.commitIsolated(ctx, batches, results)
}

// commitMerged is the fast path of CommitBatches: fence every batch, then
// write all their rows with a few large multi-row INSERTs. It reports
// ok=false, with nothing written, when a duplicate key makes the merged
// INSERTs fail; the caller then isolates the batches.
func (db *DB) commitMerged(ctx context.Context, batches []store.Batch, results []error) (ok bool, err error) {
	tx, err := db.write.BeginTx(ctx, nil)
	if err != nil {
		return false, fmt.Errorf("commit batches: %w", mapErr(err))
	}
	defer func() { _ = tx.Rollback() }()
	now := time.Now().UnixMilli()
	pass := make([]*store.Batch, 0, len(batches))
	commands, events := 0, 0
	for i := range batches {
		if results[i] != nil {
			continue
		}
		b := &batches[i]
		switch err := db.advance(ctx, tx, b, now); {
		case errors.Is(err, store.ErrFenced):
			results[i] = fmt.Errorf("commit batch room=%s epoch=%d base=%d: %w", b.RoomID, b.OwnerEpoch, b.BaseVersion, err)
			continue
		case err != nil:
			return false, fmt.Errorf("commit batches room=%s: %w", b.RoomID, err)
		}
		pass = append(pass, b)
		commands += len(b.Commands)
		events += len(b.Outbox)
	}
	insert := func(bulk *bulkInsert, n int, rows func(b *store.Batch) int, args func(dst []any, b *store.Batch, i int) []any) error {
		if n == 0 {
			return nil
		}
		bi, ri := 0, 0
		return bulk.exec(ctx, tx, n, func(dst []any, _ int) []any {
			for ri >= rows(pass[bi]) {
				bi, ri = bi+1, 0
			}
			ri++
			return args(dst, pass[bi], ri-1)
		})
	}
	err = insert(db.insertCommands, commands, func(b *store.Batch) int { return len(b.Commands) },
		func(dst []any, b *store.Batch, i int) []any { return sqlrow.CommandArgs(dst, &b.Commands[i], now) })
	if err == nil {
		err = insert(db.insertOutbox, events, func(b *store.Batch) int { return len(b.Outbox) },
			func(dst []any, b *store.Batch, i int) []any {
				return sqlrow.OutboxArgs(dst, &b.Outbox[i], b.OwnerEpoch, now)
			})
	}
	if err == nil {
		err = writeTimersAndSettles(ctx, tx, pass, now)
	}
	if errors.Is(err, store.ErrConflict) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("commit batches: %w", err)
	}
	for _, b := range pass {
		if err := db.saveBatchSnapshot(ctx, tx, b, now); err != nil {
			return false, fmt.Errorf("commit batches room=%s: %w", b.RoomID, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return false, fmt.Errorf("commit batches: %w", mapErr(err))
	}
	return true, nil
}

// commitIsolated commits each batch in its own savepoint.
func (db *DB) commitIsolated(ctx context.Context, batches []store.Batch, results []error) ([]error, error) {
	tx, err := db.write.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("commit batches: %w", mapErr(err))
	}
	defer func() { _ = tx.Rollback() }()
	now := time.Now().UnixMilli() // after the wait for the writer
	savepoint := tx.StmtContext(ctx, db.savepoint)
	release := tx.StmtContext(ctx, db.release)
	rollbackTo := tx.StmtContext(ctx, db.rollbackTo)

	for i := range batches {
		if results[i] != nil {
			continue
		}
		b := &batches[i]
		if _, err := savepoint.ExecContext(ctx); err != nil {
			return nil, fmt.Errorf("commit batches: %w", mapErr(err))
		}
		switch err := db.writeBatch(ctx, tx, b, now); {
		case err == nil:
		case errors.Is(err, store.ErrFenced) || errors.Is(err, store.ErrConflict):
			// This batch alone is refused: undo what it wrote, keep the others.
			results[i] = fmt.Errorf("commit batch room=%s epoch=%d base=%d: %w", b.RoomID, b.OwnerEpoch, b.BaseVersion, err)
			if _, err := rollbackTo.ExecContext(ctx); err != nil {
				return nil, fmt.Errorf("commit batches: %w", mapErr(err))
			}
		default:
			return nil, fmt.Errorf("commit batches room=%s: %w", b.RoomID, err)
		}
		if _, err := release.ExecContext(ctx); err != nil {
			return nil, fmt.Errorf("commit batches: %w", mapErr(err))
		}
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("commit batches: %w", mapErr(err))
	}
	return results, nil
}

// writeBatch writes one validated batch. A fenced batch has written nothing
// when it returns store.ErrFenced; on store.ErrConflict the caller rolls
// back to the batch's savepoint.
func (db *DB) writeBatch(ctx context.Context, tx *sql.Tx, b *store.Batch, now int64) error {
	if err := db.advance(ctx, tx, b, now); err != nil {
		return err
	}
	if len(b.Commands) > 0 {
		if err := db.insertCommands.exec(ctx, tx, len(b.Commands), func(dst []any, i int) []any {
			return sqlrow.CommandArgs(dst, &b.Commands[i], now)
		}); err != nil {
			return err
		}
	}
	if len(b.Outbox) > 0 {
		if err := db.insertOutbox.exec(ctx, tx, len(b.Outbox), func(dst []any, i int) []any {
			return sqlrow.OutboxArgs(dst, &b.Outbox[i], b.OwnerEpoch, now)
		}); err != nil {
			return err
		}
	}
	if err := writeTimersAndSettles(ctx, tx, []*store.Batch{b}, now); err != nil {
		return err
	}
	return db.saveBatchSnapshot(ctx, tx, b, now)
}

// advance moves the room's head to the batch's, fenced on its owner epoch
// and base version: store.ErrFenced when either differs.
func (db *DB) advance(ctx context.Context, tx *sql.Tx, b *store.Batch, now int64) error {
	res, err := tx.StmtContext(ctx, db.advanceFenced).ExecContext(ctx,
		b.HeadVersion(), now, b.Status, b.RoomID, b.BaseVersion, b.OwnerEpoch)
	if err != nil {
		return mapErr(err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return mapErr(err)
	} else if n == 0 {
		return store.ErrFenced
	}
	return nil
}

// saveBatchSnapshot stores the batch's snapshot unless a newer one is
// stored, and its metadata when set.
func (db *DB) saveBatchSnapshot(ctx context.Context, tx *sql.Tx, b *store.Batch, now int64) error {
	if m := b.Meta; m != nil {
		if _, err := tx.ExecContext(ctx, `UPDATE rooms SET owner_user_id = ?, host_user_id = ?, seat_count = ?, mode = ? WHERE room_id = ?`,
			m.OwnerUserID, m.HostUserID, m.SeatCount, m.Mode, b.RoomID); err != nil {
			return mapErr(err)
		}
	}
	if s := b.Snapshot; s != nil {
		if _, err := tx.StmtContext(ctx, db.upsertSnapshot).ExecContext(ctx,
			s.RoomID, s.RoomVersion, s.Payload, sqlrow.Millis(s.CreatedAt, now)); err != nil {
			return mapErr(err)
		}
	}
	return nil
}
