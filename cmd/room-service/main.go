// Command room-service runs the room engine and serves its API.
//
// With no configuration it listens on 127.0.0.1:8080 and keeps its data in
// SQLite under ./data. See README.md for every setting.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"hyapp/room-service/cell"
	"hyapp/room-service/config"
	"hyapp/room-service/im"
	"hyapp/room-service/im/tencent"
	"hyapp/room-service/im/timlocal"
	"hyapp/room-service/lease"
	"hyapp/room-service/outbox"
	"hyapp/room-service/outbox/natsbus"
	"hyapp/room-service/room"
	"hyapp/room-service/rpc"
	"hyapp/room-service/store"
	"hyapp/room-service/store/mysql"
	"hyapp/room-service/store/sqlite"
	"hyapp/room-service/wallet"
	walletledger "hyapp/room-service/wallet/ledger"
)

func main() {
	m := NewMain()
	if err := m.ParseFlags(os.Args[1:], os.Getenv); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "room-service: invalid configuration:\n"+err.Error())
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	if err := m.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "room-service:", err)
		os.Exit(1)
	}
	<-ctx.Done()
	stop() // a second signal now kills the process at once
	m.Log.Info("shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), m.Config.ShutdownTimeout)
	defer cancel()
	if err := m.Close(sctx); err != nil {
		m.Log.Error("shutdown", "err", err)
		os.Exit(1)
	}
}

// Main is the program: configuration, wiring, run and ordered shutdown.
// End-to-end tests drive it in-process.
type Main struct {
	Config config.Config
	Log    *slog.Logger

	// Addr is the address the server listens on, set by Run.
	Addr string

	repo     store.Repository
	ledger   ledger
	registry *cell.Registry
	lane     *im.Lane
	server   *http.Server
	serveErr chan error

	stopBackground context.CancelFunc
	background     sync.WaitGroup
	bus            *natsbus.Bus
	timClient      *tencent.Client
	// groupsRecreated counts IM groups created again, by lane and control.
	groupsRecreated *prometheus.CounterVec
	stopControl     context.CancelFunc
	controlDone     chan struct{}
	stopRelay       context.CancelFunc
	relayDone       chan struct{}

	closeOnce sync.Once
	closeErr  error
}

// openStore opens the configured database: MySQL when a DSN is set (retrying
// while the server is unreachable, until ctx ends), SQLite under the data
// directory otherwise. It also returns the group-commit shape that suits the
// database: SQLite has one writer, so one large transaction at a time; MySQL
// commits best with a few parallel transactions of a few hundred rooms each
// (measured with roomctl bench -commit-max-rooms).
func (m *Main) openStore(ctx context.Context) (store.Repository, cell.Config, error) {
	cfg := m.Config
	if cfg.MySQLDSN == "" {
		if err := os.MkdirAll(cfg.DataDir, 0o750); err != nil {
			return nil, cell.Config{}, fmt.Errorf("data dir: %w", err)
		}
		db, err := sqlite.Open(ctx, filepath.Join(cfg.DataDir, "room.db"), sqlite.Options{Synchronous: cfg.SQLiteSync})
		return db, cell.Config{CommitWorkers: 1}, err
	}
	wait := 500 * time.Millisecond
	for {
		db, err := mysql.Open(ctx, cfg.MySQLDSN, mysql.Options{})
		if err == nil {
			return db, cell.Config{CommitWorkers: 4, CommitMaxRooms: 256}, nil
		}
		if !errors.Is(err, store.ErrUnavailable) || ctx.Err() != nil {
			return nil, cell.Config{}, err
		}
		m.Log.Error("MySQL is unreachable; retrying", "err", err, "retry_in", wait)
		select {
		case <-ctx.Done():
			return nil, cell.Config{}, ctx.Err()
		case <-time.After(wait):
		}
		wait = min(2*wait, 10*time.Second)
	}
}

// ledger is the embedded COIN ledger: the wallet port over the service database.
type ledger interface {
	wallet.Wallet
	Close() error
}

// ledgerStore is a store that keeps the embedded ledger in its own database.
type ledgerStore interface {
	Ledger(opts walletledger.Options) *walletledger.Ledger
}

