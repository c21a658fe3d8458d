package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime/metrics"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"modernc.org/sqlite"

	"hyapp/room-service/internal/poll"
	"hyapp/room-service/outbox"
	"hyapp/room-service/store"
	"hyapp/room-service/store/sqlstore"
	"hyapp/room-service/store/storetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func openTemp(t testing.TB, opts Options) (*DB, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "room.db")
	db, err := Open(context.Background(), path, opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		if err := db.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return db, path
}

func TestRepository(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Repository {
		db, _ := openTemp(t, Options{})
		return db
	})
}

// TestRepositorySharedDB runs the suite with every subtest on one database,
// as a shared MySQL runs it, to prove the subtests stay out of each other's way.
func TestRepositorySharedDB(t *testing.T) {
	db, _ := openTemp(t, Options{})
	storetest.Run(t, func(*testing.T) store.Repository { return db })
}

func TestReopenKeepsDataAndMigrationsAreIdempotent(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "room.db")
	db, err := Open(ctx, path, Options{Synchronous: "normal"})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	meta := store.RoomMeta{RoomID: "r1", OwnerUserID: 1, HostUserID: 2, SeatCount: 8, Mode: "chat", Status: "active"}
	if err := db.SaveRoomMeta(ctx, meta); err != nil {
		t.Fatalf("SaveRoomMeta: %v", err)
	}
	claim, err := db.ClaimRoom(ctx, "r1", "node-a")
	if err != nil {
		t.Fatalf("ClaimRoom: %v", err)
	}
	batch := store.Batch{
		RoomID: "r1", OwnerEpoch: claim.Epoch, BaseVersion: 0,
		Commands: []store.CommandRecord{{RoomID: "r1", RoomVersion: 1, CommandID: "c1", CommandType: "TakeMic", Payload: []byte("{}"), Replayable: true}},
		Outbox:   []outbox.Record{{EventID: "r1/1/0", RoomID: "r1", RoomVersion: 1, EventType: "RoomMicChanged", Payload: []byte("{}")}},
		Snapshot: &store.SnapshotRecord{RoomID: "r1", RoomVersion: 1, Payload: []byte("snap")},
	}
	if results, err := db.CommitBatches(ctx, []store.Batch{batch}); err != nil || results[0] != nil {
		t.Fatalf("CommitBatches = %v, %v", results, err)
	}
	if err := db.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := db.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}

	for range 2 {
		db, err = Open(ctx, path, Options{})
		if err != nil {
			t.Fatalf("reopen: %v", err)
		}
		got, err := db.ClaimRoom(ctx, "r1", "node-b")
		if err != nil || got.HeadVersion != 1 || got.Epoch <= claim.Epoch || got.Meta != meta {
			t.Fatalf("ClaimRoom after reopen = %+v, %v; want head 1, a higher epoch, meta %+v", got, err, meta)
		}
		claim = got
		if cmds, err := db.ListCommandsAfter(ctx, "r1", 0); err != nil || len(cmds) != 1 || cmds[0].CommandID != "c1" {
			t.Fatalf("ListCommandsAfter after reopen = %+v, %v", cmds, err)
		}
		if s, found, err := db.GetLatestSnapshot(ctx, "r1"); err != nil || !found || string(s.Payload) != "snap" {
			t.Fatalf("GetLatestSnapshot after reopen = %+v, %v, %v", s, found, err)
		}
		if rows, err := db.ListRoomOutbox(ctx, "r1", 10); err != nil || len(rows) != 1 || rows[0].EventID != "r1/1/0" {
			t.Fatalf("ListRoomOutbox after reopen = %+v, %v", rows, err)
		}
		assertMigrations(t, db)
		if err := db.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
	}
}

// assertMigrations checks each embedded migration is recorded exactly once.
func assertMigrations(t *testing.T, db *DB) {
	t.Helper()
	files, err := fs.Glob(migrations, "migrations/*.sql")
	if err != nil || len(files) == 0 {
		t.Fatalf("embedded migrations: %v, %v", files, err)
	}
	var n, distinct int
	if err := db.read.QueryRowContext(t.Context(), `SELECT COUNT(*), COUNT(DISTINCT version) FROM schema_migrations`).Scan(&n, &distinct); err != nil {
		t.Fatalf("count schema_migrations: %v", err)
	}
	if n != len(files) || distinct != len(files) {
		t.Fatalf("schema_migrations has %d rows (%d distinct), want %d", n, distinct, len(files))
	}
}

