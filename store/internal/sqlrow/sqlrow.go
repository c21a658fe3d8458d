// Package sqlrow holds what the SQL adapters of store share: how rows map to
// records and back, and the checks a batch passes before any SQL runs.
package sqlrow

import (
	"database/sql"
	"fmt"
	"time"

	"hyapp/room-service/outbox"
	"hyapp/room-service/store"
)

type scanner interface{ Scan(dest ...any) error }

func ValidateBatch(b *store.Batch) error {
	for i := range b.Commands {
		c := &b.Commands[i]
		if c.RoomID != b.RoomID {
			return fmt.Errorf("command %s names room %s: %w", c.CommandID, c.RoomID, store.ErrConflict)
		}
		if want := b.BaseVersion + 1 + int64(i); c.RoomVersion != want {
			return fmt.Errorf("command %s has version %d, want %d: %w", c.CommandID, c.RoomVersion, want, store.ErrConflict)
		}
	}
	for i := range b.Outbox {
		if r := &b.Outbox[i]; r.RoomID != b.RoomID {
			return fmt.Errorf("outbox event %s names room %s: %w", r.EventID, r.RoomID, store.ErrConflict)
		}
	}
	if s := b.Snapshot; s != nil {
		if s.RoomID != b.RoomID {
			return fmt.Errorf("snapshot names room %s: %w", s.RoomID, store.ErrConflict)
		}
		if s.RoomVersion > b.HeadVersion() {
			return fmt.Errorf("snapshot version %d is beyond head %d: %w", s.RoomVersion, b.HeadVersion(), store.ErrConflict)
		}
	}
	return nil
}

func ScanCommand(s scanner) (store.CommandRecord, error) {
	var c store.CommandRecord
	var created sql.NullInt64
	err := s.Scan(&c.RoomID, &c.RoomVersion, &c.CommandID, &c.CommandType, &c.Payload, &c.Replayable, &created)
	c.CreatedAt = FromMillis(created)
	return c, err
}

// OutboxArgs appends one room_outbox row. A zero CreatedAt becomes now and a
// zero NextAttemptAt becomes CreatedAt, so a new row is due at once.
func OutboxArgs(dst []any, r *outbox.Record, epoch int64, now int64) []any {
	created := Millis(r.CreatedAt, now)
	return append(dst, r.EventID, r.RoomID, r.RoomVersion, r.Seq, r.EventType, r.Payload, epoch,
		Millis(r.NextAttemptAt, created), created)
}

// CommandArgs appends one room_command_log row; a zero CreatedAt becomes now.
func CommandArgs(dst []any, c *store.CommandRecord, now int64) []any {
	return append(dst, c.RoomID, c.RoomVersion, c.CommandID, c.CommandType, c.Payload, c.Replayable, Millis(c.CreatedAt, now))
}

func Collect(rows *sql.Rows, each func(store.CommandRecord)) error {
	defer rows.Close()
	for rows.Next() {
		c, err := ScanCommand(rows)
		if err != nil {
			return err
		}
		each(c)
	}
	return rows.Err()
}

// Millis converts t to the stored unix milliseconds; the zero time is def.
func Millis(t time.Time, def int64) int64 {
	if t.IsZero() {
		return def
	}
	return t.UnixMilli()
}

// FromMillis converts stored unix milliseconds back; 0 or NULL is the zero time.
func FromMillis(ms sql.NullInt64) time.Time {
	if !ms.Valid || ms.Int64 == 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms.Int64).UTC()
}

// ScanOutbox reads room_outbox rows selected in the adapters' column order
// (id, event_id, room_id, room_version, seq, event_type, payload,
// owner_epoch, status, attempts, last_error, next_attempt_at, created_at,
// published_at) and closes rows. Errors are the driver's, unmapped.
func ScanOutbox(rows *sql.Rows) ([]outbox.Record, error) {
	defer rows.Close()
	var out []outbox.Record
	for rows.Next() {
		var r outbox.Record
		var next, created, published sql.NullInt64
		if err := rows.Scan(&r.ID, &r.EventID, &r.RoomID, &r.RoomVersion, &r.Seq, &r.EventType, &r.Payload,
			&r.OwnerEpoch, &r.Status, &r.Attempts, &r.LastError, &next, &created, &published); err != nil {
			return nil, err
		}
		r.NextAttemptAt, r.CreatedAt, r.PublishedAt = FromMillis(next), FromMillis(created), FromMillis(published)
		out = append(out, r)
	}
	return out, rows.Err()
}
