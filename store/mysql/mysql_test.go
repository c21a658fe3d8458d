package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"go.uber.org/goleak"

	"hyapp/room-service/outbox"
	"hyapp/room-service/store"
	"hyapp/room-service/store/mysql/mysqltest"
	"hyapp/room-service/store/sqlstore"
	"hyapp/room-service/store/storetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func openDSN(t testing.TB, dsn string, opts Options) *DB {
	t.Helper()
	db, err := Open(context.Background(), dsn, opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		if err := db.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return db
}

// rawDB is a plain connection pool on dsn, for what the Repository cannot
// do: inspect the schema, hold locks, make a row dead.
func rawDB(t testing.TB, dsn string) *sql.DB {
	t.Helper()
	raw, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = raw.Close() })
	return raw
}

// TestRepository runs the contract suite with a fresh database per subtest.
func TestRepository(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Repository {
		return openDSN(t, mysqltest.DSN(t), Options{})
	})
}

// TestRepositorySharedDB runs the suite with every subtest on one database,
// as nodes share one in production.
func TestRepositorySharedDB(t *testing.T) {
	db := openDSN(t, mysqltest.DSN(t), Options{})
	storetest.Run(t, func(*testing.T) store.Repository { return db })
}

func TestConfig(t *testing.T) {
	cfg, err := config("u:secret@tcp(db:3306)/room")
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.ParseTime || !cfg.InterpolateParams || !cfg.MultiStatements || !cfg.ClientFoundRows {
		t.Fatalf("forced flags: parseTime %v interpolateParams %v multiStatements %v clientFoundRows %v",
			cfg.ParseTime, cfg.InterpolateParams, cfg.MultiStatements, cfg.ClientFoundRows)
	}
	if cfg.Timeout != defaultConnectTimeout || cfg.ReadTimeout != defaultIOTimeout || cfg.WriteTimeout != defaultIOTimeout {
		t.Fatalf("timeouts %v/%v/%v, want the defaults", cfg.Timeout, cfg.ReadTimeout, cfg.WriteTimeout)
	}
	if cfg.Params["innodb_lock_wait_timeout"] != "5" || !strings.Contains(cfg.Params["sql_mode"], "STRICT_TRANS_TABLES") {
		t.Fatalf("session params %v, want a 5s lock wait and a strict sql_mode", cfg.Params)
	}

	// What the DSN sets wins, except the flags the adapter relies on.
	cfg, err = config("u:p@tcp(db:3306)/room?timeout=1s&readTimeout=30s&writeTimeout=2s&interpolateParams=false&parseTime=false&innodb_lock_wait_timeout=7&sql_mode=%27ANSI%27")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Timeout != time.Second || cfg.ReadTimeout != 30*time.Second || cfg.WriteTimeout != 2*time.Second {
		t.Fatalf("timeouts %v/%v/%v, want the DSN's", cfg.Timeout, cfg.ReadTimeout, cfg.WriteTimeout)
	}
	if !cfg.InterpolateParams || !cfg.ParseTime || cfg.Params["innodb_lock_wait_timeout"] != "7" || cfg.Params["sql_mode"] != "'ANSI'" {
		t.Fatalf("config %+v, params %v", cfg, cfg.Params)
	}

	for _, dsn := range []string{"u:p@tcp(db:3306)/", "not a dsn", "u:p@tcp(db:3306/room"} {
		if _, err := config(dsn); err == nil {
			t.Errorf("config(%q) succeeded, want an error", dsn)
		}
	}
	if _, err := config("u:secret@tcp(db:3306)/"); err == nil || strings.Contains(err.Error(), "secret") {
		t.Errorf("config error %v must not show the password", err)
	}
	for _, o := range []Options{{MaxOpenConns: -1}, {MaxIdleConns: -1}, {ConnMaxLifetime: -1}, {ConnMaxIdleTime: -1}} {
		if db, err := Open(t.Context(), "u:p@tcp(127.0.0.1:1)/room", o); err == nil {
			_ = db.Close()
			t.Errorf("Open with %+v succeeded, want an error", o)
		}
	}
	o, err := Options{MaxOpenConns: 8, MaxIdleConns: 20}.withDefaults()
	if err != nil || o.MaxIdleConns != 8 || o.ConnMaxLifetime != defaultConnMaxLifetime || o.ConnMaxIdleTime != defaultConnMaxIdleTime {
		t.Fatalf("withDefaults = %+v, %v", o, err)
	}
}

func TestOpenUnreachableIsUnavailable(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	// Port 1 on loopback refuses at once.
	_, err := Open(ctx, "root@tcp(127.0.0.1:1)/room?timeout=1s", Options{})
	if !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("Open(unreachable): %v, want ErrUnavailable", err)
	}
	if err := Migrate(ctx, "root@tcp(127.0.0.1:1)/room?timeout=1s"); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("Migrate(unreachable): %v, want ErrUnavailable", err)
	}
}

