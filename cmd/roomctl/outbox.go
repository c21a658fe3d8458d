package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"time"

	"connectrpc.com/connect"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	roomv1 "hyapp/room-service/gen/room/v1"
	"hyapp/room-service/outbox/natsbus"
)

// setupOutbox registers "roomctl outbox status|requeue [-type T]".
func setupOutbox(fs *flag.FlagSet) func(ctx context.Context, c *client, args []string, out io.Writer) error {
	typ := fs.String("type", "", "requeue: only dead rows of this event type")
	return func(ctx context.Context, c *client, args []string, out io.Writer) error {
		switch args[0] {
		case "status":
			res, err := c.ops.GetOutboxStatus(ctx, connect.NewRequest(&roomv1.GetOutboxStatusRequest{}))
			if err != nil {
				return err
			}
			m := res.Msg
			published := strconv.FormatInt(m.GetPublished(), 10)
			if m.GetPublishedMore() {
				published = "more than " + published
			}
			fmt.Fprintf(out, "pending\t%d\noldest pending age\t%s\npublished (kept)\t%s\n", m.GetPending(),
				time.Duration(m.GetOldestPendingAgeMs())*time.Millisecond, published)
			types := make([]string, 0, len(m.GetDead()))
			for t := range m.GetDead() {
				types = append(types, t)
			}
			sort.Strings(types)
			if len(types) == 0 {
				fmt.Fprintln(out, "dead\t0")
			}
			for _, t := range types {
				fmt.Fprintf(out, "dead %s\t%d\n", t, m.GetDead()[t])
			}
			return nil
		case "requeue":
			res, err := c.ops.RequeueDeadOutbox(ctx, connect.NewRequest(&roomv1.RequeueDeadOutboxRequest{EventType: *typ}))
			if err != nil {
				return err
			}
			fmt.Fprintf(out, "requeued %d dead rows\n", res.Msg.GetRequeued())
			return nil
		}
		return usagef("outbox takes status or requeue, not %q", args[0])
	}
}

// setupEvents registers "roomctl events tail": an example consumer of the
// durable room events that drops duplicates by event_id, as every consumer must.
// natsURLFlag is the -nats-url flag of the commands that read JetStream.
func natsURLFlag(fs *flag.FlagSet) *string {
	return fs.String("nats-url", envOr("ROOM_NATS_URL", "nats://127.0.0.1:4333"), "NATS server (env ROOM_NATS_URL); the embedded one listens when the service runs with -nats-listen")
}

// jetStreamAt connects to the NATS server at url; the caller closes the connection.
func jetStreamAt(url, name string) (*nats.Conn, jetstream.JetStream, error) {
	nc, err := nats.Connect(url, nats.Name(name))
	if err != nil {
		return nil, nil, fmt.Errorf("connect %s: %w", url, err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return nc, js, nil
}

func setupEvents(fs *flag.FlagSet) func(ctx context.Context, _ *client, args []string, out io.Writer) error {
	url := natsURLFlag(fs)
	stream := fs.String("stream", "ROOM_EVENTS", "JetStream stream")
	prefix := fs.String("prefix", "room.events", "subject prefix")
	typ := fs.String("type", "", "only events of this type")
	roomID := fs.String("room", "", "only events of this room")
	durable := fs.String("durable", "", "a durable consumer name: a restarted tail goes on where it stopped")
	count := fs.Int("n", 0, "stop after this many events (0: run until interrupted)")
	return func(ctx context.Context, _ *client, args []string, out io.Writer) error {
		if args[0] != "tail" {
			return usagef("events takes tail, not %q", args[0])
		}
		nc, js, err := jetStreamAt(*url, "roomctl events tail")
		if err != nil {
			return err
		}
		defer nc.Close()
		subject := *prefix + ".>"
		switch {
		case *typ != "" && *roomID != "":
			subject = *prefix + "." + natsbus.RoomToken(*typ) + "." + natsbus.RoomToken(*roomID)
		case *typ != "":
			subject = *prefix + "." + natsbus.RoomToken(*typ) + ".>"
		case *roomID != "":
			subject = *prefix + ".*." + natsbus.RoomToken(*roomID)
		}
		cons, err := js.CreateOrUpdateConsumer(ctx, *stream, jetstream.ConsumerConfig{
			Durable: *durable, FilterSubject: subject, AckPolicy: jetstream.AckExplicitPolicy, DeliverPolicy: jetstream.DeliverAllPolicy,
		})
		if err != nil {
			return fmt.Errorf("consumer on %s %s: %w", *stream, subject, err)
		}
		seen := newSeen(100_000)
		enc := json.NewEncoder(out)
		for n := 0; *count == 0 || n < *count; {
			msg, err := cons.Next(jetstream.FetchMaxWait(time.Second))
			if ctx.Err() != nil {
				return nil
			}
			if err != nil {
				if err := tailWait(ctx, cons, err); err != nil {
					return fmt.Errorf("tail %s %s: %w", *stream, subject, err)
				}
				continue
			}
			ev, err := natsbus.Decode(msg.Data())
			if err != nil {
				fmt.Fprintln(os.Stderr, "roomctl: undecodable message:", err)
				_ = msg.Term()
				continue
			}
			if seen.add(ev.GetEventId()) { // at least once: a redelivery is not a new fact
				var payload any
				_ = json.Unmarshal([]byte(ev.GetPayloadJson()), &payload)
				_ = enc.Encode(map[string]any{
					"event_id": ev.GetEventId(), "event_type": ev.GetEventType(), "room_id": ev.GetRoomId(),
					"room_version": ev.GetRoomVersion(), "seq": ev.GetSeq(),
					"occurred_at": time.UnixMilli(ev.GetOccurredAtMs()).UTC().Format(time.RFC3339Nano), "payload": payload,
				})
				n++
			}
			_ = msg.Ack()
		}
		return nil
	}
}

// tailWait handles a pull that brought no event: nothing yet, or the
// connection failed (told, then a second's wait), or the consumer or its
// stream is gone, which waiting cannot bring back (returned). A pull to a
// consumer deleted meanwhile may only time out, so it asks for the
// consumer.
func tailWait(ctx context.Context, cons jetstream.Consumer, err error) error {
	if !gone(err) {
		_, err = cons.Info(ctx)
	}
	switch {
	case err == nil || ctx.Err() != nil:
		return nil
	case gone(err):
		return err
	}
	fmt.Fprintln(os.Stderr, "roomctl: next event:", err)
	select {
	case <-ctx.Done():
	case <-time.After(time.Second):
	}
	return nil
}

// gone reports whether err says a tail's consumer or stream no longer exists.
func gone(err error) bool {
	return errors.Is(err, jetstream.ErrConsumerDeleted) || errors.Is(err, jetstream.ErrConsumerNotFound) ||
		errors.Is(err, jetstream.ErrStreamNotFound)
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// seen remembers the last max event ids.
type seenSet struct {
	max  int
	ring []string
	next int
	ids  map[string]bool
}

func newSeen(max int) *seenSet { return &seenSet{max: max, ids: make(map[string]bool)} }

// add reports whether id is new.
func (s *seenSet) add(id string) bool {
	if s.ids[id] {
		return false
	}
	if len(s.ring) < s.max {
		s.ring = append(s.ring, id)
	} else {
		delete(s.ids, s.ring[s.next])
		s.ring[s.next] = id
		s.next = (s.next + 1) % s.max
	}
	s.ids[id] = true
	return true
}
