package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"hyapp/room-service/outbox"
	"hyapp/room-service/store"
)

// errDuplicate reports that the merged INSERTs of CommitBatches hit a
// duplicate key: the batches are committed again one by one.
var errDuplicate = errors.New("duplicate key in a merged insert")

// StaleCharge is the ledger's refusal (LedgerFunc) of the gift charge Key:
// its sender's balance is not the one the room decided it on. It wraps
// store.ErrConflict. A merged commit refused so is run again without the
// batch that makes the charge, instead of one batch at a time.
type StaleCharge struct {
	Key string
	Err error // the reason, with store.ErrConflict in its chain
}

func (e *StaleCharge) Error() string { return e.Err.Error() }
func (e *StaleCharge) Unwrap() error { return e.Err }

// maxStaleRetries bounds the merged commits run again, each without one
// more batch refused for a stale charge, before the batches commit one by
// one.
const maxStaleRetries = 4

// CommitBatches commits the batches in one transaction, so one durable
// commit covers them all. Each batch is fenced on its own:
//   - a batch whose commands are not versions BaseVersion+1.. in order, or
//     whose commands, outbox rows or snapshot name another room, or whose
//     snapshot is beyond its head, is store.ErrConflict and writes nothing;
//   - a batch whose room is missing or whose owner epoch or head differs from
//     the batch's is store.ErrFenced and writes nothing;
//   - a batch that hits a duplicate command id or event id, or whose gift
//     charges are no longer pending, is store.ErrConflict and writes nothing;
//   - otherwise it advances the head, sets the status when given, appends
//     its commands and pending outbox rows (stamped with the batch's owner
//     epoch), settles its gift charges, deletes its done timers, sets its
//     timers and stores its snapshot unless one of the same or a higher
//     version is stored, or the snapshot is too large for the database to
//     take in one statement (Dialect.MaxPacketBytes).
//
// Later batches of a room see its earlier ones, so consecutive batches of
// one room commit together. The fast path fences every batch (see fence)
// and then writes all rows with a few multi-row INSERTs; a duplicate key
// there rolls it back and commits the batches again one by one, each in a
// savepoint behind a conditional UPDATE, so that only the batch holding
// the duplicate is refused. A gift charge the ledger refuses as decided on
// a balance that moved (StaleCharge) refuses its batch alone: the merged
// transaction runs again without it (unless the batch creates its room, or
// past maxStaleRetries: then one by one). Rooms are fenced in id order, whatever order
// the caller used, so two commits sharing rooms lock them in one order.
// A transaction the database rolled back whole runs again (see Tx).
// A non-nil err means the transaction did not commit, or may not have: no
// batch is known to be committed.
func (db *DB) CommitBatches(ctx context.Context, batches []store.Batch) ([]error, error) {
	if len(batches) == 0 {
		return nil, nil
	}
	checked := make([]error, len(batches))
	order := make([]int, 0, len(batches))
	cloned := false
	for i := range batches {
		if err := validateBatch(&batches[i]); err != nil {
			checked[i] = fmt.Errorf("commit batch room=%s base=%d: %w", batches[i].RoomID, batches[i].BaseVersion, err)
			continue
		}
		if !db.snapshotFits(batches[i].Snapshot) {
			// Sent, it would fail the transaction of every batch here,
			// and again at each of its room's commits: the batch commits
			// without it, and its room recovers from the snapshot before
			// and a longer replay.
			if !cloned {
				batches, cloned = slices.Clone(batches), true
			}
			batches[i].Snapshot = nil
		}
		order = append(order, i)
	}
	if len(order) == 0 {
		return checked, nil
	}
	// The sort is stable: one room's batches keep their order.
	sort.SliceStable(order, func(a, b int) bool { return batches[order[a]].RoomID < batches[order[b]].RoomID })

	results := make([]error, len(batches))
	var marks []*mark
	stored := errNotTaken
	if db.d.SingleWriter {
		var start time.Time
		marks, start = db.marks.take()
		// The marks' callers hear back however this ends, a panic
		// included: stored only when the transaction committed.
		defer func() { db.marks.finish(marks, start, stored) }()
	}
	// commit runs one transaction of the batches of order but those
	// refused so far (their results are set).
	refused := map[int]error{}
	commit := func(write func(context.Context, *sql.Tx, []store.Batch, []int, []error) error) error {
		return db.Tx(ctx, func(tx *sql.Tx) error {
			ctx := db.statementContext(ctx)
			copy(results, checked)
			left := make([]int, 0, len(order))
			for _, i := range order {
				if err, ok := refused[i]; ok {
					results[i] = err
				} else {
					left = append(left, i)
				}
			}
			if len(left) > 0 {
				if err := write(ctx, tx, batches, left, results); err != nil {
					return err
				}
			}
			return db.markIn(ctx, tx, marks)
		})
	}
	var err error
	path, declined := PathMerged, false
	if db.oneTrip(batches, order) { // never with marks: they need a single writer
		path = PathOneTrip
		err = db.commitOneTrip(ctx, batches, order)
		if err == nil {
			copy(results, checked)
		} else if errors.Is(err, errNotOneTrip) {
			path, declined = PathMerged, true
			err = commit(db.commitMerged) // decided batch by batch
		}
	} else {
		err = commit(db.commitMerged)
	}
	for range maxStaleRetries {
		// A sender's balance moved since its room decided a gift: that
		// batch alone is refused and the others commit merged.
		var stale *StaleCharge
		if !errors.As(err, &stale) {
			break
		}
		at := chargingBatch(batches, order, results, stale.Key)
		if at < 0 {
			break
		}
		// The ledger decided the batches after this one on the balances
		// this one's charges left: their refusals are decided again.
		for _, i := range order[at+1:] {
			delete(refused, i)
		}
		b := &batches[order[at]]
		refused[order[at]] = fmt.Errorf("commit batch room=%s epoch=%d base=%d: %w", b.RoomID, b.OwnerEpoch, b.BaseVersion, stale)
		err = commit(db.commitMerged)
	}
	if errors.Is(err, errDuplicate) {
		// One by one, every batch is decided again on what the batches
		// before it committed: a refusal above may rest on a charge that
		// will not be made.
		clear(refused)
		path = PathOneByOne
		err = commit(db.commitIsolated)
	}
	if err != nil {
		return nil, fmt.Errorf("commit batches: %w", err)
	}
	if f := db.committed.Load(); f != nil {
		(*f)(path, declined)
	}
	stored = nil
	db.ledgerCommitted(batches, order, results)
	return results, nil
}

