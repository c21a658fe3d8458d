package daemon

import (
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	roomv1 "hyapp/room-service/gen/room/v1"
	"hyapp/room-service/gen/room/v1/roomv1connect"
	"hyapp/room-service/internal/poll"
	"hyapp/room-service/internal/servicetest"
	"hyapp/room-service/lease/redislease"
	"hyapp/room-service/store/mysql/mysqltest"
)

// TestFleetNodesShareRoomsThroughTheRedisLease runs two nodes in fleet
// mode on one MySQL, NATS and Redis, with their keys under a prefix of
// their own: a call for a room the first serves,
// sent to the second, is forwarded and served by the first (the second never
// loads the room); both are members; and once the first shuts down it has
// released its lease and left, so the second serves the room itself.
func TestFleetNodesShareRoomsThroughTheRedisLease(t *testing.T) {
	servicetest.Need(t, "Redis", "127.0.0.1:6379")
	servicetest.Need(t, "NATS", "127.0.0.1:4222")
	dsn := mysqltest.DSN(t)
	id := rand.Text()[:8]
	redisURL := "redis://127.0.0.1:6379/7"
	keys := redislease.Keys{Prefix: "fleet-" + id + ":"}
	stream := ownStream(t, strings.ToLower(id))
	fleet := func(node string) []string {
		addr := freeAddr(t)
		return append([]string{"-listen", addr, "-mysql-dsn", dsn, "-nats-url", "nats://127.0.0.1:4222",
			"-redis-url", redisURL, "-redis-key-prefix", keys.Prefix, "-node-id", node + "-" + id, "-advertise-addr", addr, "-lease-ttl", "1s"}, stream...)
	}
	a, clientA := runMain(t, t.TempDir(), fleet("a")...)
	b, clientB := runMain(t, t.TempDir(), fleet("b")...)
	ctx := context.Background()
	roomID := "fleet-" + id
	if _, err := clientA.CreateRoom(ctx, connect.NewRequest(&roomv1.CreateRoomRequest{RoomId: roomID, CommandId: "c1", OperatorUserId: 1, OwnerUserId: 1, SeatCount: 8})); err != nil {
		t.Fatal(err)
	}
	join := func(cmd string, user int64) (int64, error) {
		res, err := clientB.JoinRoom(ctx, connect.NewRequest(&roomv1.JoinRoomRequest{RoomId: roomID, CommandId: cmd, OperatorUserId: user}))
		if err != nil {
			return 0, err
		}
		return res.Msg.GetRoomVersion(), nil
	}
	if v, err := join("c2", 5); err != nil || v != 2 {
		t.Fatalf("join through the other node: version %d, %v; want 2, served by the owner", v, err)
	}
	if a.registry.Loaded() != 1 || b.registry.Loaded() != 0 {
		t.Fatalf("rooms loaded: a %d, b %d; want the room on a only", a.registry.Loaded(), b.registry.Loaded())
	}

	opt, _ := redis.ParseURL(redisURL)
	rc := redis.NewClient(opt)
	defer rc.Close()
	poll.Until(t, 5*time.Second, "both nodes members", func() error {
		ms, err := redislease.Members(ctx, rc, keys)
		n := 0
		for _, m := range ms {
			if m.NodeID == "a-"+id || m.NodeID == "b-"+id {
				n++
			}
		}
		if err == nil && n != 2 {
			return fmt.Errorf("members %+v", ms)
		}
		return err
	})
	if n, err := rc.Exists(ctx, redislease.Keys{}.Node("a-"+id), redislease.Keys{}.Lease(roomID)).Result(); err != nil || n != 0 {
		t.Fatalf("%d keys outside the prefix (%v)", n, err)
	}

	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := rc.Exists(ctx, keys.Node("a-"+id), keys.Lease(roomID)).Result(); err != nil || n != 0 {
		t.Fatalf("after a's shutdown its membership or lease is left: %d %v", n, err)
	}
	if v, err := join("c2", 5); err != nil || v != 2 {
		t.Fatalf("retry through the other node after a left: version %d, %v; want 2", v, err)
	}
	if v, err := join("c3", 6); err != nil || v != 3 || b.registry.Loaded() != 1 {
		t.Fatalf("join after a left: version %d, %v, b holds %d rooms; want 3 on b", v, err, b.registry.Loaded())
	}
}

