package mysql

import (
	"context"
	"fmt"
	"time"

	"hyapp/room-service/store/sqlstore"
)

// pruneChunk caps the keys one prune statement selects and deletes, so each
// DELETE is a short transaction that locks few rows.
const pruneChunk = 500

// pruneCommandsQuery selects the keys of log rows no recovery needs. It is a
// plain read (no locks). It walks the snapshots, skips at once every room
// whose oldest log row is already within keepVersions of its snapshot (the
// subquery reads one index entry: FORCE INDEX keeps the optimiser from
// computing the minimum by scanning the room's command_id index), and scans
// the logs of the other rooms in version order. MySQL cannot LIMIT a
// multi-table DELETE, so the keys are deleted by a second statement.
const pruneCommandsQuery = `SELECT l.room_id, l.room_version
	FROM room_snapshots s
	STRAIGHT_JOIN room_command_log l ON l.room_id = s.room_id
	WHERE s.room_version - ? >= (
			SELECT m.room_version FROM room_command_log m FORCE INDEX (PRIMARY)
			WHERE m.room_id = s.room_id ORDER BY m.room_version LIMIT 1)
		AND l.room_version <= s.room_version - ?
		AND l.created_at < ?
	LIMIT ?`

// PruneCommands deletes up to limit command log rows at least keepVersions
// versions below their room's stored snapshot (a negative keepVersions is
// 0) and written before before; rooms without a snapshot keep their whole
// log. It selects the keys in chunks and deletes each chunk by key in a
// short transaction. It returns the rows deleted; the rows of a failed
// call's earlier chunks stay deleted.
func (db *DB) PruneCommands(ctx context.Context, keepVersions int64, before time.Time, limit int) (int, error) {
	keepVersions = max(keepVersions, 0)
	deleted := 0
	for deleted < limit {
		chunk := min(limit-deleted, pruneChunk)
		var keys []any
		rows, err := db.selectPruneCmds.QueryContext(ctx, keepVersions, keepVersions, before.UnixMilli(), chunk)
		if err == nil {
			for rows.Next() {
				var room string
				var version int64
				if err = rows.Scan(&room, &version); err != nil {
					break
				}
				keys = append(keys, room, version)
			}
			if cerr := rows.Close(); err == nil {
				err = cerr
			}
			if err == nil {
				err = rows.Err()
			}
		}
		if err != nil {
			return deleted, fmt.Errorf("prune commands: %w", mapErr(err))
		}
		n, err := db.deleteKeys(ctx, `DELETE FROM room_command_log WHERE (room_id, room_version) IN (`, `(?, ?)`, keys, 2)
		deleted += n
		if err != nil {
			return deleted, fmt.Errorf("prune commands: %w", err)
		}
		if len(keys)/2 < chunk {
			break
		}
	}
	return deleted, nil
}

// pruneOutboxQuery selects the ids of up to a limit of published rows
// published before a time, oldest first, through room_outbox_pending.
const pruneOutboxQuery = `SELECT id FROM room_outbox
	WHERE status = 'published' AND published_at < ? ORDER BY id LIMIT ?`

// PruneOutbox deletes up to limit published rows published before before,
// oldest id first, in chunks deleted by id in short transactions. Pending
// and dead rows are never deleted. It returns the rows deleted.
func (db *DB) PruneOutbox(ctx context.Context, before time.Time, limit int) (int, error) {
	deleted := 0
	for deleted < limit {
		chunk := min(limit-deleted, pruneChunk)
		ids, err := sqlstore.ScanIDs(db.selectPruneOut.QueryContext(ctx, before.UnixMilli(), chunk))
		if err != nil {
			return deleted, fmt.Errorf("prune outbox: %w", mapErr(err))
		}
		// The status check keeps a row that is somehow no longer published.
		n, err := db.deleteKeys(ctx, `DELETE FROM room_outbox WHERE status = 'published' AND id IN (`, `?`, ids, 1)
		deleted += n
		if err != nil {
			return deleted, fmt.Errorf("prune outbox: %w", err)
		}
		if len(ids) < chunk {
			break
		}
	}
	return deleted, nil
}

// deleteKeys runs prefix + one key placeholder per key + ")" with args
// holding width values a key, in a transaction (so a deadlock is retried),
// and returns the rows deleted.
func (db *DB) deleteKeys(ctx context.Context, prefix, key string, args []any, width int) (int, error) {
	if len(args) == 0 {
		return 0, nil
	}
	return db.Exec(ctx, prefix+sqlstore.Values(key, len(args)/width)+`)`, args...)
}
