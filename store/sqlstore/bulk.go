package sqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"math/bits"
)

// maxBulkRows caps the rows of one multi-row INSERT: past a few hundred
// rows a bigger statement no longer pays, and with at most a dozen values a
// row it stays far below either database's placeholder limit.
const maxBulkRows = 256

// rowOverhead approximates a row's bytes on the wire beyond its strings:
// numbers, type codes and null bitmap.
const rowOverhead = 64

// bulkInsert runs the multi-row INSERTs of one table. With
// Dialect.KeepPrepared it holds a statement per power of two up to
// maxBulkRows and splits n rows into those sizes (n's binary digits), so any
// row count runs on prepared statements and the set stays small. Otherwise
// only the maxBulkRows statement is kept (a large commit is mostly such
// chunks) and other sizes go as text.
type bulkInsert struct {
	prefix   string      // INSERT INTO t (cols) VALUES
	row      string      // (?, ?, ...)
	suffix   string      // what follows the rows (an upsert's tail), or ""
	stmts    []*sql.Stmt // stmts[n] inserts n rows; nil: not prepared
	powers   bool
	maxBytes int
}

func (db *DB) newBulkInsert(ctx context.Context, prefix, row string) (*bulkInsert, error) {
	return db.newBulkUpsert(ctx, prefix, row, "")
}

// newBulkUpsert is newBulkInsert with suffix after the rows: the tail of
// an upsert (see Dialect.Upsert).
func (db *DB) newBulkUpsert(ctx context.Context, prefix, row, suffix string) (*bulkInsert, error) {
	b := &bulkInsert{prefix: prefix, row: row, suffix: suffix, stmts: make([]*sql.Stmt, maxBulkRows+1),
		powers: db.d.KeepPrepared, maxBytes: db.d.MaxBulkBytes}
	for n := maxBulkRows; n >= 1; n /= 2 {
		s, err := db.write.PrepareContext(ctx, b.query(n))
		if err != nil {
			return nil, fmt.Errorf("prepare bulk insert %q rows=%d: %w", prefix, n, db.d.MapErr(err))
		}
		b.stmts[n] = s
		if !b.powers {
			break
		}
	}
	return b, nil
}

func (b *bulkInsert) query(rows int) string { return b.prefix + Values(b.row, rows) + b.suffix }

// exec inserts n rows inside tx; size(i) estimates row i's bytes (read
// only under a byte cap) and args appends its values. Errors are mapped (a
// duplicate key is store.ErrConflict).
func (b *bulkInsert) exec(ctx context.Context, tx *sql.Tx, mapErr func(error) error, n int, size func(i int) int, args func(dst []any, i int) []any) error {
	_, err := b.insert(ctx, tx, mapErr, n, size, args)
	return err
}

// insert is exec, and says how many rows, from the first, its statements
// inserted before the one that failed.
func (b *bulkInsert) insert(ctx context.Context, tx *sql.Tx, mapErr func(error) error, n int, size func(i int) int, args func(dst []any, i int) []any) (int, error) {
	var buf []any
	for start := 0; start < n; {
		end := min(n, start+maxBulkRows)
		if b.maxBytes > 0 {
			end = start
			for bytes := 0; end < n && end-start < maxBulkRows; end++ {
				s := size(end)
				if end > start && bytes+s > b.maxBytes {
					break
				}
				bytes += s
			}
		}
		rows := end - start
		if b.powers {
			rows = 1 << (bits.Len(uint(rows)) - 1)
		}
		buf = buf[:0]
		for i := start; i < start+rows; i++ {
			buf = args(buf, i)
		}
		var err error
		if s := b.stmts[rows]; s != nil {
			_, err = tx.StmtContext(ctx, s).ExecContext(ctx, buf...)
		} else {
			_, err = tx.ExecContext(ctx, b.query(rows), buf...)
		}
		if err != nil {
			return start, mapErr(err)
		}
		start += rows
	}
	return n, nil
}
