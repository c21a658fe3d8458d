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

// SaveSnapshot stores the snapshot unless the room's stored snapshot has the
// same or a higher version; an older snapshot is ignored without error.
func (db *DB) SaveSnapshot(ctx context.Context, snapshot store.SnapshotRecord) error {
	if err := saveSnapshot(ctx, db.updateSnapshot, db.insertSnapshot, &snapshot, time.Now().UnixMilli()); err != nil {
		return fmt.Errorf("save snapshot room=%s version=%d: %w", snapshot.RoomID, snapshot.RoomVersion, err)
	}
	return nil
}

// saveSnapshot is the never-backwards upsert, without ON DUPLICATE KEY
// UPDATE (whose assignment order MySQL documents only for plain UPDATE, and
// whose VALUES() is deprecated while MariaDB lacks the row alias) and
// without INSERT IGNORE (which turns every error, not only a duplicate key,
// into a warning). First an UPDATE that only a newer snapshot passes; when
// it matched nothing, an INSERT; when that finds a row stored meanwhile, the
// UPDATE once more decides. Snapshot rows are never deleted, so the second
// UPDATE is final. update and insert are db.updateSnapshot and
// db.insertSnapshot, or their transaction-bound copies.
func saveSnapshot(ctx context.Context, update, insert *sql.Stmt, s *store.SnapshotRecord, now int64) error {
	created := sqlrow.Millis(s.CreatedAt, now)
	for attempt := 0; ; attempt++ {
		res, err := update.ExecContext(ctx, s.RoomVersion, s.Payload, created, s.RoomID, s.RoomVersion)
		if err != nil {
			return mapErr(err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return mapErr(err)
		}
		if n > 0 || attempt > 0 {
			return nil
		}
		_, err = insert.ExecContext(ctx, s.RoomID, s.RoomVersion, s.Payload, created)
		if err = mapErr(err); !errors.Is(err, store.ErrConflict) {
			return err // nil: inserted
		}
	}
}

// GetLatestSnapshot reads the room's snapshot; found is false when there is none.
func (db *DB) GetLatestSnapshot(ctx context.Context, roomID string) (store.SnapshotRecord, bool, error) {
	s := store.SnapshotRecord{RoomID: roomID}
	var created sql.NullInt64
	err := db.getSnapshot.QueryRowContext(ctx, roomID).Scan(&s.RoomVersion, &s.Payload, &created)
	if errors.Is(err, sql.ErrNoRows) {
		return store.SnapshotRecord{}, false, nil
	}
	if err != nil {
		return store.SnapshotRecord{}, false, fmt.Errorf("get snapshot room=%s: %w", roomID, mapErr(err))
	}
	s.CreatedAt = sqlrow.FromMillis(created)
	return s, true, nil
}