// The fleet tests run several service processes on one MariaDB database,
// the local Redis and the local NATS: the services .ci/run starts. Each
// fleet test uses a Redis database of its own (7: two in-process nodes,
// 8: the process fleets, 9: the drain test, 4: the callback fan-out;
// roomctl's uses 10): fleets
// that share one see each other's members, and a leaving node could hand
// a room to a node of another fleet, which does not know the room.
const (
	fleetRedis = "redis://127.0.0.1:6379/8"
	fleetNATS  = "nats://127.0.0.1:4222"
	fleetTTL   = 2 * time.Second
)

// freeAddr returns a loopback address with a port free now.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}

// fleetFlags returns the flags of fleet node <node>-<id>: MariaDB, the
// shared NATS with the test's stream flags, Redis at redisURL under keys'
// prefix, a lease TTL of a second, its own listener (advertised), and
// extra.
func fleetFlags(t *testing.T, redisURL string, keys redislease.Keys, stream []string, id string, extra ...string) func(node string) []string {
	dsn := mysqltest.DSN(t)
	return func(node string) []string {
		addr := freeAddr(t)
		return slices.Concat([]string{"-listen", addr, "-mysql-dsn", dsn, "-nats-url", fleetNATS,
			"-redis-url", redisURL, "-redis-key-prefix", keys.Prefix, "-node-id", node + "-" + id, "-advertise-addr", addr, "-lease-ttl", "1s"},
			stream, extra)
	}
}

// redisOf is a client of redisURL, closed when the test ends.
func redisOf(t *testing.T, redisURL string) *redis.Client {
	t.Helper()
	opt, err := redis.ParseURL(redisURL)
	if err != nil {
		t.Fatal(err)
	}
	rc := redis.NewClient(opt)
	t.Cleanup(func() { _ = rc.Close() })
	return rc
}

// fakeMember writes a membership record of node at addr, not draining and
// holding no room, as a live node's heartbeat does; it lasts 30 s.
func fakeMember(t *testing.T, rc *redis.Client, keys redislease.Keys, node, addr string) {
	t.Helper()
	ctx := t.Context()
	key := keys.Node(node)
	if err := rc.HSet(ctx, key, "addr", addr, "rooms", 0, "draining", "false", "heartbeat_ms", time.Now().UnixMilli()).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rc.PExpire(ctx, key, 30*time.Second).Err(); err != nil {
		t.Fatal(err)
	}
}

// ownStream names a JetStream stream and subject prefix of the test's own
// on the shared NATS server, and deletes the stream when the test ends.
// It returns the flags that make a node use them.
func ownStream(t *testing.T, id string) []string {
	t.Helper()
	stream, prefix := "rs_fleet_"+id, "rs.fleet."+id
	nc, err := nats.Connect(fleetNATS)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = js.DeleteStream(context.Background(), stream) }) // after the nodes stopped
	return []string{"-nats-stream", stream, "-nats-subject-prefix", prefix}
}

// fleet is a set of service processes sharing one database, Redis and NATS.
type fleet struct {
	t      *testing.T
	dsn    string
	run    string   // a random prefix for node and room ids
	stream []string // the flags naming the fleet's own stream and subjects
	redis  string   // the nodes' Redis URL
	env    []string // more environment for every node
	nodes  []*node
	// resent counts calls the gateway sent again to another node after a
	// retryable answer (a node down, a room moving).
	resent atomic.Int64
	// lb, when set, is the load balancer calls go through: one attempt,
	// never sent again.
	lb *balancer
	// patience is how long the gateway of startLoad's load keeps sending a
	// call again before it fails for good (0: 30 s).
	patience time.Duration
}

