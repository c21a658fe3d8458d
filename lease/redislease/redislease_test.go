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
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"hyapp/room-service/internal/poll"
	"hyapp/room-service/internal/servicetest"
	"hyapp/room-service/lease"
	"hyapp/room-service/lease/leasetest"
	"hyapp/room-service/store/mysql/mysqltest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// server is the test Redis's address (see servicetest.RedisAddr).
func server(t *testing.T) string { return servicetest.RedisAddr(t) }

// testKeys is a key prefix of the test's own; its keys are deleted when the
// test ends.
func testKeys(t *testing.T, addr string) Keys {
	k := Keys{Prefix: "roomtest:" + rand.Text()[:12] + ":"}
	t.Cleanup(func() {
		c := redis.NewClient(&redis.Options{Addr: addr})
		defer c.Close()
		ctx := context.Background()
		iter := c.Scan(ctx, 0, globEscape(k.Prefix)+"*", 1000).Iterator()
		for iter.Next(ctx) {
			c.Del(ctx, iter.Val())
		}
	})
	return k
}

func client(t *testing.T, addr string, ttl time.Duration) *redis.Client {
	t.Helper()
	opt, err := ClientOptions("redis://"+addr+"/0", ttl)
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(opt)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// counts records what a lease reports through Metrics.
type counts struct {
	mu                    sync.Mutex
	held, degraded, lost  int
	acquired, renewFailed map[string]int
}

func (c *counts) metrics() Metrics {
	c.acquired, c.renewFailed = map[string]int{}, map[string]int{}
	set := func(p *int) func(int) {
		return func(n int) { c.mu.Lock(); *p = n; c.mu.Unlock() }
	}
	inc := func(m map[string]int) func(string) {
		return func(k string) { c.mu.Lock(); m[k]++; c.mu.Unlock() }
	}
	return Metrics{Held: set(&c.held), Degraded: set(&c.degraded), Acquired: inc(c.acquired), RenewFailed: inc(c.renewFailed),
		Lost: func() { c.mu.Lock(); c.lost++; c.mu.Unlock() }}
}

func (c *counts) get(p *int) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return *p
}

// node is one node's lease on its own client, renewing until the test ends.
type node struct {
	*Lease
	client *redis.Client
	counts *counts
}

func newNode(t *testing.T, addr string, keys Keys, id string, ttl time.Duration, run bool) node {
	t.Helper()
	c := client(t, addr, ttl)
	n := node{client: c, counts: &counts{}}
	var err error
	n.Lease, err = New(c, Config{Self: Node{ID: id, Addr: id + ".test:9000"}, TTL: ttl, Keys: keys}, slog.New(slog.DiscardHandler), n.counts.metrics())
	if err != nil {
		t.Fatal(err)
	}
	if run {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); _ = n.Run(ctx) }()
		t.Cleanup(func() { cancel(); <-done })
	}
	return n
}

func mustAcquire(t *testing.T, l lease.Lease, roomID string) *handle {
	t.Helper()
	h, err := l.Acquire(context.Background(), roomID)
	if err != nil {
		t.Fatalf("acquire room=%s: %v", roomID, err)
	}
	return h.(*handle)
}

