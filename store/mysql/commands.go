package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sort"
	"time"

	"hyapp/room-service/outbox"
	"hyapp/room-service/store"
	"hyapp/room-service/store/internal/sqlrow"
)

const commandColumns = `room_id, room_version, command_id, command_type, payload, replayable, created_at`

// maxInIDs caps the ids of one IN (...) list in GetCommands.
const maxInIDs = 500

// errDuplicate reports that the merged INSERTs of CommitBatches hit a
// duplicate key: the batches are committed again one by one.
var errDuplicate = errors.New("duplicate key in a merged insert")

func commandSize(c *store.CommandRecord) int {
	return len(c.RoomID) + len(c.CommandID) + len(c.CommandType) + len(c.Payload) + rowOverhead
}

// SaveCommand appends one command and advances the head, in one
// transaction. The record must be the room's next version (head+1) and its
// command id new in the room, otherwise store.ErrConflict; an unknown room is
// store.ErrNotFound. It checks no owner epoch.
func (db *DB) SaveCommand(ctx context.Context, record store.CommandRecord) error {
	err := db.inTx(ctx, func(tx *sql.Tx) error {
		now := time.Now().UnixMilli()
		res, err := tx.StmtContext(ctx, db.advanceHead).ExecContext(ctx, record.RoomVersion, now, record.RoomID, record.RoomVersion-1)
		if err != nil {
			return mapErr(err)
		}
		if n, err := res.RowsAffected(); err != nil {
			return mapErr(err)
		} else if n == 0 {
			var head int64
			err := tx.StmtContext(ctx, db.headVersion).QueryRowContext(ctx, record.RoomID).Scan(&head)
			if errors.Is(err, sql.ErrNoRows) {
				return store.ErrNotFound
			}
			if err != nil {
				return mapErr(err)
			}
			return fmt.Errorf("head is %d: %w", head, store.ErrConflict)
		}
		return db.insertCommands.exec(ctx, tx, 1,
			func(int) int { return commandSize(&record) },
			func(dst []any, _ int) []any { return sqlrow.CommandArgs(dst, &record, now) })
	})
	if err != nil {
		return fmt.Errorf("save command room=%s version=%d command=%s: %w",
			record.RoomID, record.RoomVersion, record.CommandID, err)
	}
	return nil
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
		q := `SELECT ` + commandColumns + ` FROM room_command_log WHERE room_id = ? AND command_id IN (` +
			placeholders(len(chunk)) + `)`
		rows, err := db.db.QueryContext(ctx, q, args...)
		if err == nil {
			err = sqlrow.Collect(rows, func(c store.CommandRecord) { out[c.CommandID] = c })
		}
		if err != nil {
			return nil, fmt.Errorf("get commands room=%s: %w", roomID, mapErr(err))
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

// CommitBatches commits the batches in one transaction, so one durable
// commit covers them all. Each batch is fenced on its own:
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
//     snapshot unless one of the same or a higher version is stored.
//
// Later batches of a room see its earlier ones, so consecutive batches of
// one room commit together. The fast path fences every batch (see fence)
// and then writes all rows with a few multi-row INSERTs; a duplicate key
// there rolls it back and commits the batches again one by one, each in a
// savepoint behind a conditional UPDATE, so that only the batch holding
// the duplicate is refused.
// A deadlock or lock wait timeout runs the transaction again (see inTx).
// A non-nil err means the transaction did not commit, or may not have: no
// batch is known to be committed.
func (db *DB) CommitBatches(ctx context.Context, batches []store.Batch) ([]error, error) {
	if len(batches) == 0 {
		return nil, nil
	}
	checked := make([]error, len(batches))
	order := make([]int, 0, len(batches))
	for i := range batches {
		if err := sqlrow.ValidateBatch(&batches[i]); err != nil {
			checked[i] = fmt.Errorf("commit batch room=%s base=%d: %w", batches[i].RoomID, batches[i].BaseVersion, err)
			continue
		}
		order = append(order, i)
	}
	if len(order) == 0 {
		return checked, nil
	}
	// Lock the rooms rows in id order, whatever order the caller used, so
	// two commits sharing rooms cannot deadlock on them. The sort is stable:
	// one room's batches keep their order.
	sort.SliceStable(order, func(a, b int) bool { return batches[order[a]].RoomID < batches[order[b]].RoomID })

	results := make([]error, len(batches))
	err := db.inTx(ctx, func(tx *sql.Tx) error {
		copy(results, checked)
		return db.commitMerged(ctx, tx, batches, order, results)
	})
	if errors.Is(err, errDuplicate) {
		err = db.inTx(ctx, func(tx *sql.Tx) error {
			copy(results, checked)
			return db.commitIsolated(ctx, tx, batches, order, results)
		})
	}
	if err != nil {
		return nil, fmt.Errorf("commit batches: %w", err)
	}
	return results, nil
}

// outboxRow is one outbox record of a batch, with the batch's owner epoch.
type outboxRow struct {
	r     *outbox.Record
	epoch int64
}

// commitMerged is the fast path of CommitBatches: fence every batch (see
// fence), then write all their rows with a few large multi-row INSERTs. It returns
// errDuplicate when a duplicate key makes the merged INSERTs fail; the
// caller rolls back and isolates the batches.
func (db *DB) commitMerged(ctx context.Context, tx *sql.Tx, batches []store.Batch, order []int, results []error) error {
	now := time.Now().UnixMilli()
	pass, err := db.fence(ctx, tx, batches, order, results, now)
	if err != nil {
		return err
	}
	var commands []*store.CommandRecord
	var events []outboxRow
	for _, b := range pass {
		for j := range b.Commands {
			commands = append(commands, &b.Commands[j])
		}
		for j := range b.Outbox {
			events = append(events, outboxRow{&b.Outbox[j], b.OwnerEpoch})
		}
	}
	err = db.insertCommands.exec(ctx, tx, len(commands),
		func(i int) int { return commandSize(commands[i]) },
		func(dst []any, i int) []any { return sqlrow.CommandArgs(dst, commands[i], now) })
	if err == nil {
		err = db.insertOutbox.exec(ctx, tx, len(events),
			func(i int) int { return outboxSize(events[i].r) },
			func(dst []any, i int) []any { return sqlrow.OutboxArgs(dst, events[i].r, events[i].epoch, now) })
	}
	if errors.Is(err, store.ErrConflict) {
		return fmt.Errorf("%w: %w", errDuplicate, err)
	}
	if err != nil {
		return err
	}
	if len(pass) == 0 {
		return nil
	}
	if err := writeTimersAndSettles(ctx, tx, pass, now); err != nil {
		if errors.Is(err, store.ErrConflict) {
			return fmt.Errorf("%w: %w", errDuplicate, err) // isolate the batches: only the refused one fails
		}
		return err
	}
	update, insert := tx.StmtContext(ctx, db.updateSnapshot), tx.StmtContext(ctx, db.insertSnapshot)
	for _, b := range pass {
		if err := saveMeta(ctx, tx, b); err != nil {
			return fmt.Errorf("room=%s: %w", b.RoomID, err)
		}
		if b.Snapshot != nil {
			if err := saveSnapshot(ctx, update, insert, b.Snapshot, now); err != nil {
				return fmt.Errorf("room=%s: %w", b.RoomID, err)
			}
		}
	}
	return nil
}

// commitIsolated commits each batch in its own savepoint.
func (db *DB) commitIsolated(ctx context.Context, tx *sql.Tx, batches []store.Batch, order []int, results []error) error {
	now := time.Now().UnixMilli()
	fence := tx.StmtContext(ctx, db.advanceFenced)
	update, insert := tx.StmtContext(ctx, db.updateSnapshot), tx.StmtContext(ctx, db.insertSnapshot)
	for _, i := range order {
		b := &batches[i]
		// A savepoint of the same name replaces the previous one.
		if _, err := tx.ExecContext(ctx, `SAVEPOINT batch`); err != nil {
			return mapErr(err)
		}
		err := advance(ctx, fence, b, now)
		if err == nil {
			err = db.writeRows(ctx, tx, update, insert, b, now)
			if errors.Is(err, store.ErrConflict) {
				// This batch alone is refused: undo what it wrote, keep the others.
				if _, err := tx.ExecContext(ctx, `ROLLBACK TO SAVEPOINT batch`); err != nil {
					return mapErr(err)
				}
			}
		}
		switch {
		case err == nil:
		case errors.Is(err, store.ErrFenced) || errors.Is(err, store.ErrConflict):
			results[i] = fmt.Errorf("commit batch room=%s epoch=%d base=%d: %w", b.RoomID, b.OwnerEpoch, b.BaseVersion, err)
		default:
			return fmt.Errorf("room=%s: %w", b.RoomID, err)
		}
	}
	return nil
}

// writeRows writes a fenced batch's commands, outbox rows, timers and snapshot.
func (db *DB) writeRows(ctx context.Context, tx *sql.Tx, update, insert *sql.Stmt, b *store.Batch, now int64) error {
	err := db.insertCommands.exec(ctx, tx, len(b.Commands),
		func(i int) int { return commandSize(&b.Commands[i]) },
		func(dst []any, i int) []any { return sqlrow.CommandArgs(dst, &b.Commands[i], now) })
	if err != nil {
		return err
	}
	err = db.insertOutbox.exec(ctx, tx, len(b.Outbox),
		func(i int) int { return outboxSize(&b.Outbox[i]) },
		func(dst []any, i int) []any { return sqlrow.OutboxArgs(dst, &b.Outbox[i], b.OwnerEpoch, now) })
	if err != nil {
		return err
	}
	if err := writeTimersAndSettles(ctx, tx, []*store.Batch{b}, now); err != nil {
		return err
	}
	if err := saveMeta(ctx, tx, b); err != nil {
		return err
	}
	if b.Snapshot != nil {
		return saveSnapshot(ctx, update, insert, b.Snapshot, now)
	}
	return nil
}

// saveMeta writes the batch's room metadata when it carries some.
func saveMeta(ctx context.Context, tx *sql.Tx, b *store.Batch) error {
	m := b.Meta
	if m == nil {
		return nil
	}
	_, err := tx.ExecContext(ctx, `UPDATE rooms SET owner_user_id = ?, host_user_id = ?, seat_count = ?, mode = ? WHERE room_id = ?`,
		m.OwnerUserID, m.HostUserID, m.SeatCount, m.Mode, b.RoomID)
	return mapErr(err)
}

// advance moves the room's head to the batch's, fenced on its owner epoch
// and base version: store.ErrFenced, with nothing written, when either
// differs or the room does not exist. The UPDATE locks the room's row until
// the transaction ends.
func advance(ctx context.Context, fence *sql.Stmt, b *store.Batch, now int64) error {
	res, err := fence.ExecContext(ctx, b.HeadVersion(), now, b.Status, b.RoomID, b.BaseVersion, b.OwnerEpoch)
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
