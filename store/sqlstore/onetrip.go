package sqlstore

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"strings"
	"time"

	"hyapp/room-service/store"
)

// errNotOneTrip says a one-trip commit found what commitMerged decides
// batch by batch: a fence that matched fewer rooms than it advances, or a
// duplicate key (a room that exists, a command or event id stored
// before). The transaction is rolled back and the batches are committed
// again by commitMerged.
var errNotOneTrip = errors.New("the batches of a one-trip commit are decided one by one")

// oneTrip says whether the batches of order can commit in one trip
// (commitOneTrip): the dialect sends several statements as one query; no
// batch charges, settles, records gifts, sets or deletes timers or changes
// its room's roles, or its metadata unless it creates its room; a batch
// that creates its room is the room's first; each room's batches follow
// one another (a batch's base is its predecessor's head, at the same owner
// epoch); and the rows fit in Dialect.MaxBulkBytes. Anything else, rare
// next to the creates, joins, leaves and seat changes of rooms, takes
// commitMerged.
func (db *DB) oneTrip(batches []store.Batch, order []int) bool {
	if !db.d.MultiStatements || db.d.SingleWriter { // a single writer's marks ride its transactions
		return false
	}
	bytes := 0
	var prev *store.Batch
	for _, i := range order {
		b := &batches[i]
		if len(b.Charges) > 0 || len(b.Settle) > 0 || len(b.Gifts) > 0 || len(b.Timers) > 0 || len(b.DoneTimers) > 0 ||
			b.Roles != nil || (b.Meta != nil && b.CreatedBy == "") {
			return false
		}
		if prev != nil && prev.RoomID == b.RoomID &&
			(b.CreatedBy != "" || b.BaseVersion != prev.HeadVersion() || b.OwnerEpoch != prev.OwnerEpoch) {
			return false
		}
		prev = b
		if b.CreatedBy != "" {
			bytes += createdSize(b)
		}
		for j := range b.Commands {
			bytes += commandSize(&b.Commands[j])
		}
		for j := range b.Outbox {
			bytes += outboxSize(&b.Outbox[j])
		}
		if s := b.Snapshot; s != nil {
			bytes += len(s.RoomID) + len(s.Payload) + rowOverhead
		}
	}
	return db.d.MaxBulkBytes == 0 || bytes <= db.d.MaxBulkBytes
}

// commitOneTrip commits the batches of order, which must be oneTrip's, as
// one transaction that starts, writes and checks in one round trip and
// commits in a second (commitMerged takes one per statement: five to seven
// in such a commit, each about a millisecond on two busy cores). The query
// starts the transaction, inserts the rows of the rooms it creates (at
// their create batch's head, as commitMerged does), every command and
// outbox row, upserts the snapshots, and last runs the conditional UPDATE
// that advances the head of every room it did not create, at once,
// matching only the rooms whose head and owner epoch are the batches'.
// Its matched rows are the query's result: fewer than the rooms means some
// batch does not pass its fence; that, or a duplicate key, which stops the
// statements there, rolls the transaction back with errNotOneTrip, and
// the caller commits the batches by commitMerged, which decides each. A
// transaction the database rolled back whole runs again, as Tx runs it.
//
// The rows are written before the rooms' rows are locked. That is safe: a
// rival owner of a room (the only other writer of its rows) inserts the
// same command versions, so one of the two waits on the other's keys and
// then fails on a duplicate; and the rooms are locked in id order by one
// statement, so two commits sharing rooms cannot deadlock over them.
func (db *DB) commitOneTrip(ctx context.Context, batches []store.Batch, order []int) error {
	now := time.Now().UnixMilli()
	var q strings.Builder
	var args []any
	q.WriteString("START TRANSACTION;\n")
	ncreated, ncmd, nout := 0, 0, 0
	var snaps []*store.SnapshotRecord
	for _, i := range order {
		b := &batches[i]
		if b.CreatedBy != "" {
			ncreated++
		}
		ncmd += len(b.Commands)
		nout += len(b.Outbox)
		if b.Snapshot != nil {
			snaps = append(snaps, b.Snapshot)
		}
	}
	if ncreated > 0 {
		q.WriteString(db.stmts.insertCreated.query(ncreated))
		for _, i := range order {
			if b := &batches[i]; b.CreatedBy != "" {
				args = createdArgs(args, b, now, true)
			}
		}
		q.WriteString(";\n")
	}
	if ncmd > 0 {
		q.WriteString(db.stmts.mergedCommands.query(ncmd))
		for _, i := range order {
			for j := range batches[i].Commands {
				args = commandArgs(args, &batches[i].Commands[j], now)
			}
		}
		q.WriteString(";\n")
	}
	if nout > 0 {
		q.WriteString(db.stmts.mergedOutbox.query(nout))
		for _, i := range order {
			b := &batches[i]
			for j := range b.Outbox {
				args = outboxArgs(args, &b.Outbox[j], b.OwnerEpoch, now)
			}
		}
		q.WriteString(";\n")
	}
	if len(snaps) > 0 {
		q.WriteString(db.stmts.mergedSnapshots.query(len(snaps)))
		for _, s := range snaps {
			args = append(args, s.RoomID, s.RoomVersion, s.Payload, millis(s.CreatedAt, now))
		}
		q.WriteString(";\n")
	}
	rooms := advanceFence(&q, &args, batches, order, now)
	query := strings.TrimSuffix(q.String(), ";\n")
	return retry(ctx, func() error { return db.tryOneTrip(ctx, query, args, rooms) })
}

