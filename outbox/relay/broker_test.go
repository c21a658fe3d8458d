package relay_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"hyapp/room-service/outbox"
	"hyapp/room-service/outbox/relay"
	"hyapp/room-service/store"
)

// startBroker starts an embedded NATS server with JetStream, on opts with
// the host, and a quiet log filled in (Port 0: any free port; StoreDir "":
// the test's own), and shuts it down when the test ends.
func startBroker(t *testing.T, opts server.Options) *server.Server {
	t.Helper()
	opts.Host, opts.JetStream, opts.NoSigs, opts.NoLog = "127.0.0.1", true, true, true
	if opts.Port == 0 {
		opts.Port = -1
	}
	if opts.StoreDir == "" {
		opts.StoreDir = t.TempDir()
	}
	srv, err := server.NewServer(&opts)
	if err != nil {
		t.Fatal(err)
	}
	srv.Start()
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats did not start")
	}
	return srv
}

// failures counts what a relay reports of its failed publishes: rows gone
// dead, and publishes that failed for the broker's state (transient) or
// for the row's.
type failures struct{ dead, refused, broker atomic.Int64 }

func (f *failures) metrics() relay.Metrics {
	return relay.Metrics{
		Dead: func() { f.dead.Add(1) },
		Failed: func(transient bool) {
			if transient {
				f.broker.Add(1)
			} else {
				f.refused.Add(1)
			}
		}}
}

// commitRow commits to room one command with one outbox row of payload.
func commitRow(t *testing.T, repo store.Repository, room string, payload []byte) {
	t.Helper()
	o := claim(t, repo, room)
	o.head++
	b := store.Batch{RoomID: room, OwnerEpoch: o.epoch, BaseVersion: o.head - 1,
		Commands: []store.CommandRecord{{RoomID: room, RoomVersion: o.head, CommandID: "c1", CommandType: "JoinRoom", Payload: []byte("{}"), Replayable: true}},
		Outbox: []outbox.Record{{EventID: outbox.EventID(room, o.head, 0), RoomID: room, RoomVersion: o.head, OwnerEpoch: o.epoch,
			EventType: "RoomUserJoined", Payload: payload, Status: outbox.StatusPending, CreatedAt: time.Now()}}}
	if res, err := repo.CommitBatches(context.Background(), []store.Batch{b}); err != nil || res[0] != nil {
		t.Fatalf("commit %s: %v %v", room, err, res)
	}
}
