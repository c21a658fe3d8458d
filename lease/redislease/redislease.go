// Package redislease is the fleet's lease: one Redis key per room, taken
// with SET NX PX and a token naming the holder, renewed by compare-and-extend
// and released by compare-and-delete (Lua). It also keeps the fleet's
// membership (membership.go).
//
// The lease decides who should serve a room; the database decides who can
// write it: every commit is fenced by the room's owner epoch, so two holders
// at once (a Redis failover, a paused process, a restart that lost the keys)
// cost wasted work, never a lost or doubled write.
//
// Redis trouble, the policy:
//   - A held room keeps being served while Redis is unreachable: the handle
//     is marked degraded (metric, one log line per outage) and renewal goes
//     on; when Redis answers again the key is extended, taken again if it
//     vanished (a restart that lost every key), or the handle is lost if
//     another node holds it now.
//   - A new room is not taken while Redis is unreachable: Acquire retries for
//     at most one TTL and then returns lease.ErrUnavailable, which callers
//     see as a retryable unavailable. Serving without a lease would let two
//     nodes load the same room at once; the owner epoch keeps that safe, but
//     each load fences the other and the room ping-pongs.
//   - Once every call to Redis has failed for a renewal period (TTL/3),
//     with no answer or with an error reply such as READONLY, Acquire and
//     Owner answer lease.ErrUnavailable at once, without a call. A call that
//     reaches a node not holding its room then fails in microseconds instead
//     of waiting out its deadline, so a gateway finds the holder while the
//     outage lasts, and calls do not pile up behind a dead connection pool.
//     One call per probe period (probeEvery) still goes to Redis, as do the
//     renewals and the membership's heartbeats (which tell a node that holds
//     no room), and the first that succeeds ends it. A caller's cancelled or
//     expired context counts for nothing.
package redislease

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"hyapp/room-service/lease"
	"hyapp/room-service/room"
)

// Node names a room-service node: its id and the host:port other nodes
// reach its API on.
type Node struct {
	ID   string
	Addr string
}

// Owner is the holder of a room's lease, as its token names it.
type Owner struct {
	NodeID string
	Addr   string
}

// Keys builds every Redis key of the package, so their format is in one
// place. Prefix (which must hold no '{') separates deployments or tests
// sharing one Redis. A room's keys carry the room id as hash tag, so they
// stay on one slot of a Redis Cluster.
type Keys struct {
	Prefix string
}

// Lease is the key of a room's lease.
func (k Keys) Lease(roomID string) string { return k.Prefix + "room:{" + roomID + "}:lease" }

// Node is the key of a node's membership record.
func (k Keys) Node(nodeID string) string { return k.Prefix + "node:" + nodeID }

// Fleet is the key of the sorted set that counts the live nodes: each
// heartbeat scores its node with Redis's clock.
func (k Keys) Fleet() string { return k.Prefix + "fleet" }

// nodePattern matches every node key (a SCAN pattern).
func (k Keys) nodePattern() string { return globEscape(k.Prefix) + "node:*" }

func globEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[]\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// Config is what a node's lease and membership share.
type Config struct {
	Self Node
	// TTL is the lease's time to live in Redis; renewal runs every TTL/3
	// and membership records live 3×TTL.
	TTL  time.Duration
	Keys Keys
}

// MinTTL is the shortest TTL New accepts: below it the clock-rate margin
// and the network round trip leave no validity.
const MinTTL = 100 * time.Millisecond

func (c Config) check() error {
	switch {
	case c.TTL < MinTTL:
		return fmt.Errorf("lease ttl %v is below %v", c.TTL, MinTTL)
	case c.Self.ID == "" || strings.Contains(c.Self.ID, "|"):
		return fmt.Errorf("node id %q is empty or holds '|'", c.Self.ID)
	case strings.Contains(c.Keys.Prefix, "{"):
		return fmt.Errorf("key prefix %q holds '{'", c.Keys.Prefix)
	}
	return nil
}

// callTimeout bounds one Redis round trip, so a partition is noticed within
// a renewal period.
func (c Config) callTimeout() time.Duration { return c.TTL / 3 }

// validity is how long a lease may be trusted after the request that set or
// extended it was sent: the TTL less the clock margin.
func (c Config) validity() time.Duration { return c.TTL - c.margin() }

// margin is 1% of the TTL, for clocks running at different rates, and 10ms.
func (c Config) margin() time.Duration { return c.TTL/100 + 10*time.Millisecond }

