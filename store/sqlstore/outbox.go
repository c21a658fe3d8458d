package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"hyapp/room-service/outbox"
	"hyapp/room-service/store"
)

const outboxColumns = `id, event_id, room_id, room_version, seq, event_type, payload, owner_epoch,
	status, attempts, last_error, next_attempt_at, created_at, published_at, trace_context`

// outboxColumnsOf is outboxColumns of the table named alias.
func outboxColumnsOf(alias string) string {
	cols := strings.Split(outboxColumns, ",")
	for i, c := range cols {
		cols[i] = alias + "." + strings.TrimSpace(c)
	}
	return strings.Join(cols, ", ")
}

// OutboxSQL is the outbox's SQL as a dialect spells it: the statements
// whose plans the adapters' tests check.
type OutboxSQL struct {
	// ListHeads reads each room's first pending row: the heads are found
	// among the pending rows' index entries alone (SQLite's partial
	// room_outbox_room_pending holds the room and the id; MySQL reads the
	// room of each entry of room_outbox_pending), then sorted by id: a
	// sort of the rooms, not of their rows.
	ListHeads string
	// ListRoomOutbox reads one room's pending rows in order
	// (room_outbox_room_pending). FORCE INDEX keeps MySQL's optimiser
	// on it: it has preferred indexes that walk the room's published rows.
	ListRoomOutbox string
	// StatsPending counts the pending rows and finds the oldest.
	// MIN(created_at) reads each pending row, which MySQL's optimiser would
	// rather do by scanning the whole table, published history and all.
	// SQLite reads them through room_outbox_room_pending.
	StatsPending string
	// StatsDead counts the dead rows by event type.
	StatsDead string
	// StatsPublished counts the published rows (MySQL), or every row
	// (SQLite, with Dialect.PartialIndexes: the published rows are the
	// rest, and SQLite counts the table from its smallest index).
	StatsPublished string
	// StatsPublishedBeyond finds a row past the first ? rows that
	// StatsPublished would count: one when it would count more.
	StatsPublishedBeyond string
	// RequeueDead and RequeueDeadType make a chunk of dead rows pending,
	// all or those of one type, found through the dead rows' index.
	RequeueDead, RequeueDeadType string
}

// OutboxQueries returns the outbox's SQL in d's spelling.
func OutboxQueries(d *Dialect) OutboxSQL {
	published := `SELECT COUNT(*) FROM room_outbox WHERE status = 'published'`
	beyond := `SELECT 1 FROM room_outbox` + d.ForceIndex("room_outbox_pending") + ` WHERE status = 'published' LIMIT 1 OFFSET ?`
	if d.PartialIndexes {
		published = `SELECT COUNT(*) FROM room_outbox`
		beyond = `SELECT 1 FROM room_outbox LIMIT 1 OFFSET ?`
	}
	requeue := `status = '` + d.pendingStatus() + `', attempts = 0, next_attempt_at = ?, published_at = 0`
	return OutboxSQL{
		ListHeads: `SELECT ` + outboxColumnsOf("o") + ` FROM (SELECT MIN(id) AS head FROM room_outbox` + d.ForceIndex("room_outbox_pending") + `
		WHERE status = 'pending' GROUP BY room_id HAVING MIN(id) > ?) AS h JOIN room_outbox o ON o.id = h.head ORDER BY h.head LIMIT ?`,
		ListRoomOutbox: `SELECT ` + outboxColumns + ` FROM room_outbox` + d.ForceIndex("room_outbox_room_pending") + `
		WHERE room_id = ? AND status = 'pending' ORDER BY room_version, seq LIMIT ?`,
		StatsPending:         `SELECT COUNT(*), MIN(created_at) FROM room_outbox` + d.ForceIndex("room_outbox_pending") + ` WHERE status = 'pending'`,
		StatsDead:            `SELECT event_type, COUNT(*) FROM room_outbox WHERE status = 'dead' GROUP BY event_type`,
		StatsPublished:       published,
		StatsPublishedBeyond: beyond,
		RequeueDead:          d.UpdateFirst("room_outbox", requeue, `status = 'dead'`),
		RequeueDeadType:      d.UpdateFirst("room_outbox", requeue, `status = 'dead' AND event_type = ?`),
	}
}

// maxLastError caps the stored delivery error (MySQL's TEXT holds 64 KiB).
const maxLastError = 4096

func outboxSize(r *outbox.Record) int {
	return len(r.EventID) + len(r.RoomID) + len(r.EventType) + len(r.Payload) + len(r.TraceContext) + rowOverhead
}

// SaveOutbox inserts the records as pending rows, all or none, keeping each
// record's OwnerEpoch. A duplicate event id is store.ErrConflict.
func (db *DB) SaveOutbox(ctx context.Context, records []outbox.Record) error {
	if len(records) == 0 {
		return nil
	}
	err := db.Tx(ctx, func(tx *sql.Tx) error {
		now := time.Now().UnixMilli()
		return db.stmts.insertOutbox.exec(ctx, tx, db.d.MapErr, len(records),
			func(i int) int { return outboxSize(&records[i]) },
			func(dst []any, i int) []any { return outboxArgs(dst, &records[i], records[i].OwnerEpoch, now) })
	})
	if err != nil {
		return fmt.Errorf("save outbox room=%s: %w", records[0].RoomID, err)
	}
	return nil
}

