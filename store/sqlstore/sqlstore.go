// Package sqlstore is the one SQL layer behind store.Repository: the rooms,
// the command log, snapshots, the outbox, timers and the fenced group commit,
// written once for SQLite and MySQL. An adapter (store/sqlite, store/mysql)
// opens the database, migrates it and hands this package its connections
// and its Dialect, the small value that says how the two databases differ;
// what truly differs beyond that (opening, migrations, SQLite's single writer
// and checkpoints, pruning) stays in the adapter.
//
// Errors leave as store sentinels (mapped by Dialect.MapErr), wrapped with
// the ids involved; driver errors stop here.
package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"hyapp/room-service/store"
)

// LedgerFunc writes, inside a commit transaction, the embedded COIN
// ledger's part of the batches it commits: the gift charges they make
// (store.Batch.Charges, in order) and the pending charges they settle
// (store.Batch.Settle). A charge whose key was charged before or whose
// sender's balance moved since the room decided it, or a settle key that
// is not pending, makes the call store.ErrConflict; a charge refused for
// its sender's balance is a *StaleCharge naming it. insert starts its
// INSERTs: Dialect.InsertOrRollback in a merged commit, whose failure ends
// the transaction anyway, "INSERT INTO " in a batch's own savepoint. The
// embedded ledger (wallet/ledger) owns the statements and installs it
// (SetLedger) when it starts on the database. Its reads and its checked
// writes run on tx.Tx(); the writes whose outcome is their error alone go
// through tx.Exec, which a one-trip commit sends with its other writes.
type LedgerFunc func(ctx context.Context, tx *CommitTx, insert string, charges []store.GiftCharge, settle []string, now int64) error

// CommitTx is a room commit's transaction as the ledger writes into it.
type CommitTx struct {
	tx   *sql.Tx
	trip *tripQuery // nil: Exec runs at once
}

// Tx is the transaction, for reads and for writes whose result the caller
// needs (rows affected); they run at once.
func (c *CommitTx) Tx() *sql.Tx { return c.tx }

// Exec runs a write whose only outcome its caller needs is an error (an
// INSERT, an upsert): at once, or, in a one-trip commit, in the query the
// trip sends, after the writes before it; its error is then the trip's.
func (c *CommitTx) Exec(ctx context.Context, query string, args ...any) error {
	if c.trip != nil {
		c.trip.add(query, args...)
		return nil
	}
	_, err := c.tx.ExecContext(ctx, query, args...)
	return err
}

// LedgerHooks are the embedded COIN ledger's part of room commits.
type LedgerHooks struct {
	// Write writes the ledger's rows inside a commit transaction.
	Write LedgerFunc
	// Committed, when set, is told after a commit transaction committed
	// the gift charges of the batches it committed, in the order the
	// transaction wrote them. A transaction that failed, or a batch it
	// refused, tells nothing. It runs on the committing goroutine and must
	// not block.
	Committed func(charges []store.GiftCharge)
}

// Config is what an adapter gives New.
type Config struct {
	// Dialect describes the database.
	Dialect Dialect
	// Write runs every write: SQLite's single writer connection, or the
	// MySQL pool.
	Write *sql.DB
	// Read serves reads outside write transactions: SQLite's read-only
	// pool, or the same MySQL pool.
	Read *sql.DB
}

// DB implements every store.Repository method but pruning and Close, which
// the adapters add. It is safe for concurrent use. The connections belong
// to the adapter, which closes them (and with them the prepared statements).
type DB struct {
	d      Dialect
	write  *sql.DB
	read   *sql.DB
	ledger atomic.Pointer[LedgerHooks]
	// committed hears the path of each CommitBatches call that committed
	// (SetCommitObserver).
	committed atomic.Pointer[func(path string, declined bool)]
	// leftOut hears each snapshot too large to store (SetSnapshotLeftOut).
	leftOut atomic.Pointer[func(s *store.SnapshotRecord, limit int)]
	stmts   statements
	marks   marks // single writer: marks waiting for a room commit
}