// vanish deletes the room's lease key behind its holder's back, as a Redis
// restart or an expiry does.
func vanish(t *testing.T, n node, keys Keys, roomID string) {
	t.Helper()
	if err := n.client.Del(context.Background(), keys.Lease(roomID)).Err(); err != nil {
		t.Fatal(err)
	}
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// holder is the node id the room's key names, or "" when it is missing.
func holder(t *testing.T, n node, roomID string) string {
	t.Helper()
	o, found, err := n.Owner(context.Background(), roomID)
	if err != nil {
		t.Fatal(err)
	}
	if !found {
		return ""
	}
	return o.NodeID
}

func TestContract(t *testing.T) {
	addr := server(t)
	leasetest.Run(t, func(t *testing.T) (lease.Lease, lease.Lease, string) {
		keys := testKeys(t, addr)
		return newNode(t, addr, keys, "a", time.Second, true), newNode(t, addr, keys, "b", time.Second, true), "r1"
	})
}

func TestRenewalKeepsTheLeasePastSeveralTTLs(t *testing.T) {
	addr := server(t)
	const ttl = time.Second // each call may take a third of it
	a := newNode(t, addr, testKeys(t, addr), "a", ttl, true)
	h := mustAcquire(t, a, "r1")
	start := time.Now()
	poll.Until(t, 30*time.Second, "3 TTLs with the lease held", func() error {
		if isClosed(h.Lost()) || holder(t, a, "r1") != "a" {
			t.Fatalf("lease gone after %v", time.Since(start))
		}
		if time.Since(start) < 3*ttl {
			return fmt.Errorf("held for %v", time.Since(start))
		}
		return nil
	})
	if err := h.Check(context.Background()); err != nil {
		t.Fatalf("check: %v", err)
	}
	if got := a.counts.get(&a.counts.held); got != 1 {
		t.Errorf("held gauge %d, want 1", got)
	}
}

// TestVanishedKeyIsTakenAgain: a key that vanished (as a Redis restart
// loses it) is taken again by the next renewal, run here by the test.
func TestVanishedKeyIsTakenAgain(t *testing.T) {
	addr := server(t)
	keys := testKeys(t, addr)
	a := newNode(t, addr, keys, "a", time.Second, false)
	h := mustAcquire(t, a, "r1")
	vanish(t, a, keys, "r1")
	a.renewAll(context.Background())
	if got := holder(t, a, "r1"); got != "a" {
		t.Fatalf("after a renewal the key's holder is %q, want a", got)
	}
	if isClosed(h.Lost()) {
		t.Fatal("lease lost")
	}
}

// TestAKeyThatVanishedAfterTheLeaseRanOutIsLost: a handle whose validity
// ended (its node paused, or cut off from Redis) finds its key gone: another
// node may have taken, used and released the room meanwhile. Its renewal, or
// its check before a batch, loses the lease and leaves the key free.
func TestAKeyThatVanishedAfterTheLeaseRanOutIsLost(t *testing.T) {
	addr := server(t)
	keys := testKeys(t, addr)
	a := newNode(t, addr, keys, "a", time.Second, false)
	for i, renew := range []func(h *handle) error{
		func(*handle) error { a.renewAll(context.Background()); return nil },
		func(h *handle) error { return h.Check(context.Background()) },
	} {
		roomID := fmt.Sprintf("r%d", i)
		h := mustAcquire(t, a, roomID)
		h.validUntil.Store(int64(a.now())) // ran out now
		vanish(t, a, keys, roomID)
		if err := renew(h); err != nil && !errors.Is(err, lease.ErrLost) {
			t.Fatalf("%s: %v", roomID, err)
		}
		if !isClosed(h.Lost()) {
			t.Fatalf("%s: the lease is not lost", roomID)
		}
		if err := h.Check(context.Background()); !errors.Is(err, lease.ErrLost) {
			t.Fatalf("%s: check after: %v, want ErrLost", roomID, err)
		}
		if n, err := a.client.Exists(context.Background(), keys.Lease(roomID)).Result(); err != nil || n != 0 {
			t.Fatalf("%s: the key is held (%d, %v), want it free", roomID, n, err)
		}
	}
	poll.Until(t, 10*time.Second, "the lost leases counted", func() error {
		a.counts.mu.Lock()
		expired := a.counts.renewFailed["expired"]
		a.counts.mu.Unlock()
		if lost, failed := a.counts.get(&a.counts.lost), expired; lost != 2 || failed != 2 {
			return fmt.Errorf("metrics: lost %d, renewals failed as expired %d; want 2 and 2", lost, failed)
		}
		return nil
	})
}

// loseReply lets Redis run a pipeline and, while armed, reports it failed,
// as a reply lost to a timeout or a dropped connection would.
type loseReply struct{ armed atomic.Bool }

func (l *loseReply) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (l *loseReply) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (l *loseReply) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		if l.armed.Load() {
			return errors.New("i/o timeout (reply lost)")
		}
		return err
	}
}

