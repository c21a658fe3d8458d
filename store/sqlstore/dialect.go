package sqlstore

import (
	"strings"

	"hyapp/room-service/outbox"
	"hyapp/room-service/store"
)

// Dialect is what the SQL layer needs to know of a database: the few
// clauses SQLite and MySQL spell differently and the shape of their writes.
// Both take "?" placeholders, so the statements are otherwise the same text.
// A Dialect is a plain value, built once by its adapter.
type Dialect struct {
	// Name names the database in errors ("sqlite", "mysql").
	Name string
	// MapErr turns a driver error into a store sentinel: a duplicate key is
	// store.ErrConflict, a transaction the database rolled back whole (a
	// deadlock, a lock wait timeout) is store.ErrUnavailable with ErrRetry
	// in its chain, anything else store.ErrUnavailable. The driver's text
	// stays in the message only. nil maps to nil.
	MapErr func(error) error
	// SingleWriter says the database runs one write transaction at a time
	// (SQLite): writers queue for it instead of racing for row locks.
	SingleWriter bool
	// LockReads says reads inside a write transaction must lock the rows
	// they read (FOR UPDATE). SQLite's BEGIN IMMEDIATE holds the whole
	// database already.
	LockReads bool
	// IndexHints says the planner takes FORCE INDEX where it would pick a
	// worse index (MySQL). SQLite plans from its partial indexes and gets
	// no hints.
	IndexHints bool
	// UpsertDuplicateKey spells an upsert ON DUPLICATE KEY UPDATE c =
	// VALUES(c) (MySQL and MariaDB: VALUES() is MariaDB's only spelling and
	// still works on MySQL 8.0) instead of ON CONFLICT (key) DO UPDATE SET
	// c = excluded.c (SQLite).
	UpsertDuplicateKey bool
	// UpdateLimit says UPDATE takes ORDER BY and LIMIT (MySQL). Without it
	// (SQLite) the rows are picked by a subquery, which MySQL in turn
	// refuses (no LIMIT in an IN subquery).
	UpdateLimit bool
	// PartialIndexes says the outbox indexes only its pending and dead rows
	// (SQLite): published rows are counted as the rest of the table, which
	// SQLite counts from its smallest index. Without it (MySQL) an index on
	// status counts them directly.
	PartialIndexes bool
	// KeepPrepared says a statement of every size is worth preparing once
	// and keeping (SQLite, in process: parsing is the cost). Without it
	// (MySQL) only the largest multi-row INSERT is kept prepared and other
	// sizes go as text: a prepared statement of every size on every pooled
	// connection would count against max_prepared_stmt_count.
	KeepPrepared bool
	// MaxBulkBytes caps the bytes of one multi-row INSERT (0: no cap), to
	// stay below MySQL's max_allowed_packet.
	MaxBulkBytes int
	// MaxPacketBytes is the most bytes one statement may carry (MySQL's
	// max_allowed_packet, read when the adapter opens; 0: no limit). A
	// longer statement fails and drops its connection, so a snapshot that
	// does not fit in a statement of its own cannot be stored: a commit
	// and a stop leave it out (see snapshotFits).
	MaxPacketBytes int
	// BulkFenceMinRooms is the number of rooms from which a commit fences
	// all its rooms with two statements (a locking read and one UPDATE)
	// instead of one conditional UPDATE per batch (0: never). Each
	// statement costs a round trip on MySQL; on SQLite a prepared UPDATE
	// per batch is cheaper than building the bulk statements.
	BulkFenceMinRooms int
	// StatementJournal says the database keeps, for a statement that
	// writes many rows and may fail part way, a copy of every page it
	// changes, so that the statement alone can be undone (SQLite: past
	// 64 KiB in a temporary file, a write system call per page, on the one
	// writer's time). Statements that are told what a failure does spare
	// it: see InsertOrRollback and UpdateCannotFail.
	StatementJournal bool
	// MultiStatements says the connections take several statements as one
	// query, answered together (MySQL with the driver's multiStatements):
	// a commit of the common batches then costs one round trip for all its
	// writes (see commitOneTrip).
	MultiStatements bool
	// InProcess says statements run in the process, on its own CPU, and
	// end on their own (SQLite): a commit's statements then take a context
	// that does not end (see DB.statementContext).
	InProcess bool
	// PadPending says an outbox row's pending status is stored padded with
	// spaces to the length of "published" (MySQL: the column's collation
	// pads, so it still equals 'pending' in every comparison and index).
	// Marking the row published then changes the length of none of its
	// fields (its published_at is stored as 0 until then), so InnoDB
	// updates the row in place instead of deleting and inserting it within
	// its page. The marks bound the relay on MySQL: in place, one took
	// 15-20% less of the database's CPU and a third less time, and the
	// relay published 1.5-1.8 times as many rows a second.
	PadPending bool
}

// pendingStatus is an outbox row's pending status as stored (see PadPending).
func (d *Dialect) pendingStatus() string {
	if d.PadPending {
		return outbox.StatusPending + strings.Repeat(" ", len(outbox.StatusPublished)-len(outbox.StatusPending))
	}
	return outbox.StatusPending
}

