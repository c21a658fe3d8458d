package sqlstore

import (
	"context"
	"database/sql"
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
// batch settles charges made before it, sets or deletes timers or changes
// its room's roles, or its metadata unless it creates its room; a batch
// that creates its room is the room's first; each room's batches follow
// one another (a batch's base is its predecessor's head, at the same owner
// epoch); and the rows fit in Dialect.MaxBulkBytes. Anything else, rare
// next to the creates, joins, leaves, seat changes and gifts of rooms,
// takes commitMerged.
func (db *DB) oneTrip(batches []store.Batch, order []int) bool {
	if !db.d.MultiStatements || db.d.SingleWriter { // a single writer's marks ride its transactions
		return false
	}
	bytes := 0
	var prev *store.Batch
	for _, i := range order {
		b := &batches[i]
		if len(b.Settle) > 0 || len(b.Timers) > 0 || len(b.DoneTimers) > 0 || b.Roles != nil || (b.Meta != nil && b.CreatedBy == "") {
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
		// A gift's record, and the ledger's account, entry and charge rows.
		bytes += (len(b.Gifts) + 3*len(b.Charges)) * 2 * rowOverhead
	}
	return db.d.MaxBulkBytes == 0 || bytes <= db.d.MaxBulkBytes
}

// tripQuery is the query of a one-trip commit: its statements, one after
// another, and their arguments.
type tripQuery struct {
	q    strings.Builder
	args []any
}

// add appends a statement and its arguments.
func (t *tripQuery) add(query string, args ...any) {
	t.q.WriteString(query)
	t.q.WriteString(";\n")
	t.args = append(t.args, args...)
}

// commitOneTrip commits the batches of order, which must be oneTrip's, in
// one transaction whose writes, and the fence, go as one query: two round
// trips in all (the query, which starts the transaction, and COMMIT), or,
// when the batches charge gifts, four (START TRANSACTION, the ledger's
// locking read of its accounts, whose balances decide the charges, the
// query and COMMIT). commitMerged takes one per statement: five to seven,
// eleven with gifts, each about a millisecond on two busy cores.
//
// The query inserts the rows of the rooms it creates (at their create
// batch's head, as commitMerged does), every command and outbox row, the
// gift records and the ledger's rows, upserts the snapshots, and last runs
// the conditional UPDATE that advances the head of every room it did not
// create, at once, matching only the rooms whose head and owner epoch are
// the batches'. Its matched rows are the query's result: fewer than the
// rooms means some batch does not pass its fence; that, or a duplicate
// key, which stops the statements there, rolls the transaction back with
// errNotOneTrip, and the caller commits the batches by commitMerged, which
// decides each; so does a charge the ledger refuses (a StaleCharge), before
// the query is sent. A transaction the database rolled back whole runs
// again, as Tx runs it.
//
// The rows are written before the rooms' rows are locked. That is safe: a
// rival owner of a room (the only other writer of its rows) inserts the
// same command versions, so one of the two waits on the other's keys and
// then fails on a duplicate; and the rooms are locked in id order by one
// statement, so two commits sharing rooms cannot deadlock over them.
func (db *DB) commitOneTrip(ctx context.Context, batches []store.Batch, order []int) error {
	charges := false
	for _, i := range order {
		charges = charges || len(batches[i].Charges) > 0
	}
	if charges {
		return db.Tx(ctx, func(tx *sql.Tx) error {
			t := &tripQuery{}
			rooms, err := db.tripWrites(ctx, &CommitTx{tx: tx, trip: t}, batches, order)
			if err != nil {
				return err
			}
			res, err := tx.ExecContext(ctx, strings.TrimSuffix(t.q.String(), ";\n"), t.args...)
			return db.tripDone(res, err, rooms)
		})
	}
	t := &tripQuery{}
	t.q.WriteString("START TRANSACTION;\n")
	rooms, err := db.tripWrites(ctx, &CommitTx{trip: t}, batches, order)
	if err != nil {
		return err
	}
	query := strings.TrimSuffix(t.q.String(), ";\n")
	return retry(ctx, func() error { return db.tryOneTrip(ctx, query, t.args, rooms) })
}

// tripWrites adds to ct's trip the writes of the batches of order and the
// fence, last, and returns the number of rooms the fence advances. The
// embedded ledger reads on ct's transaction, when there is one; without
// one, the batches must charge nothing.
func (db *DB) tripWrites(ctx context.Context, ct *CommitTx, batches []store.Batch, order []int) (int, error) {
	now := time.Now().UnixMilli()
	t := ct.trip
	var created, commands, events, gifts []any
	var charges []store.GiftCharge
	ncreated, ncmd, nout, ngifts := 0, 0, 0, 0
	var snaps []any
	nsnaps := 0
	for _, i := range order {
		b := &batches[i]
		if b.CreatedBy != "" {
			created = createdArgs(created, b, now, true)
			ncreated++
		}
		for j := range b.Commands {
			commands = commandArgs(commands, &b.Commands[j], now)
		}
		ncmd += len(b.Commands)
		for j := range b.Outbox {
			events = outboxArgs(events, &b.Outbox[j], b.OwnerEpoch, now)
		}
		nout += len(b.Outbox)
		for j := range b.Gifts {
			gifts = giftRecordArgs(gifts, &b.Gifts[j])
		}
		ngifts += len(b.Gifts)
		charges = append(charges, b.Charges...)
		if s := b.Snapshot; s != nil {
			snaps = snapshotArgs(snaps, s, now)
			nsnaps++
		}
	}
	if ncreated > 0 {
		t.add(db.stmts.insertCreated.query(ncreated), created...)
	}
	if ncmd > 0 {
		t.add(db.stmts.mergedCommands.query(ncmd), commands...)
	}
	if nout > 0 {
		t.add(db.stmts.mergedOutbox.query(nout), events...)
	}
	if ngifts > 0 {
		t.add(giftRecordsInsert(db.d.InsertOrRollback(), ngifts), gifts...)
	}
	if len(charges) > 0 {
		ledger := db.ledger.Load()
		if ledger == nil || ct.tx == nil {
			return 0, fmt.Errorf("%d gift charges to make and no ledger: %w", len(charges), store.ErrConflict)
		}
		if err := ledger.Write(ctx, ct, db.d.InsertOrRollback(), charges, nil, now); errors.Is(err, store.ErrConflict) {
			// The ledger was given the charges of every batch, before
			// any was fenced: a refusal (a balance that moved) may name
			// a batch the fence would refuse. commitMerged fences first
			// and gives it only the batches that pass.
			return 0, fmt.Errorf("%w: %v", errNotOneTrip, err)
		} else if err != nil {
			return 0, err
		}
	}
	if nsnaps > 0 {
		t.add(db.stmts.mergedSnapshots.query(nsnaps), snaps...)
	}
	return advanceFence(&t.q, &t.args, batches, order, now), nil
}

// tripDone decides a trip from its query's result: errNotOneTrip for a
// duplicate key or a fence that matched fewer than rooms rooms.
func (db *DB) tripDone(res sql.Result, err error, rooms int) error {
	if err = db.d.MapErr(err); errors.Is(err, store.ErrConflict) {
		return fmt.Errorf("%w: %w", errNotOneTrip, err)
	}
	if err != nil || rooms == 0 {
		return err
	}
	n, err := res.RowsAffected() // the last statement's: the fence
	if err != nil {
		return db.d.MapErr(err)
	}
	if n != int64(rooms) {
		return fmt.Errorf("%w: the fence matched %d of %d rooms", errNotOneTrip, n, rooms)
	}
	return nil
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
	if err := db.tripDone(res, err, rooms); err != nil {
		return err
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
		q.WriteString(advanceFencedSQL)
		*args = append(*args, r.head, now, r.status, r.id, r.base, r.epoch)
		return 1
	}
	*args = writeMoves(q, *args, rooms, now, true)
	return len(rooms)
}
