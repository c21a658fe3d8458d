package poll

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestUntilReturnsOnceTheConditionHolds(t *testing.T) {
	calls := 0
	Until(t, time.Minute, "the third call", func() error {
		calls++
		if calls < 3 {
			return fmt.Errorf("call %d", calls)
		}
		return nil
	})
	if calls != 3 {
		t.Fatalf("%d calls, want 3", calls)
	}
}

// recorder is a testing.TB that keeps what Fatalf said.
type recorder struct {
	testing.TB
	msg string
}

func (r *recorder) Helper() {}
func (r *recorder) Fatalf(format string, args ...any) {
	r.msg = fmt.Sprintf(format, args...)
	panic(r)
}

func TestUntilSaysWhatWasMissing(t *testing.T) {
	r := &recorder{TB: t}
	func() {
		defer func() {
			if p := recover(); p != r {
				t.Fatalf("Until did not fail the test: %v", p)
			}
		}()
		Until(r, 10*time.Millisecond, "the rows", func() error { return errors.New("2 of 3 rows") })
	}()
	if !strings.Contains(r.msg, "the rows") || !strings.Contains(r.msg, "2 of 3 rows") {
		t.Fatalf("failure %q does not say what was missing", r.msg)
	}
	if err := Bool(func() bool { return false })(); err == nil {
		t.Fatal("a false Bool condition holds")
	}
}
