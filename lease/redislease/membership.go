package redislease

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Member is one live node of the fleet, as its last heartbeat told.
type Member struct {
	NodeID    string
	Addr      string
	Rooms     int // leases held at the heartbeat
	Draining  bool
	Heartbeat time.Time // the node's wall clock at the heartbeat
}

// Membership registers this node in Redis: a hash at Keys.Node(id) with
// addr, rooms, draining and heartbeat_ms, expiring 3×TTL after the last
// heartbeat, so a dead node vanishes by itself. Each heartbeat also counts
// the fleet (Nodes) on Keys.Fleet. Run keeps it fresh; the other methods
// read the fleet. Safe for concurrent use.
type Membership struct {
	client   *redis.Client
	cfg      Config
	lease    Holder
	log      *slog.Logger
	draining atomic.Bool
	nodes    atomic.Int64 // the fleet's size at the last heartbeat that counted it
	// writing orders the heartbeats: one that read the draining flag
	// before SetDraining changed it is written before SetDraining's.
	writing sync.Mutex

	mu     sync.Mutex
	failed bool // the last heartbeat failed: logged once per outage
}

// Holder is what the membership needs of the node's lease (a *Lease): the
// number of rooms it holds, for the heartbeat, and each heartbeat's
// outcome, so that a node holding no room learns from its heartbeats that
// Redis is down (see Lease.asks).
type Holder interface {
	Held() int
	answered(err error)
}

// NewMembership returns the membership of cfg.Self, whose lease is lease.
func NewMembership(client *redis.Client, cfg Config, lease Holder, log *slog.Logger) (*Membership, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	if lease == nil {
		return nil, errors.New("membership: no lease")
	}
	return &Membership{client: client, cfg: cfg, lease: lease, log: log}, nil
}

// Run writes a heartbeat at once and every TTL/3 until ctx ends, then
// removes the node's record, so a node that stops cleanly leaves the fleet
// at once. It returns nil.
func (m *Membership) Run(ctx context.Context) error {
	m.beat(ctx)
	t := time.NewTicker(m.cfg.TTL / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), m.cfg.callTimeout())
			defer cancel()
			_, err := m.client.Pipelined(dctx, func(p redis.Pipeliner) error {
				p.Del(dctx, m.cfg.Keys.Node(m.cfg.Self.ID))
				p.ZRem(dctx, m.cfg.Keys.Fleet(), m.cfg.Self.ID)
				return nil
			})
			if err != nil {
				m.log.Warn("leave the fleet", "node_id", m.cfg.Self.ID, "err", err)
			}
			return nil
		case <-t.C:
			m.beat(ctx)
		}
	}
}

// SetDraining marks the node as draining (it takes no new rooms) or not, and
// writes a heartbeat at once so the fleet sees it.
func (m *Membership) SetDraining(ctx context.Context, draining bool) error {
	m.draining.Store(draining)
	return m.write(ctx)
}

