package sqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"slices"

	"hyapp/room-service/store"
)

// directoryColumns are room_directory's columns in DirectoryRow order.
const directoryColumns = `room_id, owner_epoch, room_version, owner_node, status, owner_user_id, host_user_id,
	seat_count, mode, region, title, cover_url, online_count, seats_taken, heat, created_at, last_active_at`

// maxDirectoryRows caps the rows of one directory upsert (17 values a row).
const maxDirectoryRows = 200

// directoryOrderColumn is the column each order sorts by.
var directoryOrderColumn = map[store.DirectoryOrder]string{
	store.OrderHeat:   "heat",
	store.OrderOnline: "online_count",
	store.OrderNewest: "created_at",
}

// directoryFresh is true when the incoming row (excluded, or VALUES() on
// MySQL) is as new as the stored one: a later owner epoch, or the same
// epoch and the same or a later version.
func (d *Dialect) directoryFresh() string {
	in := func(c string) string {
		if d.UpsertDuplicateKey {
			return "VALUES(" + c + ")"
		}
		return "excluded." + c
	}
	return `(` + in("owner_epoch") + ` > room_directory.owner_epoch OR (` + in("owner_epoch") + ` = room_directory.owner_epoch AND ` +
		in("room_version") + ` >= room_directory.room_version))`
}

// directoryUpsert is the tail of the INSERT that writes directory rows: it
// replaces a stored row only when the incoming one is fresh (see
// store.DirectoryRow). MySQL assigns left to right and each assignment sees
// the ones before it, so every column is assigned under the test first and
// the fence columns last (room_version, then owner_epoch, whose test then
// sees the version it was just given).
func (d *Dialect) directoryUpsert() string {
	fresh := d.directoryFresh()
	cols := []string{"owner_node", "status", "owner_user_id", "host_user_id", "seat_count", "mode", "region",
		"title", "cover_url", "online_count", "seats_taken", "heat", "created_at", "last_active_at", "room_version", "owner_epoch"}
	if !d.UpsertDuplicateKey {
		return d.Upsert("room_id", cols...) + ` WHERE ` + fresh
	}
	q := ` ON DUPLICATE KEY UPDATE `
	for i, c := range cols {
		if i > 0 {
			q += ", "
		}
		q += c + ` = IF(` + fresh + `, VALUES(` + c + `), ` + c + `)`
	}
	return q
}

// UpsertDirectory writes directory rows in one transaction: each replaces
// the room's row unless the stored one is newer (a later owner epoch, or
// the same epoch and a later version), which stays. Rows are written in
// room id order, so concurrent writers lock rows in one order.
func (db *DB) UpsertDirectory(ctx context.Context, rows []store.DirectoryRow) error {
	if len(rows) == 0 {
		return nil
	}
	rows = slices.Clone(rows)
	slices.SortFunc(rows, func(a, b store.DirectoryRow) int {
		switch {
		case a.RoomID < b.RoomID:
			return -1
		case a.RoomID > b.RoomID:
			return 1
		}
		return 0
	})
	if err := db.writeDirectory(ctx, rows, db.d.directoryUpsert()); err != nil {
		return fmt.Errorf("upsert directory rows=%d: %w", len(rows), err)
	}
	return nil
}

// writeDirectory inserts rows with tail (what a row that exists becomes)
// in one transaction.
func (db *DB) writeDirectory(ctx context.Context, rows []store.DirectoryRow, tail string) error {
	return db.Tx(ctx, func(tx *sql.Tx) error {
		for chunk := range slices.Chunk(rows, maxDirectoryRows) {
			args := make([]any, 0, 17*len(chunk))
			for i := range chunk {
				r := &chunk[i]
				args = append(args, r.RoomID, r.OwnerEpoch, r.RoomVersion, r.OwnerNode, r.Status, r.OwnerUserID, r.HostUserID,
					r.SeatCount, r.Mode, r.Region, r.Title, r.CoverURL, r.OnlineCount, r.SeatsTaken, r.Heat, r.CreatedAt, r.LastActiveAt)
			}
			q := `INSERT INTO room_directory (` + directoryColumns + `) VALUES ` +
				Values(`(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`, len(chunk)) + tail
			if _, err := tx.ExecContext(ctx, q, args...); err != nil {
				return db.d.MapErr(err)
			}
		}
		return nil
	})
}

