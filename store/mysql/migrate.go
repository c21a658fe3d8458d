package mysql

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"sort"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"

	"hyapp/room-service/store"
)

// migrateLockWait is how long a node waits for another node's migration.
const migrateLockWait = 30 // seconds, as GET_LOCK takes it

// Migrate applies the embedded migrations that the database dsn names has
// not applied yet, as Open does; roomctl runs it ahead of a deploy. It
// honours ctx, which bounds a long migration (the connection it uses has no
// read timeout). An unreachable server is store.ErrUnavailable.
func Migrate(ctx context.Context, dsn string) error {
	cfg, err := config(dsn)
	if err != nil {
		return err
	}
	if _, err := migrate(ctx, cfg); err != nil {
		return fmt.Errorf("migrate mysql db=%s: %w", cfg.DBName, err)
	}
	return nil
}

// migrate applies, in file name order, each embedded migration not yet
// recorded in schema_migrations. Each file holds one statement. MySQL
// commits DDL at once, so a migration cannot share a transaction with its
// schema_migrations row: every migration is written to be run again
// (CREATE TABLE IF NOT EXISTS), which covers a crash between the two. MySQL
// has no ADD KEY (or ADD COLUMN) IF NOT EXISTS, so a migration that adds an
// index or a column and fails because it is there counts as applied, and
// one that drops an index and fails because it is gone too.
// A named lock, held on the one connection that migrates, makes nodes that
// start together take turns; the second finds the work done. It returns the
// server's version string (MariaDB's names MariaDB).
func migrate(ctx context.Context, cfg *mysql.Config) (version string, err error) {
	cfg = cfg.Clone()
	// DDL on a large table can outlast any read timeout; ctx bounds it.
	cfg.ReadTimeout, cfg.WriteTimeout = 0, 0
	connector, err := mysql.NewConnector(cfg)
	if err != nil {
		return "", err
	}
	sqlDB := sql.OpenDB(connector)
	defer func() { _ = sqlDB.Close() }()
	conn, err := sqlDB.Conn(ctx)
	if err != nil {
		return "", mapErr(err)
	}
	defer func() { _ = conn.Close() }()

	lock := migrateLockName(cfg.DBName)
	var got sql.NullInt64
	if err := conn.QueryRowContext(ctx, `SELECT GET_LOCK(?, ?)`, lock, migrateLockWait).Scan(&got); err != nil {
		return "", fmt.Errorf("take migration lock %s: %w", lock, mapErr(err))
	}
	if !got.Valid || got.Int64 != 1 {
		return "", fmt.Errorf("take migration lock %s: another node held it for %ds: %w", lock, migrateLockWait, store.ErrUnavailable)
	}
	// Closing the connection releases the lock too, should this fail.
	defer func() { _, _ = conn.ExecContext(context.WithoutCancel(ctx), `DO RELEASE_LOCK(?)`, lock) }()

	if _, err := conn.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version    VARCHAR(255) CHARACTER SET ascii COLLATE ascii_bin NOT NULL PRIMARY KEY,
		applied_at BIGINT NOT NULL
	) ENGINE=InnoDB`); err != nil {
		return "", fmt.Errorf("create schema_migrations: %w", mapErr(err))
	}
	applied := map[string]bool{}
	rows, err := conn.QueryContext(ctx, `SELECT version FROM schema_migrations`)
	if err != nil {
		return "", fmt.Errorf("read schema_migrations: %w", mapErr(err))
	}
	for rows.Next() {
		var v string
		if err := rows.Scan(&v); err != nil {
			_ = rows.Close()
			return "", fmt.Errorf("read schema_migrations: %w", mapErr(err))
		}
		applied[v] = true
	}
	if err := rows.Err(); err != nil {
		return "", fmt.Errorf("read schema_migrations: %w", mapErr(err))
	}

	names, err := fs.Glob(migrations, "migrations/*.sql")
	if err != nil {
		return "", fmt.Errorf("list migrations: %w", err)
	}
	sort.Strings(names)
	for _, name := range names {
		version := strings.TrimSuffix(strings.TrimPrefix(name, "migrations/"), ".sql")
		if applied[version] {
			continue
		}
		body, err := migrations.ReadFile(name)
		if err != nil {
			return "", fmt.Errorf("read migration %s: %w", name, err)
		}
		if _, err := conn.ExecContext(ctx, string(body)); err != nil && !isAlreadyThere(err) {
			return "", fmt.Errorf("migrate version=%s: %w", version, mapErr(err))
		}
		if _, err := conn.ExecContext(ctx, `INSERT INTO schema_migrations (version, applied_at) VALUES (?, ?)`,
			version, time.Now().UnixMilli()); err != nil {
			return "", fmt.Errorf("record migration version=%s: %w", version, mapErr(err))
		}
	}
	if err := conn.QueryRowContext(ctx, `SELECT VERSION()`).Scan(&version); err != nil {
		return "", fmt.Errorf("read the server version: %w", mapErr(err))
	}
	return version, nil
}

// migrateLockName scopes the migration lock to one database: GET_LOCK names
// are server wide, and databases on one server migrate independently.
// Names are limited to 64 characters, so a long database name is hashed.
func migrateLockName(dbName string) string {
	const prefix = "room_service_migrate."
	if len(prefix)+len(dbName) <= 64 {
		return prefix + dbName
	}
	sum := sha256.Sum256([]byte(dbName))
	return prefix + hex.EncodeToString(sum[:16])
}

// isAlreadyThere reports whether a migration failed because the index or
// column it adds exists, or the index it drops does not.
func isAlreadyThere(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && (me.Number == erDupKeyName || me.Number == erDupFieldName || me.Number == erCantDropKey)
}
