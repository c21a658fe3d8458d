package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"hyapp/room-service/store/internal/ledger"
	"hyapp/room-service/wallet"
)

var _ wallet.Wallet = (*Ledger)(nil)

// LedgerOptions tunes a Ledger's group commit. The zero value is valid.
type LedgerOptions struct {
	// MaxBatch caps the operations (charges, credits, refunds, keys to
	// settle) of one transaction. Default 1024.
	MaxBatch int
	// TxTimeout bounds one transaction. Default 15s.
	TxTimeout time.Duration
}

// Ledger is the embedded COIN ledger, wallet.Wallet in the service's own
// database (tables wallet_accounts, wallet_entries, wallet_charges). Its
// writes go through one committer that merges concurrent calls into one
// BEGIN IMMEDIATE transaction on the store's writer connection, which it
// shares with the room commits; reads use the store's read pool. Beyond
// wallet.Wallet it lists a user's journal (Entries) and sums the ledger
// (Totals). Errors are the wallet sentinels or store.ErrUnavailable. It is
// safe for concurrent use.
type Ledger struct {
	*ledger.Ledger
}

// NewLedger starts a ledger on db. Close the ledger before db.
func NewLedger(db *DB, opts LedgerOptions) *Ledger {
	return &Ledger{ledger.New(ledger.DB{
		Write:          db.ledgerTx,
		Read:           db.read,
		MapErr:         mapErr,
		UpsertAccounts: ` ON CONFLICT (user_id) DO UPDATE SET balance = excluded.balance, updated_at = excluded.updated_at`,
		Prepare:        db.write,
	}, ledger.Options{Workers: 1, MaxBatch: opts.MaxBatch, TxTimeout: opts.TxTimeout})}
}

// ledgerTx runs fn in one BEGIN IMMEDIATE transaction on the writer
// connection. SQLite has one writer, so fn never meets a concurrent one.
func (db *DB) ledgerTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	tx, err := db.write.BeginTx(ctx, nil)
	if err != nil {
		return mapErr(err)
	}
	defer func() { _ = tx.Rollback() }()
	if err := fn(tx); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", mapErr(err))
	}
	return nil
}
