package relay_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"hyapp/room-service/internal/poll"
	"hyapp/room-service/lease"
	"hyapp/room-service/outbox/natsbus"
	"hyapp/room-service/outbox/relay"
)

// TestABrokerOutOfStorageSendsNothingDead: another stream filled the
// broker's JetStream storage (its max_file_store), and the broker refuses
// every message for want of room: the broker's state, not the message's.
// Like any other broker outage it pauses the relay and counts no attempt
// against any row, so nothing goes dead; once storage is freed, every row
// goes out, each room's in order.
func TestABrokerOutOfStorageSendsNothingDead(t *testing.T) {
	srv := startBroker(t, server.Options{JetStreamMaxStore: 256 << 10})
	bus := openBus(t, natsbus.Config{URL: fmt.Sprintf("nats://127.0.0.1:%d", srv.Addr().(*net.TCPAddr).Port)})
	ctx := context.Background()
	js := bus.JetStream()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "FILLER", Subjects: []string{"filler.>"}}); err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		if _, err := js.Publish(ctx, "filler.x", bytes.Repeat([]byte("x"), 4<<10)); err != nil {
			t.Logf("the broker is full after %d KiB: %v", 4*i, err)
			break
		}
	}

	repo := openRepo(t)
	ids := rooms("full", 4)
	seed(t, repo, ids, 10)
	cfg := fastConfig()
	cfg.MaxAttempts = 3
	var f failures
	runRelay(t, relay.New(repo, bus, relay.LeaseGate{Lease: lease.NewLocal()}, cfg, f.metrics(), quiet))
	poll.Until(t, 30*time.Second, "every room refused a few times", poll.Bool(func() bool { return f.broker.Load()+f.refused.Load() >= 5*int64(len(ids)) }))
	if n, r := f.dead.Load(), f.refused.Load(); n != 0 || r != 0 {
		t.Fatalf("while the broker's storage was full %d publishes counted against their rows and %d rows went dead", r, n)
	}
	if err := js.DeleteStream(ctx, "FILLER"); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 30*time.Second, "every row published", poll.Bool(func() bool { return pending(t, repo) == 0 }))
	consume(t, bus, len(ids)*10*2)
	if n := f.dead.Load(); n != 0 {
		t.Fatalf("%d rows went dead", n)
	}
}
