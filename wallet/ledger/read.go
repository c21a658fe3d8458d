package ledger

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"hyapp/room-service/wallet"
)

// Reads run on the adapter's read pool, outside the committers: each sees
// the transactions committed before it started.

// Receipt reads a charge; found is false for an unknown key (and for a key
// no charge can have: empty or too long).
func (l *Ledger) Receipt(ctx context.Context, key string) (wallet.Receipt, bool, error) {
	if !validKey(key) {
		return wallet.Receipt{}, false, nil
	}
	c, err := scanCharge(l.db.Reader().QueryRowContext(ctx,
		`SELECT `+chargeColumns+` FROM wallet_charges WHERE charge_key = ?`, key))
	if errors.Is(err, sql.ErrNoRows) {
		return wallet.Receipt{}, false, nil
	}
	if err != nil {
		return wallet.Receipt{}, false, fmt.Errorf("receipt key=%q: %w", key, l.db.MapErr(err))
	}
	return c.receipt(false), true, nil
}

// Pending lists up to limit pending charges whose At is before before,
// oldest first (ties in key order). A limit of zero or less lists nothing.
func (l *Ledger) Pending(ctx context.Context, before time.Time, after wallet.Cursor, limit int) ([]wallet.Receipt, error) {
	if limit <= 0 {
		return nil, nil
	}
	// At is kept to the millisecond: At < before is at_ms < before rounded up.
	cut := before.UnixMilli()
	if before.After(time.UnixMilli(cut)) {
		cut++
	}
	from := int64(math.MinInt64) // the zero cursor: from the oldest
	if !after.At.IsZero() || after.Key != "" {
		from = after.At.UnixMilli()
	}
	rows, err := l.db.Reader().QueryContext(ctx, `SELECT `+chargeColumns+` FROM wallet_charges
		WHERE status = 'pending' AND charged_at_ms < ? AND (charged_at_ms > ? OR (charged_at_ms = ? AND charge_key > ?))
		ORDER BY charged_at_ms, charge_key LIMIT ?`, cut, from, from, after.Key, limit)
	var out []wallet.Receipt
	if err == nil {
		err = collect(rows, func(rows *sql.Rows) error {
			c, err := scanCharge(rows)
			if err == nil {
				out = append(out, c.receipt(false))
			}
			return err
		})
	}
	if err != nil {
		return nil, fmt.Errorf("pending charges before=%s: %w", before.Format(time.RFC3339Nano), l.db.MapErr(err))
	}
	return out, nil
}

// Quote reads the balances of users and the receipts of those of keys that
// were charged before: what a room decides the gifts it charges inside its
// commit on (wallet.Quoter). Calls that arrive together share one read:
// see readQuotes.
func (l *Ledger) Quote(ctx context.Context, users []int64, keys []string) (wallet.Quote, error) {
	req := &quoteReq{users: users, keys: keys, done: make(chan quoteAnswer, 1)}
	l.mu.RLock()
	if l.closed {
		l.mu.RUnlock()
		return l.quote(ctx, users, keys)
	}
	select {
	case l.quotes <- req:
		l.mu.RUnlock()
	case <-ctx.Done():
		l.mu.RUnlock()
		return wallet.Quote{}, ctxErr(ctx.Err())
	}
	select {
	case a := <-req.done:
		return a.q, a.err
	case <-ctx.Done():
		return wallet.Quote{}, ctxErr(ctx.Err())
	}
}

type quoteReq struct {
	users []int64
	keys  []string
	done  chan quoteAnswer // buffered: a reader never waits for a caller
}

type quoteAnswer struct {
	q   wallet.Quote
	err error
}

