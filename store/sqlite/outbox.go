package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"hyapp/room-service/outbox"
	"hyapp/room-service/store"
	"hyapp/room-service/store/internal/sqlrow"
)

const outboxColumns = `id, event_id, room_id, room_version, seq, event_type, payload, owner_epoch,
	status, attempts, last_error, next_attempt_at, created_at, published_at`

// The relay's reads: pending rows by id, and one room's pending rows in
// order, each from a partial index of pending rows.
const (
	listPendingAfterQuery = `SELECT ` + outboxColumns + ` FROM room_outbox
		WHERE status = 'pending' AND id > ? ORDER BY id LIMIT ?`
	listRoomOutboxQuery = `SELECT ` + outboxColumns + ` FROM room_outbox
		WHERE room_id = ? AND status = 'pending' ORDER BY room_version, seq LIMIT ?`
)

// The reads of OutboxStats: the pending rows and the dead ones through their
// partial indexes, and the row count, which SQLite takes from its smallest
// index rather than the table.
const (
	statsPendingQuery = `SELECT COUNT(*), MIN(created_at) FROM room_outbox WHERE status = 'pending'`
	statsDeadQuery    = `SELECT event_type, COUNT(*) FROM room_outbox WHERE status = 'dead' GROUP BY event_type`
	statsRowsQuery    = `SELECT COUNT(*) FROM room_outbox`
)

// The chunks of RequeueDeadOutbox, all dead rows or those of one type, found
// through the partial index of dead rows.
const (
	requeueDeadQuery = `UPDATE room_outbox SET status = 'pending', attempts = 0, next_attempt_at = ?, published_at = NULL
		WHERE id IN (SELECT id FROM room_outbox WHERE status = 'dead' LIMIT ?)`
	requeueDeadTypeQuery = `UPDATE room_outbox SET status = 'pending', attempts = 0, next_attempt_at = ?, published_at = NULL
		WHERE id IN (SELECT id FROM room_outbox WHERE status = 'dead' AND event_type = ? LIMIT ?)`
)

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
		return sqlrow.OutboxArgs(dst, &records[i], records[i].OwnerEpoch, now)
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
	out, err := queryOutbox(ctx, db.listPending, time.Now().UnixMilli(), limit)
	if err != nil {
		return nil, fmt.Errorf("list pending outbox: %w", err)
	}
	return out, nil
}

// ListPendingOutboxAfter returns up to limit pending rows with an id above
// afterID, due or not, in id order, from the partial index of pending rows.
// A limit of zero or less lists nothing.
func (db *DB) ListPendingOutboxAfter(ctx context.Context, afterID int64, limit int) ([]outbox.Record, error) {
	if limit <= 0 {
		return nil, nil
	}
	out, err := queryOutbox(ctx, db.listPendingAfter, afterID, limit)
	if err != nil {
		return nil, fmt.Errorf("list pending outbox after=%d: %w", afterID, err)
	}
	return out, nil
}

// ListRoomOutbox returns up to limit pending rows of the room, due or not,
// in (room_version, seq) order, from the partial index of pending rows by
// room. A limit of zero or less lists nothing.
func (db *DB) ListRoomOutbox(ctx context.Context, roomID string, limit int) ([]outbox.Record, error) {
	if limit <= 0 {
		return nil, nil
	}
	out, err := queryOutbox(ctx, db.listRoomOutbox, roomID, limit)
	if err != nil {
		return nil, fmt.Errorf("list room outbox room=%s: %w", roomID, err)
	}
	return out, nil
}

// queryOutbox runs a SELECT of outboxColumns and returns its rows. Errors
// are mapped.
func queryOutbox(ctx context.Context, stmt *sql.Stmt, args ...any) ([]outbox.Record, error) {
	rows, err := stmt.QueryContext(ctx, args...)
	if err != nil {
		return nil, mapErr(err)
	}
	out, err := sqlrow.ScanOutbox(rows)
	if err != nil {
		return nil, mapErr(err)
	}
	return out, nil
}

// MarkOutboxPublished marks the row published, a dead row too. A published
// row keeps its first publish time, so marking it again is a no-op. An
// unknown event id is store.ErrNotFound.
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

// MarkOutboxPublishedBatch marks the rows that are not published yet
// published now, dead ones too, with one UPDATE per chunk of ids, all in one
// write transaction. Unknown and published ids are ignored.
func (db *DB) MarkOutboxPublishedBatch(ctx context.Context, eventIDs []string) error {
	if len(eventIDs) == 0 {
		return nil
	}
	tx, err := db.write.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("mark outbox published rows=%d: %w", len(eventIDs), mapErr(err))
	}
	defer func() { _ = tx.Rollback() }()
	now := time.Now().UnixMilli()
	for ids := range slices.Chunk(eventIDs, maxInIDs) {
		args := make([]any, 0, len(ids)+1)
		args = append(args, now)
		for _, id := range ids {
			args = append(args, id)
		}
		q := `UPDATE room_outbox SET status = 'published', published_at = ?
			WHERE status <> 'published' AND event_id IN (?` + strings.Repeat(", ?", len(ids)-1) + `)`
		if _, err := tx.ExecContext(ctx, q, args...); err != nil {
			return fmt.Errorf("mark outbox published rows=%d: %w", len(eventIDs), mapErr(err))
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("mark outbox published rows=%d: %w", len(eventIDs), mapErr(err))
	}
	return nil
}