// balancer is the load balancer in front of a deployment: it probes each
// node's /readyz every 250 ms (real ones probe every few seconds, which
// drain_grace covers; a probe that times out changes nothing, as on a
// machine too busy to answer within a second) and sends each call to a random node that was ready
// at its last probe. It never sends a call twice: what it sees is what a
// client behind it sees.
type balancer struct {
	mu    sync.Mutex
	ready map[*node]bool
}

// balance puts a balancer in front of f for the rest of the test.
func (f *fleet) balance() {
	lb := &balancer{ready: make(map[*node]bool)}
	probe := &http.Client{Timeout: time.Second, Transport: &http.Transport{}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			for _, nd := range f.nodes {
				ok := false
				res, err := probe.Get("http://" + nd.addr + "/readyz")
				if err == nil {
					ok = res.StatusCode == http.StatusOK
					_ = res.Body.Close()
				}
				var timeout interface{ Timeout() bool }
				if errors.As(err, &timeout) && timeout.Timeout() {
					continue // a slow answer is no answer: the node keeps its state
				}
				lb.mu.Lock()
				lb.ready[nd] = ok
				lb.mu.Unlock()
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	poll.Until(f.t, 10*time.Second, "the balancer sees every node ready", func() error {
		if n := len(lb.pick(f.nodes, true)); n != len(f.nodes) {
			return fmt.Errorf("%d of %d nodes ready", n, len(f.nodes))
		}
		return nil
	})
	f.t.Cleanup(func() { cancel(); <-done; probe.CloseIdleConnections() })
	f.lb = lb
}

// pick returns the nodes that were ready at their last probe, all of them
// or (all false) one at random.
func (lb *balancer) pick(nodes []*node, all bool) []*node {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	var ready []*node
	for _, nd := range nodes {
		if lb.ready[nd] {
			ready = append(ready, nd)
		}
	}
	if all || len(ready) == 0 {
		return ready
	}
	i := mrand.IntN(len(ready))
	return ready[i : i+1]
}

// node is one service process of a fleet.
type node struct {
	id, addr string
	dir      string
	cmd      *exec.Cmd
	client   roomv1connect.RoomServiceClient
	ops      roomv1connect.OperatorServiceClient
	stdout   *servicetest.Buffer // the child's standard output (spans, with OTEL_TRACES_EXPORTER=console)
}

func newFleet(t *testing.T, n int) *fleet { return newFleetOn(t, n, fleetRedis) }

// newFleetOn starts n nodes whose Redis is redisURL.
func newFleetOn(t *testing.T, n int, redisURL string, env ...string) *fleet {
	t.Helper()
	if testing.Short() {
		t.Skip("starts service processes")
	}
	servicetest.Need(t, "Redis", "127.0.0.1:6379")
	servicetest.Need(t, "NATS", "127.0.0.1:4222")
	f := &fleet{t: t, dsn: mysqltest.DSN(t), run: strings.ToLower(rand.Text()[:8]), redis: redisURL, env: env}
	f.stream = ownStream(t, f.run)
	for i := range n {
		nd := &node{id: fmt.Sprintf("%s-n%d", f.run, i+1), addr: freeAddr(t), dir: t.TempDir(), stdout: new(servicetest.Buffer)}
		// A restarted node listens on the same address: its clients stay
		// (and load goroutines read them while the test restarts nodes).
		nd.client = roomv1connect.NewRoomServiceClient(http.DefaultClient, "http://"+nd.addr)
		nd.ops = roomv1connect.NewOperatorServiceClient(http.DefaultClient, "http://"+nd.addr)
		f.nodes = append(f.nodes, nd)
		f.start(nd)
	}
	return f
}

// start runs nd as a child process and waits until it serves.
func (f *fleet) start(nd *node) {
	f.t.Helper()
	// Fleet mode as an operator turns it on: the environment.
	nd.cmd, _ = spawnTo(f.t, nd.stdout, append([]string{"-listen", nd.addr, "-data-dir", nd.dir, "-snapshot-every", "50"}, f.stream...),
		append([]string{"ROOM_REDIS_URL=" + f.redis, "ROOM_NODE_ID=" + nd.id, "ROOM_ADVERTISE_ADDR=" + nd.addr,
			"ROOM_LEASE_TTL=" + fleetTTL.String(), "ROOM_MYSQL_DSN=" + f.dsn, "ROOM_NATS_URL=" + fleetNATS}, f.env...))
}

// call sends one command as a gateway with several endpoints would: to a
// random node, and again with the same command id to another node when a
// call fails for a reason that says nothing about the command (a node
// down, a room moving), until within passes. It returns the last answer.
func (f *fleet) call(within time.Duration, do func(nd *node) (int64, error)) (int64, error) {
	if f.lb != nil {
		nd := f.lb.pick(f.nodes, false)
		if len(nd) == 0 {
			return 0, errors.New("the balancer has no ready node")
		}
		return do(nd[0])
	}
	deadline := time.Now().Add(within)
	var err error
	for wait := 20 * time.Millisecond; ; wait = min(2*wait, 500*time.Millisecond) {
		nd := f.nodes[mrand.IntN(len(f.nodes))]
		var v int64
		if v, err = do(nd); err == nil || !retryable(err) {
			return v, err
		}
		if time.Now().After(deadline) {
			return 0, err
		}
		f.resent.Add(1)
		time.Sleep(wait) // a client's backoff between attempts, not a wait for a condition
	}
}

// retryable reports whether a gateway may send the same command again: a
// node that is down or going (connect reports a connection reset as
// canceled), a room moving, a full mailbox. Every command carries its
// command_id, so sending it again never applies it twice.
func retryable(err error) bool {
	switch connect.CodeOf(err) {
	case connect.CodeUnavailable, connect.CodeDeadlineExceeded, connect.CodeUnknown, connect.CodeResourceExhausted,
		connect.CodeAborted, connect.CodeCanceled:
		return true
	}
	return false
}

// fleetJoin is one JoinRoom through nd, with the short deadline a gateway
// gives a call before it tries another node (a frozen node answers nothing).
func fleetJoin(nd *node, roomID, commandID string, user int64) (int64, error) {
	return fleetJoinWithin(nd, 2*time.Second, roomID, commandID, user)
}

// fleetJoinWithin is fleetJoin with the deadline d.
func fleetJoinWithin(nd *node, d time.Duration, roomID, commandID string, user int64) (int64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	res, err := nd.client.JoinRoom(ctx, connect.NewRequest(&roomv1.JoinRoomRequest{RoomId: roomID, CommandId: commandID, OperatorUserId: user}))
	if err != nil {
		return 0, err
	}
	return res.Msg.GetRoomVersion(), nil
}

// fleetAck is a command the fleet acknowledged.
type fleetAck struct {
	room, command string
	user, version int64
}

// load sends joins to rooms through random nodes from workers goroutines
// until stop is closed, counting acknowledgements in count, and returns
// what was acknowledged and the calls that failed for good.
func (f *fleet) load(rooms []string, workers int, stop <-chan struct{}, count *atomic.Int64) (acks []fleetAck, failed []error) {
	var mu sync.Mutex
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				roomID, id, user := rooms[(w+i)%len(rooms)], fmt.Sprintf("w%d-%d", w, i), int64(1000+w*100000+i)
				v, err := f.call(cmp.Or(f.patience, 30*time.Second), func(nd *node) (int64, error) {
					if f.lb != nil {
						// A balancer sends each call once, and waits for
						// it as long as a load balancer's upstream timeout.
						return fleetJoinWithin(nd, 15*time.Second, roomID, id, user)
					}
					return fleetJoin(nd, roomID, id, user)
				})
				mu.Lock()
				if err != nil {
					failed = append(failed, fmt.Errorf("join %s %s: %w", roomID, id, err))
				} else {
					acks = append(acks, fleetAck{room: roomID, command: id, user: user, version: v})
					count.Add(1)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return acks, failed
}

// checkLog reads each room's log through a node and checks that versions
// are gap-free, that every acknowledged command is there exactly once at
// the version it was acknowledged with, and that a retry through any node
// answers that version.
func (f *fleet) checkLog(rooms []string, acks []fleetAck) {
	t := f.t
	t.Helper()
	logs := map[string]map[string]int64{}
	for _, roomID := range rooms {
		byID := map[string]int64{}
		for after := int64(0); ; {
			res, err := f.nodes[0].ops.ListCommands(context.Background(), connect.NewRequest(&roomv1.ListCommandsRequest{RoomId: roomID, AfterVersion: after, Limit: 1000}))
			if err != nil {
				t.Fatalf("list commands of %s: %v", roomID, err)
			}
			if len(res.Msg.GetCommands()) == 0 {
				break
			}
			for _, c := range res.Msg.GetCommands() {
				if c.GetRoomVersion() != after+1 {
					t.Fatalf("room %s: version %d follows %d", roomID, c.GetRoomVersion(), after)
				}
				if _, dup := byID[c.GetCommandId()]; dup {
					t.Fatalf("room %s: command %s twice in the log", roomID, c.GetCommandId())
				}
				byID[c.GetCommandId()] = c.GetRoomVersion()
				after = c.GetRoomVersion()
			}
		}
		logs[roomID] = byID
	}
	for i, a := range acks {
		if got, ok := logs[a.room][a.command]; !ok || got != a.version {
			t.Fatalf("acknowledged %s in %s at version %d; the log has it at %d (found %v)", a.command, a.room, a.version, got, ok)
		}
		if i%25 == 0 { // a sample of retries, through every node
			nd := f.nodes[i%len(f.nodes)]
			if v, err := fleetJoin(nd, a.room, a.command, a.user); err != nil || v != a.version {
				t.Fatalf("retry of %s in %s through %s: version %d, %v; want %d", a.command, a.room, nd.id, v, err, a.version)
			}
		}
	}
}

// TestFleetSurvivesKillsAndAFreeze runs three nodes under a load of joins
// through random nodes while one node is killed with SIGKILL and started
// again, and another is frozen with SIGSTOP past its lease and thawed.
// The load goes on while the node is frozen: the server ended its open
// commit, so its rooms' rows are not locked. Every acknowledged command is
// in its room's log exactly once at the version it was acknowledged with,
// versions have no gaps, and a retry through any node answers the original
// version. The rooms taken from the two nodes count as failovers.
func TestFleetSurvivesKillsAndAFreeze(t *testing.T) {
	f := newFleet(t, 3)
	rooms := f.createRooms(6)
	progress, finish := f.startLoad(rooms)
	progress("load before the kill", 300)

	// Kill one node under load and start it again.
	victim := f.nodes[1]
	taken := f.held(victim)
	if err := victim.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = victim.cmd.Wait()
	progress("load while a node is dead", 200)
	f.start(victim)
	progress("load after the restart", 200)

	// Freeze another past its lease (its rooms move), then thaw it.
	frozen := f.nodes[2]
	taken += f.held(frozen)
	if err := frozen.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	frozenFor := time.NewTimer(2 * fleetTTL) // the freeze must outlast the lease: a duration, not a condition
	<-frozenFor.C
	progress("load while a node is frozen", 200)
	if err := frozen.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	progress("load after the thaw", 300)
	r := finish()
	if len(r.failed) > 0 {
		t.Fatalf("%d calls failed for good, first: %v", len(r.failed), r.failed[0])
	}
	t.Logf("%d calls acknowledged; the gateway sent %d again to another node", len(r.acks), f.resent.Load())
	f.checkLog(rooms, r.acks)
	var failovers float64
	for _, nd := range f.nodes {
		failovers += scrape(t, nd, `room_claims_total{kind="failover"}`) + scrape(t, nd, `room_claims_total{kind="restart"}`)
	}
	if failovers < float64(taken) {
		t.Fatalf("%v rooms claimed from owners that did not release them; the killed and the frozen node held %d", failovers, taken)
	}
}

// held returns how many rooms nd holds, from the fleet's membership.
func (f *fleet) held(nd *node) int {
	f.t.Helper()
	res, err := nd.ops.ListNodes(context.Background(), connect.NewRequest(&roomv1.ListNodesRequest{}))
	if err != nil {
		f.t.Fatal(err)
	}
	for _, n := range res.Msg.GetNodes() {
		if n.GetNodeId() == nd.id {
			return int(n.GetRooms())
		}
	}
	return 0
}

// createRooms creates n rooms through random nodes.
func (f *fleet) createRooms(n int) []string {
	t := f.t
	t.Helper()
	rooms := make([]string, n)
	for i := range rooms {
		rooms[i] = fmt.Sprintf("%s-r%d", f.run, i)
		if _, err := f.call(30*time.Second, func(nd *node) (int64, error) {
			res, err := nd.client.CreateRoom(context.Background(), connect.NewRequest(&roomv1.CreateRoomRequest{
				RoomId: rooms[i], CommandId: "create", OperatorUserId: 1, OwnerUserId: 1, SeatCount: 10,
			}))
			if err != nil {
				return 0, err
			}
			return res.Msg.GetRoomVersion(), nil
		}); err != nil {
			t.Fatalf("create %s: %v", rooms[i], err)
		}
	}
	return rooms
}

// loadResult is what a load acknowledged and what failed for good.
type loadResult struct {
	acks   []fleetAck
	failed []error
}

// startLoad runs 12 clients sending joins to rooms through random nodes. It
// returns progress, which waits until more commands than now are
// acknowledged, and finish, which stops the clients and returns the load's
// result.
func (f *fleet) startLoad(rooms []string) (progress func(what string, more int64), finish func() loadResult) {
	var count atomic.Int64
	stop := make(chan struct{})
	done := make(chan loadResult, 1)
	go func() {
		acks, failed := f.load(rooms, 12, stop, &count)
		done <- loadResult{acks, failed}
	}()
	return f.progress(&count), func() loadResult { close(stop); return <-done }
}

// progress returns a wait for more acknowledgements than counted now.
func (f *fleet) progress(count *atomic.Int64) func(what string, more int64) {
	return func(what string, more int64) {
		f.t.Helper()
		want := count.Load() + more
		poll.Until(f.t, 60*time.Second, what, func() error {
			if n := count.Load(); n < want {
				return fmt.Errorf("%d of %d commands acknowledged", n, want)
			}
			return nil
		})
	}
}

// TestFleetRollingRestart restarts three nodes one after the other with
// SIGTERM under a load of joins sent through a load balancer that probes
// /readyz: each node turns unready, hands its rooms off (final snapshot,
// lease released) while still forwarding the calls that reach it, and
// stops only after drain_grace. No call fails, none is sent twice, and
// every acknowledged command is in its room's log exactly once at its
// version.
func TestFleetRollingRestart(t *testing.T) {
	f := newFleet(t, 3)
	rooms := f.createRooms(6)
	f.balance()
	progress, finish := f.startLoad(rooms)
	progress("load before the restarts", 300)
	for _, nd := range f.nodes {
		if err := nd.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if err := nd.cmd.Wait(); err != nil {
			t.Fatalf("node %s did not exit cleanly on SIGTERM: %v", nd.id, err)
		}
		progress("load while a node restarts", 100)
		f.start(nd)
		progress("load after a restart", 200)
	}
	r := finish()
	if len(r.failed) > 0 {
		t.Fatalf("%d of %d calls failed during the rolling restart, first: %v", len(r.failed), len(r.failed)+len(r.acks), r.failed[0])
	}
	t.Logf("%d calls acknowledged, none failed", len(r.acks))
	f.checkLog(rooms, r.acks)
}

// TestFleetSurvivesARedisOutage cuts the three nodes off Redis for 30
// seconds under load, and Redis comes back empty (a restart that lost every
// key). The nodes keep serving the rooms they hold (a call that reaches
// another node is sent again by the gateway until it reaches the holder),
// take no new room, and are normal again once Redis answers (members
// again, leases taken again):
// no call fails for good and every acknowledged command is logged exactly
// once at its version.
func TestFleetSurvivesARedisOutage(t *testing.T) {
	servicetest.Need(t, "Redis", "127.0.0.1:6379")
	proxy := mysqltest.NewProxy(t, "127.0.0.1:6379")
	f := newFleetOn(t, 3, "redis://"+proxy.Addr()+"/11")
	// A call sent as Redis is cut is answered once it comes back: the
	// gateway keeps at it for longer than the outage and the recovery
	// after it. With 30 s, the outage's length, one such call failed for
	// good in a CI run.
	f.patience = time.Minute
	rooms := f.createRooms(6)
	progress, finish := f.startLoad(rooms)
	progress("load before the outage", 300)
	proxy.Cut()
	outage := time.NewTimer(30 * time.Second) // the outage: a duration, not a condition
	// The held rooms are served on: a call that reaches another node is
	// refused at once (Redis counts as down there) and the gateway sends it
	// on until it reaches the holder.
	progress("load while Redis is cut", 100)
	<-outage.C
	// Redis comes back as a restart without persistence would: empty.
	rc := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", DB: 11})
	defer rc.Close()
	if err := rc.FlushDB(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	proxy.Restore()
	progress("load after Redis returned", 300)
	poll.Until(t, 10*time.Second, "every node a member again", func() error {
		ms, err := redislease.Members(context.Background(), rc, redislease.Keys{})
		if err == nil && len(ms) != len(f.nodes) {
			return fmt.Errorf("members %+v", ms)
		}
		return err
	})
	r := finish()
	if len(r.failed) > 0 {
		t.Fatalf("%d calls failed for good, first: %v", len(r.failed), r.failed[0])
	}
	t.Logf("%d calls acknowledged; the gateway sent %d again to another node", len(r.acks), f.resent.Load())
	f.checkLog(rooms, r.acks)
}

// TestACallForwardedToAFrozenOwnerIsServedOnceItsRoomMoves: a call with no
// deadline, forwarded to an owner that stopped answering (its port accepts
// connections, nothing answers: frozen, or cut off by a partition that
// drops packets), does not wait for that owner for ever: the hop is given up
// and the call goes again to the owner found then, here the node itself
// once the frozen owner's lease ran out.
func TestACallForwardedToAFrozenOwnerIsServedOnceItsRoomMoves(t *testing.T) {
	servicetest.Need(t, "Redis", "127.0.0.1:6379")
	servicetest.Need(t, "NATS", "127.0.0.1:4222")
	id := rand.Text()[:8]
	redisURL := "redis://127.0.0.1:6379/7"
	keys := redislease.Keys{Prefix: "frozen-" + id + ":"}
	a, clientA := runMain(t, t.TempDir(), fleetFlags(t, redisURL, keys, ownStream(t, "fz"+strings.ToLower(id)), id)("a")...)
	frozen := silentListener(t)

	ctx := context.Background()
	roomID := "frozen-" + id
	if _, err := clientA.CreateRoom(ctx, connect.NewRequest(&roomv1.CreateRoomRequest{RoomId: roomID, CommandId: "c", OperatorUserId: 1, OwnerUserId: 1, SeatCount: 8})); err != nil {
		t.Fatal(err)
	}
	rc := redisOf(t, redisURL)
	// The room's lease now names the frozen node, for one TTL: a loses the
	// room at its next renewal.
	if err := rc.Set(ctx, keys.Lease(roomID), "frozen-"+id+"|"+frozen+"|x", time.Second).Err(); err != nil {
		t.Fatal(err)
	}
	type answer struct {
		version int64
		err     error
	}
	done := make(chan answer, 1)
	go func() {
		res, err := clientA.JoinRoom(ctx, connect.NewRequest(&roomv1.JoinRoomRequest{RoomId: roomID, CommandId: "j", OperatorUserId: 5}))
		if err != nil {
			done <- answer{err: err}
			return
		}
		done <- answer{version: res.Msg.GetRoomVersion()}
	}()
	var got answer
	poll.Until(t, 30*time.Second, "the call forwarded to the frozen owner to be answered", poll.Bool(func() bool {
		select {
		case got = <-done:
			return true
		default:
			return false
		}
	}))
	if got.err != nil || got.version != 2 || a.registry.Loaded() != 1 {
		t.Fatalf("join: version %d, %v, a holds %d rooms; want 2, served by a", got.version, got.err, a.registry.Loaded())
	}
}