// snapshotArgs appends the values of s's row; a zero CreatedAt becomes now.
func snapshotArgs(dst []any, s *store.SnapshotRecord, now int64) []any {
	return append(dst, s.RoomID, s.RoomVersion, s.Payload, millis(s.CreatedAt, now))
}

// createdArgs appends the row of the room b creates: at version 0,
// creating, or with atHead at b's head and status.
func createdArgs(dst []any, b *store.Batch, now int64, atHead bool) []any {
	m := b.Meta
	version, status := int64(0), statusCreating
	if atHead {
		version = b.HeadVersion()
		if b.Status != "" {
			status = b.Status
		}
	}
	return append(dst, b.RoomID, m.OwnerUserID, m.HostUserID, m.SeatCount, m.Mode, status, version, b.OwnerEpoch, b.CreatedBy, now, now)
}

// createdSize estimates the bytes of the row of the room b creates.
func createdSize(b *store.Batch) int {
	return len(b.RoomID) + len(b.Meta.Mode) + len(b.CreatedBy) + rowOverhead
}

// chargingBatch returns the position in order of the batch that makes
// the gift charge key, among those the ledger was given (no result yet:
// not refused, not fenced), or -1. A batch that creates its room is not
// refused on its own (-1): refused one by one, it leaves its room's row,
// as a cell that reloads expects.
func chargingBatch(batches []store.Batch, order []int, results []error, key string) int {
	for at, i := range order {
		if results[i] != nil {
			continue
		}
		for _, c := range batches[i].Charges {
			if c.Key == key {
				if batches[i].CreatedBy != "" {
					return -1
				}
				return at
			}
		}
	}
	return -1
}

