package daemon

import (
	"context"
	"crypto/rand"
	"fmt"
	"net"
	"os"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	roomv1 "hyapp/room-service/gen/room/v1"
	"hyapp/room-service/internal/poll"
	"hyapp/room-service/lease/redislease"
	"hyapp/room-service/rpc"
	"hyapp/room-service/store/mysql/mysqltest"
)

// reachable skips the test when addr does not answer, or fails it in CI.
func reachable(t *testing.T, what, addr string) {
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

// TestFleetNodesShareRoomsThroughTheRedisLease runs two nodes in fleet
// mode on one MySQL, NATS and Redis: a room served by one is refused by the
// other (room_leased_elsewhere), both are members, and once the first shuts
// down it has released its lease and left, so the second serves the room.
func TestFleetNodesShareRoomsThroughTheRedisLease(t *testing.T) {
	reachable(t, "Redis", "127.0.0.1:6379")
	reachable(t, "NATS", "127.0.0.1:4222")
	dsn := mysqltest.DSN(t)
	id := rand.Text()[:8]
	redisURL := "redis://127.0.0.1:6379/7"
	// The nodes' stream takes the service's subjects, which another stream
	// on the shared server may hold already.
	nc, err := nats.Connect("nats://127.0.0.1:4222")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close) // runs after the stream's deletion below
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if name, err := js.StreamNameBySubject(context.Background(), "room.events.>"); err == nil {
		t.Skipf("stream %s on the NATS server holds the service's subjects", name)
	}
	t.Cleanup(func() { _ = js.DeleteStream(context.Background(), "rs_fleet_"+id) }) // after both nodes closed
	fleet := func(node string) []string {
		return []string{"-mysql-dsn", dsn, "-nats-url", "nats://127.0.0.1:4222", "-nats-stream", "rs_fleet_" + id,
			"-redis-url", redisURL, "-node-id", node + "-" + id, "-advertise-addr", "127.0.0.1:1", "-lease-ttl", "1s"}
	}
	a, clientA := runMain(t, t.TempDir(), fleet("a")...)
	_, clientB := runMain(t, t.TempDir(), fleet("b")...)
	ctx := context.Background()
	roomID := "fleet-" + id
	if _, err := clientA.CreateRoom(ctx, connect.NewRequest(&roomv1.CreateRoomRequest{RoomId: roomID, CommandId: "c1", OperatorUserId: 1, OwnerUserId: 1, SeatCount: 8})); err != nil {
		t.Fatal(err)
	}
	join := func(cmd string) error {
		_, err := clientB.JoinRoom(ctx, connect.NewRequest(&roomv1.JoinRoomRequest{RoomId: roomID, CommandId: cmd, OperatorUserId: 5}))
		return err
	}
	if err := join("c2"); connect.CodeOf(err) != connect.CodeUnavailable || rpc.Reason(err) != "room_leased_elsewhere" {
		t.Fatalf("join on the other node: %v", err)
	}

	opt, _ := redis.ParseURL(redisURL)
	rc := redis.NewClient(opt)
	defer rc.Close()
	poll.Until(t, 5*time.Second, "both nodes members", func() error {
		ms, err := redislease.Members(ctx, rc, redislease.Keys{})
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

	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := rc.Exists(ctx, redislease.Keys{}.Node("a-"+id), redislease.Keys{}.Lease(roomID)).Result(); err != nil || n != 0 {
		t.Fatalf("after a's shutdown its membership or lease is left: %d %v", n, err)
	}
	if err := join("c2"); err != nil {
		t.Fatalf("join on the other node after a left: %v", err)
	}
}