func TestMigrationsIdempotentAndConcurrent(t *testing.T) {
	ctx := t.Context()
	dsn := mysqltest.DSN(t)
	// Two nodes and an operator migrate a fresh database at once.
	var wg sync.WaitGroup
	dbs := make([]*DB, 2)
	errs := make([]error, 3)
	for i := range dbs {
		wg.Go(func() { dbs[i], errs[i] = Open(ctx, dsn, Options{}) })
	}
	wg.Go(func() { errs[2] = Migrate(ctx, dsn) })
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("concurrent migration %d: %v", i, err)
		}
	}
	for _, db := range dbs {
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 {
		db := openDSN(t, dsn, Options{})
		if err := db.SaveRoomMeta(ctx, store.RoomMeta{RoomID: "r", SeatCount: 8}); err != nil {
			t.Fatalf("SaveRoomMeta after migrations: %v", err)
		}
		if err := Migrate(ctx, dsn); err != nil {
			t.Fatalf("Migrate again: %v", err)
		}
	}

	files, err := fs.Glob(migrations, "migrations/*.sql")
	if err != nil || len(files) == 0 {
		t.Fatalf("embedded migrations: %v, %v", files, err)
	}
	var n, distinct int
	if err := rawDB(t, dsn).QueryRowContext(ctx, `SELECT COUNT(*), COUNT(DISTINCT version) FROM schema_migrations`).Scan(&n, &distinct); err != nil {
		t.Fatal(err)
	}
	if n != len(files) || distinct != len(files) {
		t.Fatalf("schema_migrations has %d rows (%d distinct), want %d", n, distinct, len(files))
	}
}

// TestMigrationRunAgainAfterCrash runs index migrations again, as after a
// crash between their DDL and their record: the index they add is there, or
// the one they drop is gone, so they count as applied.
func TestMigrationRunAgainAfterCrash(t *testing.T) {
	ctx := t.Context()
	dsn := mysqltest.DSN(t)
	if err := Migrate(ctx, dsn); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	raw := rawDB(t, dsn)
	for _, version := range []string{"0005_room_outbox_room_pending", "0010_drop_room_outbox_room"} {
		if res, err := raw.ExecContext(ctx, `DELETE FROM schema_migrations WHERE version = ?`, version); err != nil {
			t.Fatal(err)
		} else if n, _ := res.RowsAffected(); n != 1 {
			t.Fatalf("migration %s was not recorded", version)
		}
		if err := Migrate(ctx, dsn); err != nil {
			t.Fatalf("Migrate with %s done but unrecorded: %v", version, err)
		}
		var n int
		if err := raw.QueryRowContext(ctx, `SELECT COUNT(*) FROM schema_migrations WHERE version = ?`, version).Scan(&n); err != nil || n != 1 {
			t.Fatalf("migration %s recorded %d times, err %v; want once", version, n, err)
		}
	}
	var indexes int
	if err := raw.QueryRowContext(ctx, `SELECT COUNT(*) FROM information_schema.statistics
		WHERE table_schema = DATABASE() AND table_name = 'room_outbox' AND index_name = 'room_outbox_room'`).Scan(&indexes); err != nil || indexes != 0 {
		t.Fatalf("room_outbox_room: %d index columns, err %v; want it dropped", indexes, err)
	}
}

func TestMigrateLockName(t *testing.T) {
	if got := migrateLockName("room"); got != "room_service_migrate.room" {
		t.Fatalf("lock name %q", got)
	}
	long := migrateLockName(strings.Repeat("d", 64))
	if len(long) > 64 || long == migrateLockName(strings.Repeat("e", 64)) {
		t.Fatalf("lock name for a long database name: %q", long)
	}
}