// TestAVanishedKeyIsNotTakenAgainWhenTheReplyIsLost: the renewal of a
// handle that ran out finds its key gone and loses its reply. Redis must
// not have taken the key again meanwhile: the next renewal loses the lease.
func TestAVanishedKeyIsNotTakenAgainWhenTheReplyIsLost(t *testing.T) {
	addr := server(t)
	keys := testKeys(t, addr)
	a := newNode(t, addr, keys, "a", time.Second, false)
	h := mustAcquire(t, a, "r")
	h.validUntil.Store(int64(a.now())) // ran out now
	vanish(t, a, keys, "r")
	hook := &loseReply{}
	a.client.AddHook(hook)
	hook.armed.Store(true)
	a.renewAll(context.Background())
	hook.armed.Store(false)
	if got := holder(t, a, "r"); got != "" {
		t.Fatalf("after the renewal whose reply was lost the key is %q's, want it gone", got)
	}
	a.renewAll(context.Background())
	if !isClosed(h.Lost()) || h.Fresh() {
		t.Fatal("the lease lives on after its key vanished")
	}
}

func TestVanishedKeyTakenByAnotherNodeIsLost(t *testing.T) {
	addr := server(t)
	keys := testKeys(t, addr)
	a := newNode(t, addr, keys, "a", time.Second, false) // renewed below, once b holds the key
	b := newNode(t, addr, keys, "b", time.Second, true)
	ha := mustAcquire(t, a, "r1")
	vanish(t, a, keys, "r1")
	hb := mustAcquire(t, b, "r1")
	a.renewAll(context.Background())
	if !isClosed(ha.Lost()) {
		t.Fatal("a's lease not lost by the renewal after b took the key")
	}
	if isClosed(hb.Lost()) || holder(t, a, "r1") != "b" {
		t.Fatal("b lost the lease")
	}
	if err := ha.Check(context.Background()); !errors.Is(err, lease.ErrLost) {
		t.Errorf("lost handle's check: got %v, want ErrLost", err)
	}
	// The metrics are reported once the lease's lock is released.
	poll.Until(t, 10*time.Second, "the lost lease counted", func() error {
		if lost, held := a.counts.get(&a.counts.lost), a.counts.get(&a.counts.held); lost != 1 || held != 0 {
			return fmt.Errorf("metrics: lost %d held %d, want 1 and 0", lost, held)
		}
		return nil
	})
}

