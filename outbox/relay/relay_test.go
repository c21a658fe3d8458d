package relay_test

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"hyapp/room-service/internal/poll"
	"hyapp/room-service/internal/servicetest"
	"hyapp/room-service/lease"
	"hyapp/room-service/outbox"
	"hyapp/room-service/outbox/natsbus"
	"hyapp/room-service/outbox/relay"
	"hyapp/room-service/store"
	"hyapp/room-service/store/sqlite"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var quiet = slog.New(slog.DiscardHandler)

func openRepo(t testing.TB) *sqlite.DB {
	t.Helper()
	db, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "room.db"), sqlite.Options{Synchronous: "NORMAL"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

func openBus(t testing.TB, cfg natsbus.Config) *natsbus.Bus {
	t.Helper()
	if cfg.URL == "" && cfg.StoreDir == "" {
		cfg.StoreDir = t.TempDir()
	}
	b, err := natsbus.Open(context.Background(), cfg, quiet)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// external opens a bus on the real NATS server on this machine, with a stream
// of its own, deleted when the test ends.
func external(t *testing.T) *natsbus.Bus {
	t.Helper()
	servicetest.Need(t, "NATS", "127.0.0.1:4222")
	id := rand.Text()[:10]
	b := openBus(t, natsbus.Config{URL: "nats://127.0.0.1:4222", Stream: "rs_relay_" + id, SubjectPrefix: "rsrelay" + id + ".events"})
	t.Cleanup(func() { _ = b.JetStream().DeleteStream(context.Background(), b.Stream()) })
	return b
}

// seed commits n commands of two rows each for each room, in the room's own
// order, under a new claim of the room, and returns each room's rows.
func seed(t testing.TB, repo store.Repository, rooms []string, n int) (committed [][]outbox.Record) {
	t.Helper()
	ctx := context.Background()
	for _, r := range rooms {
		_, found, err := repo.GetRoomMeta(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		if !found {
			if err := repo.SaveRoomMeta(ctx, store.RoomMeta{RoomID: r, OwnerUserID: 1, SeatCount: 8}); err != nil {
				t.Fatal(err)
			}
		}
		claim, err := repo.ClaimRoom(ctx, r, "test")
		if err != nil {
			t.Fatal(err)
		}
		b := store.Batch{RoomID: r, OwnerEpoch: claim.Epoch, BaseVersion: claim.HeadVersion}
		for i := range n {
			v := claim.HeadVersion + int64(i) + 1
			b.Commands = append(b.Commands, store.CommandRecord{RoomID: r, RoomVersion: v, CommandID: fmt.Sprint("c", v), CommandType: "JoinRoom", Payload: []byte("{}"), Replayable: true})
			for seq := range int32(2) {
				b.Outbox = append(b.Outbox, outbox.Record{
					EventID: fmt.Sprintf("%s/%d/%d", r, v, seq), RoomID: r, RoomVersion: v, Seq: seq,
					EventType: "RoomUserJoined", Payload: fmt.Appendf(nil, `{"v":%d}`, v), CreatedAt: time.Now(),
				})
			}
		}
		if res, err := repo.CommitBatches(ctx, []store.Batch{b}); err != nil || res[0] != nil {
			t.Fatalf("seed %s: %v %v", r, err, res)
		}
		committed = append(committed, b.Outbox)
	}
	return committed
}

func rooms(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%d", prefix, i)
	}
	return out
}

// fastConfig retries quickly so tests do not wait on production backoffs.
func fastConfig() relay.Config {
	return relay.Config{MaxAttempts: 1000, BackoffMin: time.Millisecond, BackoffMax: 5 * time.Millisecond, PollInterval: 5 * time.Millisecond, RoomBatch: 7}
}

func runRelay(t testing.TB, r *relay.Relay) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.Run(ctx)
	}()
	stopped := false
	stop = func() {
		if !stopped {
			stopped = true
			cancel()
			<-done
		}
	}
	t.Cleanup(stop)
	return stop
}

