package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"sort"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"hyapp/room-service/im"
)

// setupIM registers "roomctl im status": group control's consumer (events
// waiting, in flight, redelivered) and the events it terminated, counted by
// type and reason, with the last few in full.
func setupIM(fs *flag.FlagSet) func(ctx context.Context, _ *client, args []string, out io.Writer) error {
	url := natsURLFlag(fs)
	stream := fs.String("stream", "ROOM_EVENTS", "JetStream stream of the room events")
	durable := fs.String("durable", im.DefaultControlDurable, "group control's consumer")
	dead := fs.String("dead-stream", im.DefaultControlDeadStream, "stream of the terminated control events")
	last := fs.Int("n", 10, "show this many of the latest terminated events in full")
	return func(ctx context.Context, _ *client, args []string, out io.Writer) error {
		if args[0] != "status" {
			return usagef("im takes status, not %q", args[0])
		}
		nc, js, err := jetStreamAt(*url, "roomctl im status")
		if err != nil {
			return err
		}
		defer nc.Close()
		return imStatus(ctx, js, *stream, *durable, *dead, *last, out)
	}
}

func imStatus(ctx context.Context, js jetstream.JetStream, stream, durable, dead string, last int, out io.Writer) error {
	cons, err := js.Consumer(ctx, stream, durable)
	switch {
	case errors.Is(err, jetstream.ErrConsumerNotFound):
		fmt.Fprintf(out, "control consumer %s\tnot created yet\n", durable)
	case err != nil:
		return fmt.Errorf("consumer %s on %s: %w", durable, stream, err)
	default:
		info := cons.CachedInfo()
		fmt.Fprintf(out, "control consumer %s\nwaiting\t%d\nin flight\t%d (max %d)\nredelivered\t%d\n", durable,
			info.NumPending, info.NumAckPending, info.Config.MaxAckPending, info.NumRedelivered)
	}
	letters, err := readDead(ctx, js, dead)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "terminated\t%d\n", len(letters))
	counts := map[[2]string]int{}
	for _, d := range letters {
		counts[[2]string{d.EventType, d.Reason}]++
	}
	keys := make([][2]string, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i][0] != keys[j][0] {
			return keys[i][0] < keys[j][0]
		}
		return keys[i][1] < keys[j][1]
	})
	for _, k := range keys {
		fmt.Fprintf(out, "terminated %s %s\t%d\n", k[0], k[1], counts[k])
	}
	for _, d := range letters[max(0, len(letters)-last):] {
		fmt.Fprintf(out, "%s\t%s\troom=%s\tgroup=%s\tevent=%s\t%s\t%s\n", d.At.Format(time.RFC3339), d.EventType,
			d.RoomID, d.GroupID, d.EventID, d.Reason, d.Error)
	}
	return nil
}

// readDead reads every record of the dead stream, oldest first.
func readDead(ctx context.Context, js jetstream.JetStream, name string) ([]im.DeadLetter, error) {
	s, err := js.Stream(ctx, name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("stream %s: %w", name, err)
	}
	total := s.CachedInfo().State.Msgs
	if total == 0 {
		return nil, nil
	}
	cons, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	var letters []im.DeadLetter
	for uint64(len(letters)) < total {
		batch, err := cons.Fetch(1000, jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", name, err)
		}
		n := 0
		for msg := range batch.Messages() {
			n++
			var d im.DeadLetter
			if err := json.Unmarshal(msg.Data(), &d); err != nil {
				return nil, fmt.Errorf("read %s: record %q: %w", name, msg.Data(), err)
			}
			letters = append(letters, d)
		}
		if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) {
			return nil, fmt.Errorf("read %s: %w", name, err)
		}
		if n == 0 {
			break // records aged out while reading
		}
	}
	return letters, nil
}