// TestWriteTransactionsReadCommitted: every connection runs at READ
// COMMITTED, whatever the DSN or the server's default says, under the name
// the server knows.
func TestWriteTransactionsReadCommitted(t *testing.T) {
	for _, c := range []struct {
		dsn     string
		mariaDB bool
		want    string
	}{
		{"u:p@tcp(db:3306)/room", true, "tx_isolation"},
		{"u:p@tcp(db:3306)/room?transaction_isolation=%27SERIALIZABLE%27", true, "tx_isolation"},
		{"u:p@tcp(db:3306)/room?TX_ISOLATION=%27SERIALIZABLE%27", false, "transaction_isolation"},
	} {
		cfg, err := config(c.dsn)
		if err != nil {
			t.Fatal(err)
		}
		readCommitted(cfg, c.mariaDB)
		var names []string
		for k := range cfg.Params {
			if strings.Contains(strings.ToLower(k), "isolation") {
				names = append(names, k)
			}
		}
		if len(names) != 1 || names[0] != c.want || cfg.Params[c.want] != "'READ-COMMITTED'" {
			t.Errorf("%s (MariaDB %v): isolation params %v = %v, want only %s='READ-COMMITTED'", c.dsn, c.mariaDB, names, cfg.Params, c.want)
		}
	}

	// On the server, with a DSN that asks for another level.
	ctx := t.Context()
	cfg, err := mysql.ParseDSN(mysqltest.DSN(t))
	if err != nil {
		t.Fatal(err)
	}
	var version string
	if err := rawDB(t, cfg.FormatDSN()).QueryRowContext(ctx, `SELECT VERSION()`).Scan(&version); err != nil {
		t.Fatal(err)
	}
	name := "transaction_isolation"
	if strings.Contains(version, "MariaDB") {
		name = "tx_isolation"
	}
	if cfg.Params == nil {
		cfg.Params = map[string]string{}
	}
	cfg.Params[name] = "'SERIALIZABLE'"
	db := openDSN(t, cfg.FormatDSN(), Options{})
	var level string
	if err := db.Tx(ctx, func(tx *sql.Tx) error { return tx.QueryRowContext(ctx, `SELECT @@SESSION.`+name).Scan(&level) }); err != nil {
		t.Fatal(err)
	}
	if level != "READ-COMMITTED" {
		t.Fatalf("a write transaction runs at %s, want READ-COMMITTED", level)
	}
}

func TestSchemaStoresBytesAndIsStrict(t *testing.T) {
	ctx := t.Context()
	dsn := mysqltest.DSN(t)
	db := openDSN(t, dsn, Options{})
	raw := rawDB(t, dsn)

	// Ids are binary strings and payloads blobs, not JSON or text.
	for _, col := range []struct{ table, column, want string }{
		{"rooms", "room_id", "varbinary"},
		{"room_command_log", "room_id", "varbinary"},
		{"room_command_log", "command_id", "varbinary"},
		{"room_command_log", "payload", "mediumblob"},
		{"room_snapshots", "payload", "longblob"},
		{"room_outbox", "event_id", "varbinary"},
		{"room_outbox", "payload", "mediumblob"},
	} {
		var typ string
		if err := raw.QueryRowContext(ctx, `SELECT DATA_TYPE FROM information_schema.COLUMNS
			WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ? AND COLUMN_NAME = ?`, col.table, col.column).Scan(&typ); err != nil {
			t.Fatalf("%s.%s: %v", col.table, col.column, err)
		}
		if typ != col.want {
			t.Errorf("%s.%s is %s, want %s", col.table, col.column, typ, col.want)
		}
	}

	// The session is strict: an over-long id is refused, not truncated into
	// another room's id. Errors other than a duplicate key are unavailable.
	long := strings.Repeat("r", 129)
	if err := db.SaveRoomMeta(ctx, store.RoomMeta{RoomID: long}); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("SaveRoomMeta(129-byte id): %v, want ErrUnavailable", err)
	}
	if _, found, err := db.GetRoomMeta(ctx, long[:128]); err != nil || found {
		t.Fatalf("GetRoomMeta(truncated id) = found %v, err %v; want nothing stored", found, err)
	}
}

// TestPruneScanUsesIndexInIDOrder checks that retention finds published
// rows through room_outbox_pending (status first), oldest id first.
func TestPruneScanUsesIndexInIDOrder(t *testing.T) {
	ctx := t.Context()
	dsn := mysqltest.DSN(t)
	db := openDSN(t, dsn, Options{})
	var rows []outbox.Record
	for v := int64(1); v <= 200; v++ {
		rows = append(rows, outbox.Record{EventID: fmt.Sprintf("r/%d/0", v), RoomID: "r", RoomVersion: v, EventType: "E"})
	}
	if err := db.SaveOutbox(ctx, rows); err != nil {
		t.Fatal(err)
	}
	for _, r := range rows[:150] {
		if err := db.MarkOutboxPublished(ctx, r.EventID); err != nil {
			t.Fatal(err)
		}
	}
	raw := rawDB(t, dsn)
	if _, err := raw.ExecContext(ctx, `ANALYZE TABLE room_outbox`); err != nil {
		t.Fatal(err)
	}
	q := `EXPLAIN ` + bind(pruneOutboxQuery, "180", "1", "10")
	if key, extra := explain(t, raw, q); key != "room_outbox_pending" || strings.Contains(extra, "filesort") {
		t.Errorf("%s: key %q, extra %q; want room_outbox_pending without a sort", q, key, extra)
	}
}