func pending(t testing.TB, repo store.Repository) int {
	st, err := repo.OutboxStats(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	return int(st.Pending)
}

// consume reads the whole stream in stream order and checks it as a
// consumer would: no event twice, and each room's events in order. It
// reads through a pull subscription that fetches ahead (one fetch per
// message took 10 s for 5,440 messages under the race detector, and over
// 30 s on a loaded machine); each message may take 10 s to come.
func consume(t testing.TB, b *natsbus.Bus, want int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := b.JetStream().OrderedConsumer(ctx, b.Stream(), jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	it, err := c.Messages()
	if err != nil {
		t.Fatal(err)
	}
	defer it.Stop()
	last := map[string][2]int64{}
	seen := map[string]bool{}
	for i := range want {
		msg, err := it.Next(jetstream.NextMaxWait(10 * time.Second))
		if err != nil {
			t.Fatalf("message %d of %d: %v", i, want, err)
		}
		ev, err := natsbus.Decode(msg.Data())
		if err != nil {
			t.Fatal(err)
		}
		if seen[ev.GetEventId()] {
			t.Fatalf("event %s stored twice", ev.GetEventId())
		}
		seen[ev.GetEventId()] = true
		pos := [2]int64{ev.GetRoomVersion(), int64(ev.GetSeq())}
		if p, ok := last[ev.GetRoomId()]; ok && (pos[0] < p[0] || pos[0] == p[0] && pos[1] <= p[1]) {
			t.Fatalf("room %s: event %v after %v", ev.GetRoomId(), pos, p)
		}
		last[ev.GetRoomId()] = pos
	}
	ictx, icancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer icancel()
	info, err := b.JetStream().Stream(ictx, b.Stream())
	if err != nil {
		t.Fatal(err)
	}
	if got := info.CachedInfo().State.Msgs; got != uint64(want) {
		t.Fatalf("the stream holds %d messages, want %d", got, want)
	}
}

// flaky fails some publishes: before sending (a refused message), after
// sending (a lost acknowledgement: the broker has it), or as an outage.
type flaky struct {
	next     relay.Publisher
	n        atomic.Int64
	inFlight sync.Map // room -> *atomic.Int32
	overlaps atomic.Int64
}

func (f *flaky) Publish(ctx context.Context, r outbox.Record) error {
	v, _ := f.inFlight.LoadOrStore(r.RoomID, new(atomic.Int32))
	if v.(*atomic.Int32).Add(1) > 1 {
		f.overlaps.Add(1)
	}
	defer v.(*atomic.Int32).Add(-1)
	switch f.n.Add(1) % 7 {
	case 2:
		return errors.New("injected: message refused")
	case 4:
		if err := f.next.Publish(ctx, r); err != nil {
			return err
		}
		return errors.New("injected: acknowledgement lost")
	case 6:
		return fmt.Errorf("injected: %w", outbox.ErrTransient)
	}
	return f.next.Publish(ctx, r)
}

// flakyInOrder is flaky for the relay's in-order path: a room's rows go
// to the bus's PublishInOrder up to the first row that fails, which then
// fails as flaky's Publish would fail it.
type flakyInOrder struct {
	*flaky
	next relay.InOrderPublisher
}

func (f flakyInOrder) PublishInOrder(ctx context.Context, rows []outbox.Record, each func(i int) bool) (int, error) {
	v, _ := f.inFlight.LoadOrStore(rows[0].RoomID, new(atomic.Int32))
	if v.(*atomic.Int32).Add(1) > 1 {
		f.overlaps.Add(1)
	}
	defer v.(*atomic.Int32).Add(-1)
	k, fault := 0, int64(0)
	for ; k < len(rows); k++ {
		if fault = f.n.Add(1) % 7; fault == 2 || fault == 4 || fault == 6 {
			break
		}
	}
	n, err := f.next.PublishInOrder(ctx, rows[:k], each)
	if err != nil || n < k || k == len(rows) {
		return n, err
	}
	switch fault {
	case 2:
		return k, errors.New("injected: message refused")
	case 4:
		if err := f.next.Publish(ctx, rows[k]); err != nil {
			return k, err
		}
		return k, errors.New("injected: acknowledgement lost")
	default:
		return k, fmt.Errorf("injected: %w", outbox.ErrTransient)
	}
}

// injected are the failing publishers over bus: row by row, and in order.
func injected(bus *natsbus.Bus) map[string]func() (relay.Publisher, *flaky) {
	return map[string]func() (relay.Publisher, *flaky){
		"row by row": func() (relay.Publisher, *flaky) { f := &flaky{next: bus}; return f, f },
		"in order":   func() (relay.Publisher, *flaky) { f := &flaky{next: bus}; return flakyInOrder{f, bus}, f },
	}
}

func testOrderUnderFailures(t *testing.T, bus *natsbus.Bus, pub relay.Publisher, f *flaky) {
	repo := openRepo(t)
	ids := rooms("order", 12)
	seed(t, repo, ids, 20)
	runRelay(t, relay.New(repo, pub, relay.LeaseGate{Lease: lease.NewLocal()}, fastConfig(), relay.Metrics{}, quiet))
	seed(t, repo, ids, 10) // late commits while the relay runs
	poll.Until(t, 60*time.Second, "every row published", poll.Bool(func() bool { return pending(t, repo) == 0 }))
	consume(t, bus, 12*30*2)
	if f.overlaps.Load() != 0 {
		t.Fatalf("%d publishes overlapped another of the same room", f.overlaps.Load())
	}
}

func TestRelayKeepsRoomOrderUnderInjectedFailures(t *testing.T) {
	for _, path := range []string{"row by row", "in order"} {
		t.Run(path+"/embedded", func(t *testing.T) {
			bus := openBus(t, natsbus.Config{})
			pub, f := injected(bus)[path]()
			testOrderUnderFailures(t, bus, pub, f)
		})
		t.Run(path+"/external", func(t *testing.T) {
			bus := external(t)
			pub, f := injected(bus)[path]()
			testOrderUnderFailures(t, bus, pub, f)
		})
	}
}

// neverMarks is storage whose marks are lost: a relay over it publishes and
// acknowledges everything but dies, in effect, before every mark.
type neverMarks struct{ store.Repository }

func (neverMarks) MarkOutboxPublishedBatch(context.Context, []string) error {
	return errors.New("injected: the process died before the mark")
}

// TestRelayKilledBetweenAckAndMarkStoresNoDuplicate: every row is published
// and acknowledged but never marked (as if the relay died between the two
// each time); the next relay publishes all of them again, and the stream
// still holds each event once.
func TestRelayKilledBetweenAckAndMarkStoresNoDuplicate(t *testing.T) {
	repo := openRepo(t)
	bus := openBus(t, natsbus.Config{})
	ids := rooms("kill", 5)
	seed(t, repo, ids, 20)
	var acked atomic.Int64
	first := relay.New(neverMarks{repo}, &countAcks{next: bus, n: &acked}, relay.LeaseGate{Lease: lease.NewLocal()}, fastConfig(), relay.Metrics{}, quiet)
	stop := runRelay(t, first)
	poll.Until(t, 30*time.Second, "every row acknowledged once", poll.Bool(func() bool { return acked.Load() >= 200 }))
	stop()
	if left := pending(t, repo); left != 200 {
		t.Fatalf("%d rows pending; every acknowledged row should still be unmarked", left)
	}
	runRelay(t, relay.New(repo, bus, relay.LeaseGate{Lease: lease.NewLocal()}, fastConfig(), relay.Metrics{}, quiet))
	poll.Until(t, 30*time.Second, "every row published", poll.Bool(func() bool { return pending(t, repo) == 0 }))
	consume(t, bus, 200)
}

// positioned is a bus whose publishes are counted, and which says which
// event of a room the stream holds last, or fails to when broken.
type positioned struct {
	bus       *natsbus.Bus
	published atomic.Int64
	broken    bool
}

func (p *positioned) Publish(ctx context.Context, r outbox.Record) error {
	p.published.Add(1)
	return p.bus.Publish(ctx, r)
}

func (p *positioned) LastOfRoom(ctx context.Context, roomID string) (string, bool, error) {
	if p.broken {
		return "", false, errors.New("injected: the broker cannot say")
	}
	return p.bus.LastOfRoom(ctx, roomID)
}

// TestRowsTheBrokerHoldsAreMarkedNotPublished: a relay published the first
// rows of some rooms and died before marking them (for one room all of
// them, for one none). The next relay publishes only the rest, whatever
// the broker's duplicate window: the rows the stream holds are marked. A
// room whose requeued row is missing from the stream, and every room when
// the broker cannot say, have all their rows go again; the window drops
// the duplicates.
func TestRowsTheBrokerHoldsAreMarkedNotPublished(t *testing.T) {
	for _, broken := range []bool{false, true} {
		t.Run(fmt.Sprintf("broken=%v", broken), func(t *testing.T) {
			repo := openRepo(t)
			bus := openBus(t, natsbus.Config{})
			ids := rooms("back", 4)
			committed := seed(t, repo, ids, 10) // 20 rows a room
			out := 0
			for i, rows := range committed {
				k := []int{0, 7, 13, 20}[i]
				for _, r := range rows[:k] {
					if err := bus.Publish(context.Background(), r); err != nil {
						t.Fatal(err)
					}
				}
				out += k
			}
			// A fifth room's first row went dead, later rows went out, and
			// an operator requeued it: it is not in the stream, though a
			// later row is, so all of that room's rows go again.
			requeued := seed(t, repo, []string{"back-requeued"}, 10)[0]
			if dead, err := repo.FailOutbox(context.Background(), requeued[0].EventID, "injected: refused", time.Now(), 1); err != nil || !dead {
				t.Fatalf("fail the first row: dead %v, %v", dead, err)
			}
			for _, r := range requeued[1:5] {
				if err := bus.Publish(context.Background(), r); err != nil {
					t.Fatal(err)
				}
			}
			if n, err := repo.RequeueDeadOutbox(context.Background(), ""); err != nil || n != 1 {
				t.Fatalf("requeue: %d, %v", n, err)
			}
			pub := &positioned{bus: bus, broken: broken}
			var found atomic.Int64
			m := relay.Metrics{Found: func(n int) { found.Add(int64(n)) }}
			runRelay(t, relay.New(repo, pub, relay.LeaseGate{Lease: lease.NewLocal()}, relay.Config{PollInterval: 5 * time.Millisecond}, m, quiet))
			poll.Until(t, 30*time.Second, "every row marked", poll.Bool(func() bool { return pending(t, repo) == 0 }))
			for _, room := range append(ids, "back-requeued") {
				if n := stored(t, bus, room); n != 20 {
					t.Errorf("the stream holds %d events of room %s, want its 20", n, room)
				}
			}
			wantPublished, wantFound := int64(100-out), int64(out)
			if broken {
				wantPublished, wantFound = 100, 0
			}
			if got := pub.published.Load(); got != wantPublished {
				t.Errorf("the relay published %d rows, want %d", got, wantPublished)
			}
			if got := found.Load(); got != wantFound {
				t.Errorf("the relay found %d rows in the stream, want %d", got, wantFound)
			}
		})
	}
}

// stored is how many messages the stream holds for room.
func stored(t testing.TB, b *natsbus.Bus, room string) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := b.JetStream().Stream(ctx, b.Stream())
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(b.RoomFilter(room)))
	if err != nil {
		t.Fatal(err)
	}
	var n uint64
	for _, c := range info.State.Subjects {
		n += c
	}
	return n
}