// tryOneTrip runs query, which starts a transaction and ends with the
// fence of rooms rooms, on a connection of its own, and commits it when
// the fence matched them all. Whatever fails, the transaction is rolled
// back, or the connection is closed so that the server rolls it back.
func (db *DB) tryOneTrip(ctx context.Context, query string, args []any, rooms int) (err error) {
	conn, err := db.write.Conn(ctx)
	if err != nil {
		return db.d.MapErr(err)
	}
	defer conn.Close()
	committed := false
	defer func() {
		if committed {
			return
		}
		// A connection whose ROLLBACK failed may still hold the
		// transaction: it must not go back to the pool.
		if _, rerr := conn.ExecContext(context.WithoutCancel(ctx), "ROLLBACK"); rerr != nil {
			_ = conn.Raw(func(any) error { return driver.ErrBadConn })
		}
	}()
	res, err := conn.ExecContext(ctx, query, args...)
	if err = db.d.MapErr(err); errors.Is(err, store.ErrConflict) {
		return fmt.Errorf("%w: %w", errNotOneTrip, err)
	}
	if err != nil {
		return err
	}
	if rooms > 0 {
		n, err := res.RowsAffected() // the last statement's: the fence
		if err != nil {
			return db.d.MapErr(err)
		}
		if n != int64(rooms) {
			return fmt.Errorf("%w: the fence matched %d of %d rooms", errNotOneTrip, n, rooms)
		}
	}
	if _, err := conn.ExecContext(ctx, "COMMIT"); err != nil {
		// Whether it committed is unknown: the connection goes.
		committed = true
		_ = conn.Raw(func(any) error { return driver.ErrBadConn })
		return db.d.MapErr(err)
	}
	committed = true
	return nil
}

// advanceFence writes to q, with its arguments, the conditional UPDATE of
// commitOneTrip: each room of order (sorted by room id) goes from its
// first batch's base to its last batch's head, with the status its last
// batch with one sets, only where the row is at that base and owner epoch.
// A create batch moves nothing (its row is inserted at its head): a room's
// later batches move on from there. It returns the number of rooms, and
// writes nothing for none.
func advanceFence(q *strings.Builder, args *[]any, batches []store.Batch, order []int, now int64) int {
	var rooms []roomMove
	for _, i := range order {
		b := &batches[i]
		if b.CreatedBy != "" {
			continue
		}
		if n := len(rooms); n > 0 && rooms[n-1].id == b.RoomID {
			rooms[n-1].head = b.HeadVersion()
			if b.Status != "" {
				rooms[n-1].status = b.Status
			}
			continue
		}
		rooms = append(rooms, roomMove{id: b.RoomID, base: b.BaseVersion, head: b.HeadVersion(), epoch: b.OwnerEpoch, status: b.Status})
	}
	switch len(rooms) {
	case 0:
		return 0
	case 1:
		r := rooms[0]
		q.WriteString(`UPDATE rooms SET room_version = ?, updated_at = ?, status = COALESCE(NULLIF(?, ''), status)
			WHERE room_id = ? AND room_version = ? AND owner_epoch = ?`)
		*args = append(*args, r.head, now, r.status, r.id, r.base, r.epoch)
		return 1
	}
	*args = writeMoves(q, *args, rooms, now, true)
	return len(rooms)
}
