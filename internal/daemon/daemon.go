// Package daemon is the room-service program: configuration, the wiring of
// every adapter, running the workers and the ordered shutdown. It is the one
// place the full service is assembled: cmd/room-service runs it as a process
// and end-to-end tests drive it in-process.
//
// With no configuration it listens on 127.0.0.1:8080 and keeps its data in
// SQLite under ./data. See README.md for every setting.
package daemon

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
	"sync/atomic"
	"syscall"
	"time"

	"connectrpc.com/grpchealth"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"

	"hyapp/room-service/cell"
	"hyapp/room-service/config"
	"hyapp/room-service/im"
	"hyapp/room-service/im/redisbudget"
	"hyapp/room-service/im/tencent"
	"hyapp/room-service/im/timlocal"
	"hyapp/room-service/internal/obs"
	"hyapp/room-service/lease"
	"hyapp/room-service/lease/redislease"
	"hyapp/room-service/outbox/natsbus"
	"hyapp/room-service/outbox/relay"
	"hyapp/room-service/rpc"
	"hyapp/room-service/store"
	"hyapp/room-service/store/mysql"
	"hyapp/room-service/store/sqlite"
	"hyapp/room-service/wallet"
	walletledger "hyapp/room-service/wallet/ledger"
)

// The natsbus Bus is group control's event stream.
var _ im.EventStream = (*natsbus.Bus)(nil)

// Execute runs the service as a process with args and the environment: it
// serves until SIGINT or SIGTERM, then shuts down within the configured
// bound; a second signal kills the process at once. Whatever Run opened is
// closed on every path. It returns the exit code: 0 after a clean shutdown
// (or -h), 2 for a bad configuration, 1 when Run or the shutdown failed.
func Execute(args []string, getenv func(string) string) int {
	m := NewMain()
	if err := m.ParseFlags(args, getenv); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintln(os.Stderr, "room-service: invalid configuration:\n"+err.Error())
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	code := 0
	if err := m.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "room-service:", err)
		code = 1
	} else {
		<-ctx.Done()
	}
	stop() // a second signal now kills the process at once
	m.Log.Info("shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), m.Config.ShutdownTimeout)
	defer cancel()
	if err := m.Close(sctx); err != nil {
		m.Log.Error("shutdown", "err", err)
		code = 1
	}
	return code
}