func TestOpenSettings(t *testing.T) {
	db, _ := openTemp(t, Options{})
	var mode string
	var sync, timeout int
	if err := db.write.QueryRowContext(t.Context(), `PRAGMA journal_mode`).Scan(&mode); err != nil {
		t.Fatal(err)
	}
	if err := db.write.QueryRowContext(t.Context(), `PRAGMA synchronous`).Scan(&sync); err != nil {
		t.Fatal(err)
	}
	if err := db.read.QueryRowContext(t.Context(), `PRAGMA busy_timeout`).Scan(&timeout); err != nil {
		t.Fatal(err)
	}
	if mode != "wal" || sync != 2 || timeout != int(defaultBusyTimeout.Milliseconds()) {
		t.Fatalf("journal_mode %q synchronous %d busy_timeout %d; want wal, 2 (FULL), %d", mode, sync, timeout, defaultBusyTimeout.Milliseconds())
	}
	if _, err := db.read.ExecContext(t.Context(), `DELETE FROM rooms`); err == nil {
		t.Fatal("the read pool accepted a write")
	}
}

// TestFilesAreTheOwnersOnly: the database and its WAL files are 0600,
// also when an existing database was readable by others.
func TestFilesAreTheOwnersOnly(t *testing.T) {
	path := filepath.Join(t.TempDir(), "room.db")
	check := func() {
		t.Helper()
		db, err := Open(t.Context(), path, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if err := db.SaveRoomMeta(t.Context(), store.RoomMeta{RoomID: fmt.Sprint("r", time.Now().UnixNano()), OwnerUserID: 1, SeatCount: 8, Status: "open"}); err != nil {
			t.Fatal(err)
		}
		for _, p := range []string{path, path + "-wal", path + "-shm"} {
			if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != 0o600 {
				t.Errorf("%s: %v %v; want 0600", filepath.Base(p), fi.Mode(), err)
			}
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
	}
	check()
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	check()
}

func TestOpenRejectsBadInput(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		path string
		opts Options
	}{
		{filepath.Join(dir, "a.db"), Options{Synchronous: "OFF"}},
		{filepath.Join(dir, "b.db"), Options{BusyTimeout: -time.Second}},
		{filepath.Join(dir, "c.db"), Options{ReadConns: -1}},
		{":memory:", Options{}},
		{"", Options{}},
		{filepath.Join(dir, "d.db?mode=ro"), Options{}},
	} {
		if db, err := Open(t.Context(), tc.path, tc.opts); err == nil {
			_ = db.Close()
			t.Errorf("Open(%q, %+v) succeeded, want an error", tc.path, tc.opts)
		}
	}
}

// TestOutboxRelayReadsUseIndexes checks that the relay's reads, the stats
// and the requeue stay on indexes, the pending and dead rows on their
// partial ones, and need no sort.
func TestOutboxRelayReadsUseIndexes(t *testing.T) {
	db, _ := openTemp(t, Options{})
	q := sqlstore.OutboxQueries(&dialect)
	for _, tc := range []struct {
		query string
		args  []any
		want  string
	}{
		{q.ListRoomOutbox, []any{"r", 10}, "USING INDEX room_outbox_room_pending"},
		{q.StatsPending, nil, "USING INDEX room_outbox_room_pending"},
		{q.StatsDead, nil, "USING COVERING INDEX room_outbox_dead"},
		{q.StatsPublished, nil, "USING COVERING INDEX"},
		{q.RequeueDead, []any{0, 10}, "USING COVERING INDEX room_outbox_dead"},
		{q.RequeueDeadType, []any{0, "E", 10}, "USING COVERING INDEX room_outbox_dead (event_type=?)"},
	} {
		plan := queryPlan(t, db, tc.query, tc.args...)
		if !strings.Contains(plan, tc.want) || strings.Contains(plan, "TEMP B-TREE") {
			t.Errorf("%s: plan %q, want %q without a sort", tc.query, plan, tc.want)
		}
	}
	// The heads come from the pending rows' index alone (grouped by room
	// in its order), then each row by its id; only the heads are sorted.
	plan := queryPlan(t, db, q.ListHeads, 0, 10)
	for _, want := range []string{"SCAN room_outbox USING COVERING INDEX room_outbox_room_pending", "SEARCH o USING INTEGER PRIMARY KEY"} {
		if !strings.Contains(plan, want) {
			t.Errorf("%s: plan %q, want %q", q.ListHeads, plan, want)
		}
	}
	if strings.Contains(plan, "FOR GROUP BY") {
		t.Errorf("%s: plan %q groups with a sort", q.ListHeads, plan)
	}
}

// queryPlan returns the details of EXPLAIN QUERY PLAN query, joined.
func queryPlan(t *testing.T, db *DB, query string, args ...any) string {
	t.Helper()
	rows, err := db.read.QueryContext(t.Context(), `EXPLAIN QUERY PLAN `+query, args...)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var plan []string
	for rows.Next() {
		var id, parent, unused int
		var detail string
		if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, detail)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return strings.Join(plan, "; ")
}

func TestDriverErrorsBecomeSentinels(t *testing.T) {
	ctx := t.Context()
	db, path := openTemp(t, Options{BusyTimeout: 50 * time.Millisecond})

	// Another connection holds the write lock: the writer gives up after the
	// busy timeout with ErrUnavailable.
	other, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	conn, err := other.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(ctx, `BEGIN IMMEDIATE`); err != nil {
		t.Fatal(err)
	}
	err = db.SaveRoomMeta(ctx, store.RoomMeta{RoomID: "busy"})
	if !errors.Is(err, store.ErrUnavailable) || !strings.Contains(err.Error(), "room=busy") {
		t.Fatalf("SaveRoomMeta under a held lock: %v, want ErrUnavailable naming the room", err)
	}
	_, err = db.CommitBatches(ctx, []store.Batch{{RoomID: "busy"}})
	if !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("CommitBatches under a held lock: %v, want ErrUnavailable", err)
	}
	if _, err := conn.ExecContext(ctx, `ROLLBACK`); err != nil {
		t.Fatal(err)
	}
	_ = conn.Close()

	canceled, cancel := context.WithCancel(ctx)
	cancel()
	_, err = db.CommitBatches(canceled, []store.Batch{{RoomID: "busy"}})
	if !errors.Is(err, store.ErrUnavailable) || !errors.Is(err, context.Canceled) {
		t.Fatalf("CommitBatches with a canceled context: %v, want ErrUnavailable and context.Canceled", err)
	}

	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := db.GetRoomMeta(ctx, "r"); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("GetRoomMeta after Close: %v, want ErrUnavailable", err)
	}
	if _, err := db.CommitBatches(ctx, []store.Batch{{RoomID: "r"}}); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("CommitBatches after Close: %v, want ErrUnavailable", err)
	}
}

