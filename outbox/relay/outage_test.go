package relay_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"hyapp/room-service/internal/poll"
	"hyapp/room-service/lease"
	"hyapp/room-service/outbox"
	"hyapp/room-service/outbox/natsbus"
	"hyapp/room-service/outbox/relay"
	"hyapp/room-service/store"
)

// TestALongOutageSendsNothingDead: the broker is away long enough for the
// connection's reconnect buffer to fill with the copies the relay's
// retries queue (here with large rows, so a few dozen fill it). A publish
// the full buffer refuses is the outage's failure, not the message's: it
// counts no attempt, nothing goes dead, and once the broker is back every
// row goes out, each room's in order.
func TestALongOutageSendsNothingDead(t *testing.T) {
	dir := t.TempDir()
	start := func(port int) *server.Server {
		srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: port, JetStream: true, StoreDir: dir, NoSigs: true, NoLog: true})
		if err != nil {
			t.Fatal(err)
		}
		srv.Start()
		if !srv.ReadyForConnections(10 * time.Second) {
			t.Fatal("nats did not start")
		}
		return srv
	}
	srv := start(-1)
	port := srv.Addr().(*net.TCPAddr).Port
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	bus := openBus(t, natsbus.Config{URL: fmt.Sprintf("nats://127.0.0.1:%d", port), PublishTimeout: time.Second})
	srv.Shutdown()
	srv.WaitForShutdown()
	poll.Until(t, 10*time.Second, "the bus to see the broker gone", poll.Bool(func() bool { return !bus.Conn().IsConnected() }))

	repo := openRepo(t)
	ids := rooms("long", 40)
	big := bytes.Repeat([]byte("x"), 200<<10) // 40 rows of 200 KiB: more than the 8 MiB reconnect buffer
	for _, id := range ids {
		o := claim(t, repo, id)
		o.head++
		b := store.Batch{RoomID: id, OwnerEpoch: o.epoch, BaseVersion: o.head - 1,
			Commands: []store.CommandRecord{{RoomID: id, RoomVersion: o.head, CommandID: "c1", CommandType: "JoinRoom", Payload: []byte("{}"), Replayable: true}},
			Outbox: []outbox.Record{{EventID: outbox.EventID(id, o.head, 0), RoomID: id, RoomVersion: o.head, OwnerEpoch: o.epoch,
				EventType: "RoomUserJoined", Payload: big, Status: outbox.StatusPending, CreatedAt: time.Now()}}}
		if res, err := repo.CommitBatches(context.Background(), []store.Batch{b}); err != nil || res[0] != nil {
			t.Fatalf("commit %s: %v %v", id, err, res)
		}
	}
	cfg := fastConfig()
	cfg.MaxAttempts = 2
	var dead, refused, broker atomic.Int64
	runRelay(t, relay.New(repo, bus, relay.LeaseGate{Lease: lease.NewLocal()}, cfg, relay.Metrics{
		Dead: func() { dead.Add(1) },
		Failed: func(transient bool) {
			if transient {
				broker.Add(1)
			} else {
				refused.Add(1)
			}
		}}, quiet))
	poll.Until(t, 30*time.Second, "each room tried a few times during the outage", poll.Bool(func() bool { return broker.Load()+refused.Load() >= 3*int64(len(ids)) }))
	if n, r := dead.Load(), refused.Load(); n != 0 || r != 0 {
		t.Fatalf("during the outage %d publishes counted against their rows and %d rows went dead", r, n)
	}
	srv = start(port)
	poll.Until(t, 60*time.Second, "the backlog to drain", poll.Bool(func() bool { return pending(t, repo) == 0 }))
	consume(t, bus, len(ids))
}
