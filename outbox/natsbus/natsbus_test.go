package natsbus_test

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"hyapp/room-service/internal/poll"
	"hyapp/room-service/internal/servicetest"
	"hyapp/room-service/outbox"
	"hyapp/room-service/outbox/natsbus"
)

// externalAddr is the real NATS server that .ci/run starts.
const externalAddr = "127.0.0.1:4222"

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func testLogger(tb testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(tb.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
}

func openCtx(tb testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	tb.Cleanup(cancel)
	return ctx
}

// openEmbedded opens a Bus on an embedded server; an empty StoreDir gets a
// fresh temporary directory.
func openEmbedded(tb testing.TB, cfg natsbus.Config) *natsbus.Bus {
	tb.Helper()
	if cfg.StoreDir == "" {
		cfg.StoreDir = tb.TempDir()
	}
	b, err := natsbus.Open(openCtx(tb), cfg, testLogger(tb))
	if err != nil {
		tb.Fatalf("open embedded: %v", err)
	}
	tb.Cleanup(func() {
		if err := b.Close(); err != nil {
			tb.Errorf("close: %v", err)
		}
	})
	return b
}

// externalOrSkip skips without the real server, unless CI is set, where a
// missing service fails the run.
func externalOrSkip(tb testing.TB) { tb.Helper(); servicetest.Need(tb, "NATS", externalAddr) }

// openExternal opens a Bus on the real server with a stream and subject
// prefix of its own, deleted when the test ends.
func openExternal(tb testing.TB) *natsbus.Bus {
	tb.Helper()
	externalOrSkip(tb)
	suffix := strings.ToLower(rand.Text()[:12])
	cfg := natsbus.Config{
		URL:           "nats://" + externalAddr,
		Stream:        "rs_test_" + suffix,
		SubjectPrefix: "rstest" + suffix + ".events",
		Name:          "natsbus-test",
		FastBatches:   true, // a server before NATS 2.14 ignores it: every row goes on its own
	}
	b, err := natsbus.Open(openCtx(tb), cfg, testLogger(tb))
	if err != nil {
		tb.Fatalf("open external: %v", err)
	}
	tb.Cleanup(func() {
		if err := b.Close(); err != nil {
			tb.Errorf("close: %v", err)
		}
	})
	// On a connection of its own: the test may have closed the Bus.
	tb.Cleanup(func() {
		nc, err := nats.Connect(cfg.URL)
		if err != nil {
			tb.Errorf("delete stream %s: %v", cfg.Stream, err)
			return
		}
		defer nc.Close()
		js, err := jetstream.New(nc)
		if err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			err = js.DeleteStream(ctx, cfg.Stream)
		}
		if err != nil {
			tb.Errorf("delete stream %s: %v", cfg.Stream, err)
		}
	})
	return b
}

// nastyRoom exercises every escaped byte class in one id.
const nastyRoom = "vip.room *>% 房间\t1"

func record(room string, version int64, seq int32, typ string) outbox.Record {
	return outbox.Record{
		ID:          version*10 + int64(seq),
		EventID:     fmt.Sprintf("%s/%d/%d", room, version, seq),
		RoomID:      room,
		RoomVersion: version,
		Seq:         seq,
		EventType:   typ,
		Payload:     []byte(fmt.Sprintf(`{"room_id":%q,"v":%d}`, room, version)),
		OwnerEpoch:  3,
		Status:      outbox.StatusPending,
		CreatedAt:   time.UnixMilli(1_750_000_000_000 + version),
	}
}

func sampleRecords() []outbox.Record {
	return []outbox.Record{
		record("r1", 1, 0, "RoomCreated"),
		record("r1", 2, 0, "RoomGiftSent"),
		record("r1", 2, 1, "RoomMicChanged"),
		record(nastyRoom, 1, 0, "RoomCreated"),
		record(nastyRoom, 2, 0, "RoomGiftSent"),
		record("r2", 7, 0, "RoomGiftSent"),
	}
}

// fetch reads n messages matching filter from the start of the stream with an
// ordered consumer, polling until a deadline.
func fetch(tb testing.TB, b *natsbus.Bus, filter string, n int) []jetstream.Msg {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cons, err := b.JetStream().OrderedConsumer(ctx, b.Stream(), jetstream.OrderedConsumerConfig{FilterSubjects: []string{filter}})
	if err != nil {
		tb.Fatalf("ordered consumer %s: %v", filter, err)
	}
	var got []jetstream.Msg
	for len(got) < n {
		if ctx.Err() != nil {
			tb.Fatalf("fetch %s: got %d of %d messages before the deadline", filter, len(got), n)
		}
		batch, err := cons.Fetch(n-len(got), jetstream.FetchMaxWait(time.Second))
		if err != nil {
			tb.Fatalf("fetch %s: %v", filter, err)
		}
		for m := range batch.Messages() {
			got = append(got, m)
		}
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) {
			tb.Fatalf("fetch %s: %v", filter, err)
		}
	}
	return got
}

// count is the number of messages the stream holds on subjects matching filter.
func count(tb testing.TB, b *natsbus.Bus, filter string) uint64 {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := b.JetStream().Stream(ctx, b.Stream())
	if err != nil {
		tb.Fatalf("stream: %v", err)
	}
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(filter))
	if err != nil {
		tb.Fatalf("stream info: %v", err)
	}
	var n uint64
	for _, c := range info.State.Subjects {
		n += c
	}
	return n
}

func checkMsg(tb testing.TB, b *natsbus.Bus, m jetstream.Msg, want outbox.Record) {
	tb.Helper()
	if got, w := m.Subject(), b.Subject(want.EventType, want.RoomID); got != w {
		tb.Errorf("subject = %q, want %q", got, w)
	}
	if !server.IsValidLiteralSubject(m.Subject()) {
		tb.Errorf("subject %q is not a valid literal subject", m.Subject())
	}
	h := m.Headers()
	for k, w := range map[string]string{
		"Nats-Msg-Id":  want.EventID,
		"Content-Type": "application/protobuf",
		"Room-Id":      want.RoomID,
		"Room-Version": strconv.FormatInt(want.RoomVersion, 10),
		"Event-Type":   want.EventType,
	} {
		if got := h.Get(k); got != w {
			tb.Errorf("header %s = %q, want %q", k, got, w)
		}
	}
	ev, err := natsbus.Decode(m.Data())
	if err != nil {
		tb.Fatalf("decode: %v", err)
	}
	if ev.GetEventId() != want.EventID || ev.GetEventType() != want.EventType || ev.GetRoomId() != want.RoomID ||
		ev.GetRoomVersion() != want.RoomVersion || ev.GetSeq() != want.Seq ||
		ev.GetOccurredAtMs() != want.CreatedAt.UnixMilli() || ev.GetPayloadJson() != string(want.Payload) {
		tb.Errorf("decoded %v, want %+v", ev, want)
	}
}