// ledgerCommitted tells the ledger the gift charges of the batches of
// order that committed (LedgerHooks.Committed).
func (db *DB) ledgerCommitted(batches []store.Batch, order []int, results []error) {
	h := db.ledger.Load()
	if h == nil || h.Committed == nil {
		return
	}
	var charges []store.GiftCharge
	for _, i := range order {
		if results[i] == nil {
			charges = append(charges, batches[i].Charges...)
		}
	}
	if len(charges) > 0 {
		h.Committed(charges)
	}
}

// outboxRow is one outbox record of a batch, with the batch's owner epoch.
type outboxRow struct {
	r     *outbox.Record
	epoch int64
}

// commitMerged is the fast path of CommitBatches: fence every batch (see
// fence), then write all their rows with a few large multi-row INSERTs. It
// returns errDuplicate when a duplicate key or a charge no longer pending
// refuses the merged writes; the caller rolls back and isolates the batches.
func (db *DB) commitMerged(ctx context.Context, tx *sql.Tx, batches []store.Batch, order []int, results []error) error {
	now := time.Now().UnixMilli() // after the wait for the writer
	order, err := db.create(ctx, tx, batches, order, results, now, true)
	if err != nil {
		return err
	}
	pass, err := db.fence(ctx, tx, batches, order, results, now)
	if err != nil {
		return err
	}
	if len(pass) == 0 {
		return nil
	}
	var commands []*store.CommandRecord
	var events []outboxRow
	for _, b := range pass {
		for j := range b.Commands {
			commands = append(commands, &b.Commands[j])
		}
		for j := range b.Outbox {
			events = append(events, outboxRow{&b.Outbox[j], b.OwnerEpoch})
		}
	}
	// A duplicate key in these INSERTs may roll the transaction back
	// whole (Dialect.InsertOrRollback): nothing may run after it.
	err = db.stmts.mergedCommands.exec(ctx, tx, db.d.MapErr, len(commands),
		func(i int) int { return commandSize(commands[i]) },
		func(dst []any, i int) []any { return commandArgs(dst, commands[i], now) })
	if err == nil {
		err = db.stmts.mergedOutbox.exec(ctx, tx, db.d.MapErr, len(events),
			func(i int) int { return outboxSize(events[i].r) },
			func(dst []any, i int) []any { return outboxArgs(dst, events[i].r, events[i].epoch, now) })
	}
	if err == nil {
		err = db.writeTimersAndSettles(ctx, tx, db.d.InsertOrRollback(), pass, now)
	}
	if errors.Is(err, store.ErrConflict) {
		return fmt.Errorf("%w: %w", errDuplicate, err) // isolate the batches: only the refused one fails
	}
	if err != nil {
		return err
	}
	var snaps []*store.SnapshotRecord
	for _, b := range pass {
		if err := db.saveBatchMeta(ctx, tx, b); err != nil {
			return fmt.Errorf("room=%s: %w", b.RoomID, err)
		}
		if b.Snapshot != nil {
			snaps = append(snaps, b.Snapshot)
		}
	}
	// One statement for every snapshot: a round trip on MySQL, instead of
	// an UPDATE per room (and an INSERT for a room with none yet).
	return db.stmts.mergedSnapshots.exec(ctx, tx, db.d.MapErr, len(snaps),
		func(i int) int { return len(snaps[i].RoomID) + len(snaps[i].Payload) + rowOverhead },
		func(dst []any, i int) []any {
			return snapshotArgs(dst, snaps[i], now)
		})
}