// BenchmarkCommitBatches measures the group-commit path: each CommitBatches
// call writes `batches` rooms' batches of `commands` commands, one outbox row
// per command, in one transaction. rows/s counts command and outbox rows.
// Besides two mixed shapes, a hot room's commit (one room, 28 commands, as
// at 5,000 joins a second) and a busy node's (256 rooms, a command each).
func BenchmarkCommitBatches(b *testing.B) {
	payload := []byte(`{"operator_user_id":1001,"target_user_id":1002,"seat_index":3,"reason":"benchmark payload of a typical command","at_ms":1700000000000}`)
	for _, sync := range []string{"FULL", "NORMAL"} {
		for _, shape := range []struct{ batches, commands int }{{8, 64}, {64, 1}, {1, 28}, {256, 1}} {
			name := fmt.Sprintf("sync=%s/batches=%d/commands=%d", sync, shape.batches, shape.commands)
			b.Run(name, func(b *testing.B) {
				benchCommit(b, Options{Synchronous: sync}, shape.batches, shape.commands, payload)
			})
		}
	}
}

func benchCommit(b *testing.B, opts Options, nBatches, nCommands int, payload []byte) {
	ctx := context.Background()
	db, _ := openTemp(b, opts)
	rooms := claimRooms(b, db, nBatches)
	b.ReportAllocs()
	calls := 0
	for b.Loop() {
		calls++
		// With a deadline, as the engine's committer commits.
		cctx, cancel := context.WithTimeout(ctx, time.Minute)
		commitAll(b, cctx, db, rooms.next(nCommands, payload))
		cancel()
	}
	secs := b.Elapsed().Seconds()
	b.ReportMetric(float64(calls*nBatches*nCommands*2)/secs, "rows/s")
	b.ReportMetric(float64(calls)/secs, "commits/s")
}