// ListOutboxHeads returns each room's first pending row (its lowest id),
// due or not, for up to limit rooms whose first row's id is above afterID,
// in id order. A limit of zero or less lists nothing.
func (db *DB) ListOutboxHeads(ctx context.Context, afterID int64, limit int) ([]outbox.Record, error) {
	return db.listOutbox(ctx, fmt.Sprintf("list outbox heads after=%d", afterID), db.stmts.listHeads, afterID, limit)
}

// ListRoomOutbox returns up to limit pending rows of the room, due or not,
// in (room_version, seq) order (a range of room_outbox_room_pending). A
// limit of zero or less lists nothing.
func (db *DB) ListRoomOutbox(ctx context.Context, roomID string, limit int) ([]outbox.Record, error) {
	return db.listOutbox(ctx, "list room outbox room="+roomID, db.stmts.listRoomOutbox, roomID, limit)
}

// listOutbox runs stmt, a SELECT of outboxColumns taking arg and limit, and
// returns its rows; errors are mapped and wrapped with what. A limit of zero
// or less lists nothing.
func (db *DB) listOutbox(ctx context.Context, what string, stmt *sql.Stmt, arg any, limit int) ([]outbox.Record, error) {
	if limit <= 0 {
		return nil, nil
	}
	rows, err := stmt.QueryContext(ctx, arg, limit)
	out, err := ScanAll(rows, err, scanOutbox)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, db.d.MapErr(err))
	}
	return out, nil
}

// MarkOutboxPublished marks the row published, a dead row too. A published
// row keeps its first publish time, so marking it again is a no-op. An
// unknown event id is store.ErrNotFound.
func (db *DB) MarkOutboxPublished(ctx context.Context, eventID string) error {
	if err := db.updateOne(ctx, db.stmts.markPublished, time.Now().UnixMilli(), eventID); err != nil {
		return fmt.Errorf("mark outbox published event=%s: %w", eventID, err)
	}
	return nil
}

// MarkOutboxFailed counts one failed delivery and records lastErr (made
// valid UTF-8 and cut to 4 KiB); the row keeps its status, so a pending row
// stays pending and due. An unknown event id is store.ErrNotFound.
func (db *DB) MarkOutboxFailed(ctx context.Context, eventID string, lastErr string) error {
	if err := db.updateOne(ctx, db.stmts.markFailed, clip(lastErr, maxLastError), eventID); err != nil {
		return fmt.Errorf("mark outbox failed event=%s: %w", eventID, err)
	}
	return nil
}

// MarkOutboxPublishedBatch marks the rows that are not published yet
// published now, dead ones too, with one UPDATE by event id per chunk of
// ids, all in one transaction: one durable commit for the whole call, as
// the relay gathers the acknowledgements of many rooms into one call. A
// call of one chunk is that UPDATE alone, committed as it runs.
// With a single writer that transaction is, when one comes within
// markRide, the next room commit's (see marks). Unknown and published ids
// are ignored.
func (db *DB) MarkOutboxPublishedBatch(ctx context.Context, eventIDs []string) error {
	if len(eventIDs) == 0 {
		return nil
	}
	var err error
	if db.d.SingleWriter {
		var stored bool
		if stored, err = db.marks.ride(ctx, eventIDs); stored {
			return nil
		}
	}
	switch {
	case err != nil:
	case len(eventIDs) <= maxIn:
		// One statement is a transaction of its own: one round trip to
		// the database instead of three with BEGIN and COMMIT.
		err = retry(ctx, func() error { return db.markChunk(ctx, db.write, eventIDs) })
	default:
		err = db.Tx(ctx, func(tx *sql.Tx) error { return db.markPublished(ctx, tx, eventIDs) })
	}
	if err != nil {
		return fmt.Errorf("mark outbox published rows=%d: %w", len(eventIDs), err)
	}
	return nil
}

// markPublished runs MarkOutboxPublishedBatch's UPDATEs inside tx.
func (db *DB) markPublished(ctx context.Context, tx *sql.Tx, eventIDs []string) error {
	for ids := range slices.Chunk(eventIDs, maxIn) {
		if err := db.markChunk(ctx, tx, ids); err != nil {
			return err
		}
	}
	return nil
}

// markChunk marks at most maxIn rows published with one UPDATE on x.
func (db *DB) markChunk(ctx context.Context, x interface {
	ExecContext(context.Context, string, ...any) (sql.Result, error)
}, ids []string) error {
	q := db.d.UpdateCannotFail() + `room_outbox SET status = 'published', published_at = ?
		WHERE status <> 'published' AND event_id IN ` + In(len(ids))
	_, err := x.ExecContext(ctx, q, AppendStrings([]any{time.Now().UnixMilli()}, ids)...)
	return db.d.MapErr(err)
}

