package main

import (
	"context"
	"crypto/rand"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"hyapp/room-service/internal/poll"
	"hyapp/room-service/internal/servicetest"
	"hyapp/room-service/outbox"
	"hyapp/room-service/outbox/natsbus"
)

// TestEventsTail: `events tail` prints the events of a stream, and a tail
// whose consumer is deleted under it stops with the reason instead of
// waiting for ever for events that cannot come.
func TestEventsTail(t *testing.T) {
	servicetest.Need(t, "NATS", "127.0.0.1:4222")
	url := "nats://127.0.0.1:4222"
	name := "TAILTEST_" + rand.Text()[:8]
	prefix := "tailtest." + strings.ToLower(name)
	bus, err := natsbus.Open(context.Background(), natsbus.Config{URL: url, Stream: name, SubjectPrefix: prefix}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bus.Close() })
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = js.DeleteStream(context.Background(), name) })
	rec := outbox.Record{EventID: outbox.EventID("tail-room", 1, 0), RoomID: "tail-room", RoomVersion: 1, EventType: "RoomUserJoined",
		Payload: []byte(`{"user_id":7}`), CreatedAt: time.Now()}
	if err := bus.Publish(context.Background(), rec); err != nil {
		t.Fatal(err)
	}
	flags := []string{"-nats-url", url, "-stream", name, "-prefix", prefix}

	out := mustRun(t, append([]string{"events", "tail", "-n", "1"}, flags...)...)
	if !strings.Contains(out, `"event_id":"`+rec.EventID+`"`) || !strings.Contains(out, `"user_id":7`) {
		t.Fatalf("tail printed %q", out)
	}

	type result struct {
		code   int
		stderr string
	}
	done := make(chan result, 1)
	go func() {
		var stdout, stderr strings.Builder
		code := run(t.Context(), append([]string{"events", "tail", "-durable", "tailer"}, flags...), &stdout, &stderr)
		done <- result{code, stderr.String()}
	}()
	poll.Until(t, 10*time.Second, "the tail's consumer", poll.Bool(func() bool {
		_, err := js.Consumer(context.Background(), name, "tailer")
		return err == nil
	}))
	if err := js.DeleteConsumer(context.Background(), name, "tailer"); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-done:
		if r.code != 1 || !strings.Contains(r.stderr, "consumer") {
			t.Fatalf("the tail whose consumer was deleted: exit %d, %q", r.code, r.stderr)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the tail whose consumer was deleted goes on waiting")
	}
}
