// Command room-service runs the room engine and serves its API.
//
// With no configuration it listens on 127.0.0.1:8080 and keeps its data in
// SQLite under ./data. See README.md for every setting.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"hyapp/room-service/cell"
	"hyapp/room-service/config"
	"hyapp/room-service/lease"
	"hyapp/room-service/rpc"
	"hyapp/room-service/store"
	"hyapp/room-service/store/mysql"
	"hyapp/room-service/store/sqlite"
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
	registry *cell.Registry
	sink     *cell.LogSink
	server   *http.Server
	serveErr chan error

	stopBackground context.CancelFunc
	background     sync.WaitGroup

	closeOnce sync.Once
	closeErr  error
}

// openStore opens the configured database: MySQL when a DSN is set (retrying
// while the server is unreachable, until ctx ends), SQLite under the data
// directory otherwise. It also returns the group-commit parallelism that
// suits the database.
func (m *Main) openStore(ctx context.Context) (store.Repository, int, error) {
	cfg := m.Config
	if cfg.MySQLDSN == "" {
		if err := os.MkdirAll(cfg.DataDir, 0o750); err != nil {
			return nil, 0, fmt.Errorf("data dir: %w", err)
		}
		db, err := sqlite.Open(ctx, filepath.Join(cfg.DataDir, "room.db"), sqlite.Options{Synchronous: cfg.SQLiteSync})
		return db, 1, err
	}
	wait := 500 * time.Millisecond
	for {
		db, err := mysql.Open(ctx, cfg.MySQLDSN, mysql.Options{})
		if err == nil {
			return db, 4, nil
		}
		if !errors.Is(err, store.ErrUnavailable) || ctx.Err() != nil {
			return nil, 0, err
		}
		m.Log.Error("MySQL is unreachable; retrying", "err", err, "retry_in", wait)
		select {
		case <-ctx.Done():
			return nil, 0, ctx.Err()
		case <-time.After(wait):
		}
		wait = min(2*wait, 10*time.Second)
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

	db, workers, err := m.openStore(ctx)
	if err != nil {
		return fmt.Errorf("open storage: %w", err)
	}
	m.repo = db
	if cfg.CommitWorkers > 0 {
		workers = cfg.CommitWorkers
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
	m.sink = cell.NewLogSink(m.Log, 4096, metrics.SinkDropped.Inc)
	nodeID := cfg.NodeID
	if nodeID == "" {
		nodeID, _ = os.Hostname()
	}
	m.registry = cell.New(cell.Config{
		NodeID: nodeID, MailboxSize: cfg.MailboxSize, MaxBatch: cfg.MaxBatch, SnapshotEvery: cfg.SnapshotEvery,
		IdleTimeout: cfg.IdleTimeout, CommitTimeout: cfg.CommitTimeout, CommitWorkers: workers,
	}, db, lease.NewLocal(), m.sink, metrics, m.Log)

	platform := make(map[int64]bool, len(cfg.PlatformUsers))
	for _, id := range cfg.PlatformUsers {
		platform[id] = true
	}
	mux := rpc.NewMux(
		rpc.NewRoomHandler(m.registry, db, func(id int64) bool { return platform[id] }, m.Log),
		rpc.NewOperatorHandler(db, m.Log),
		rpc.Options{Token: cfg.Token, Metrics: reg},
		m.Log,
	)
	// Listen before serving: a bad address fails Run, not a goroutine.
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	m.Addr = ln.Addr().String()
	m.server = rpc.NewServer(mux)
	m.serveErr = make(chan error, 1)
	go func() { m.serveErr <- m.server.Serve(ln) }()
	m.Log.Info("serving", "addr", m.Addr)
	return nil
}

// Close shuts down in a fixed order: stop intake (the HTTP server finishes
// in-flight calls), drain the cells with final snapshots, stop the sink,
// close storage. It is bounded by ctx; calls after the first return the
// first's result.
func (m *Main) Close(ctx context.Context) error {
	m.closeOnce.Do(func() { m.closeErr = m.close(ctx) })
	return m.closeErr
}

func (m *Main) close(ctx context.Context) error {
	var errs []error
	if m.server != nil {
		if err := m.server.Shutdown(ctx); err != nil {
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
	if m.stopBackground != nil {
		m.stopBackground()
		m.background.Wait()
	}
	if m.sink != nil {
		m.sink.Close()
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
