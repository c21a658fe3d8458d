package sqlstore

import (
	"context"
	"database/sql"

	"hyapp/room-service/store"
)

// CommitMerged runs the merged commit path alone, in a transaction of its
// own, with batches fenced in order.
func (db *DB) CommitMerged(ctx context.Context, batches []store.Batch, order []int, results []error) error {
	return db.Tx(ctx, func(tx *sql.Tx) error { return db.commitMerged(ctx, tx, batches, order, results) })
}
