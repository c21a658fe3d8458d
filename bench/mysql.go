package bench

import (
	"context"
	"database/sql"
	"fmt"
	"sync/atomic"
	"time"

	driver "github.com/go-sql-driver/mysql"

	"hyapp/room-service/store"
	"hyapp/room-service/store/mysql"
)

// MySQL returns the environment of a MySQL or MariaDB server: every Open
// makes a fresh database named after prefix on the server that dsn points at,
// and Cleanup drops them all.
// maxRooms bounds the room batches per transaction (0: 256, the daemon's setting for MySQL).
func MySQL(dsn, prefix string, maxRooms int) (Env, func(context.Context) error, error) {
	if maxRooms <= 0 {
		maxRooms = 256
	}
	base, err := driver.ParseDSN(dsn)
	if err != nil {
		return Env{}, nil, fmt.Errorf("mysql dsn: %w", err)
	}
	admin, err := sql.Open("mysql", withDB(base, ""))
	if err != nil {
		return Env{}, nil, err
	}
	var n atomic.Int64
	var made []string
	fresh := func(ctx context.Context) (string, error) {
		name := fmt.Sprintf("%s_%d_%d", prefix, time.Now().UnixNano()%1e9, n.Add(1))
		if _, err := admin.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
			return "", fmt.Errorf("create database %s: %w", name, err)
		}
		made = append(made, name)
		return withDB(base, name), nil
	}
	env := Env{
		CommitWorkers:  4,
		CommitMaxRooms: maxRooms,
		Open: func(ctx context.Context) (store.Repository, error) {
			d, err := fresh(ctx)
			if err != nil {
				return nil, err
			}
			return mysql.Open(ctx, d, mysql.Options{})
		},
		BareInsert: func(ctx context.Context, total, batch, conns int) (time.Duration, error) {
			d, err := fresh(ctx)
			if err != nil {
				return 0, err
			}
			if err := mysql.Migrate(ctx, d); err != nil {
				return 0, err
			}
			raw, err := sql.Open("mysql", d)
			if err != nil {
				return 0, err
			}
			defer func() { _ = raw.Close() }()
			raw.SetMaxOpenConns(conns)
			return bareParallel(ctx, raw, total, batch, conns)
		},
	}
	cleanup := func(ctx context.Context) error {
		defer func() { _ = admin.Close() }()
		for _, name := range made {
			if _, err := admin.ExecContext(ctx, "DROP DATABASE IF EXISTS "+name); err != nil {
				return err
			}
		}
		return nil
	}
	return env, cleanup, nil
}

func withDB(cfg *driver.Config, name string) string {
	c := cfg.Clone()
	c.DBName = name
	return c.FormatDSN()
}

// bareParallel runs bareLoop on conns connections, each over its own share.
func bareParallel(ctx context.Context, db *sql.DB, total, batch, conns int) (time.Duration, error) {
	start := time.Now()
	share := total / conns / batch * batch
	err := parallel(conns, conns, func(w int) error {
		_, err := bareLoopFrom(ctx, db, "INSERT INTO ", w*share, share, batch)
		return err
	})
	return time.Since(start), err
}