// Main is the program: configuration, wiring, run and ordered shutdown.
// End-to-end tests drive it in-process.
type Main struct {
	Config config.Config
	Log    *slog.Logger

	// Addr is the address the server listens on, set by Run.
	Addr string
	// AdminAddr is the admin surface's address, set by Run ("" when off).
	AdminAddr string
	// GRPCAddr is the address of the gRPC transport (grpc_listen), set by
	// Run ("" when off).
	GRPCAddr string

	// nodeID is this node's name, set by Run: node_id, or the host name
	// when node_id is empty.
	nodeID string

	// workers owns every goroutine Main starts: retention, reconciler,
	// relay, im-control, http and in fleet mode lease-renew and membership.
	workers workers
	metrics *metrics

	repo     store.Repository
	ledger   ledger
	bus      *natsbus.Bus
	redis    *redis.Client             // fleet mode only
	members  *redislease.Membership    // fleet mode only
	owners   rpc.Owners                // fleet mode only: routes a room's calls to its owner
	hops     *http.Client              // fleet mode only: calls to other nodes
	draining atomic.Bool               // set by drain: rooms nobody holds go to other nodes
	drainMu  sync.Mutex                // one drain at a time; a second waits for the first
	unready  time.Time                 // when drain turned readiness false; under drainMu
	health   *grpchealth.StaticChecker // drain turns it NOT_SERVING
	ready    *readiness                // health and the dependencies: /readyz, gRPC health
	// traceShutdown flushes and stops the tracer provider (a no-op when
	// tracing is off).
	traceShutdown func(context.Context) error
	timClient     *tencent.Client
	timLocal      *timlocal.Server // the local Tencent endpoint, without tim_sdkappid
	lane          *im.Lane
	registry      *cell.Registry
	server        *http.Server
	side          []*http.Server // the admin surface
	localIM       *http.Server   // the local Tencent endpoint's REST API, for the lane
	drained       func()         // tests: runs in Close once the rooms are drained, before the lane stops
	grpc          *grpc.Server   // the API's gRPC protocol on grpc_listen; nil when off
	grpcLn        net.Listener   // grpc_listen until it is served

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
		if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
			return nil, cell.Config{}, fmt.Errorf("data dir: %w", err)
		}
		db, err := sqlite.Open(ctx, filepath.Join(cfg.DataDir, "room.db"), sqlite.Options{Synchronous: cfg.SQLiteSync, Metrics: m.metrics.sqlite})
		if err == nil {
			db.SetCommitObserver(m.metrics.commits)
		}
		return db, cell.Config{CommitWorkers: 1}, err
	}
	var opts mysql.Options
	if cfg.RedisURL != "" {
		// A node frozen mid-commit must not keep its rows locked past its
		// leases: the server ends its transaction before another node
		// claims its rooms.
		opts.IdleTxTimeout = max(2*time.Second, cfg.LeaseTTL/2) // a claim waits for locks up to innodb_lock_wait_timeout
	}
	wait := 500 * time.Millisecond
	for {
		db, err := mysql.Open(ctx, cfg.MySQLDSN, opts)
		if err == nil {
			db.SetCommitObserver(m.metrics.commits)
			db.SetSnapshotLeftOut(func(s *store.SnapshotRecord, limit int) {
				m.metrics.snapshotsLeftOut.Inc()
				m.Log.Warn("room snapshot larger than the database's max_allowed_packet: left out; the room recovers from an earlier snapshot and a longer replay",
					"room_id", s.RoomID, "room_version", s.RoomVersion, "bytes", len(s.Payload), "max_allowed_packet", limit)
			})
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

// openLeases returns the room leases: in fleet mode (redis_url) the Redis
// lease of this node, renewed by the lease-renew worker, and the node's
// membership record, kept by the membership worker; otherwise the
// in-process lease. Redis down at start is not fatal: the node starts, logs
// it, and takes no room until Redis answers (Acquire reports
// lease_unavailable), since the lease and the membership retry on their own.
func (m *Main) openLeases(ctx context.Context, nodeID string) (lease.Lease, error) {
	cfg := m.Config
	if cfg.RedisURL == "" {
		return lease.NewLocal(), nil
	}
	opt, err := redislease.ClientOptions(cfg.RedisURL, cfg.LeaseTTL)
	if err != nil {
		return nil, err
	}
	m.redis = redis.NewClient(opt)
	pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	err = m.redis.Ping(pctx).Err()
	cancel()
	if err != nil {
		m.Log.Error("Redis is unreachable; rooms are taken once it answers", "err", err)
	}
	rc := redislease.Config{Self: redislease.Node{ID: nodeID, Addr: cfg.AdvertiseAddr}, TTL: cfg.LeaseTTL,
		Keys: redislease.Keys{Prefix: cfg.RedisKeyPrefix}}
	log := m.Log.With("component", "lease")
	leases, err := redislease.New(m.redis, rc, log, m.metrics.lease)
	if err != nil {
		return nil, err
	}
	if m.members, err = redislease.NewMembership(m.redis, rc, leases, log); err != nil {
		return nil, err
	}
	if err := m.workers.Go("lease-renew", leases.Run); err != nil {
		return nil, err
	}
	if err := m.workers.Go("membership", m.members.Run); err != nil {
		return nil, err
	}
	m.owners = fleetOwners{leases: leases, members: newRecentMembers(m.members.Members), self: nodeID, draining: &m.draining}
	m.hops = rpc.NewHopClient(cfg.LeaseTTL)
	m.Log.Info("fleet mode", "node_id", nodeID, "advertise_addr", cfg.AdvertiseAddr, "lease_ttl", cfg.LeaseTTL)
	return leases, nil
}

// routing is how calls reach other nodes: over the hop client in fleet
// mode; a single node forwards nothing. A hop is given up after hopTimeout.
func (m *Main) routing() rpc.Routing {
	r := rpc.Routing{Metrics: m.metrics.routing}
	if m.hops != nil {
		r.Client, r.HopTimeout = m.hops, hopTimeout(m.Config)
	}
	return r
}

// hopTimeout bounds one hop to a room's owner: three lease TTLs, by which
// an owner that stopped answering has lost its rooms' leases and another
// node can take them, but no less than an owner that is alive may take to
// answer a call (a commit and a wallet charge), so that a slow owner is not
// given up on while it works.
func hopTimeout(cfg config.Config) time.Duration {
	return max(3*cfg.LeaseTTL, cfg.CommitTimeout+cfg.WalletTimeout)
}

// ledger is the embedded COIN ledger: the wallet port over the service database.
type ledger interface {
	wallet.Wallet
	Close() error
}

// openBus connects to the configured NATS, or starts the embedded server
// under the data directory. An unreachable external server is retried until
// ctx ends.
func (m *Main) openBus(ctx context.Context) (*natsbus.Bus, error) {
	cfg := m.Config
	nc := natsbus.Config{URL: cfg.NATSURL, Stream: cfg.NATSStream, SubjectPrefix: cfg.NATSSubjects, Name: "room-service",
		FastBatches: cfg.NATSFastBatches == "on" || cfg.NATSFastBatches == "embedded" && cfg.NATSURL == ""}
	if cfg.NATSURL == "" {
		nc.StoreDir, nc.Listen, nc.Token = filepath.Join(cfg.DataDir, "nats"), cfg.NATSListen, cfg.NATSToken
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
// (returned, to be served at localAddr) with a key made up for this run.
func (m *Main) openIM(localAddr string) (*im.Lane, http.Handler, error) {
	cfg := m.Config
	tc := tencent.Config{Admin: cfg.TIMAdmin, SecretKey: cfg.TIMSecretKey, Endpoint: cfg.TIMEndpoint}
	var local http.Handler
	if cfg.TIMSDKAppID == "" {
		key := make([]byte, 32)
		if _, err := rand.Read(key); err != nil {
			return nil, nil, err
		}
		tc = tencent.Config{SDKAppID: 1400000000, SecretKey: hex.EncodeToString(key), Admin: "administrator", Endpoint: "http://" + localAddr}
		// Tencent's limits, as configured: the service meets them in development too.
		tl := timlocal.New(timlocal.Config{SDKAppID: tc.SDKAppID, SecretKey: tc.SecretKey, Admin: tc.Admin,
			APIRate: max(cfg.TIMAppBudget, cfg.TIMCallBudget)})
		// Its groups outlive a restart, so /local/ still shows them (and their mutes and bans) after kill -9.
		if err := tl.Persist(filepath.Join(cfg.DataDir, "timlocal-groups.json")); err != nil {
			return nil, nil, err
		}
		local, m.timLocal = tl, tl
	} else {
		id, _ := strconv.ParseUint(cfg.TIMSDKAppID, 10, 64) // checked by Validate
		tc.SDKAppID = id
	}
	// The lane schedules send_group_msg against the app budget; the client paces the other commands.
	tc.CallsPerSecond, tc.Paced = cfg.TIMCallBudget, []string{"send_group_msg"}
	client, err := tencent.New(tc, m.Log.With("component", "tencent-im"))
	if err != nil {
		return nil, nil, err
	}
	m.timClient = client
	regional, _ := cfg.RegionalGroups() // checked by Validate
	sender := im.RecreatingSender{Sender: im.TencentSender{Client: client}, Groups: im.TencentGroups{Client: client},
		Recreated: m.metrics.laneRecreated}
	lc := im.Config{Budget: float64(cfg.IMBudget), AppBudget: float64(cfg.TIMAppBudget), RegionalGroups: regional}
	newAppBudgetGauge(m.metrics.registry, lc.AppBudget)
	if m.redis != nil { // fleet mode: the nodes share the app budget
		interval, tolerance := im.Pacing(lc.AppBudget)
		if lc.Calls, err = redisbudget.New(m.redis, redisbudget.Key(tc.SDKAppID, "send_group_msg"), interval, tolerance); err != nil {
			return nil, nil, err
		}
		lc.Nodes = m.members.Nodes
	}
	return im.New(lc, sender, m.metrics.lane, m.Log.With("component", "im-lane")), local, nil
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

// Run opens storage, starts the engine and its workers, and starts serving.
// It returns once the listener is bound; serving continues until Close. On
// an error it returns at once, leaving what it opened to Close.
func (m *Main) Run(ctx context.Context) error {
	cfg := m.Config
	m.Log = newLogger(cfg)
	m.workers.log = m.Log
	m.Log.Info("starting room-service", cfg.Redacted()...)
	m.Log.Info("go runtime", tuneRuntime(cfg, os.Getenv, m.Log)...)
	m.metrics = newMetrics()
	m.health = grpchealth.NewStaticChecker(rpc.ServiceNames()...)
	m.ready = newReadiness(m.health, m.metrics.registry)
	nodeID := cfg.NodeID
	if nodeID == "" {
		nodeID, _ = os.Hostname()
	}
	m.nodeID = nodeID
	var tracing rpc.Options
	if err := m.setupTracing(ctx, nodeID, &tracing); err != nil {
		return fmt.Errorf("tracing: %w", err)
	}

	db, tuning, err := m.openStore(ctx)
	if err != nil {
		return fmt.Errorf("open storage: %w", err)
	}
	m.repo = db
	m.ready.add("storage", func(ctx context.Context) error {
		_, _, err := db.GetRoomMeta(ctx, "~readyz")
		return err
	})
	if err := m.workers.Go("outbox-gauges", func(ctx context.Context) error {
		return newOutboxGauges(m.metrics.registry).watch(ctx, outboxStats(db))
	}); err != nil {
		return err
	}
	if cfg.CommitWorkers > 0 {
		tuning.CommitWorkers = cfg.CommitWorkers
	}
	retain := &store.Retention{
		Repo: db, Interval: cfg.RetainEvery, Batch: 1000, KeepVersions: int64(cfg.RetainVersions),
		KeepCommandsFor: cfg.RetainCommands, KeepPublishedFor: cfg.RetainPublished, Log: m.Log,
	}
	if gifts, ok := db.(store.GiftRecordPruner); ok && cfg.RetainGifts > 0 {
		retain.GiftRecords, retain.KeepGiftRecordsFor = gifts, cfg.RetainGifts
	}
	if err := m.workers.Go("retention", loop(retain.Run)); err != nil {
		return err
	}

	catalogue, err := cfg.Catalogue()
	if err != nil {
		return err // Validate refused it already; reached only by a Config built in code
	}
	rules, err := cfg.Rules()
	if err != nil {
		return err
	}
	if m.ledger, err = walletledger.Of(db, walletledger.Options{}); err != nil {
		return fmt.Errorf("open ledger: %w", err)
	}
	reconciler := &wallet.Reconciler{
		Wallet: m.ledger, Committed: cell.CommittedGifts(db), After: cfg.ReconcileAfter,
		Log: m.Log.With("component", "wallet-reconciler"), Metrics: m.metrics.wallet,
	}
	reconcileEvery := max(cfg.ReconcileAfter/4, time.Second)
	if err := m.workers.Go("reconciler", loop(func(ctx context.Context) { reconciler.Run(ctx, reconcileEvery) })); err != nil {
		return err
	}
	leases, err := m.openLeases(ctx, nodeID)
	if err != nil {
		return fmt.Errorf("open leases: %w", err)
	}
	if m.redis != nil {
		m.ready.add("lease", func(ctx context.Context) error { return m.redis.Ping(ctx).Err() })
	}

	if m.bus, err = m.openBus(ctx); err != nil {
		return fmt.Errorf("open message queue: %w", err)
	}
	m.ready.add("nats", func(ctx context.Context) error { return m.bus.Conn().FlushWithContext(ctx) })
	if err := m.workers.Go("health", m.ready.run); err != nil {
		return err
	}
	relay := relay.New(db, m.bus, relay.LeaseGate{Lease: leases},
		relay.Config{MaxAttempts: int32(cfg.RelayAttempts)}, m.metrics.relay, m.Log.With("component", "relay"))
	if err := m.workers.Go("relay", loop(relay.Run)); err != nil {
		return err
	}
	// Listen before serving: a bad address fails Run, not a goroutine. The
	// address is known from here on.
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	m.Addr = ln.Addr().String()
	ln = m.limitConns(ln)
	imAddr, imLn, err := m.localIMListener()
	if err != nil {
		_ = ln.Close()
		return err
	}
	defer func() {
		if imLn != nil && m.localIM == nil { // Run failed before serving it
			_ = imLn.Close()
		}
	}()
	lane, local, err := m.openIM(imAddr)
	if err != nil {
		_ = ln.Close()
		return fmt.Errorf("im: %w", err)
	}
	m.lane = lane

	directory, err := m.startDirectory(db, nodeID)
	if err != nil {
		_ = ln.Close()
		return err
	}
	m.registry = cell.New(cell.Config{
		NodeID: nodeID, MailboxSize: cfg.MailboxSize, MaxBatch: cfg.MaxBatch, SnapshotEvery: cfg.SnapshotEvery,
		IdleTimeout: cfg.IdleTimeout, CommitTimeout: cfg.CommitTimeout, MaxRooms: cfg.MaxRooms, Linger: cfg.BatchLinger,
		CommitWorkers: tuning.CommitWorkers, CommitMaxRooms: tuning.CommitMaxRooms, CommitLinger: cfg.CommitLinger,
		Rules: rules, Wallet: m.ledger, WalletTimeout: cfg.WalletTimeout, GiftApplyWindow: cfg.GiftApplyWindow,
		TimerScanEvery: cfg.RocketScan, SettleInCommit: true, // the embedded ledger shares the room store's database
		PresenceTimeout: cfg.PresenceTimeout, MicOfflineGrace: cfg.MicOfflineGrace,
		Features: []cell.Feature{directory.Feature()}, Outbox: relay.Committed,
	}, db, leases, lane, m.metrics.cell, m.Log)

	platform := make(map[int64]bool, len(cfg.PlatformUsers))
	for _, id := range cfg.PlatformUsers {
		platform[id] = true
	}
	rooms := rpc.NewRoomHandler(m.registry, db, catalogue, lane, func(id int64) bool { return platform[id] }, m.Log)
	opts, err := m.apiOptions()
	if err != nil {
		_ = ln.Close()
		return err
	}
	opts.Metrics, opts.NodeID, opts.Owners, opts.Routing, opts.Fleet = m.metrics.registry, nodeID, m.owners, m.routing(), nodeFleet{m: m, self: nodeID}
	opts.Health, opts.Tracing, opts.Calls = m.ready, tracing.Tracing, newCallMetrics(m.metrics.registry)
	mux := rpc.NewMux(rooms, rpc.NewOperatorHandler(db, relay.Wake, m.Log), rpc.NewWalletHandler(m.ledger, m.Log), opts, m.Log)
	mux.Handle("/readyz", m.ready.readyz())
	mux.Handle("/livez", livez())
	if err := m.mountTIMCallback(mux.ServeMux); err != nil {
		_ = ln.Close()
		return err
	}
	if local != nil {
		// The zero-configuration Tencent IM: the REST API the lane calls.
		if err := m.mountLocalIM(mux.ServeMux, local, imLn); err != nil {
			_ = ln.Close()
			return err
		}
	}
	if err := m.serveAdmin(opts); err != nil {
		_ = ln.Close()
		return err
	}
	control := &im.Control{Bus: m.bus, API: im.TencentGroups{Client: m.timClient},
		Metrics: m.metrics.control, Log: m.Log.With("component", "im-control")}
	if err := m.workers.Go("im-control", control.Run); err != nil {
		_ = ln.Close()
		return err
	}
	server := m.serverLimits().NewServer(mux)
	if err := m.listenGRPC(mux, opts); err != nil {
		_ = ln.Close()
		return err
	}
	if err := m.goServe("http", ln, server.Serve, http.ErrServerClosed); err != nil {
		return err
	}
	m.server = server
	m.Log.Info("serving", "addr", m.Addr)
	return m.serveGRPC()
}

// directoryEvery is how often the room directory's projector writes.
const directoryEvery = time.Second

// startDirectory starts the room directory's projector on db, and the
// backfill of rooms without a row; the projector's final write runs when
// it is stopped, after the registry closed.
func (m *Main) startDirectory(db store.Repository, nodeID string) (*cell.Directory, error) {
	st, ok := db.(interface {
		cell.DirectoryStore
		cell.DirectoryBackfill
	})
	if !ok {
		return nil, fmt.Errorf("storage %T keeps no room directory", db)
	}
	directory := cell.NewDirectory(st, nodeID, directoryEvery, m.Log.With("component", "directory"))
	if err := m.workers.Go("directory", loop(directory.Run)); err != nil {
		return nil, err
	}
	err := m.workers.Go("directory-backfill", func(ctx context.Context) error {
		backfillDirectory(ctx, st, m.Log, time.Second)
		return nil
	})
	return directory, err
}

// backfillDirectory runs the directory's backfill until it completes or ctx
// ends. A failure (the database away at start) starts it over after wait,
// doubled each time up to 30 s: it delays the backfill, it does not end it.
func backfillDirectory(ctx context.Context, st cell.DirectoryBackfill, log *slog.Logger, wait time.Duration) {
	for ; ; wait = min(2*wait, 30*time.Second) {
		n, err := cell.Backfill(ctx, st)
		if n > 0 {
			log.Info("room directory: rooms without a row written", "rooms", n)
		}
		if err == nil || ctx.Err() != nil {
			return
		}
		log.Warn("room directory backfill failed; it starts over", "retry_in", wait, "err", err)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// loop adapts a worker loop that returns nothing.
func loop(run func(ctx context.Context)) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		run(ctx)
		return nil
	}
}

// Close shuts down once, in a fixed order: refuse new workers; in fleet
// mode mark the node draining; stop intake
// (the HTTP server finishes in-flight calls); drain the cells, which store
// their final snapshots; stop the IM lane and group control; stop the relay
// (rows not yet published stay pending for the next start); with every
// lease released, stop renewing and leave the fleet; stop the local Tencent
// endpoint, which the lane and group control reached until then; close the
// message queue; stop retention and the reconciler; close the IM client,
// the ledger, Redis and storage. It closes whatever Run opened, also after Run
// failed. It is bounded by ctx; calls after the first return the first's
// result.
func (m *Main) Close(ctx context.Context) error {
	m.closeOnce.Do(func() { m.closeErr = m.close(ctx) })
	return m.closeErr
}

func (m *Main) close(ctx context.Context) error {
	m.workers.Shutdown()
	var errs []error
	if m.owners != nil && m.registry != nil {
		// Hand-off: the rooms go first, while this node still takes calls
		// and forwards them to the rooms' next owners; then it keeps taking
		// calls until load balancers had drain_grace to see it unready.
		if _, err := m.drain(ctx); err != nil {
			errs = append(errs, err)
		}
		m.drainMu.Lock()
		grace := time.Until(m.unready.Add(m.Config.DrainGrace))
		m.drainMu.Unlock()
		if grace > 0 {
			timer := time.NewTimer(grace)
			select {
			case <-timer.C:
			case <-ctx.Done():
				timer.Stop()
			}
		}
		m.hops.CloseIdleConnections()
	}
	if m.server != nil {
		// In-flight calls get a third of the time at most, so draining the
		// rooms and their final snapshots always has the rest.
		httpCtx, cancel := ctx, context.CancelFunc(func() {})
		if deadline, ok := ctx.Deadline(); ok {
			httpCtx, cancel = context.WithDeadline(ctx, time.Now().Add(time.Until(deadline)/3))
		}
		grpcStopped := make(chan struct{})
		go func() { defer close(grpcStopped); m.stopGRPC(httpCtx) }()
		err := shutdownServer(httpCtx, m.server)
		errs = append(errs, m.shutdownSide(httpCtx)...)
		<-grpcStopped
		cancel()
		if err != nil {
			errs = append(errs, fmt.Errorf("http shutdown: %w", err))
		}
	} else {
		errs = append(errs, m.shutdownSide(ctx)...) // Run failed after starting them
	}
	if err := m.workers.Stop(ctx, "http"); err != nil {
		errs = append(errs, fmt.Errorf("serve: %w", err))
	}
	if err := m.workers.Stop(ctx, "grpc"); err != nil {
		errs = append(errs, fmt.Errorf("serve gRPC: %w", err))
	}
	if m.registry != nil {
		if err := m.registry.Close(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	if m.drained != nil {
		m.drained()
	}
	if m.lane != nil {
		m.lane.Close() // best effort: what is still queued is not sent
	}
	// The cells and the relay released their leases: renewal and the
	// membership record can go.
	for _, name := range []string{"im-control", "relay", "lease-renew", "membership"} {
		if err := m.workers.Stop(ctx, name); err != nil {
			errs = append(errs, err)
		}
	}
	errs = append(errs, m.closeLocalIM(ctx)...)
	if m.bus != nil {
		if err := m.bus.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close message queue: %w", err))
		}
	}
	// Retention and the reconciler, and any worker a later change adds
	// without a place above.
	if err := m.workers.StopAll(ctx); err != nil {
		errs = append(errs, err)
	}
	if m.timClient != nil {
		m.timClient.Close()
	}
	if m.ledger != nil {
		if err := m.ledger.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close ledger: %w", err))
		}
	}
	if m.redis != nil {
		if err := m.redis.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close redis: %w", err))
		}
	}
	if m.repo != nil {
		if err := m.repo.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close storage: %w", err))
		}
	}
	if m.traceShutdown != nil {
		if err := m.traceShutdown(ctx); err != nil {
			errs = append(errs, fmt.Errorf("flush traces: %w", err))
		}
	}
	return errors.Join(errs...)
}

// drain hands off every room this node holds, in fleet mode, and keeps
// the node serving as a router; Close and the Drain RPC use it. It marks
// the node draining (in the membership, best effort, so routers see it
// before the rooms go) and closes the registry: each cell answers what is
// queued, stores a final snapshot and releases its lease. A call that
// arrives meanwhile meets shutting_down and is sent to the room's next
// owner (a live node that is not draining claims it), so the next owner
// replays nothing and callers see only a short pause. It returns the rooms
// handed off: 0 once the node is drained.
func (m *Main) drain(ctx context.Context) (int, error) {
	m.drainMu.Lock()
	defer m.drainMu.Unlock()
	if m.draining.Swap(true) {
		return 0, nil
	}
	m.unready = time.Now()
	for _, name := range append(rpc.ServiceNames(), "") {
		m.health.SetStatus(name, grpchealth.StatusNotServing)
	}
	dctx, cancel := context.WithTimeout(ctx, time.Second)
	if err := m.members.SetDraining(dctx, true); err != nil {
		m.Log.Warn("mark the node draining", "err", err)
	}
	cancel()
	n, err := m.registry.Drain(ctx)
	m.metrics.handoffs.Add(float64(n))
	m.Log.Info("rooms handed off", "rooms", n)
	return n, err
}

func newLogger(cfg config.Config) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(strings.ToUpper(cfg.LogLevel)))
	opts := &slog.HandlerOptions{Level: level}
	// Lines logged with a traced context carry trace_id and span_id.
	if cfg.LogFormat == "json" {
		return slog.New(obs.LogHandler(slog.NewJSONHandler(os.Stderr, opts)))
	}
	return slog.New(obs.LogHandler(slog.NewTextHandler(os.Stderr, opts)))
}
