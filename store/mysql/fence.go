package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"hyapp/room-service/store"
)

// bulkFenceMinRooms is the number of rooms from which commitMerged fences
// with two statements for all rooms (fenceRooms) rather than one conditional
// UPDATE per batch. Each per-batch UPDATE is a round trip and a statement
// (about 130µs on loopback, several times that across a network); the bulk
// fence costs four round trips (two statements, each prepared for one use).
const bulkFenceMinRooms = 4

// maxFenceRooms caps the rooms of one fence statement.
const maxFenceRooms = 500

// fence decides every batch of order, in order, and advances the heads of
// the rooms whose batches pass. A batch that does not pass gets
// store.ErrFenced in results and writes nothing. It returns the batches that
// passed.
func (db *DB) fence(ctx context.Context, tx *sql.Tx, batches []store.Batch, order []int, results []error, now int64) ([]*store.Batch, error) {
	pass := make([]*store.Batch, 0, len(order))
	decide := func(i int, err error) error {
		b := &batches[i]
		switch {
		case err == nil:
			pass = append(pass, b)
		case errors.Is(err, store.ErrFenced):
			results[i] = fmt.Errorf("commit batch room=%s epoch=%d base=%d: %w", b.RoomID, b.OwnerEpoch, b.BaseVersion, err)
		default:
			return fmt.Errorf("room=%s: %w", b.RoomID, err)
		}
		return nil
	}
	if rooms := distinctRooms(batches, order); len(rooms) >= bulkFenceMinRooms {
		return pass, db.fenceRooms(ctx, tx, batches, order, rooms, now, decide)
	}
	stmt := tx.StmtContext(ctx, db.advanceFenced)
	for _, i := range order {
		if err := decide(i, advance(ctx, stmt, &batches[i], now)); err != nil {
			return nil, err
		}
	}
	return pass, nil
}

// distinctRooms lists the rooms of order, which is sorted by room id.
func distinctRooms(batches []store.Batch, order []int) []string {
	var rooms []string
	for _, i := range order {
		if id := batches[i].RoomID; len(rooms) == 0 || rooms[len(rooms)-1] != id {
			rooms = append(rooms, id)
		}
	}
	return rooms
}

// roomHead is a room's row as a bulk fence sees it, advanced by the batches
// that passed so far.
type roomHead struct {
	version, epoch int64
	status         string // the last status a passing batch set
	advanced       bool
}

// fenceRooms is the bulk fence: a locking read of every room's row (in id
// order, so concurrent commits lock in one order), the fence decided here
// batch by batch exactly as the conditional UPDATE decides it (owner epoch
// and head must match; a room's later batch sees its earlier ones), then
// one UPDATE of the rows that advanced. The rows stay locked from the read
// to the commit, so what was read is what the UPDATE changes.
func (db *DB) fenceRooms(ctx context.Context, tx *sql.Tx, batches []store.Batch, order []int, rooms []string, now int64, decide func(int, error) error) error {
	heads := make(map[string]*roomHead, len(rooms))
	for chunk := range chunks(rooms, maxFenceRooms) {
		q := `SELECT room_id, room_version, owner_epoch FROM rooms WHERE room_id IN (` + placeholders(len(chunk)) +
			`) ORDER BY room_id FOR UPDATE`
		rows, err := tx.QueryContext(ctx, q, anys(chunk)...)
		if err != nil {
			return mapErr(err)
		}
		for rows.Next() {
			var id string
			h := &roomHead{}
			if err := rows.Scan(&id, &h.version, &h.epoch); err != nil {
				_ = rows.Close()
				return mapErr(err)
			}
			heads[id] = h
		}
		if err := rows.Err(); err != nil {
			return mapErr(err)
		}
	}

	for _, i := range order {
		b := &batches[i]
		h := heads[b.RoomID]
		if h == nil || h.version != b.BaseVersion || h.epoch != b.OwnerEpoch {
			if err := decide(i, store.ErrFenced); err != nil {
				return err
			}
			continue
		}
		h.version, h.advanced = b.HeadVersion(), true
		if b.Status != "" {
			h.status = b.Status
		}
		if err := decide(i, nil); err != nil {
			return err
		}
	}

	var advanced []string
	for _, id := range rooms {
		if h := heads[id]; h != nil && h.advanced {
			advanced = append(advanced, id)
		}
	}
	for chunk := range chunks(advanced, maxFenceRooms) {
		if err := advanceRooms(ctx, tx, chunk, heads, now); err != nil {
			return err
		}
	}
	return nil
}

// advanceRooms writes the new head (and status, when set) of the locked rows of rooms.
func advanceRooms(ctx context.Context, tx *sql.Tx, rooms []string, heads map[string]*roomHead, now int64) error {
	var q strings.Builder
	args := make([]any, 0, 5*len(rooms)+1)
	q.WriteString(`UPDATE rooms SET room_version = CASE room_id`)
	for _, id := range rooms {
		q.WriteString(` WHEN ? THEN ?`)
		args = append(args, id, heads[id].version)
	}
	q.WriteString(` END`)
	withStatus := false
	for _, id := range rooms {
		if s := heads[id].status; s != "" {
			if !withStatus {
				q.WriteString(`, status = CASE room_id`)
				withStatus = true
			}
			q.WriteString(` WHEN ? THEN ?`)
			args = append(args, id, s)
		}
	}
	if withStatus {
		q.WriteString(` ELSE status END`)
	}
	q.WriteString(`, updated_at = ? WHERE room_id IN (` + placeholders(len(rooms)) + `)`)
	args = append(args, now)
	args = append(args, anys(rooms)...)
	res, err := tx.ExecContext(ctx, q.String(), args...)
	if err != nil {
		return mapErr(err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return mapErr(err)
	}
	if n != int64(len(rooms)) {
		// The rows are locked and rooms are never deleted: this is a bug or
		// a hand edit. Nothing is committed; the callers reload.
		return unavailable(fmt.Errorf("fence advanced %d of %d locked rooms", n, len(rooms)))
	}
	return nil
}

// chunks yields s in consecutive pieces of at most n.
func chunks[T any](s []T, n int) func(yield func([]T) bool) {
	return func(yield func([]T) bool) {
		for len(s) > 0 {
			c := s[:min(n, len(s))]
			s = s[len(c):]
			if !yield(c) {
				return
			}
		}
	}
}

func placeholders(n int) string {
	return "?" + strings.Repeat(", ?", n-1)
}

func anys(s []string) []any {
	out := make([]any, len(s))
	for i, v := range s {
		out[i] = v
	}
	return out
}
