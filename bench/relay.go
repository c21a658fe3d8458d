package bench

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"hyapp/room-service/lease"
	"hyapp/room-service/outbox"
	"hyapp/room-service/outbox/natsbus"
	"hyapp/room-service/outbox/relay"
	"hyapp/room-service/store"
)

// broker is a restartable NATS server with JetStream, so a scenario can take
// the message queue away and bring it back on the same port and storage.
type broker struct {
	dir  string
	port int
	srv  *server.Server
}

func startBroker(dir string, port int) (*broker, error) {
	b := &broker{dir: dir, port: port}
	return b, b.start()
}

func (b *broker) start() error {
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: b.port, JetStream: true, StoreDir: b.dir, NoSigs: true, NoLog: true})
	if err != nil {
		return err
	}
	srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		return fmt.Errorf("nats did not start")
	}
	b.srv, b.port = srv, srv.Addr().(*net.TCPAddr).Port
	return nil
}

func (b *broker) stop() {
	b.srv.Shutdown()
	b.srv.WaitForShutdown()
}

func (b *broker) url() string { return fmt.Sprintf("nats://127.0.0.1:%d", b.port) }

// producer commits outbox rows (one command and one row each) to its rooms
// the way cells would.
type producer struct {
	repo  store.Repository
	ids   []string
	heads map[string][2]int64 // epoch, version
	next  int
}

func newProducer(ctx context.Context, repo store.Repository, prefix string, rooms int) (*producer, error) {
	p := &producer{repo: repo, heads: make(map[string][2]int64, rooms)}
	for i := range rooms {
		id := fmt.Sprintf("%s-%d", prefix, i)
		if err := repo.SaveRoomMeta(ctx, store.RoomMeta{RoomID: id, OwnerUserID: 1, SeatCount: 8}); err != nil {
			return nil, err
		}
		c, err := repo.ClaimRoom(ctx, id, "bench")
		if err != nil {
			return nil, err
		}
		p.ids = append(p.ids, id)
		p.heads[id] = [2]int64{c.Epoch, c.HeadVersion}
	}
	return p, nil
}