// TestOutboxRelayReadsUseIndexes checks that the relay's reads and the
// stats stay on the pending (or dead) rows of an index, whatever published
// history there is, and need no sort.
func TestOutboxRelayReadsUseIndexes(t *testing.T) {
	ctx := t.Context()
	dsn := mysqltest.DSN(t)
	db := openDSN(t, dsn, Options{})
	var rows []outbox.Record
	for v := int64(1); v <= 400; v++ {
		room := fmt.Sprintf("r%d", v%4)
		rows = append(rows, outbox.Record{EventID: fmt.Sprintf("%s/%d/0", room, v), RoomID: room, RoomVersion: v, EventType: "E"})
	}
	if err := db.SaveOutbox(ctx, rows); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, r := range rows[:300] {
		ids = append(ids, r.EventID)
	}
	if err := db.MarkOutboxPublishedBatch(ctx, ids); err != nil {
		t.Fatal(err)
	}
	if _, err := db.FailOutbox(ctx, rows[399].EventID, "poison", time.Time{}, 1); err != nil {
		t.Fatal(err)
	}
	raw := rawDB(t, dsn)
	if _, err := raw.ExecContext(ctx, `ANALYZE TABLE room_outbox`); err != nil {
		t.Fatal(err)
	}
	q := sqlstore.OutboxQueries(&dialect)
	for _, tc := range []struct{ query, key string }{
		{bind(q.ListRoomOutbox, "'r1'", "10"), "room_outbox_room_pending"},
		{q.StatsPending, "room_outbox_pending"},
		{q.StatsPublished, "room_outbox_pending"},
		{q.StatsDead, "room_outbox_pending"},
	} {
		key, extra := explain(t, raw, "EXPLAIN "+tc.query)
		if key != tc.key || (strings.Contains(tc.query, "ORDER BY") && strings.Contains(extra, "filesort")) {
			t.Errorf("%s: key %q, extra %q; want %s without a sort", tc.query, key, extra, tc.key)
		}
	}
	// The heads are found among the pending rows (a ref on the pending
	// index), never by walking the table's published history.
	heads := "EXPLAIN " + bind(q.ListHeads, "0", "10")
	plans, err := raw.QueryContext(ctx, heads)
	if err != nil {
		t.Fatal(err)
	}
	defer plans.Close()
	var plan []string
	for plans.Next() {
		var id, selectType, table, typ, possible, key, keyLen, ref, nrows, extra sql.NullString
		if err := plans.Scan(&id, &selectType, &table, &typ, &possible, &key, &keyLen, &ref, &nrows, &extra); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, fmt.Sprintf("%s %s %s %s", table.String, typ.String, key.String, extra.String))
		if table.String == "room_outbox" && (typ.String != "ref" || key.String != "room_outbox_pending") {
			t.Errorf("%s: %v; want the pending index", heads, plan)
		}
		if table.String == "o" && key.String != "PRIMARY" {
			t.Errorf("%s: %v; want each head read by its id", heads, plan)
		}
	}
	if err := plans.Err(); err != nil || len(plan) != 3 {
		t.Fatalf("%s: %v, %v", heads, plan, err)
	}
}

// bind replaces the placeholders of q with literal values, in order, for EXPLAIN.
func bind(q string, vals ...string) string {
	for _, v := range vals {
		q = strings.Replace(q, "?", v, 1)
	}
	return q
}

// explain returns the key and Extra of the first row of an EXPLAIN.
func explain(t *testing.T, raw *sql.DB, q string) (key, extra string) {
	t.Helper()
	rows, err := raw.QueryContext(t.Context(), q)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		t.Fatal(err)
	}
	if !rows.Next() {
		t.Fatalf("%s: no plan", q)
	}
	vals := make([]sql.NullString, len(cols))
	ptrs := make([]any, len(cols))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	if err := rows.Scan(ptrs...); err != nil {
		t.Fatal(err)
	}
	for i, c := range cols {
		switch strings.ToLower(c) {
		case "key":
			key = vals[i].String
		case "extra":
			extra = vals[i].String
		}
	}
	return key, extra
}

// TestPruneOutboxKeepsDeadRows covers what the Repository never makes: a
// dead row that carries a publish time.
func TestPruneOutboxKeepsDeadRows(t *testing.T) {
	ctx := t.Context()
	dsn := mysqltest.DSN(t)
	db := openDSN(t, dsn, Options{})
	rows := []outbox.Record{
		{EventID: "r/1/0", RoomID: "r", RoomVersion: 1, EventType: "E"},
		{EventID: "r/2/0", RoomID: "r", RoomVersion: 2, EventType: "E"},
	}
	if err := db.SaveOutbox(ctx, rows); err != nil {
		t.Fatal(err)
	}
	if err := db.MarkOutboxPublished(ctx, "r/1/0"); err != nil {
		t.Fatal(err)
	}
	raw := rawDB(t, dsn)
	if _, err := raw.ExecContext(ctx, `UPDATE room_outbox SET status = 'dead', published_at = 1 WHERE event_id = 'r/2/0'`); err != nil {
		t.Fatal(err)
	}
	if n, err := db.PruneOutbox(ctx, time.Now().Add(time.Hour), 100); err != nil || n != 1 {
		t.Fatalf("PruneOutbox = %d, %v; want 1 (the published row)", n, err)
	}
	var status string
	if err := raw.QueryRowContext(ctx, `SELECT status FROM room_outbox WHERE event_id = 'r/2/0'`).Scan(&status); err != nil || status != "dead" {
		t.Fatalf("dead row after pruning: status %q, err %v", status, err)
	}
}

