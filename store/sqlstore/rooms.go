package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"hyapp/room-service/store"
)

// SaveRoomMeta inserts the room, or replaces the metadata of a room that has
// no command yet (its owner epoch is kept). A room with commands is
// store.ErrConflict.
//
// An UPDATE of a room without commands, else an INSERT; an INSERT that finds
// the room inserted meanwhile tries the UPDATE once more. (No upsert: its
// condition on room_version has no MySQL spelling.)
func (db *DB) SaveRoomMeta(ctx context.Context, meta store.RoomMeta) error {
	for range 2 {
		now := time.Now().UnixMilli()
		if err := db.updateOne(ctx, db.stmts.updateMeta, meta.OwnerUserID, meta.HostUserID, meta.SeatCount, meta.Mode, meta.Status, now, meta.RoomID); !errors.Is(err, store.ErrNotFound) {
			if err != nil {
				return fmt.Errorf("save room meta room=%s: %w", meta.RoomID, err)
			}
			return nil
		}
		_, err := db.stmts.insertMeta.ExecContext(ctx, meta.RoomID, meta.OwnerUserID, meta.HostUserID, meta.SeatCount, meta.Mode, meta.Status, now, now)
		if err = db.d.MapErr(err); !errors.Is(err, store.ErrConflict) {
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
	err := db.stmts.getMeta.QueryRowContext(ctx, roomID).Scan(
		&meta.OwnerUserID, &meta.HostUserID, &meta.SeatCount, &meta.Mode, &meta.Status)
	if errors.Is(err, sql.ErrNoRows) {
		return store.RoomMeta{}, false, nil
	}
	if err != nil {
		return store.RoomMeta{}, false, fmt.Errorf("get room meta room=%s: %w", roomID, db.d.MapErr(err))
	}
	return meta, true, nil
}

// RoomOwnerEpoch reads the room's owner epoch.
func (db *DB) RoomOwnerEpoch(ctx context.Context, roomID string) (int64, bool, error) {
	var epoch int64
	err := db.stmts.ownerEpoch.QueryRowContext(ctx, roomID).Scan(&epoch)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("room owner epoch room=%s: %w", roomID, db.d.MapErr(err))
	}
	return epoch, true, nil
}

// ClaimRoom increments the room's owner epoch, records nodeID as its owner
// and returns the new epoch, the durable head and the metadata, all from one
// transaction: the UPDATE locks the row (or, on SQLite, the transaction
// holds the writer), so what is read back is this claim's. An unknown room
// is store.ErrNotFound.
func (db *DB) ClaimRoom(ctx context.Context, roomID string, nodeID string) (store.Claim, error) {
	var c store.Claim
	err := db.Tx(ctx, func(tx *sql.Tx) error {
		c = store.Claim{Meta: store.RoomMeta{RoomID: roomID}}
		var previous sql.NullString
		switch err := tx.StmtContext(ctx, db.stmts.previousOwner).QueryRowContext(ctx, roomID).Scan(&previous); {
		case errors.Is(err, sql.ErrNoRows):
			return store.ErrNotFound
		case err != nil:
			return db.d.MapErr(err)
		}
		c.PreviousNode = previous.String
		if err := db.updateOne(ctx, tx.StmtContext(ctx, db.stmts.claim), nodeID, time.Now().UnixMilli(), roomID); err != nil {
			return err
		}
		err := tx.StmtContext(ctx, db.stmts.readClaim).QueryRowContext(ctx, roomID).Scan(
			&c.Epoch, &c.HeadVersion, &c.Meta.OwnerUserID, &c.Meta.HostUserID, &c.Meta.SeatCount, &c.Meta.Mode, &c.Meta.Status)
		return db.d.MapErr(err)
	})
	if err != nil {
		return store.Claim{}, fmt.Errorf("claim room=%s node=%s: %w", roomID, nodeID, err)
	}
	return c, nil
}

// StopRooms implements store.Repository: one statement stores every
// snapshot, never backwards, as a commit stores them (one too large for a
// statement is left out, and its room is still released), and one
// statement per maxBulkRows rooms releases them, so the stops of many
// rooms take a few round trips on MySQL.
func (db *DB) StopRooms(ctx context.Context, stops []store.RoomStop) error {
	var snaps []*store.SnapshotRecord
	var released []any // room id and epoch of each release
	for i := range stops {
		if s := stops[i].Snapshot; s != nil && db.snapshotFits(s) {
			snaps = append(snaps, s)
		}
		if stops[i].Release {
			released = append(released, stops[i].RoomID, stops[i].Epoch)
		}
	}
	if len(snaps) == 0 && len(released) == 0 {
		return nil
	}
	now := time.Now().UnixMilli()
	err := db.Tx(ctx, func(tx *sql.Tx) error {
		err := db.stmts.mergedSnapshots.exec(ctx, tx, db.d.MapErr, len(snaps),
			func(i int) int { return len(snaps[i].RoomID) + len(snaps[i].Payload) + rowOverhead },
			func(dst []any, i int) []any { return snapshotArgs(dst, snaps[i], now) })
		if err != nil {
			return fmt.Errorf("snapshots: %w", err)
		}
		for pairs := range slices.Chunk(released, 2*maxBulkRows) {
			query := `UPDATE rooms SET owner_node = '' WHERE ` +
				strings.Repeat(`(room_id = ? AND owner_epoch = ?) OR `, len(pairs)/2-1) + `(room_id = ? AND owner_epoch = ?)`
			if _, err := tx.ExecContext(ctx, query, pairs...); err != nil {
				return fmt.Errorf("releases: %w", db.d.MapErr(err))
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("stop %d rooms: %w", len(stops), err)
	}
	return nil
}

// ListRooms lists up to limit rooms with ids greater than afterRoomID, in id
// (byte) order. A limit of zero or less lists nothing.
func (db *DB) ListRooms(ctx context.Context, afterRoomID string, limit int) ([]store.RoomInfo, error) {
	if limit <= 0 {
		return nil, nil
	}
	rows, err := db.stmts.listRooms.QueryContext(ctx, afterRoomID, limit)
	if err != nil {
		return nil, fmt.Errorf("list rooms after=%s: %w", afterRoomID, db.d.MapErr(err))
	}
	defer rows.Close()
	var out []store.RoomInfo
	for rows.Next() {
		var r store.RoomInfo
		var updated sql.NullInt64
		if err := rows.Scan(&r.Meta.RoomID, &r.Meta.OwnerUserID, &r.Meta.HostUserID, &r.Meta.SeatCount,
			&r.Meta.Mode, &r.Meta.Status, &r.HeadVersion, &r.OwnerEpoch, &r.OwnerNode, &updated); err != nil {
			return nil, fmt.Errorf("list rooms after=%s: %w", afterRoomID, db.d.MapErr(err))
		}
		r.UpdatedAt = fromMillis(updated)
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list rooms after=%s: %w", afterRoomID, db.d.MapErr(err))
	}
	return out, nil
}

// SaveSnapshot stores the snapshot unless the room's stored snapshot has the
// same or a higher version; an older snapshot is ignored without error.
func (db *DB) SaveSnapshot(ctx context.Context, snapshot store.SnapshotRecord) error {
	if err := db.saveSnapshot(ctx, db.stmts.updateSnapshot, db.stmts.insertSnapshot, &snapshot, time.Now().UnixMilli()); err != nil {
		return fmt.Errorf("save snapshot room=%s version=%d: %w", snapshot.RoomID, snapshot.RoomVersion, err)
	}
	return nil
}

// saveSnapshot is the never-backwards upsert, in a form both databases run
// alike: not MySQL's ON DUPLICATE KEY UPDATE (whose assignment order MySQL
// documents only for plain UPDATE, and whose VALUES() is deprecated while
// MariaDB lacks the row alias), not INSERT IGNORE (which turns every error,
// not only a duplicate key, into a warning). First an UPDATE that only a
// newer snapshot passes; when it matched nothing, an INSERT; when that
// finds a row stored meanwhile, the UPDATE once more decides. Snapshot rows
// are never deleted, so the second UPDATE is final. update and insert are
// db.stmts.updateSnapshot and insertSnapshot, or their transaction-bound
// copies.
func (db *DB) saveSnapshot(ctx context.Context, update, insert *sql.Stmt, s *store.SnapshotRecord, now int64) error {
	created := millis(s.CreatedAt, now)
	for attempt := 0; ; attempt++ {
		res, err := update.ExecContext(ctx, s.RoomVersion, s.Payload, created, s.RoomID, s.RoomVersion)
		if err != nil {
			return db.d.MapErr(err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return db.d.MapErr(err)
		}
		if n > 0 || attempt > 0 {
			return nil
		}
		_, err = insert.ExecContext(ctx, s.RoomID, s.RoomVersion, s.Payload, created)
		if err = db.d.MapErr(err); !errors.Is(err, store.ErrConflict) {
			return err // nil: inserted
		}
	}
}

// GetLatestSnapshot reads the room's snapshot; found is false when there is none.
func (db *DB) GetLatestSnapshot(ctx context.Context, roomID string) (store.SnapshotRecord, bool, error) {
	s := store.SnapshotRecord{RoomID: roomID}
	var created sql.NullInt64
	err := db.stmts.getSnapshot.QueryRowContext(ctx, roomID).Scan(&s.RoomVersion, &s.Payload, &created)
	if errors.Is(err, sql.ErrNoRows) {
		return store.SnapshotRecord{}, false, nil
	}
	if err != nil {
		return store.SnapshotRecord{}, false, fmt.Errorf("get snapshot room=%s: %w", roomID, db.d.MapErr(err))
	}
	s.CreatedAt = fromMillis(created)
	return s, true, nil
}
