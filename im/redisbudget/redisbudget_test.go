package redisbudget_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"hyapp/room-service/im"
	"hyapp/room-service/im/redisbudget"
	"hyapp/room-service/internal/servicetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var _ im.Budget = (*redisbudget.Budget)(nil)

// testDB is the Redis database these tests own; it is flushed at start.
const testDB = 12

// client is the test Redis's database testDB, flushed.
func client(t *testing.T) *redis.Client { return servicetest.Redis(t, testDB) }

func TestNewRefusesBadInput(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	for _, tc := range []struct {
		name                string
		key                 string
		interval, tolerance time.Duration
	}{
		{"empty key", " ", time.Millisecond, 0},
		{"no interval", "k", 0, 0},
		{"negative tolerance", "k", time.Millisecond, -1},
	} {
		if _, err := redisbudget.New(c, tc.key, tc.interval, tc.tolerance); err == nil {
			t.Errorf("%s: accepted", tc.name)
		}
	}
}

// TestSharedBudgetHoldsInEverySecond: four budgets on one key (four nodes),
// each asking as fast as it can, together get no more calls in any
// one-second window than the app budget, and nearly all of it.
func TestSharedBudgetHoldsInEverySecond(t *testing.T) {
	c := client(t)
	const app = 200
	interval, tolerance := im.Pacing(app)
	key := redisbudget.Key(1400000000, "send_group_msg")
	var (
		mu     sync.Mutex
		grants []time.Time
		wg     sync.WaitGroup
	)
	start := time.Now()
	const run = 3 * time.Second
	for range 4 {
		b, err := redisbudget.New(c, key, interval, tolerance)
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Since(start) < run {
				n, err := b.Take(context.Background(), 3)
				if err != nil {
					t.Error(err)
					return
				}
				now := time.Now()
				mu.Lock()
				for range n {
					grants = append(grants, now)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	slices.SortFunc(grants, func(a, b time.Time) int { return a.Compare(b) })
	most := 0
	for i := range grants {
		j, _ := slices.BinarySearchFunc(grants, grants[i].Add(time.Second), func(a, b time.Time) int { return a.Compare(b) })
		most = max(most, j-i)
	}
	if most > app {
		t.Fatalf("%d calls granted within one second, app budget %d", most, app)
	}
	// It grants, not only refuses: over three seconds, at least one
	// second's share (a loose bound, so a busy machine does not fail it).
	if len(grants) < int(app*im.BudgetShare) {
		t.Fatalf("%d calls granted in %v, app budget %d/s", len(grants), run, app)
	}
	t.Logf("%d calls in %v, at most %d in one second", len(grants), run, most)
}

func TestUnreachableRedisIsAnError(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	defer c.Close()
	b, err := redisbudget.New(c, "k", time.Millisecond, 0)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := b.Take(context.Background(), 1); err == nil || n != 0 {
		t.Fatalf("Take on an unreachable Redis: %d, %v", n, err)
	}
}