// commitIsolated commits each batch in its own savepoint.
func (db *DB) commitIsolated(ctx context.Context, tx *sql.Tx, batches []store.Batch, order []int, results []error) error {
	now := time.Now().UnixMilli()
	order, err := db.create(ctx, tx, batches, order, results, now, false)
	if err != nil {
		return err
	}
	fence := tx.StmtContext(ctx, db.stmts.advanceFenced)
	update, insert := tx.StmtContext(ctx, db.stmts.updateSnapshot), tx.StmtContext(ctx, db.stmts.insertSnapshot)
	for _, i := range order {
		b := &batches[i]
		if _, err := tx.ExecContext(ctx, `SAVEPOINT batch`); err != nil {
			return db.d.MapErr(err)
		}
		err := db.advance(ctx, fence, b, now)
		if err == nil {
			err = db.writeRows(ctx, tx, update, insert, b, now)
		}
		switch {
		case err == nil:
		case errors.Is(err, store.ErrFenced) || errors.Is(err, store.ErrConflict):
			// This batch alone is refused: undo what it wrote, keep the others.
			results[i] = fmt.Errorf("commit batch room=%s epoch=%d base=%d: %w", b.RoomID, b.OwnerEpoch, b.BaseVersion, err)
			if _, err := tx.ExecContext(ctx, `ROLLBACK TO SAVEPOINT batch`); err != nil {
				return db.d.MapErr(err)
			}
		default:
			return fmt.Errorf("room=%s: %w", b.RoomID, err)
		}
		if _, err := tx.ExecContext(ctx, `RELEASE SAVEPOINT batch`); err != nil {
			return db.d.MapErr(err)
		}
	}
	return nil
}

// statusCreating is the status of a room row inserted before its create
// batch is fenced.
const statusCreating = "creating"

// create inserts the rows of the rooms that batches of order create (see
// store.Batch.CreatedBy), claimed at the batch's owner epoch with the
// batch's metadata, and returns order without the batches of rooms that
// already had a row: those, and every other batch of their rooms, get
// store.ErrFenced in results. With atHead a row is inserted at its batch's
// head and status, the batch passed by the insert itself (see fence): for
// the merged path, where any refusal undoes the whole transaction.
// Otherwise it is inserted at version 0, creating, then fenced and advanced
// like any other, so a batch refused later in its savepoint leaves an
// empty room, never a head without its commands.
func (db *DB) create(ctx context.Context, tx *sql.Tx, batches []store.Batch, order []int, results []error, now int64, atHead bool) ([]int, error) {
	var created []*store.Batch
	for _, i := range order {
		if b := &batches[i]; b.CreatedBy != "" {
			created = append(created, b)
		}
	}
	if len(created) == 0 {
		return order, nil
	}
	insert := func(rows []*store.Batch) (int, error) {
		return db.stmts.insertCreated.insert(ctx, tx, db.d.MapErr, len(rows),
			func(i int) int { return createdSize(rows[i]) },
			func(dst []any, i int) []any { return createdArgs(dst, rows[i], now, atHead) })
	}
	// All rows in as few statements as fit, the usual case. A room that
	// exists refuses its statement alone (a duplicate key undoes the
	// statement, not the transaction): the rows of the statements before
	// it are in, and from its first row on they go one by one to find it.
	done, err := insert(created)
	switch {
	case err == nil:
		return order, nil
	case !errors.Is(err, store.ErrConflict):
		return nil, fmt.Errorf("create %d rooms: %w", len(created), err)
	}
	var exists map[string]bool
	for _, b := range created[done:] {
		_, err := insert([]*store.Batch{b})
		switch {
		case err == nil:
		case errors.Is(err, store.ErrConflict):
			if exists == nil {
				exists = make(map[string]bool)
			}
			exists[b.RoomID] = true
		default:
			return nil, fmt.Errorf("create room=%s: %w", b.RoomID, err)
		}
	}
	if exists == nil {
		return order, nil
	}
	kept := make([]int, 0, len(order))
	for _, i := range order {
		if b := &batches[i]; exists[b.RoomID] {
			results[i] = fmt.Errorf("commit batch room=%s creating the room: it exists: %w", b.RoomID, store.ErrFenced)
			continue
		}
		kept = append(kept, i)
	}
	return kept, nil
}

// writeRows writes a fenced batch's commands, outbox rows, settles, timers,
// metadata and snapshot.
func (db *DB) writeRows(ctx context.Context, tx *sql.Tx, update, insert *sql.Stmt, b *store.Batch, now int64) error {
	err := db.stmts.insertCommands.exec(ctx, tx, db.d.MapErr, len(b.Commands),
		func(i int) int { return commandSize(&b.Commands[i]) },
		func(dst []any, i int) []any { return commandArgs(dst, &b.Commands[i], now) })
	if err != nil {
		return err
	}
	err = db.stmts.insertOutbox.exec(ctx, tx, db.d.MapErr, len(b.Outbox),
		func(i int) int { return outboxSize(&b.Outbox[i]) },
		func(dst []any, i int) []any { return outboxArgs(dst, &b.Outbox[i], b.OwnerEpoch, now) })
	if err != nil {
		return err
	}
	if err := db.writeTimersAndSettles(ctx, tx, "INSERT INTO ", []*store.Batch{b}, now); err != nil {
		return err
	}
	return db.saveBatchSnapshot(ctx, tx, update, insert, b, now)
}

