package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"math/bits"
	"strings"
)

// maxBulkRows caps the rows of one multi-row INSERT. With at most ten
// variables a row it stays far below SQLite's variable limit (32766), and
// past a few hundred rows a bigger statement no longer pays.
const maxBulkRows = 256

// bulkInsert runs multi-row INSERTs with statements prepared once on the
// writer connection. It holds one statement per power of two up to
// maxBulkRows and splits n rows into those sizes (n's binary digits), so any
// row count runs on prepared statements and the set stays small.
type bulkInsert struct {
	cols  int
	stmts []*sql.Stmt // stmts[k] inserts 1<<k rows
}

func newBulkInsert(ctx context.Context, db *sql.DB, prefix, row string) (*bulkInsert, error) {
	b := &bulkInsert{cols: strings.Count(row, "?")}
	for n := 1; n <= maxBulkRows; n *= 2 {
		var q strings.Builder
		q.WriteString(prefix)
		for i := range n {
			if i > 0 {
				q.WriteString(", ")
			}
			q.WriteString(row)
		}
		s, err := db.PrepareContext(ctx, q.String())
		if err != nil {
			return nil, fmt.Errorf("prepare bulk insert rows=%d: %w", n, mapErr(err))
		}
		b.stmts = append(b.stmts, s)
	}
	return b, nil
}

// exec inserts n rows inside tx; args appends row i's values to dst.
// Errors are mapped (a duplicate key is store.ErrConflict).
func (b *bulkInsert) exec(ctx context.Context, tx *sql.Tx, n int, args func(dst []any, i int) []any) error {
	buf := make([]any, 0, b.cols*min(n, maxBulkRows))
	for done := 0; done < n; {
		k := bits.Len(uint(min(n-done, maxBulkRows))) - 1
		rows := 1 << k
		buf = buf[:0]
		for i := done; i < done+rows; i++ {
			buf = args(buf, i)
		}
		if _, err := tx.StmtContext(ctx, b.stmts[k]).ExecContext(ctx, buf...); err != nil {
			return mapErr(err)
		}
		done += rows
	}
	return nil
}
