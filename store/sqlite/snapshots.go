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

// SaveSnapshot stores the snapshot unless the room's stored snapshot has the
// same or a higher version; an older snapshot is ignored without error.
func (db *DB) SaveSnapshot(ctx context.Context, snapshot store.SnapshotRecord) error {
	if _, err := db.upsertSnapshot.ExecContext(ctx, snapshot.RoomID, snapshot.RoomVersion, snapshot.Payload,
		sqlrow.Millis(snapshot.CreatedAt, time.Now().UnixMilli())); err != nil {
		return fmt.Errorf("save snapshot room=%s version=%d: %w", snapshot.RoomID, snapshot.RoomVersion, mapErr(err))
	}
	return nil
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