// statements are prepared once: writes on the write pool, reads on the read pool.
type statements struct {
	advanceHead, advanceFenced, headVersion  *sql.Stmt
	updateSnapshot, insertSnapshot           *sql.Stmt
	updateMeta, insertMeta, claim, readClaim *sql.Stmt
	previousOwner                            *sql.Stmt
	markPublished, markFailed                *sql.Stmt
	lockOutbox, failOutbox                   *sql.Stmt

	getMeta, getCommand, listCommands, getSnapshot *sql.Stmt
	listCommandsPage, readHead, ownerEpoch         *sql.Stmt
	listHeads, listRoomOutbox                      *sql.Stmt
	listRooms                                      *sql.Stmt

	insertCommands, insertOutbox *bulkInsert
	// insertCreated inserts the rows of the rooms a commit creates; a
	// duplicate key undoes the statement alone.
	insertCreated *bulkInsert
	// mergedCommands and mergedOutbox are the INSERTs of a merged commit
	// (see commitMerged), which a duplicate key rolls back whole.
	mergedCommands, mergedOutbox *bulkInsert
	// mergedSnapshots stores the snapshots of a merged commit, each
	// unless its room has one of the same or a higher version.
	mergedSnapshots *bulkInsert
}

// New prepares the statements of the SQL layer on cfg's connections.
func New(ctx context.Context, cfg Config) (*DB, error) {
	db := &DB{d: cfg.Dialect, write: cfg.Write, read: cfg.Read}
	if err := db.prepare(ctx); err != nil {
		return nil, err
	}
	return db, nil
}

// The paths a CommitBatches transaction takes (SetCommitObserver).
const (
	PathOneTrip  = "one_trip"   // one query of its writes and the fence, then COMMIT (commitOneTrip, MySQL)
	PathMerged   = "merged"     // a statement per step, every batch fenced first (commitMerged)
	PathOneByOne = "one_by_one" // each batch in a savepoint of its own (commitIsolated)
)

// SetCommitObserver installs what hears, after each CommitBatches call
// whose transaction committed, the path that transaction took, and
// whether a one-trip attempt gave way to it (a batch fenced, a duplicate
// key, a charge refused: the batches were decided one step at a time).
func (db *DB) SetCommitObserver(f func(path string, declined bool)) { db.committed.Store(&f) }

// SetSnapshotLeftOut installs what hears of each snapshot a commit or a
// stop left out because no statement could carry it (Dialect.MaxPacketBytes,
// the limit given): its room recovers from an earlier snapshot and a longer
// replay, which an operator should know of.
func (db *DB) SetSnapshotLeftOut(f func(s *store.SnapshotRecord, limit int)) { db.leftOut.Store(&f) }

// snapshotFits is Dialect.snapshotFits, telling SetSnapshotLeftOut's
// observer of a snapshot that does not fit.
func (db *DB) snapshotFits(s *store.SnapshotRecord) bool {
	if db.d.snapshotFits(s) {
		return true
	}
	if f := db.leftOut.Load(); f != nil {
		(*f)(s, db.d.MaxPacketBytes)
	}
	return false
}

// SetLedger installs what writes the embedded ledger's charges and settles
// inside a commit (store.Batch.Charges and Settle). The embedded ledger
// calls it when it starts: without a ledger on the database, a batch that
// charges or settles is refused.
func (db *DB) SetLedger(h LedgerHooks) { db.ledger.Store(&h) }

// SQLStore returns db itself; an adapter that embeds the SQL layer passes it
// on through this method, so that the embedded ledger can start on any of
// them without knowing their types.
func (db *DB) SQLStore() *DB { return db }

// Dialect returns the database's dialect.
func (db *DB) Dialect() *Dialect { return &db.d }

// Reader returns the pool for reads outside write transactions.
func (db *DB) Reader() *sql.DB { return db.read }

// Writer returns the pool write transactions run on.
func (db *DB) Writer() *sql.DB { return db.write }

// MapErr maps a driver error with the dialect's mapping.
func (db *DB) MapErr(err error) error { return db.d.MapErr(err) }

