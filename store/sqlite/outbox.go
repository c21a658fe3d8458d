package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"hyapp/room-service/outbox"
	"hyapp/room-service/store"
)

const outboxColumns = `id, event_id, room_id, room_version, seq, event_type, payload, owner_epoch,
	status, attempts, last_error, next_attempt_at, created_at, published_at`

// SaveOutbox inserts the records as pending rows, all or none, keeping each
// record's OwnerEpoch. A duplicate event id is store.ErrConflict.
func (db *DB) SaveOutbox(ctx context.Context, records []outbox.Record) error {
	if len(records) == 0 {
		return nil
	}
	tx, err := db.write.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("save outbox room=%s: %w", records[0].RoomID, mapErr(err))
	}
	defer func() { _ = tx.Rollback() }()
	now := time.Now().UnixMilli()
	if err := db.insertOutbox.exec(ctx, tx, len(records), func(dst []any, i int) []any {
		return outboxArgs(dst, &records[i], records[i].OwnerEpoch, now)
	}); err != nil {
		return fmt.Errorf("save outbox room=%s: %w", records[0].RoomID, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("save outbox room=%s: %w", records[0].RoomID, mapErr(err))
	}
	return nil
}

// ListPendingOutbox returns up to limit pending rows that are due now, in id
// order. A limit of zero or less lists nothing.
func (db *DB) ListPendingOutbox(ctx context.Context, limit int) ([]outbox.Record, error) {
	if limit <= 0 {
		return nil, nil
	}
	rows, err := db.listPending.QueryContext(ctx, time.Now().UnixMilli(), limit)
	if err != nil {
		return nil, fmt.Errorf("list pending outbox: %w", mapErr(err))
	}
	defer rows.Close()
	var out []outbox.Record
	for rows.Next() {
		var r outbox.Record
		var next, created, published sql.NullInt64
		if err := rows.Scan(&r.ID, &r.EventID, &r.RoomID, &r.RoomVersion, &r.Seq, &r.EventType, &r.Payload,
			&r.OwnerEpoch, &r.Status, &r.Attempts, &r.LastError, &next, &created, &published); err != nil {
			return nil, fmt.Errorf("list pending outbox: %w", mapErr(err))
		}
		r.NextAttemptAt, r.CreatedAt, r.PublishedAt = fromMillis(next), fromMillis(created), fromMillis(published)
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list pending outbox: %w", mapErr(err))
	}
	return out, nil
}

// MarkOutboxPublished marks the row published. A published row keeps its
// first publish time, so marking it again is a no-op. An unknown event id is
// store.ErrNotFound.
func (db *DB) MarkOutboxPublished(ctx context.Context, eventID string) error {
	err := db.updateOutbox(ctx, `UPDATE room_outbox
		SET status = 'published', published_at = COALESCE(published_at, ?)
		WHERE event_id = ?`, time.Now().UnixMilli(), eventID)
	if err != nil {
		return fmt.Errorf("mark outbox published event=%s: %w", eventID, err)
	}
	return nil
}

// MarkOutboxFailed counts one failed delivery and records lastErr; the row
// keeps its status, so a pending row stays pending and due. An unknown event
// id is store.ErrNotFound.
func (db *DB) MarkOutboxFailed(ctx context.Context, eventID string, lastErr string) error {
	err := db.updateOutbox(ctx, `UPDATE room_outbox SET attempts = attempts + 1, last_error = ? WHERE event_id = ?`,
		lastErr, eventID)
	if err != nil {
		return fmt.Errorf("mark outbox failed event=%s: %w", eventID, err)
	}
	return nil
}

func (db *DB) updateOutbox(ctx context.Context, query string, args ...any) error {
	res, err := db.write.ExecContext(ctx, query, args...)
	if err != nil {
		return mapErr(err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return mapErr(err)
	}
	if n == 0 {
		return store.ErrNotFound
	}
	return nil
}
