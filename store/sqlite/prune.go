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
// Each room's log is range-scanned only up to its bound: keepVersions below
// its snapshot, and below its first row written at or after before (found
// by reading the room's log from its start up to the first bound, so it
// costs the rows to delete and one more). Without the second bound a busy
// room's log, young as it is, was read whole on every pass, under the write
// lock: with a room of 1.2 million commands that held every commit for
// 0.3-0.75 s once a minute. Without the first bound on that search, the
// rows kept below the snapshot of every room that went quiet before the cut
// were read on every pass (none of them is young): 70 ms a pass for 200
// rooms of 2,000 commands. A log whose times go back (clocks of two nodes)
// keeps its rows after the first young one until that one is old too. The
// bounds are made once per room (MATERIALIZED): folded into the scan, they
// were checked on every row.
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
	WITH b AS MATERIALIZED (
		SELECT s.room_id AS room_id, min(s.room_version - ?1, coalesce((SELECT y.room_version FROM room_command_log y
			WHERE y.room_id = s.room_id AND y.room_version <= s.room_version - ?1 AND y.created_at >= ?2
			ORDER BY y.room_version LIMIT 1), s.room_version + 1) - 1) AS hi
		FROM room_snapshots s)
	SELECT l.rowid FROM b CROSS JOIN room_command_log l ON l.room_id = b.room_id AND l.room_version <= b.hi
	WHERE l.created_at < ?2
	LIMIT ?3)`

// PruneOutbox deletes up to limit published rows published before before,
// oldest id first, and returns the rows deleted. Pending and dead rows are
// never deleted.
//
// The scan in id order stops at the first row written at or after before
// (found by reading from the oldest row, so it costs the rows to delete and
// one more): a row written then was not published before it. Without that
// bound a table of young rows was read whole on every retention pass, under
// the write lock. A row written earlier than one before it (two nodes'
// clocks) waits for that one.
func (db *DB) PruneOutbox(ctx context.Context, before time.Time, limit int) (int, error) {
	if limit <= 0 {
		return 0, nil
	}
	n, err := db.Exec(ctx, pruneOutboxQuery, before.UnixMilli(), limit)
	if err != nil {
		return 0, fmt.Errorf("prune outbox: %w", err)
	}
	return n, nil
}

const pruneOutboxQuery = `DELETE FROM room_outbox WHERE id IN (
	SELECT id FROM room_outbox
	WHERE id < coalesce((SELECT y.id FROM room_outbox y WHERE y.created_at >= ?1 ORDER BY y.id LIMIT 1), 9223372036854775807)
		AND status = 'published' AND published_at < ?1
	ORDER BY id LIMIT ?2)`
