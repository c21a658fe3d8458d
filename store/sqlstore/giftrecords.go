package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"hyapp/room-service/store"
)

// giftRecordColumns are the room_gift_records columns giftRecords writes, in order.
const giftRecordColumns = `room_id, room_version, command_id, sender_user_id, receiver_user_id, gift_id, count, value,
	multiplier_bp, sent_at_ms`

// maxGiftRecordRows caps the rows of one gift record insert (ten values a row).
const maxGiftRecordRows = 256

// writeGiftRecords inserts the gift records of the batches that passed
// their fence, inside tx, with an INSERT that starts with insert. A gift is
// rarely more than a few receivers, so the statement is not kept prepared.
func (db *DB) writeGiftRecords(ctx context.Context, tx *sql.Tx, insert string, batches []*store.Batch) error {
	var recs []*store.GiftRecord
	for _, b := range batches {
		for i := range b.Gifts {
			recs = append(recs, &b.Gifts[i])
		}
	}
	for chunk := range slices.Chunk(recs, maxGiftRecordRows) {
		args := make([]any, 0, 10*len(chunk))
		for _, r := range chunk {
			args = giftRecordArgs(args, r)
		}
		if _, err := tx.ExecContext(ctx, giftRecordsInsert(insert, len(chunk)), args...); err != nil {
			return db.d.MapErr(err)
		}
	}
	return nil
}

// giftRecordArgs appends the values of r's row.
func giftRecordArgs(dst []any, r *store.GiftRecord) []any {
	return append(dst, r.RoomID, r.RoomVersion, r.CommandID, r.SenderUserID, r.ReceiverID, r.GiftID, r.Count,
		r.Value, r.MultiplierBP, r.SentAt)
}

// giftRecordsInsert is the INSERT of n gift records; insert starts it.
func giftRecordsInsert(insert string, n int) string {
	return insert + `room_gift_records (` + giftRecordColumns + `) VALUES ` + Values(`(?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`, n)
}

// ListGiftRecords lists gift records of q.RoomID, or those q.UserID sent
// (or received, q.Received), newest first, below q.BeforeID, at most
// q.Limit, through the index of the key. A query naming neither or both
// lists nothing.
func (db *DB) ListGiftRecords(ctx context.Context, q store.GiftRecordQuery) ([]store.GiftRecord, error) {
	if q.Limit <= 0 || (q.RoomID == "") == (q.UserID == 0) {
		return nil, nil
	}
	var key string
	var arg any
	switch {
	case q.RoomID != "":
		key, arg = "room_id", q.RoomID
	case q.Received:
		key, arg = "receiver_user_id", q.UserID
	default:
		key, arg = "sender_user_id", q.UserID
	}
	before := q.BeforeID
	if before <= 0 {
		before = 1<<63 - 1
	}
	rows, err := db.read.QueryContext(ctx, `SELECT record_id, `+giftRecordColumns+` FROM room_gift_records
		WHERE `+key+` = ? AND record_id < ? ORDER BY record_id DESC LIMIT ?`, arg, before, q.Limit)
	var out []store.GiftRecord
	if err == nil {
		out, err = scanAll(rows, func(rows *sql.Rows) (store.GiftRecord, error) {
			var r store.GiftRecord
			err := rows.Scan(&r.RecordID, &r.RoomID, &r.RoomVersion, &r.CommandID, &r.SenderUserID, &r.ReceiverID, &r.GiftID,
				&r.Count, &r.Value, &r.MultiplierBP, &r.SentAt)
			return r, err
		})
	}
	if err != nil {
		return nil, fmt.Errorf("list gift records %s=%v before=%d: %w", key, arg, q.BeforeID, db.d.MapErr(err))
	}
	return out, nil
}

// giftRecordsDisorder bounds how far a gift record's send time can be
// earlier than that of a record committed before it: a gift is committed
// within its commit timeout of being sent, and nodes' clocks agree to
// within seconds.
const giftRecordsDisorder = time.Minute

// PruneGiftRecords deletes up to limit gift records sent before before,
// oldest first, and returns how many it deleted. Records are numbered in
// the order they were committed, so the oldest are the lowest ids.
//
// The read ends at the first record sent giftRecordsDisorder after before,
// found by reading from the oldest record: it costs the records to delete
// and a minute's more. Without that bound, once the old records were gone
// every pass read the table whole, ninety days of gifts, to find none.
func (db *DB) PruneGiftRecords(ctx context.Context, before time.Time, limit int) (int, error) {
	if limit <= 0 {
		return 0, nil
	}
	bound := int64(math.MaxInt64)
	err := db.Reader().QueryRowContext(ctx, `SELECT record_id FROM room_gift_records WHERE sent_at_ms >= ?
		ORDER BY record_id LIMIT 1`, before.Add(giftRecordsDisorder).UnixMilli()).Scan(&bound)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return 0, fmt.Errorf("prune gift records: %w", db.d.MapErr(err))
	}
	ids, err := ScanIDs(db.Reader().QueryContext(ctx, `SELECT record_id FROM room_gift_records
		WHERE record_id < ? AND sent_at_ms < ? ORDER BY record_id LIMIT ?`, bound, before.UnixMilli(), limit))
	if err != nil || len(ids) == 0 {
		return 0, db.d.MapErr(err)
	}
	n, err := db.Exec(ctx, `DELETE FROM room_gift_records WHERE record_id IN `+In(len(ids)), ids...)
	if err != nil {
		return 0, fmt.Errorf("prune gift records: %w", err)
	}
	return n, nil
}

// ScanIDs reads the integer ids a query selected (pass the query's results
// straight in), as arguments for an IN list, and closes the rows.
func ScanIDs(rows *sql.Rows, err error) ([]any, error) {
	return ScanAll(rows, err, func(rows *sql.Rows) (any, error) {
		var id int64
		err := rows.Scan(&id)
		return id, err
	})
}

// ScanAll reads every row a query selected (pass the query's results
// straight in) with scan, which reads one, and closes the rows.
func ScanAll[T any](rows *sql.Rows, err error, scan func(*sql.Rows) (T, error)) ([]T, error) {
	if err != nil {
		return nil, err
	}
	var out []T
	for rows.Next() {
		var v T
		if v, err = scan(rows); err != nil {
			break
		}
		out = append(out, v)
	}
	if cerr := rows.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = rows.Err()
	}
	return out, err
}