// DirectoryListing returns the statement that lists q and its arguments;
// ok is false for an unknown order. Status is always a condition, so every
// order reads the index led by status (or by status and region) backwards
// from the cursor, without a sort.
func (d *Dialect) DirectoryListing(q store.DirectoryQuery) (query string, args []any, ok bool) {
	col, ok := directoryOrderColumn[q.Order]
	if !ok {
		return "", nil, false
	}
	where := `status = ?`
	args = []any{q.Status}
	index := "room_directory_" + string(q.Order)
	if q.Region != "" {
		where += ` AND region = ?`
		args = append(args, q.Region)
		index = "room_directory_region_" + string(q.Order)
	}
	if q.Mode != "" {
		where += ` AND mode = ?`
		args = append(args, q.Mode)
	}
	if q.After != nil {
		where += ` AND (` + col + ` < ? OR (` + col + ` = ? AND room_id < ?))`
		args = append(args, q.After.Value, q.After.Value, q.After.RoomID)
	}
	args = append(args, q.Limit)
	return `SELECT ` + directoryColumns + ` FROM room_directory` + d.ForceIndex(index) + ` WHERE ` + where +
		` ORDER BY ` + col + ` DESC, room_id DESC LIMIT ?`, args, true
}

// ListDirectory lists directory rows of q.Status (and q.Region and q.Mode
// when set) in q.Order, highest first and ties by room id, highest first,
// after q.After, at most q.Limit, in one statement: one consistent read.
// An unknown order lists nothing.
func (db *DB) ListDirectory(ctx context.Context, q store.DirectoryQuery) ([]store.DirectoryRow, error) {
	query, args, ok := db.d.DirectoryListing(q)
	if !ok || q.Limit <= 0 {
		return nil, nil
	}
	rows, err := db.read.QueryContext(ctx, query, args...)
	var out []store.DirectoryRow
	if err == nil {
		out, err = scanDirectory(rows)
	}
	if err != nil {
		return nil, fmt.Errorf("list directory order=%s: %w", q.Order, db.d.MapErr(err))
	}
	return out, nil
}

// GetDirectory reads the directory rows of the rooms among roomIDs, keyed by room id.
func (db *DB) GetDirectory(ctx context.Context, roomIDs []string) (map[string]store.DirectoryRow, error) {
	out := make(map[string]store.DirectoryRow, len(roomIDs))
	for chunk := range slices.Chunk(roomIDs, maxIn) {
		rows, err := db.read.QueryContext(ctx, `SELECT `+directoryColumns+` FROM room_directory WHERE room_id IN `+In(len(chunk)),
			AppendStrings(nil, chunk)...)
		var got []store.DirectoryRow
		if err == nil {
			got, err = scanDirectory(rows)
		}
		if err != nil {
			return nil, fmt.Errorf("get directory rooms=%d: %w", len(roomIDs), db.d.MapErr(err))
		}
		for _, r := range got {
			out[r.RoomID] = r
		}
	}
	return out, nil
}

// MissingDirectory returns up to limit ids of rooms with a CreateRoom
// committed (a head above 0) and no directory row, after afterRoomID in id order.
func (db *DB) MissingDirectory(ctx context.Context, afterRoomID string, limit int) ([]string, error) {
	rows, err := db.read.QueryContext(ctx, `SELECT r.room_id FROM rooms r
		LEFT JOIN room_directory d ON d.room_id = r.room_id
		WHERE r.room_id > ? AND r.room_version > 0 AND d.room_id IS NULL ORDER BY r.room_id LIMIT ?`, afterRoomID, limit)
	var out []string
	if err == nil {
		out, err = scanAll(rows, func(rows *sql.Rows) (string, error) {
			var id string
			err := rows.Scan(&id)
			return id, err
		})
	}
	if err != nil {
		return nil, fmt.Errorf("rooms missing from the directory after=%q: %w", afterRoomID, db.d.MapErr(err))
	}
	return out, nil
}

// InsertDirectoryIfMissing writes rows of rooms that have none; a room that
// has a row keeps it, whatever its version.
func (db *DB) InsertDirectoryIfMissing(ctx context.Context, rows []store.DirectoryRow) error {
	keep := " ON CONFLICT (room_id) DO NOTHING"
	if db.d.UpsertDuplicateKey {
		keep = " ON DUPLICATE KEY UPDATE room_id = room_id"
	}
	if err := db.writeDirectory(ctx, rows, keep); err != nil {
		return fmt.Errorf("insert missing directory rows=%d: %w", len(rows), err)
	}
	return nil
}

func scanDirectory(rows *sql.Rows) ([]store.DirectoryRow, error) {
	return scanAll(rows, func(rows *sql.Rows) (store.DirectoryRow, error) {
		var r store.DirectoryRow
		err := rows.Scan(&r.RoomID, &r.OwnerEpoch, &r.RoomVersion, &r.OwnerNode, &r.Status, &r.OwnerUserID, &r.HostUserID,
			&r.SeatCount, &r.Mode, &r.Region, &r.Title, &r.CoverURL, &r.OnlineCount, &r.SeatsTaken, &r.Heat, &r.CreatedAt, &r.LastActiveAt)
		return r, err
	})
}

// scanAll reads every row with scan and closes rows. Errors are the driver's, unmapped.
func scanAll[T any](rows *sql.Rows, scan func(*sql.Rows) (T, error)) ([]T, error) {
	defer rows.Close()
	var out []T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}