// countAcks counts acknowledged publishes.
type countAcks struct {
	next relay.Publisher
	n    *atomic.Int64
}

func (c *countAcks) Publish(ctx context.Context, r outbox.Record) error {
	err := c.next.Publish(ctx, r)
	if err == nil {
		c.n.Add(1)
	}
	return err
}

// refuse fails every publish of one event, until fixed.
type refuse struct {
	next  relay.Publisher
	bad   string
	fixed *atomic.Bool // nil: never
}

func (r refuse) Publish(ctx context.Context, rec outbox.Record) error {
	if rec.EventID == r.bad && (r.fixed == nil || !r.fixed.Load()) {
		return errors.New("injected: poison")
	}
	return r.next.Publish(ctx, rec)
}

func TestPoisonRowGoesDeadWithoutBlockingOthers(t *testing.T) {
	repo := openRepo(t)
	bus := openBus(t, natsbus.Config{})
	ids := rooms("poison", 4)
	seed(t, repo, ids, 10)
	cfg := fastConfig()
	cfg.MaxAttempts = 3
	var dead atomic.Int64
	runRelay(t, relay.New(repo, refuse{next: bus, bad: "poison-0/3/1"}, relay.LeaseGate{Lease: lease.NewLocal()}, cfg,
		relay.Metrics{Dead: func() { dead.Add(1) }}, quiet))
	poll.Until(t, 30*time.Second, "every other row published", poll.Bool(func() bool { return pending(t, repo) == 0 }))
	consume(t, bus, 4*20-1)
	st, err := repo.OutboxStats(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	if st.Dead["RoomUserJoined"] != 1 || dead.Load() != 1 {
		t.Fatalf("dead rows %v (metric %d), want exactly the poison row", st.Dead, dead.Load())
	}
	// An operator requeues it once the cause is fixed; it goes out then.
	if n, err := repo.RequeueDeadOutbox(context.Background(), ""); err != nil || n != 1 {
		t.Fatalf("requeue: %d %v", n, err)
	}
}

func TestOwnerRelayAndSweeperNeverPublishOneRoomAtOnce(t *testing.T) {
	repo := openRepo(t)
	bus := openBus(t, natsbus.Config{})
	ids := rooms("sweep", 8)
	seed(t, repo, ids, 25)
	gate := relay.LeaseGate{Lease: lease.NewLocal()} // one lease table, as nodes share one Redis
	pub := &watch{next: bus}
	runRelay(t, relay.New(repo, pub, gate, fastConfig(), relay.Metrics{}, quiet))
	runRelay(t, relay.New(repo, pub, gate, fastConfig(), relay.Metrics{}, quiet))
	seed(t, repo, ids, 25)
	poll.Until(t, 30*time.Second, "every row published", poll.Bool(func() bool { return pending(t, repo) == 0 }))
	consume(t, bus, 8*50*2)
	if pub.overlaps.Load() != 0 {
		t.Fatalf("two relays published one room at once %d times", pub.overlaps.Load())
	}
}

// watch counts publishes of one room that overlap.
type watch struct {
	next     relay.Publisher
	inFlight sync.Map
	overlaps atomic.Int64
}

func (w *watch) Publish(ctx context.Context, r outbox.Record) error {
	v, _ := w.inFlight.LoadOrStore(r.RoomID, new(atomic.Int32))
	if v.(*atomic.Int32).Add(1) > 1 {
		w.overlaps.Add(1)
	}
	defer v.(*atomic.Int32).Add(-1)
	return w.next.Publish(ctx, r)
}

// TestBrokerOutageLosesNothing stops the broker while rows are being
// published and committed, starts it again, and checks the backlog drains
// with nothing lost, nothing doubled and every room in order.
func TestBrokerOutageLosesNothing(t *testing.T) {
	dir := t.TempDir()
	start := func(port int) *server.Server {
		srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: port, JetStream: true, StoreDir: dir, NoSigs: true, NoLog: true})
		if err != nil {
			t.Fatal(err)
		}
		srv.Start()
		if !srv.ReadyForConnections(10 * time.Second) {
			t.Fatal("nats did not start")
		}
		return srv
	}
	srv := start(-1)
	port := srv.Addr().(*net.TCPAddr).Port
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	bus := openBus(t, natsbus.Config{URL: fmt.Sprintf("nats://127.0.0.1:%d", port), PublishTimeout: 500 * time.Millisecond})
	repo := openRepo(t)
	ids := rooms("outage", 6)
	seed(t, repo, ids, 20)
	var broker atomic.Int64
	runRelay(t, relay.New(repo, bus, relay.LeaseGate{Lease: lease.NewLocal()}, fastConfig(),
		relay.Metrics{Failed: func(transient bool) {
			if transient {
				broker.Add(1)
			}
		}}, quiet))
	poll.Until(t, 30*time.Second, "some rows published", poll.Bool(func() bool { return pending(t, repo) < 240 }))

	srv.Shutdown()
	srv.WaitForShutdown()
	seed(t, repo, ids, 20) // the room goes on committing while the broker is away
	poll.Until(t, 30*time.Second, "the relay to notice the outage", poll.Bool(func() bool { return broker.Load() > 0 }))
	if left := pending(t, repo); left == 0 {
		t.Fatal("everything was published during the outage")
	}
	srv = start(port)
	poll.Until(t, 60*time.Second, "the backlog to drain", poll.Bool(func() bool { return pending(t, repo) == 0 }))
	consume(t, bus, 6*40*2)
	st, err := repo.OutboxStats(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Dead) != 0 {
		t.Fatalf("the outage sent rows dead: %v", st.Dead)
	}
}

