// Package ledger is the embedded COIN ledger: wallet.Wallet on the
// service's own SQL database (SQLite or MySQL, through store/sqlstore). It
// owns the ledger's tables (wallet_accounts, wallet_entries,
// wallet_charges) and every statement that touches them, the settle that
// run inside a room's commit transaction included (inCommit). Of
// starts it on a store built on that layer (sqlite.DB, mysql.DB); nothing
// else writes these tables.
//
// # Group commit
//
// Every write (Charge, Settle, Refund, Credit) is a request queued for a
// committer. A committer takes what is queued, up to Options.MaxBatch
// operations (one call is never split: a larger one goes alone), and
// applies all of it in one transaction:
//
//  1. read the charges of every key involved with one IN (...) query per
//     chunk (locking them, on MySQL), and the credits of the credit keys;
//  2. read, and on MySQL lock in user id order, the accounts of every user
//     involved;
//  3. apply the operations in queue order in memory, so a later one sees
//     the balances and charges an earlier one left; an operation that
//     fails (insufficient funds, a key conflict, a bad request) fails
//     alone and writes nothing;
//  4. write with a few multi-row statements: the accounts, the journal
//     entries, the new charges, and the status changes.
//
// One commit, and one fsync, so covers hundreds of charges. When the
// transaction fails every caller in it gets the error: the outcome is
// unknown. The transaction runs again (sqlstore.DB.Tx) after a deadlock
// or a lock wait timeout, and after a duplicate key that a concurrent
// transaction (another committer or another node) inserted first; each run
// starts from what it reads.
//
// # Locks
//
// On MySQL several committers, and several nodes, write at once. Every
// write transaction locks the charge rows it reads first, in key order,
// then the account rows, in user id order, so transactions that share rows
// take their locks in one order. Rows that do not exist yet are not locked
// (READ COMMITTED takes no gap locks): two transactions that create the
// same account, charge or credit both try to insert it, and the second
// fails on the duplicate key and runs again.
package ledger

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"time"

	"hyapp/room-service/store"
	"hyapp/room-service/store/sqlstore"
	"hyapp/room-service/wallet"
)

// Options tunes the group commit. Zero fields take the defaults.
type Options struct {
	// Workers is the number of committers, each running one transaction at
	// a time. Default 1 on a single-writer database (SQLite), 2 elsewhere:
	// one commits while the other reads and writes. More make smaller
	// transactions, and committers that share a hot account wait for each
	// other's locks; a single committer's batches grow with the load
	// instead.
	Workers int
	// MaxBatch caps the operations (a charge, a credit, a refund, a key to
	// settle) of one transaction. Default 1024.
	MaxBatch int
	// TxTimeout bounds one transaction, retries included. Default 15s.
	TxTimeout time.Duration
}

// quoteReaders is the number of readers sharing Quote calls: one reads
// while the calls for the next read queue.
const quoteReaders = 2

const (
	defaultMaxBatch  = 1024
	defaultTxTimeout = 15 * time.Second
)

// Ledger is wallet.Wallet on a SQL database, with its journal and totals.
// It is safe for concurrent use. Its queue holds 4×MaxBatch requests; when
// it is full, writers wait for room, as long as their ctx allows. Close
// stops its committers; the database belongs to the caller, who closes it
// after the Ledger.
type Ledger struct {
	db   *sqlstore.DB
	opts Options
	in   chan *request

	mu     sync.RWMutex // held for reading while a request is queued
	closed bool
	wg     sync.WaitGroup
	stmts  stmtCache // used by the committers and inCommit
	// prep wakes a committer to prepare the statements inCommit found
	// missing: they cannot be prepared while the room commit holds the
	// writer.
	prep chan struct{}

	quotes chan *quoteReq // Quote calls, for the readers (see readQuotes)
	hints  *hints         // balances last seen committed (see Hint)
	readMu sync.Mutex
	reads  map[string]*sql.Stmt // Quote's statements on the read pool
}

