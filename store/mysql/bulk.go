package mysql

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
)

// Limits of one multi-row INSERT. Past a few hundred rows a bigger statement
// no longer pays, and 4 MiB keeps a statement far below max_allowed_packet
// (16 MiB on MariaDB, 64 MiB on MySQL 8.0 by default) and the server's
// memory for one statement modest. A single row larger than the byte limit
// goes alone.
const (
	maxBulkRows  = 256
	maxBulkBytes = 4 << 20
)

// rowOverhead approximates a row's bytes on the wire beyond its strings:
// numbers, type codes and null bitmap.
const rowOverhead = 64

// bulkInsert runs the multi-row INSERTs of one table. A statement of
// maxBulkRows rows is kept prepared: a large commit is mostly such chunks,
// and a prepared statement saves a round trip and the server's parsing of a
// few thousand placeholders. Other row counts are prepared for the one
// execution: keeping one statement per row count on every connection would
// count hundreds against the server's max_prepared_stmt_count.
type bulkInsert struct {
	prefix string    // INSERT INTO t (cols) VALUES
	row    string    // (?, ?, ...)
	full   *sql.Stmt // maxBulkRows rows
}

func newBulkInsert(ctx context.Context, db *sql.DB, prefix, row string) (*bulkInsert, error) {
	b := &bulkInsert{prefix: prefix, row: row}
	full, err := db.PrepareContext(ctx, b.query(maxBulkRows))
	if err != nil {
		return nil, fmt.Errorf("prepare bulk insert %q: %w", prefix, mapErr(err))
	}
	b.full = full
	return b, nil
}

func (b *bulkInsert) query(rows int) string {
	var q strings.Builder
	q.Grow(len(b.prefix) + rows*(len(b.row)+2))
	q.WriteString(b.prefix)
	for i := range rows {
		if i > 0 {
			q.WriteString(", ")
		}
		q.WriteString(b.row)
	}
	return q.String()
}

// exec inserts n rows inside tx, in statements of at most maxBulkRows rows
// and about maxBulkBytes bytes; size(i) estimates row i's bytes and args
// appends its values. Errors are mapped (a duplicate key is store.ErrConflict).
func (b *bulkInsert) exec(ctx context.Context, tx *sql.Tx, n int, size func(i int) int, args func(dst []any, i int) []any) error {
	var buf []any
	for start := 0; start < n; {
		end, bytes := start, 0
		for end < n && end-start < maxBulkRows {
			s := size(end)
			if end > start && bytes+s > maxBulkBytes {
				break
			}
			bytes += s
			end++
		}
		buf = buf[:0]
		for i := start; i < end; i++ {
			buf = args(buf, i)
		}
		var err error
		if end-start == maxBulkRows {
			_, err = tx.StmtContext(ctx, b.full).ExecContext(ctx, buf...)
		} else {
			_, err = tx.ExecContext(ctx, b.query(end-start), buf...)
		}
		if err != nil {
			return mapErr(err)
		}
		start = end
	}
	return nil
}