// losingGate hands out holds; the first one is lost after the publisher saw
// three messages of it.
type losingGate struct {
	mu    sync.Mutex
	holds int
	lost  chan struct{}
}

type hold struct{ lost chan struct{} }

func (h hold) Lost() <-chan struct{} { return h.lost }
func (h hold) Release()              {}
func (h hold) Fresh() bool           { return true }
func (h hold) Check(context.Context) error {
	select {
	case <-h.lost:
		return lease.ErrLost
	default:
		return nil
	}
}

func (g *losingGate) Acquire(context.Context, string) (relay.Held, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.holds++
	if g.holds == 1 {
		return hold{lost: g.lost}, true
	}
	return hold{lost: make(chan struct{})}, true
}

// afterLoss records publishes made after the first hold was lost while that
// hold's chain still ran.
type afterLoss struct {
	next relay.Publisher
	gate *losingGate
	n    atomic.Int64
	late atomic.Int64
}

func (a *afterLoss) Publish(ctx context.Context, r outbox.Record) error {
	a.gate.mu.Lock()
	holds := a.gate.holds
	a.gate.mu.Unlock()
	if holds == 1 {
		select {
		case <-a.gate.lost:
			a.late.Add(1)
		default:
		}
		if a.n.Add(1) == 3 {
			close(a.gate.lost)
		}
	}
	return a.next.Publish(ctx, r)
}