var (
	_ wallet.Wallet = (*Ledger)(nil)
	_ wallet.Quoter = (*Ledger)(nil)
)

// New starts a ledger's committers on db, the SQL layer of the service's
// own database, and installs in db's commit what writes the charges of the
// gifts a room commit commits (inCommit). Close the ledger before the
// database.
//
// On SQLite its writes share the one writer connection with the room
// commits (one committer unless opts.Workers says); on MySQL a few
// committers each merge concurrent calls into one READ COMMITTED
// transaction that locks the charges and then the accounts it touches, so
// nodes sharing the database serialise on those rows.
func New(db *sqlstore.DB, opts Options) *Ledger {
	if opts.Workers <= 0 {
		opts.Workers = 2
		if db.Dialect().SingleWriter {
			opts.Workers = 1
		}
	}
	if opts.MaxBatch <= 0 {
		opts.MaxBatch = defaultMaxBatch
	}
	if opts.TxTimeout <= 0 {
		opts.TxTimeout = defaultTxTimeout
	}
	l := &Ledger{db: db, opts: opts, in: make(chan *request, 4*opts.MaxBatch), prep: make(chan struct{}, 1),
		quotes: make(chan *quoteReq, 4*maxInKeys), reads: map[string]*sql.Stmt{}, hints: newHints()}
	db.SetLedger(sqlstore.LedgerHooks{Write: l.inCommit, Committed: l.hints.committed})
	for range opts.Workers {
		l.wg.Go(l.work)
	}
	for range quoteReaders {
		l.wg.Go(l.readQuotes)
	}
	return l
}

// Host is a store built on the SQL layer (sqlite.DB and mysql.DB are): the
// ledger keeps its tables in the same database.
type Host interface {
	SQLStore() *sqlstore.DB
}

// Of starts the embedded ledger (New) on db's own database; db must be a
// Host. The caller closes the ledger before the store.
func Of(db any, opts Options) (*Ledger, error) {
	h, ok := db.(Host)
	if !ok {
		return nil, fmt.Errorf("no embedded ledger in a %T", db)
	}
	return New(h.SQLStore(), opts), nil
}

// Close stops the committers once they have applied every request already
// queued, and waits for them. Later writes return store.ErrUnavailable;
// reads go on working until the database is closed. Calls after the first
// return nil.
func (l *Ledger) Close() error {
	l.mu.Lock()
	if !l.closed {
		l.closed = true
		close(l.in) // no sender is left: senders hold mu for reading
		close(l.quotes)
	}
	l.mu.Unlock()
	l.wg.Wait()
	l.stmts.close()
	l.readMu.Lock()
	for _, s := range l.reads {
		_ = s.Close()
	}
	l.reads = map[string]*sql.Stmt{}
	l.readMu.Unlock()
	return nil
}

type opKind uint8

const (
	opCharge opKind = iota
	opCredit
	opRefund
	opSettle
)

// op is one operation of a request. Its answer is written by the
// committer, again by every run of the transaction, and read by the caller
// only after the request is done without error.
type op struct {
	kind opKind
	// in holds the charge (opCharge), the credit (opCredit: Key, UserID,
	// Amount) or the key (opRefund, opSettle).
	in wallet.Charge
	// invalid ops were answered before the request was queued.
	invalid bool

	receipt wallet.Receipt
	balance int64
	dup     bool
	err     error
}

type request struct {
	ctx  context.Context
	ops  []op
	done chan error // buffered: a committer never waits for a caller
}

// submit queues req and waits for its outcome. A ctx that ends first
// returns store.ErrUnavailable: the outcome is unknown.
func (l *Ledger) submit(ctx context.Context, req *request) error {
	if err := ctx.Err(); err != nil {
		return ctxErr(err)
	}
	req.ctx = ctx
	req.done = make(chan error, 1)
	l.mu.RLock()
	if l.closed {
		l.mu.RUnlock()
		return fmt.Errorf("wallet ledger is closed: %w", store.ErrUnavailable)
	}
	select {
	case l.in <- req:
		l.mu.RUnlock()
	case <-ctx.Done():
		l.mu.RUnlock()
		return ctxErr(ctx.Err())
	}
	select {
	case err := <-req.done:
		return err
	case <-ctx.Done():
		return ctxErr(ctx.Err())
	}
}

