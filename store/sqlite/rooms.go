package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"hyapp/room-service/store"
	"hyapp/room-service/store/internal/sqlrow"
)

// SaveRoomMeta inserts the room, or replaces the metadata of a room that has
// no command yet (its owner epoch is kept). A room with commands is
// store.ErrConflict.
func (db *DB) SaveRoomMeta(ctx context.Context, meta store.RoomMeta) error {
	now := time.Now().UnixMilli()
	res, err := db.write.ExecContext(ctx, `INSERT INTO rooms
		(room_id, owner_user_id, host_user_id, seat_count, mode, status, created_at, updated_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (room_id) DO UPDATE SET
			owner_user_id = excluded.owner_user_id,
			host_user_id = excluded.host_user_id,
			seat_count = excluded.seat_count,
			mode = excluded.mode,
			status = excluded.status,
			updated_at = excluded.updated_at
		WHERE rooms.room_version = 0`,
		meta.RoomID, meta.OwnerUserID, meta.HostUserID, meta.SeatCount, meta.Mode, meta.Status, now, now)
	if err != nil {
		return fmt.Errorf("save room meta room=%s: %w", meta.RoomID, mapErr(err))
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("save room meta room=%s: %w", meta.RoomID, mapErr(err))
	}
	if n == 0 {
		return fmt.Errorf("save room meta room=%s: room has commands: %w", meta.RoomID, store.ErrConflict)
	}
	return nil
}

// GetRoomMeta reads a room's metadata; found is false when there is no such room.
func (db *DB) GetRoomMeta(ctx context.Context, roomID string) (store.RoomMeta, bool, error) {
	meta := store.RoomMeta{RoomID: roomID}
	err := db.getMeta.QueryRowContext(ctx, roomID).Scan(
		&meta.OwnerUserID, &meta.HostUserID, &meta.SeatCount, &meta.Mode, &meta.Status)
	if errors.Is(err, sql.ErrNoRows) {
		return store.RoomMeta{}, false, nil
	}
	if err != nil {
		return store.RoomMeta{}, false, fmt.Errorf("get room meta room=%s: %w", roomID, mapErr(err))
	}
	return meta, true, nil
}

// ClaimRoom increments the room's owner epoch, records nodeID as its owner
// and returns the new epoch, the durable head and the metadata, all from one
// write transaction. An unknown room is store.ErrNotFound.
func (db *DB) ClaimRoom(ctx context.Context, roomID string, nodeID string) (store.Claim, error) {
	c, err := db.claimRoom(ctx, roomID, nodeID)
	if err != nil {
		return store.Claim{}, fmt.Errorf("claim room=%s node=%s: %w", roomID, nodeID, err)
	}
	return c, nil
}

func (db *DB) claimRoom(ctx context.Context, roomID string, nodeID string) (store.Claim, error) {
	// An explicit transaction, so a failed commit surfaces from Commit rather
	// than from closing the RETURNING rows.
	tx, err := db.write.BeginTx(ctx, nil)
	if err != nil {
		return store.Claim{}, mapErr(err)
	}
	defer func() { _ = tx.Rollback() }()
	c := store.Claim{Meta: store.RoomMeta{RoomID: roomID}}
	err = tx.QueryRowContext(ctx, `UPDATE rooms
		SET owner_epoch = owner_epoch + 1, owner_node = ?, updated_at = ?
		WHERE room_id = ?
		RETURNING owner_epoch, room_version, owner_user_id, host_user_id, seat_count, mode, status`,
		nodeID, time.Now().UnixMilli(), roomID,
	).Scan(&c.Epoch, &c.HeadVersion, &c.Meta.OwnerUserID, &c.Meta.HostUserID, &c.Meta.SeatCount, &c.Meta.Mode, &c.Meta.Status)
	if errors.Is(err, sql.ErrNoRows) {
		return store.Claim{}, store.ErrNotFound
	}
	if err != nil {
		return store.Claim{}, mapErr(err)
	}
	if err := tx.Commit(); err != nil {
		return store.Claim{}, mapErr(err)
	}
	return c, nil
}

// ListRooms lists up to limit rooms with ids greater than afterRoomID, in id
// (byte) order. A limit of zero or less lists nothing.
func (db *DB) ListRooms(ctx context.Context, afterRoomID string, limit int) ([]store.RoomInfo, error) {
	if limit <= 0 {
		return nil, nil
	}
	rows, err := db.listRoomsStmt.QueryContext(ctx, afterRoomID, limit)
	if err != nil {
		return nil, fmt.Errorf("list rooms after=%s: %w", afterRoomID, mapErr(err))
	}
	defer rows.Close()
	var out []store.RoomInfo
	for rows.Next() {
		var r store.RoomInfo
		var updated sql.NullInt64
		if err := rows.Scan(&r.Meta.RoomID, &r.Meta.OwnerUserID, &r.Meta.HostUserID, &r.Meta.SeatCount,
			&r.Meta.Mode, &r.Meta.Status, &r.HeadVersion, &r.OwnerEpoch, &r.OwnerNode, &updated); err != nil {
			return nil, fmt.Errorf("list rooms after=%s: %w", afterRoomID, mapErr(err))
		}
		r.UpdatedAt = sqlrow.FromMillis(updated)
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list rooms after=%s: %w", afterRoomID, mapErr(err))
	}
	return out, nil
}