// TestOverwrittenKeyIsLostWithinARenewal: a key another node took over is
// lost by the next renewal (run here by the test), and the lost handle's
// release leaves the new holder's key alone.
func TestOverwrittenKeyIsLostWithinARenewal(t *testing.T) {
	addr := server(t)
	keys := testKeys(t, addr)
	a := newNode(t, addr, keys, "a", time.Second, false)
	h := mustAcquire(t, a, "r1")
	if err := a.client.Set(context.Background(), keys.Lease("r1"), "b|b.test:9000|x", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	a.renewAll(context.Background())
	if !isClosed(h.Lost()) {
		t.Fatal("the lease not lost by the renewal after the key was taken")
	}
	if err := h.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := holder(t, a, "r1"); got != "b" {
		t.Fatalf("a lost handle's release deleted the new holder's key: holder %q", got)
	}
}

// cutOff is a node "a" reaching Redis through a proxy the test can cut, with
// a lease TTL of 300 ms, and the proxy and keys it uses.
func cutOff(t *testing.T, renew bool) (node, *mysqltest.Proxy, Keys) {
	t.Helper()
	addr := server(t)
	keys := testKeys(t, addr)
	proxy := mysqltest.NewProxy(t, addr)
	return newNode(t, proxy.Addr(), keys, "a", cutOffTTL, renew), proxy, keys
}

const cutOffTTL = 300 * time.Millisecond

func TestUnreachableRedisKeepsTheLeaseDegraded(t *testing.T) {
	a, proxy, keys := cutOff(t, true)
	direct := newNode(t, server(t), keys, "direct", time.Second, false)
	h1 := mustAcquire(t, a, "r1")
	h2 := mustAcquire(t, a, "r2")

	proxy.Cut()
	poll.Until(t, 10*time.Second, "both handles degraded", func() error {
		if n := a.counts.get(&a.counts.degraded); n != 2 {
			return fmt.Errorf("%d degraded", n)
		}
		return nil
	})
	if err := h1.Check(context.Background()); err != nil {
		t.Errorf("check while Redis is down: %v", err)
	}
	if _, err := a.Acquire(context.Background(), "r3"); !errors.Is(err, lease.ErrUnavailable) {
		t.Errorf("acquire while Redis is down: got %v, want ErrUnavailable", err)
	}
	// Meanwhile r2's key expires and another node takes it, for longer
	// than the outage lasts; r1's expires and nobody takes it.
	if err := direct.client.Set(context.Background(), keys.Lease("r2"), "direct|direct.test:9000|x", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	vanish(t, direct, keys, "r1")
	poll.Until(t, 10*time.Second, "r1's validity over", poll.Bool(func() bool { return a.now() > time.Duration(h1.validUntil.Load()) }))
	if isClosed(h1.Lost()) || isClosed(h2.Lost()) {
		t.Fatal("a lease was lost while Redis was unreachable")
	}

	// Once Redis answers, both are lost: r2 is another node's, and r1's
	// key vanished after its validity ended, when another node may have
	// held it; its key is left free.
	proxy.Restore()
	poll.Until(t, 10*time.Second, "r1 and r2 lost", func() error {
		if n := a.counts.get(&a.counts.degraded); n != 0 {
			return fmt.Errorf("%d degraded", n)
		}
		if !isClosed(h1.Lost()) || !isClosed(h2.Lost()) {
			return errors.New("r1 or r2 not lost")
		}
		return nil
	})
	if got := holder(t, direct, "r1"); got != "" {
		t.Fatalf("r1's key is held by %q, want it free", got)
	}
	if _, err := a.Acquire(context.Background(), "r3"); err != nil {
		t.Errorf("acquire after Redis came back: %v", err)
	}
}

// callCount counts the calls a client sends to Redis (a pipeline is one).
type callCount struct{ n atomic.Int64 }

func (c *callCount) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *callCount) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { c.n.Add(1); return next(ctx, cmd) }
}

func (c *callCount) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { c.n.Add(1); return next(ctx, cmds) }
}

// setProbeEvery sets how often a call still goes to a Redis that counts as down.
func (l *Lease) setProbeEvery(d time.Duration) {
	l.mu.Lock()
	l.probeEvery = d
	l.mu.Unlock()
}