func ctxErr(err error) error {
	return fmt.Errorf("%w (%w)", store.ErrUnavailable, err)
}

// work is a committer: it takes what is queued, up to MaxBatch operations,
// and applies it in one transaction, until Close closes the queue. A
// request that would take a batch past MaxBatch waits for the next one; a
// request larger than MaxBatch goes alone.
func (l *Ledger) work() {
	batch := make([]*request, 0, 64)
	var carry *request
	for {
		first := carry
		carry = nil
		if first == nil {
			select {
			case r, ok := <-l.in:
				if !ok {
					return
				}
				first = r
			case <-l.prep:
				ctx, cancel := context.WithTimeout(context.Background(), l.opts.TxTimeout)
				l.stmts.prepare(ctx, l.db.Writer())
				cancel()
				continue
			}
		}
		batch = append(batch[:0], first)
		n := len(first.ops)
	more:
		for n < l.opts.MaxBatch {
			select {
			case r, ok := <-l.in:
				if !ok {
					break more
				}
				if n+len(r.ops) > l.opts.MaxBatch {
					carry = r
					break more
				}
				batch = append(batch, r)
				n += len(r.ops)
			default:
				break more
			}
		}
		l.commit(batch)
		clear(batch)
	}
}

// commit applies the requests in one transaction and answers each. A
// request whose caller has gone is left out: its caller was told the
// outcome is unknown.
func (l *Ledger) commit(batch []*request) {
	live := batch[:0:0]
	for _, r := range batch {
		if err := r.ctx.Err(); err != nil {
			r.done <- ctxErr(err)
			continue
		}
		live = append(live, r)
	}
	if len(live) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), l.opts.TxTimeout)
	defer cancel()
	var balances map[int64]int64
	began := l.hints.begin()
	err := l.db.Tx(ctx, func(tx *sql.Tx) error {
		var err error
		balances, err = l.apply(ctx, tx, live)
		if errors.Is(err, store.ErrConflict) {
			// A concurrent transaction (another committer, another node)
			// created an account, a charge or a credit this one read as
			// missing: nothing of this one is committed, so it runs again,
			// as after a deadlock, and then reads the row.
			return fmt.Errorf("%w (%w: %v)", store.ErrUnavailable, sqlstore.ErrRetry, err)
		}
		return err
	})
	if err != nil {
		err = fmt.Errorf("wallet ledger transaction of %d requests: %w", len(live), unknown(err))
		l.forgetHints(live)
	} else {
		// What the transaction left is what the next gift of these
		// users is decided on: a sender who just topped up gives
		// without a read.
		l.hints.wrote(balances, began)
	}
	for _, r := range live {
		r.done <- err
	}
	if l.db.Dialect().KeepPrepared {
		l.stmts.prepare(ctx, l.db.Writer())
	}
}

// forgetHints drops the balance hints of the users the requests of a
// transaction that failed (or may have committed) charged or credited. A
// refund's users keep theirs: a refund raises a balance, which a hint may
// understate (see hints), except a lucky charge's whose reward exceeded its
// price, which lowers it; a hint left too high then only makes the commit
// refuse the gift it let through, and the gift is decided again on a read.
func (l *Ledger) forgetHints(reqs []*request) {
	var users []int64
	for _, r := range reqs {
		for _, o := range r.ops {
			if o.kind == opCharge || o.kind == opCredit {
				users = append(users, o.in.UserID)
			}
		}
	}
	l.hints.forget(users...)
}

