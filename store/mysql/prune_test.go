package mysql

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"

	"hyapp/room-service/outbox"
	"hyapp/room-service/store"
	"hyapp/room-service/store/mysql/mysqltest"
)

// fillYoungRoom gives room a log of n commands written at, with its snapshot
// at the head, n outbox rows written and published at, and n gift records
// sent at, inserted directly (a thousand rows a statement) as a busy room's
// day would leave them.
func fillYoungRoom(tb testing.TB, raw *sql.DB, room string, n int, at time.Time) {
	tb.Helper()
	ctx := context.Background()
	ms := at.UnixMilli()
	for from := 1; from <= n; from += 1000 {
		to := min(from+999, n)
		var cmds, outs, gifts strings.Builder
		args, outArgs, giftArgs := make([]any, 0, 4*(to-from+1)), make([]any, 0, 5*(to-from+1)), make([]any, 0, 4*(to-from+1))
		for v := from; v <= to; v++ {
			if v > from {
				cmds.WriteByte(',')
				outs.WriteByte(',')
				gifts.WriteByte(',')
			}
			cmds.WriteString(`(?, ?, ?, 'JoinRoom', '{}', TRUE, ?)`)
			args = append(args, room, v, fmt.Sprint("c", v), ms)
			outs.WriteString(`(?, ?, ?, 0, 'RoomUserJoined', '{}', 1, 'published', 0, '', 0, ?, ?)`)
			outArgs = append(outArgs, fmt.Sprintf("%s/%d/0", room, v), room, v, ms, ms)
			gifts.WriteString(`(?, ?, ?, 1, 2, 'rose', 1, 1, 0, ?)`)
			giftArgs = append(giftArgs, room, v, fmt.Sprint("c", v), ms)
		}
		if _, err := raw.ExecContext(ctx, `INSERT INTO room_command_log
			(room_id, room_version, command_id, command_type, payload, replayable, created_at) VALUES `+cmds.String(), args...); err != nil {
			tb.Fatal(err)
		}
		if _, err := raw.ExecContext(ctx, `INSERT INTO room_outbox (event_id, room_id, room_version, seq, event_type,
			payload, owner_epoch, status, attempts, last_error, next_attempt_at, created_at, published_at) VALUES `+outs.String(), outArgs...); err != nil {
			tb.Fatal(err)
		}
		if _, err := raw.ExecContext(ctx, `INSERT INTO room_gift_records (room_id, room_version, command_id, sender_user_id,
			receiver_user_id, gift_id, count, value, multiplier_bp, sent_at_ms) VALUES `+gifts.String(), giftArgs...); err != nil {
			tb.Fatal(err)
		}
	}
	if _, err := raw.ExecContext(ctx, `INSERT INTO room_snapshots (room_id, room_version, payload, created_at) VALUES (?, ?, 'snap', ?)`,
		room, n, ms); err != nil {
		tb.Fatal(err)
	}
	if _, err := raw.ExecContext(ctx, `ANALYZE TABLE room_command_log, room_outbox, room_snapshots, room_gift_records`); err != nil {
		tb.Fatal(err)
	}
}

// rowsRead is the session's count of rows and index entries its handlers
// read (the Handler_read_* counters).
func rowsRead(tb testing.TB, conn *sql.DB) int64 {
	tb.Helper()
	rows, err := conn.QueryContext(context.Background(), `SHOW SESSION STATUS LIKE 'Handler_read%'`)
	if err != nil {
		tb.Fatal(err)
	}
	defer rows.Close()
	var total int64
	for rows.Next() {
		var name string
		var n int64
		if err := rows.Scan(&name, &n); err != nil {
			tb.Fatal(err)
		}
		total += n
	}
	if err := rows.Err(); err != nil {
		tb.Fatal(err)
	}
	return total
}

// TestPruneReadsOnlyWhatItMayDelete: with nothing due, a retention pass
// reads a handful of rows, however long the room's young log, published
// outbox and gift records are. Before the bounds it read them whole, once a
// minute.
func TestPruneReadsOnlyWhatItMayDelete(t *testing.T) {
	ctx := t.Context()
	dsn := mysqltest.DSN(t)
	db := openDSN(t, dsn, Options{MaxOpenConns: 1}) // one connection: its session counters are the pass's
	const n = 3000
	fillYoungRoom(t, rawDB(t, dsn), "busy", n, time.Now())
	before := rowsRead(t, db.db)
	if got, err := db.PruneCommands(ctx, 0, time.Now().Add(-time.Hour), 1000); err != nil || got != 0 {
		t.Fatalf("PruneCommands = %d, %v; want 0", got, err)
	}
	if got, err := db.PruneOutbox(ctx, time.Now().Add(-time.Hour), 1000); err != nil || got != 0 {
		t.Fatalf("PruneOutbox = %d, %v; want 0", got, err)
	}
	if got, err := db.PruneGiftRecords(ctx, time.Now().Add(-time.Hour), 1000); err != nil || got != 0 {
		t.Fatalf("PruneGiftRecords = %d, %v; want 0", got, err)
	}
	// SHOW STATUS reads a few rows of its own; a scan of either table reads thousands.
	read := rowsRead(t, db.db) - before
	t.Logf("a retention pass read %d rows", read)
	if read > 200 {
		t.Fatalf("a retention pass with nothing due read %d rows of a room with %d young commands, published events and gift records", read, n)
	}
}

