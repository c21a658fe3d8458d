package sqlite

import (
	"context"
	"errors"
	"fmt"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"hyapp/room-service/store"
)

// mapErr turns a driver error into a store sentinel: a constraint violation
// is store.ErrConflict, anything else store.ErrUnavailable (the database
// could not be used or the outcome is unknown). The driver's text stays in
// the message for logs; a context error stays in the chain so callers can
// still tell their own cancellation apart.
func mapErr(err error) error {
	if err == nil {
		return nil
	}
	if isConstraint(err) {
		return fmt.Errorf("%w (%v)", store.ErrConflict, err)
	}
	return unavailable(err)
}

func unavailable(err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%w (%w)", store.ErrUnavailable, err)
	}
	return fmt.Errorf("%w (%v)", store.ErrUnavailable, err)
}

func isConstraint(err error) bool {
	var se *sqlite.Error
	return errors.As(err, &se) && se.Code()&0xff == sqlite3.SQLITE_CONSTRAINT
}