// TestADownRedisIsNotAskedForEveryCall: once Redis has answered nothing
// for a renewal period, Acquire and Owner answer ErrUnavailable without a
// call, and the first probe Redis answers ends it.
func TestADownRedisIsNotAskedForEveryCall(t *testing.T) {
	ctx := context.Background()
	a, proxy, _ := cutOff(t, false)
	var calls callCount
	a.client.AddHook(&calls)
	a.setProbeEvery(time.Hour) // no probe until the test asks for one

	if _, found, err := a.Owner(ctx, "r1"); err != nil || found {
		t.Fatalf("owner before the outage: found %v, err %v", found, err)
	}
	proxy.Cut()
	poll.Until(t, 10*time.Second, "owner lookups answered without a call", func() error {
		before := calls.n.Load()
		_, _, err := a.Owner(ctx, "r1")
		switch {
		case err == nil:
			return errors.New("owner lookup succeeded with Redis cut")
		case calls.n.Load() != before:
			return fmt.Errorf("still asking Redis: %v", err)
		}
		return nil
	})
	before := calls.n.Load()
	for i := range 20 {
		room := fmt.Sprintf("r%d", i)
		if _, err := a.Acquire(ctx, room); !errors.Is(err, lease.ErrUnavailable) || !strings.Contains(err.Error(), "every call to Redis has failed") {
			t.Fatalf("acquire %s with Redis down: %v, want ErrUnavailable without a call", room, err)
		}
		if _, _, err := a.Owner(ctx, room); !errors.Is(err, lease.ErrUnavailable) {
			t.Fatalf("owner %s with Redis down: %v, want ErrUnavailable", room, err)
		}
	}
	if n := calls.n.Load() - before; n != 0 {
		t.Fatalf("%d calls went to a Redis known to be down", n)
	}
	a.counts.mu.Lock()
	unavailable := a.counts.acquired["unavailable"]
	a.counts.mu.Unlock()
	if n := unavailable; n < 20 {
		t.Fatalf("acquired{unavailable} = %d, want at least 20", n)
	}

	proxy.Restore()
	a.setProbeEvery(time.Millisecond)
	poll.Until(t, 10*time.Second, "a lease taken once Redis answers", func() error {
		h, err := a.Acquire(ctx, "r1")
		if err != nil {
			return err
		}
		return h.Release(ctx)
	})
	if _, found, err := a.Owner(ctx, "r2"); err != nil || found {
		t.Fatalf("owner after the outage: found %v, err %v", found, err)
	}
}

