package ledger

import (
	"context"
	"database/sql"
	"fmt"
	"math"
	"slices"
	"time"

	"hyapp/room-service/store"
	"hyapp/room-service/wallet"
)

// Limits of one statement: the ids of an IN (...) list and the rows of a
// multi-row INSERT, powers of two (see stmt). Both stay far below SQLite's
// 32766 variables, MySQL's 65535 placeholders and its 16 MiB packets.
const (
	maxInKeys = 512
	maxRows   = 256
)

const chargeColumns = `charge_key, user_id, amount, reward, multiplier_bp, balance_after, status, charged_at_ms`

// chargeRow is a charge as the transaction sees it.
type chargeRow struct {
	c            wallet.Charge // At is the recorded millisecond
	atMs         int64
	balanceAfter int64
	status       wallet.Status
	// stored is the status read from the database; empty for a charge
	// made by this transaction.
	stored wallet.Status
}

func (c *chargeRow) receipt(replayed bool) wallet.Receipt {
	return wallet.Receipt{Charge: c.c, BalanceAfter: c.balanceAfter, Status: c.status, Replayed: replayed}
}

type account struct {
	balance int64
	stored  bool // the row exists
	changed bool
}

// credit is a credit key's entry: its user, its amount and the balance
// right after it, which a retry of the key answers.
type credit struct{ userID, amount, after int64 }

type entry struct {
	userID int64
	kind   wallet.EntryKind
	amount int64
	after  int64
	key    string
}

// txn is one run of a group-commit transaction: what it read, and what it
// will write. A run that fails is dropped whole; the next starts afresh.
type txn struct {
	now      int64
	charges  map[string]*chargeRow
	credits  map[string]credit
	accounts map[int64]*account
	entries  []entry
	created  []*chargeRow // new charges, in the order they were made
}

// apply runs the requests' operations in tx: read, decide in memory, write.
// It returns the balance of every account it read that exists once it
// commits, as it leaves it (read under the accounts' locks).
func (l *Ledger) apply(ctx context.Context, tx *sql.Tx, reqs []*request) (map[int64]int64, error) {
	t := &txn{
		now:      time.Now().UnixMilli(), // after the wait for the writer
		charges:  map[string]*chargeRow{},
		credits:  map[string]credit{},
		accounts: map[int64]*account{},
	}
	chargeKeys := map[string]struct{}{}
	creditKeys := map[string]struct{}{}
	var refunds []string
	users := map[int64]struct{}{}
	for _, r := range reqs {
		for i := range r.ops {
			o := &r.ops[i]
			if o.invalid {
				continue
			}
			switch o.kind {
			case opCharge:
				chargeKeys[o.in.Key] = struct{}{}
				users[o.in.UserID] = struct{}{}
			case opRefund:
				chargeKeys[o.in.Key] = struct{}{}
				refunds = append(refunds, o.in.Key)
			case opSettle:
				chargeKeys[o.in.Key] = struct{}{}
			case opCredit:
				creditKeys[o.in.Key] = struct{}{}
				users[o.in.UserID] = struct{}{}
			}
		}
	}
	if err := l.readCharges(ctx, tx, t, sortedKeys(chargeKeys)); err != nil {
		return nil, fmt.Errorf("read charges: %w", err)
	}
	if err := l.readCredits(ctx, tx, t, sortedKeys(creditKeys)); err != nil {
		return nil, fmt.Errorf("read credits: %w", err)
	}
	// A refund needs its charge's user, known only now.
	for _, k := range refunds {
		if c := t.charges[k]; c != nil && c.status == wallet.StatusPending {
			users[c.c.UserID] = struct{}{}
		}
	}
	if err := l.readAccounts(ctx, tx, t, sortedKeys(users)); err != nil {
		return nil, fmt.Errorf("read accounts: %w", err)
	}
	for _, r := range reqs {
		for i := range r.ops {
			if o := &r.ops[i]; !o.invalid {
				t.run(o)
			}
		}
	}
	if err := l.write(ctx, tx, "INSERT INTO ", t, func(s *stmt) error { _, err := l.exec(ctx, tx, s); return err }); err != nil {
		return nil, err
	}
	balances := make(map[int64]int64, len(t.accounts))
	for u, a := range t.accounts {
		if a.stored || a.changed {
			balances[u] = a.balance
		}
	}
	return balances, nil
}