// countScript scores node ARGV[1] with Redis's clock (milliseconds) in the
// sorted set KEYS[1], drops the nodes not scored within ARGV[2]
// milliseconds, and returns how many are left. Redis's clock, not the
// nodes', so their skew does not matter.
var countScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local live = tonumber(ARGV[2])
redis.call('ZADD', KEYS[1], now, ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - live)
redis.call('PEXPIRE', KEYS[1], live)
return redis.call('ZCARD', KEYS[1])`)

// Nodes is how many nodes the fleet had at this node's last heartbeat that
// could count them (this one included; a node counts until 3×TTL after its
// last heartbeat, or until it leaves), or 0 before the first.
func (m *Membership) Nodes() int { return int(m.nodes.Load()) }

// count counts the fleet with this node in it (see countScript).
func (m *Membership) count(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, m.cfg.callTimeout())
	defer cancel()
	n, err := countScript.Run(ctx, m.client, []string{m.cfg.Keys.Fleet()}, m.cfg.Self.ID, (3 * m.cfg.TTL).Milliseconds()).Int64()
	if err != nil {
		return fmt.Errorf("count the fleet: %w", err)
	}
	m.nodes.Store(n)
	return nil
}

// beat writes one heartbeat and counts the fleet; a failure is logged once
// per outage.
func (m *Membership) beat(ctx context.Context) {
	err := m.write(ctx)
	if err == nil {
		err = m.count(ctx)
	}
	if ctx.Err() != nil {
		return
	}
	m.lease.answered(err)
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case err != nil && !m.failed:
		m.log.Warn("membership heartbeat failed; retrying", "node_id", m.cfg.Self.ID, "err", err)
	case err == nil && m.failed:
		m.log.Info("membership heartbeat written again", "node_id", m.cfg.Self.ID)
	}
	m.failed = err != nil
}

func (m *Membership) write(ctx context.Context) error {
	m.writing.Lock()
	defer m.writing.Unlock()
	ctx, cancel := context.WithTimeout(ctx, m.cfg.callTimeout())
	defer cancel()
	key := m.cfg.Keys.Node(m.cfg.Self.ID)
	_, err := m.client.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.HSet(ctx, key, "addr", m.cfg.Self.Addr, "rooms", m.lease.Held(),
			"draining", strconv.FormatBool(m.draining.Load()), "heartbeat_ms", time.Now().UnixMilli())
		p.PExpire(ctx, key, 3*m.cfg.TTL)
		return nil
	})
	if err != nil {
		return fmt.Errorf("heartbeat node=%s: %w", m.cfg.Self.ID, err)
	}
	return nil
}

// Alive tells whether the node has a membership record (a heartbeat within
// its last 3×TTL).
func (m *Membership) Alive(ctx context.Context, nodeID string) (bool, error) {
	n, err := m.client.Exists(ctx, m.cfg.Keys.Node(nodeID)).Result()
	if err != nil {
		return false, fmt.Errorf("alive node=%s: %w", nodeID, err)
	}
	return n == 1, nil
}

// Members lists the live nodes, ordered by id.
func (m *Membership) Members(ctx context.Context) ([]Member, error) {
	return Members(ctx, m.client, m.cfg.Keys)
}

// Members lists the live nodes registered under keys, ordered by id. It
// scans the key space: meant for operators and occasional checks, not for
// every call.
func Members(ctx context.Context, client *redis.Client, keys Keys) ([]Member, error) {
	var names []string
	iter := client.Scan(ctx, 0, keys.nodePattern(), 1000).Iterator()
	for iter.Next(ctx) {
		names = append(names, iter.Val())
	}
	if err := iter.Err(); err != nil {
		return nil, fmt.Errorf("list members: %w", err)
	}
	pipe := client.Pipeline()
	cmds := make([]*redis.MapStringStringCmd, len(names))
	for i, k := range names {
		cmds[i] = pipe.HGetAll(ctx, k)
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("read members: %w", err)
	}
	prefix := keys.Node("")
	out := make([]Member, 0, len(names))
	for i, c := range cmds {
		f := c.Val()
		if len(f) == 0 {
			continue // expired between the scan and the read
		}
		rooms, _ := strconv.Atoi(f["rooms"])
		ms, _ := strconv.ParseInt(f["heartbeat_ms"], 10, 64)
		out = append(out, Member{
			NodeID: strings.TrimPrefix(names[i], prefix), Addr: f["addr"], Rooms: rooms,
			Draining: f["draining"] == "true", Heartbeat: time.UnixMilli(ms),
		})
	}
	slices.SortFunc(out, func(a, b Member) int { return strings.Compare(a.NodeID, b.NodeID) })
	return out, nil
}

// Leases lists every held lease under keys: the id it was acquired for (a
// room id, or another lease name such as the relay's) and its holder. It
// scans the key space: for operators, not for every call.
func Leases(ctx context.Context, client *redis.Client, keys Keys) (map[string]Owner, error) {
	var names []string
	iter := client.Scan(ctx, 0, globEscape(keys.Prefix)+"room:{*}:lease", 1000).Iterator()
	for iter.Next(ctx) {
		names = append(names, iter.Val())
	}
	if err := iter.Err(); err != nil {
		return nil, fmt.Errorf("list leases: %w", err)
	}
	out := make(map[string]Owner, len(names))
	for lo := 0; lo < len(names); lo += renewBatch {
		batch := names[lo:min(lo+renewBatch, len(names))]
		pipe := client.Pipeline()
		cmds := make([]*redis.StringCmd, len(batch))
		for i, k := range batch {
			cmds[i] = pipe.Get(ctx, k)
		}
		if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
			return nil, fmt.Errorf("read leases: %w", err)
		}
		for i, c := range cmds {
			o, ok := parseToken(c.Val())
			if !ok {
				continue // released or expired between the scan and the read
			}
			id := strings.TrimSuffix(strings.TrimPrefix(batch[i], keys.Prefix+"room:{"), "}:lease")
			out[id] = o
		}
	}
	return out, nil
}