// TestHeartbeatsTellTheLeaseRedisIsDown: a node that holds no room and
// asks nothing learns from its failed heartbeats that Redis is down, so its
// first owner lookup is answered without a call.
func TestHeartbeatsTellTheLeaseRedisIsDown(t *testing.T) {
	a, proxy, keys := cutOff(t, false)
	a.setProbeEvery(time.Hour)
	m, err := NewMembership(a.client, Config{Self: Node{ID: "a", Addr: "a.test:9000"}, TTL: cutOffTTL, Keys: keys}, a.Lease, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = m.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	proxy.Cut()
	poll.Until(t, 10*time.Second, "the lease counting Redis as down", poll.Bool(func() bool { return !a.asks() }))
	if _, _, err := a.Owner(context.Background(), "r1"); !errors.Is(err, lease.ErrUnavailable) || !strings.Contains(err.Error(), "every call to Redis has failed") {
		t.Fatalf("first owner lookup after the heartbeats failed: %v, want ErrUnavailable without a call", err)
	}
}

func TestCheckPastTheDeadlineAsksRedis(t *testing.T) {
	addr := server(t)
	// Each call may take a third of the TTL: the key lives that long past
	// the validity deadline, and the check must come within it (a loaded
	// machine once took longer than a third of a one-second TTL).
	const ttl = 3 * time.Second
	keys := testKeys(t, addr)
	a := newNode(t, addr, keys, "a", ttl, false) // no renewal loop: as a paused process
	h := mustAcquire(t, a, "r1")
	pastDeadline := func() {
		poll.Until(t, 10*time.Second, "the validity deadline", poll.Bool(func() bool { return a.now() > time.Duration(h.validUntil.Load()) }))
	}
	pastDeadline()
	if err := h.Check(context.Background()); err != nil {
		t.Fatalf("check past the deadline, key still ours: %v", err)
	}
	if a.now() > time.Duration(h.validUntil.Load()) {
		t.Fatal("check did not renew")
	}
	pastDeadline()
	if err := a.client.Set(context.Background(), keys.Lease("r1"), "b|b.test:9000|x", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if err := h.Check(context.Background()); !errors.Is(err, lease.ErrLost) {
		t.Fatalf("check past the deadline, key taken: got %v, want ErrLost", err)
	}
	if !isClosed(h.Lost()) {
		t.Fatal("Lost not closed")
	}
}

func TestOwnerAndHeld(t *testing.T) {
	addr := server(t)
	keys := testKeys(t, addr)
	a := newNode(t, addr, keys, "a", time.Second, false)
	b := newNode(t, addr, keys, "b", time.Second, false)
	h := mustAcquire(t, a, "r1")
	o, found, err := b.Owner(context.Background(), "r1")
	if err != nil || !found || o != (Owner{NodeID: "a", Addr: "a.test:9000"}) {
		t.Fatalf("owner: %+v %v %v", o, found, err)
	}
	_, err = b.Acquire(context.Background(), "r1")
	if !errors.Is(err, lease.ErrHeld) || !strings.Contains(err.Error(), "node a") {
		t.Fatalf("acquire of a held room: %v", err)
	}
	if _, found, err := b.Owner(context.Background(), "free"); found || err != nil {
		t.Fatalf("owner of a free room: found %v err %v", found, err)
	}
	all, err := Leases(context.Background(), b.client, keys)
	if err != nil || len(all) != 1 || all["r1"].NodeID != "a" {
		t.Fatalf("leases: %+v %v", all, err)
	}
	if err := h.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, found, _ := b.Owner(context.Background(), "r1"); found || a.Held() != 0 {
		t.Fatalf("after release: found %v held %d", found, a.Held())
	}
}

// heldRooms is a lease holding n rooms, for the membership.
type heldRooms int

func (h heldRooms) Held() int    { return int(h) }
func (heldRooms) answered(error) {}

func TestMembership(t *testing.T) {
	addr := server(t)
	const ttl = time.Second
	keys := testKeys(t, addr)
	proxy := mysqltest.NewProxy(t, addr)
	join := func(c *redis.Client, id string, rooms int) (*Membership, func()) {
		m, err := NewMembership(c, Config{Self: Node{ID: id, Addr: id + ".test:9000"}, TTL: ttl, Keys: keys},
			heldRooms(rooms), slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); _ = m.Run(ctx) }()
		stop := func() { cancel(); <-done }
		t.Cleanup(stop)
		return m, stop
	}
	ma, stopA := join(client(t, addr, ttl), "a", 3)
	mb, _ := join(client(t, proxy.Addr(), ttl), "b", 1)
	ctx := context.Background()
	poll.Until(t, 10*time.Second, "both nodes listed", func() error {
		got, err := ma.Members(ctx)
		if err != nil {
			return err
		}
		if len(got) != 2 || got[0].NodeID != "a" || got[0].Addr != "a.test:9000" || got[0].Rooms != 3 || got[1].NodeID != "b" {
			return fmt.Errorf("members %+v", got)
		}
		return nil
	})
	poll.Until(t, 10*time.Second, "both nodes count the fleet", func() error {
		if a, b := ma.Nodes(), mb.Nodes(); a != 2 || b != 2 {
			return fmt.Errorf("a counts %d nodes, b %d", a, b)
		}
		return nil
	})
	if err := ma.SetDraining(ctx, true); err != nil {
		t.Fatal(err)
	}
	got, err := mb.Members(ctx)
	if err != nil || !got[0].Draining || got[1].Draining {
		t.Fatalf("draining flag: %+v %v", got, err)
	}

	proxy.Cut() // b stops heartbeating, as a crashed node
	poll.Until(t, 10*ttl, "b gone after its TTL", func() error {
		alive, err := ma.Alive(ctx, "b")
		if err != nil || alive {
			return fmt.Errorf("alive %v err %v", alive, err)
		}
		return nil
	})
	poll.Until(t, 10*ttl, "a counts b out after its TTL", func() error {
		if n := ma.Nodes(); n != 1 {
			return fmt.Errorf("a counts %d nodes", n)
		}
		return nil
	})
	if n := mb.Nodes(); n != 2 { // cut off, b keeps its last count
		t.Fatalf("b, cut off, counts %d nodes", n)
	}
	stopA() // a leaves cleanly: its record goes at once
	if alive, err := ma.Alive(ctx, "a"); alive || err != nil {
		t.Fatalf("a still alive after stopping: %v %v", alive, err)
	}
	if n, err := client(t, addr, ttl).Exists(ctx, keys.Fleet()).Result(); err != nil || n != 0 {
		t.Fatalf("the fleet's count outlives its last node: %d %v", n, err)
	}
	if got, err := Members(ctx, client(t, addr, ttl), keys); err != nil || len(got) != 0 {
		t.Fatalf("members after both left: %+v %v", got, err)
	}
}

// TestALostOrReleasedHandleIsNotFresh: a handle whose key another node
// took (as after a Redis failover that lost it), or that was released, is
// known not to be its holder's: Fresh is false at once, not once the
// validity of its last renewal ends.
func TestALostOrReleasedHandleIsNotFresh(t *testing.T) {
	addr := server(t)
	keys := testKeys(t, addr)
	a := newNode(t, addr, keys, "a", 10*time.Second, false)
	lost := mustAcquire(t, a, "lost")
	if err := a.client.Set(context.Background(), keys.Lease("lost"), "b|b.test:9000|x", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	a.renewAll(context.Background())
	if !isClosed(lost.Lost()) {
		t.Fatal("the lease not lost by the renewal after the key was taken")
	}
	if lost.Fresh() {
		t.Error("a lost handle is fresh")
	}
	released := mustAcquire(t, a, "released")
	if err := released.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	if released.Fresh() {
		t.Error("a released handle is fresh")
	}
}

// holdUp runs its hook's function, while set, before a pipeline goes to
// Redis: a renewal held up in the network.
type holdUp struct{ before atomic.Pointer[func()] }

func (h *holdUp) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h *holdUp) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *holdUp) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if f := h.before.Swap(nil); f != nil {
			(*f)()
		}
		return next(ctx, cmds)
	}
}