// benchRooms are rooms claimed for commits, each at its head.
type benchRooms []struct {
	id          string
	epoch, head int64
}

// claimRooms creates and claims n rooms.
func claimRooms(t testing.TB, db *DB, n int) benchRooms {
	t.Helper()
	rooms := make(benchRooms, n)
	for i := range rooms {
		id := fmt.Sprintf("bench-%03d", i)
		if err := db.SaveRoomMeta(t.Context(), store.RoomMeta{RoomID: id, SeatCount: 8}); err != nil {
			t.Fatal(err)
		}
		c, err := db.ClaimRoom(t.Context(), id, "bench")
		if err != nil {
			t.Fatal(err)
		}
		rooms[i].id, rooms[i].epoch = id, c.Epoch
	}
	return rooms
}

// next is a batch of nCommands commands, each with an outbox row, for
// every room, after the rooms' heads, which it advances.
func (rooms benchRooms) next(nCommands int, payload []byte) []store.Batch {
	batches := make([]store.Batch, len(rooms))
	for i := range rooms {
		r := &rooms[i]
		bt := store.Batch{RoomID: r.id, OwnerEpoch: r.epoch, BaseVersion: r.head,
			Commands: make([]store.CommandRecord, nCommands), Outbox: make([]outbox.Record, nCommands)}
		for j := range nCommands {
			v := r.head + 1 + int64(j)
			bt.Commands[j] = store.CommandRecord{RoomID: r.id, RoomVersion: v, CommandID: fmt.Sprintf("cmd-%d", v),
				CommandType: "TakeMic", Payload: payload, Replayable: true}
			bt.Outbox[j] = outbox.Record{EventID: fmt.Sprintf("%s/%d/0", r.id, v), RoomID: r.id, RoomVersion: v,
				EventType: "RoomMicChanged", Payload: payload}
		}
		r.head += int64(nCommands)
		batches[i] = bt
	}
	return batches
}

// commitAll commits batches and fails t unless every one committed.
func commitAll(t testing.TB, ctx context.Context, db *DB, batches []store.Batch) {
	t.Helper()
	results, err := db.CommitBatches(ctx, batches)
	if err != nil {
		t.Fatal(err)
	}
	for _, res := range results {
		if res != nil {
			t.Fatal(res)
		}
	}
}

// TestACommitStartsNoGoroutinePerStatement: the driver starts a goroutine
// for each statement whose context can end; a commit's statements take one
// that cannot, so a commit of many rooms under a deadline starts the few
// goroutines of its transaction, not one per room it fences.
func TestACommitStartsNoGoroutinePerStatement(t *testing.T) {
	db, _ := openTemp(t, Options{})
	const n = 200
	rooms := claimRooms(t, db, n)
	payload := []byte(`{"user_id":1}`)
	commitAll(t, t.Context(), db, rooms.next(1, payload)) // the statements are prepared
	sample := []metrics.Sample{{Name: "/sched/goroutines-created:goroutines"}}
	metrics.Read(sample)
	before := sample[0].Value.Uint64()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	commitAll(t, ctx, db, rooms.next(1, payload))
	metrics.Read(sample)
	started := sample[0].Value.Uint64() - before
	if started >= n/4 {
		t.Fatalf("a commit of %d rooms started %d goroutines, want fewer than %d", n, started, n/4)
	}
	t.Logf("a commit of %d rooms started %d goroutines", n, started)
}