func (db *DB) prepare(ctx context.Context) error {
	var firstErr error
	prep := func(pool *sql.DB, query string) *sql.Stmt {
		if firstErr != nil {
			return nil
		}
		s, err := pool.PrepareContext(ctx, query)
		if err != nil {
			firstErr = fmt.Errorf("prepare %q: %w", query, db.d.MapErr(err))
		}
		return s
	}
	w, r, s := db.write, db.read, &db.stmts
	o := OutboxQueries(&db.d)
	s.advanceHead = prep(w, `UPDATE rooms SET room_version = ?, updated_at = ?
		WHERE room_id = ? AND room_version = ?`)
	s.advanceFenced = prep(w, advanceFencedSQL)
	s.headVersion = prep(w, `SELECT room_version FROM rooms WHERE room_id = ?`)
	s.updateSnapshot = prep(w, `UPDATE room_snapshots SET room_version = ?, payload = ?, created_at = ?
		WHERE room_id = ? AND room_version < ?`)
	s.insertSnapshot = prep(w, `INSERT INTO room_snapshots (room_id, room_version, payload, created_at) VALUES (?, ?, ?, ?)`)
	s.updateMeta = prep(w, `UPDATE rooms SET owner_user_id = ?, host_user_id = ?, seat_count = ?, mode = ?, status = ?, updated_at = ?
		WHERE room_id = ? AND room_version = 0`)
	s.insertMeta = prep(w, `INSERT INTO rooms (room_id, owner_user_id, host_user_id, seat_count, mode, status, created_at, updated_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?)`)
	s.previousOwner = prep(w, `SELECT owner_node FROM rooms WHERE room_id = ?`+db.d.ForUpdate())
	s.claim = prep(w, `UPDATE rooms SET owner_epoch = owner_epoch + 1, owner_node = ?, updated_at = ? WHERE room_id = ?`)
	s.readClaim = prep(w, `SELECT owner_epoch, room_version, owner_user_id, host_user_id, seat_count, mode, status
		FROM rooms WHERE room_id = ?`)
	s.markPublished = prep(w, `UPDATE room_outbox SET status = 'published', published_at = COALESCE(NULLIF(published_at, 0), ?)
		WHERE event_id = ?`)
	s.markFailed = prep(w, `UPDATE room_outbox SET attempts = attempts + 1, last_error = ? WHERE event_id = ?`)
	s.lockOutbox = prep(w, `SELECT status, attempts FROM room_outbox WHERE event_id = ?`+db.d.ForUpdate())
	s.failOutbox = prep(w, `UPDATE room_outbox SET status = ?, attempts = ?, last_error = ?, next_attempt_at = ? WHERE event_id = ?`)

	s.getMeta = prep(r, `SELECT owner_user_id, host_user_id, seat_count, mode, status FROM rooms WHERE room_id = ?`)
	s.getCommand = prep(r, `SELECT `+commandColumns+` FROM room_command_log WHERE room_id = ? AND command_id = ?`)
	s.listCommands = prep(r, `SELECT `+commandColumns+` FROM room_command_log
		WHERE room_id = ? AND room_version > ? ORDER BY room_version`)
	s.listCommandsPage = prep(r, `SELECT `+commandColumns+` FROM room_command_log
		WHERE room_id = ? AND room_version > ? ORDER BY room_version LIMIT ?`)
	s.readHead = prep(r, `SELECT room_version FROM rooms WHERE room_id = ?`)
	s.ownerEpoch = prep(r, `SELECT owner_epoch FROM rooms WHERE room_id = ?`)
	s.getSnapshot = prep(r, `SELECT room_version, payload, created_at FROM room_snapshots WHERE room_id = ?`)
	s.listHeads = prep(r, o.ListHeads)
	s.listRoomOutbox = prep(r, o.ListRoomOutbox)
	s.listRooms = prep(r, `SELECT room_id, owner_user_id, host_user_id, seat_count, mode, status,
		room_version, owner_epoch, owner_node, updated_at
		FROM rooms WHERE room_id > ? ORDER BY room_id LIMIT ?`)
	if firstErr != nil {
		return firstErr
	}

	commands := func(insert string) (*bulkInsert, error) {
		return db.newBulkInsert(ctx, insert+`room_command_log (`+commandColumns+`) VALUES `,
			`(?, ?, ?, ?, ?, ?, ?)`)
	}
	outbox := func(insert string) (*bulkInsert, error) {
		return db.newBulkInsert(ctx, insert+`room_outbox (event_id, room_id, room_version, seq, event_type, payload, owner_epoch,
			next_attempt_at, created_at, trace_context, status, last_error, published_at) VALUES `,
			`(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, '`+db.d.pendingStatus()+`', '', 0)`)
	}
	var err error
	if s.insertCommands, err = commands("INSERT INTO "); err != nil {
		return err
	}
	if s.insertOutbox, err = outbox("INSERT INTO "); err != nil {
		return err
	}
	if s.insertCreated, err = db.newBulkInsert(ctx, `INSERT INTO rooms (room_id, owner_user_id, host_user_id, seat_count, mode,
		status, room_version, owner_epoch, owner_node, created_at, updated_at) VALUES `, `(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`); err != nil {
		return err
	}
	if s.mergedSnapshots, err = db.newBulkUpsert(ctx, db.d.InsertOrRollback()+`room_snapshots (room_id, room_version, payload, created_at) VALUES `,
		`(?, ?, ?, ?)`, db.d.snapshotUpsert()); err != nil {
		return err
	}
	s.mergedCommands, s.mergedOutbox = s.insertCommands, s.insertOutbox
	if db.d.StatementJournal {
		if s.mergedCommands, err = commands(db.d.InsertOrRollback()); err != nil {
			return err
		}
		if s.mergedOutbox, err = outbox(db.d.InsertOrRollback()); err != nil {
			return err
		}
	}
	return nil
}