func TestRelayStopsPublishingARoomWhoseGateIsLost(t *testing.T) {
	repo := openRepo(t)
	bus := openBus(t, natsbus.Config{})
	seed(t, repo, []string{"lost"}, 10)
	gate := &losingGate{lost: make(chan struct{})}
	pub := &afterLoss{next: bus, gate: gate}
	cfg := fastConfig()
	cfg.RoomBatch = 100
	runRelay(t, relay.New(repo, pub, gate, cfg, relay.Metrics{}, quiet))
	poll.Until(t, 30*time.Second, "every row published", poll.Bool(func() bool { return pending(t, repo) == 0 }))
	if pub.late.Load() != 0 {
		t.Fatalf("%d publishes after the gate was lost", pub.late.Load())
	}
	consume(t, bus, 20)
}

// scans counts the relay's scans of the table.
type scans struct {
	*sqlite.DB
	n atomic.Int64
}

func (s *scans) ListOutboxHeads(ctx context.Context, afterID int64, limit int) ([]outbox.Record, error) {
	s.n.Add(1)
	return s.DB.ListOutboxHeads(ctx, afterID, limit)
}

// TestCommittedRoomsGoOutWithoutAScan: rows handed over after their commits
// are published in order without the relay scanning the table; rows it was
// not handed wait for a scan (here Wake, as an operator's requeue does),
// which finds them.
func TestCommittedRoomsGoOutWithoutAScan(t *testing.T) {
	repo := &scans{DB: openRepo(t)}
	bus := openBus(t, natsbus.Config{})
	cfg := fastConfig()
	cfg.PollInterval = time.Hour // only the first scan, at start
	r := relay.New(repo, bus, relay.LeaseGate{Lease: lease.NewLocal()}, cfg, relay.Metrics{}, quiet)
	runRelay(t, r)
	poll.Until(t, 10*time.Second, "the first scan", poll.Bool(func() bool { return repo.n.Load() == 1 }))

	told := rooms("told", 20)
	for range 3 {
		for _, rows := range seed(t, repo, told, 5) {
			r.Committed(rows)
		}
	}
	poll.Until(t, 30*time.Second, "the rooms handed over published", poll.Bool(func() bool { return pending(t, repo.DB) == 0 }))
	consume(t, bus, 20*3*5*2)
	if n := repo.n.Load(); n != 1 {
		t.Fatalf("%d scans for rooms handed over, want only the first", n)
	}

	seed(t, repo, []string{"untold"}, 4)
	r.Wake()
	poll.Until(t, 30*time.Second, "the scan finds the rows nobody named", poll.Bool(func() bool { return pending(t, repo.DB) == 0 }))
	if n := repo.n.Load(); n != 2 {
		t.Fatalf("%d scans, want 2", n)
	}
}

// owner commits a room's commands the way its cell does, under one claim,
// and hands each commit's rows to the relay like the cell does.
type owner struct {
	repo  store.Repository
	room  string
	epoch int64
	head  int64
}

// claim takes the room as a new owner (a new epoch), as a node that loads it.
func claim(t testing.TB, repo store.Repository, room string) *owner {
	t.Helper()
	seed(t, repo, []string{room}, 0)
	c, err := repo.ClaimRoom(context.Background(), room, "test")
	if err != nil {
		t.Fatal(err)
	}
	return &owner{repo: repo, room: room, epoch: c.Epoch, head: c.HeadVersion}
}

// commit commits n commands of two rows each and returns the rows.
func (o *owner) commit(t testing.TB, n int) []outbox.Record {
	t.Helper()
	b := store.Batch{RoomID: o.room, OwnerEpoch: o.epoch, BaseVersion: o.head}
	for range n {
		o.head++
		v := o.head
		b.Commands = append(b.Commands, store.CommandRecord{RoomID: o.room, RoomVersion: v, CommandID: fmt.Sprint("c", v), CommandType: "JoinRoom", Payload: []byte("{}"), Replayable: true})
		for seq := range int32(2) {
			b.Outbox = append(b.Outbox, outbox.Record{
				EventID: fmt.Sprintf("%s/%d/%d", o.room, v, seq), RoomID: o.room, RoomVersion: v, Seq: seq, OwnerEpoch: o.epoch,
				EventType: "RoomUserJoined", Payload: fmt.Appendf(nil, `{"v":%d}`, v), Status: outbox.StatusPending, CreatedAt: time.Now(),
			})
		}
	}
	if res, err := o.repo.CommitBatches(context.Background(), []store.Batch{b}); err != nil || res[0] != nil {
		t.Fatalf("commit %s: %v %v", o.room, err, res)
	}
	return b.Outbox
}

// reads counts the relay's reads of rooms' rows from the table, and its scans.
type reads struct {
	*sqlite.DB
	n, scans atomic.Int64
}

func (s *reads) ListOutboxHeads(ctx context.Context, afterID int64, limit int) ([]outbox.Record, error) {
	s.scans.Add(1)
	return s.DB.ListOutboxHeads(ctx, afterID, limit)
}

func (s *reads) ListRoomOutbox(ctx context.Context, roomID string, limit int) ([]outbox.Record, error) {
	s.n.Add(1)
	return s.DB.ListRoomOutbox(ctx, roomID, limit)
}

// taken counts the rows chains took, by source.
func taken(memory, table *atomic.Int64) relay.Metrics {
	return relay.Metrics{Read: func(fromMemory bool, n int) {
		if fromMemory {
			memory.Add(int64(n))
		} else {
			table.Add(int64(n))
		}
	}}
}