// FailOutbox counts one failed delivery of a pending row, records lastErr
// and next (the zero time is now), and makes the row dead when its attempts
// reach maxAttempts (never when maxAttempts is zero or less). A row that is
// not pending is left alone; an unknown event id is store.ErrNotFound. It
// reads and writes the row in one write transaction.
func (db *DB) FailOutbox(ctx context.Context, eventID string, lastErr string, next time.Time, maxAttempts int32) (bool, error) {
	dead, err := db.failOutbox(ctx, eventID, lastErr, next, maxAttempts)
	if err != nil {
		return false, fmt.Errorf("fail outbox event=%s: %w", eventID, err)
	}
	return dead, nil
}

func (db *DB) failOutbox(ctx context.Context, eventID string, lastErr string, next time.Time, maxAttempts int32) (bool, error) {
	tx, err := db.write.BeginTx(ctx, nil)
	if err != nil {
		return false, mapErr(err)
	}
	defer func() { _ = tx.Rollback() }()
	var status string
	var attempts int32
	err = tx.QueryRowContext(ctx, `SELECT status, attempts FROM room_outbox WHERE event_id = ?`, eventID).Scan(&status, &attempts)
	if errors.Is(err, sql.ErrNoRows) {
		return false, store.ErrNotFound
	}
	if err != nil {
		return false, mapErr(err)
	}
	if status != outbox.StatusPending {
		return false, nil
	}
	attempts++
	dead := maxAttempts > 0 && attempts >= maxAttempts
	if dead {
		status = outbox.StatusDead
	}
	if _, err := tx.ExecContext(ctx, `UPDATE room_outbox SET status = ?, attempts = ?, last_error = ?, next_attempt_at = ?
		WHERE event_id = ?`, status, attempts, lastErr, sqlrow.Millis(next, time.Now().UnixMilli()), eventID); err != nil {
		return false, mapErr(err)
	}
	if err := tx.Commit(); err != nil {
		return false, mapErr(err)
	}
	return dead, nil
}

// OutboxStats reads the outbox summary in one read transaction. Pending and
// dead rows are read through their partial indexes; the published rows are
// what remains of the row count.
func (db *DB) OutboxStats(ctx context.Context) (store.OutboxStats, error) {
	st, err := db.outboxStats(ctx)
	if err != nil {
		return store.OutboxStats{}, fmt.Errorf("outbox stats: %w", err)
	}
	return st, nil
}

func (db *DB) outboxStats(ctx context.Context) (store.OutboxStats, error) {
	st := store.OutboxStats{Dead: map[string]int64{}}
	tx, err := db.read.BeginTx(ctx, nil)
	if err != nil {
		return st, mapErr(err)
	}
	defer func() { _ = tx.Rollback() }()
	var oldest sql.NullInt64
	if err := tx.QueryRowContext(ctx, statsPendingQuery).Scan(&st.Pending, &oldest); err != nil {
		return st, mapErr(err)
	}
	st.OldestPending = sqlrow.FromMillis(oldest)
	rows, err := tx.QueryContext(ctx, statsDeadQuery)
	if err != nil {
		return st, mapErr(err)
	}
	defer rows.Close()
	var dead int64
	for rows.Next() {
		var eventType string
		var n int64
		if err := rows.Scan(&eventType, &n); err != nil {
			return st, mapErr(err)
		}
		st.Dead[eventType] = n
		dead += n
	}
	if err := rows.Err(); err != nil {
		return st, mapErr(err)
	}
	var all int64
	if err := tx.QueryRowContext(ctx, statsRowsQuery).Scan(&all); err != nil {
		return st, mapErr(err)
	}
	st.Published = all - st.Pending - dead
	return st, nil
}

// requeueChunk caps the rows one RequeueDeadOutbox statement changes, so the
// writer is free between chunks.
const requeueChunk = 500

// RequeueDeadOutbox makes dead rows pending again, due now, with no attempts
// and no publish time, all of them or those of eventType; each chunk of
// requeueChunk rows commits on its own. It returns the rows requeued.
func (db *DB) RequeueDeadOutbox(ctx context.Context, eventType string) (int, error) {
	q, args := requeueDeadQuery, []any{nil, requeueChunk}
	if eventType != "" {
		q, args = requeueDeadTypeQuery, []any{nil, eventType, requeueChunk}
	}
	requeued := 0
	for {
		args[0] = time.Now().UnixMilli()
		n, err := db.execCount(ctx, q, args...)
		requeued += n
		if err != nil {
			return requeued, fmt.Errorf("requeue dead outbox type=%q: %w", eventType, err)
		}
		if n < requeueChunk {
			return requeued, nil
		}
	}
}