// openLedger opens the embedded ledger in the service's own database.
func openLedger(db store.Repository) (ledger, error) {
	s, ok := db.(ledgerStore)
	if !ok {
		return nil, fmt.Errorf("no embedded ledger for %T", db)
	}
	return s.Ledger(walletledger.Options{}), nil
}

// committedGifts reads which gift command ids are in a room's log: the
// reconciler settles those charges and refunds the others.
func committedGifts(db store.Repository) wallet.Committed {
	return func(ctx context.Context, roomID string, ids []string) (map[string]bool, error) {
		recs, err := db.GetCommands(ctx, roomID, ids)
		if err != nil {
			return nil, err
		}
		found := make(map[string]bool, len(recs))
		for id := range recs {
			found[id] = true
		}
		return found, nil
	}
}

// openBus connects to the configured NATS, or starts the embedded server
// under the data directory. An unreachable external server is retried until
// ctx ends.
func (m *Main) openBus(ctx context.Context) (*natsbus.Bus, error) {
	cfg := m.Config
	nc := natsbus.Config{URL: cfg.NATSURL, Stream: cfg.NATSStream, Name: "room-service"}
	if cfg.NATSURL == "" {
		nc.StoreDir, nc.Listen = filepath.Join(cfg.DataDir, "nats"), cfg.NATSListen
	}
	wait := 500 * time.Millisecond
	for {
		bus, err := natsbus.Open(ctx, nc, m.Log)
		if err == nil || cfg.NATSURL == "" || errors.Is(err, natsbus.ErrInvalidConfig) || ctx.Err() != nil {
			if err == nil && bus.ClientURL() != "" {
				m.Log.Info("embedded NATS accepts consumers", "url", bus.ClientURL(), "stream", bus.Stream())
			}
			return bus, err
		}
		m.Log.Error("NATS is unreachable; retrying", "err", err, "retry_in", wait)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(wait):
		}
		wait = min(2*wait, 10*time.Second)
	}
}

// openIM builds the direct IM lane: the Tencent IM client from the
// configuration, or, without credentials, a local Tencent-compatible endpoint
// (returned, to be served on the API port) with a key made up for this run.
func (m *Main) openIM(reg prometheus.Registerer) (*im.Lane, http.Handler, error) {
	cfg := m.Config
	tc := tencent.Config{Admin: cfg.TIMAdmin, SecretKey: cfg.TIMSecretKey, Endpoint: cfg.TIMEndpoint}
	var local http.Handler
	if cfg.TIMSDKAppID == "" {
		key := make([]byte, 32)
		if _, err := rand.Read(key); err != nil {
			return nil, nil, err
		}
		tc = tencent.Config{SDKAppID: 1400000000, SecretKey: hex.EncodeToString(key), Admin: "administrator", Endpoint: "http://" + m.Addr}
		tl := timlocal.New(timlocal.Config{SDKAppID: tc.SDKAppID, SecretKey: tc.SecretKey, Admin: tc.Admin})
		// Its groups outlive a restart, so /local/ still shows them (and their mutes and bans) after kill -9.
		if err := tl.Persist(filepath.Join(cfg.DataDir, "timlocal-groups.json")); err != nil {
			return nil, nil, err
		}
		local = tl
	} else {
		id, _ := strconv.ParseUint(cfg.TIMSDKAppID, 10, 64) // checked by Validate
		tc.SDKAppID = id
	}
	client, err := tencent.New(tc, m.Log.With("component", "tencent-im"))
	if err != nil {
		return nil, nil, err
	}
	m.timClient = client
	regional, _ := cfg.RegionalGroups() // checked by Validate
	recreated := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "room_im_groups_recreated_total", Help: "IM groups created again because a call found them missing, by path (lane, control)."}, []string{"path"})
	reg.MustRegister(recreated)
	m.groupsRecreated = recreated
	sender := im.RecreatingSender{Sender: im.TencentSender{Client: client}, Groups: im.TencentGroups{Client: client},
		Recreated: recreated.WithLabelValues("lane").Inc}
	return im.New(im.Config{Budget: float64(cfg.IMBudget), RegionalGroups: regional},
		sender, newLaneMetrics(reg), m.Log.With("component", "im-lane")), local, nil
}

