package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"hyapp/room-service/store"
	"hyapp/room-service/store/internal/ledger"
	"hyapp/room-service/wallet"
)

var _ wallet.Wallet = (*Ledger)(nil)

// LedgerOptions tunes a Ledger's group commit. The zero value is valid.
type LedgerOptions struct {
	// Workers is the number of committers, each running one transaction at
	// a time on its own connection. Default 2: one commits while the other
	// reads and writes. More make smaller transactions, and committers that
	// share a hot account wait for each other's locks; a single committer's
	// batches grow with the load instead.
	Workers int
	// MaxBatch caps the operations (charges, credits, refunds, keys to
	// settle) of one transaction. Default 1024.
	MaxBatch int
	// TxTimeout bounds one transaction, retries included. Default 15s.
	TxTimeout time.Duration
}

const defaultLedgerWorkers = 2

// Ledger is the embedded COIN ledger, wallet.Wallet in the service's own
// database (tables wallet_accounts, wallet_entries, wallet_charges). Its
// writes go through a few committers, each merging concurrent calls into
// one READ COMMITTED transaction that locks the charges and then the
// accounts it touches, in key and user id order; nodes sharing the
// database serialise on those rows. A transaction lost to a deadlock, a
// lock wait timeout or a duplicate key another transaction inserted first
// is run again, a few times. Beyond wallet.Wallet it lists a user's
// journal (Entries) and sums the ledger (Totals). Errors are the wallet
// sentinels or store.ErrUnavailable. It is safe for concurrent use.
type Ledger struct {
	*ledger.Ledger
}

// NewLedger starts a ledger on db's connection pool. Close the ledger
// before db.
func NewLedger(db *DB, opts LedgerOptions) *Ledger {
	if opts.Workers <= 0 {
		opts.Workers = defaultLedgerWorkers
	}
	return &Ledger{ledger.New(ledger.DB{
		Write:     db.ledgerTx,
		Read:      db.db,
		MapErr:    mapErr,
		ForUpdate: ` FOR UPDATE`,
		// VALUES() is deprecated by MySQL 8.0.20 but works there, and it is
		// MariaDB's only spelling.
		UpsertAccounts: ` ON DUPLICATE KEY UPDATE balance = VALUES(balance), updated_at = VALUES(updated_at)`,
	}, ledger.Options{Workers: opts.Workers, MaxBatch: opts.MaxBatch, TxTimeout: opts.TxTimeout})}
}

// ledgerTx runs fn in a transaction (see inTx). A duplicate key means a
// concurrent transaction created an account, a charge or a credit this one
// read as missing: nothing of this one is committed, so it runs again, as
// after a deadlock, and then reads the row.
func (db *DB) ledgerTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	return db.inTx(ctx, func(tx *sql.Tx) error {
		err := fn(tx)
		if errors.Is(err, store.ErrConflict) {
			return fmt.Errorf("%w (%w: %v)", store.ErrUnavailable, errLockConflict, err)
		}
		return err
	})
}