// TestCommittedRowsGoOutWithoutReadingTheTable: the rows a room's commits
// hand over are published from memory, in order. A room created here is
// never read from the table; a room that had rows before (a restart) is
// read once, by its first chain, and never again.
func TestCommittedRowsGoOutWithoutReadingTheTable(t *testing.T) {
	repo := &reads{DB: openRepo(t)}
	bus := openBus(t, natsbus.Config{})
	cfg := fastConfig()
	cfg.PollInterval = time.Hour // no scan after the first
	// A room's one read takes all its rows, however many commits came
	// before it: a read cut short leaves the room to be read again.
	cfg.RoomBatch = 1000
	var memory, table atomic.Int64
	r := relay.New(repo, bus, relay.LeaseGate{Lease: lease.NewLocal()}, cfg, taken(&memory, &table), quiet)
	created := make([]*owner, 10) // their first commit is handed over
	for i := range created {
		created[i] = claim(t, repo, fmt.Sprintf("new-%d", i))
	}
	older := make([]*owner, 20) // they have a commit from before the relay started
	for i := range older {
		older[i] = claim(t, repo, fmt.Sprintf("old-%d", i))
		older[i].commit(t, 1)
	}
	runRelay(t, r)
	poll.Until(t, 30*time.Second, "the first scan publishes the rows from before", poll.Bool(func() bool { return pending(t, repo.DB) == 0 }))
	before, fromTable := repo.n.Load(), table.Load()

	const rounds, perCommit = 30, 3
	for range rounds {
		for _, o := range append(created[:len(created):len(created)], older...) {
			r.Committed(o.commit(t, perCommit))
		}
	}
	poll.Until(t, 30*time.Second, "every row published", poll.Bool(func() bool { return pending(t, repo.DB) == 0 }))
	total := (len(created) + len(older)) * rounds * perCommit * 2
	consume(t, bus, total+len(older)*2)
	if n := repo.n.Load() - before; n != int64(len(older)) {
		t.Fatalf("the table was read %d times for %d rooms that had rows before, want once each (and never for the %d created)",
			n, len(older), len(created))
	}
	if m, tb := memory.Load(), table.Load()-fromTable; m+tb != int64(total) || m < int64(total)/2 {
		t.Fatalf("rows taken: %d from memory, %d from the table; want %d in all, most from memory", m, tb, total)
	}
	t.Logf("%d rows from memory, %d from the table", memory.Load(), table.Load()-fromTable)
}

// trustedRoom runs a relay that scans only at start and on Wake (rows never
// look old to it) and hands it the rows of one owner's commits of
// perCommit commands each, one commit at a time, until it publishes them
// from memory.
func trustedRoom(t *testing.T, roomID string, commits, perCommit int) (*sqlite.DB, *natsbus.Bus, *relay.Relay) {
	t.Helper()
	repo := openRepo(t)
	bus := openBus(t, natsbus.Config{})
	cfg := fastConfig()
	cfg.PollInterval = time.Hour
	var memory, table atomic.Int64
	r := relay.New(repo, bus, relay.LeaseGate{Lease: lease.NewLocal()}, cfg, taken(&memory, &table), quiet)
	runRelay(t, r)
	here := claim(t, repo, roomID)
	for range commits {
		r.Committed(here.commit(t, perCommit))
		poll.Until(t, 30*time.Second, "the first owner's rows published", poll.Bool(func() bool { return pending(t, repo) == 0 }))
	}
	if memory.Load() == 0 {
		t.Fatal("no row went out from memory")
	}
	return repo, bus, r
}

// TestMemoryIsNotTrustedAcrossOwners: rows another owner (another node)
// committed while this relay trusted its memory of the room are published
// before the rows of this node's next claim, which the relay gets in memory.
func TestMemoryIsNotTrustedAcrossOwners(t *testing.T) {
	repo, bus, r := trustedRoom(t, "moved", 5, 2)
	other := claim(t, repo, "moved") // another node: its relay is not this one
	other.commit(t, 3)
	back := claim(t, repo, "moved")
	for range 4 {
		r.Committed(back.commit(t, 2))
	}
	poll.Until(t, 30*time.Second, "every row published", poll.Bool(func() bool { return pending(t, repo) == 0 }))
	consume(t, bus, (5*2+3+4*2)*2)
}

// TestCommittedRowsKeepOrderUnderInjectedFailures: rows handed over in
// memory keep their room's order through refused messages, lost
// acknowledgements and outages; a failure sends the room back to the table.
func TestCommittedRowsKeepOrderUnderInjectedFailures(t *testing.T) {
	t.Run("row by row", func(t *testing.T) { testCommittedOrderUnderFailures(t, "row by row") })
	t.Run("in order", func(t *testing.T) { testCommittedOrderUnderFailures(t, "in order") })
}

func testCommittedOrderUnderFailures(t *testing.T, path string) {
	repo := openRepo(t)
	bus := openBus(t, natsbus.Config{})
	pub, f := injected(bus)[path]()
	var memory, table atomic.Int64
	r := relay.New(repo, pub, relay.LeaseGate{Lease: lease.NewLocal()}, fastConfig(), taken(&memory, &table), quiet)
	owners := make([]*owner, 12)
	for i := range owners {
		owners[i] = claim(t, repo, fmt.Sprintf("memfail-%d", i))
	}
	runRelay(t, r)
	for range 20 {
		for _, o := range owners {
			r.Committed(o.commit(t, 1))
		}
	}
	poll.Until(t, 60*time.Second, "every row published", poll.Bool(func() bool { return pending(t, repo) == 0 }))
	consume(t, bus, 12*20*2)
	if f.overlaps.Load() != 0 {
		t.Fatalf("%d publishes overlapped another of the same room", f.overlaps.Load())
	}
	t.Logf("%d rows from memory, %d from the table", memory.Load(), table.Load())
}

