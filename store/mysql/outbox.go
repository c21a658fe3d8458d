package mysql

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"hyapp/room-service/outbox"
	"hyapp/room-service/store"
)

const outboxColumns = `id, event_id, room_id, room_version, seq, event_type, payload, owner_epoch,
	status, attempts, last_error, next_attempt_at, created_at, published_at`

// maxLastError caps the stored delivery error (a TEXT column holds 64 KiB).
const maxLastError = 4096

// outboxArgs appends one room_outbox row. A zero CreatedAt becomes now and a
// zero NextAttemptAt becomes CreatedAt, so a new row is due at once.
func outboxArgs(dst []any, r *outbox.Record, epoch int64, now int64) []any {
	created := millis(r.CreatedAt, now)
	return append(dst, r.EventID, r.RoomID, r.RoomVersion, r.Seq, r.EventType, r.Payload, epoch,
		millis(r.NextAttemptAt, created), created)
}

func outboxSize(r *outbox.Record) int {
	return len(r.EventID) + len(r.RoomID) + len(r.EventType) + len(r.Payload) + rowOverhead
}

// SaveOutbox inserts the records as pending rows, all or none, keeping each
// record's OwnerEpoch. A duplicate event id is store.ErrConflict.
func (db *DB) SaveOutbox(ctx context.Context, records []outbox.Record) error {
	if len(records) == 0 {
		return nil
	}
	err := db.inTx(ctx, func(tx *sql.Tx) error {
		now := time.Now().UnixMilli()
		return db.insertOutbox.exec(ctx, tx, len(records),
			func(i int) int { return outboxSize(&records[i]) },
			func(dst []any, i int) []any { return outboxArgs(dst, &records[i], records[i].OwnerEpoch, now) })
	})
	if err != nil {
		return fmt.Errorf("save outbox room=%s: %w", records[0].RoomID, err)
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
	if err := updateOne(ctx, db.markPublished, time.Now().UnixMilli(), eventID); err != nil {
		return fmt.Errorf("mark outbox published event=%s: %w", eventID, err)
	}
	return nil
}

// MarkOutboxFailed counts one failed delivery and records lastErr (made
// valid UTF-8 and cut to 4 KiB); the row keeps its status, so a pending row
// stays pending and due. An unknown event id is store.ErrNotFound.
func (db *DB) MarkOutboxFailed(ctx context.Context, eventID string, lastErr string) error {
	if err := updateOne(ctx, db.markFailed, clip(lastErr, maxLastError), eventID); err != nil {
		return fmt.Errorf("mark outbox failed event=%s: %w", eventID, err)
	}
	return nil
}

// clip returns s as valid UTF-8 of at most n bytes, cut at a rune boundary.
func clip(s string, n int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// updateOne runs an UPDATE of one row by key: store.ErrNotFound when it
// matched none (the connection reports matched, not changed, rows).
func updateOne(ctx context.Context, stmt *sql.Stmt, args ...any) error {
	res, err := stmt.ExecContext(ctx, args...)
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
