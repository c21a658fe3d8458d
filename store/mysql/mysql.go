// Package mysql implements store.Repository on MySQL 8.0 and MariaDB 10.6+
// (github.com/go-sql-driver/mysql). Unlike SQLite, one database serves many
// room-service nodes; the rooms row of each room is the fence between them.
//
// # Durability
//
// A commit that returned is durable only if the server makes it so. The
// adapter cannot set these (they are global) and does not check them:
//   - innodb_flush_log_at_trx_commit=1: InnoDB flushes its redo log at every
//     commit (0 or 2 lose up to a second of commits on a crash);
//   - sync_binlog=1 when the binary log is on, so the binlog and InnoDB agree
//     after a crash (replicas and change data capture read the binlog);
//   - binlog_format=ROW when the binary log is on.
//
// # Transactions
//
// Write transactions run at READ COMMITTED, the isolation level Open sets
// on each connection as it connects (one statement per connection, not one
// per transaction), so the server's default does not matter and is not
// changed. A
// batch is fenced on its room's row, which stays locked until commit: two
// writers of one room serialise there, and the second finds the head moved.
// A commit of a few rooms fences each batch with a conditional UPDATE; a
// commit of many rooms locks all their rows with one SELECT ... FOR UPDATE,
// decides the fences from what it read and advances the heads with one
// UPDATE, two statements instead of one per batch. Either way rooms are
// locked in id order, so two commits that share rooms take their locks in
// the same order. A transaction that InnoDB rolls back for a deadlock or a
// lock wait timeout is run again from the start, a few times, with a short
// jittered backoff.
//
// # Connections
//
// Open forces the driver settings the adapter relies on (parseTime,
// clientFoundRows so that an UPDATE reports the rows it matched, READ
// COMMITTED, no multi statements, and client side interpolation, so a
// statement that is not kept prepared costs one round trip, not three
// packets and two) and, unless the DSN sets them,
// connect, read and write timeouts, a strict sql_mode (so an over-long value
// is an error, never silently truncated) and an innodb_lock_wait_timeout
// shorter than the read timeout (so a lock wait ends as a retryable error,
// not as a dropped connection with the transaction's locks still held).
// Statements are prepared on each pool connection as it first needs them:
// a node holds at most about MaxOpenConns×25 server-side statements, which
// counts against the server's max_prepared_stmt_count.
//
// The SQL itself is store/sqlstore's, shared with SQLite; this package holds
// what only MySQL has: the connection settings, migrations under a server
// lock, the dialect (row locks, index hints, READ COMMITTED, the bulk fence
// of the group commit) and pruning in short chunks.
//
// MySQL errors stop here: a duplicate key becomes store.ErrConflict, and
// everything else, lost connections and time-outs included, becomes
// store.ErrUnavailable with the driver's text kept in the message for logs.
package mysql

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"

	"hyapp/room-service/store"
	"hyapp/room-service/store/sqlstore"
)

var _ store.Repository = (*DB)(nil)

//go:embed migrations/*.sql
var migrations embed.FS

// Options configures the connection pool of Open. The zero value is valid.
type Options struct {
	// MaxOpenConns caps the connections to the server. Default 32.
	MaxOpenConns int
	// MaxIdleConns is how many idle connections the pool keeps. Default
	// MaxOpenConns: a connection closed for being idle loses its prepared
	// statements and costs a handshake to replace.
	MaxIdleConns int
	// ConnMaxLifetime closes connections older than this, so the pool
	// follows a failover or a proxy's rebalancing. Default 30 minutes.
	ConnMaxLifetime time.Duration
	// ConnMaxIdleTime closes connections idle for longer than this, before a
	// server (wait_timeout) or a proxy drops them. Default 5 minutes.
	ConnMaxIdleTime time.Duration
	// IdleTxTimeout, when set, has the server end a session that sits idle
	// inside a transaction for this long (whole seconds, at least one): a
	// process frozen or cut off in the middle of a commit would otherwise
	// hold its row locks until it wakes, and another node could not claim
	// its rooms. On MariaDB it is idle_transaction_timeout; MySQL has no
	// such setting, so there it is wait_timeout, which also ends idle
	// connections outside transactions, and the pool closes its idle
	// connections before that. The fleet sets it below the lease TTL.
	IdleTxTimeout time.Duration
}

const (
	defaultMaxOpenConns    = 32
	defaultConnMaxLifetime = 30 * time.Minute
	defaultConnMaxIdleTime = 5 * time.Minute

	defaultConnectTimeout = 3 * time.Second
	defaultIOTimeout      = 10 * time.Second
)