func TestPruneInChunks(t *testing.T) {
	// More rows than one chunk: PruneCommands and PruneOutbox loop within a call.
	ctx := t.Context()
	db := openDSN(t, mysqltest.DSN(t), Options{})
	const n = pruneChunk + 37
	id, claim := claimedRoom(t, db, "chunks")
	b := benchBatch(id, claim.Epoch, 0, n, []byte("{}"))
	for i := range b.Commands {
		b.Commands[i].CreatedAt = time.Now().Add(-time.Hour)
	}
	b.Snapshot = &store.SnapshotRecord{RoomID: id, RoomVersion: n, Payload: []byte("s")}
	mustCommit(t, db, b)
	for _, r := range b.Outbox {
		if err := db.MarkOutboxPublished(ctx, r.EventID); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := db.PruneCommands(ctx, 0, time.Now(), 10*n); err != nil || got != n {
		t.Fatalf("PruneCommands = %d, %v; want %d", got, err, n)
	}
	if got, err := db.PruneOutbox(ctx, time.Now().Add(time.Second), n-1); err != nil || got != n-1 {
		t.Fatalf("PruneOutbox(limit %d) = %d, %v", n-1, got, err)
	}
	if got, err := db.PruneOutbox(ctx, time.Now().Add(time.Second), n); err != nil || got != 1 {
		t.Fatalf("PruneOutbox(rest) = %d, %v; want 1", got, err)
	}
}

func TestContextAndClose(t *testing.T) {
	ctx := t.Context()
	db, err := Open(ctx, mysqltest.DSN(t), Options{})
	if err != nil {
		t.Fatal(err)
	}
	id, claim := claimedRoom(t, db, "ctx")

	canceled, cancel := context.WithCancel(ctx)
	cancel()
	_, err = db.CommitBatches(canceled, []store.Batch{benchBatch(id, claim.Epoch, 0, 1, nil)})
	if !errors.Is(err, store.ErrUnavailable) || !errors.Is(err, context.Canceled) {
		t.Fatalf("CommitBatches with a canceled context: %v, want ErrUnavailable and context.Canceled", err)
	}
	if _, _, err := db.GetRoomMeta(canceled, id); !errors.Is(err, store.ErrUnavailable) || !errors.Is(err, context.Canceled) {
		t.Fatalf("GetRoomMeta with a canceled context: %v", err)
	}

	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, _, err := db.GetRoomMeta(ctx, id); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("GetRoomMeta after Close: %v, want ErrUnavailable", err)
	}
	if _, err := db.CommitBatches(ctx, []store.Batch{benchBatch(id, claim.Epoch, 0, 1, nil)}); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("CommitBatches after Close: %v, want ErrUnavailable", err)
	}
}