// run decides one operation in memory and records its answer.
func (t *txn) run(o *op) {
	o.receipt, o.balance, o.dup, o.err = wallet.Receipt{}, 0, false, nil
	switch o.kind {
	case opCharge:
		o.receipt, o.err = t.charge(o.in)
	case opCredit:
		o.balance, o.dup, o.err = t.credit(o.in.UserID, o.in.Amount, o.in.Key)
	case opRefund:
		o.receipt, o.err = t.refund(o.in.Key)
	case opSettle:
		if c := t.charges[o.in.Key]; c != nil && c.status == wallet.StatusPending {
			c.status = wallet.StatusSettled
		}
	}
}

func (t *txn) charge(in wallet.Charge) (wallet.Receipt, error) {
	if c := t.charges[in.Key]; c != nil {
		if c.c.UserID != in.UserID || c.c.Amount != in.Amount {
			return wallet.Receipt{}, fmt.Errorf("charge key=%q user=%d amount=%d: charged before for user=%d amount=%d: %w",
				in.Key, in.UserID, in.Amount, c.c.UserID, c.c.Amount, wallet.ErrKeyConflict)
		}
		return c.receipt(true), nil
	}
	a := t.accounts[in.UserID]
	if a.balance < in.Amount {
		return wallet.Receipt{}, fmt.Errorf("charge key=%q user=%d: %w",
			in.Key, in.UserID, wallet.InsufficientFunds(a.balance, in.Amount))
	}
	debited := a.balance - in.Amount
	if in.Reward > math.MaxInt64-debited {
		return wallet.Receipt{}, fmt.Errorf("charge key=%q user=%d: reward %d overflows balance %d: %w",
			in.Key, in.UserID, in.Reward, debited, wallet.ErrBadRequest)
	}
	after := debited + in.Reward
	t.entries = append(t.entries, entry{in.UserID, wallet.EntryGiftDebit, -in.Amount, debited, in.Key})
	if in.Reward > 0 {
		t.entries = append(t.entries, entry{in.UserID, wallet.EntryLuckyReward, in.Reward, after, in.Key})
	}
	a.balance, a.changed = after, true

	c := &chargeRow{c: in, atMs: t.now, balanceAfter: after, status: wallet.StatusPending}
	if !in.At.IsZero() {
		c.atMs = in.At.UnixMilli()
	}
	c.c.At = time.UnixMilli(c.atMs)
	t.charges[in.Key] = c
	t.created = append(t.created, c)
	return c.receipt(false), nil
}

func (t *txn) credit(userID, amount int64, key string) (int64, bool, error) {
	if c, ok := t.credits[key]; ok {
		if c.userID != userID || c.amount != amount {
			return 0, false, fmt.Errorf("credit key=%q user=%d amount=%d: credited before to user=%d amount=%d: %w",
				key, userID, amount, c.userID, c.amount, wallet.ErrKeyConflict)
		}
		return c.after, true, nil
	}
	a := t.accounts[userID]
	if amount > math.MaxInt64-a.balance {
		return 0, false, fmt.Errorf("credit key=%q user=%d: amount %d overflows balance %d: %w",
			key, userID, amount, a.balance, wallet.ErrBadRequest)
	}
	a.balance += amount
	a.changed = true
	t.credits[key] = credit{userID, amount, a.balance}
	t.entries = append(t.entries, entry{userID, wallet.EntryCredit, amount, a.balance, key})
	return a.balance, false, nil
}

func (t *txn) refund(key string) (wallet.Receipt, error) {
	c := t.charges[key]
	switch {
	case c == nil:
		return wallet.Receipt{}, fmt.Errorf("refund key=%q: %w", key, wallet.ErrNotFound)
	case c.status == wallet.StatusRefunded:
		return c.receipt(true), nil
	case c.status == wallet.StatusSettled:
		return wallet.Receipt{}, fmt.Errorf("refund key=%q: settled: %w", key, wallet.ErrFinal)
	}
	a := t.accounts[c.c.UserID]
	if c.c.Amount > math.MaxInt64-a.balance {
		return wallet.Receipt{}, fmt.Errorf("refund key=%q user=%d: amount %d overflows balance %d: %w",
			key, c.c.UserID, c.c.Amount, a.balance, wallet.ErrBadRequest)
	}
	back := a.balance + c.c.Amount
	if back < c.c.Reward {
		return wallet.Receipt{}, fmt.Errorf("refund key=%q user=%d: balance %d and amount %d do not cover reward %d: %w",
			key, c.c.UserID, a.balance, c.c.Amount, c.c.Reward, wallet.ErrInsufficientFunds)
	}
	after := back - c.c.Reward
	t.entries = append(t.entries, entry{c.c.UserID, wallet.EntryRefund, c.c.Amount, back, key})
	if c.c.Reward > 0 {
		t.entries = append(t.entries, entry{c.c.UserID, wallet.EntryRefundReward, -c.c.Reward, after, key})
	}
	a.balance, a.changed = after, true
	c.status = wallet.StatusRefunded
	return c.receipt(false), nil
}

