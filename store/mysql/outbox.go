package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"hyapp/room-service/outbox"
	"hyapp/room-service/store"
	"hyapp/room-service/store/internal/sqlrow"
)

const outboxColumns = `id, event_id, room_id, room_version, seq, event_type, payload, owner_epoch,
	status, attempts, last_error, next_attempt_at, created_at, published_at`

// The relay's reads: pending rows by id (room_outbox_pending), and one
// room's pending rows in order (room_outbox_room_pending). The optimiser
// prefers room_outbox_room for the second, which gives the order too but
// walks the room's published rows: FORCE INDEX keeps it on the pending ones.
const (
	listPendingAfterQuery = `SELECT ` + outboxColumns + ` FROM room_outbox
		WHERE status = 'pending' AND id > ? ORDER BY id LIMIT ?`
	listRoomOutboxQuery = `SELECT ` + outboxColumns + ` FROM room_outbox FORCE INDEX (room_outbox_room_pending)
		WHERE room_id = ? AND status = 'pending' ORDER BY room_version, seq LIMIT ?`
)

// The reads of OutboxStats, each a range of room_outbox_pending on one
// status. MIN(created_at) reads each pending row, which the optimiser would
// rather do by scanning the whole table, published history and all.
const (
	statsPendingQuery   = `SELECT COUNT(*), MIN(created_at) FROM room_outbox FORCE INDEX (room_outbox_pending) WHERE status = 'pending'`
	statsPublishedQuery = `SELECT COUNT(*) FROM room_outbox WHERE status = 'published'`
	statsDeadQuery      = `SELECT event_type, COUNT(*) FROM room_outbox WHERE status = 'dead' GROUP BY event_type`
)

// maxLastError caps the stored delivery error (a TEXT column holds 64 KiB).
const maxLastError = 4096

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
			func(dst []any, i int) []any { return sqlrow.OutboxArgs(dst, &records[i], records[i].OwnerEpoch, now) })
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
	out, err := queryOutbox(ctx, db.listPending, time.Now().UnixMilli(), limit)
	if err != nil {
		return nil, fmt.Errorf("list pending outbox: %w", err)
	}
	return out, nil
}

// ListPendingOutboxAfter returns up to limit pending rows with an id above
// afterID, due or not, in id order (a range of room_outbox_pending). A limit
// of zero or less lists nothing.
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
// in (room_version, seq) order (a range of room_outbox_room_pending). A
// limit of zero or less lists nothing.
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