// saveBatchSnapshot writes the batch's room metadata when it carries some
// (a batch that created its room inserted it already), and its snapshot
// unless a newer one is stored.
func (db *DB) saveBatchSnapshot(ctx context.Context, tx *sql.Tx, update, insert *sql.Stmt, b *store.Batch, now int64) error {
	if err := db.saveBatchMeta(ctx, tx, b); err != nil {
		return err
	}
	if b.Snapshot != nil {
		return db.saveSnapshot(ctx, update, insert, b.Snapshot, now)
	}
	return nil
}

// saveBatchMeta writes the batch's room metadata and roles when it
// carries some (a batch that created its room inserted them already).
func (db *DB) saveBatchMeta(ctx context.Context, tx *sql.Tx, b *store.Batch) error {
	if m := b.Meta; m != nil && b.CreatedBy == "" {
		if _, err := tx.ExecContext(ctx, `UPDATE rooms SET owner_user_id = ?, host_user_id = ?, seat_count = ?, mode = ? WHERE room_id = ?`,
			m.OwnerUserID, m.HostUserID, m.SeatCount, m.Mode, b.RoomID); err != nil {
			return db.d.MapErr(err)
		}
	}
	if r := b.Roles; r != nil {
		if _, err := tx.ExecContext(ctx, `UPDATE rooms SET owner_user_id = ?, host_user_id = ? WHERE room_id = ?`,
			r.OwnerUserID, r.HostUserID, b.RoomID); err != nil {
			return db.d.MapErr(err)
		}
	}
	return nil
}

// advance moves the room's head to the batch's, fenced on its owner epoch
// and base version: store.ErrFenced, with nothing written, when either
// differs or the room does not exist. The UPDATE locks the room's row until
// the transaction ends.
func (db *DB) advance(ctx context.Context, fence *sql.Stmt, b *store.Batch, now int64) error {
	res, err := fence.ExecContext(ctx, b.HeadVersion(), now, b.Status, b.RoomID, b.BaseVersion, b.OwnerEpoch)
	if err != nil {
		return db.d.MapErr(err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return db.d.MapErr(err)
	} else if n == 0 {
		return store.ErrFenced
	}
	return nil
}

// statementContext is the context of a commit's statements: ctx, or on a
// database in process ctx without its end. modernc's SQLite driver starts
// a goroutine for every statement whose context can end, to interrupt it
// then: a commit ran one per room it fenced and one per multi-row INSERT,
// about one per command, each made runnable twice beside the one writer.
// The transaction still ends with ctx: database/sql rolls it back then, as
// soon as the statement running ends, and the statements after it fail.
func (db *DB) statementContext(ctx context.Context) context.Context {
	if db.d.InProcess {
		return context.WithoutCancel(ctx)
	}
	return ctx
}

// maxFenceRooms caps the rooms of one bulk fence statement.
const maxFenceRooms = 500

// fence decides every batch of order, in order, and advances the heads of
// the rooms whose batches pass. A batch that does not pass gets
// store.ErrFenced in results and writes nothing. It returns the batches that
// passed. From Dialect.BulkFenceMinRooms rooms it fences them all at once
// (fenceRooms); below, one conditional UPDATE per batch. A batch that
// created its room passed already: create inserted the row at its head.
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
	if least := db.d.BulkFenceMinRooms; least > 0 {
		if rooms := distinctRooms(batches, order); len(rooms) >= least {
			return pass, db.fenceRooms(ctx, tx, batches, order, rooms, now, decide)
		}
	}
	var stmt *sql.Stmt
	for _, i := range order {
		var err error
		if b := &batches[i]; b.CreatedBy == "" {
			if stmt == nil {
				stmt = tx.StmtContext(ctx, db.stmts.advanceFenced)
			}
			err = db.advance(ctx, stmt, b, now)
		}
		if err := decide(i, err); err != nil {
			return nil, err
		}
	}
	return pass, nil
}