// BenchmarkMarkOutboxPublished measures what marking outbox rows published
// costs per row, 64 rows to a call, each call its own transaction, over
// rows committed the way 1,000 busy rooms commit them (each commit one row
// per room):
//   - chain: the rows of one room, as a relay chain publishes them, which
//     those commits left one to a table page;
//   - commit: 64 rows that one commit wrote side by side;
//   - position: instead of the rows, one row per call in a table of one
//     row per room, the floor of keeping a relay position per room in
//     place of a status per row (a scratch table: the store keeps none).
func BenchmarkMarkOutboxPublished(b *testing.B) {
	for _, order := range []string{"chain", "commit", "position"} {
		b.Run("rows="+order, func(b *testing.B) { benchMark(b, order) })
	}
}

func benchMark(b *testing.B, order string) {
	const rooms, chunk = 1000, 64
	ctx := context.Background()
	db, _ := openTemp(b, Options{})
	if _, err := db.write.ExecContext(ctx, `CREATE TABLE bench_position (room_id TEXT PRIMARY KEY, room_version INTEGER NOT NULL, published_at INTEGER NOT NULL)`); err != nil {
		b.Fatal(err)
	}
	payload := []byte(`{"user_id":123456,"nickname":"listener","vehicle":"car-7","joined_at":1796033128314,"online_count":57}`)
	var ids []string // the rows still to mark, in marking order
	base := 0
	fill := func() {
		byRoom := make([][]string, rooms)
		for v := range chunk {
			rows := make([]outbox.Record, rooms)
			for r := range rows {
				id := fmt.Sprintf("bench-%d/%d/0", r, base+v+1)
				rows[r] = outbox.Record{EventID: id, RoomID: fmt.Sprintf("bench-%d", r), RoomVersion: int64(base + v + 1),
					EventType: "RoomUserJoined", Payload: payload}
				byRoom[r] = append(byRoom[r], id)
				if order != "chain" {
					ids = append(ids, id)
				}
			}
			if err := db.SaveOutbox(ctx, rows); err != nil {
				b.Fatal(err)
			}
		}
		if order == "chain" {
			for _, r := range byRoom {
				ids = append(ids, r...)
			}
		}
		base += chunk
	}
	b.ReportAllocs()
	calls := 0
	for b.Loop() {
		if len(ids) == 0 {
			b.StopTimer()
			fill()
			b.StartTimer()
		}
		var err error
		if order == "position" {
			_, err = db.write.ExecContext(ctx, `INSERT INTO bench_position (room_id, room_version, published_at) VALUES (?, ?, ?)
				ON CONFLICT (room_id) DO UPDATE SET room_version = excluded.room_version, published_at = excluded.published_at`,
				fmt.Sprintf("bench-%d", calls%rooms), base, time.Now().UnixMilli())
		} else {
			err = db.MarkOutboxPublishedBatch(ctx, ids[:chunk])
		}
		if err != nil {
			b.Fatal(err)
		}
		ids = ids[chunk:]
		calls++
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(calls*chunk), "µs/row")
}

// TestPruneOutboxKeepsDeadRows covers what the Repository never makes: a
// dead row that carries a publish time.
func TestPruneOutboxKeepsDeadRows(t *testing.T) {
	ctx := t.Context()
	db, _ := openTemp(t, Options{})
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
	// The relay gave up on r/2/0; a dead row may carry a publish time.
	if _, err := db.write.ExecContext(ctx, `UPDATE room_outbox SET status = 'dead', published_at = 1 WHERE event_id = 'r/2/0'`); err != nil {
		t.Fatal(err)
	}
	if n, err := db.PruneOutbox(ctx, time.Now().Add(time.Hour), 100); err != nil || n != 1 {
		t.Fatalf("PruneOutbox = %d, %v; want 1 (the published row)", n, err)
	}
	var status string
	if err := db.read.QueryRowContext(ctx, `SELECT status FROM room_outbox WHERE event_id = 'r/2/0'`).Scan(&status); err != nil || status != "dead" {
		t.Fatalf("dead row after pruning: status %q, err %v", status, err)
	}
}