// MarkOutboxPublishedBatch marks the rows that are not published yet
// published now, dead ones too, with one UPDATE by event id per chunk of
// maxInIDs ids, all in one transaction. Unknown and published ids are
// ignored.
func (db *DB) MarkOutboxPublishedBatch(ctx context.Context, eventIDs []string) error {
	now := time.Now().UnixMilli()
	// One transaction, so one durable commit, for the whole call: the relay
	// gathers the acknowledgements of many rooms into one call.
	err := db.inTx(ctx, func(tx *sql.Tx) error {
		for ids := range chunks(eventIDs, maxInIDs) {
			q := `UPDATE room_outbox SET status = 'published', published_at = ?
				WHERE status <> 'published' AND event_id IN (` + placeholders(len(ids)) + `)`
			if _, err := tx.ExecContext(ctx, q, append([]any{now}, anys(ids)...)...); err != nil {
				return mapErr(err)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("mark outbox published rows=%d: %w", len(eventIDs), err)
	}
	return nil
}

// FailOutbox counts one failed delivery of a pending row, records lastErr
// (made valid UTF-8 and cut to 4 KiB) and next (the zero time is now), and
// makes the row dead when its attempts reach maxAttempts (never when
// maxAttempts is zero or less). A row that is not pending is left alone; an
// unknown event id is store.ErrNotFound. The row is locked while it is read
// and written, so concurrent failures of one row each count.
func (db *DB) FailOutbox(ctx context.Context, eventID string, lastErr string, next time.Time, maxAttempts int32) (bool, error) {
	lastErr = clip(lastErr, maxLastError)
	var dead bool
	err := db.inTx(ctx, func(tx *sql.Tx) error {
		dead = false
		var status string
		var attempts int32
		err := tx.StmtContext(ctx, db.lockOutbox).QueryRowContext(ctx, eventID).Scan(&status, &attempts)
		if errors.Is(err, sql.ErrNoRows) {
			return store.ErrNotFound
		}
		if err != nil {
			return mapErr(err)
		}
		if status != outbox.StatusPending {
			return nil
		}
		attempts++
		if maxAttempts > 0 && attempts >= maxAttempts {
			status, dead = outbox.StatusDead, true
		}
		_, err = tx.StmtContext(ctx, db.failOutbox).ExecContext(ctx, status, attempts, lastErr,
			sqlrow.Millis(next, time.Now().UnixMilli()), eventID)
		return mapErr(err)
	})
	if err != nil {
		return false, fmt.Errorf("fail outbox event=%s: %w", eventID, err)
	}
	return dead, nil
}

// statsTxOptions gives OutboxStats one consistent snapshot for its reads.
var statsTxOptions = &sql.TxOptions{Isolation: sql.LevelRepeatableRead, ReadOnly: true}

// OutboxStats reads the outbox summary from one snapshot. Every read is a
// range of room_outbox_pending on one status: the pending and dead rows are
// read, the published ones only counted in the index.
func (db *DB) OutboxStats(ctx context.Context) (store.OutboxStats, error) {
	st := store.OutboxStats{Dead: map[string]int64{}}
	err := db.readTx(ctx, statsTxOptions, func(tx *sql.Tx) error {
		var oldest sql.NullInt64
		if err := tx.QueryRowContext(ctx, statsPendingQuery).Scan(&st.Pending, &oldest); err != nil {
			return err
		}
		st.OldestPending = sqlrow.FromMillis(oldest)
		if err := tx.QueryRowContext(ctx, statsPublishedQuery).Scan(&st.Published); err != nil {
			return err
		}
		rows, err := tx.QueryContext(ctx, statsDeadQuery)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var eventType string
			var n int64
			if err := rows.Scan(&eventType, &n); err != nil {
				return err
			}
			st.Dead[eventType] = n
		}
		return rows.Err()
	})
	if err != nil {
		return store.OutboxStats{}, fmt.Errorf("outbox stats: %w", mapErr(err))
	}
	return st, nil
}

// readTx runs fn in a transaction with opts and ends it. fn returns driver
// errors; the caller maps them.
func (db *DB) readTx(ctx context.Context, opts *sql.TxOptions, fn func(tx *sql.Tx) error) error {
	tx, err := db.db.BeginTx(ctx, opts)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}

// requeueChunk caps the rows one RequeueDeadOutbox statement changes, so
// each is a short transaction that locks few rows.
const requeueChunk = 500

// RequeueDeadOutbox makes dead rows pending again, due now, with no attempts
// and no publish time, all of them or those of eventType, oldest id first,
// in chunks of requeueChunk rows that commit on their own. It returns the
// rows requeued.
func (db *DB) RequeueDeadOutbox(ctx context.Context, eventType string) (int, error) {
	q := `UPDATE room_outbox SET status = 'pending', attempts = 0, next_attempt_at = ?, published_at = NULL
		WHERE status = 'dead' ORDER BY id LIMIT ?`
	args := []any{nil, requeueChunk}
	if eventType != "" {
		q = `UPDATE room_outbox SET status = 'pending', attempts = 0, next_attempt_at = ?, published_at = NULL
			WHERE status = 'dead' AND event_type = ? ORDER BY id LIMIT ?`
		args = []any{nil, eventType, requeueChunk}
	}
	requeued := 0
	for {
		args[0] = time.Now().UnixMilli()
		var n int64
		err := db.inTx(ctx, func(tx *sql.Tx) error {
			res, err := tx.ExecContext(ctx, q, args...)
			if err != nil {
				return mapErr(err)
			}
			n, err = res.RowsAffected()
			return mapErr(err)
		})
		if err != nil {
			return requeued, fmt.Errorf("requeue dead outbox type=%q: %w", eventType, err)
		}
		requeued += int(n)
		if n < requeueChunk {
			return requeued, nil
		}
	}
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
