package sqlite

import (
	"context"
	"fmt"
	"time"
)

// PruneCommands deletes up to limit command log rows at least keepVersions
// versions below their room's stored snapshot (a negative keepVersions is
// 0) and written before before; rooms without a snapshot keep their whole
// log. It returns the rows deleted, in one write transaction: the writer
// holds the lock only for limit rows.
//
// CROSS JOIN makes SQLite walk the snapshots and range-scan each room's log
// up to the bound, instead of scanning the whole log.
func (db *DB) PruneCommands(ctx context.Context, keepVersions int64, before time.Time, limit int) (int, error) {
	if limit <= 0 {
		return 0, nil
	}
	n, err := db.Exec(ctx, pruneCommandsQuery, max(keepVersions, 0), before.UnixMilli(), limit)
	if err != nil {
		return 0, fmt.Errorf("prune commands: %w", err)
	}
	return n, nil
}

const pruneCommandsQuery = `DELETE FROM room_command_log WHERE rowid IN (
	SELECT l.rowid FROM room_snapshots s
	CROSS JOIN room_command_log l ON l.room_id = s.room_id AND l.room_version <= s.room_version - ?
	WHERE l.created_at < ?
	LIMIT ?)`

// PruneOutbox deletes up to limit published rows published before before,
// oldest id first, and returns the rows deleted. Pending and dead rows are
// never deleted.
func (db *DB) PruneOutbox(ctx context.Context, before time.Time, limit int) (int, error) {
	if limit <= 0 {
		return 0, nil
	}
	n, err := db.Exec(ctx, `DELETE FROM room_outbox WHERE id IN (
		SELECT id FROM room_outbox WHERE status = 'published' AND published_at < ? ORDER BY id LIMIT ?)`,
		before.UnixMilli(), limit)
	if err != nil {
		return 0, fmt.Errorf("prune outbox: %w", err)
	}
	return n, nil
}
