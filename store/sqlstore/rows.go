package sqlstore

// How rows map to records and back, and the checks a batch passes before
// any SQL runs.

import (
	"cmp"
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"time"

	"hyapp/room-service/outbox"
	"hyapp/room-service/store"
)

type scanner interface{ Scan(dest ...any) error }

// validateBatch checks a batch before any SQL runs: its commands follow its
// base version and every row names its room. A failure is store.ErrConflict.
func validateBatch(b *store.Batch) error {
	if b.CreatedBy != "" && (b.Meta == nil || b.BaseVersion != 0 || b.Meta.RoomID != b.RoomID) {
		return fmt.Errorf("a batch creating its room needs its metadata and base version 0: %w", store.ErrConflict)
	}
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
	for i := range b.Timers {
		t := &b.Timers[i]
		if t.RoomID != b.RoomID {
			return fmt.Errorf("timer %s names room %s: %w", t.TimerID, t.RoomID, store.ErrConflict)
		}
		if t.TimerID == "" {
			return fmt.Errorf("timer without an id: %w", store.ErrConflict)
		}
	}
	for _, id := range b.DoneTimers {
		if id == "" {
			return fmt.Errorf("done timer without an id: %w", store.ErrConflict)
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

// scanCommand reads a row selected as commandColumns.
func scanCommand(s scanner) (store.CommandRecord, error) {
	var c store.CommandRecord
	var created sql.NullInt64
	err := s.Scan(&c.RoomID, &c.RoomVersion, &c.CommandID, &c.CommandType, &c.Payload, &c.Replayable, &created)
	c.CreatedAt = fromMillis(created)
	return c, err
}

// outboxArgs appends one room_outbox row. A zero CreatedAt becomes now and a
// zero NextAttemptAt becomes CreatedAt, so a new row is due at once.
func outboxArgs(dst []any, r *outbox.Record, epoch int64, now int64) []any {
	created := millis(r.CreatedAt, now)
	var trace any // NULL: not traced
	if r.TraceContext != "" {
		trace = r.TraceContext
	}
	return append(dst, r.EventID, r.RoomID, r.RoomVersion, r.Seq, r.EventType, r.Payload, epoch,
		millis(r.NextAttemptAt, created), created, trace)
}

// commandArgs appends one room_command_log row; a zero CreatedAt becomes now.
func commandArgs(dst []any, c *store.CommandRecord, now int64) []any {
	return append(dst, c.RoomID, c.RoomVersion, c.CommandID, c.CommandType, c.Payload, c.Replayable, millis(c.CreatedAt, now))
}

// collectCommands calls each for every row selected as commandColumns and
// closes rows. Errors are the driver's, unmapped.
func collectCommands(rows *sql.Rows, each func(store.CommandRecord)) error {
	defer rows.Close()
	for rows.Next() {
		c, err := scanCommand(rows)
		if err != nil {
			return err
		}
		each(c)
	}
	return rows.Err()
}

// millis converts t to the stored unix milliseconds; the zero time is def.
func millis(t time.Time, def int64) int64 {
	if t.IsZero() {
		return def
	}
	return t.UnixMilli()
}

// fromMillis converts stored unix milliseconds back; 0 or NULL is the zero time.
func fromMillis(ms sql.NullInt64) time.Time {
	if !ms.Valid || ms.Int64 == 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms.Int64).UTC()
}

// scanOutbox reads room_outbox rows selected in outboxColumns order
// (id, event_id, room_id, room_version, seq, event_type, payload,
// owner_epoch, status, attempts, last_error, next_attempt_at, created_at,
// published_at, trace_context): one row, for ScanAll. Errors are the driver's, unmapped.
func scanOutbox(rows *sql.Rows) (outbox.Record, error) {
	var r outbox.Record
	var next, created, published sql.NullInt64
	var trace sql.NullString
	err := rows.Scan(&r.ID, &r.EventID, &r.RoomID, &r.RoomVersion, &r.Seq, &r.EventType, &r.Payload,
		&r.OwnerEpoch, &r.Status, &r.Attempts, &r.LastError, &next, &created, &published, &trace)
	r.Status = strings.TrimRight(r.Status, " ") // a pending row's status may be padded (Dialect.PadPending)
	r.TraceContext = trace.String
	r.NextAttemptAt, r.CreatedAt, r.PublishedAt = fromMillis(next), fromMillis(created), fromMillis(published)
	return r, err
}

// timerColumns are the room_timers columns timerArgs writes and scanTimers reads, in order.
const timerColumns = `room_id, timer_id, kind, fire_at_ms, payload, created_at`

// timerArgs appends one room_timers row. A zero FireAt or CreatedAt becomes now.
func timerArgs(dst []any, t *store.Timer, now int64) []any {
	return append(dst, t.RoomID, t.TimerID, t.Kind, millis(t.FireAt, now), t.Payload, millis(t.CreatedAt, now))
}

// scanTimers reads a room_timers row selected as timerColumns, for
// ScanAll. Errors are the driver's, unmapped.
func scanTimers(rows *sql.Rows) (store.Timer, error) {
	var t store.Timer
	var fire, created sql.NullInt64
	err := rows.Scan(&t.RoomID, &t.TimerID, &t.Kind, &fire, &t.Payload, &created)
	t.FireAt, t.CreatedAt = fromMillis(fire), fromMillis(created)
	return t, err
}

// timerDeletes are the timer ids of one room to delete.
type timerDeletes struct {
	RoomID   string
	TimerIDs []string
}

// mergeTimers folds the timer changes of batches that commit together, in
// order, into their net effect: each batch deletes its DoneTimers, then sets
// its Timers, and a later change of a (room, timer id) overrides an earlier
// one. It returns the deletes by room and the timers to set (each replacing
// a stored one of the same id), both in (room id, timer id) order, so that
// writers touch rows in one order.
func mergeTimers(batches []*store.Batch) (deletes []timerDeletes, sets []*store.Timer) {
	type key struct{ room, id string }
	var final map[key]*store.Timer // nil value: deleted
	for _, b := range batches {
		if len(b.DoneTimers) == 0 && len(b.Timers) == 0 {
			continue
		}
		if final == nil {
			final = make(map[key]*store.Timer)
		}
		for _, id := range b.DoneTimers {
			final[key{b.RoomID, id}] = nil
		}
		for i := range b.Timers {
			final[key{b.RoomID, b.Timers[i].TimerID}] = &b.Timers[i]
		}
	}
	if len(final) == 0 {
		return nil, nil
	}
	keys := make([]key, 0, len(final))
	for k := range final {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b key) int { return cmp.Or(cmp.Compare(a.room, b.room), cmp.Compare(a.id, b.id)) })
	for _, k := range keys {
		if t := final[k]; t != nil {
			sets = append(sets, t)
			continue
		}
		if n := len(deletes); n == 0 || deletes[n-1].RoomID != k.room {
			deletes = append(deletes, timerDeletes{RoomID: k.room})
		}
		d := &deletes[len(deletes)-1]
		d.TimerIDs = append(d.TimerIDs, k.id)
	}
	return deletes, sets
}