// TestConnectionLoss cuts the network between the adapter and the server:
// calls fail with ErrUnavailable on their own (well before the caller's
// deadline), a transaction cut half way commits nothing, and once the
// network is back the same DB works again.
func TestConnectionLoss(t *testing.T) {
	ctx := t.Context()
	dsn := mysqltest.DSN(t)
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	proxy := mysqltest.NewProxy(t, cfg.Addr)
	cfg.Addr = proxy.Addr()
	cfg.ReadTimeout, cfg.WriteTimeout = 2*time.Second, 2*time.Second
	db := openDSN(t, cfg.FormatDSN(), Options{MaxOpenConns: 4})

	a, claimA := claimedRoom(t, db, "a")
	b, claimB := claimedRoom(t, db, "b")
	mustCommit(t, db, benchBatch(a, claimA.Epoch, 0, 2, nil))

	// Cut while idle: the pool's connections are dead and new ones are refused.
	proxy.Cut()
	deadline, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if _, err := db.CommitBatches(deadline, []store.Batch{benchBatch(a, claimA.Epoch, 2, 1, nil)}); !errors.Is(err, store.ErrUnavailable) || deadline.Err() != nil {
		t.Fatalf("CommitBatches while cut: %v (deadline %v), want ErrUnavailable on its own", err, deadline.Err())
	}
	if _, _, err := db.GetRoomMeta(deadline, a); !errors.Is(err, store.ErrUnavailable) || deadline.Err() != nil {
		t.Fatalf("GetRoomMeta while cut: %v (deadline %v), want ErrUnavailable on its own", err, deadline.Err())
	}

	proxy.Restore()
	if _, found, err := db.GetRoomMeta(ctx, a); err != nil || !found {
		t.Fatalf("GetRoomMeta after restore = found %v, err %v", found, err)
	}
	// The failed commit's outcome was unknown to the caller: it reloads.
	claimA, err = db.ClaimRoom(ctx, a, "node-b")
	if err != nil || claimA.HeadVersion != 2 {
		t.Fatalf("ClaimRoom after restore = %+v, %v; want head 2", claimA, err)
	}
	mustCommit(t, db, benchBatch(a, claimA.Epoch, 2, 1, nil))

	// Cut in the middle of a transaction: room b's row is locked directly on
	// the server, so the commit (a, then b in id order) stops half way.
	raw := rawDB(t, dsn)
	lock, err := raw.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = lock.Rollback() }()
	if _, err := lock.ExecContext(ctx, `SELECT room_id FROM rooms WHERE room_id = ? FOR UPDATE`, b); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := db.CommitBatches(deadline, []store.Batch{benchBatch(a, claimA.Epoch, 3, 1, nil), benchBatch(b, claimB.Epoch, 0, 1, nil)})
		done <- err
	}()
	waitForLockWait(t, raw)
	proxy.Cut()
	if err := <-done; !errors.Is(err, store.ErrUnavailable) || deadline.Err() != nil {
		t.Fatalf("CommitBatches cut half way: %v (deadline %v), want ErrUnavailable on its own", err, deadline.Err())
	}
	if err := lock.Rollback(); err != nil {
		t.Fatal(err)
	}
	proxy.Restore()
	for _, r := range []struct {
		id   string
		head int64
	}{{a, 3}, {b, 0}} {
		c, err := db.ClaimRoom(ctx, r.id, "node-c")
		if err != nil || c.HeadVersion != r.head {
			t.Fatalf("room %s after a cut transaction: claim %+v, %v; want head %d", r.id, c, err, r.head)
		}
	}
}

// waitForLockWait polls until a transaction of raw's database waits for a
// row lock, as nats-server's checkFor does.
func waitForLockWait(t *testing.T, raw *sql.DB) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		var n int
		err := raw.QueryRowContext(t.Context(), `SELECT COUNT(*) FROM information_schema.INNODB_TRX t
			JOIN information_schema.PROCESSLIST p ON p.ID = t.trx_mysql_thread_id
			WHERE t.trx_state = 'LOCK WAIT' AND p.DB = DATABASE()`).Scan(&n)
		if err != nil {
			t.Fatalf("poll lock waits: %v", err)
		}
		if n > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("no transaction started waiting for a lock")
		}
		// InnoDB refreshes INNODB_TRX only when it was not read for 100ms:
		// a faster poll would read the same stale rows for ever.
		time.Sleep(150 * time.Millisecond)
	}
}

// TestDeadlockIsRetried makes InnoDB pick a CommitBatches transaction as a
// deadlock victim: the adapter runs it again and it commits.
func TestDeadlockIsRetried(t *testing.T) {
	ctx := t.Context()
	dsn := mysqltest.DSN(t)
	db := openDSN(t, dsn, Options{})
	a, claimA := claimedRoom(t, db, "a")
	b, claimB := claimedRoom(t, db, "b")

	raw := rawDB(t, dsn)
	other, err := raw.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = other.Rollback() }()
	// Weigh the other transaction down, so InnoDB rolls back the commit
	// rather than it; then take room b's row.
	var args []any
	for i := range 200 {
		args = append(args, fmt.Sprintf("w/%d", i))
	}
	q := `INSERT INTO room_outbox (event_id, room_id, room_version, seq, event_type, owner_epoch,
		next_attempt_at, created_at, status, last_error) VALUES ` + sqlstore.Values(`(?, 'w', 0, 0, 'E', 1, 1, 1, 'pending', '')`, len(args))
	if _, err := other.ExecContext(ctx, q, args...); err != nil {
		t.Fatal(err)
	}
	if _, err := other.ExecContext(ctx, `SELECT room_id FROM rooms WHERE room_id = ? FOR UPDATE`, b); err != nil {
		t.Fatal(err)
	}

	type outcome struct {
		results []error
		err     error
	}
	done := make(chan outcome, 1)
	go func() {
		// Given b first: the adapter still locks a, then waits for b.
		res, err := db.CommitBatches(ctx, []store.Batch{benchBatch(b, claimB.Epoch, 0, 1, nil), benchBatch(a, claimA.Epoch, 0, 1, nil)})
		done <- outcome{res, err}
	}()
	waitForLockWait(t, raw)
	// Now wait for a: a cycle. InnoDB rolls the lighter commit back at once.
	if _, err := other.ExecContext(ctx, `UPDATE rooms SET updated_at = updated_at + 1 WHERE room_id = ?`, a); err != nil {
		t.Fatalf("the heavier transaction was chosen as the victim: %v", err)
	}
	if err := other.Rollback(); err != nil {
		t.Fatal(err)
	}
	out := <-done
	if out.err != nil || out.results[0] != nil || out.results[1] != nil {
		t.Fatalf("CommitBatches after a deadlock = %v, %v; want both committed", out.results, out.err)
	}
	for _, id := range []string{a, b} {
		if cmds, err := db.ListCommandsAfter(ctx, id, 0); err != nil || len(cmds) != 1 {
			t.Fatalf("room %s: %d commands, %v; want 1", id, len(cmds), err)
		}
	}
}