// ClientOptions parses a redis:// or rediss:// URL into client options whose
// timeouts suit a lease of ttl: a call is bounded by its context and by one
// renewal period.
func ClientOptions(url string, ttl time.Duration) (*redis.Options, error) {
	opt, err := redis.ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("redis url: %w", err)
	}
	step := ttl / 3
	opt.DialTimeout, opt.ReadTimeout, opt.WriteTimeout = step, step, step
	opt.ContextTimeoutEnabled = true
	opt.MaxRetries = -1 // the lease retries on its own schedule
	return opt, nil
}

// Metrics are the lease's instruments; a nil field is not reported.
type Metrics struct {
	Held        func(n int)         // leases this node holds now
	Acquired    func(result string) // ok, held, unavailable
	RenewFailed func(kind string)   // not_ours, unreachable, expired
	Degraded    func(n int)         // held leases Redis could not renew lately
	Lost        func()              // leases another holder took
}

var (
	// acquireScript takes a free key, or keeps one that already holds the
	// token (a SET whose reply was lost). It returns {1, Redis's time in
	// unix ms}, or the holder's token.
	acquireScript = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
if not v then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return {1, now}
elseif v == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, now}
end
return v`)
	// extendScript extends the key if it holds the token (1), or reports
	// another holder (0). A key that is gone it takes again (2) only
	// before ARGV[3], a time on Redis's clock (unix ms; 0: never) by which
	// the key cannot have expired: it vanished with no other holder (a
	// Redis restart). Otherwise (3) it leaves it gone: the key may have
	// expired, and another node taken, used and released the room since.
	// Redis's clock decides, not the renewal's sender: a renewal sent while
	// the handle was valid may reach Redis after the key expired. The
	// script decides, not the reply, which a renewal may lose. Each outcome
	// comes with Redis's time (unix ms).
	extendScript = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
if v == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, now}
elseif not v then
  if now < tonumber(ARGV[3]) then
    redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
    return {2, now}
  end
  return {3, now}
end
return {0, now}`)
	// releaseScript deletes the key only if it holds the token.
	releaseScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0`)
)

// Renewal outcomes of extendScript.
const (
	notOurs  = 0
	extended = 1
	retaken  = 2
	gone     = 3 // vanished after the handle ran out: lost
)

// renewBatch is the most keys renewed in one pipeline.
const renewBatch = 512

// Lease implements lease.Lease on one Redis. Run must be running for the
// held leases to be renewed. Safe for concurrent use.
type Lease struct {
	client  *redis.Client
	cfg     Config
	log     *slog.Logger
	metrics Metrics
	start   time.Time // the monotonic origin of validUntil

	mu          sync.Mutex
	held        map[*handle]struct{}
	degraded    int  // handles in held marked degraded
	unreachable bool // logged once per outage
	// Redis's reachability, from every call's outcome (see asks).
	failing    bool          // the last call failed
	failSince  time.Duration // when the calls began to fail, on now's clock
	lastProbe  time.Duration // when asks last let a call through while Redis was down
	probeEvery time.Duration // 0: defaultProbeEvery
}

// defaultProbeEvery is how often a call still goes to a Redis that counts
// as down, to find it back.
const defaultProbeEvery = 250 * time.Millisecond

var _ lease.Lease = (*Lease)(nil)

// New returns the lease of the node cfg.Self on client. It starts nothing:
// the caller runs Run and stops it after releasing the leases.
func New(client *redis.Client, cfg Config, log *slog.Logger, m Metrics) (*Lease, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	return &Lease{client: client, cfg: cfg, log: log, metrics: m, start: time.Now(), held: map[*handle]struct{}{}}, nil
}

// now is the time since New on the monotonic clock.
func (l *Lease) now() time.Duration { return time.Since(l.start) }

// Held is the number of leases this node holds.
func (l *Lease) Held() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.held)
}

// asks reports whether a call may go to Redis now: not while Redis counts
// as down (every call failed for a renewal period or more), but for one
// probe per probe period.
func (l *Lease) asks() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	if !l.failing || now-l.failSince < l.cfg.callTimeout() {
		return true
	}
	every := l.probeEvery
	if every == 0 {
		every = defaultProbeEvery
	}
	if now-l.lastProbe < every {
		return false
	}
	l.lastProbe = now
	return true
}

// answered records a call's outcome: err nil when Redis answered (with a
// value or none), else the call's failure.
func (l *Lease) answered(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case err == nil:
		l.failing = false
	case !l.failing:
		l.failing, l.failSince = true, l.now()
	}
}

// answeredFor records the outcome of a call made under the caller's ctx,
// unless the caller's ctx ended (cancelled, or its deadline passed): that
// says nothing of Redis. A call that ran out of its own time (callTimeout)
// counts.
func (l *Lease) answeredFor(ctx context.Context, err error) {
	if ctx.Err() == nil {
		l.answered(err)
	}
}

// down is the error of a call not made because Redis counts as down (no
// answer, or error replies such as READONLY: no lease can be taken).
func (l *Lease) down(what string) error {
	l.mu.Lock()
	since := l.now() - l.failSince
	l.mu.Unlock()
	return room.Errorf(lease.ErrUnavailable, "%s: every call to Redis has failed for %s", what, since.Round(time.Millisecond))
}

// Acquire implements lease.Lease. It returns lease.ErrHeld (with the
// holder) when another token holds the key, and lease.ErrUnavailable when
// Redis did not answer within one TTL, or at once while it counts as down.
func (l *Lease) Acquire(ctx context.Context, roomID string) (lease.Handle, error) {
	key := l.cfg.Keys.Lease(roomID)
	token := newToken(l.cfg.Self)
	giveUp := l.now() + l.cfg.TTL
	wait := 20 * time.Millisecond
	for {
		if !l.asks() {
			l.count(l.metrics.Acquired, "unavailable")
			return nil, l.down("acquire lease room=" + roomID)
		}
		sent := l.now()
		cctx, cancel := context.WithTimeout(ctx, l.cfg.callTimeout())
		res, err := acquireScript.Run(cctx, l.client, []string{key}, token, l.cfg.TTL.Milliseconds()).Result()
		cancel()
		l.answeredFor(ctx, err)
		if err == nil {
			if holder, ok := res.(string); ok {
				l.count(l.metrics.Acquired, "held")
				o, _ := parseToken(holder)
				return nil, room.Errorf(lease.ErrHeld, "room %s is held by node %s (%s)", roomID, o.NodeID, o.Addr)
			}
			r, err := parseReply(res)
			if err != nil {
				l.count(l.metrics.Acquired, "unavailable")
				return nil, room.Errorf(lease.ErrUnavailable, "acquire lease room=%s: %v", roomID, err)
			}
			h := &handle{l: l, roomID: roomID, key: key, token: token, lost: make(chan struct{})}
			h.validUntil.Store(int64(sent + l.cfg.validity()))
			h.expires.Store(r.at + l.cfg.TTL.Milliseconds())
			l.add(h)
			l.count(l.metrics.Acquired, "ok")
			return h, nil
		}
		if ctx.Err() != nil || l.now()+wait > giveUp {
			l.count(l.metrics.Acquired, "unavailable")
			return nil, room.Errorf(lease.ErrUnavailable, "acquire lease room=%s: %v", roomID, err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
		wait = min(2*wait, l.cfg.TTL/4)
	}
}

// Owner tells who holds the room's lease now, for routing a call to it.
// found is false when nobody does.
func (l *Lease) Owner(ctx context.Context, roomID string) (o Owner, found bool, err error) {
	if !l.asks() {
		return Owner{}, false, l.down("lease owner room=" + roomID)
	}
	cctx, cancel := context.WithTimeout(ctx, l.cfg.callTimeout())
	token, err := l.client.Get(cctx, l.cfg.Keys.Lease(roomID)).Result()
	cancel()
	missing := errors.Is(err, redis.Nil)
	if missing {
		err = nil
	}
	l.answeredFor(ctx, err)
	if missing {
		return Owner{}, false, nil
	}
	if err != nil {
		return Owner{}, false, fmt.Errorf("lease owner room=%s: %w", roomID, err)
	}
	o, ok := parseToken(token)
	if !ok {
		return Owner{}, false, fmt.Errorf("lease owner room=%s: malformed token %q", roomID, token)
	}
	return o, true, nil
}

// Run renews every held lease each TTL/3 until ctx ends. It returns nil.
func (l *Lease) Run(ctx context.Context) error {
	t := time.NewTicker(l.cfg.TTL / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			l.renewAll(ctx)
		}
	}
}

// renewAll extends the held keys in pipelines of renewBatch; once Redis is
// found unreachable the rest are marked degraded without a call each.
func (l *Lease) renewAll(ctx context.Context) {
	l.mu.Lock()
	hs := make([]*handle, 0, len(l.held))
	for h := range l.held {
		hs = append(hs, h)
	}
	l.mu.Unlock()
	for lo := 0; lo < len(hs); lo += renewBatch {
		batch := hs[lo:min(lo+renewBatch, len(hs))]
		sent := l.now()
		res, err := l.extend(ctx, batch)
		if ctx.Err() != nil {
			return // stopping: an error now says nothing of Redis
		}
		l.answered(err)
		if err != nil {
			for _, h := range hs[lo:] {
				l.settle(h, sent, reply{}, err)
			}
			return
		}
		for i, h := range batch {
			l.settle(h, sent, res[i], nil)
		}
	}
}

// reply is the outcome of a script and Redis's time (unix ms) when it ran.
type reply struct {
	res int64
	at  int64
}

// parseReply reads a script's {outcome, time} reply.
func parseReply(v any) (reply, error) {
	if out, ok := v.([]any); ok && len(out) == 2 {
		res, ok1 := out[0].(int64)
		at, ok2 := out[1].(int64)
		if ok1 && ok2 {
			return reply{res: res, at: at}, nil
		}
	}
	return reply{}, fmt.Errorf("unexpected reply %v", v)
}

// extend runs extendScript for each handle in one pipeline, loading the
// script first if Redis lost it (a restart). A handle whose validity has
// not ended lets the script take its vanished key again until the key's
// expiry it last heard of, less the clock margin, on Redis's clock.
func (l *Lease) extend(ctx context.Context, hs []*handle) ([]reply, error) {
	ctx, cancel := context.WithTimeout(ctx, l.cfg.callTimeout())
	defer cancel()
	for attempt := 0; ; attempt++ {
		now := int64(l.now())
		pipe := l.client.Pipeline()
		cmds := make([]*redis.Cmd, len(hs))
		for i, h := range hs {
			retakeBefore := int64(0)
			if now < h.validUntil.Load() {
				retakeBefore = h.expires.Load() - l.cfg.margin().Milliseconds()
			}
			cmds[i] = extendScript.EvalSha(ctx, pipe, []string{h.key}, h.token, l.cfg.TTL.Milliseconds(), retakeBefore)
		}
		_, err := pipe.Exec(ctx)
		if redis.HasErrorPrefix(err, "NOSCRIPT") && attempt == 0 {
			if err := extendScript.Load(ctx, l.client).Err(); err != nil {
				return nil, err
			}
			continue
		}
		if err != nil {
			return nil, err
		}
		out := make([]reply, len(hs))
		for i, c := range cmds {
			if out[i], err = parseReply(c.Val()); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
}

// settle applies one renewal outcome to h: err means Redis was unreachable.
func (l *Lease) settle(h *handle, sent time.Duration, r reply, err error) {
	res := r.res
	l.mu.Lock()
	_, held := l.held[h]
	switch {
	case err != nil:
		if held && !h.degraded {
			h.degraded = true
			l.degraded++
			l.report(l.metrics.Degraded, l.degraded)
		}
		if !l.unreachable {
			l.unreachable = true
			l.log.Warn("Redis unreachable: serving the held rooms on, taking no new ones", "err", err, "held", len(l.held))
		}
		l.mu.Unlock()
		l.count(l.metrics.RenewFailed, "unreachable")
		return
	case res == notOurs || res == gone:
		if held {
			l.dropLocked(h)
			close(h.lost)
		}
		l.mu.Unlock()
		kind, why := "not_ours", "room lease taken by another holder"
		if res == gone {
			kind, why = "expired", "room lease key vanished after the lease ran out; lost"
		}
		l.count(l.metrics.RenewFailed, kind)
		if held {
			if l.metrics.Lost != nil {
				l.metrics.Lost()
			}
			l.log.Warn(why, "room_id", h.roomID)
		}
		return
	}
	if h.degraded {
		h.degraded = false
		l.degraded--
		l.report(l.metrics.Degraded, l.degraded)
	}
	if l.unreachable {
		l.unreachable = false
		l.log.Info("Redis reachable again", "held", len(l.held))
	}
	l.mu.Unlock()
	if !held {
		// Released while the renewal was under way: a retaken key would
		// outlive the release, so delete it again.
		ctx, cancel := context.WithTimeout(context.Background(), l.cfg.callTimeout())
		defer cancel()
		_ = releaseScript.Run(ctx, l.client, []string{h.key}, h.token).Err()
		return
	}
	if res == retaken {
		l.log.Info("room lease key had vanished; taken again", "room_id", h.roomID)
	}
	raise(&h.expires, r.at+l.cfg.TTL.Milliseconds())
	raise(&h.validUntil, int64(sent+l.cfg.validity()))
}

// raise sets v to x unless it holds more already.
func raise(v *atomic.Int64, x int64) {
	for {
		cur := v.Load()
		if x <= cur || v.CompareAndSwap(cur, x) {
			return
		}
	}
}

func (l *Lease) add(h *handle) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.held[h] = struct{}{}
	l.report(l.metrics.Held, len(l.held))
}

// drop forgets h; it reports whether h was held.
func (l *Lease) drop(h *handle) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.held[h]; !ok {
		return false
	}
	l.dropLocked(h)
	return true
}

func (l *Lease) dropLocked(h *handle) {
	delete(l.held, h)
	h.dropped.Store(true)
	if h.degraded {
		h.degraded = false
		l.degraded--
		l.report(l.metrics.Degraded, l.degraded)
	}
	l.report(l.metrics.Held, len(l.held))
}

func (l *Lease) holds(h *handle) (held, degraded bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, held = l.held[h]
	return held, h.degraded
}

func (l *Lease) report(f func(int), n int) {
	if f != nil {
		f(n)
	}
}

func (l *Lease) count(f func(string), label string) {
	if f != nil {
		f(label)
	}
}

// handle is one held room lease. degraded is guarded by Lease.mu.
type handle struct {
	l          *Lease
	roomID     string
	key, token string
	lost       chan struct{} // closed once, by settle, under Lease.mu
	validUntil atomic.Int64  // on Lease.now's clock
	// expires is when the key expires (unix ms on Redis's clock) after the
	// latest SET or extension this handle heard of.
	expires  atomic.Int64
	dropped  atomic.Bool // released or lost: never fresh again
	degraded bool
}

func (h *handle) Lost() <-chan struct{} { return h.lost }

// Release deletes the key if it still holds this handle's token. A handle
// released or lost already returns nil.
func (h *handle) Release(ctx context.Context) error {
	if !h.l.drop(h) {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, h.l.cfg.callTimeout())
	defer cancel()
	if err := releaseScript.Run(ctx, h.l.client, []string{h.key}, h.token).Err(); err != nil {
		return fmt.Errorf("release lease room=%s: %w", h.roomID, err)
	}
	return nil
}

// Check implements lease.Handle. While Redis is unreachable (the handle is
// degraded) it answers nil without a call: the renewal loop keeps asking,
// and the owner epoch fences a commit made meanwhile.
func (h *handle) Check(ctx context.Context) error {
	held, degraded := h.l.holds(h)
	if !held {
		return room.Errorf(lease.ErrLost, "room %s", h.roomID)
	}
	if h.l.now() < time.Duration(h.validUntil.Load()) || degraded {
		return nil
	}
	sent := h.l.now()
	res, err := h.l.extend(ctx, []*handle{h})
	if ctx.Err() != nil {
		return nil // the caller gave up; its commit is fenced if it goes on
	}
	var r reply
	if err == nil {
		r = res[0]
	}
	h.l.settle(h, sent, r, err)
	if held, _ := h.l.holds(h); !held {
		return room.Errorf(lease.ErrLost, "room %s", h.roomID)
	}
	return nil
}

// Fresh implements lease.Handle: the handle is neither released nor lost,
// and its validity, counted from its last renewal's request, has not ended.
// A lost handle's validity may not have ended: another node took its key
// (a Redis failover lost it), and the room is known to be that node's.
func (h *handle) Fresh() bool {
	return !h.dropped.Load() && h.l.now() < time.Duration(h.validUntil.Load())
}

// newToken names the holder and is unique per acquisition:
// "<node_id>|<addr>|<random>".
func newToken(n Node) string { return n.ID + "|" + n.Addr + "|" + rand.Text() }

// parseToken reads the holder out of a token.
func parseToken(token string) (Owner, bool) {
	id, rest, ok := strings.Cut(token, "|")
	if !ok {
		return Owner{}, false
	}
	i := strings.LastIndexByte(rest, '|')
	if i < 0 {
		return Owner{}, false
	}
	return Owner{NodeID: id, Addr: rest[:i]}, true
}
