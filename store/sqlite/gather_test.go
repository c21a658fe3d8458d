package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// scratch creates a table on db's writer for the tests below.
func scratch(t *testing.T, db *DB) {
	t.Helper()
	if _, err := db.write.ExecContext(t.Context(), `CREATE TABLE scratch (k INTEGER PRIMARY KEY, v TEXT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
}

// fill writes rows rows of about a page each, keys from first, values
// tagged with tag, in one transaction.
func fill(ctx context.Context, db *DB, first, rows int, tag string) error {
	return db.Tx(ctx, func(tx *sql.Tx) error {
		for k := first; k < first+rows; k++ {
			v := fmt.Sprintf("%s:%d:%s", tag, k, strings.Repeat("x", 3900))
			if _, err := tx.ExecContext(ctx, `INSERT OR REPLACE INTO scratch (k, v) VALUES (?, ?)`, k, v); err != nil {
				return err
			}
		}
		return nil
	})
}

// TestTheWriterGathersItsLogFrames: under synchronous FULL a commit of a
// hundred pages reaches the log in a few writes instead of two per page,
// and a reader sees all of it as soon as the commit returns; under NORMAL
// the log is written as SQLite writes it.
func TestTheWriterGathersItsLogFrames(t *testing.T) {
	ctx := t.Context()
	db, _ := openTemp(t, Options{})
	scratch(t, db)
	asked, written := gatherStats.asked.Load(), gatherStats.written.Load()
	if err := fill(ctx, db, 0, 100, "a"); err != nil {
		t.Fatal(err)
	}
	asked, written = gatherStats.asked.Load()-asked, gatherStats.written.Load()-written
	if asked < 200 || written > asked/8 {
		t.Fatalf("a commit of 100 pages: SQLite wrote the log %d times, the file was written %d times; want at least 200 and at most an eighth", asked, written)
	}
	var n, size int
	if err := db.read.QueryRowContext(ctx, `SELECT COUNT(*), SUM(LENGTH(v)) FROM scratch WHERE v LIKE 'a:%'`).Scan(&n, &size); err != nil || n != 100 || size < 100*3900 {
		t.Fatalf("a reader after the commit: %d rows of %d bytes (%v), want 100 rows", n, size, err)
	}

	normal, _ := openTemp(t, Options{Synchronous: "NORMAL"})
	scratch(t, normal)
	asked = gatherStats.asked.Load()
	if err := fill(ctx, normal, 0, 100, "a"); err != nil {
		t.Fatal(err)
	}
	if d := gatherStats.asked.Load() - asked; d != 0 {
		t.Fatalf("under synchronous NORMAL %d log writes were gathered, want none", d)
	}
}

// TestTheWriterReadsBackWhatItSpilled: a transaction larger than the
// writer's cache spills pages to the log before its commit and reads them
// back from there; it reads what it wrote, gathered or not.
func TestTheWriterReadsBackWhatItSpilled(t *testing.T) {
	ctx := t.Context()
	db, _ := openTemp(t, Options{})
	scratch(t, db)
	if _, err := db.write.ExecContext(ctx, `PRAGMA cache_size = 16`); err != nil {
		t.Fatal(err)
	}
	err := db.Tx(ctx, func(tx *sql.Tx) error {
		for pass, tag := range []string{"first", "second"} {
			for k := range 300 {
				v := fmt.Sprintf("%s:%d:%s", tag, k, strings.Repeat("y", 3900))
				if _, err := tx.ExecContext(ctx, `INSERT OR REPLACE INTO scratch (k, v) VALUES (?, ?)`, k, v); err != nil {
					return fmt.Errorf("pass %d: %w", pass, err)
				}
			}
		}
		var n int
		if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM scratch WHERE v LIKE 'second:%'`).Scan(&n); err != nil || n != 300 {
			return fmt.Errorf("within the transaction: %d rows of the second pass (%v), want 300", n, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var n int
	if err := db.read.QueryRowContext(ctx, `SELECT COUNT(*) FROM scratch WHERE v LIKE 'second:' || k || ':%'`).Scan(&n); err != nil || n != 300 {
		t.Fatalf("a reader after the commit: %d rows of the second pass (%v), want 300", n, err)
	}
}

// TestACopyBetweenCommitsHoldsEveryCommit: the database and its log, copied
// as a process that died right after a commit returned would leave them,
// open with every committed row, whatever the commits' sizes.
func TestACopyBetweenCommitsHoldsEveryCommit(t *testing.T) {
	ctx := t.Context()
	db, path := openTemp(t, Options{})
	scratch(t, db)
	key := 0
	for round := range 4 {
		for i := range 25 {
			rows := 1 + (i*37+round*11)%90
			if err := fill(ctx, db, key, rows, fmt.Sprintf("r%d", round)); err != nil {
				t.Fatal(err)
			}
			key += rows
		}
		dir := t.TempDir()
		for _, suffix := range []string{"", "-wal"} {
			copyFile(t, path+suffix, filepath.Join(dir, "room.db"+suffix))
		}
		image, err := sql.Open("sqlite", filepath.Join(dir, "room.db"))
		if err != nil {
			t.Fatal(err)
		}
		var check string
		var n, last int
		err = image.QueryRowContext(ctx, `PRAGMA integrity_check`).Scan(&check)
		if err == nil {
			err = image.QueryRowContext(ctx, `SELECT COUNT(*), MAX(k) FROM scratch`).Scan(&n, &last)
		}
		_ = image.Close()
		if err != nil || check != "ok" || n != key || last != key-1 {
			t.Fatalf("copy after round %d: integrity %q, %d rows up to key %d (%v); want ok and %d rows", round, check, n, last, err, key)
		}
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	src, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.Create(to)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
}