// TestPruneCommandsStopsAtTheFirstYoungRow: a room's log is pruned up to
// its first row written after the cut, even when an older row follows it
// (two nodes' clocks), and below its snapshot as always.
func TestPruneCommandsStopsAtTheFirstYoungRow(t *testing.T) {
	ctx := t.Context()
	db := openDSN(t, mysqltest.DSN(t), Options{})
	if err := db.SaveRoomMeta(ctx, store.RoomMeta{RoomID: "r1", OwnerUserID: 1, SeatCount: 8}); err != nil {
		t.Fatal(err)
	}
	claim, err := db.ClaimRoom(ctx, "r1", "node-a")
	if err != nil {
		t.Fatal(err)
	}
	cut := time.Now().Add(-time.Hour)
	old, young := cut.Add(-time.Hour), cut.Add(time.Minute)
	// v1-v3 old, v4 young, v5 old again, v6-v8 young, v9-v10 old; the snapshot at v8.
	at := []time.Time{old, old, old, young, old, young, young, young, old, old}
	b := store.Batch{RoomID: "r1", OwnerEpoch: claim.Epoch, Snapshot: &store.SnapshotRecord{RoomID: "r1", RoomVersion: 8, Payload: []byte("snap")}}
	for i, t := range at {
		v := int64(i + 1)
		b.Commands = append(b.Commands, store.CommandRecord{RoomID: "r1", RoomVersion: v, CommandID: fmt.Sprint("c", v),
			CommandType: "JoinRoom", Payload: []byte("{}"), Replayable: true, CreatedAt: t})
	}
	if res, err := db.CommitBatches(ctx, []store.Batch{b}); err != nil || res[0] != nil {
		t.Fatalf("CommitBatches = %v, %v", res, err)
	}
	if n, err := db.PruneCommands(ctx, 0, cut, 2); err != nil || n != 2 {
		t.Fatalf("PruneCommands(limit 2) = %d, %v; want v1-v2 deleted", n, err)
	}
	if n, err := db.PruneCommands(ctx, 0, cut, 100); err != nil || n != 1 {
		t.Fatalf("PruneCommands = %d, %v; want v3 deleted", n, err)
	}
	left, err := db.ListCommandsAfter(ctx, "r1", 0)
	if err != nil || len(left) != 7 || left[0].RoomVersion != 4 {
		t.Fatalf("the log after pruning: %d rows from %+v, %v; want v4-v10", len(left), left[:min(1, len(left))], err)
	}
}

// TestPruneOutboxStopsAtTheFirstYoungRow: published rows are pruned in id
// order up to the first row written after the cut, even when an older
// published row follows it (two nodes' clocks).
func TestPruneOutboxStopsAtTheFirstYoungRow(t *testing.T) {
	ctx := t.Context()
	dsn := mysqltest.DSN(t)
	db := openDSN(t, dsn, Options{})
	cut := time.Now().Add(-time.Hour)
	old, young := cut.Add(-time.Hour), cut.Add(time.Minute)
	at := []time.Time{old, old, young, old}
	var rows []outbox.Record
	for i, t := range at {
		rows = append(rows, outbox.Record{EventID: fmt.Sprintf("r/%d/0", i+1), RoomID: "r", RoomVersion: int64(i + 1), EventType: "E", CreatedAt: t})
	}
	if err := db.SaveOutbox(ctx, rows); err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		if err := db.MarkOutboxPublished(ctx, r.EventID); err != nil {
			t.Fatal(err)
		}
	}
	// Every row was published "before the cut" here, so only the bound keeps r/4/0.
	raw := rawDB(t, dsn)
	if _, err := raw.ExecContext(ctx, `UPDATE room_outbox SET published_at = ?`, old.UnixMilli()); err != nil {
		t.Fatal(err)
	}
	if n, err := db.PruneOutbox(ctx, cut, 100); err != nil || n != 2 {
		t.Fatalf("PruneOutbox = %d, %v; want r/1/0 and r/2/0 deleted", n, err)
	}
	var left int
	if err := raw.QueryRowContext(ctx, `SELECT count(*) FROM room_outbox WHERE event_id IN ('r/3/0', 'r/4/0')`).Scan(&left); err != nil || left != 2 {
		t.Fatalf("rows from the first young one on: %d left, %v; want 2", left, err)
	}
}

// BenchmarkPruneNothingDue is one retention pass (the command log, the
// outbox, the gift records) over a room of 200,000 young commands,
// published events and gift records, with nothing old enough to delete.
func BenchmarkPruneNothingDue(b *testing.B) {
	dsn := mysqltest.DSN(b)
	db := openDSN(b, dsn, Options{})
	fillYoungRoom(b, rawDB(b, dsn), "busy", 200_000, time.Now())
	ctx := b.Context()
	for b.Loop() {
		if _, err := db.PruneCommands(ctx, 0, time.Now().Add(-7*24*time.Hour), 10_000); err != nil {
			b.Fatal(err)
		}
		if _, err := db.PruneOutbox(ctx, time.Now().Add(-72*time.Hour), 10_000); err != nil {
			b.Fatal(err)
		}
		if _, err := db.PruneGiftRecords(ctx, time.Now().Add(-90*24*time.Hour), 10_000); err != nil {
			b.Fatal(err)
		}
	}
}
