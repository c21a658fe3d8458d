package daemon

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	roomv1 "hyapp/room-service/gen/room/v1"
	"hyapp/room-service/gen/room/v1/roomv1connect"
	"hyapp/room-service/internal/poll"
	"hyapp/room-service/internal/servicetest"
	"hyapp/room-service/lease/redislease"
	"hyapp/room-service/rpc"
	"hyapp/room-service/store/mysql/mysqltest"
)

// bearer sends the service token on every call.
func bearer(token string) connect.ClientOption {
	return connect.WithInterceptors(connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			req.Header().Set(rpc.Authorization(token))
			return next(ctx, req)
		}
	}))
}

// histogram returns the sample count and sum of the histogram name in m's registry.
func histogram(t *testing.T, m *Main, name string) (uint64, float64) {
	t.Helper()
	families, err := m.metrics.registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == name && len(f.GetMetric()) == 1 {
			h := f.GetMetric()[0].GetHistogram()
			return h.GetSampleCount(), h.GetSampleSum()
		}
	}
	t.Fatalf("no histogram %s", name)
	return 0, 0
}

// counter returns the value of the counter name (without labels) in m's registry.
func counter(t *testing.T, m *Main, name string) float64 {
	t.Helper()
	families, err := m.metrics.registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == name && len(f.GetMetric()) == 1 {
			return f.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("no counter %s", name)
	return 0
}

// TestFleetDrainHandsOffThroughAnyNode runs two nodes in fleet mode with a
// token: a Drain of the first, sent to the second, is served by the first,
// which hands off its one room (a final snapshot at the head version, the
// lease released) and shows as draining; the next call for the room,
// through the drained node, is served by the second, which claims the room
// and replays no command. A second Drain hands off nothing; an unknown
// node, an empty id and a call without the token are refused.
func TestFleetDrainHandsOffThroughAnyNode(t *testing.T) {
	servicetest.Need(t, "Redis", "127.0.0.1:6379")
	servicetest.Need(t, "NATS", "127.0.0.1:4222")
	dsn := mysqltest.DSN(t)
	id := rand.Text()[:8]
	const token = "drain-token-0123456789abcdef-0123"
	// Its own Redis database and keys: a node another fleet test killed
	// stays a member for 3×TTL, and the drained node could send the room
	// to it; so could a node of this test run by another go test at once.
	const redisURL = "redis://127.0.0.1:6379/9"
	keys := redislease.Keys{Prefix: "drain-" + id + ":"}
	stream := ownStream(t, "d"+strings.ToLower(id))
	start := func(node string) (*Main, roomv1connect.RoomServiceClient, roomv1connect.OperatorServiceClient) {
		addr := freeAddr(t)
		m, _ := runMain(t, t.TempDir(), append([]string{"-listen", addr, "-mysql-dsn", dsn, "-nats-url", fleetNATS,
			"-redis-url", redisURL, "-redis-key-prefix", keys.Prefix, "-node-id", node + "-" + id, "-advertise-addr", addr, "-lease-ttl", "1s", "-tokens", "ops=" + token + ":room+act-as-any+operator"}, stream...)...)
		base := "http://" + m.Addr
		return m, roomv1connect.NewRoomServiceClient(http.DefaultClient, base, bearer(token)),
			roomv1connect.NewOperatorServiceClient(http.DefaultClient, base, bearer(token))
	}
	a, clientA, opsA := start("a")
	b, clientB, opsB := start("b")
	ctx := context.Background()
	nodeA, roomID := "a-"+id, "drain-"+id
	if _, err := clientA.CreateRoom(ctx, connect.NewRequest(&roomv1.CreateRoomRequest{RoomId: roomID, CommandId: "c1", OperatorUserId: 1, OwnerUserId: 1, SeatCount: 8})); err != nil {
		t.Fatal(err)
	}
	if res, err := clientB.JoinRoom(ctx, connect.NewRequest(&roomv1.JoinRoomRequest{RoomId: roomID, CommandId: "c2", OperatorUserId: 5})); err != nil || res.Msg.GetRoomVersion() != 2 {
		t.Fatalf("join through b: %v %v; want version 2 served by a", res, err)
	}
	node := func(ops roomv1connect.OperatorServiceClient, id string) *roomv1.FleetNode {
		res, err := ops.ListNodes(ctx, connect.NewRequest(&roomv1.ListNodesRequest{RoomIds: true}))
		if err != nil || !res.Msg.GetFleet() {
			t.Fatalf("list nodes: %v, fleet %v", err, res.Msg.GetFleet())
		}
		for _, n := range res.Msg.GetNodes() {
			if n.GetNodeId() == id {
				return n
			}
		}
		return nil
	}
	poll.Until(t, 5*time.Second, "a listed with its room", func() error {
		if n := node(opsB, nodeA); n == nil || n.GetRooms() != 1 || n.GetRoomIds()[0] != roomID || n.GetDraining() || n.GetAddr() != a.Addr {
			return fmt.Errorf("a is %v", n)
		}
		return nil
	})

	drain := func(ops roomv1connect.OperatorServiceClient, node string) (int64, error) {
		res, err := ops.Drain(ctx, connect.NewRequest(&roomv1.DrainRequest{NodeId: node}))
		if err != nil {
			return 0, err
		}
		if res.Msg.GetNodeId() != node {
			t.Fatalf("drain of %s answered for %s", node, res.Msg.GetNodeId())
		}
		return res.Msg.GetRoomsHandedOff(), nil
	}
	ready := func(m *Main) int {
		res, err := http.Get("http://" + m.Addr + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		_ = res.Body.Close()
		return res.StatusCode
	}
	if ready(a) != http.StatusOK {
		t.Fatalf("a's /readyz before the drain: %d", ready(a))
	}
	if n, err := drain(opsB, nodeA); err != nil || n != 1 {
		t.Fatalf("drain a through b: %d rooms, %v; want 1", n, err)
	}
	if ready(a) != http.StatusServiceUnavailable || ready(b) != http.StatusOK {
		t.Fatalf("/readyz after a's drain: a %d, b %d; want 503, 200", ready(a), ready(b))
	}
	if got := counter(t, a, "room_handoffs_total"); got != 1 {
		t.Fatalf("a's room_handoffs_total %v, want 1", got)
	}
	opt, _ := redis.ParseURL(redisURL)
	rc := redis.NewClient(opt)
	defer rc.Close()
	if n, err := rc.Exists(ctx, keys.Lease(roomID)).Result(); err != nil || n != 0 {
		t.Fatalf("after the drain the room's lease is held: %d %v", n, err)
	}
	if n := node(opsB, nodeA); n == nil || !n.GetDraining() || n.GetRooms() != 0 {
		t.Fatalf("after the drain a is listed as %v; want draining with no room", n)
	}
	snap, err := opsB.GetStoredSnapshot(ctx, connect.NewRequest(&roomv1.GetStoredSnapshotRequest{RoomId: roomID}))
	if err != nil || snap.Msg.GetSnapshot().GetRoomVersion() != 2 {
		t.Fatalf("stored snapshot after the drain: %v %v; want the head version 2", snap, err)
	}

	// The drained node still routes: b claims the room and replays nothing.
	replays, _ := histogram(t, b, "room_replay_commands")
	if res, err := clientA.JoinRoom(ctx, connect.NewRequest(&roomv1.JoinRoomRequest{RoomId: roomID, CommandId: "c3", OperatorUserId: 6})); err != nil || res.Msg.GetRoomVersion() != 3 {
		t.Fatalf("join through the drained node: %v %v; want version 3", res, err)
	}
	if a.registry.Loaded() != 0 || b.registry.Loaded() != 1 {
		t.Fatalf("rooms loaded: a %d, b %d; want the room on b", a.registry.Loaded(), b.registry.Loaded())
	}
	if count, sum := histogram(t, b, "room_replay_commands"); count != replays+1 || sum != 0 {
		t.Fatalf("b's replays: %d recoveries replaying %v commands; want one more, replaying 0", count-replays, sum)
	}
	if released, failover := testutil.ToFloat64(b.metrics.cell.Claims.WithLabelValues("released")),
		testutil.ToFloat64(b.metrics.cell.Claims.WithLabelValues("failover")); released != 1 || failover != 0 {
		t.Fatalf("b's claims: released %v, failover %v; want 1 and 0 after a hand-off", released, failover)
	}
	if n := node(opsA, "b-"+id); n == nil || n.GetRooms() != 1 || n.GetDraining() {
		t.Fatalf("b is listed as %v; want it holding the room", n)
	}

	if n, err := drain(opsA, nodeA); err != nil || n != 0 {
		t.Fatalf("second drain: %d rooms, %v; want 0", n, err)
	}
	refused := func(what string, err error, code connect.Code, reason string) {
		t.Helper()
		if connect.CodeOf(err) != code || rpc.Reason(err) != reason {
			t.Fatalf("%s: %v (reason %q); want %v %s", what, err, rpc.Reason(err), code, reason)
		}
	}
	_, err = drain(opsB, "nobody-"+id)
	refused("unknown node", err, connect.CodeNotFound, "node_not_found")
	_, err = drain(opsB, "")
	refused("empty node id", err, connect.CodeInvalidArgument, "invalid_argument")
	anonymous := roomv1connect.NewOperatorServiceClient(http.DefaultClient, "http://"+b.Addr)
	_, err = anonymous.Drain(ctx, connect.NewRequest(&roomv1.DrainRequest{NodeId: "b-" + id}))
	refused("drain without the token", err, connect.CodeUnauthenticated, "unauthenticated")
	_, err = anonymous.ListNodes(ctx, connect.NewRequest(&roomv1.ListNodesRequest{}))
	refused("list without the token", err, connect.CodeUnauthenticated, "unauthenticated")
	if n := node(opsA, "b-"+id); n == nil || n.GetDraining() || b.registry.Loaded() != 1 {
		t.Fatalf("refused calls changed b: %v, %d rooms", n, b.registry.Loaded())
	}
	if err := errors.Join(a.Close(ctx), b.Close(ctx)); err != nil {
		t.Fatal(err)
	}
}

// TestDrainOfASingleNodeIsRefused: without a fleet, Drain answers
// not_in_fleet and changes nothing; ListNodes lists the node itself.
func TestDrainOfASingleNodeIsRefused(t *testing.T) {
	m, rooms := runMain(t, t.TempDir(), "-node-id", "solo")
	ops := roomv1connect.NewOperatorServiceClient(http.DefaultClient, "http://"+m.Addr)
	ctx := context.Background()
	if _, err := rooms.CreateRoom(ctx, connect.NewRequest(&roomv1.CreateRoomRequest{RoomId: "solo-room", CommandId: "c1", OperatorUserId: 1, OwnerUserId: 1, SeatCount: 8})); err != nil {
		t.Fatal(err)
	}
	_, err := ops.Drain(ctx, connect.NewRequest(&roomv1.DrainRequest{NodeId: "solo"}))
	if connect.CodeOf(err) != connect.CodeFailedPrecondition || rpc.Reason(err) != "not_in_fleet" {
		t.Fatalf("drain of a single node: %v (reason %q); want failed_precondition not_in_fleet", err, rpc.Reason(err))
	}
	res, err := ops.ListNodes(ctx, connect.NewRequest(&roomv1.ListNodesRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	if ns := res.Msg.GetNodes(); res.Msg.GetFleet() || len(ns) != 1 || ns[0].GetNodeId() != "solo" || ns[0].GetAddr() != m.Addr || ns[0].GetRooms() != 1 || ns[0].GetDraining() {
		t.Fatalf("nodes of a single node: %v", ns)
	}
	if m.registry.Loaded() != 1 {
		t.Fatal("the refused drain unloaded the room")
	}
}

// TestADrainingNodeSendsARoomPastAMemberThatDoesNotServe: a member whose
// address refuses connections (a node still starting, which registers
// before it listens, or one that crashed while its record lives on) wins
// the rendezvous for a room nobody holds; the draining node's call goes to
// the next best live node instead, which claims the room.
func TestADrainingNodeSendsARoomPastAMemberThatDoesNotServe(t *testing.T) {
	servicetest.Need(t, "Redis", "127.0.0.1:6379")
	servicetest.Need(t, "NATS", "127.0.0.1:4222")
	id := rand.Text()[:8]
	const redisURL = "redis://127.0.0.1:6379/9"
	keys := redislease.Keys{Prefix: "drain-past-" + id + ":"}
	flags := fleetFlags(t, redisURL, keys, ownStream(t, "dp"+strings.ToLower(id)), id)
	a, clientA := runMain(t, t.TempDir(), flags("a")...)
	b, _ := runMain(t, t.TempDir(), flags("b")...)

	ctx := context.Background()
	fakeMember(t, redisOf(t, redisURL), keys, "c-"+id, freeAddr(t)) // an address nothing listens on
	if _, err := a.drain(ctx); err != nil {
		t.Fatal(err)
	}
	// A room that c, of the nodes not draining, takes by rendezvous.
	var roomID string
	for i := 0; ; i++ {
		roomID = fmt.Sprintf("past-%s-%d", id, i)
		if rendezvous("c-"+id, roomID) > rendezvous("b-"+id, roomID) {
			break
		}
	}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := clientA.CreateRoom(cctx, connect.NewRequest(&roomv1.CreateRoomRequest{RoomId: roomID, CommandId: "c1", OperatorUserId: 1, OwnerUserId: 1, SeatCount: 8})); err != nil {
		t.Fatalf("create through the draining node: %v (reason %q)", err, rpc.Reason(err))
	}
	if a.registry.Loaded() != 0 || b.registry.Loaded() != 1 {
		t.Fatalf("rooms loaded: a %d, b %d; want the room on b", a.registry.Loaded(), b.registry.Loaded())
	}
}