func (l *Ledger) readCharges(ctx context.Context, tx *sql.Tx, t *txn, keys []string) error {
	return inChunks(ctx, l, tx, keys, func(chunk []string) *stmt {
		return in(l.newStmt(`SELECT `+chargeColumns+` FROM wallet_charges WHERE charge_key IN `), chunk).
			sql(` ORDER BY charge_key` + l.db.Dialect().ForUpdate())
	}, func(rows *sql.Rows) error {
		c, err := scanCharge(rows)
		if err != nil {
			return err
		}
		c.stored = c.status
		t.charges[c.c.Key] = c
		return nil
	})
}

func (l *Ledger) readCredits(ctx context.Context, tx *sql.Tx, t *txn, keys []string) error {
	return inChunks(ctx, l, tx, keys, func(chunk []string) *stmt {
		return in(l.newStmt(`SELECT idem_key, user_id, amount, balance_after FROM wallet_entries WHERE kind = 'credit' AND idem_key IN `), chunk)
	}, func(rows *sql.Rows) error {
		var key string
		var c credit
		if err := rows.Scan(&key, &c.userID, &c.amount, &c.after); err != nil {
			return err
		}
		t.credits[key] = c
		return nil
	})
}

func (l *Ledger) readAccounts(ctx context.Context, tx *sql.Tx, t *txn, users []int64) error {
	for _, u := range users {
		t.accounts[u] = &account{}
	}
	return inChunks(ctx, l, tx, users, func(chunk []int64) *stmt {
		return in(l.newStmt(`SELECT user_id, balance FROM wallet_accounts WHERE user_id IN `), chunk).
			sql(` ORDER BY user_id` + l.db.Dialect().ForUpdate())
	}, func(rows *sql.Rows) error {
		var u, balance int64
		if err := rows.Scan(&u, &balance); err != nil {
			return err
		}
		t.accounts[u] = &account{balance: balance, stored: true}
		return nil
	})
}

// inChunks runs the query build makes for each chunk of ids, in order,
// and calls each for every row.
func inChunks[T string | int64](ctx context.Context, l *Ledger, tx *sql.Tx, ids []T, build func(chunk []T) *stmt, each func(*sql.Rows) error) error {
	for chunk := range slices.Chunk(ids, maxInKeys) {
		rows, err := l.query(ctx, tx, build(chunk))
		if err != nil {
			return l.db.MapErr(err)
		}
		if err := collect(rows, each); err != nil {
			return l.db.MapErr(err)
		}
	}
	return nil
}

