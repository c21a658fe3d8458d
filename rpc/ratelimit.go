package rpc

import (
	"sync"

	"golang.org/x/time/rate"

	"hyapp/room-service/room"
)

// ErrRateLimited: the caller created rooms faster than it may; nothing was
// created. Retry later with the same command_id.
var ErrRateLimited = &room.Error{Code: room.CodeExhausted, Reason: "rate_limited", Message: "too many rooms created by this caller; retry later"}

// perCaller is one token bucket per caller name. The names come from the
// configuration, so the map stays as small as the list of callers. The
// zero value (or a nil *perCaller) allows everything.
type perCaller struct {
	every float64 // events per second; 0: unlimited
	burst int

	mu      sync.Mutex
	buckets map[string]*rate.Limiter
}

func newPerCaller(perSecond float64) *perCaller {
	if perSecond <= 0 {
		return nil
	}
	return &perCaller{every: perSecond, burst: max(1, int(2*perSecond)), buckets: map[string]*rate.Limiter{}}
}

// allow takes one event of caller from its bucket.
func (p *perCaller) allow(caller string) bool {
	if p == nil {
		return true
	}
	p.mu.Lock()
	b, ok := p.buckets[caller]
	if !ok {
		b = rate.NewLimiter(rate.Limit(p.every), p.burst)
		p.buckets[caller] = b
	}
	p.mu.Unlock()
	return b.Allow()
}
