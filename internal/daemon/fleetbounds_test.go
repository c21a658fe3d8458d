package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"hyapp/room-service/internal/poll"
	"hyapp/room-service/internal/servicetest"
	"hyapp/room-service/lease/redislease"
)

// What a node's work for the fleet costs must not grow with the calls:
// the membership is read from Redis (a scan of its key space, every room's
// lease included) at most about once a second, and a node that is down is
// logged about once a second, not once per callback passed on to it.

const fanoutRedis = "redis://127.0.0.1:6379/11"

// fanoutFleet is a Main of node "self" whose membership is read through a
// client that counts the SCAN commands it sends, in a Redis database that
// holds leases leases besides the members, and the log lines it writes.
type fanoutFleet struct {
	m     *Main
	lease *redislease.Lease
	keys  redislease.Keys
	rc    *redis.Client
	scans atomic.Int64
	log   *countingHandler
}

func newFanoutFleet(t *testing.T, leases int) *fanoutFleet {
	t.Helper()
	servicetest.Need(t, "Redis", "127.0.0.1:6379")
	f := &fanoutFleet{keys: redislease.Keys{Prefix: fmt.Sprintf("fanout-%d:", time.Now().UnixNano())}, log: &countingHandler{}}
	f.rc = redisOf(t, fanoutRedis)
	ctx := t.Context()
	pipe := f.rc.Pipeline()
	var names []string
	for i := range leases {
		k := f.keys.Prefix + fmt.Sprintf("room:{r%d}:lease", i)
		names = append(names, k)
		pipe.Set(ctx, k, "x", time.Minute)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for i := 0; i < len(names); i += 1000 {
			_ = f.rc.Del(context.Background(), names[i:min(i+1000, len(names))]...).Err()
		}
	})
	counted := redisOf(t, fanoutRedis)
	counted.AddHook(scanCounter{&f.scans})
	cfg := redislease.Config{Self: redislease.Node{ID: "self", Addr: "127.0.0.1:1"}, TTL: time.Second, Keys: f.keys}
	log := slog.New(f.log)
	leaseOf, err := redislease.New(counted, cfg, log, redislease.Metrics{})
	if err != nil {
		t.Fatal(err)
	}
	members, err := redislease.NewMembership(counted, cfg, leaseOf, log)
	if err != nil {
		t.Fatal(err)
	}
	f.lease = leaseOf
	f.m = &Main{Log: log, members: members, nodeID: "self"}
	return f
}

// TestPassesToANodeThatIsDownAreLoggedOnceASecond: 200 callbacks that
// cannot reach a member (nothing listens at its address) write a line or
// two to the log, saying how many were held back, not 200.
func TestPassesToANodeThatIsDownAreLoggedOnceASecond(t *testing.T) {
	f := newFanoutFleet(t, 0)
	fakeMember(t, f.rc, f.keys, "down", freeAddr(t))
	fan := f.m.newTIMFanout(f.m.Log)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = fan.run(ctx) }()
	start := time.Now()
	for i := range 200 {
		fan.pass(fmt.Sprintf("RequestTime=%d", i), []byte(`{"CallbackCommand":"State.StateChange"}`))
	}
	poll.Until(t, 20*time.Second, "the callbacks were taken", poll.Bool(func() bool { return len(fan.queue) == 0 }))
	cancel()
	<-done // run waits for the passes in flight
	lines := f.log.count("pass a callback on")
	if most := 1 + int64(time.Since(start)/time.Second); lines > most {
		t.Fatalf("200 callbacks that could not reach a node logged %d lines; want at most one a second (%d)", lines, most)
	}
	if lines == 0 {
		t.Fatal("a node that cannot be reached is not logged at all")
	}
}

// TestADrainingNodeReadsTheMembershipOnceASecond: while a node drains,
// each call it gets for a room nobody holds goes to another node chosen
// from the membership. 200 such calls in a Redis of 20,000 room leases scan
// its key space once, not 200 times.
func TestADrainingNodeReadsTheMembershipOnceASecond(t *testing.T) {
	f := newFanoutFleet(t, 20_000)
	fakeMember(t, f.rc, f.keys, "next", "127.0.0.1:2")
	var draining atomic.Bool
	draining.Store(true)
	owners := fleetOwners{leases: f.lease, members: newRecentMembers(f.m.members.Members), self: "self", draining: &draining}
	start := time.Now()
	for i := range 200 {
		addr, ok, err := owners.Owner(t.Context(), fmt.Sprint("unheld-", i), nil)
		if err != nil || !ok || addr != "127.0.0.1:2" {
			t.Fatalf("room %d goes to %q (%v, %v); want the live node that is not draining", i, addr, ok, err)
		}
	}
	// One read scans 20,000 keys in about 20 SCANs; a read a second at most.
	reads := 1 + int64(time.Since(start)/time.Second)
	if f.scans.Load() > 2*reads*int64(20_000/1000+1) {
		t.Fatalf("200 calls sent %d SCANs to Redis; want the membership read once a second", f.scans.Load())
	}
}

// scanCounter counts the SCAN commands a Redis client sends.
type scanCounter struct{ n *atomic.Int64 }

func (s scanCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (s scanCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "scan" {
			s.n.Add(1)
		}
		return next(ctx, cmd)
	}
}

func (s scanCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// countingHandler counts the log lines by message.
type countingHandler struct {
	mu    sync.Mutex
	lines map[string]int64
}

func (h *countingHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h *countingHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.lines == nil {
		h.lines = map[string]int64{}
	}
	h.lines[r.Message]++
	return nil
}

func (h *countingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *countingHandler) WithGroup(string) slog.Handler      { return h }

func (h *countingHandler) count(msg string) int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.lines[msg]
}