// write stores t's changes inside tx; insert starts its INSERTs (see
// sqlstore.LedgerFunc), and exec runs them (at once, or with a one-trip
// commit's other writes: see sqlstore.CommitTx).
func (l *Ledger) write(ctx context.Context, tx *sql.Tx, insert string, t *txn, exec func(*stmt) error) error {
	var fresh, known []int64
	for _, u := range sortedKeys(t.accounts) {
		switch a := t.accounts[u]; {
		case !a.changed:
		case a.stored:
			known = append(known, u)
		default:
			fresh = append(fresh, u)
		}
	}
	account := func(users []int64) func(s *stmt, i int) {
		return func(s *stmt, i int) {
			s.sql("(").int(users[i]).sql(", ").int(t.accounts[users[i]].balance).sql(", ").int(t.now).sql(")")
		}
	}
	// Accounts first: a new account that a concurrent transaction created
	// meanwhile fails here, on its duplicate key, before anything else is written.
	accounts := insert + `wallet_accounts (user_id, balance, updated_at) VALUES `
	if err := l.insert(exec, accounts, "", len(fresh), account(fresh)); err != nil {
		return fmt.Errorf("insert accounts: %w", err)
	}
	if err := l.insert(exec, accounts, l.db.Dialect().Upsert("user_id", "balance", "updated_at"), len(known), account(known)); err != nil {
		return fmt.Errorf("update accounts: %w", err)
	}
	if err := l.insert(exec, insert+`wallet_entries (user_id, kind, amount, balance_after, idem_key, created_at) VALUES `,
		"", len(t.entries), func(s *stmt, i int) {
			e := &t.entries[i]
			s.sql("(").int(e.userID).sql(", ").str(string(e.kind)).sql(", ").int(e.amount).sql(", ").int(e.after).
				sql(", ").str(e.key).sql(", ").int(t.now).sql(")")
		}); err != nil {
		return fmt.Errorf("insert entries: %w", err)
	}
	if err := l.insert(exec, insert+`wallet_charges (`+chargeColumns+`, updated_at) VALUES `,
		"", len(t.created), func(s *stmt, i int) {
			c := t.created[i]
			s.sql("(").str(c.c.Key).sql(", ").int(c.c.UserID).sql(", ").int(c.c.Amount).sql(", ").int(c.c.Reward).
				sql(", ").int(c.c.MultiplierBP).sql(", ").int(c.balanceAfter).sql(", ").str(string(c.status)).
				sql(", ").int(c.atMs).sql(", ").int(t.now).sql(")")
		}); err != nil {
		return fmt.Errorf("insert charges: %w", err)
	}
	// Stored charges that were pending and are no longer: settled or refunded.
	moved := map[wallet.Status][]string{}
	for _, k := range sortedKeys(t.charges) {
		if c := t.charges[k]; c.stored == wallet.StatusPending && c.status != wallet.StatusPending {
			moved[c.status] = append(moved[c.status], k)
		}
	}
	for _, status := range []wallet.Status{wallet.StatusSettled, wallet.StatusRefunded} {
		if err := l.finish(ctx, tx, status, moved[status], t.now); err != nil {
			return fmt.Errorf("mark charges %s: %w", status, err)
		}
	}
	return nil
}

// finish moves pending charges to status, one statement per chunk. Every
// row must still be pending: the transaction read them so (and locked
// them, where rows are locked).
func (l *Ledger) finish(ctx context.Context, tx *sql.Tx, status wallet.Status, keys []string, now int64) error {
	for chunk := range slices.Chunk(keys, maxInKeys) {
		s := l.newStmt(`UPDATE wallet_charges SET status = `).str(string(status)).sql(`, updated_at = `).int(now).
			sql(` WHERE status = 'pending' AND charge_key IN `)
		res, err := l.exec(ctx, tx, in(s, chunk))
		if err != nil {
			return l.db.MapErr(err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return l.db.MapErr(err)
		}
		if n != int64(len(chunk)) {
			return fmt.Errorf("%d of %d charges were no longer pending: %w", int64(len(chunk))-n, len(chunk), store.ErrUnavailable)
		}
	}
	return nil
}

// insert writes n rows with multi-row INSERTs (see chunkRows), each run
// by exec: prefix, the rows that row writes, then suffix.
func (l *Ledger) insert(exec func(*stmt) error, prefix, suffix string, n int, row func(s *stmt, i int)) error {
	for start := 0; start < n; {
		end := start + l.chunkRows(n-start)
		s := l.newStmt(prefix)
		for i := start; i < end; i++ {
			if i > start {
				s.sql(", ")
			}
			row(s, i)
		}
		if err := exec(s.sql(suffix)); err != nil {
			return l.db.MapErr(err)
		}
		start = end
	}
	return nil
}

func scanCharge(s interface{ Scan(...any) error }) (*chargeRow, error) {
	c := &chargeRow{}
	var status string
	err := s.Scan(&c.c.Key, &c.c.UserID, &c.c.Amount, &c.c.Reward, &c.c.MultiplierBP, &c.balanceAfter, &status, &c.atMs)
	c.status = wallet.Status(status)
	c.c.At = time.UnixMilli(c.atMs)
	return c, err
}

func collect(rows *sql.Rows, each func(*sql.Rows) error) error {
	defer rows.Close()
	for rows.Next() {
		if err := each(rows); err != nil {
			return err
		}
	}
	return rows.Err()
}

func sortedKeys[K string | int64, V any](m map[K]V) []K {
	keys := make([]K, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