// newControlMetrics registers group control's instruments.
func newControlMetrics(reg prometheus.Registerer, recreated *prometheus.CounterVec) im.ControlMetrics {
	applied := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "room_im_control_applied_total", Help: "Durable events group control applied, by event type."}, []string{"event_type"})
	retried := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "room_im_control_retried_total", Help: "Group control attempts that failed and will be retried, by event type and reason."}, []string{"event_type", "reason"})
	terminated := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "room_im_control_terminated_total", Help: "Durable events group control gave up for good (terminated), by event type and reason (roomctl im status lists them)."}, []string{"event_type", "reason"})
	reg.MustRegister(applied, retried, terminated)
	return im.ControlMetrics{
		Applied:    func(t string) { applied.WithLabelValues(t).Inc() },
		Retried:    func(t, r string) { retried.WithLabelValues(t, r).Inc() },
		Terminated: func(t, r string) { terminated.WithLabelValues(t, r).Inc() },
		Recreated:  recreated.WithLabelValues("control").Inc,
	}
}

// newLaneMetrics registers the IM lane's instruments.
func newLaneMetrics(reg prometheus.Registerer) im.Metrics {
	sent := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "room_im_sent_total", Help: "IM messages sent, by priority."}, []string{"priority"})
	shed := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "room_im_shed_total", Help: "IM events the lane dropped, by priority and reason."}, []string{"priority", "reason"})
	merged := prometheus.NewCounter(prometheus.CounterOpts{Name: "room_im_merged_total", Help: "IM events merged into Batch messages."})
	coalesced := prometheus.NewCounter(prometheus.CounterOpts{Name: "room_im_coalesced_total", Help: "Display values replaced by a newer one before they were sent."})
	retried := prometheus.NewCounter(prometheus.CounterOpts{Name: "room_im_retried_total", Help: "High IM messages queued again after a failed send."})
	latency := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "room_im_latency_seconds", Help: "Committed-to-sent delay of IM messages, by priority.", Buckets: prometheus.ExponentialBuckets(0.001, 2, 14)}, []string{"priority"})
	reg.MustRegister(sent, shed, merged, coalesced, retried, latency)
	return im.Metrics{
		Sent:      func(p room.Priority) { sent.WithLabelValues(string(p)).Inc() },
		Shed:      func(p room.Priority, reason string) { shed.WithLabelValues(string(p), reason).Inc() },
		Merged:    func(n int) { merged.Add(float64(n)) },
		Coalesced: coalesced.Inc,
		Retried:   retried.Inc,
		Latency:   func(p room.Priority, d time.Duration) { latency.WithLabelValues(string(p)).Observe(d.Seconds()) },
	}
}

// newRelayMetrics registers the outbox relay's instruments.
func newRelayMetrics(reg prometheus.Registerer) outbox.RelayMetrics {
	published := prometheus.NewCounter(prometheus.CounterOpts{Name: "room_outbox_published_total", Help: "Outbox rows the broker acknowledged."})
	failed := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "room_outbox_publish_failures_total", Help: "Failed publishes, by kind (broker: outage; message: counts against the row)."}, []string{"kind"})
	dead := prometheus.NewCounter(prometheus.CounterOpts{Name: "room_outbox_dead_total", Help: "Outbox rows that went dead."})
	lag := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "room_outbox_lag_seconds", Help: "Commit-to-acknowledge delay of published rows.", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 18)})
	reg.MustRegister(published, failed, dead, lag)
	return outbox.RelayMetrics{
		Published: func(n int) { published.Add(float64(n)) },
		Failed: func(transient bool) {
			kind := "message"
			if transient {
				kind = "broker"
			}
			failed.WithLabelValues(kind).Inc()
		},
		Dead: dead.Inc,
		Lag:  func(d time.Duration) { lag.Observe(d.Seconds()) },
	}
}

// NewMain returns a Main with the default configuration.
func NewMain() *Main {
	return &Main{Config: config.Default(), Log: slog.Default()}
}