// readQuotes is a reader: it takes the Quote calls queued, up to maxInKeys
// users, reads for all of them with one query per table, and answers each
// with its own users and keys. Under load, the calls that queue during one
// read share the next, as a group commit shares a transaction: a thousand
// rooms quoting their gifts cost a few reads, not a thousand.
func (l *Ledger) readQuotes() {
	batch := make([]*quoteReq, 0, 64)
	for first := range l.quotes {
		batch = append(batch[:0], first)
		n := len(first.users)
	more:
		for n < maxInKeys {
			select {
			case r, ok := <-l.quotes:
				if !ok {
					break more
				}
				batch = append(batch, r)
				n += len(r.users)
			default:
				break more
			}
		}
		var users []int64
		var keys []string
		for _, r := range batch {
			users, keys = append(users, r.users...), append(keys, r.keys...)
		}
		ctx, cancel := context.WithTimeout(context.Background(), l.opts.TxTimeout)
		q, err := l.quote(ctx, users, keys)
		cancel()
		for _, r := range batch {
			a := quoteAnswer{err: err}
			if err == nil {
				a.q = wallet.Quote{Balances: make(map[int64]int64, len(r.users)), Receipts: map[string]wallet.Receipt{}}
				for _, u := range r.users {
					a.q.Balances[u] = q.Balances[u]
				}
				for _, k := range r.keys {
					if rc, ok := q.Receipts[k]; ok {
						a.q.Receipts[k] = rc
					}
				}
			}
			r.done <- a
		}
		clear(batch)
	}
}

// Hint answers, without a read, the balances of users as this process last
// saw them (read or committed; possibly stale) (wallet.Quoter); see hints for how far to trust them.
func (l *Ledger) Hint(users []int64) (map[int64]int64, bool) { return l.hints.get(users) }

// quote reads what Quote answers, and keeps the balances it read as hints.
func (l *Ledger) quote(ctx context.Context, users []int64, keys []string) (wallet.Quote, error) {
	q := wallet.Quote{Balances: make(map[int64]int64, len(users)), Receipts: map[string]wallet.Receipt{}}
	began := l.hints.begin()
	users = slices.Compact(slices.Sorted(slices.Values(users)))
	for _, u := range users {
		q.Balances[u] = 0 // a user the ledger never saw has nothing
	}
	for chunk := range slices.Chunk(users, maxInKeys) {
		rows, err := l.read(ctx, in(l.newStmt(`SELECT user_id, balance FROM wallet_accounts WHERE user_id IN `), chunk))
		if err == nil {
			err = collect(rows, func(rows *sql.Rows) error {
				var u, b int64
				err := rows.Scan(&u, &b)
				q.Balances[u] = b
				return err
			})
		}
		if err != nil {
			return wallet.Quote{}, fmt.Errorf("quote balances: %w", l.db.MapErr(err))
		}
	}
	l.hints.read(q.Balances, began)
	keys = slices.DeleteFunc(slices.Clone(keys), func(k string) bool { return !validKey(k) })
	for chunk := range slices.Chunk(keys, maxInKeys) {
		rows, err := l.read(ctx, in(l.newStmt(`SELECT `+chargeColumns+` FROM wallet_charges WHERE charge_key IN `), chunk))
		if err == nil {
			err = collect(rows, func(rows *sql.Rows) error {
				c, err := scanCharge(rows)
				q.Receipts[c.c.Key] = c.receipt(false)
				return err
			})
		}
		if err != nil {
			return wallet.Quote{}, fmt.Errorf("quote receipts: %w", l.db.MapErr(err))
		}
	}
	return q, nil
}

// Balance returns the user's balance, 0 for a user the ledger never saw.
func (l *Ledger) Balance(ctx context.Context, userID int64) (int64, error) {
	var balance int64
	err := l.db.Reader().QueryRowContext(ctx, `SELECT balance FROM wallet_accounts WHERE user_id = ?`, userID).Scan(&balance)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("balance user=%d: %w", userID, l.db.MapErr(err))
	}
	return balance, nil
}

// Entries lists up to limit of the user's journal entries with an id above
// afterEntryID, in id order: page with the last id returned. A limit of
// zero or less lists nothing.
func (l *Ledger) Entries(ctx context.Context, userID int64, afterEntryID int64, limit int) ([]wallet.Entry, error) {
	if limit <= 0 {
		return nil, nil
	}
	out, err := l.entries(ctx, `entry_id > ? ORDER BY entry_id`, userID, afterEntryID, limit)
	if err != nil {
		return nil, fmt.Errorf("entries user=%d after=%d: %w", userID, afterEntryID, err)
	}
	return out, nil
}

