// Package poll is the one way tests wait for something: poll a condition
// with a deadline instead of sleeping, and fail with what was still missing.
package poll

import (
	"errors"
	"testing"
	"time"
)

// Until asks again after first, then after twice as long each time, up to
// most: quick conditions are seen at once, and a slow one (an RPC, a query)
// is not asked hundreds of times a second.
const (
	first = time.Millisecond
	most  = 20 * time.Millisecond
)

// errNotYet is what Bool reports while its condition is false.
var errNotYet = errors.New("not yet")

// Until calls cond until it returns nil. Once within has passed it fails t
// with what it waited for and cond's last error, which should say what was
// still missing.
func Until(t testing.TB, within time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(within)
	for wait := first; ; wait = min(2*wait, most) {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s: %v", within, what, err)
		}
		time.Sleep(wait)
	}
}

// Bool adapts a yes-or-no condition to Until; while it is false its error
// says only "not yet", so what must name the condition.
func Bool(cond func() bool) func() error {
	return func() error {
		if cond() {
			return nil
		}
		return errNotYet
	}
}