// ParseFlags loads the configuration from args and the environment.
func (m *Main) ParseFlags(args []string, getenv func(string) string) error {
	cfg, err := config.Load(args, getenv)
	if err != nil {
		return err
	}
	m.Config = cfg
	return nil
}

// Run opens storage, starts the engine and starts serving. It returns once
// the listener is bound; serving continues until Close.
func (m *Main) Run(ctx context.Context) error {
	cfg := m.Config
	m.Log = newLogger(cfg)
	m.Log.Info("starting room-service", cfg.Redacted()...)

	db, tuning, err := m.openStore(ctx)
	if err != nil {
		return fmt.Errorf("open storage: %w", err)
	}
	m.repo = db
	if cfg.CommitWorkers > 0 {
		tuning.CommitWorkers = cfg.CommitWorkers
	}
	retain := &store.Retention{
		Repo: db, Interval: cfg.RetainEvery, Batch: 1000, KeepVersions: int64(cfg.RetainVersions),
		KeepCommandsFor: cfg.RetainCommands, KeepPublishedFor: cfg.RetainPublished, Log: m.Log,
	}
	var bg context.Context
	bg, m.stopBackground = context.WithCancel(context.Background())
	m.background.Add(1)
	go func() {
		defer m.background.Done()
		retain.Run(bg)
	}()

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	metrics := cell.NewMetrics(reg)

	catalogue, err := cfg.Catalogue()
	if err != nil {
		return err // Validate refused it already; reached only by a Config built in code
	}
	rules, err := cfg.Rules()
	if err != nil {
		return err
	}
	if m.ledger, err = openLedger(db); err != nil {
		return fmt.Errorf("open ledger: %w", err)
	}
	walletMetrics := wallet.NewMetrics(reg)
	reconciler := &wallet.Reconciler{
		Wallet: m.ledger, Committed: committedGifts(db), After: cfg.ReconcileAfter,
		Log: m.Log.With("component", "wallet-reconciler"), Metrics: walletMetrics,
	}
	m.background.Add(1)
	go func() {
		defer m.background.Done()
		reconciler.Run(bg, max(cfg.ReconcileAfter/4, time.Second))
	}()
	leases := lease.NewLocal()

	if m.bus, err = m.openBus(ctx); err != nil {
		return fmt.Errorf("open message queue: %w", err)
	}
	relay := outbox.NewRelay(db, m.bus, outbox.LeaseGate{Lease: leases},
		outbox.RelayConfig{MaxAttempts: int32(cfg.RelayAttempts)}, newRelayMetrics(reg), m.Log.With("component", "relay"))
	var relayCtx context.Context
	relayCtx, m.stopRelay = context.WithCancel(context.Background())
	m.relayDone = make(chan struct{})
	go func() {
		defer close(m.relayDone)
		relay.Run(relayCtx)
	}()
	nodeID := cfg.NodeID
	if nodeID == "" {
		nodeID, _ = os.Hostname()
	}
	// Listen before serving: a bad address fails Run, not a goroutine. The
	// address is known from here on (the local IM endpoint is served on it).
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	m.Addr = ln.Addr().String()
	lane, local, err := m.openIM(reg)
	if err != nil {
		_ = ln.Close()
		return fmt.Errorf("im: %w", err)
	}
	m.lane = lane

	m.registry = cell.New(cell.Config{
		NodeID: nodeID, MailboxSize: cfg.MailboxSize, MaxBatch: cfg.MaxBatch, SnapshotEvery: cfg.SnapshotEvery,
		IdleTimeout: cfg.IdleTimeout, CommitTimeout: cfg.CommitTimeout,
		CommitWorkers: tuning.CommitWorkers, CommitMaxRooms: tuning.CommitMaxRooms,
		Rules: rules, Wallet: m.ledger, WalletTimeout: cfg.WalletTimeout, GiftApplyWindow: cfg.GiftApplyWindow,
		TimerScanEvery: cfg.RocketScan, SettleInCommit: true, // the embedded ledger shares the room store's database
	}, db, leases, cell.Sinks{lane, cell.OutboxWaker{Wake: relay.Wake}}, metrics, m.Log)

	platform := make(map[int64]bool, len(cfg.PlatformUsers))
	for _, id := range cfg.PlatformUsers {
		platform[id] = true
	}
	rooms := rpc.NewRoomHandler(m.registry, db, func(id int64) bool { return platform[id] }, m.Log)
	rooms.SetRobotDisplay(lane)
	rooms.SetCatalogue(catalogue)
	mux := rpc.NewMux(rooms, rpc.NewOperatorHandler(db, relay.Wake, m.Log), rpc.NewWalletHandler(m.ledger, m.Log),
		rpc.Options{Token: cfg.Token, Metrics: reg}, m.Log)
	if local != nil {
		// The zero-configuration Tencent IM: the REST API the lane calls, and
		// /local/ to watch what each room's group would show.
		mux.Handle("/v4/", local)
		mux.Handle("/local/", local)
		m.Log.Info("local Tencent IM endpoint: watch room messages at http://" + m.Addr + "/local/")
	}
	control := &im.Control{Bus: m.bus, API: im.TencentGroups{Client: m.timClient},
		Metrics: newControlMetrics(reg, m.groupsRecreated), Log: m.Log.With("component", "im-control")}
	var controlCtx context.Context
	controlCtx, m.stopControl = context.WithCancel(context.Background())
	m.controlDone = make(chan struct{})
	go func() {
		defer close(m.controlDone)
		if err := control.Run(controlCtx); err != nil {
			m.Log.Error("im group control stopped", "err", err)
		}
	}()
	m.server = rpc.NewServer(mux)
	m.serveErr = make(chan error, 1)
	go func() { m.serveErr <- m.server.Serve(ln) }()
	m.Log.Info("serving", "addr", m.Addr)
	return nil
}

