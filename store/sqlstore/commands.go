package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"time"

	"hyapp/room-service/store"
)

const commandColumns = `room_id, room_version, command_id, command_type, payload, replayable, created_at`

func commandSize(c *store.CommandRecord) int {
	return len(c.RoomID) + len(c.CommandID) + len(c.CommandType) + len(c.Payload) + rowOverhead
}

// SaveCommand appends one command and advances the head, in one
// transaction. The record must be the room's next version (head+1) and its
// command id new in the room, otherwise store.ErrConflict; an unknown room is
// store.ErrNotFound. It checks no owner epoch.
func (db *DB) SaveCommand(ctx context.Context, record store.CommandRecord) error {
	err := db.Tx(ctx, func(tx *sql.Tx) error {
		now := time.Now().UnixMilli() // after the wait for the writer
		res, err := tx.StmtContext(ctx, db.stmts.advanceHead).ExecContext(ctx, record.RoomVersion, now, record.RoomID, record.RoomVersion-1)
		if err != nil {
			return db.d.MapErr(err)
		}
		if n, err := res.RowsAffected(); err != nil {
			return db.d.MapErr(err)
		} else if n == 0 {
			var head int64
			err := tx.StmtContext(ctx, db.stmts.headVersion).QueryRowContext(ctx, record.RoomID).Scan(&head)
			if errors.Is(err, sql.ErrNoRows) {
				return store.ErrNotFound
			}
			if err != nil {
				return db.d.MapErr(err)
			}
			return fmt.Errorf("head is %d: %w", head, store.ErrConflict)
		}
		return db.stmts.insertCommands.exec(ctx, tx, db.d.MapErr, 1,
			func(int) int { return commandSize(&record) },
			func(dst []any, _ int) []any { return commandArgs(dst, &record, now) })
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
	c, err := scanCommand(db.stmts.getCommand.QueryRowContext(ctx, roomID, commandID))
	if errors.Is(err, sql.ErrNoRows) {
		return store.CommandRecord{}, false, nil
	}
	if err != nil {
		return store.CommandRecord{}, false, fmt.Errorf("get command room=%s command=%s: %w", roomID, commandID, db.d.MapErr(err))
	}
	return c, true, nil
}

// GetCommands reads the committed commands among commandIDs, keyed by command
// id; ids the room does not have are absent from the map.
func (db *DB) GetCommands(ctx context.Context, roomID string, commandIDs []string) (map[string]store.CommandRecord, error) {
	out := make(map[string]store.CommandRecord, len(commandIDs))
	for chunk := range slices.Chunk(commandIDs, maxIn) {
		q := `SELECT ` + commandColumns + ` FROM room_command_log WHERE room_id = ? AND command_id IN ` + In(len(chunk))
		rows, err := db.read.QueryContext(ctx, q, AppendStrings([]any{roomID}, chunk)...)
		if err == nil {
			err = collectCommands(rows, func(c store.CommandRecord) { out[c.CommandID] = c })
		}
		if err != nil {
			return nil, fmt.Errorf("get commands room=%s: %w", roomID, db.d.MapErr(err))
		}
	}
	return out, nil
}

// ListCommandsAfter returns the room's commands with a version above
// roomVersion, in version order.
func (db *DB) ListCommandsAfter(ctx context.Context, roomID string, roomVersion int64) ([]store.CommandRecord, error) {
	var out []store.CommandRecord
	rows, err := db.stmts.listCommands.QueryContext(ctx, roomID, roomVersion)
	if err == nil {
		err = collectCommands(rows, func(c store.CommandRecord) { out = append(out, c) })
	}
	if err != nil {
		return nil, fmt.Errorf("list commands room=%s after=%d: %w", roomID, roomVersion, db.d.MapErr(err))
	}
	return out, nil
}

// ListCommandsPage returns at most limit of the room's commands with a
// version above roomVersion, in version order, and then the room's head.
func (db *DB) ListCommandsPage(ctx context.Context, roomID string, roomVersion int64, limit int) ([]store.CommandRecord, int64, error) {
	var out []store.CommandRecord
	rows, err := db.stmts.listCommandsPage.QueryContext(ctx, roomID, roomVersion, limit)
	if err == nil {
		err = collectCommands(rows, func(c store.CommandRecord) { out = append(out, c) })
	}
	var head int64
	if err == nil {
		// After the page: the head is at least its last version.
		if err = db.stmts.readHead.QueryRowContext(ctx, roomID).Scan(&head); errors.Is(err, sql.ErrNoRows) {
			err = nil
		}
	}
	if err != nil {
		return nil, 0, fmt.Errorf("list commands room=%s after=%d limit=%d: %w", roomID, roomVersion, limit, db.d.MapErr(err))
	}
	return out, head, nil
}
