package mysql

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
//
// An UPDATE of a room without commands, else an INSERT; an INSERT that finds
// the room inserted meanwhile tries the UPDATE once more.
func (db *DB) SaveRoomMeta(ctx context.Context, meta store.RoomMeta) error {
	for range 2 {
		now := time.Now().UnixMilli()
		res, err := db.updateMeta.ExecContext(ctx, meta.OwnerUserID, meta.HostUserID, meta.SeatCount, meta.Mode, meta.Status, now, meta.RoomID)
		if err != nil {
			return fmt.Errorf("save room meta room=%s: %w", meta.RoomID, mapErr(err))
		}
		if n, err := res.RowsAffected(); err != nil {
			return fmt.Errorf("save room meta room=%s: %w", meta.RoomID, mapErr(err))
		} else if n > 0 {
			return nil
		}
		_, err = db.insertMeta.ExecContext(ctx, meta.RoomID, meta.OwnerUserID, meta.HostUserID, meta.SeatCount, meta.Mode, meta.Status, now, now)
		if err = mapErr(err); !errors.Is(err, store.ErrConflict) {
			if err != nil {
				return fmt.Errorf("save room meta room=%s: %w", meta.RoomID, err)
			}
			return nil
		}
	}
	return fmt.Errorf("save room meta room=%s: room has commands: %w", meta.RoomID, store.ErrConflict)
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
// transaction: the UPDATE locks the row, so what is read back is this
// claim's. An unknown room is store.ErrNotFound.
func (db *DB) ClaimRoom(ctx context.Context, roomID string, nodeID string) (store.Claim, error) {
	var c store.Claim
	err := db.inTx(ctx, func(tx *sql.Tx) error {
		c = store.Claim{Meta: store.RoomMeta{RoomID: roomID}}
		if err := updateOne(ctx, tx.StmtContext(ctx, db.claim), nodeID, time.Now().UnixMilli(), roomID); err != nil {
			return err
		}
		err := tx.StmtContext(ctx, db.readClaim).QueryRowContext(ctx, roomID).Scan(
			&c.Epoch, &c.HeadVersion, &c.Meta.OwnerUserID, &c.Meta.HostUserID, &c.Meta.SeatCount, &c.Meta.Mode, &c.Meta.Status)
		return mapErr(err)
	})
	if err != nil {
		return store.Claim{}, fmt.Errorf("claim room=%s node=%s: %w", roomID, nodeID, err)
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