// TestAScanFindsAnotherOwnersRows: rows another node committed (its relay
// gone) while this relay trusted its memory of the room are published once a
// scan finds them, however young they look: their owner epoch is not the one
// memory holds.
func TestAScanFindsAnotherOwnersRows(t *testing.T) {
	repo, bus, r := trustedRoom(t, "elsewhere", 3, 1)
	other := claim(t, repo, "elsewhere")
	other.commit(t, 2)
	r.Wake()
	poll.Until(t, 30*time.Second, "the other node's rows published", poll.Bool(func() bool { return pending(t, repo) == 0 }))
	consume(t, bus, (3+2)*2)
}

// countingGate counts the gates taken and given back.
type countingGate struct {
	relay.Gate
	acquired, released atomic.Int64
}

type countedHold struct {
	relay.Held
	g *countingGate
}

func (h countedHold) Release() { h.g.released.Add(1); h.Held.Release() }

func (g *countingGate) Acquire(ctx context.Context, roomID string) (relay.Held, bool) {
	h, ok := g.Gate.Acquire(ctx, roomID)
	if !ok {
		return nil, false
	}
	g.acquired.Add(1)
	return countedHold{Held: h, g: g}, true
}

// TestABusyRoomTakesItsGateOnce: a room that keeps committing keeps its
// gate between chains (with the shared lease, no Redis call per commit),
// and the relay gives every gate back when it stops.
func TestABusyRoomTakesItsGateOnce(t *testing.T) {
	repo := openRepo(t)
	bus := openBus(t, natsbus.Config{})
	cfg := fastConfig()
	cfg.PollInterval = time.Hour // no gate is released for being idle
	gate := &countingGate{Gate: relay.LeaseGate{Lease: lease.NewLocal()}}
	r := relay.New(repo, bus, gate, cfg, relay.Metrics{}, quiet)
	stop := runRelay(t, r)
	here := claim(t, repo, "busy")
	for range 20 {
		r.Committed(here.commit(t, 1))
		poll.Until(t, 30*time.Second, "the commit's rows published", poll.Bool(func() bool { return pending(t, repo) == 0 }))
	}
	if n := gate.acquired.Load(); n != 1 {
		t.Fatalf("the room took its gate %d times for 20 commits, want once", n)
	}
	stop()
	if a, r := gate.acquired.Load(), gate.released.Load(); a != r {
		t.Fatalf("%d gates taken, %d given back after the relay stopped", a, r)
	}
	consume(t, bus, 20*2)
}

// TestARequeuedRowOfATrustedRoomGoesOut: a row that went dead while the
// relay published its room from memory, then was requeued by an operator,
// lies behind what memory published; the next scan finds it pending and
// old, and it goes out. Rows memory still holds in a backlog are not such
// rows (the scan leaves memory trusted for them).
func TestARequeuedRowOfATrustedRoomGoesOut(t *testing.T) {
	repo := openRepo(t)
	bus := openBus(t, natsbus.Config{})
	cfg := fastConfig()
	// A scan doubts a trusted room for a row older than a poll interval it
	// was not handed: a commit's hand-over must never lag that long, even
	// under the race detector on a busy machine (50 ms did, once). The
	// requeued row is older than that by a later scan.
	cfg.MaxAttempts, cfg.PollInterval = 1, time.Second
	var fixed atomic.Bool
	var memory, table atomic.Int64
	r := relay.New(repo, refuse{next: bus, bad: "requeue/2/0", fixed: &fixed}, relay.LeaseGate{Lease: lease.NewLocal()}, cfg, taken(&memory, &table), quiet)
	runRelay(t, r)
	here := claim(t, repo, "requeue")
	for range 3 {
		r.Committed(here.commit(t, 2))
	}
	poll.Until(t, 30*time.Second, "every row but the poison one published", poll.Bool(func() bool { return pending(t, repo) == 0 }))
	if table.Load() != 0 {
		t.Fatalf("%d rows read from the table; the room was created under the relay", table.Load())
	}
	fixed.Store(true)
	if n, err := repo.RequeueDeadOutbox(context.Background(), ""); err != nil || n != 1 {
		t.Fatalf("requeue: %d %v", n, err)
	}
	r.Wake()
	poll.Until(t, 30*time.Second, "the requeued row published", poll.Bool(func() bool { return pending(t, repo) == 0 }))
	if st, err := repo.OutboxStats(context.Background(), 0); err != nil || len(st.Dead) != 0 {
		t.Fatalf("dead rows %v (%v), want none: the requeued row went out", st.Dead, err)
	}
}

// The rows a commit hands over stay the caller's as they were: the relay
// keeps them without copying, and the rows of the room's next commit go
// elsewhere, not into the spare room of the caller's array.
func TestCommittedNeverWritesIntoTheCallersRows(t *testing.T) {
	r := relay.New(nil, nil, relay.LeaseGate{Lease: lease.NewLocal()}, fastConfig(), relay.Metrics{}, quiet)
	row := func(v int64) outbox.Record {
		return outbox.Record{EventID: outbox.EventID("r", v, 0), RoomID: "r", RoomVersion: v, OwnerEpoch: 1, EventType: "RoomUserJoined"}
	}
	first := make([]outbox.Record, 1, 4)
	first[0] = row(1)
	r.Committed(first)
	r.Committed([]outbox.Record{row(2), row(3)})
	for i, got := range first[:cap(first)] {
		want := outbox.Record{}
		if i == 0 {
			want = row(1)
		}
		if got.EventID != want.EventID {
			t.Fatalf("the caller's array at %d holds %q; want %q", i, got.EventID, want.EventID)
		}
	}
}

