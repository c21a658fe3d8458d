// Package sqlite implements store.Repository on SQLite (modernc.org/sqlite,
// pure Go). It is the embedded default: one process owns the database file.
//
// Every write goes through one dedicated writer connection in BEGIN IMMEDIATE
// transactions, so writers never race each other for the lock and a
// transaction never fails half way with SQLITE_BUSY_SNAPSHOT. Reads use a
// separate pool of read-only connections, which WAL lets run alongside the
// writer. The schema is embedded and migrated on Open.
//
// The SQL itself is store/sqlstore's, shared with MySQL; this package holds
// what only SQLite has: opening the file, its pragmas and migrations, the
// single writer, background checkpoints and pruning.
//
// SQLite errors stop here: constraint violations become store.ErrConflict and
// everything else the driver or the file system reports becomes
// store.ErrUnavailable, with the driver's text kept in the message for logs.
package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" database/sql driver

	"hyapp/room-service/store"
	"hyapp/room-service/store/sqlstore"
)

var _ store.Repository = (*DB)(nil)

//go:embed migrations/*.sql
var migrations embed.FS

// Options configures Open. The zero value is valid.
type Options struct {
	// Synchronous is PRAGMA synchronous: "FULL" (the default) makes every
	// commit durable; "NORMAL" keeps the database consistent but a power loss
	// can roll back the last commits (an application crash loses nothing).
	Synchronous string
	// BusyTimeout is how long a statement waits for a lock held by another
	// process before it reports store.ErrUnavailable. Default 5s.
	BusyTimeout time.Duration
	// ReadConns is the size of the read pool. Default 4.
	ReadConns int
	// Metrics hears the background checkpoints (see Metrics).
	Metrics Metrics

	// restartFrames is the log length past which the log is made to start
	// over (default walRestartFrames); tests lower it.
	restartFrames int64
}

const (
	defaultBusyTimeout = 5 * time.Second
	defaultReadConns   = 4
)

func (o Options) withDefaults() (Options, error) {
	switch strings.ToUpper(o.Synchronous) {
	case "":
		o.Synchronous = "FULL"
	case "FULL", "NORMAL":
		o.Synchronous = strings.ToUpper(o.Synchronous)
	default:
		return o, fmt.Errorf("sqlite options: synchronous %q is neither FULL nor NORMAL", o.Synchronous)
	}
	if o.BusyTimeout < 0 {
		return o, fmt.Errorf("sqlite options: negative busy timeout %v", o.BusyTimeout)
	}
	if o.BusyTimeout == 0 {
		o.BusyTimeout = defaultBusyTimeout
	}
	if o.ReadConns < 0 {
		return o, fmt.Errorf("sqlite options: negative read conns %d", o.ReadConns)
	}
	if o.ReadConns == 0 {
		o.ReadConns = defaultReadConns
	}
	if o.restartFrames <= 0 {
		o.restartFrames = walRestartFrames
	}
	return o, nil
}

// dialect is how SQLite's SQL differs from MySQL's (see sqlstore.Dialect).
var dialect = sqlstore.Dialect{
	Name:           "sqlite",
	MapErr:         mapErr,
	SingleWriter:   true,
	PartialIndexes: true,
	KeepPrepared:   true,
	// SQLite keeps a statement journal; MySQL undoes a statement from
	// InnoDB's undo log, which it writes anyway.
	StatementJournal: true,
	InProcess:        true,
}

// DB is a store.Repository on one SQLite file. It is safe for concurrent use;
// concurrent writes queue for the single writer connection.
type DB struct {
	*sqlstore.DB
	write *sql.DB // one connection; every transaction is BEGIN IMMEDIATE
	read  *sql.DB // read-only pool
	ckpt  *checkpointer
}

