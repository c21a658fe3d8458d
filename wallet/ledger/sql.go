package ledger

import (
	"context"
	"database/sql"
	"encoding/hex"
	"math/bits"
	"strconv"
	"strings"
	"sync"
)

// How a write transaction's statements reach the database. A group commit
// runs a handful of statements whose size follows the batch, so what
// counts is the cost of each statement: parsing it, and its round trips.
//
// Where the dialect keeps statements prepared (SQLite) they are prepared
// once on the writer and kept: IN lists are padded to a power of two (repeating the last
// value) and multi-row INSERTs are split into power-of-two chunks, so a few
// dozen statements serve every batch.
//
// Elsewhere (MySQL) a statement is sent as text with its values inline,
// which the server runs in one round trip and without a prepared
// statement. With placeholders the driver would prepare, execute and close
// every statement (two round trips), and keeping prepared statements of
// every batch size on every pooled connection would eat into the server's
// max_prepared_stmt_count. Only numbers and hex literals are inlined, so
// no value is ever parsed as SQL: keys are arbitrary bytes and go in as
// X'...'.

// stmt builds one statement.
type stmt struct {
	inline bool
	b      strings.Builder
	args   []any
}

func (l *Ledger) newStmt(text string) *stmt {
	s := &stmt{inline: !l.db.Dialect().KeepPrepared}
	s.b.WriteString(text)
	return s
}

func (s *stmt) sql(text string) *stmt {
	s.b.WriteString(text)
	return s
}

func (s *stmt) int(v int64) *stmt {
	if s.inline {
		s.b.WriteString(strconv.FormatInt(v, 10))
	} else {
		s.b.WriteByte('?')
		s.args = append(s.args, v)
	}
	return s
}

// str adds a string value: a key, a status or an entry kind.
func (s *stmt) str(v string) *stmt {
	if s.inline {
		s.b.WriteString("X'")
		s.b.WriteString(hex.EncodeToString([]byte(v)))
		s.b.WriteByte('\'')
	} else {
		s.b.WriteByte('?')
		s.args = append(s.args, v)
	}
	return s
}

// in adds "(v1, v2, ...)". Prepared, the list is padded to a power of two.
func in[T string | int64](s *stmt, vals []T) *stmt {
	n := len(vals)
	if !s.inline && n > 0 {
		n = 1 << bits.Len(uint(n-1))
	}
	s.b.WriteByte('(')
	for i := range n {
		if i > 0 {
			s.b.WriteString(", ")
		}
		switch v := any(vals[min(i, len(vals)-1)]).(type) {
		case string:
			s.str(v)
		case int64:
			s.int(v)
		}
	}
	s.b.WriteByte(')')
	return s
}

// chunkRows is how many rows of n the next multi-row INSERT takes: at most
// maxRows, and a power of two when statements are prepared.
func (l *Ledger) chunkRows(n int) int {
	n = min(n, maxRows)
	if l.db.Dialect().KeepPrepared {
		n = 1 << (bits.Len(uint(n)) - 1)
	}
	return n
}

func (l *Ledger) exec(ctx context.Context, tx *sql.Tx, s *stmt) (sql.Result, error) {
	if s.inline {
		return tx.ExecContext(ctx, s.b.String())
	}
	if ps := l.stmts.get(s.b.String()); ps != nil {
		return tx.StmtContext(ctx, ps).ExecContext(ctx, s.args...)
	}
	return tx.ExecContext(ctx, s.b.String(), s.args...)
}

func (l *Ledger) query(ctx context.Context, tx *sql.Tx, s *stmt) (*sql.Rows, error) {
	if s.inline {
		return tx.QueryContext(ctx, s.b.String())
	}
	if ps := l.stmts.get(s.b.String()); ps != nil {
		return tx.StmtContext(ctx, ps).QueryContext(ctx, s.args...)
	}
	return tx.QueryContext(ctx, s.b.String(), s.args...)
}

// read runs a query of s on the read pool, prepared once per text where
// the dialect keeps statements prepared.
func (l *Ledger) read(ctx context.Context, s *stmt) (*sql.Rows, error) {
	if s.inline {
		return l.db.Reader().QueryContext(ctx, s.b.String())
	}
	text := s.b.String()
	l.readMu.Lock()
	ps, ok := l.reads[text]
	l.readMu.Unlock()
	if !ok {
		var err error
		if ps, err = l.db.Reader().PrepareContext(ctx, text); err != nil {
			return l.db.Reader().QueryContext(ctx, text, s.args...)
		}
		l.readMu.Lock()
		if prev, ok := l.reads[text]; ok {
			_ = ps.Close()
			ps = prev
		} else {
			l.reads[text] = ps
		}
		l.readMu.Unlock()
	}
	return ps.QueryContext(ctx, s.args...)
}

// stmtCache holds the prepared write statements, by text. A statement is
// prepared after the transaction that first needed it: SQLite's writer is
// one connection, which the transaction holds, so preparing on the pool
// during it would wait for the transaction to end.
type stmtCache struct {
	mu      sync.Mutex
	m       map[string]*sql.Stmt
	missing map[string]struct{}
}

// get returns the prepared statement, or nil after noting it is missing.
func (c *stmtCache) get(text string) *sql.Stmt {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s, ok := c.m[text]; ok {
		return s
	}
	if c.missing == nil {
		c.missing = map[string]struct{}{}
	}
	c.missing[text] = struct{}{}
	return nil
}

// lacks says a statement was found missing since the last prepare.
func (c *stmtCache) lacks() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.missing) > 0
}

// prepare prepares on db the statements found missing. A statement that
// fails to prepare is left to the next transaction, which sends it as text.
// The lock is not held while preparing: on SQLite that waits for the
// writer, which a room commit may hold while it looks up its statements.
func (c *stmtCache) prepare(ctx context.Context, db *sql.DB) {
	c.mu.Lock()
	texts := make([]string, 0, len(c.missing))
	for text := range c.missing {
		texts = append(texts, text)
	}
	c.mu.Unlock()
	for _, text := range texts {
		s, err := db.PrepareContext(ctx, text)
		if err != nil {
			return
		}
		c.mu.Lock()
		if c.m == nil {
			c.m = map[string]*sql.Stmt{}
		}
		if _, ok := c.m[text]; ok {
			_ = s.Close()
		} else {
			c.m[text] = s
		}
		delete(c.missing, text)
		c.mu.Unlock()
	}
}

func (c *stmtCache) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range c.m {
		_ = s.Close()
	}
	c.m, c.missing = nil, nil
}