// TestARenewalThatReachesRedisAfterTheKeyExpiredDoesNotTakeItAgain: a
// handle is renewed just before its validity ends (its renewals failed
// for most of a TTL), and the renewal reaches Redis late: the key expired
// meanwhile, and another node took the room and gave it back. The renewal
// must not take the key again: the handle is lost, as a renewal sent after
// the validity ended is.
func TestARenewalThatReachesRedisAfterTheKeyExpiredDoesNotTakeItAgain(t *testing.T) {
	addr := server(t)
	keys := testKeys(t, addr)
	a := newNode(t, addr, keys, "a", time.Second, false) // no renewal loop: its renewals fail
	b := newNode(t, addr, keys, "b", time.Second, false)
	h := mustAcquire(t, a, "r")
	hook := &holdUp{}
	a.client.AddHook(hook)
	meanwhile := func() {
		poll.Until(t, 10*time.Second, "the key expired", func() error {
			n, err := b.client.Exists(context.Background(), keys.Lease("r")).Result()
			if err == nil && n != 0 {
				err = errors.New("the key is there")
			}
			return err
		})
		hb := mustAcquire(t, b, "r")
		if err := hb.Release(context.Background()); err != nil {
			t.Error(err)
		}
	}
	hook.before.Store(&meanwhile)
	poll.Until(t, 10*time.Second, "a's validity about to end", poll.Bool(func() bool {
		return a.now() > time.Duration(h.validUntil.Load())-30*time.Millisecond
	}))
	a.renewAll(context.Background())
	if got := holder(t, a, "r"); got != "" {
		t.Errorf("the key is %q's after the late renewal, want it free", got)
	}
	if !isClosed(h.Lost()) || h.Fresh() {
		t.Error("the lease lives on after another node held the room")
	}
}