func (o Options) withDefaults() (Options, error) {
	var problems []string
	if o.MaxOpenConns < 0 {
		problems = append(problems, fmt.Sprintf("negative max open conns %d", o.MaxOpenConns))
	}
	if o.MaxIdleConns < 0 {
		problems = append(problems, fmt.Sprintf("negative max idle conns %d", o.MaxIdleConns))
	}
	if o.ConnMaxLifetime < 0 {
		problems = append(problems, fmt.Sprintf("negative conn max lifetime %v", o.ConnMaxLifetime))
	}
	if o.ConnMaxIdleTime < 0 {
		problems = append(problems, fmt.Sprintf("negative conn max idle time %v", o.ConnMaxIdleTime))
	}
	if o.IdleTxTimeout < 0 {
		problems = append(problems, fmt.Sprintf("negative idle transaction timeout %v", o.IdleTxTimeout))
	}
	if len(problems) > 0 {
		return o, fmt.Errorf("mysql options: %s", strings.Join(problems, "; "))
	}
	if o.MaxOpenConns == 0 {
		o.MaxOpenConns = defaultMaxOpenConns
	}
	if o.MaxIdleConns == 0 || o.MaxIdleConns > o.MaxOpenConns {
		o.MaxIdleConns = o.MaxOpenConns
	}
	if o.ConnMaxLifetime == 0 {
		o.ConnMaxLifetime = defaultConnMaxLifetime
	}
	if o.ConnMaxIdleTime == 0 {
		o.ConnMaxIdleTime = defaultConnMaxIdleTime
	}
	return o, nil
}

// dialect is how MySQL's SQL differs from SQLite's (see sqlstore.Dialect).
var dialect = sqlstore.Dialect{
	Name:   "mysql",
	MapErr: mapErr,
	// Write transactions run at READ COMMITTED, every connection's own
	// level (see readCommitted): asking for it per transaction would cost a
	// round trip per transaction.
	LockReads:          true,
	IndexHints:         true,
	UpsertDuplicateKey: true,
	UpdateLimit:        true,
	// 4 MiB keeps a statement far below max_allowed_packet (16 MiB on
	// MariaDB, 64 MiB on MySQL 8.0 by default) and the server's memory for
	// one statement modest. A single row larger than that goes alone.
	MaxBulkBytes: 4 << 20,
	// Each per-batch UPDATE is a round trip and a statement (about 130µs on
	// loopback, several times that across a network); the bulk fence costs
	// two (a locking read and one UPDATE, each sent as one query).
	BulkFenceMinRooms: 3,
	MultiStatements:   true,
	// ascii_bin, the status column's collation, pads with spaces.
	PadPending: true,
}

// DB is a store.Repository on one MySQL or MariaDB database. It is safe for
// concurrent use, also by several processes on one database.
type DB struct {
	*sqlstore.DB
	db *sql.DB
	// The prune reads, prepared.
	selectPruneBounds, selectOutboxBound, selectPruneOut *sql.Stmt
}

// Open connects to the database dsn names (a go-sql-driver DSN such as
// "user:pass@tcp(host:3306)/room"), applies the embedded migrations it has
// not applied yet and prepares the adapter's statements. An unreachable
// server is store.ErrUnavailable; a malformed DSN or bad options are plain
// errors. The DSN's password never appears in an error.
func Open(ctx context.Context, dsn string, opts Options) (*DB, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	cfg, err := config(dsn)
	if err != nil {
		return nil, err
	}
	version, err := migrate(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open mysql db=%s: %w", cfg.DBName, err)
	}
	mariaDB := strings.Contains(version, "MariaDB")
	opts = endIdleTx(cfg, opts, mariaDB)
	readCommitted(cfg, mariaDB)
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, fmt.Errorf("open mysql db=%s: %w", cfg.DBName, err)
	}
	sqlDB := sql.OpenDB(conn)
	sqlDB.SetMaxOpenConns(opts.MaxOpenConns)
	sqlDB.SetMaxIdleConns(opts.MaxIdleConns)
	sqlDB.SetConnMaxLifetime(opts.ConnMaxLifetime)
	sqlDB.SetConnMaxIdleTime(opts.ConnMaxIdleTime)

	db := &DB{db: sqlDB}
	d := dialect
	// A statement past the server's packet limit fails and drops its
	// connection: the SQL layer leaves out a snapshot that would need one.
	if err = sqlDB.QueryRowContext(ctx, `SELECT @@max_allowed_packet`).Scan(&d.MaxPacketBytes); err != nil {
		err = mapErr(err)
	} else if db.DB, err = sqlstore.New(ctx, sqlstore.Config{
		Dialect: d, Write: sqlDB, Read: sqlDB,
	}); err == nil {
		err = db.preparePrune(ctx)
	}
	if err != nil {
		_ = sqlDB.Close()
		return nil, fmt.Errorf("open mysql db=%s: %w", cfg.DBName, err)
	}
	return db, nil
}

// Close closes the connection pool. Calls after the first return nil;
// methods called after Close return store.ErrUnavailable.
func (db *DB) Close() error {
	return db.db.Close()
}