func claimedRoom(t testing.TB, db *DB, id string) (string, store.Claim) {
	t.Helper()
	ctx := context.Background()
	if err := db.SaveRoomMeta(ctx, store.RoomMeta{RoomID: id, SeatCount: 8, Status: "open"}); err != nil {
		t.Fatalf("SaveRoomMeta(%s): %v", id, err)
	}
	c, err := db.ClaimRoom(ctx, id, "node-a")
	if err != nil {
		t.Fatalf("ClaimRoom(%s): %v", id, err)
	}
	return id, c
}

func mustCommit(t testing.TB, db *DB, batches ...store.Batch) {
	t.Helper()
	results, err := db.CommitBatches(context.Background(), batches)
	if err != nil {
		t.Fatalf("CommitBatches: %v", err)
	}
	for i, r := range results {
		if r != nil {
			t.Fatalf("batch %d: %v", i, r)
		}
	}
}

// benchBatch returns n commands after base with one outbox row each.
func benchBatch(id string, epoch, base int64, n int, payload []byte) store.Batch {
	b := store.Batch{RoomID: id, OwnerEpoch: epoch, BaseVersion: base,
		Commands: make([]store.CommandRecord, n), Outbox: make([]outbox.Record, n)}
	for j := range n {
		v := base + 1 + int64(j)
		b.Commands[j] = store.CommandRecord{RoomID: id, RoomVersion: v, CommandID: fmt.Sprintf("cmd-%d", v),
			CommandType: "TakeMic", Payload: payload, Replayable: true}
		b.Outbox[j] = outbox.Record{EventID: fmt.Sprintf("%s/%d/0", id, v), RoomID: id, RoomVersion: v,
			EventType: "RoomMicChanged", Payload: payload}
	}
	return b
}

// BenchmarkCommitBatches measures the group-commit path: each CommitBatches
// call writes `batches` rooms' batches of `commands` commands, one outbox row
// per command, in one transaction; `workers` calls run at once on disjoint
// rooms. rows/s counts command and outbox rows.
func BenchmarkCommitBatches(b *testing.B) {
	payload := []byte(`{"operator_user_id":1001,"target_user_id":1002,"seat_index":3,"reason":"benchmark payload of a typical command","at_ms":1700000000000}`)
	for _, workers := range []int{1, 4} {
		for _, shape := range []struct{ batches, commands int }{{8, 64}, {64, 1}} {
			name := fmt.Sprintf("workers=%d/batches=%d/commands=%d", workers, shape.batches, shape.commands)
			b.Run(name, func(b *testing.B) { benchCommit(b, workers, shape.batches, shape.commands, payload) })
		}
	}
}

func benchCommit(b *testing.B, workers, nBatches, nCommands int, payload []byte) {
	db := openDSN(b, mysqltest.DSN(b), Options{})
	type roomState struct {
		id          string
		epoch, head int64
	}
	rooms := make([][]roomState, workers)
	for w := range rooms {
		rooms[w] = make([]roomState, nBatches)
		for i := range rooms[w] {
			id, c := claimedRoom(b, db, fmt.Sprintf("bench-%d-%03d", w, i))
			rooms[w][i] = roomState{id: id, epoch: c.Epoch}
		}
	}
	commit := func(mine []roomState) error {
		batches := make([]store.Batch, len(mine))
		for i := range mine {
			r := &mine[i]
			batches[i] = benchBatch(r.id, r.epoch, r.head, nCommands, payload)
			r.head += int64(nCommands)
		}
		results, err := db.CommitBatches(context.Background(), batches)
		if err != nil {
			return err
		}
		return errors.Join(results...)
	}
	b.ReportAllocs()
	calls := 0
	errs := make([]error, workers)
	for b.Loop() {
		calls += workers
		var wg sync.WaitGroup
		for w := range workers {
			wg.Go(func() { errs[w] = commit(rooms[w]) })
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			b.Fatal(err)
		}
	}
	secs := b.Elapsed().Seconds()
	b.ReportMetric(float64(calls*nBatches*nCommands*2)/secs, "rows/s")
	b.ReportMetric(float64(calls)/secs, "commits/s")
}

