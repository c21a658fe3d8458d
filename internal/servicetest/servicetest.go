// Package servicetest finds the real services the integration tests use:
// without one a test skips, unless CI is set, where its absence fails the
// run.
package servicetest

import (
	"context"
	"net"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Need skips the test when what does not answer on addr, or fails it in CI.
func Need(t testing.TB, what, addr string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s on %s is required in CI: %v", what, addr, err)
		}
		t.Skipf("no %s on %s: %v", what, addr, err)
	}
	_ = c.Close()
}

// RedisAddr is the Redis the tests use: ROOM_TEST_REDIS_ADDR, by default
// 127.0.0.1:6379 as .ci/run starts it (see Need).
func RedisAddr(t testing.TB) string {
	t.Helper()
	addr := os.Getenv("ROOM_TEST_REDIS_ADDR")
	if addr == "" {
		addr = "127.0.0.1:6379"
	}
	Need(t, "Redis", addr)
	return addr
}

// Redis connects to database db of the test Redis (see RedisAddr),
// flushed: the calling tests own that database. It is closed when the test
// ends.
func Redis(t testing.TB, db int) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: RedisAddr(t), DB: db, DialTimeout: time.Second, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	if err := c.FlushDB(context.Background()).Err(); err != nil {
		t.Fatalf("flush Redis database %d: %v", db, err)
	}
	return c
}
