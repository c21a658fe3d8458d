package relay_test

import (
	"bytes"
	"context"
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

// TestARowTheStreamCannotStoreGoesDead: a broker whose max_payload lets
// through a message the file store cannot hold (a record past 32 MiB)
// refuses that one message with a 503 (10077 "message too large"): the
// message's fault, not the broker's state, however the code reads. The row
// counts its attempts and goes dead like any row the broker refuses, and
// the other rooms' rows go out; it must not be retried as an outage for
// ever.
func TestARowTheStreamCannotStoreGoesDead(t *testing.T) {
	srv := startBroker(t, server.Options{MaxPayload: 64 << 20, MaxPending: 256 << 20})
	bus := openBus(t, natsbus.Config{URL: fmt.Sprintf("nats://127.0.0.1:%d", srv.Addr().(*net.TCPAddr).Port), PublishTimeout: 5 * time.Second})

	repo := openRepo(t)
	ids := rooms("large", 3)
	seed(t, repo, ids, 3)
	commitRow(t, repo, "large-big", bytes.Repeat([]byte("x"), 33<<20))

	cfg := fastConfig()
	cfg.MaxAttempts = 2
	var f failures
	runRelay(t, relay.New(repo, bus, relay.LeaseGate{Lease: lease.NewLocal()}, cfg, f.metrics(), quiet))
	poll.Until(t, 30*time.Second, "every row out or dead", func() error {
		if n := pending(t, repo); n != 0 {
			return fmt.Errorf("%d rows pending, %d dead", n, f.dead.Load())
		}
		return nil
	})
	st, err := repo.OutboxStats(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	if n := st.Dead["RoomUserJoined"]; n != 1 {
		t.Fatalf("%d rows went dead (%v), want the one the stream cannot store", n, st.Dead)
	}
	// The relay counts the row dead once it has marked it so: poll, as
	// the test may see the mark before the count.
	poll.Until(t, 10*time.Second, "the dead row counted", poll.Bool(func() bool { return f.dead.Load() == 1 }))
}
