package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
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
	b, err := os.ReadFile(from)
	if err == nil {
		err = os.WriteFile(to, b, 0o600)
	}
	if err != nil {
		t.Fatal(err)
	}
}

// TestARolledBackTransactionLeavesNothingToWrite: a transaction that spills
// pages to the log and rolls back leaves no gathered frames behind to be
// written after it gave up the log's write lock, over frames another
// writer of the file committed meanwhile.
func TestARolledBackTransactionLeavesNothingToWrite(t *testing.T) {
	ctx := t.Context()
	db, path := openTemp(t, Options{})
	scratch(t, db)
	if _, err := db.write.ExecContext(ctx, `PRAGMA wal_checkpoint(TRUNCATE)`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.write.ExecContext(ctx, `PRAGMA cache_size = 16`); err != nil {
		t.Fatal(err)
	}
	dropped := gatherStats.dropped.Load()
	errRollBack := errors.New("roll back")
	err := db.Tx(ctx, func(tx *sql.Tx) error {
		for k := range 300 {
			if _, err := tx.ExecContext(ctx, `INSERT INTO scratch (k, v) VALUES (?, ?)`, k, strings.Repeat("z", 3900)); err != nil {
				return err
			}
		}
		return errRollBack
	})
	if !errors.Is(err, errRollBack) {
		t.Fatalf("the spilled transaction: %v, want it rolled back", err)
	}
	if gatherStats.dropped.Load() == dropped {
		t.Fatal("the rolled-back transaction left nothing gathered to drop: it did not spill, and the test proves nothing")
	}

	// Another writer of the file, through SQLite's own VFS, commits frames
	// where the rolled-back ones would have gone.
	other, err := sql.Open("sqlite", path+"?_txlock=immediate&_busy_timeout=5000")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	tx, err := other.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k := range 600 {
		if _, err := tx.ExecContext(ctx, `INSERT INTO scratch (k, v) VALUES (?, ?)`, k, strings.Repeat("o", 3900)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := fill(ctx, db, 1000, 1, "after"); err != nil {
		t.Fatalf("the writer after the other's commit: %v", err)
	}
	var check string
	var n int
	if err := other.QueryRowContext(ctx, `PRAGMA integrity_check`).Scan(&check); err != nil || check != "ok" {
		t.Fatalf("integrity %q (%v), want ok", check, err)
	}
	if err := other.QueryRowContext(ctx, `SELECT COUNT(*) FROM scratch`).Scan(&n); err != nil || n != 601 {
		t.Fatalf("%d rows (%v), want the other writer's 600 and the writer's one", n, err)
	}
}
