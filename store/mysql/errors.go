package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/go-sql-driver/mysql"

	"hyapp/room-service/store"
)

// Server error numbers the adapter tells apart.
const (
	erDupKeyName      = 1061 // ER_DUP_KEYNAME: an index of that name exists
	erDupEntry        = 1062 // ER_DUP_ENTRY
	erLockWaitTimeout = 1205 // ER_LOCK_WAIT_TIMEOUT
	erLockDeadlock    = 1213 // ER_LOCK_DEADLOCK
)

// errLockConflict marks a deadlock or a lock wait timeout: the transaction
// is abandoned with nothing of it committed, so it may run again.
var errLockConflict = errors.New("lock conflict")

// Retries of a transaction that lost a lock conflict.
const (
	maxTxAttempts = 5
	retryBase     = 2 * time.Millisecond
)

// mapErr turns a driver error into a store sentinel: a duplicate key is
// store.ErrConflict, anything else store.ErrUnavailable (the server could
// not be used, or the outcome is unknown). The driver's text stays in the
// message for logs; a context error stays in the chain so callers can still
// tell their own cancellation apart.
func mapErr(err error) error {
	if err == nil {
		return nil
	}
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		switch me.Number {
		case erDupEntry:
			return fmt.Errorf("%w (%v)", store.ErrConflict, err)
		case erLockDeadlock, erLockWaitTimeout:
			return fmt.Errorf("%w (%w: %v)", store.ErrUnavailable, errLockConflict, err)
		}
	}
	return unavailable(err)
}

// unavailable wraps err as store.ErrUnavailable: connection errors
// (driver.ErrBadConn, mysql.ErrInvalidConn, net.Error, io.EOF, a refused
// dial), time-outs, server errors other than a duplicate key, and a closed DB.
func unavailable(err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%w (%w)", store.ErrUnavailable, err)
	}
	return fmt.Errorf("%w (%v)", store.ErrUnavailable, err)
}

// ctxErr reports why ctx ended as store.ErrUnavailable, with the context
// error in the chain.
func ctxErr(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%w (%w)", store.ErrUnavailable, err)
	}
	return nil
}

// txOptions is every write transaction's: see the package comment.
var txOptions = &sql.TxOptions{Isolation: sql.LevelReadCommitted}

// inTx runs fn in a transaction and commits it. When InnoDB rolls the
// transaction back for a deadlock or a lock wait timeout, nothing of it has
// committed, so inTx runs it again from the start (fn must not keep state
// across calls), up to maxTxAttempts times with a short jittered backoff,
// and then reports store.ErrUnavailable. fn returns mapped errors; any
// error from fn rolls the transaction back.
func (db *DB) inTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	for attempt := 1; ; attempt++ {
		err := db.tryTx(ctx, fn)
		if err == nil || !errors.Is(err, errLockConflict) || attempt == maxTxAttempts {
			return err
		}
		backoff := retryBase << attempt
		backoff = backoff/2 + rand.N(backoff/2+1)
		timer := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			timer.Stop()
			return fmt.Errorf("%w (after %v)", ctxErr(ctx), err)
		case <-timer.C:
		}
	}
}

func (db *DB) tryTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	tx, err := db.db.BeginTx(ctx, txOptions)
	if err != nil {
		return mapErr(err)
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	return mapErr(tx.Commit())
}