// TestPruneScansRanges: each room's log is read as a range up to a bound
// made once per room, the outbox as a range of ids (the store contract's
// PruneCommandsStopsAtTheFirstYoungRow and PruneOutboxStopsAtTheFirstYoungRow
// test what the bounds keep).
func TestPruneScansRanges(t *testing.T) {
	db, _ := openTemp(t, Options{})
	if joined := queryPlan(t, db, pruneOutboxQuery, time.Now().UnixMilli(), 100); !strings.Contains(joined, "rowid<?") {
		t.Fatalf("outbox prune plan %q, want a range of ids", joined)
	}
	joined := queryPlan(t, db, pruneBoundsQuery, 0, 0, 10)
	for _, step := range []string{"MATERIALIZE b", "SCAN s", "SEARCH y USING INDEX", "(room_id=? AND room_version<?)", "SEARCH m USING COVERING INDEX"} {
		if !strings.Contains(joined, step) {
			t.Fatalf("prune bounds plan %q lacks %q: want each room's bound made once, from a scan of the snapshots "+
				"and a range search of the room's log below its snapshot", joined, step)
		}
	}
	joined = queryPlan(t, db, pruneRoomsQuery(2), "a", 5, "b", 7, 0, 10)
	if !strings.Contains(joined, "SEARCH l USING INDEX") || !strings.Contains(joined, "(room_id=? AND room_version<?)") || strings.Contains(joined, "SCAN l") {
		t.Fatalf("prune plan %q, want a range search of each room's log up to its bound", joined)
	}
}