// marksAtOnce holds every MarkOutboxPublishedBatch until two run at once,
// or until the test's deadline.
type marksAtOnce struct {
	*sqlite.DB
	deadline time.Duration
	calls    atomic.Int64
	mu       sync.Mutex
	running  int
	both     chan struct{}
}

func (m *marksAtOnce) MarkOutboxPublishedBatch(ctx context.Context, ids []string) error {
	m.calls.Add(1)
	m.mu.Lock()
	m.running++
	if m.running == 2 {
		select {
		case <-m.both:
		default:
			close(m.both)
		}
	}
	m.mu.Unlock()
	t := time.NewTimer(m.deadline)
	defer t.Stop()
	select {
	case <-m.both:
	case <-t.C:
	case <-ctx.Done():
	}
	m.mu.Lock()
	m.running--
	m.mu.Unlock()
	return m.DB.MarkOutboxPublishedBatch(ctx, ids)
}

// TestASecondMarkRunsWhileOneWaitsOnTheDatabase holds the first room's
// mark until a second runs: the second room's acknowledgements must not
// wait for the first mark to end.
func TestASecondMarkRunsWhileOneWaitsOnTheDatabase(t *testing.T) {
	repo := &marksAtOnce{DB: openRepo(t), deadline: 30 * time.Second, both: make(chan struct{})}
	bus := openBus(t, natsbus.Config{})
	cfg := fastConfig()
	cfg.PollInterval = time.Hour
	r := relay.New(repo, bus, relay.LeaseGate{Lease: lease.NewLocal()}, cfg, relay.Metrics{}, quiet)
	runRelay(t, r)
	r.Committed(seed(t, repo.DB, []string{"first"}, 1)[0])
	poll.Until(t, 30*time.Second, "the first room's mark runs", poll.Bool(func() bool { return repo.calls.Load() == 1 }))
	r.Committed(seed(t, repo.DB, []string{"second"}, 1)[0])
	select {
	case <-repo.both:
	case <-time.After(repo.deadline):
		t.Fatal("the second room's mark waited for the first's to end")
	}
	poll.Until(t, 30*time.Second, "both rooms' rows marked", poll.Bool(func() bool { return pending(t, repo.DB) == 0 }))
	consume(t, bus, 4)
}

// staleLease hands out handles that run stale as a lease cut off from its
// store does: no longer fresh, and Check, which cannot renew them, reports
// nothing wrong. fresh makes them fresh again (the store answers).
type staleLease struct {
	fresh  atomic.Bool
	checks atomic.Int64 // Check calls while not fresh
}

type staleHandle struct{ l *staleLease }

var neverLost = make(chan struct{})

func (l *staleLease) Acquire(context.Context, string) (lease.Handle, error) {
	return staleHandle{l}, nil
}
func (h staleHandle) Lost() <-chan struct{}         { return neverLost }
func (h staleHandle) Release(context.Context) error { return nil }
func (h staleHandle) Fresh() bool                   { return h.l.fresh.Load() }
func (h staleHandle) Check(context.Context) error {
	if !h.l.fresh.Load() {
		h.l.checks.Add(1)
	}
	return nil
}

// staleReads counts the reads of a room's rows made while the lease is stale.
type staleReads struct {
	*sqlite.DB
	lease *staleLease
	stale atomic.Int64
}

func (s *staleReads) ListRoomOutbox(ctx context.Context, roomID string, limit int) ([]outbox.Record, error) {
	if !s.lease.fresh.Load() {
		s.stale.Add(1)
	}
	return s.DB.ListRoomOutbox(ctx, roomID, limit)
}

// staleAfter makes the lease stale once it has published three rows, and
// counts the publishes made while it is.
type staleAfter struct {
	next  relay.Publisher
	lease *staleLease
	n     atomic.Int64
	late  atomic.Int64
}

func (s *staleAfter) Publish(ctx context.Context, r outbox.Record) error {
	if !s.lease.fresh.Load() {
		s.late.Add(1)
	}
	if s.n.Add(1) == 3 {
		s.lease.fresh.Store(false)
	}
	return s.next.Publish(ctx, r)
}

// TestRelayPublishesNothingWhileItsLeaseIsStale: a relay's lease runs out
// while its store cannot be reached (no other holder is known, so it is not
// lost). No database fences a relay, so it publishes nothing more, and
// reads none of the room's rows, until the lease is fresh again, however
// often it tries; then every row goes out, in order.
func TestRelayPublishesNothingWhileItsLeaseIsStale(t *testing.T) {
	l := &staleLease{}
	l.fresh.Store(true)
	repo := &staleReads{DB: openRepo(t), lease: l}
	bus := openBus(t, natsbus.Config{})
	seed(t, repo, []string{"stale"}, 10)
	pub := &staleAfter{next: bus, lease: l}
	cfg := fastConfig()
	cfg.RoomBatch = 100
	runRelay(t, relay.New(repo, pub, relay.LeaseGate{Lease: l}, cfg, relay.Metrics{}, quiet))
	poll.Until(t, 30*time.Second, "the relay tried the stale room several times", poll.Bool(func() bool { return l.checks.Load() >= 5 }))
	if n := pub.late.Load(); n != 0 {
		t.Fatalf("%d publishes while the lease was stale", n)
	}
	if n := repo.stale.Load(); n != 0 {
		t.Fatalf("%d reads of the room's rows while the lease was stale", n)
	}
	l.fresh.Store(true)
	poll.Until(t, 30*time.Second, "every row published", poll.Bool(func() bool { return pending(t, repo) == 0 }))
	consume(t, bus, 20)
}