// unknown makes sure a failed transaction reads as store.ErrUnavailable
// (outcome unknown): a constraint the ledger should never violate is a bug,
// not a conflict the caller could act on.
func unknown(err error) error {
	if errors.Is(err, store.ErrUnavailable) {
		return err
	}
	return fmt.Errorf("%w (%v)", store.ErrUnavailable, err)
}

// Charge applies each charge once per key, in order, in one transaction
// shared with other callers' operations; see wallet.Wallet. A charge that
// fails Check is ErrBadRequest alone. A zero At is recorded as the time
// of the transaction; At is kept to the millisecond, and the receipt
// carries the recorded value.
func (l *Ledger) Charge(ctx context.Context, charges []wallet.Charge) ([]wallet.Result, error) {
	if len(charges) == 0 {
		return nil, nil
	}
	req := &request{ops: make([]op, len(charges))}
	valid := 0
	for i := range charges {
		o := &req.ops[i]
		o.kind, o.in = opCharge, charges[i]
		if err := o.in.Check(); err != nil {
			o.invalid, o.err = true, fmt.Errorf("charge key=%q user=%d: %w", o.in.Key, o.in.UserID, err)
			continue
		}
		valid++
	}
	if valid > 0 {
		if err := l.submit(ctx, req); err != nil {
			return nil, fmt.Errorf("charge %d items: %w", len(charges), err)
		}
	}
	results := make([]wallet.Result, len(charges))
	for i := range req.ops {
		results[i] = wallet.Result{Receipt: req.ops[i].receipt, Err: req.ops[i].err}
	}
	return results, nil
}

// Settle confirms the pending charges among keys; see wallet.Wallet. Keys
// that cannot be charge keys (empty or too long) are ignored like unknown
// ones.
func (l *Ledger) Settle(ctx context.Context, keys []string) error {
	req := &request{ops: make([]op, 0, len(keys))}
	for _, k := range keys {
		if validKey(k) {
			req.ops = append(req.ops, op{kind: opSettle, in: wallet.Charge{Key: k}})
		}
	}
	if len(req.ops) == 0 {
		return nil
	}
	if err := l.submit(ctx, req); err != nil {
		return fmt.Errorf("settle %d keys: %w", len(keys), err)
	}
	return nil
}

// Refund cancels a pending charge; see wallet.Wallet. An empty or too long
// key is wallet.ErrBadRequest.
func (l *Ledger) Refund(ctx context.Context, key string) (wallet.Receipt, error) {
	if !validKey(key) {
		return wallet.Receipt{}, fmt.Errorf("refund key=%q: %w", key, wallet.ErrBadRequest)
	}
	req := &request{ops: []op{{kind: opRefund, in: wallet.Charge{Key: key}}}}
	if err := l.submit(ctx, req); err != nil {
		return wallet.Receipt{}, fmt.Errorf("refund key=%q: %w", key, err)
	}
	return req.ops[0].receipt, req.ops[0].err
}

// Credit adds amount to the user's balance once per key; see
// wallet.Wallet. A non-positive user id or amount, or an empty or too long
// key, is wallet.ErrBadRequest; a key used before for another user or
// amount is wallet.ErrKeyConflict; a credit past the largest balance is
// wallet.ErrBadRequest.
func (l *Ledger) Credit(ctx context.Context, userID, amount int64, key string) (int64, bool, error) {
	if userID <= 0 || amount <= 0 || !validKey(key) {
		return 0, false, fmt.Errorf("credit key=%q user=%d amount=%d: user, amount and key must be set: %w",
			key, userID, amount, wallet.ErrBadRequest)
	}
	req := &request{ops: []op{{kind: opCredit, in: wallet.Charge{Key: key, UserID: userID, Amount: amount}}}}
	if err := l.submit(ctx, req); err != nil {
		return 0, false, fmt.Errorf("credit key=%q user=%d: %w", key, userID, err)
	}
	o := &req.ops[0]
	return o.balance, o.dup, o.err
}

func validKey(k string) bool { return k != "" && len(k) <= wallet.MaxKeyLen }