// distinctRooms lists the rooms of order, which is sorted by room id, that
// have a batch to fence (one that did not create its room).
func distinctRooms(batches []store.Batch, order []int) []string {
	var rooms []string
	for _, i := range order {
		if batches[i].CreatedBy != "" {
			continue
		}
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
	for chunk := range slices.Chunk(rooms, maxFenceRooms) {
		q := `SELECT room_id, room_version, owner_epoch FROM rooms WHERE room_id IN ` + In(len(chunk)) +
			` ORDER BY room_id` + db.d.ForUpdate()
		rows, err := tx.QueryContext(ctx, q, AppendStrings(nil, chunk)...)
		if err != nil {
			return db.d.MapErr(err)
		}
		for rows.Next() {
			var id string
			h := &roomHead{}
			if err := rows.Scan(&id, &h.version, &h.epoch); err != nil {
				_ = rows.Close()
				return db.d.MapErr(err)
			}
			heads[id] = h
		}
		if err := rows.Err(); err != nil {
			return db.d.MapErr(err)
		}
	}

	for _, i := range order {
		b := &batches[i]
		if b.CreatedBy != "" { // inserted at its head: the room's later batches read that
			if err := decide(i, nil); err != nil {
				return err
			}
			continue
		}
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
	for chunk := range slices.Chunk(advanced, maxFenceRooms) {
		if err := db.advanceRooms(ctx, tx, chunk, heads, now); err != nil {
			return err
		}
	}
	return nil
}

// advanceRooms writes the new head (and status, when set) of the locked rows of rooms.
func (db *DB) advanceRooms(ctx context.Context, tx *sql.Tx, rooms []string, heads map[string]*roomHead, now int64) error {
	moves := make([]roomMove, len(rooms))
	for i, id := range rooms {
		moves[i] = roomMove{id: id, head: heads[id].version, status: heads[id].status}
	}
	var q strings.Builder
	args := writeMoves(&q, make([]any, 0, 5*len(rooms)+1), moves, now, false)
	res, err := tx.ExecContext(ctx, q.String(), args...)
	if err != nil {
		return db.d.MapErr(err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return db.d.MapErr(err)
	}
	if n != int64(len(rooms)) {
		// The rows are locked and rooms are never deleted: this is a bug or
		// a hand edit. Nothing is committed; the callers reload.
		return fmt.Errorf("fence advanced %d of %d locked rooms: %w", n, len(rooms), store.ErrUnavailable)
	}
	return nil
}

// roomMove is a room's head moving in a commit: from base, at owner epoch
// epoch, to head, with status when not "".
type roomMove struct {
	id                string
	base, head, epoch int64
	status            string
}

// writeMoves writes to q one UPDATE of the rooms' rows that sets each
// room's head and status (a room without one keeps its own), and appends
// its arguments to args. With fenced, a row matches only at its move's
// base and epoch.
func writeMoves(q *strings.Builder, args []any, rooms []roomMove, now int64, fenced bool) []any {
	q.WriteString(`UPDATE rooms SET room_version = CASE room_id`)
	for _, r := range rooms {
		q.WriteString(` WHEN ? THEN ?`)
		args = append(args, r.id, r.head)
	}
	q.WriteString(` END`)
	withStatus := false
	for _, r := range rooms {
		if r.status == "" {
			continue
		}
		if !withStatus {
			q.WriteString(`, status = CASE room_id`)
			withStatus = true
		}
		q.WriteString(` WHEN ? THEN ?`)
		args = append(args, r.id, r.status)
	}
	if withStatus {
		q.WriteString(` ELSE status END`)
	}
	q.WriteString(`, updated_at = ? WHERE room_id IN ` + In(len(rooms)))
	args = append(args, now)
	for _, r := range rooms {
		args = append(args, r.id)
	}
	if fenced {
		q.WriteString(` AND (room_id, room_version, owner_epoch) IN (` + Values(`(?, ?, ?)`, len(rooms)) + `)`)
		for _, r := range rooms {
			args = append(args, r.id, r.base, r.epoch)
		}
	}
	return args
}