// TestPruneReadsOnlyWhatItMayDelete: under the write lock a retention pass
// reads the rows it deletes and little more, once a minute. With nothing
// due it takes no write lock: the rooms' bounds are read off it, however
// many rooms there are (each costs a read of its snapshot row and a search
// of its log: 155 ms of stalled commits a pass for 100,000 rooms, when the
// writer read them). A room with a few rows due costs those rows, however
// long the log kept below its snapshot (retain_versions): every kept row of
// every room whose log is older than the cut, the rooms that went quiet,
// was read on every pass (70 ms for 200 rooms of 2,000 commands).
func TestPruneReadsOnlyWhatItMayDelete(t *testing.T) {
	ctx := t.Context()
	db, _ := openTemp(t, Options{Synchronous: "NORMAL"})
	const rooms, kept = 20, 2000
	old := time.Now().Add(-8 * 24 * time.Hour).UnixMilli()
	payload := []byte(`{"user_id":123456789,"nick":"` + strings.Repeat("n", 120) + `"}`) // a command's size
	err := db.Tx(ctx, func(tx *sql.Tx) error {
		for r := range rooms {
			room := fmt.Sprintf("quiet-%02d", r)
			for v := 1; v <= kept; v++ {
				if _, err := tx.ExecContext(ctx, `INSERT INTO room_command_log VALUES (?, ?, ?, 'JoinRoom', ?, 1, ?)`,
					room, v, fmt.Sprint("c", v), payload, old); err != nil {
					return err
				}
			}
			if _, err := tx.ExecContext(ctx, `INSERT INTO room_snapshots VALUES (?, ?, 'snap', ?)`, room, kept, old); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	cut := time.Now().Add(-7 * 24 * time.Hour)
	before := pagesRead(t, db)
	if n, err := db.PruneCommands(ctx, kept, cut, 1000); err != nil || n != 0 {
		t.Fatalf("PruneCommands(keep %d) = %d, %v; want 0", kept, n, err)
	}
	if read := pagesRead(t, db) - before; read != 0 {
		t.Fatalf("a pass with nothing due read %d pages on the writer for %d rooms of %d kept commands, want none", read, rooms, kept)
	}
	// Two rows of each room are due: a pass reads and deletes those, and
	// reads none of the rest.
	before = pagesRead(t, db)
	if n, err := db.PruneCommands(ctx, kept-2, cut, 1000); err != nil || n != 2*rooms {
		t.Fatalf("PruneCommands(keep %d) = %d, %v; want %d", kept-2, n, err, 2*rooms)
	}
	if read := pagesRead(t, db) - before; read > 40*rooms {
		t.Fatalf("a pass that deleted 2 rows a room read %d pages for %d rooms, want at most %d", read, rooms, 40*rooms)
	}
}

// pagesRead is the writer connection's count of pages it fetched, from its
// cache or the file.
func pagesRead(t *testing.T, db *DB) int {
	t.Helper()
	conn, err := db.write.Conn(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	total := 0
	err = conn.Raw(func(dc any) error {
		for _, op := range []sqlite.DBStatusOp{sqlite.DBStatusCacheHit, sqlite.DBStatusCacheMiss} {
			n, _, err := dc.(sqlite.DBStatus).Status(op, false)
			if err != nil {
				return err
			}
			total += n
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return total
}

// TestCheckpointsRunOffTheWriter: the writer never checkpoints by itself,
// yet committed pages reach the database file, copied by the background
// checkpointer while the writer goes on.
func TestCheckpointsRunOffTheWriter(t *testing.T) {
	db, path := openTemp(t, Options{Synchronous: "NORMAL"})
	var auto int
	if err := db.write.QueryRowContext(t.Context(), `PRAGMA wal_autocheckpoint`).Scan(&auto); err != nil || auto != 0 {
		t.Fatalf("writer wal_autocheckpoint = %d (%v), want 0", auto, err)
	}
	size := func() int64 {
		st, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		return st.Size()
	}
	before := size()
	big := strings.Repeat("x", 4000) // about a page per row
	for i := range 200 {
		meta := store.RoomMeta{RoomID: fmt.Sprintf("ckpt-%03d", i), OwnerUserID: 1, SeatCount: 8, Mode: big}
		if err := db.SaveRoomMeta(t.Context(), meta); err != nil {
			t.Fatal(err)
		}
	}
	poll.Until(t, 10*time.Second, "a checkpoint", func() error {
		if n := size(); n < before+100*4096 {
			return fmt.Errorf("the database file is at %d bytes (was %d): nothing was checkpointed", n, before)
		}
		return nil
	})
}

// TestTheLogStartsOverUnderSteadyCommits: while the writer commits without
// a pause and readers read, the log is made to start over once it passes
// its bound, again and again, instead of growing.
func TestTheLogStartsOverUnderSteadyCommits(t *testing.T) {
	db, _ := openTemp(t, Options{Synchronous: "NORMAL", restartFrames: 1024})
	ctx, stop := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	defer wg.Wait()
	defer stop()
	if _, err := db.write.ExecContext(ctx, `CREATE TABLE scratch (k INTEGER PRIMARY KEY, v TEXT)`); err != nil {
		t.Fatal(err)
	}
	big := strings.Repeat("x", 4000) // about a page per row
	wg.Go(func() {
		// Transactions of a hundred pages back to back, as under a gift
		// storm: a PASSIVE checkpoint never finds the log fully copied
		// before the next commit.
		for i := 0; ctx.Err() == nil; i++ {
			err := db.Tx(ctx, func(tx *sql.Tx) error {
				for j := range 100 {
					if _, err := tx.ExecContext(ctx, `INSERT OR REPLACE INTO scratch (k, v) VALUES (?, ?)`, (i*100+j)%20000, big); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil && ctx.Err() == nil {
				t.Errorf("commit: %v", err)
				return
			}
		}
	})
	wg.Go(func() {
		for ctx.Err() == nil {
			if _, _, err := db.GetRoomMeta(ctx, "steady-007"); err != nil && ctx.Err() == nil {
				t.Errorf("read: %v", err)
				return
			}
		}
	})
	var last, restarts int64
	poll.Until(t, 30*time.Second, "the log starting over three times", func() error {
		var logged int64
		if err := db.read.QueryRowContext(ctx, `PRAGMA wal_checkpoint(PASSIVE)`).Scan(new(int64), &logged, new(int64)); err != nil {
			return err
		}
		if logged < last {
			restarts++
		}
		last = logged
		if restarts < 3 {
			return fmt.Errorf("the log started over %d times; it holds %d frames", restarts, logged)
		}
		return nil
	})
}

// TestARestartLeavesTheWriterAsItWas: the RESTART runs on the writer's
// connection with no busy wait, the writer gets its busy timeout back, the
// commit after it starts the log over, and the metrics hear it; one that a
// reader keeps from starting the log over fails at once, and they hear
// that too.
func TestARestartLeavesTheWriterAsItWas(t *testing.T) {
	// No background checkpoint: nothing but the RESTART copies the log.
	var heard checkpointsHeard
	db, _ := openUncopied(t, Options{BusyTimeout: 1234 * time.Millisecond, Metrics: heard.metrics()}, 50)
	heard.reset()
	if err := db.ckpt.restart(t.Context()); err != nil {
		t.Fatalf("restart: %v", err)
	}
	if want := []string{"restart <nil>"}; !slices.Equal(heard.modes, want) || heard.took[0] <= 0 || len(heard.frames) != 0 {
		t.Fatalf("the metrics heard %v in %v with log lengths %v, want %v and no log length", heard.modes, heard.took, heard.frames, want)
	}
	var busy int64
	if err := db.write.QueryRowContext(t.Context(), `PRAGMA busy_timeout`).Scan(&busy); err != nil || busy != 1234 {
		t.Fatalf("the writer's busy_timeout is %d (%v) after a restart, want 1234", busy, err)
	}
	if err := db.SaveRoomMeta(t.Context(), store.RoomMeta{RoomID: "r00", OwnerUserID: 2, SeatCount: 8}); err != nil {
		t.Fatal(err)
	}
	var logged int64
	if err := db.read.QueryRowContext(t.Context(), `PRAGMA wal_checkpoint(PASSIVE)`).Scan(new(int64), &logged, new(int64)); err != nil {
		t.Fatal(err)
	}
	if logged >= 50 {
		t.Fatalf("the log holds %d frames after 50 rows, a restart and one more commit: it did not start over", logged)
	}
}

// TestARestartPastAReaderFails: a RESTART that finds a reader on the log
// fails at once with errLogInUse, and the metrics hear the failure.
func TestARestartPastAReaderFails(t *testing.T) {
	var heard checkpointsHeard
	db, _ := openUncopied(t, Options{Metrics: heard.metrics()}, 10)
	heard.reset()
	reader, err := db.read.BeginTx(t.Context(), &sql.TxOptions{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = reader.Rollback() }()
	var n int
	if err := reader.QueryRowContext(t.Context(), `SELECT COUNT(*) FROM rooms`).Scan(&n); err != nil || n != 10 {
		t.Fatalf("the reader counts %d rooms (%v), want 10", n, err)
	}
	if err := db.ckpt.restart(t.Context()); !errors.Is(err, errLogInUse) {
		t.Fatalf("restart under a reader = %v, want errLogInUse", err)
	}
	if len(heard.modes) != 1 || heard.modes[0] != "restart "+errLogInUse.Error() {
		t.Fatalf("the metrics heard %v, want one failed restart", heard.modes)
	}
}

// TestHotListReadsAnIndexWithoutASort: every order of the room directory,
// with and without a region and a cursor, is an index range read.
func TestHotListReadsAnIndexWithoutASort(t *testing.T) {
	db, _ := openTemp(t, Options{})
	for _, order := range []store.DirectoryOrder{store.OrderHeat, store.OrderOnline, store.OrderNewest} {
		for _, q := range []store.DirectoryQuery{
			{Order: order, Status: "open", Limit: 10},
			{Order: order, Status: "open", Region: "sa", Limit: 10},
			{Order: order, Status: "open", Region: "sa", Mode: "chat", After: &store.DirectoryCursor{Value: 5, RoomID: "r"}, Limit: 10},
			{Order: order, Status: "open", Mode: "chat", After: &store.DirectoryCursor{Value: 5, RoomID: "r"}, Limit: 10},
		} {
			query, args, _ := dialect.DirectoryListing(q)
			plan := queryPlan(t, db, query, args...)
			want := "USING INDEX room_directory_"
			if q.Region != "" {
				want += "region_"
			}
			if !strings.Contains(plan, want+string(order)) || strings.Contains(plan, "TEMP B-TREE") {
				t.Errorf("%+v: plan %q, want %s%s without a sort", q, plan, want, order)
			}
		}
	}
}
