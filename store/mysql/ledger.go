package mysql

import "hyapp/room-service/wallet/ledger"

// Ledger starts the embedded COIN ledger on this database's pool (see
// package ledger): a few committers (2 unless opts.Workers says), each
// merging concurrent calls into one READ COMMITTED transaction that locks
// the charges and then the accounts it touches, so nodes sharing the
// database serialise on those rows. Close the ledger before the DB.
func (db *DB) Ledger(opts ledger.Options) *ledger.Ledger { return ledger.New(db.DB, opts) }