// TestAFrozenCommitDoesNotKeepItsLocks holds a room's row lock in a
// transaction of node a that never ends, as a node frozen (SIGSTOP) in the
// middle of a commit would. With IdleTxTimeout the server ends a's session
// after a second, so node b claims the room instead of waiting for a lock
// that is only released when a wakes (without it, b's claim fails on the
// lock wait timeout after several seconds); a's transaction cannot commit
// afterwards.
func TestAFrozenCommitDoesNotKeepItsLocks(t *testing.T) {
	ctx := t.Context()
	dsn := mysqltest.DSN(t)
	a := openDSN(t, dsn, Options{IdleTxTimeout: time.Second})
	b := openDSN(t, dsn, Options{})
	const id = "frozen"
	if err := a.SaveRoomMeta(ctx, store.RoomMeta{RoomID: id, OwnerUserID: 1, SeatCount: 8}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.ClaimRoom(ctx, id, "a"); err != nil {
		t.Fatal(err)
	}
	frozen, err := a.db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = frozen.Rollback() }()
	if _, err := frozen.ExecContext(ctx, `UPDATE rooms SET updated_at = updated_at + 1 WHERE room_id = ?`, id); err != nil {
		t.Fatal(err)
	}
	claim, err := b.ClaimRoom(ctx, id, "b")
	if err != nil {
		t.Fatalf("b's claim while a is frozen mid-commit: %v", err)
	}
	if claim.Epoch != 2 {
		t.Fatalf("b claimed epoch %d, want 2", claim.Epoch)
	}
	if err := frozen.Commit(); err == nil {
		t.Fatal("a's transaction committed after the server ended its session")
	}
}

// TestEndIdleTxOnMySQL: MySQL has no idle transaction timeout, so
// IdleTxTimeout becomes wait_timeout, and the pool closes idle connections
// before the server does.
func TestEndIdleTxOnMySQL(t *testing.T) {
	cfg, err := config("u:p@tcp(127.0.0.1:3306)/room")
	if err != nil {
		t.Fatal(err)
	}
	opts, err := Options{IdleTxTimeout: 2500 * time.Millisecond}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	opts = endIdleTx(cfg, opts, false)
	if cfg.Params["wait_timeout"] != "3" || cfg.Params["idle_transaction_timeout"] != "" || opts.ConnMaxIdleTime != 1500*time.Millisecond {
		t.Fatalf("params %v, pool idle time %v; want wait_timeout 3 and 1.5s", cfg.Params, opts.ConnMaxIdleTime)
	}
	if _, err := (Options{IdleTxTimeout: -time.Second}).withDefaults(); err == nil {
		t.Fatal("a negative IdleTxTimeout was accepted")
	}
}

// TestHotListReadsAnIndexWithoutASort: every order of the room directory,
// with and without a region and a cursor, reads its index without a sort.
func TestHotListReadsAnIndexWithoutASort(t *testing.T) {
	ctx := t.Context()
	dsn := mysqltest.DSN(t)
	db := openDSN(t, dsn, Options{})
	var rows []store.DirectoryRow
	for i := range 300 {
		rows = append(rows, store.DirectoryRow{RoomID: fmt.Sprint("r", i), OwnerEpoch: 1, Status: []string{"open", "closed"}[i%2],
			Region: []string{"sa", "eg", "ae"}[i%3], Mode: "chat", OnlineCount: int32(i % 7), Heat: int64(i), CreatedAt: int64(i % 11)})
	}
	if err := db.UpsertDirectory(ctx, rows); err != nil {
		t.Fatal(err)
	}
	raw := rawDB(t, dsn)
	if _, err := raw.ExecContext(ctx, `ANALYZE TABLE room_directory`); err != nil {
		t.Fatal(err)
	}
	for _, order := range []store.DirectoryOrder{store.OrderHeat, store.OrderOnline, store.OrderNewest} {
		for _, q := range []store.DirectoryQuery{
			{Order: order, Status: "open", Limit: 10},
			{Order: order, Status: "open", Region: "sa", Limit: 10},
			{Order: order, Status: "open", Region: "sa", Mode: "chat", After: &store.DirectoryCursor{Value: 5, RoomID: "r"}, Limit: 10},
		} {
			query, args, _ := dialect.DirectoryListing(q)
			vals := make([]string, len(args))
			for i, a := range args {
				if s, ok := a.(string); ok {
					vals[i] = "'" + s + "'"
				} else {
					vals[i] = fmt.Sprint(a)
				}
			}
			want := "room_directory_"
			if q.Region != "" {
				want += "region_"
			}
			want += string(order)
			if key, extra := explain(t, raw, `EXPLAIN `+bind(query, vals...)); key != want || strings.Contains(extra, "filesort") {
				t.Errorf("%+v: key %q, extra %q; want %s without a sort", q, key, extra, want)
			}
		}
	}
}