// advanceFencedSQL moves one room's head, with its status when one is
// given, only at the batch's base version and owner epoch: arguments head,
// now, status, room, base, epoch.
const advanceFencedSQL = `UPDATE rooms SET room_version = ?, updated_at = ?, status = COALESCE(NULLIF(?, ''), status)
		WHERE room_id = ? AND room_version = ? AND owner_epoch = ?`

// ErrRetry in an error's chain says the database rolled the transaction
// back whole (a deadlock, a lock wait timeout): nothing of it committed, so
// Tx may run it again. Dialect.MapErr puts it there.
var ErrRetry = errors.New("transaction lost a lock conflict")

// Retries of a transaction that lost a lock conflict.
const (
	maxTxAttempts = 5
	retryBase     = 2 * time.Millisecond
)

// Tx runs fn in a write transaction and commits it. When the transaction
// fails with ErrRetry in its chain nothing of it has committed, so Tx runs
// it again from the start (fn must keep no state across calls), up to 5
// times with a short jittered backoff, and then returns the error. fn
// returns mapped errors; any error from fn rolls the transaction back.
// On SQLite every write transaction is BEGIN IMMEDIATE on the one writer.
func (db *DB) Tx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	return retry(ctx, func() error { return db.tryTx(ctx, fn) })
}

// retry runs try, and again while it fails with ErrRetry in its chain, up
// to maxTxAttempts times with a short jittered backoff.
func retry(ctx context.Context, try func() error) error {
	for attempt := 1; ; attempt++ {
		err := try()
		if err == nil || !errors.Is(err, ErrRetry) || attempt == maxTxAttempts {
			return err
		}
		backoff := retryBase << attempt
		backoff = backoff/2 + rand.N(backoff/2+1)
		timer := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			timer.Stop()
			return fmt.Errorf("%w (%w) (after %v)", store.ErrUnavailable, ctx.Err(), err)
		case <-timer.C:
		}
	}
}

func (db *DB) tryTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	tx, err := db.write.BeginTx(ctx, nil)
	if err != nil {
		return db.d.MapErr(err)
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	return db.d.MapErr(tx.Commit())
}

// Exec runs one write statement in its own transaction (see Tx) and
// returns the rows it changed.
func (db *DB) Exec(ctx context.Context, query string, args ...any) (int, error) {
	var n int64
	err := db.Tx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, query, args...)
		if err != nil {
			return db.d.MapErr(err)
		}
		n, err = res.RowsAffected()
		return db.d.MapErr(err)
	})
	return int(n), err
}

// updateOne runs an UPDATE of one row by key: store.ErrNotFound when it
// matched none (MySQL connections report matched, not changed, rows).
func (db *DB) updateOne(ctx context.Context, stmt *sql.Stmt, args ...any) error {
	res, err := stmt.ExecContext(ctx, args...)
	if err != nil {
		return db.d.MapErr(err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return db.d.MapErr(err)
	}
	if n == 0 {
		return store.ErrNotFound
	}
	return nil
}
