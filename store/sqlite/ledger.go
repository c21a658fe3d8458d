package sqlite

import "hyapp/room-service/wallet/ledger"

// Ledger starts the embedded COIN ledger on this database (see package
// ledger). Its writes share the one writer connection with the room commits,
// in one committer (opts.Workers is 1 unless set); its reads use the read
// pool. Close the ledger before the DB.
func (db *DB) Ledger(opts ledger.Options) *ledger.Ledger { return ledger.New(db.DB, opts) }
