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

// TestARowTheStreamCannotStoreGoesDead: a broker whose max_payload lets
// through a message the file store cannot hold (a record past 32 MiB)
// refuses that one message with a 503 (10077 "message too large"): the
// message's fault, not the broker's state, however the code reads. The row
// counts its attempts and goes dead like any row the broker refuses, and
// the other rooms' rows go out; it must not be retried as an outage for
// ever.
func TestARowTheStreamCannotStoreGoesDead(t *testing.T) {
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(),
		MaxPayload: 64 << 20, MaxPending: 256 << 20, NoSigs: true, NoLog: true})
	if err != nil {
		t.Fatal(err)
	}
	srv.Start()
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats did not start")
	}
	bus := openBus(t, natsbus.Config{URL: fmt.Sprintf("nats://127.0.0.1:%d", srv.Addr().(*net.TCPAddr).Port), PublishTimeout: 5 * time.Second})

	repo := openRepo(t)
	ids := rooms("large", 3)
	seed(t, repo, ids, 3)
	o := claim(t, repo, "large-big")
	o.head++
	b := store.Batch{RoomID: o.room, OwnerEpoch: o.epoch, BaseVersion: o.head - 1,
		Commands: []store.CommandRecord{{RoomID: o.room, RoomVersion: o.head, CommandID: "c1", CommandType: "JoinRoom", Payload: []byte("{}"), Replayable: true}},
		Outbox: []outbox.Record{{EventID: outbox.EventID(o.room, o.head, 0), RoomID: o.room, RoomVersion: o.head, OwnerEpoch: o.epoch,
			EventType: "RoomUserJoined", Payload: bytes.Repeat([]byte("x"), 33<<20), Status: outbox.StatusPending, CreatedAt: time.Now()}}}
	if res, err := repo.CommitBatches(context.Background(), []store.Batch{b}); err != nil || res[0] != nil {
		t.Fatalf("commit: %v %v", err, res)
	}

	cfg := fastConfig()
	cfg.MaxAttempts = 2
	var dead atomic.Int64
	runRelay(t, relay.New(repo, bus, relay.LeaseGate{Lease: lease.NewLocal()}, cfg, relay.Metrics{Dead: func() { dead.Add(1) }}, quiet))
	poll.Until(t, 30*time.Second, "every row out or dead", func() error {
		if n := pending(t, repo); n != 0 {
			return fmt.Errorf("%d rows pending, %d dead", n, dead.Load())
		}
		return nil
	})
	if n := dead.Load(); n != 1 {
		t.Fatalf("%d rows went dead, want the one the stream cannot store", n)
	}
}
