package natsbus

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"hyapp/room-service/outbox"
)

// BareAsyncPublish is the publish ceiling: it encodes and publishes records
// in order with jetstream.PublishMsgAsync, keeping at most window messages
// unacknowledged, and returns the time from the first publish to the last
// ack. It does nothing else (no database, no marking), so relay benchmarks
// divide their rate by its rate. It fails on the first refused, timed-out or
// invalid message, or when ctx ends. It uses its own JetStream context on
// b's connection, so it does not disturb concurrent Publish calls, and
// leaves no subscription behind.
func BareAsyncPublish(ctx context.Context, b *Bus, records []outbox.Record, window int) (time.Duration, error) {
	if window < 1 {
		return 0, fmt.Errorf("bare async publish: window %d < 1", window)
	}
	js, err := jetstream.New(b.nc,
		// One more than the window: our own ring below is the bound, the
		// library's stall (which errors after 200ms) must never trigger.
		jetstream.WithPublishAsyncMaxPending(window+1),
		jetstream.WithPublishAsyncTimeout(b.cfg.PublishTimeout),
	)
	if err != nil {
		return 0, fmt.Errorf("bare async publish: %w", err)
	}
	defer js.CleanupPublisher()

	ring := make([]jetstream.PubAckFuture, min(window, len(records)))
	wait := func(f jetstream.PubAckFuture) error {
		select {
		case <-f.Ok():
			return nil
		case err := <-f.Err():
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	start := time.Now()
	for i, r := range records {
		slot := i % len(ring)
		if f := ring[slot]; f != nil {
			if err := wait(f); err != nil {
				return time.Since(start), ackErr(f, err)
			}
		}
		msg, err := b.message(r)
		if err != nil {
			return time.Since(start), fmt.Errorf("bare async publish: %w", err)
		}
		f, err := js.PublishMsgAsync(msg, jetstream.WithExpectStream(b.cfg.Stream))
		if err != nil {
			return time.Since(start), fmt.Errorf("bare async publish event=%s: %w", r.EventID, err)
		}
		ring[slot] = f
	}
	// Acks of one connection arrive in publish order, so waiting oldest
	// first costs nothing extra.
	for k := range ring {
		f := ring[(len(records)+k)%len(ring)]
		if f == nil {
			continue
		}
		if err := wait(f); err != nil {
			return time.Since(start), ackErr(f, err)
		}
	}
	return time.Since(start), nil
}

func ackErr(f jetstream.PubAckFuture, err error) error {
	id := ""
	if m := f.Msg(); m != nil {
		id = m.Header.Get(HeaderMsgID)
	}
	return fmt.Errorf("bare async publish event=%s: %w", id, err)
}