// commit commits n rows, round robin over the rooms, one transaction per
// len(rooms) rows, and hands committed each room's rows after the commit,
// as a cell does (nil: nobody).
func (p *producer) commit(ctx context.Context, n int, committed func(rows []outbox.Record)) error {
	var batches []store.Batch
	flush := func() error {
		res, err := p.repo.CommitBatches(ctx, batches)
		if err != nil {
			return err
		}
		for _, e := range res {
			if e != nil {
				return e
			}
		}
		if committed != nil {
			for _, b := range batches {
				committed(b.Outbox)
			}
		}
		batches = batches[:0]
		return nil
	}
	now := time.Now()
	for range n {
		id := p.ids[p.next%len(p.ids)]
		p.next++
		h := p.heads[id]
		v := h[1] + 1
		p.heads[id] = [2]int64{h[0], v}
		batches = append(batches, store.Batch{
			RoomID: id, OwnerEpoch: h[0], BaseVersion: h[1],
			Commands: []store.CommandRecord{{RoomID: id, RoomVersion: v, CommandID: fmt.Sprint("c", v), CommandType: "JoinRoom", Payload: []byte(`{"op":1,"at":1,"body":{}}`), Replayable: true, CreatedAt: now}},
			Outbox: []outbox.Record{{EventID: fmt.Sprintf("%s/%d/0", id, v), RoomID: id, RoomVersion: v, OwnerEpoch: h[0], EventType: "RoomUserJoined",
				Payload: []byte(`{"user_id":123456,"nickname":"listener","vehicle":"car-7","joined_at":1796033128314,"online_count":57}`), CreatedAt: now}},
		})
		if len(batches) == len(p.ids) {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	if len(batches) > 0 {
		return flush()
	}
	return nil
}

// perEvent says the CPU this process (the relay or the bare loop, the
// in-process broker and, on SQLite, the database) used per event.
func perEvent(cpu time.Duration, events int) string {
	return fmt.Sprintf("this process: %.1f µs CPU per event", float64(cpu.Microseconds())/float64(events))
}

// RelayScenarios measures the outbox relay on env's database against a NATS
// server of its own: throughput beside a bare async-publish loop of the same
// messages, commit-to-ack lag at a steady rate, and the drain after an outage.
func RelayScenarios(ctx context.Context, env Env, dir string, events, rate int, outage time.Duration) ([]Row, error) {
	var rows []Row
	log := slog.New(slog.DiscardHandler)

	// Ceiling: the same number of messages through a bare async loop, to
	// a broker of its own reached the way the relay reaches its broker
	// below (a client connection over TCP), so that the ratio is the
	// relay's and not the transport's: an in-process connection skips the
	// network stack the relay's publishes go through.
	ceilBrk, err := startBroker(dir+"/ceiling", -1)
	if err != nil {
		return nil, err
	}
	defer ceilBrk.stop()
	ceilBus, err := natsbus.Open(ctx, natsbus.Config{URL: ceilBrk.url(), PublishTimeout: time.Second}, log)
	if err != nil {
		return nil, err
	}
	recs := make([]outbox.Record, events)
	for i := range recs {
		recs[i] = outbox.Record{EventID: fmt.Sprintf("ceil-%d/%d/0", i%1000, i), RoomID: fmt.Sprintf("ceil-%d", i%1000), RoomVersion: int64(i),
			EventType: "RoomUserJoined", Payload: []byte(`{"user_id":123456,"nickname":"listener","vehicle":"car-7","joined_at":1796033128314,"online_count":57}`), CreatedAt: time.Now()}
	}
	cpu0 := processCPU()
	bare, err := natsbus.BareAsyncPublish(ctx, ceilBus, recs, 4096)
	bareCPU := processCPU() - cpu0
	_ = ceilBus.Close()
	if err != nil {
		return nil, err
	}
	ceiling := Row{Name: "bare JetStream async publish", Ops: events, Elapsed: bare,
		Extra: "the ceiling; " + perEvent(bareCPU, events)}

	repo, err := env.Open(ctx)
	if err != nil {
		return nil, err
	}
	defer func() { _ = repo.Close() }()
	brk, err := startBroker(dir+"/relay", -1)
	if err != nil {
		return nil, err
	}
	defer brk.stop()
	bus, err := natsbus.Open(ctx, natsbus.Config{URL: brk.url(), PublishTimeout: time.Second, FastBatches: true}, log)
	if err != nil {
		return nil, err
	}
	defer func() { _ = bus.Close() }()

	// In memory: rows handed to the relay as their commits happened, the
	// path every commit takes. The rows are committed first and handed
	// over after, in commit order, so the figure is the relay's and not
	// the commits' (they share the two cores); each room's first commit
	// is handed over and published before the clock starts.
	var memAcks atomic.Int64
	mem := relay.New(repo, bus, relay.LeaseGate{Lease: lease.NewLocal()}, relay.Config{PollInterval: time.Hour, MemoryRows: 2 * events},
		relay.Metrics{Published: func(n int) { memAcks.Add(int64(n)) }}, log)
	live, err := newProducer(ctx, repo, "live", 1000)
	if err != nil {
		return nil, err
	}
	mctx, stopMem := context.WithCancel(ctx)
	memDone := make(chan struct{})
	go func() { defer close(memDone); mem.Run(mctx) }()
	var handed [][]outbox.Record
	err = live.commit(ctx, 1000, mem.Committed)
	if err == nil {
		err = waitPublished(ctx, repo, &memAcks, 1000)
	}
	if err == nil {
		err = live.commit(ctx, events, func(rows []outbox.Record) { handed = append(handed, rows) })
	}
	start, cpu0 := time.Now(), processCPU()
	if err == nil {
		for _, rows := range handed {
			mem.Committed(rows)
		}
		err = waitPublished(ctx, repo, &memAcks, int64(1000+events))
	}
	elapsed, memCPU := time.Since(start), processCPU()-cpu0
	stopMem()
	<-memDone
	if err != nil {
		return nil, err
	}
	lv := Row{Name: "relay, 1000 rooms, rows handed over in memory", Ops: events, Elapsed: elapsed}
	lv.Extra = fmt.Sprintf("%.0f%% of ceiling (target >= 50%%); target >= 20000/s: %.1fx; %s", 100*lv.Rate()/ceiling.Rate(), lv.Rate()/20000, perEvent(memCPU, events))
	rows = append(rows, ceiling, lv)

	var mu sync.Mutex
	var lags []time.Duration
	var acks atomic.Int64
	relay := relay.New(repo, bus, relay.LeaseGate{Lease: lease.NewLocal()}, relay.Config{PollInterval: 50 * time.Millisecond},
		relay.Metrics{
			Lag:       func(_ context.Context, d time.Duration) { mu.Lock(); lags = append(lags, d); mu.Unlock() },
			Published: func(n int) { acks.Add(int64(n)) },
		}, log)
	backlog, err := newProducer(ctx, repo, "tp", 1000)
	if err != nil {
		return nil, err
	}
	if err := backlog.commit(ctx, events, nil); err != nil {
		return nil, err
	}
	steadyRooms, err := newProducer(ctx, repo, "steady", 50)
	if err != nil {
		return nil, err
	}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	start = time.Now()
	go func() { defer close(done); relay.Run(rctx) }()
	defer func() { stop(); <-done }()
	if err := waitPublished(ctx, repo, &acks, int64(events)); err != nil {
		return nil, err
	}
	tp := Row{Name: "relay, 1000 rooms, backlog read from the table", Ops: events, Elapsed: time.Since(start)}
	tp.Extra = fmt.Sprintf("the recovery path (a restart): %.0f%% of ceiling", 100*tp.Rate()/ceiling.Rate())
	rows = append(rows, tp)

	// Steady input: commit-to-ack lag.
	mu.Lock()
	lags = lags[:0]
	mu.Unlock()
	steady := 10 * time.Second
	if err := produce(ctx, steadyRooms, relay, rate, steady); err != nil {
		return nil, err
	}
	if err := waitDrained(ctx, repo); err != nil {
		return nil, err
	}
	mu.Lock()
	l := append([]time.Duration(nil), lags...)
	mu.Unlock()
	slices.Sort(l)
	if len(l) == 0 {
		return nil, fmt.Errorf("no lag measured")
	}
	lagRow := Row{Name: fmt.Sprintf("commit-to-ack lag at %d events/s", rate), Ops: len(l), Elapsed: steady, P50: l[len(l)/2], P99: l[len(l)*99/100]}
	lagRow.Extra = fmt.Sprintf("p99 target <= 250 ms: %.2fx", ms(lagRow.P99)/250)
	rows = append(rows, lagRow)

	// Outage: input goes on while the broker is away; then it drains.
	brk.stop()
	if err := produce(ctx, steadyRooms, relay, rate, outage); err != nil {
		return nil, err
	}
	pendingRows, err := countPending(ctx, repo)
	if err != nil {
		return nil, err
	}
	if err := brk.start(); err != nil {
		return nil, err
	}
	drainStart := time.Now()
	inputDone := make(chan error, 1)
	go func() { inputDone <- produce(ctx, steadyRooms, relay, rate, 3*time.Second) }() // input keeps coming
	if err := waitDrained(ctx, repo); err != nil {
		return nil, err
	}
	drain := Row{Name: fmt.Sprintf("drain after a %s outage", outage), Ops: pendingRows, Elapsed: time.Since(drainStart)}
	if err := <-inputDone; err != nil {
		return nil, err
	}
	drain.Extra = fmt.Sprintf("%.1fx the input rate (target >= 3x)", drain.Rate()/float64(rate))
	return append(rows, drain), nil
}

// produce commits rate events per second for d, naming the rooms to the
// relay like a cell does.
func produce(ctx context.Context, p *producer, relay *relay.Relay, rate int, d time.Duration) error {
	const tick = 10 * time.Millisecond
	per := max(rate*int(tick)/int(time.Second), 1)
	t := time.NewTicker(tick)
	defer t.Stop()
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		if err := p.commit(ctx, per, relay.Committed); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	return nil
}

// countPending counts the pending rows (and not the published ones, which
// would compete with the relay for the database).
func countPending(ctx context.Context, repo store.Repository) (int, error) {
	st, err := repo.OutboxStats(ctx, 0)
	return int(st.Pending), err
}

// waitPublished waits until the relay counted want rows acknowledged and
// marked (a counter costs nothing; counting pending rows in the table
// would compete with the relay for the database), then until the table
// agrees.
func waitPublished(ctx context.Context, repo store.Repository, acked *atomic.Int64, want int64) error {
	for acked.Load() < want {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Millisecond):
		}
	}
	return waitDrained(ctx, repo)
}

func waitDrained(ctx context.Context, repo store.Repository) error {
	for {
		n, err := countPending(ctx, repo)
		if err != nil || n == 0 {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}
