// Package redisbudget shares the IM app budget (an im.Budget) among the nodes
// of a fleet through Redis: one key per budget holds the theoretical
// arrival time of the next call of the generic cell rate algorithm, and a
// Lua script grants calls against it atomically on Redis's clock. Every
// node's lane asks it before sending, so all nodes together make at most
// the app budget's calls in any second, whichever node has the busy rooms:
// a node with nothing to send asks for nothing and leaves its part to the
// others.
package redisbudget

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// takeScript grants up to ARGV[3] calls with interval ARGV[1] and tolerance
// ARGV[2] (microseconds) on the key's theoretical arrival time, and returns
// how many. Time comes from Redis, so the nodes' clocks do not matter.
var takeScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local interval = tonumber(ARGV[1])
local tolerance = tonumber(ARGV[2])
local n = tonumber(ARGV[3])
local tat = tonumber(redis.call('GET', KEYS[1]) or '0')
if tat < now then tat = now end
local k = math.floor((now + tolerance - tat) / interval) + 1
if k > n then k = n end
if k <= 0 then return 0 end
tat = tat + k * interval
redis.call('SET', KEYS[1], string.format('%d', tat), 'PX', math.floor((tat - now) / 1000) + 1000)
return k`)

// Budget is an im.Budget shared through one Redis key. Safe for concurrent
// use.
type Budget struct {
	client              *redis.Client
	key                 string
	interval, tolerance int64 // microseconds
}

// Key is the Redis key of an app's budget for one REST command. It names
// the Tencent app, not a fleet: Tencent counts calls per app, so fleets
// sharing one Redis and one app (staging beside production) share its
// budget, and apps sharing one Redis are kept apart by their SDKAppID.
func Key(sdkAppID uint64, command string) string {
	return "room-service:tim:" + strconv.FormatUint(sdkAppID, 10) + ":budget:" + command
}

// New returns the budget kept at key that grants calls interval apart,
// each at most tolerance ahead of that spacing (im.Pacing gives both for an
// app budget). Errors: an empty key, an interval under a microsecond or a
// negative tolerance.
func New(client *redis.Client, key string, interval, tolerance time.Duration) (*Budget, error) {
	switch {
	case strings.TrimSpace(key) == "":
		return nil, errors.New("redis budget: empty key")
	case interval < time.Microsecond || tolerance < 0:
		return nil, fmt.Errorf("redis budget: interval %v must be at least 1µs and tolerance %v not negative", interval, tolerance)
	}
	return &Budget{client: client, key: key, interval: interval.Microseconds(), tolerance: tolerance.Microseconds()}, nil
}

// Take implements im.Budget: one round trip to Redis.
func (b *Budget) Take(ctx context.Context, n int) (int, error) {
	if n <= 0 {
		return 0, nil
	}
	got, err := takeScript.Run(ctx, b.client, []string{b.key}, b.interval, b.tolerance, n).Int()
	if err != nil {
		return 0, fmt.Errorf("take im budget key=%s: %w", b.key, err)
	}
	return got, nil
}
