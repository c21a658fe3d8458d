package mysql

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"

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

// TestPruneReadsNoKeptRowOfAQuietRoom: a room whose whole log is older
// than the cut (it went quiet) with a few rows due costs a pass those rows,
// not every row it keeps below its snapshot (retain_versions): the search
// for its first young row stops keepVersions below the snapshot. Written
// as a bound on the row's version, MariaDB searched the room's primary key
// by room_id alone and checked the bound on every row, to the end of the log.
func TestPruneReadsNoKeptRowOfAQuietRoom(t *testing.T) {
	ctx := t.Context()
	dsn := mysqltest.DSN(t)
	db := openDSN(t, dsn, Options{MaxOpenConns: 1}) // one connection: its session counters are the pass's
	const n, keep = 3000, 2998
	fillYoungRoom(t, rawDB(t, dsn), "quiet", n, time.Now().Add(-8*24*time.Hour))
	before := rowsRead(t, db.db)
	if got, err := db.PruneCommands(ctx, keep, time.Now().Add(-7*24*time.Hour), 1000); err != nil || got != n-keep {
		t.Fatalf("PruneCommands(keep %d) = %d, %v; want %d", keep, got, err, n-keep)
	}
	read := rowsRead(t, db.db) - before
	t.Logf("a pass that deleted %d rows read %d", n-keep, read)
	if read > 200 {
		t.Fatalf("a pass that deleted %d rows of a quiet room read %d rows: the %d kept below its snapshot too", n-keep, read, keep)
	}
	left := 0
	if err := db.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM room_command_log WHERE room_id = 'quiet' AND room_version > ?`, n-keep).Scan(&left); err != nil || left != keep {
		t.Fatalf("rows kept: %d, %v; want %d", left, err, keep)
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

// TestOutboxStatsReadsThePublishedRowsItCounts counts the rows the outbox
// summary reads from a table of published rows: none for the gauges' read
// (no count), about as many as it counts below the number kept, and each
// one when it counts them all.
func TestOutboxStatsReadsThePublishedRowsItCounts(t *testing.T) {
	ctx := t.Context()
	dsn := mysqltest.DSN(t)
	db := openDSN(t, dsn, Options{MaxOpenConns: 1}) // one connection: its session counters are the reads'
	const n = 3000
	fillYoungRoom(t, rawDB(t, dsn), "busy", n, time.Now())
	for _, c := range []struct {
		upTo, published int64
		more            bool
		least, most     int64 // rows read; SHOW STATUS reads a few of its own
	}{
		{0, 0, false, 0, 200},
		{100, 100, true, 100, 300},
		{n, n, false, n, 2*n + 200},
	} {
		before := rowsRead(t, db.db)
		st, err := db.OutboxStats(ctx, c.upTo)
		if err != nil || st.Pending != 0 || st.Published != c.published || st.PublishedMore != c.more {
			t.Fatalf("OutboxStats(%d) = %+v, %v; want nothing pending, %d published, more %v", c.upTo, st, err, c.published, c.more)
		}
		if read := rowsRead(t, db.db) - before; read < c.least || read > c.most {
			t.Fatalf("OutboxStats(%d) read %d rows of a table of %d published ones; want %d to %d", c.upTo, read, n, c.least, c.most)
		}
	}
}
