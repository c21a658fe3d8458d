// Package redistest finds the Redis server the tests use.
package redistest

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Addr is the Redis the tests use: ROOM_TEST_REDIS_ADDR, by default
// 127.0.0.1:6379 as .ci/run starts it. Without it the test skips, unless CI
// is set: then it fails.
func Addr(t testing.TB) string {
	t.Helper()
	addr := os.Getenv("ROOM_TEST_REDIS_ADDR")
	if addr == "" {
		addr = "127.0.0.1:6379"
	}
	c := redis.NewClient(&redis.Options{Addr: addr, DialTimeout: time.Second, MaxRetries: -1})
	defer c.Close()
	if err := c.Ping(context.Background()).Err(); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("Redis on %s is required in CI: %v", addr, err)
		}
		t.Skipf("no Redis on %s: %v", addr, err)
	}
	return addr
}

// Client connects to database db of the test Redis (see Addr), flushed:
// the calling tests own that database. It is closed when the test ends.
func Client(t testing.TB, db int) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: Addr(t), DB: db, DialTimeout: time.Second, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	if err := c.FlushDB(context.Background()).Err(); err != nil {
		t.Fatalf("flush Redis database %d: %v", db, err)
	}
	return c
}
