package relay_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"hyapp/room-service/internal/poll"
	"hyapp/room-service/lease"
	"hyapp/room-service/outbox/natsbus"
	"hyapp/room-service/outbox/relay"
)

// TestRelayGoesOnWhenTheStreamIsDeleted: the stream is deleted while the
// service runs (an operator's mistake, a broker that lost its store). The
// rows wait, pending, and go out once the stream is made again: the bus
// makes it again itself, as it did at its start.
func TestRelayGoesOnWhenTheStreamIsDeleted(t *testing.T) {
	t.Run("embedded", func(t *testing.T) { testStreamDeleted(t, openBus(t, natsbus.Config{})) })
	t.Run("external", func(t *testing.T) { testStreamDeleted(t, external(t)) })
}

func testStreamDeleted(t *testing.T, bus *natsbus.Bus) {
	repo := openRepo(t)
	ids := rooms("gone", 3)
	seed(t, repo, ids, 5)
	var dead atomic.Int64
	runRelay(t, relay.New(repo, bus, relay.LeaseGate{Lease: lease.NewLocal()}, fastConfig(), relay.Metrics{Dead: func() { dead.Add(1) }}, quiet))
	poll.Until(t, 30*time.Second, "the first rows published", poll.Bool(func() bool { return pending(t, repo) == 0 }))

	if err := bus.JetStream().DeleteStream(context.Background(), bus.Stream()); err != nil {
		t.Fatal(err)
	}
	seed(t, repo, ids, 5)
	poll.Until(t, 20*time.Second, "the rows committed after the stream was deleted published", poll.Bool(func() bool { return pending(t, repo) == 0 }))
	if dead.Load() != 0 {
		t.Fatalf("%d rows went dead", dead.Load())
	}
	for _, room := range ids {
		if n := stored(t, bus, room); n != 10 {
			t.Errorf("the stream holds %d events of room %s, want the 10 committed after it was made again", n, room)
		}
	}
}