// FailOutbox counts one failed delivery of a pending row, records lastErr
// (made valid UTF-8 and cut to 4 KiB) and next (the zero time is now), and
// makes the row dead when its attempts reach maxAttempts (never when
// maxAttempts is zero or less). A row that is not pending is left alone; an
// unknown event id is store.ErrNotFound. The row is read and written in one
// transaction, locked where rows are locked, so concurrent failures of one
// row each count.
func (db *DB) FailOutbox(ctx context.Context, eventID string, lastErr string, next time.Time, maxAttempts int32) (bool, error) {
	lastErr = clip(lastErr, maxLastError)
	var dead bool
	err := db.Tx(ctx, func(tx *sql.Tx) error {
		dead = false
		var status string
		var attempts int32
		err := tx.StmtContext(ctx, db.stmts.lockOutbox).QueryRowContext(ctx, eventID).Scan(&status, &attempts)
		if errors.Is(err, sql.ErrNoRows) {
			return store.ErrNotFound
		}
		if err != nil {
			return db.d.MapErr(err)
		}
		if strings.TrimRight(status, " ") != outbox.StatusPending {
			return nil
		}
		attempts++
		status = db.d.pendingStatus()
		if maxAttempts > 0 && attempts >= maxAttempts {
			status, dead = outbox.StatusDead, true
		}
		_, err = tx.StmtContext(ctx, db.stmts.failOutbox).ExecContext(ctx, status, attempts, lastErr,
			millis(next, time.Now().UnixMilli()), eventID)
		return db.d.MapErr(err)
	})
	if err != nil {
		return false, fmt.Errorf("fail outbox event=%s: %w", eventID, err)
	}
	return dead, nil
}

// statsTxOptions gives OutboxStats one consistent snapshot for its reads.
var statsTxOptions = &sql.TxOptions{Isolation: sql.LevelRepeatableRead, ReadOnly: true}

// maxPublishedCount caps OutboxStats's count so that its OFFSET, the
// pending and dead rows added, cannot overflow.
const maxPublishedCount = 1 << 62

// OutboxStats reads the outbox summary from one snapshot. Pending and dead
// rows are read through their indexes. Published rows are counted only up
// to countPublished, and only after a probe for the one past it: a count of
// every one would read each (a million took MariaDB 0.6-0.8 s, inside a
// snapshot that holds back its purge all that time).
func (db *DB) OutboxStats(ctx context.Context, countPublished int64) (store.OutboxStats, error) {
	q := OutboxQueries(&db.d)
	st := store.OutboxStats{Dead: map[string]int64{}}
	var dead int64
	err := db.readTx(ctx, func(tx *sql.Tx) error {
		var oldest sql.NullInt64
		if err := tx.QueryRowContext(ctx, q.StatsPending).Scan(&st.Pending, &oldest); err != nil {
			return err
		}
		st.OldestPending = fromMillis(oldest)
		rows, err := tx.QueryContext(ctx, q.StatsDead)
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
			dead += n
		}
		if err := rows.Err(); err != nil || countPublished <= 0 {
			return err
		}
		var others int64 // rows the published queries see that are not published
		if db.d.PartialIndexes {
			others = st.Pending + dead
		}
		var one int
		countPublished = min(countPublished, maxPublishedCount)
		switch err := tx.QueryRowContext(ctx, q.StatsPublishedBeyond, others+countPublished).Scan(&one); {
		case err == nil:
			st.Published, st.PublishedMore = countPublished, true
			return nil
		case !errors.Is(err, sql.ErrNoRows):
			return err
		}
		if err := tx.QueryRowContext(ctx, q.StatsPublished).Scan(&st.Published); err != nil {
			return err
		}
		st.Published -= others
		return nil
	})
	if err != nil {
		return store.OutboxStats{}, fmt.Errorf("outbox stats: %w", db.d.MapErr(err))
	}
	return st, nil
}

// readTx runs fn in a read-only transaction on the read pool and ends it.
// fn returns driver errors; the caller maps them.
func (db *DB) readTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	tx, err := db.read.BeginTx(ctx, statsTxOptions)
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
// each is a short transaction that locks few rows (or holds SQLite's writer
// briefly).
const requeueChunk = 500

// RequeueDeadOutbox makes dead rows pending again, due now, with no attempts
// and no publish time, all of them or those of eventType, oldest id first,
// in chunks of requeueChunk rows that commit on their own. It returns the
// rows requeued.
func (db *DB) RequeueDeadOutbox(ctx context.Context, eventType string) (int, error) {
	q := OutboxQueries(&db.d)
	query, args := q.RequeueDead, []any{nil, requeueChunk}
	if eventType != "" {
		query, args = q.RequeueDeadType, []any{nil, eventType, requeueChunk}
	}
	requeued := 0
	for {
		args[0] = time.Now().UnixMilli()
		n, err := db.Exec(ctx, query, args...)
		requeued += n
		if err != nil {
			return requeued, fmt.Errorf("requeue dead outbox type=%q: %w", eventType, err)
		}
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
