package im

import (
	"context"
	"time"
)

// Budget is the app-wide budget of send_group_msg calls: Tencent limits
// them for the whole application (every room on every node; 200 calls/s by
// default) and refuses calls over it with 60007/60011. A lane asks it for
// calls before sending; lanes of several nodes that share one Budget
// (im/redisbudget) stay within the limit together. Implementations are
// safe for concurrent use.
type Budget interface {
	// Take grants up to n calls to be made now and returns how many; 0 means
	// the budget is spent until later. An error means the budget could not
	// be asked (its store unreachable): nothing was granted.
	Take(ctx context.Context, n int) (int, error)
}

// BudgetShare is the part of the app budget lanes spend. Tencent counts
// calls as they arrive; the rest absorbs the jitter between when a call is
// granted and when it arrives, so no second at Tencent holds more than the
// app budget.
const BudgetShare = 0.95

// budgetTolerance is how far ahead of its even spacing a call may be
// granted: enough for a dispatcher tick to take its calls at once, small
// enough that no second holds more than a handful beyond the spacing.
const budgetTolerance = 15 * time.Millisecond

// Pacing is the spacing of calls for an app budget of callsPerSecond
// (BudgetShare of it, evenly spaced) and how far ahead of that spacing a
// call may be granted. Every Budget implementation paces with it, so in any
// one second the calls granted are at most
// BudgetShare×callsPerSecond + tolerance/interval + 1.
func Pacing(callsPerSecond float64) (interval, tolerance time.Duration) {
	interval = time.Duration(float64(time.Second) / (callsPerSecond * BudgetShare))
	return max(interval, time.Microsecond), budgetTolerance
}

// gcra is the generic cell rate algorithm on one clock: tat is the
// theoretical arrival time of the next call; a call may go while tat is at
// most tolerance ahead of now, and each call moves tat on by interval.
// Redis runs the same algorithm in im/redisbudget.
type gcra struct {
	interval, tolerance time.Duration
	tat                 time.Time
}

// available is how many calls may go at now.
func (g *gcra) available(now time.Time) int {
	tat := g.tat
	if tat.Before(now) {
		tat = now
	}
	ahead := now.Add(g.tolerance).Sub(tat)
	if ahead < 0 {
		return 0
	}
	return int(ahead/g.interval) + 1
}

// take spends n calls at now; the caller checked available.
func (g *gcra) take(now time.Time, n int) {
	if g.tat.Before(now) {
		g.tat = now
	}
	g.tat = g.tat.Add(time.Duration(n) * g.interval)
}
