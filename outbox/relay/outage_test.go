package relay_test

import (
	"bytes"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"hyapp/room-service/internal/poll"
	"hyapp/room-service/lease"
	"hyapp/room-service/outbox/natsbus"
	"hyapp/room-service/outbox/relay"
)

// TestALongOutageSendsNothingDead: the broker is away long enough for the
// connection's reconnect buffer to fill with the copies the relay's
// retries queue (here with large rows, so a few dozen fill it). A publish
// the full buffer refuses is the outage's failure, not the message's: it
// counts no attempt, nothing goes dead, and once the broker is back every
// row goes out, each room's in order.
func TestALongOutageSendsNothingDead(t *testing.T) {
	dir := t.TempDir()
	srv := startBroker(t, server.Options{StoreDir: dir})
	port := srv.Addr().(*net.TCPAddr).Port
	bus := openBus(t, natsbus.Config{URL: fmt.Sprintf("nats://127.0.0.1:%d", port), PublishTimeout: time.Second})
	srv.Shutdown()
	srv.WaitForShutdown()
	poll.Until(t, 10*time.Second, "the bus to see the broker gone", poll.Bool(func() bool { return !bus.Conn().IsConnected() }))

	repo := openRepo(t)
	ids := rooms("long", 40)
	big := bytes.Repeat([]byte("x"), 200<<10) // 40 rows of 200 KiB: more than the 8 MiB reconnect buffer
	for _, id := range ids {
		commitRow(t, repo, id, big)
	}
	cfg := fastConfig()
	cfg.MaxAttempts = 2
	var f failures
	runRelay(t, relay.New(repo, bus, relay.LeaseGate{Lease: lease.NewLocal()}, cfg, f.metrics(), quiet))
	poll.Until(t, 30*time.Second, "each room tried a few times during the outage", poll.Bool(func() bool { return f.broker.Load()+f.refused.Load() >= 3*int64(len(ids)) }))
	if n, r := f.dead.Load(), f.refused.Load(); n != 0 || r != 0 {
		t.Fatalf("during the outage %d publishes counted against their rows and %d rows went dead", r, n)
	}
	startBroker(t, server.Options{Port: port, StoreDir: dir})
	poll.Until(t, 60*time.Second, "the backlog to drain", poll.Bool(func() bool { return pending(t, repo) == 0 }))
	consume(t, bus, len(ids))
}