// packetSlack is what a statement that stores one snapshot holds besides
// its payload: the statement's text and the row's other values.
const packetSlack = 64 << 10

// snapshotFits reports whether s can be stored: its payload as the driver
// sends it in a statement's text (each byte it escapes doubled), with
// packetSlack, fits in MaxPacketBytes. A room of 100,000 members with
// 200-byte avatar URLs makes 23 MiB, past MariaDB's default 16 MiB.
func (d *Dialect) snapshotFits(s *store.SnapshotRecord) bool {
	if d.MaxPacketBytes == 0 || s == nil {
		return true
	}
	n := len(s.Payload) + len(s.RoomID) + packetSlack
	if n > d.MaxPacketBytes {
		return false
	}
	for _, c := range s.Payload {
		switch c {
		case 0, '\n', '\r', 0x1a, '\'', '"', '\\':
			n++
		}
	}
	return n <= d.MaxPacketBytes
}

// InsertOrRollback returns the start of an INSERT whose failure (a
// duplicate key) may roll back the whole transaction, as its caller does
// anyway: "INSERT OR ROLLBACK INTO" with a statement journal, "INSERT
// INTO" otherwise. The caller must not run another statement in the
// transaction after such a failure: it ran in none.
func (d *Dialect) InsertOrRollback() string {
	if d.StatementJournal {
		return "INSERT OR ROLLBACK INTO "
	}
	return "INSERT INTO "
}

// UpdateCannotFail returns the start of an UPDATE that sets no key and
// whose values violate no constraint: "UPDATE OR IGNORE" with a statement
// journal (no row can be skipped, since none fails, and SQLite then keeps
// no journal for it), "UPDATE" otherwise.
func (d *Dialect) UpdateCannotFail() string {
	if d.StatementJournal {
		return "UPDATE OR IGNORE "
	}
	return "UPDATE "
}

// ForUpdate returns " FOR UPDATE" where reads in a write transaction lock
// their rows, "" otherwise.
func (d *Dialect) ForUpdate() string {
	if d.LockReads {
		return " FOR UPDATE"
	}
	return ""
}

// ForceIndex returns " FORCE INDEX (index)" where the planner takes hints,
// "" otherwise.
func (d *Dialect) ForceIndex(index string) string {
	if d.IndexHints {
		return " FORCE INDEX (" + index + ")"
	}
	return ""
}

// Upsert returns the tail of an INSERT that makes it overwrite cols of the
// row that already holds its unique key (key is the key's columns, which
// SQLite names and MySQL finds itself).
func (d *Dialect) Upsert(key string, cols ...string) string {
	var b strings.Builder
	if d.UpsertDuplicateKey {
		b.WriteString(" ON DUPLICATE KEY UPDATE ")
		for i, c := range cols {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(c + " = VALUES(" + c + ")")
		}
		return b.String()
	}
	b.WriteString(" ON CONFLICT (" + key + ") DO UPDATE SET ")
	for i, c := range cols {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(c + " = excluded." + c)
	}
	return b.String()
}

// snapshotUpsert is the tail of the INSERT that stores snapshots: it
// replaces a room's stored snapshot only with a higher version. MySQL
// assigns left to right, each assignment seeing those before it, so the
// version is assigned last.
func (d *Dialect) snapshotUpsert() string {
	if !d.UpsertDuplicateKey {
		return d.Upsert("room_id", "room_version", "payload", "created_at") + ` WHERE excluded.room_version > room_snapshots.room_version`
	}
	q := ` ON DUPLICATE KEY UPDATE `
	for i, c := range []string{"payload", "created_at", "room_version"} {
		if i > 0 {
			q += ", "
		}
		q += c + ` = IF(VALUES(room_version) > room_version, VALUES(` + c + `), ` + c + `)`
	}
	return q
}

// UpdateFirst returns an UPDATE of table that sets set on at most a limit
// of the rows that match where, its last placeholder: the oldest ids first
// where UPDATE takes ORDER BY, in the order of the index where picks the
// rows from otherwise.
func (d *Dialect) UpdateFirst(table, set, where string) string {
	if d.UpdateLimit {
		return `UPDATE ` + table + ` SET ` + set + ` WHERE ` + where + ` ORDER BY id LIMIT ?`
	}
	return `UPDATE ` + table + ` SET ` + set + ` WHERE id IN (SELECT id FROM ` + table + ` WHERE ` + where + ` LIMIT ?)`
}

// maxIn caps the values of one IN (...) list: far below SQLite's 32766
// variables and MySQL's 65535 placeholders.
const maxIn = 500

// In returns "(?, ?, ...)" with n placeholders, n >= 1.
func In(n int) string { return "(?" + strings.Repeat(", ?", n-1) + ")" }

// Values returns n copies of row joined by ", ": the VALUES list of a
// multi-row INSERT.
func Values(row string, n int) string {
	var b strings.Builder
	b.Grow(n * (len(row) + 2))
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(row)
	}
	return b.String()
}

// AppendStrings appends each of s to dst as an argument.
func AppendStrings(dst []any, s []string) []any {
	for _, v := range s {
		dst = append(dst, v)
	}
	return dst
}