// Open opens (creating if needed) the database at path, switches it to WAL
// and applies the embedded migrations that it has not applied yet. path is a
// file name; ":memory:" is refused because the writer and the read pool must
// share one database. A process opens a file once at a time: the checkpointer
// syncs it through a descriptor of its own, and closing that descriptor at
// Close drops every POSIX lock the process holds on the file, those of
// another DB on the same file included.
func Open(ctx context.Context, path string, opts Options) (*DB, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	if path == "" || path == ":memory:" || strings.HasPrefix(path, "file:") || strings.ContainsAny(path, "?#") {
		return nil, fmt.Errorf("open sqlite path=%q: want a plain file name without '?' or '#'", path)
	}
	if err := ownerOnly(path); err != nil {
		return nil, fmt.Errorf("open sqlite path=%s: %w", path, err)
	}
	busy := strconv.FormatInt(opts.BusyTimeout.Milliseconds(), 10)

	wq := url.Values{}
	wq.Set("_txlock", "immediate")
	wq.Set("_busy_timeout", busy)
	wq.Set("_journal_mode", "WAL")
	wq.Set("_synchronous", opts.Synchronous)
	// A group commit touches pages of hundreds of rooms; a cache that holds
	// them keeps a transaction from spilling pages to the WAL before it commits.
	wq.Add("_pragma", "cache_size(-65536)")
	wq.Add("_pragma", "wal_autocheckpoint(0)") // checkpoints run off the writer: see checkpointer
	if opts.Synchronous == "FULL" {
		// The writer's log writes are gathered (see gatherVFS), which
		// needs every commit to sync the log.
		if err := registerGather(); err != nil {
			return nil, fmt.Errorf("open sqlite path=%s: %w", path, err)
		}
		wq.Set("vfs", gatherName)
	}
	write, err := sql.Open("sqlite", path+"?"+wq.Encode())
	if err != nil {
		return nil, fmt.Errorf("open sqlite path=%s: %w", path, unavailable(err))
	}
	write.SetMaxOpenConns(1)
	write.SetMaxIdleConns(1)
	write.SetConnMaxLifetime(0)
	write.SetConnMaxIdleTime(0)

	db := &DB{write: write}
	if err := db.migrate(ctx); err != nil {
		_ = write.Close()
		return nil, fmt.Errorf("open sqlite path=%s: %w", path, err)
	}

	rq := url.Values{}
	rq.Set("_busy_timeout", busy)
	rq.Set("_query_only", "1")
	read, err := sql.Open("sqlite", path+"?"+rq.Encode())
	if err != nil {
		_ = write.Close()
		return nil, fmt.Errorf("open sqlite path=%s: %w", path, unavailable(err))
	}
	read.SetMaxOpenConns(opts.ReadConns)
	read.SetMaxIdleConns(opts.ReadConns)
	db.read = read

	// The checkpoint connection runs PASSIVE checkpoints only, which wait
	// for no lock (see checkpointer).
	ckpt, err := sql.Open("sqlite", path)
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("open sqlite path=%s: %w", path, unavailable(err))
	}
	ckpt.SetMaxOpenConns(1)
	// Read-write: some systems (Windows) sync only a handle open for writing.
	file, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		_ = ckpt.Close()
		_ = db.Close()
		return nil, fmt.Errorf("open sqlite path=%s: %w", path, err)
	}
	db.ckpt = startCheckpointer(ckpt, write, file, busy, opts.restartFrames, opts.Metrics)

	if db.DB, err = sqlstore.New(ctx, sqlstore.Config{
		Dialect: dialect, Write: write, Read: read,
	}); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("open sqlite path=%s: %w", path, err)
	}
	return db, nil
}

// Close closes the writer connection, the read pool and the checkpointer,
// and then the checkpointer's descriptor of the file, once every connection
// still in use is handed back and closed (see closeFile). Calls after the
// first return nil; methods called after Close return store.ErrUnavailable.
func (db *DB) Close() error {
	if db.ckpt == nil {
		return errors.Join(db.write.Close(), db.read.Close())
	}
	err := db.ckpt.close()
	err = errors.Join(err, db.write.Close(), db.read.Close())
	return errors.Join(err, db.ckpt.closeFile(db.ckpt.conn, db.write, db.read))
}

// migrate applies, in file name order, each embedded migration not yet
// recorded in schema_migrations, each in its own write transaction. Checking
// inside BEGIN IMMEDIATE makes two processes opening one file at once safe.
func (db *DB) migrate(ctx context.Context) error {
	if _, err := db.write.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version    TEXT    NOT NULL PRIMARY KEY,
		applied_at INTEGER NOT NULL
	)`); err != nil {
		return fmt.Errorf("create schema_migrations: %w", mapErr(err))
	}
	names, err := fs.Glob(migrations, "migrations/*.sql")
	if err != nil {
		return fmt.Errorf("list migrations: %w", err)
	}
	sort.Strings(names)
	for _, name := range names {
		body, err := migrations.ReadFile(name)
		if err != nil {
			return fmt.Errorf("read migration %s: %w", name, err)
		}
		version := strings.TrimSuffix(strings.TrimPrefix(name, "migrations/"), ".sql")
		if err := db.applyMigration(ctx, version, string(body)); err != nil {
			return fmt.Errorf("migrate version=%s: %w", version, err)
		}
	}
	return nil
}

func (db *DB) applyMigration(ctx context.Context, version, body string) error {
	tx, err := db.write.BeginTx(ctx, nil)
	if err != nil {
		return mapErr(err)
	}
	defer func() { _ = tx.Rollback() }()
	var n int
	if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM schema_migrations WHERE version = ?`, version).Scan(&n); err != nil {
		return mapErr(err)
	}
	if n > 0 {
		return nil
	}
	if _, err := tx.ExecContext(ctx, body); err != nil {
		return mapErr(err)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO schema_migrations (version, applied_at) VALUES (?, ?)`,
		version, time.Now().UnixMilli()); err != nil {
		return mapErr(err)
	}
	return mapErr(tx.Commit())
}

// ownerOnly creates the database file readable and writable by its owner
// alone (0600), or narrows an existing one and its WAL files to that.
// SQLite gives the -wal and -shm files it creates the database file's
// mode, so they follow.
func ownerOnly(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		if err := os.Chmod(p, 0o600); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return nil
}