func publishAll(tb testing.TB, b *natsbus.Bus, recs []outbox.Record) {
	tb.Helper()
	for _, r := range recs {
		if err := b.Publish(context.Background(), r); err != nil {
			tb.Fatalf("publish %s: %v", r.EventID, err)
		}
	}
}

// testBus is the contract every broker behind a Bus meets; open returns a
// Bus on an empty stream of its own.
func testBus(t *testing.T, open func(testing.TB) *natsbus.Bus) {
	t.Run("PublishAndRead", func(t *testing.T) {
		b := open(t)
		recs := sampleRecords()
		publishAll(t, b, recs)

		all := fetch(t, b, ">", len(recs))
		for i, m := range all {
			checkMsg(t, b, m, recs[i])
		}
		if n := count(t, b, ">"); n != uint64(len(recs)) {
			t.Errorf("stream holds %d messages, want %d", n, len(recs))
		}

		// By event type: the gifts of every room, in publish order.
		gifts := fetch(t, b, b.TypeFilter("RoomGiftSent"), 3)
		for i, want := range []outbox.Record{recs[1], recs[4], recs[5]} {
			checkMsg(t, b, gifts[i], want)
		}
		// By room: every event of the nasty room, in (version, seq) order.
		room := fetch(t, b, b.RoomFilter(nastyRoom), 2)
		checkMsg(t, b, room[0], recs[3])
		checkMsg(t, b, room[1], recs[4])
		if n := count(t, b, b.RoomFilter(nastyRoom)); n != 2 {
			t.Errorf("room filter matches %d messages, want 2", n)
		}
	})

	t.Run("LastOfRoom", func(t *testing.T) {
		b := open(t)
		last := func(room string) (string, bool) {
			t.Helper()
			id, found, err := b.LastOfRoom(context.Background(), room)
			if err != nil {
				t.Fatalf("last of %q: %v", room, err)
			}
			return id, found
		}
		if id, found := last("r1"); found {
			t.Fatalf("empty stream: last of r1 = %q, want none", id)
		}
		recs := sampleRecords()
		publishAll(t, b, recs)
		// Across event types: r1's last is its mic change, not its first
		// type's; the nasty room's id is escaped like its subjects; a room
		// whose id is a prefix of another's is not mistaken for it.
		for room, want := range map[string]string{"r1": recs[2].EventID, nastyRoom: recs[4].EventID, "r2": recs[5].EventID} {
			if id, found := last(room); !found || id != want {
				t.Errorf("last of %q = %q, %v; want %q", room, id, found, want)
			}
		}
		if id, found := last("r"); found {
			t.Errorf("last of r = %q, want none", id)
		}
		publishAll(t, b, []outbox.Record{record("r1", 3, 0, "RoomGiftSent")})
		if id, _ := last("r1"); id != "r1/3/0" {
			t.Errorf("last of r1 after another event = %q, want r1/3/0", id)
		}
	})

	t.Run("Dedup", func(t *testing.T) {
		b := open(t)
		r := record("r1", 5, 0, "RoomGiftSent")
		publishAll(t, b, []outbox.Record{r, r})
		// Dedup compares the id only: a changed body is still the same event.
		r2 := r
		r2.Payload = []byte(`{"changed":true}`)
		publishAll(t, b, []outbox.Record{r2})
		if n := count(t, b, ">"); n != 1 {
			t.Fatalf("stream holds %d messages after publishing one event id three times, want 1", n)
		}
		checkMsg(t, b, fetch(t, b, ">", 1)[0], r)
	})

	t.Run("ConcurrentPublish", func(t *testing.T) {
		b := open(t)
		const rooms, perRoom = 8, 40
		var wg sync.WaitGroup
		errs := make(chan error, rooms*perRoom)
		for g := range rooms {
			wg.Go(func() {
				room := "room-" + strconv.Itoa(g)
				for v := 1; v <= perRoom; v++ {
					if err := b.Publish(context.Background(), record(room, int64(v), 0, "RoomMicChanged")); err != nil {
						errs <- err
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		if n := count(t, b, ">"); n != rooms*perRoom {
			t.Fatalf("stream holds %d messages, want %d", n, rooms*perRoom)
		}
		// Per-room order survives concurrent publishers of other rooms.
		for i, m := range fetch(t, b, b.RoomFilter("room-3"), perRoom) {
			checkMsg(t, b, m, record("room-3", int64(i+1), 0, "RoomMicChanged"))
		}
	})

	t.Run("PublishInOrder", func(t *testing.T) {
		b := open(t)
		const rooms, perRoom = 8, 40
		recs := make([][]outbox.Record, rooms)
		for g := range recs {
			for v := 1; v <= perRoom; v++ {
				recs[g] = append(recs[g], record("room-"+strconv.Itoa(g), int64(v), 0, "RoomMicChanged"))
			}
		}
		var wg sync.WaitGroup
		for g := range rooms {
			wg.Go(func() {
				next := 0 // each sees every row once, in order
				n, err := b.PublishInOrder(context.Background(), recs[g], func(i int) bool {
					if i != next {
						t.Errorf("room %d: ack of row %d, want %d", g, i, next)
					}
					next++
					return true
				})
				if n != perRoom || err != nil || next != perRoom {
					t.Errorf("room %d: %d rows acknowledged (%d seen), err %v; want %d", g, n, next, err, perRoom)
				}
			})
		}
		wg.Wait()
		if n := count(t, b, ">"); n != rooms*perRoom {
			t.Fatalf("stream holds %d messages, want %d", n, rooms*perRoom)
		}
		for i, m := range fetch(t, b, b.RoomFilter("room-5"), perRoom) {
			checkMsg(t, b, m, recs[5][i])
		}
		// Again: all duplicates, all acknowledged, nothing stored twice.
		if n, err := b.PublishInOrder(context.Background(), recs[2], nil); n != perRoom || err != nil {
			t.Fatalf("republish: %d rows, %v", n, err)
		}
		if n := count(t, b, ">"); n != rooms*perRoom {
			t.Fatalf("stream holds %d messages after duplicates, want %d", n, rooms*perRoom)
		}
	})

	t.Run("PublishInOrderRuns", func(t *testing.T) {
		b := open(t)
		var rows []outbox.Record
		for v := 1; v <= 600; v++ {
			rows = append(rows, record("runs", int64(v), 0, "RoomUserJoined"))
		}
		// Ten rows in the first run are in the stream already: acknowledged as duplicates, stored once.
		publishAll(t, b, rows[100:110])
		next := 0
		n, err := b.PublishInOrder(context.Background(), rows, func(i int) bool {
			if i != next {
				t.Errorf("ack of row %d, want %d", i, next)
			}
			next++
			return true
		})
		if n != len(rows) || err != nil || next != len(rows) {
			t.Fatalf("%d rows acknowledged (%d seen), err %v; want %d", n, next, err, len(rows))
		}
		// The stream holds the ten first, then every other row once, in order.
		want := slices.Concat(rows[100:110], rows[:100], rows[110:])
		for i, m := range fetch(t, b, b.RoomFilter("runs"), len(rows)) {
			checkMsg(t, b, m, want[i])
		}
		if got := count(t, b, ">"); got != uint64(len(rows)) {
			t.Fatalf("stream holds %d messages, want %d", got, len(rows))
		}
		// Runs of at most 256 rows, the last 88: three fast batches where the stream takes them.
		sent, runs := natsbus.RunsSent(b)
		if want := map[bool]int64{true: 3, false: 0}[runs]; sent != want {
			t.Fatalf("%d fast batches sent (the stream takes them: %v), want %d", sent, runs, want)
		}
		// each's false stops the rows after the run it is in.
		var more []outbox.Record
		for v := 1; v <= 300; v++ {
			more = append(more, record("runs-stop", int64(v), 0, "RoomUserJoined"))
		}
		stopped := map[bool]int{true: 256, false: 11}[runs]
		if n, err := b.PublishInOrder(context.Background(), more, func(i int) bool { return i < 10 }); n != stopped || err != nil {
			t.Fatalf("stopped by each at the eleventh row: %d rows, %v; want %d", n, err, stopped)
		}
		if got := count(t, b, b.RoomFilter("runs-stop")); got != uint64(stopped) {
			t.Fatalf("stream holds %d of the stopped room's messages, want %d", got, stopped)
		}
	})

	t.Run("PublishInOrderManyRooms", func(t *testing.T) {
		// Rooms that each hand over a row or two at a time, many at once,
		// as a relay's chains do: each call hears of every row acknowledged,
		// in order, also when it says stop, and the stream holds every
		// room's rows once, in order. Where the stream takes fast batches
		// the rows share them.
		b := open(t)
		sent0, runs := natsbus.RunsSent(b)
		const rooms, perRoom = 64, 40
		want := make([][]outbox.Record, rooms)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for r := range rooms {
			room := "many-" + strconv.Itoa(r)
			for v := 1; v <= perRoom; v++ {
				want[r] = append(want[r], record(room, int64(v), 0, "RoomUserJoined"))
			}
			wg.Go(func() {
				<-start
				for done := 0; done < len(want[r]); {
					rows := want[r][done:min(len(want[r]), done+1+(r+done)%3)]
					next := 0
					n, err := b.PublishInOrder(context.Background(), rows, func(i int) bool {
						if i != next {
							t.Errorf("room %s: ack of row %d, want %d", room, i, next)
						}
						next++
						return r%4 != 0 // every fourth room says stop after each first row
					})
					least := len(rows) // a stop may still hear of a whole shared batch
					if r%4 == 0 {
						least = 1
					}
					if n < least || n > len(rows) || err != nil || next != n {
						t.Errorf("room %s: %d of %d rows acknowledged (%d seen), err %v", room, n, len(rows), next, err)
						return
					}
					done += n
				}
			})
		}
		close(start)
		wg.Wait()
		total := 0
		for r := range rooms {
			for i, m := range fetch(t, b, b.RoomFilter("many-"+strconv.Itoa(r)), len(want[r])) {
				checkMsg(t, b, m, want[r][i])
			}
			total += len(want[r])
		}
		if got := count(t, b, ">"); got != uint64(total) {
			t.Fatalf("stream holds %d messages, want %d", got, total)
		}
		if sent, _ := natsbus.RunsSent(b); runs != (sent > sent0) {
			t.Fatalf("%d fast batches sent for rows of one to three at a time; the stream takes them: %v", sent-sent0, runs)
		}
	})

	t.Run("PublishInOrderStops", func(t *testing.T) {
		b := open(t)
		var rows []outbox.Record
		for v := 1; v <= 10; v++ {
			rows = append(rows, record("stop", int64(v), 0, "RoomMicChanged"))
		}
		// each says stop after the fifth row: nothing after it goes out.
		if n, err := b.PublishInOrder(context.Background(), rows, func(i int) bool { return i < 4 }); n != 5 || err != nil {
			t.Fatalf("stopped by each: %d rows, %v; want 5, nil", n, err)
		}
		if n := count(t, b, ">"); n != 5 {
			t.Fatalf("stream holds %d messages, want 5", n)
		}
		// A row the encoder refuses ends the rows before it goes out.
		bad := slices.Clone(rows)
		bad[7].EventID = ""
		n, err := b.PublishInOrder(context.Background(), bad, nil)
		if n != 7 || !errors.Is(err, natsbus.ErrInvalidRecord) || errors.Is(err, outbox.ErrTransient) {
			t.Fatalf("invalid eighth row: %d rows, %v; want 7, ErrInvalidRecord", n, err)
		}
		if n := count(t, b, ">"); n != 7 {
			t.Fatalf("stream holds %d messages, want 7", n)
		}
		// A context already over publishes nothing.
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if n, err := b.PublishInOrder(ctx, rows[7:], nil); n != 0 || !errors.Is(err, outbox.ErrTransient) {
			t.Fatalf("ended context: %d rows, %v; want 0, ErrTransient", n, err)
		}
		if n := count(t, b, ">"); n != 7 {
			t.Fatalf("stream holds %d messages after an ended context, want 7", n)
		}
		// A context that ends on the way: what the call counts was
		// acknowledged and seen by each, and nothing after the row it
		// ended at goes out.
		var late []outbox.Record
		for v := 1; v <= 50; v++ {
			late = append(late, record("late", int64(v), 0, "RoomMicChanged"))
		}
		ctx, cancel = context.WithCancel(context.Background())
		var seen atomic.Int64
		n, err = b.PublishInOrder(ctx, late, func(i int) bool {
			seen.Add(1)
			if i == 2 {
				cancel()
			}
			return true
		})
		cancel()
		if n < 3 || err != nil && !errors.Is(err, outbox.ErrTransient) || err == nil && n != len(late) || seen.Load() != int64(n) {
			t.Fatalf("context ended after the third ack: %d rows, %v, each saw %d; want 3 or more, ErrTransient, each saw them all", n, err, seen.Load())
		}
		if got := count(t, b, b.RoomFilter("late")); got > uint64(n+1) {
			t.Fatalf("the stream holds %d of the room's messages after %d acknowledged", got, n)
		}
		if err := b.Close(); err != nil {
			t.Fatalf("close: %v", err)
		}
		if n, err := b.PublishInOrder(context.Background(), rows, nil); n != 0 || !errors.Is(err, outbox.ErrTransient) {
			t.Fatalf("after close: %d rows, %v; want 0, ErrTransient", n, err)
		}
	})

	t.Run("BareAsyncPublish", func(t *testing.T) {
		b := open(t)
		recs := benchRecords(500, 7)
		for range 2 { // the second round is all duplicates
			if _, err := natsbus.BareAsyncPublish(context.Background(), b, recs, 64); err != nil {
				t.Fatalf("bare async publish: %v", err)
			}
		}
		if n := count(t, b, ">"); n != uint64(len(recs)) {
			t.Fatalf("stream holds %d messages, want %d", n, len(recs))
		}
		for i, m := range fetch(t, b, ">", len(recs)) {
			checkMsg(t, b, m, recs[i])
		}
	})

	t.Run("SubscribeByType", func(t *testing.T) {
		b := open(t)
		recs := sampleRecords()
		publishAll(t, b, recs)
		ctx := openCtx(t)
		cfg := jetstream.ConsumerConfig{Durable: "by-type", AckPolicy: jetstream.AckExplicitPolicy}
		// A consumer of every event, as an earlier release made it, is
		// narrowed in place when it is made again with types.
		iter, err := b.Subscribe(ctx, cfg, nil, 16)
		if err != nil {
			t.Fatalf("subscribe to every event: %v", err)
		}
		iter.Stop()
		types := []string{"RoomCreated", "RoomMicChanged"}
		iter, err = b.Subscribe(ctx, cfg, types, 16)
		if err != nil {
			t.Fatalf("subscribe to %v: %v", types, err)
		}
		defer iter.Stop()
		want := []outbox.Record{recs[0], recs[2], recs[3]}
		var major, minor int
		if _, err := fmt.Sscanf(b.Conn().ConnectedServerVersion(), "%d.%d", &major, &minor); err == nil && major == 2 && minor < 10 {
			want = recs // a server without several filters delivers every event
		}
		for _, r := range want {
			m, err := iter.Next()
			if err != nil {
				t.Fatalf("next: %v", err)
			}
			checkMsg(t, b, m, r)
			if err := m.Ack(); err != nil {
				t.Fatal(err)
			}
		}
		cons, err := b.JetStream().Consumer(ctx, b.Stream(), "by-type")
		if err != nil {
			t.Fatal(err)
		}
		poll.Until(t, 10*time.Second, "every event taken", poll.Bool(func() bool {
			info, err := cons.Info(ctx)
			return err == nil && info.NumPending == 0 && info.NumAckPending == 0
		}))
		if info, err := cons.Info(ctx); err != nil || info.Delivered.Consumer != uint64(len(want)) {
			t.Fatalf("consumer info %+v (%v): want %d delivered", info, err, len(want))
		}
	})

	t.Run("InvalidRecordAndClose", func(t *testing.T) {
		b := open(t)
		r := record("r1", 1, 0, "RoomCreated")
		r.EventID = ""
		if err := b.Publish(context.Background(), r); !errors.Is(err, natsbus.ErrInvalidRecord) {
			t.Errorf("publish without event id: %v, want ErrInvalidRecord", err)
		}
		if err := b.Close(); err != nil {
			t.Fatalf("close: %v", err)
		}
		if err := b.Close(); err != nil {
			t.Fatalf("second close: %v", err)
		}
		if err := b.Publish(context.Background(), record("r1", 1, 0, "RoomCreated")); err == nil {
			t.Error("publish after close succeeded")
		}
	})
}

func TestEmbedded(t *testing.T) {
	testBus(t, func(tb testing.TB) *natsbus.Bus { return openEmbedded(tb, natsbus.Config{FastBatches: true}) })
}

// TestFastBatchesFollowTheConfig: the stream allows fast batches only when
// asked, and a Bus opened without them turns them off on the stream, the way
// back before a server older than NATS 2.14 loads it.
func TestFastBatchesFollowTheConfig(t *testing.T) {
	dir := t.TempDir()
	for _, want := range []bool{false, true, false} {
		b := openEmbedded(t, natsbus.Config{StoreDir: dir, FastBatches: want})
		_, runs := natsbus.RunsSent(b)
		s, err := b.JetStream().Stream(t.Context(), b.Stream())
		if err != nil {
			t.Fatal(err)
		}
		info, err := s.Info(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if runs != want || info.Config.AllowBatchPublish != want {
			t.Fatalf("FastBatches %v: the Bus sends runs %v, the stream allows them %v", want, runs, info.Config.AllowBatchPublish)
		}
		if err := b.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

func TestExternal(t *testing.T) {
	externalOrSkip(t)
	testBus(t, openExternal)
}

// TestPublishInOrderEndsWhenTheBrokerGoes: a broker that goes away while
// rows are in flight ends PublishInOrder with a transient error; it does
// not hang, and it counts only what was acknowledged.
func TestPublishInOrderEndsWhenTheBrokerGoes(t *testing.T) {
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoSigs: true, NoLog: true})
	if err != nil {
		t.Fatal(err)
	}
	srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats did not start")
	}
	defer srv.WaitForShutdown()
	defer srv.Shutdown()
	b, err := natsbus.Open(openCtx(t), natsbus.Config{URL: srv.ClientURL(), PublishTimeout: 500 * time.Millisecond}, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = b.Close() }()
	rows := benchRecords(100_000, 1)
	gone := make(chan struct{})
	done := make(chan struct{})
	var n int
	go func() {
		defer close(done)
		n, err = b.PublishInOrder(context.Background(), rows, func(i int) bool {
			if i == 100 {
				close(gone)
			}
			return true
		})
	}()
	<-gone
	srv.Shutdown()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("PublishInOrder still waits 30 s after the broker went away")
	}
	if n < 101 || n >= len(rows) || !errors.Is(err, outbox.ErrTransient) {
		t.Fatalf("%d rows acknowledged, err %v; want 101 or more, fewer than all, and ErrTransient", n, err)
	}
}

// TestAStalledBatchHoldsOnlyItsOwnRooms: while a batch of many rooms' rows
// is held up (a slow broker), the other rooms' rows do not wait for it: those
// queued behind it go alone after queueWait. Once it goes, every room's rows
// are in the stream once, in order. There are more rooms than a batch takes
// rows: a batch that took every room's row would leave none to go on.
func TestAStalledBatchHoldsOnlyItsOwnRooms(t *testing.T) {
	b := openEmbedded(t, natsbus.Config{FastBatches: true})
	stalled, release := make(chan int, 1), make(chan struct{})
	var once sync.Once
	natsbus.SetSendHook(t, func(rows int) {
		once.Do(func() {
			stalled <- rows
			<-release
		})
	})
	rooms := natsbus.MaxRun + 44
	var completed atomic.Int64
	acked := make([]int, rooms)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for r := range rooms {
		wg.Go(func() {
			room := "stall-" + strconv.Itoa(r)
			for v := int64(1); ; v++ {
				select {
				case <-stop:
					return
				default:
				}
				n, err := b.PublishInOrder(context.Background(), []outbox.Record{record(room, v, 0, "RoomUserJoined")}, nil)
				if n != 1 || err != nil {
					t.Errorf("room %s, row %d: %d, %v", room, v, n, err)
					return
				}
				acked[r]++
				completed.Add(1)
			}
		})
	}
	finish := sync.OnceFunc(func() {
		close(stop)
		close(release)
		wg.Wait()
	})
	defer finish()
	var inBatch int
	select {
	case inBatch = <-stalled:
	case <-time.After(10 * time.Second):
		t.Fatal("no batch of many rooms' rows went out in 10 s")
	}
	at := completed.Load()
	poll.Until(t, 10*time.Second, fmt.Sprintf("200 rows acknowledged while a batch of %d rows stalls", inBatch), func() error {
		if n := completed.Load() - at; n < 200 {
			return fmt.Errorf("%d acknowledged", n)
		}
		return nil
	})
	finish()
	for r := range rooms {
		room := "stall-" + strconv.Itoa(r)
		if got := int(count(t, b, b.RoomFilter(room))); got != acked[r] {
			t.Fatalf("room %s: the stream holds %d rows, %d acknowledged", room, got, acked[r])
		}
		for i, m := range fetch(t, b, b.RoomFilter(room), acked[r]) {
			if id := m.Headers().Get(natsbus.HeaderMsgID); id != room+"/"+strconv.Itoa(i+1)+"/0" {
				t.Fatalf("room %s: message %d is %s: not the room's rows in order", room, i, id)
			}
		}
	}
}

// TestManyRoomsKeepTheirOrderWhenTheBrokerGoes: rooms whose short
// sequences share fast batches, the broker shut down as one of those batches
// goes out. Every sequence ends, with a transient error once the broker is
// gone, and each heard of its rows in order; the stream, started again on
// its files, holds a prefix of each room's rows, every acknowledged row
// among them.
func TestManyRoomsKeepTheirOrderWhenTheBrokerGoes(t *testing.T) {
	dir := t.TempDir()
	opts := &server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: dir, NoSigs: true, NoLog: true}
	srv, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats did not start")
	}
	port := srv.Addr().(*net.TCPAddr).Port
	cfg := natsbus.Config{URL: srv.ClientURL(), PublishTimeout: 500 * time.Millisecond, FastBatches: true}
	b, err := natsbus.Open(openCtx(t), cfg, testLogger(t))
	if err != nil {
		srv.Shutdown()
		t.Fatal(err)
	}
	const rooms, perRoom = 48, 4000
	acked := make([]int, rooms)
	var total atomic.Int64
	// The broker goes just before a batch of many rooms' rows goes out,
	// once 3,000 rows are in: that batch fails, and its rooms go on one row
	// at a time.
	gone := make(chan struct{})
	var once sync.Once
	first := srv
	natsbus.SetSendHook(t, func(int) {
		if total.Load() > 3000 {
			once.Do(func() {
				first.Shutdown()
				close(gone)
			})
		}
	})
	var wg sync.WaitGroup
	for r := range rooms {
		rows := benchRecords(perRoom, 1)
		for i := range rows {
			rows[i].RoomID = "gone-" + strconv.Itoa(r)
			rows[i].EventID = rows[i].RoomID + "/" + strconv.Itoa(i+1) + "/0"
		}
		wg.Go(func() {
			for acked[r] < len(rows) {
				seq := rows[acked[r]:min(len(rows), acked[r]+2)]
				next := 0
				n, err := b.PublishInOrder(context.Background(), seq, func(i int) bool {
					if i != next {
						t.Errorf("room %d: ack of row %d, want %d", r, i, next)
					}
					next++
					return true
				})
				if next != n {
					t.Errorf("room %d: %d rows acknowledged, each called for %d", r, n, next)
				}
				acked[r] += n
				total.Add(int64(n))
				if err != nil {
					if !errors.Is(err, outbox.ErrTransient) {
						t.Errorf("room %d: %v; want ErrTransient", r, err)
					}
					return
				}
			}
		})
	}
	select {
	case <-gone:
	case <-time.After(30 * time.Second):
		srv.Shutdown()
		t.Fatal("no batch of many rooms' rows went out after 3,000 rows")
	}
	srv.WaitForShutdown()
	ended := make(chan struct{})
	go func() { wg.Wait(); close(ended) }()
	select {
	case <-ended:
	case <-time.After(30 * time.Second):
		t.Fatal("sequences still wait 30 s after the broker went away")
	}
	_ = b.Close()
	sent, runs := natsbus.RunsSent(b)
	if !runs || sent == 0 {
		t.Fatalf("%d fast batches sent (the stream takes them: %v); the test needs some", sent, runs)
	}

	opts.Port = port
	if srv, err = server.NewServer(opts); err != nil {
		t.Fatal(err)
	}
	srv.Start()
	defer func() { srv.Shutdown(); srv.WaitForShutdown() }()
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats did not start again")
	}
	b, err = natsbus.Open(openCtx(t), cfg, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = b.Close() }()
	for r := range rooms {
		room := "gone-" + strconv.Itoa(r)
		held := int(count(t, b, b.RoomFilter(room)))
		if held < acked[r] || held >= perRoom {
			t.Fatalf("room %s: the stream holds %d rows, %d acknowledged of %d", room, held, acked[r], perRoom)
		}
		for i, m := range fetch(t, b, b.RoomFilter(room), held) {
			if id := m.Headers().Get(natsbus.HeaderMsgID); id != room+"/"+strconv.Itoa(i+1)+"/0" {
				t.Fatalf("room %s: message %d is %s: not the room's rows in order", room, i, id)
			}
		}
	}
}

func TestEmbeddedReopenKeepsMessagesAndDedup(t *testing.T) {
	dir := t.TempDir()
	recs := sampleRecords()
	b, err := natsbus.Open(openCtx(t), natsbus.Config{StoreDir: dir}, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	publishAll(t, b, recs)
	if err := b.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}

	// A restarted relay re-publishes what it had not marked: the store keeps
	// the messages and the dedup window survives the restart. The changed
	// MaxAge is applied to the existing stream.
	b = openEmbedded(t, natsbus.Config{StoreDir: dir, MaxAge: 48 * time.Hour})
	publishAll(t, b, recs[len(recs)-2:])
	if n := count(t, b, ">"); n != uint64(len(recs)) {
		t.Fatalf("reopened stream holds %d messages, want %d", n, len(recs))
	}
	for i, m := range fetch(t, b, ">", len(recs)) {
		checkMsg(t, b, m, recs[i])
	}
	s, err := b.JetStream().Stream(openCtx(t), b.Stream())
	if err != nil {
		t.Fatal(err)
	}
	if got := s.CachedInfo().Config.MaxAge; got != 48*time.Hour {
		t.Errorf("max age after reopen = %s, want 48h", got)
	}
}

func TestEmbeddedListenServesOutsideConsumers(t *testing.T) {
	b := openEmbedded(t, natsbus.Config{Listen: "127.0.0.1:0"})
	u := b.ClientURL()
	if !strings.HasPrefix(u, "nats://127.0.0.1:") || strings.HasSuffix(u, ":0") || strings.HasSuffix(u, ":-1") {
		t.Fatalf("client url = %q, want nats://127.0.0.1:<port>", u)
	}
	recs := sampleRecords()
	publishAll(t, b, recs)

	nc, err := nats.Connect(u)
	if err != nil {
		t.Fatalf("connect %s: %v", u, err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := openCtx(t)
	cons, err := js.OrderedConsumer(ctx, natsbus.DefaultStream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{"room.events.RoomGiftSent.>"},
	})
	if err != nil {
		t.Fatal(err)
	}
	var got []jetstream.Msg
	for len(got) < 3 && ctx.Err() == nil {
		batch, err := cons.Fetch(3-len(got), jetstream.FetchMaxWait(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		for m := range batch.Messages() {
			got = append(got, m)
		}
	}
	if len(got) != 3 {
		t.Fatalf("outside consumer got %d gifts, want 3", len(got))
	}
	for i, want := range []outbox.Record{recs[1], recs[4], recs[5]} {
		checkMsg(t, b, got[i], want)
	}
}

// TestEmbeddedListenWithATokenRefusesStrangers: with a token, a client
// without it cannot connect, so it cannot publish a forged event; with it,
// it reads the stream; the Bus itself publishes.
func TestEmbeddedListenWithATokenRefusesStrangers(t *testing.T) {
	const token = "nats-token-0123456789abcdef-01234"
	b := openEmbedded(t, natsbus.Config{Listen: "127.0.0.1:0", Token: token})
	publishAll(t, b, sampleRecords())
	u := b.ClientURL()
	if nc, err := nats.Connect(u); err == nil {
		nc.Close()
		t.Fatalf("a client without the token connected to %s", u)
	}
	if nc, err := nats.Connect(u, nats.Token("wrong-"+token)); err == nil {
		nc.Close()
		t.Fatalf("a client with a wrong token connected to %s", u)
	}
	nc, err := nats.Connect(u, nats.Token(token))
	if err != nil {
		t.Fatalf("connect with the token: %v", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	info, err := js.Stream(openCtx(t), natsbus.DefaultStream)
	if err != nil || info.CachedInfo().State.Msgs != uint64(len(sampleRecords())) {
		t.Fatalf("stream through the token: %v %v", info, err)
	}
}

func TestEmbeddedInProcessHasNoClientURL(t *testing.T) {
	b := openEmbedded(t, natsbus.Config{})
	if u := b.ClientURL(); u != "" {
		t.Errorf("client url = %q, want empty without Listen", u)
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		cfg  natsbus.Config
		ok   bool
	}{
		{"embedded defaults", natsbus.Config{StoreDir: "/tmp/x"}, true},
		{"external defaults", natsbus.Config{URL: "nats://a:4222,nats://b:4222", Replicas: 3}, true},
		{"embedded listen", natsbus.Config{StoreDir: "/tmp/x", Listen: "127.0.0.1:4333"}, true},
		{"no url no store", natsbus.Config{}, false},
		{"url and store", natsbus.Config{URL: "nats://a:4222", StoreDir: "/tmp/x"}, false},
		{"url and listen", natsbus.Config{URL: "nats://a:4222", Listen: "127.0.0.1:1"}, false},
		{"bad listen", natsbus.Config{StoreDir: "/tmp/x", Listen: "4333"}, false},
		{"short dup window", natsbus.Config{StoreDir: "/tmp/x", Duplicates: 20 * time.Second}, false},
		{"negative dup window", natsbus.Config{StoreDir: "/tmp/x", Duplicates: -time.Hour}, false},
		{"max age below window", natsbus.Config{StoreDir: "/tmp/x", MaxAge: 45 * time.Second}, false},
		{"embedded replicas", natsbus.Config{StoreDir: "/tmp/x", Replicas: 3}, false},
		{"too many replicas", natsbus.Config{URL: "nats://a:4222", Replicas: 7}, false},
		{"stream with dot", natsbus.Config{StoreDir: "/tmp/x", Stream: "ROOM.EVENTS"}, false},
		{"prefix wildcard", natsbus.Config{StoreDir: "/tmp/x", SubjectPrefix: "room.*"}, false},
		{"prefix empty token", natsbus.Config{StoreDir: "/tmp/x", SubjectPrefix: "room..events"}, false},
		{"negative publish timeout", natsbus.Config{StoreDir: "/tmp/x", PublishTimeout: -time.Second}, false},
		{"window of four publish timeouts", natsbus.Config{StoreDir: "/tmp/x", Duplicates: 40 * time.Second, PublishTimeout: 10 * time.Second}, true},
		{"window under four publish timeouts", natsbus.Config{StoreDir: "/tmp/x", Duplicates: 40 * time.Second, PublishTimeout: 11 * time.Second}, false},
		{"external sync interval", natsbus.Config{URL: "nats://a:4222", SyncInterval: time.Second}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			if tt.ok != (err == nil) {
				t.Fatalf("Validate() = %v, want ok=%v", err, tt.ok)
			}
			if err != nil && !errors.Is(err, natsbus.ErrInvalidConfig) {
				t.Fatalf("Validate() = %v, want ErrInvalidConfig", err)
			}
		})
	}
	// Every problem is reported at once.
	err := natsbus.Config{Duplicates: 20 * time.Second, Replicas: 9}.Validate()
	if n := len(err.(interface{ Unwrap() []error }).Unwrap()); n != 3 {
		t.Errorf("Validate() reported %d problems, want 3 (store dir, window, replicas): %v", n, err)
	}
	// Open refuses before touching anything.
	if _, err := natsbus.Open(context.Background(), natsbus.Config{}, testLogger(t)); !errors.Is(err, natsbus.ErrInvalidConfig) {
		t.Errorf("Open(zero config) = %v, want ErrInvalidConfig", err)
	}
}

func TestEncodeDecode(t *testing.T) {
	r := record(nastyRoom, 42, 3, "RoomGiftSent")
	data, h, err := natsbus.Encode(r)
	if err != nil {
		t.Fatal(err)
	}
	if h.Get(natsbus.HeaderMsgID) != r.EventID || h.Get(natsbus.HeaderContentType) != natsbus.ContentType ||
		h.Get(natsbus.HeaderRoomID) != r.RoomID || h.Get(natsbus.HeaderRoomVersion) != "42" ||
		h.Get(natsbus.HeaderEventType) != "RoomGiftSent" {
		t.Errorf("headers = %v", h)
	}
	ev, err := natsbus.Decode(data)
	if err != nil {
		t.Fatal(err)
	}
	if ev.GetEventId() != r.EventID || ev.GetRoomId() != r.RoomID || ev.GetRoomVersion() != 42 || ev.GetSeq() != 3 ||
		ev.GetOccurredAtMs() != r.CreatedAt.UnixMilli() || ev.GetPayloadJson() != string(r.Payload) || ev.GetEventType() != r.EventType {
		t.Errorf("decoded %v, want %+v", ev, r)
	}

	r.CreatedAt = time.Time{}
	data, _, err = natsbus.Encode(r)
	if err != nil {
		t.Fatal(err)
	}
	if ev, err := natsbus.Decode(data); err != nil || ev.GetOccurredAtMs() != 0 {
		t.Errorf("zero CreatedAt decoded as %v, %v; want occurred_at_ms 0", ev, err)
	}

	for _, mutate := range []func(*outbox.Record){
		func(r *outbox.Record) { r.EventID = "" },
		func(r *outbox.Record) { r.EventType = "" },
		func(r *outbox.Record) { r.RoomID = "" },
	} {
		bad := record("r1", 1, 0, "RoomCreated")
		mutate(&bad)
		if _, _, err := natsbus.Encode(bad); !errors.Is(err, natsbus.ErrInvalidRecord) {
			t.Errorf("Encode(%+v) = %v, want ErrInvalidRecord", bad, err)
		}
	}
	if _, err := natsbus.Decode([]byte{0xff, 0xff, 0xff}); err == nil {
		t.Error("Decode(garbage) succeeded")
	}
}

// delivered is a delivered message as RoomEvent reads it.
type delivered struct {
	jetstream.Msg
	data []byte
	h    nats.Header
}

func (m delivered) Data() []byte         { return m.data }
func (m delivered) Headers() nats.Header { return m.h }

// TestRoomEventNamesItsRoomEvenUndecodable: a delivered event decodes; a
// body that does not still yields its room and type from the headers.
func TestRoomEventNamesItsRoomEvenUndecodable(t *testing.T) {
	var b natsbus.Bus // RoomEvent reads only the message
	r := record(nastyRoom, 7, 1, "RoomUserKicked")
	data, h, err := natsbus.Encode(r)
	if err != nil {
		t.Fatal(err)
	}
	ev, err := b.RoomEvent(delivered{data: data, h: h})
	if err != nil || ev.GetEventId() != r.EventID || ev.GetRoomId() != r.RoomID {
		t.Fatalf("RoomEvent = %v, %v; want %+v", ev, err, r)
	}
	ev, err = b.RoomEvent(delivered{data: []byte{0xff, 0xff, 0xff}, h: h})
	if err == nil || ev.GetRoomId() != r.RoomID || ev.GetEventType() != "RoomUserKicked" {
		t.Fatalf("RoomEvent(garbage) = %v, %v; want an error and the room and type from the headers", ev, err)
	}
}

func TestRoomToken(t *testing.T) {
	for _, tt := range []struct{ id, token string }{
		{"r1", "r1"},
		{"plain-id_123:x/y", "plain-id_123:x/y"},
		{"room.1", "room%2E1"},
		{"a b", "a%20b"},
		{"*", "%2A"},
		{">", "%3E"},
		{"%", "%25"},
		{"%41", "%2541"},
		{"..", "%2E%2E"},
		{"é", "%C3%A9"},
		{"房间", "%E6%88%BF%E9%97%B4"},
		{"\x00\x7f\xff", "%00%7F%FF"},
		{"tab\tnl\n", "tab%09nl%0A"},
		{nastyRoom, "vip%2Eroom%20%2A%3E%25%20%E6%88%BF%E9%97%B4%091"},
	} {
		tok := natsbus.RoomToken(tt.id)
		if tok != tt.token {
			t.Errorf("RoomToken(%q) = %q, want %q", tt.id, tok, tt.token)
		}
		checkToken(t, tt.id)
	}
	for _, bad := range []string{"%", "%4", "%zz", "%41", "%2e", "a.b", "a b", "a*", ">", "é"} {
		if id, err := natsbus.ParseRoomToken(bad); !errors.Is(err, natsbus.ErrInvalidToken) {
			t.Errorf("ParseRoomToken(%q) = %q, %v; want ErrInvalidToken", bad, id, err)
		}
	}
}

// checkToken asserts the round trip and that the token makes a subject that
// is one literal token: no separator, wildcard, space or control byte.
func checkToken(tb testing.TB, id string) {
	tb.Helper()
	tok := natsbus.RoomToken(id)
	back, err := natsbus.ParseRoomToken(tok)
	if err != nil || back != id {
		tb.Fatalf("ParseRoomToken(RoomToken(%q)) = %q, %v", id, back, err)
	}
	if id == "" {
		return
	}
	subj := "room.events.RoomGiftSent." + tok
	if !server.IsValidLiteralSubject(subj) || strings.Count(subj, ".") != 3 {
		tb.Fatalf("subject %q for room %q is not four literal tokens", subj, id)
	}
	for i := 0; i < len(tok); i++ {
		if c := tok[i]; c <= ' ' || c >= 0x7f {
			tb.Fatalf("token %q for room %q has byte %#x", tok, id, c)
		}
	}
}

func FuzzRoomToken(f *testing.F) {
	for _, s := range []string{"", "r1", nastyRoom, "%", "%2E", "a.b.c", "\xff\x00", "房间>*"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) { checkToken(t, id) })
}

// benchRecords spreads n records over rooms rooms, versions rising per room,
// with a payload of a realistic size (~120 bytes).
func benchRecords(n, rooms int) []outbox.Record {
	recs := make([]outbox.Record, n)
	for i := range recs {
		room := "room-" + strconv.Itoa(i%rooms)
		v := int64(i/rooms + 1)
		recs[i] = outbox.Record{
			EventID:     room + "/" + strconv.FormatInt(v, 10) + "/0",
			RoomID:      room,
			RoomVersion: v,
			EventType:   "RoomGiftSent",
			Payload:     []byte(`{"sender_user_id":"u123456","receiver_user_ids":["u654321"],"gift_id":"rose","count":1,"total_coins":10}`),
			CreatedAt:   time.UnixMilli(1_750_000_000_000 + int64(i)),
		}
	}
	return recs
}

func benchTargets(b *testing.B, run func(*testing.B, func(testing.TB) *natsbus.Bus)) {
	b.Run("embedded", func(b *testing.B) {
		run(b, func(tb testing.TB) *natsbus.Bus { return openEmbedded(tb, natsbus.Config{}) })
	})
	b.Run("external", func(b *testing.B) {
		run(b, openExternal)
	})
}

// BenchmarkPublish is the relay's simplest loop: one sync publish, one ack.
func BenchmarkPublish(b *testing.B) {
	benchTargets(b, func(b *testing.B, open func(testing.TB) *natsbus.Bus) {
		bus := open(b)
		recs := benchRecords(b.N, 1000)
		ctx := context.Background()
		b.ResetTimer()
		for _, r := range recs {
			if err := bus.Publish(ctx, r); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
	})
}

// BenchmarkPublishAsync is the ceiling: BareAsyncPublish with 4096 in flight.
func BenchmarkPublishAsync(b *testing.B) {
	benchTargets(b, func(b *testing.B, open func(testing.TB) *natsbus.Bus) {
		bus := open(b)
		recs := benchRecords(b.N, 1000)
		b.ResetTimer()
		d, err := natsbus.BareAsyncPublish(context.Background(), bus, recs, 4096)
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		b.ReportMetric(float64(b.N)/d.Seconds(), "msgs/s")
	})
}

// BenchmarkPublishInOrderOneRoom publishes one room's rows with
// PublishInOrder on the embedded broker, rows at a time, as a busy room's
// commits hand them to the relay: below minRun rows one at a time, each
// after the ack of the one before; from minRun on as fast batches. It
// reports the process's CPU (the client and the broker) per row.
func BenchmarkPublishInOrderOneRoom(b *testing.B) {
	for _, rows := range []int{4, 12, 29, 60, 256} {
		b.Run(fmt.Sprintf("rows=%d", rows), func(b *testing.B) {
			bus := openEmbedded(b, natsbus.Config{FastBatches: true})
			recs := benchRecords(b.N*rows, 1)
			cpu0 := processCPU()
			b.ResetTimer()
			for i := range b.N {
				if n, err := bus.PublishInOrder(context.Background(), recs[i*rows:(i+1)*rows], nil); err != nil || n != rows {
					b.Fatalf("%d of %d rows, %v", n, rows, err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64((processCPU()-cpu0).Microseconds())/float64(b.N*rows), "cpu-µs/row")
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*rows), "µs/row")
		})
	}
}

// BenchmarkPublishInOrderManyRooms publishes the rows of 256 rooms with
// PublishInOrder on the embedded broker, a row at a time per room and all
// rooms at once, as a relay's chains do when each commit of a room hands it
// a row: without fast batches each row goes alone, with them the rooms'
// rows share batches. It reports the process's CPU per row.
func BenchmarkPublishInOrderManyRooms(b *testing.B) {
	const rooms = 256
	for _, fast := range []bool{false, true} {
		b.Run(fmt.Sprintf("fast_batches=%v", fast), func(b *testing.B) {
			bus := openEmbedded(b, natsbus.Config{FastBatches: fast})
			recs := benchRecords(max(b.N, rooms), rooms)
			cpu0 := processCPU()
			b.ResetTimer()
			var wg sync.WaitGroup
			for r := range rooms {
				wg.Go(func() {
					for i := r; i < len(recs); i += rooms {
						if n, err := bus.PublishInOrder(context.Background(), recs[i:i+1], nil); err != nil || n != 1 {
							b.Errorf("row %d: %d, %v", i, n, err)
							return
						}
					}
				})
			}
			wg.Wait()
			b.StopTimer()
			b.ReportMetric(float64((processCPU()-cpu0).Microseconds())/float64(len(recs)), "cpu-µs/row")
			b.ReportMetric(float64(len(recs))/b.Elapsed().Seconds(), "rows/s")
		})
	}
}

// processCPU is the CPU time the process has used, user and system.
func processCPU() time.Duration {
	var u syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &u)
	return time.Duration(u.Utime.Nano() + u.Stime.Nano())
}

func TestOpenFailuresLeaveNothingRunning(t *testing.T) {
	// A store dir that is a file: JetStream cannot start; Open says so and
	// shuts the server down (goleak checks the rest).
	file := t.TempDir() + "/not-a-dir"
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if b, err := natsbus.Open(openCtx(t), natsbus.Config{StoreDir: file}, testLogger(t)); err == nil {
		_ = b.Close()
		t.Error("Open on a file as store dir succeeded")
	}
	// Nobody listens on port 1: the first connect fails fast.
	if b, err := natsbus.Open(openCtx(t), natsbus.Config{URL: "nats://user:secret@127.0.0.1:1"}, testLogger(t)); err == nil {
		_ = b.Close()
		t.Error("Open on a closed port succeeded")
	} else if strings.Contains(err.Error(), "secret") {
		t.Errorf("error leaks the password: %v", err)
	}
}