// EntriesBefore lists up to limit of the user's journal entries with an id
// below beforeEntryID (0 or less: from the newest), newest first: page
// with the last id returned. A limit of zero or less lists nothing.
func (l *Ledger) EntriesBefore(ctx context.Context, userID int64, beforeEntryID int64, limit int) ([]wallet.Entry, error) {
	if limit <= 0 {
		return nil, nil
	}
	if beforeEntryID <= 0 {
		beforeEntryID = math.MaxInt64
	}
	out, err := l.entries(ctx, `entry_id < ? ORDER BY entry_id DESC`, userID, beforeEntryID, limit)
	if err != nil {
		return nil, fmt.Errorf("entries user=%d before=%d: %w", userID, beforeEntryID, err)
	}
	return out, nil
}

// entries reads up to limit of the user's journal entries past entryID,
// as page (the condition on entry_id and the order) says.
func (l *Ledger) entries(ctx context.Context, page string, userID, entryID int64, limit int) ([]wallet.Entry, error) {
	rows, err := l.db.Reader().QueryContext(ctx, `SELECT entry_id, user_id, kind, amount, balance_after, idem_key, created_at
		FROM wallet_entries WHERE user_id = ? AND `+page+` LIMIT ?`, userID, entryID, limit)
	var out []wallet.Entry
	if err == nil {
		err = collect(rows, func(rows *sql.Rows) error {
			e, err := scanEntry(rows)
			out = append(out, e)
			return err
		})
	}
	return out, l.db.MapErr(err)
}

// scanEntry reads one wallet_entries row selected as entry_id, user_id,
// kind, amount, balance_after, idem_key, created_at.
func scanEntry(rows *sql.Rows) (wallet.Entry, error) {
	var e wallet.Entry
	var kind string
	var created int64
	err := rows.Scan(&e.EntryID, &e.UserID, &kind, &e.Amount, &e.BalanceAfter, &e.Key, &created)
	e.Kind, e.CreatedAt = wallet.EntryKind(kind), time.UnixMilli(created)
	return e, err
}

// Totals sums the whole ledger in one statement, so from one snapshot. It
// scans every charge, credit and account: it is for tests, crash checks
// and operators, not for a request path.
func (l *Ledger) Totals(ctx context.Context) (wallet.Totals, error) {
	rows, err := l.db.Reader().QueryContext(ctx, `
		SELECT status, COUNT(*), COALESCE(SUM(amount), 0), COALESCE(SUM(reward), 0)
			FROM wallet_charges GROUP BY status
		UNION ALL
		SELECT 'credit', COUNT(*), COALESCE(SUM(amount), 0), 0 FROM wallet_entries WHERE kind = 'credit'
		UNION ALL
		SELECT 'account', COUNT(*), COALESCE(SUM(balance), 0), 0 FROM wallet_accounts`)
	var t wallet.Totals
	if err == nil {
		err = collect(rows, func(rows *sql.Rows) error {
			var what string
			var sum wallet.ChargeTotals
			if err := rows.Scan(&what, &sum.Charges, &sum.Amount, &sum.Reward); err != nil {
				return err
			}
			switch wallet.Status(what) {
			case wallet.StatusPending:
				t.Pending = sum
			case wallet.StatusSettled:
				t.Settled = sum
			case wallet.StatusRefunded:
				t.Refunded = sum
			case "credit":
				t.Credits, t.Credited = sum.Charges, sum.Amount
			case "account":
				t.Accounts, t.Balances = sum.Charges, sum.Amount
			}
			return nil
		})
	}
	if err != nil {
		return wallet.Totals{}, fmt.Errorf("wallet totals: %w", l.db.MapErr(err))
	}
	return t, nil
}
