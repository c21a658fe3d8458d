package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"time"

	"hyapp/room-service/store/sqlstore"
)

// PruneCommands deletes up to limit command log rows at least keepVersions
// versions below their room's stored snapshot (a negative keepVersions is
// 0) and written before before; rooms without a snapshot keep their whole
// log. It returns the rows deleted.
//
// The rooms with rows to delete, and each one's bound, are read first off
// the write lock, from the read pool (pruneBoundsQuery): that read visits
// every stored snapshot and searches each room's log, 155 ms a pass for
// 100,000 rooms, which held every commit once a minute while it ran in
// the write transaction. The bound cannot move down meanwhile: a snapshot
// only moves up, and the rows below it are never written again. The rows
// go in write transactions of at most pruneRooms rooms, each reading the
// rows it deletes and no more (pruneRoomsQuery).
//
// A room's bound is keepVersions below its snapshot, and below its first
// row written at or after before, found by reading the room's log from its
// start up to the first bound: it costs the rows to delete and one more.
// Without the second bound a busy room's log, young as it is, was read
// whole on every pass: with a room of 1.2 million commands that held every
// commit for 0.3-0.75 s once a minute. Without the first bound on that
// search, the rows kept below the snapshot of every room that went quiet
// before the cut were read on every pass (none of them is young): 70 ms a
// pass for 200 rooms of 2,000 commands. A log whose times go back (clocks
// of two nodes) keeps its rows after the first young one until that one is
// old too.
func (db *DB) PruneCommands(ctx context.Context, keepVersions int64, before time.Time, limit int) (int, error) {
	if limit <= 0 {
		return 0, nil
	}
	cut := before.UnixMilli()
	// Each room read has a row to delete: limit rooms are enough.
	rows, err := db.Reader().QueryContext(ctx, pruneBoundsQuery, max(keepVersions, 0), cut, limit)
	bounds, err := sqlstore.ScanAll(rows, err, func(rows *sql.Rows) ([]any, error) {
		var room string
		var hi int64
		err := rows.Scan(&room, &hi)
		return []any{room, hi}, err
	})
	if err != nil {
		return 0, fmt.Errorf("prune commands: %w", mapErr(err))
	}
	deleted := 0
	for chunk := range slices.Chunk(bounds, pruneRooms) {
		if deleted == limit {
			break
		}
		args := make([]any, 0, 2*len(chunk)+2)
		for _, b := range chunk {
			args = append(args, b...)
		}
		n, err := db.Exec(ctx, pruneRoomsQuery(len(chunk)), append(args, cut, limit-deleted)...)
		deleted += n
		if err != nil {
			return deleted, fmt.Errorf("prune commands: %w", err)
		}
	}
	return deleted, nil
}

// pruneRooms caps the rooms of one delete statement (two variables each).
const pruneRooms = 500

// pruneBoundsQuery selects, for up to ?3 rooms with rows to delete, the
// room and its bound, hi: keepVersions (?1) below its snapshot and below
// its first row written at or after the cut (?2). A room whose oldest row
// is above its bound has nothing to delete (a search of one index entry).
// The bounds are made once per room (MATERIALIZED).
const pruneBoundsQuery = `WITH b AS MATERIALIZED (
		SELECT s.room_id AS room_id, min(s.room_version - ?1, coalesce((SELECT y.room_version FROM room_command_log y
			WHERE y.room_id = s.room_id AND y.room_version <= s.room_version - ?1 AND y.created_at >= ?2
			ORDER BY y.room_version LIMIT 1), s.room_version + 1) - 1) AS hi
		FROM room_snapshots s)
	SELECT b.room_id, b.hi FROM b
	WHERE b.hi >= (SELECT m.room_version FROM room_command_log m WHERE m.room_id = b.room_id ORDER BY m.room_version LIMIT 1)
	LIMIT ?3`

// pruneRoomsQuery deletes up to a limit (its last variable) of the rows
// of rooms rooms, each given as its id and its bound, up to its bound and
// written before the cut (the one before last): a range of each room's
// log, the rows it deletes. Every row up to a bound was written before the
// cut; the check keeps any row that was not.
func pruneRoomsQuery(rooms int) string {
	return `DELETE FROM room_command_log WHERE rowid IN (
	WITH b(room_id, hi) AS (VALUES ` + sqlstore.Values(`(?, ?)`, rooms) + `)
	SELECT l.rowid FROM b CROSS JOIN room_command_log l ON l.room_id = b.room_id AND l.room_version <= b.hi
	WHERE l.created_at < ?
	LIMIT ?)`
}

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
