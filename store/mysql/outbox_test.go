package mysql

import (
	"database/sql"
	"testing"
	"time"

	"hyapp/room-service/outbox"
	"hyapp/room-service/store/mysql/mysqltest"
)

// stored reads what room_outbox holds of a row: its status's bytes and
// its published_at, NULL as -1.
func stored(t *testing.T, raw *sql.DB, eventID string) (status string, published int64) {
	t.Helper()
	var p sql.NullInt64
	if err := raw.QueryRowContext(t.Context(), `SELECT status, published_at FROM room_outbox WHERE event_id = ?`, eventID).Scan(&status, &p); err != nil {
		t.Fatalf("read %s: %v", eventID, err)
	}
	if !p.Valid {
		return status, -1
	}
	return status, p.Int64
}

// TestPendingRowsAreMarkedWithoutChangingTheirLength checks what lets
// InnoDB mark a row published in place: a pending row's status is stored
// as long as "published" and its published_at as 0, and both read back as
// before. Rows written before that (status 'pending', published_at NULL)
// are still pending to every read, and are marked, failed and requeued as
// the others.
func TestPendingRowsAreMarkedWithoutChangingTheirLength(t *testing.T) {
	ctx := t.Context()
	dsn := mysqltest.DSN(t)
	db := openDSN(t, dsn, Options{})
	raw := rawDB(t, dsn)
	now := time.Now()
	rec := func(v int64) outbox.Record {
		return outbox.Record{EventID: outbox.EventID("room", v, 0), RoomID: "room", RoomVersion: v, EventType: "E", CreatedAt: now}
	}
	if err := db.SaveOutbox(ctx, []outbox.Record{rec(1), rec(3), rec(4)}); err != nil {
		t.Fatal(err)
	}
	// Row 2 as a build before padding wrote it.
	if _, err := raw.ExecContext(ctx, `INSERT INTO room_outbox (event_id, room_id, room_version, seq, event_type, payload,
		owner_epoch, status, last_error, next_attempt_at, created_at) VALUES (?, 'room', 2, 0, 'E', '', 0, 'pending', '', ?, ?)`,
		outbox.EventID("room", 2, 0), now.UnixMilli(), now.UnixMilli()); err != nil {
		t.Fatal(err)
	}
	if s, p := stored(t, raw, outbox.EventID("room", 1, 0)); len(s) != len(outbox.StatusPublished) || p != 0 {
		t.Fatalf("a new pending row holds status %q and published_at %d; want %d bytes and 0", s, p, len(outbox.StatusPublished))
	}

	rows, err := db.ListRoomOutbox(ctx, "room", 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 4 {
		t.Fatalf("ListRoomOutbox = %d rows, want the 4 pending, padded or not", len(rows))
	}
	for i, r := range rows {
		if r.RoomVersion != int64(i+1) || r.Status != outbox.StatusPending || !r.PublishedAt.IsZero() {
			t.Fatalf("row %d = version %d, status %q, published %v; want version %d, %q, never", i, r.RoomVersion, r.Status, r.PublishedAt, i+1, outbox.StatusPending)
		}
	}
	heads, err := db.ListOutboxHeads(ctx, 0, 10)
	if err != nil || len(heads) != 1 || heads[0].RoomVersion != 1 || heads[0].Status != outbox.StatusPending {
		t.Fatalf("ListOutboxHeads = %+v, %v; want the room's first row, pending", heads, err)
	}
	st, err := db.OutboxStats(ctx, 0)
	if err != nil || st.Pending != 4 {
		t.Fatalf("OutboxStats = %+v, %v; want 4 pending", st, err)
	}

	// Marks: in a batch, and one at a time, which keeps a first publish time.
	if err := db.MarkOutboxPublishedBatch(ctx, []string{outbox.EventID("room", 1, 0), outbox.EventID("room", 2, 0)}); err != nil {
		t.Fatal(err)
	}
	if err := db.MarkOutboxPublished(ctx, outbox.EventID("room", 3, 0)); err != nil {
		t.Fatal(err)
	}
	for v := int64(1); v <= 3; v++ {
		if s, p := stored(t, raw, outbox.EventID("room", v, 0)); s != outbox.StatusPublished || p < now.UnixMilli() {
			t.Fatalf("row %d after its mark holds %q, published_at %d; want published at or after %d", v, s, p, now.UnixMilli())
		}
	}
	if _, err := raw.ExecContext(ctx, `UPDATE room_outbox SET published_at = 1 WHERE event_id = ?`, outbox.EventID("room", 3, 0)); err != nil {
		t.Fatal(err)
	}
	if err := db.MarkOutboxPublished(ctx, outbox.EventID("room", 3, 0)); err != nil {
		t.Fatal(err)
	}
	if _, p := stored(t, raw, outbox.EventID("room", 3, 0)); p != 1 {
		t.Fatalf("marking a published row again moved its publish time to %d", p)
	}

	// A failure keeps a pending row as long; the last one makes it dead,
	// and a requeue makes it pending and as long again.
	ev := outbox.EventID("room", 4, 0)
	if dead, err := db.FailOutbox(ctx, ev, "broker said no", time.Time{}, 2); err != nil || dead {
		t.Fatalf("first FailOutbox = %v, %v; want alive", dead, err)
	}
	if s, _ := stored(t, raw, ev); len(s) != len(outbox.StatusPublished) {
		t.Fatalf("a failed pending row holds status %q", s)
	}
	if dead, err := db.FailOutbox(ctx, ev, "broker said no", time.Time{}, 2); err != nil || !dead {
		t.Fatalf("second FailOutbox = %v, %v; want dead", dead, err)
	}
	if n, err := db.RequeueDeadOutbox(ctx, ""); err != nil || n != 1 {
		t.Fatalf("RequeueDeadOutbox = %d, %v; want 1", n, err)
	}
	if s, p := stored(t, raw, ev); len(s) != len(outbox.StatusPublished) || p != 0 {
		t.Fatalf("a requeued row holds status %q and published_at %d; want %d bytes and 0", s, p, len(outbox.StatusPublished))
	}
	if rows, err := db.ListRoomOutbox(ctx, "room", 10); err != nil || len(rows) != 1 || rows[0].EventID != ev || rows[0].Attempts != 0 {
		t.Fatalf("pending after the requeue = %+v, %v; want row 4 alone, no attempts", rows, err)
	}
}