// config parses dsn and forces the driver settings the adapter relies on.
func config(dsn string) (*mysql.Config, error) {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		// The driver's parse errors name the problem, never the password.
		return nil, fmt.Errorf("parse mysql dsn: %w", err)
	}
	if cfg.DBName == "" {
		return nil, errors.New("parse mysql dsn: no database name (want user:pass@tcp(host:3306)/db)")
	}
	cfg.ParseTime = true
	// A statement prepared once and kept (sqlstore's) runs as one round
	// trip; any other statement with arguments (a fence over n rooms, a
	// multi-row INSERT of a size not kept) is sent as one query with its
	// arguments escaped by the driver, instead of prepare, execute and close.
	cfg.InterpolateParams = true
	// A commit's writes go as one query of several statements (see
	// sqlstore's commitOneTrip): one round trip for all of them. Every
	// statement of the adapter takes its values as arguments, escaped by
	// the driver, never spliced into its text, so a value cannot end a
	// statement and start another.
	cfg.MultiStatements = true
	// Rows affected by an UPDATE must be the rows it matched: a fence that
	// matches but changes nothing (a batch without commands, in the same
	// millisecond) has still passed.
	cfg.ClientFoundRows = true
	if cfg.Timeout == 0 {
		cfg.Timeout = defaultConnectTimeout
	}
	if cfg.ReadTimeout == 0 {
		cfg.ReadTimeout = defaultIOTimeout
	}
	if cfg.WriteTimeout == 0 {
		cfg.WriteTimeout = defaultIOTimeout
	}
	if cfg.Params == nil {
		cfg.Params = map[string]string{}
	}
	if !hasParam(cfg.Params, "sql_mode") {
		cfg.Params["sql_mode"] = `IF(FIND_IN_SET('STRICT_TRANS_TABLES', @@sql_mode) OR FIND_IN_SET('STRICT_ALL_TABLES', @@sql_mode), @@sql_mode, CONCAT_WS(',', NULLIF(@@sql_mode, ''), 'STRICT_TRANS_TABLES'))`
	}
	if !hasParam(cfg.Params, "innodb_lock_wait_timeout") {
		// A lock wait that outlived the read timeout would drop the
		// connection while the server goes on waiting, holding the locks
		// the transaction already took. Give up on the server side first.
		wait := min(max(cfg.ReadTimeout/2, time.Second), 50*time.Second)
		cfg.Params["innodb_lock_wait_timeout"] = fmt.Sprint(int(wait / time.Second))
	}
	return cfg, nil
}

// endIdleTx applies opts.IdleTxTimeout to cfg (see Options), for MariaDB
// or MySQL, and returns opts with the pool's idle time below it on MySQL.
func endIdleTx(cfg *mysql.Config, opts Options, mariaDB bool) Options {
	if opts.IdleTxTimeout <= 0 {
		return opts
	}
	secs := max(1, int((opts.IdleTxTimeout+time.Second-1)/time.Second))
	if mariaDB {
		cfg.Params["idle_transaction_timeout"] = fmt.Sprint(secs)
		return opts
	}
	cfg.Params["wait_timeout"] = fmt.Sprint(secs)
	opts.ConnMaxIdleTime = min(opts.ConnMaxIdleTime, time.Duration(secs)*time.Second/2)
	return opts
}

// readCommitted makes READ COMMITTED every connection's isolation level:
// the level of the adapter's write transactions (see the package comment),
// set once per connection, not per transaction. MariaDB names the variable
// tx_isolation (transaction_isolation only from 11.1), MySQL
// transaction_isolation (tx_isolation is gone from 8.0).
func readCommitted(cfg *mysql.Config, mariaDB bool) {
	name := "transaction_isolation"
	if mariaDB {
		name = "tx_isolation"
	}
	for k := range cfg.Params {
		if strings.EqualFold(k, "tx_isolation") || strings.EqualFold(k, "transaction_isolation") {
			delete(cfg.Params, k)
		}
	}
	cfg.Params[name] = "'READ-COMMITTED'"
}

func hasParam(params map[string]string, name string) bool {
	for k := range params {
		if strings.EqualFold(k, name) {
			return true
		}
	}
	return false
}

// preparePrune prepares the prune reads.
func (db *DB) preparePrune(ctx context.Context) error {
	var err error
	if db.selectPruneBounds, err = db.db.PrepareContext(ctx, pruneBoundsQuery); err != nil {
		return fmt.Errorf("prepare prune commands: %w", mapErr(err))
	}
	if db.selectOutboxBound, err = db.db.PrepareContext(ctx, outboxBoundQuery); err != nil {
		return fmt.Errorf("prepare prune outbox: %w", mapErr(err))
	}
	if db.selectPruneOut, err = db.db.PrepareContext(ctx, pruneOutboxQuery); err != nil {
		return fmt.Errorf("prepare prune outbox: %w", mapErr(err))
	}
	return nil
}
