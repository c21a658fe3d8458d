package mysql

import (
	"context"
	"errors"
	"fmt"

	"github.com/go-sql-driver/mysql"

	"hyapp/room-service/store"
	"hyapp/room-service/store/sqlstore"
)

// Server error numbers the adapter tells apart.
const (
	erDupKeyName      = 1061 // ER_DUP_KEYNAME: an index of that name exists
	erDupFieldName    = 1060 // ER_DUP_FIELDNAME: a column of that name exists
	erCantDropKey     = 1091 // ER_CANT_DROP_FIELD_OR_KEY: no index or column of that name
	erDupEntry        = 1062 // ER_DUP_ENTRY
	erLockWaitTimeout = 1205 // ER_LOCK_WAIT_TIMEOUT
	erLockDeadlock    = 1213 // ER_LOCK_DEADLOCK
)

// mapErr turns a driver error into a store sentinel: a duplicate key is
// store.ErrConflict, a deadlock or a lock wait timeout store.ErrUnavailable
// with sqlstore.ErrRetry in its chain (InnoDB rolled the transaction back
// whole, so it may run again), anything else store.ErrUnavailable (the server could
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
			return fmt.Errorf("%w (%w: %v)", store.ErrUnavailable, sqlstore.ErrRetry, err)
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
