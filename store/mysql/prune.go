package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"time"

	"hyapp/room-service/store/sqlstore"
)

// pruneChunk caps the keys one prune statement selects and deletes, so each
// DELETE is a short transaction that locks few rows.
const pruneChunk = 500

// pruneBoundsQuery finds, for each room with log rows to delete, the
// highest version that may go (hi: keepVersions below its snapshot and
// below its first row written at or after the cut) and its oldest row (lo).
// It is a plain read (no locks). It walks the snapshots and skips at once
// every room whose oldest log row is already within keepVersions of its
// snapshot (the subquery reads one index entry: FORCE INDEX keeps the
// optimiser from computing the minimum by scanning the room's command_id
// index). For the others it reads the room's log from its oldest row up to
// its first young one, and no further than keepVersions below its snapshot
// (past it no row may go, whatever its age): the rows to delete and one
// more. The search stops at the first row that is young or past that
// bound (either makes the same hi): written as a bound on the version,
// MariaDB searched by room_id alone and read the room's log to its end. Without the first bound a busy room's log, young as it is, was read
// whole on every pass; without the second, a room that went quiet had
// every row kept below its snapshot read on each pass that found it due.
const pruneBoundsQuery = `SELECT s.room_id,
		(SELECT m.room_version FROM room_command_log m FORCE INDEX (PRIMARY)
			WHERE m.room_id = s.room_id ORDER BY m.room_version LIMIT 1) AS lo,
		LEAST(s.room_version - ?, COALESCE(
			(SELECT y.room_version FROM room_command_log y FORCE INDEX (PRIMARY)
				WHERE y.room_id = s.room_id AND (y.created_at >= ? OR y.room_version > s.room_version - ?) ORDER BY y.room_version LIMIT 1),
			s.room_version + 1) - 1) AS hi
	FROM room_snapshots s
	WHERE s.room_version - ? >= (SELECT m.room_version FROM room_command_log m FORCE INDEX (PRIMARY)
			WHERE m.room_id = s.room_id ORDER BY m.room_version LIMIT 1)
	HAVING hi >= lo`

// PruneCommands deletes up to limit command log rows at least keepVersions
// versions below their room's stored snapshot (a negative keepVersions is
// 0) and written before before; rooms without a snapshot keep their whole
// log. A log whose times go back (clocks of two nodes) keeps its rows after
// its first young one until that one is old too. Each room's rows go by
// range, pruneChunk rows a statement, each a short transaction. It returns
// the rows deleted; the rows of a failed call's earlier statements stay
// deleted.
func (db *DB) PruneCommands(ctx context.Context, keepVersions int64, before time.Time, limit int) (int, error) {
	if limit <= 0 {
		return 0, nil
	}
	keepVersions = max(keepVersions, 0)
	type bound struct {
		room   string
		lo, hi int64
	}
	rows, err := db.selectPruneBounds.QueryContext(ctx, keepVersions, before.UnixMilli(), keepVersions, keepVersions)
	bounds, err := sqlstore.ScanAll(rows, err, func(rows *sql.Rows) (bound, error) {
		var b bound
		err := rows.Scan(&b.room, &b.lo, &b.hi)
		return b, err
	})
	if err != nil {
		return 0, fmt.Errorf("prune commands: %w", mapErr(err))
	}
	// Every row of a room up to hi may go: below its snapshot, which only
	// moves up, and written before the cut.
	deleted := 0
	for _, b := range bounds {
		for due := b.hi - b.lo + 1; due > 0 && deleted < limit; {
			chunk := int(min(due, int64(min(limit-deleted, pruneChunk))))
			n, err := db.Exec(ctx, `DELETE FROM room_command_log WHERE room_id = ? AND room_version <= ?
				ORDER BY room_version LIMIT ?`, b.room, b.hi, chunk)
			deleted += n
			if err != nil {
				return deleted, fmt.Errorf("prune commands: %w", err)
			}
			if n < chunk {
				break
			}
			due -= int64(n)
		}
	}
	return deleted, nil
}

// outboxBoundQuery finds the first outbox row written at or after a time,
// reading the table from its oldest row: a row written then was not
// published before it, so pruning stops there. It costs the rows to delete
// and one more; without it, a table of young published rows was read whole
// (each row through the index and then the table, for published_at) on every
// retention pass.
const outboxBoundQuery = `SELECT id FROM room_outbox WHERE created_at >= ? ORDER BY id LIMIT 1`

// pruneOutboxQuery selects the ids of up to a limit of published rows below
// an id, published before a time, oldest first, through room_outbox_pending.
const pruneOutboxQuery = `SELECT id FROM room_outbox
	WHERE status = 'published' AND id < ? AND published_at < ? ORDER BY id LIMIT ?`

// PruneOutbox deletes up to limit published rows published before before,
// oldest id first, in chunks deleted by id in short transactions. Pending
// and dead rows are never deleted, and neither is a row after the first one
// written at or after before (a row written earlier than one before it, by
// two nodes' clocks, waits for that one). It returns the rows deleted.
func (db *DB) PruneOutbox(ctx context.Context, before time.Time, limit int) (int, error) {
	if limit <= 0 {
		return 0, nil
	}
	bound := int64(math.MaxInt64)
	if err := db.selectOutboxBound.QueryRowContext(ctx, before.UnixMilli()).Scan(&bound); err != nil && !errors.Is(err, sql.ErrNoRows) {
		return 0, fmt.Errorf("prune outbox: %w", mapErr(err))
	}
	deleted := 0
	for deleted < limit {
		chunk := min(limit-deleted, pruneChunk)
		ids, err := sqlstore.ScanIDs(db.selectPruneOut.QueryContext(ctx, bound, before.UnixMilli(), chunk))
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