// Close shuts down in a fixed order: stop intake (the HTTP server finishes
// in-flight calls), drain the cells with final snapshots, stop the IM lane
// and group control, stop the relay, close the message queue, stop
// retention, close storage. It is bounded by ctx; calls after the first return the
// first's result.
func (m *Main) Close(ctx context.Context) error {
	m.closeOnce.Do(func() { m.closeErr = m.close(ctx) })
	return m.closeErr
}

func (m *Main) close(ctx context.Context) error {
	var errs []error
	if m.server != nil {
		// In-flight calls get a third of the time at most, so draining the
		// rooms and their final snapshots always has the rest.
		httpCtx, cancel := ctx, context.CancelFunc(func() {})
		if deadline, ok := ctx.Deadline(); ok {
			httpCtx, cancel = context.WithDeadline(ctx, time.Now().Add(time.Until(deadline)/3))
		}
		err := m.server.Shutdown(httpCtx)
		cancel()
		if err != nil {
			errs = append(errs, fmt.Errorf("http shutdown: %w", err))
		}
		if err := <-m.serveErr; err != nil && !errors.Is(err, http.ErrServerClosed) {
			errs = append(errs, fmt.Errorf("serve: %w", err))
		}
	}
	if m.registry != nil {
		if err := m.registry.Close(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	if m.lane != nil {
		m.lane.Close() // best effort: what is still queued is not sent
	}
	if m.stopControl != nil {
		m.stopControl()
		<-m.controlDone
	}
	if m.stopRelay != nil {
		// Rows committed but not yet published stay pending; the next start
		// publishes them (the broker drops what it already has).
		m.stopRelay()
		<-m.relayDone
	}
	if m.bus != nil {
		if err := m.bus.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close message queue: %w", err))
		}
	}
	if m.stopBackground != nil {
		m.stopBackground()
		m.background.Wait()
	}
	if m.timClient != nil {
		m.timClient.Close()
	}
	if m.ledger != nil {
		if err := m.ledger.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close ledger: %w", err))
		}
	}
	if m.repo != nil {
		if err := m.repo.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close storage: %w", err))
		}
	}
	return errors.Join(errs...)
}

func newLogger(cfg config.Config) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(strings.ToUpper(cfg.LogLevel)))
	opts := &slog.HandlerOptions{Level: level}
	if cfg.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(os.Stderr, opts))
	}
	return slog.New(slog.NewTextHandler(os.Stderr, opts))
}
