package bench

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"hyapp/room-service/store"
	"hyapp/room-service/store/sqlite"
)

// SQLite returns the environment of the embedded database: every Open makes
// a new file under dir with the service's settings (WAL, synchronous=FULL).
func SQLite(dir string) Env {
	var n atomic.Int64
	path := func() string { return filepath.Join(dir, fmt.Sprintf("bench-%d.db", n.Add(1))) }
	return Env{
		CommitWorkers: 1,
		Open: func(ctx context.Context) (store.Repository, error) {
			return sqlite.Open(ctx, path(), sqlite.Options{})
		},
		BareInsert: func(ctx context.Context, total, batch, _ int) (time.Duration, error) {
			p := path()
			db, err := sqlite.Open(ctx, p, sqlite.Options{}) // creates the schema
			if err != nil {
				return 0, err
			}
			insert := db.Dialect().InsertOrRollback()
			if err := db.Close(); err != nil {
				return 0, err
			}
			raw, err := sql.Open("sqlite", "file:"+p+"?_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)&_pragma=busy_timeout(5000)&_pragma=cache_size(-65536)&_txlock=immediate")
			if err != nil {
				return 0, err
			}
			defer func() { _ = raw.Close() }()
			raw.SetMaxOpenConns(1)
			return bareLoopFrom(ctx, raw, insert, 0, total, batch)
		},
	}
}

// bareLoopFrom inserts total commands' rows, numbered from first, (a log row and an outbox row each,
// shaped like the engine's) in transactions of batch commands, with one
// multi-row INSERT per table, starting with insert as the engine's do: the
// least work the database can do for them.
func bareLoopFrom(ctx context.Context, db *sql.DB, insert string, first, total, batch int) (time.Duration, error) {
	logSQL := insert + "room_command_log (room_id, room_version, command_id, command_type, payload, replayable, created_at) VALUES " +
		strings.TrimSuffix(strings.Repeat("(?, ?, ?, ?, ?, 1, ?), ", batch), ", ")
	outSQL := insert + "room_outbox (event_id, room_id, room_version, seq, event_type, payload, owner_epoch, status, attempts, last_error, next_attempt_at, created_at) VALUES " +
		strings.TrimSuffix(strings.Repeat("(?, ?, ?, 0, 'RoomUserJoined', ?, 1, 'pending', 0, '', ?, ?), ", batch), ", ")
	logStmt, err := db.PrepareContext(ctx, logSQL)
	if err != nil {
		return 0, err
	}
	defer func() { _ = logStmt.Close() }()
	outStmt, err := db.PrepareContext(ctx, outSQL)
	if err != nil {
		return 0, err
	}
	defer func() { _ = outStmt.Close() }()
	cmdPayload := []byte(`{"op":123456,"at":1796033128314,"body":{"nickname":"listener","vehicle":"car-7"}}`)
	evPayload := []byte(`{"user_id":123456,"nickname":"listener","vehicle":"car-7","joined_at":1796033128314,"online_count":57}`)
	start := time.Now()
	logArgs := make([]any, 0, 6*batch)
	outArgs := make([]any, 0, 6*batch)
	for done := first; done+batch <= first+total; done += batch {
		now := time.Now().UnixMilli()
		logArgs, outArgs = logArgs[:0], outArgs[:0]
		for i := done; i < done+batch; i++ {
			roomID := fmt.Sprintf("bare-%d", i%1000)
			version := int64(i/1000 + 1)
			logArgs = append(logArgs, roomID, version, fmt.Sprintf("j-%d", i), "JoinRoom", cmdPayload, now)
			outArgs = append(outArgs, fmt.Sprintf("%s/%d/0", roomID, version), roomID, version, evPayload, now, now)
		}
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return 0, err
		}
		if _, err := tx.StmtContext(ctx, logStmt).ExecContext(ctx, logArgs...); err != nil {
			_ = tx.Rollback()
			return 0, err
		}
		if _, err := tx.StmtContext(ctx, outStmt).ExecContext(ctx, outArgs...); err != nil {
			_ = tx.Rollback()
			return 0, err
		}
		if err := tx.Commit(); err != nil {
			return 0, err
		}
	}
	return time.Since(start), nil
}
