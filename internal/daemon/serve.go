package daemon

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/netutil"
	"google.golang.org/grpc"

	"hyapp/room-service/internal/netwake"
	"hyapp/room-service/internal/obs"
	"hyapp/room-service/lease/redislease"
	"hyapp/room-service/rpc"
)

// apiOptions are the API's callers, user keys and limits from the
// configuration (Validate checked them).
func (m *Main) apiOptions() (rpc.Options, error) {
	cfg := m.Config
	callers, err := cfg.Callers()
	if err != nil {
		return rpc.Options{}, err
	}
	opts := rpc.Options{Callers: callers, MaxRequestBytes: int64(cfg.MaxRequestBytes), CreateRoomRate: float64(cfg.CreateRoomRate)}
	users, err := cfg.UserKeys()
	if err != nil {
		return rpc.Options{}, err
	}
	if users != nil {
		opts.Users = users
	}
	return opts, nil
}

// serverLimits are the API server's limits from the configuration.
func (m *Main) serverLimits() rpc.ServerLimits {
	cfg := m.Config
	return rpc.ServerLimits{
		ReadTimeout: cfg.HTTPReadTimeout, WriteTimeout: cfg.HTTPWriteTimeout, IdleTimeout: cfg.HTTPIdleTimeout,
		MaxConcurrentStreams: cfg.HTTP2MaxStreams,
	}
}

// limitConns bounds the open connections of the API listener: one over
// the bound waits in the kernel's accept queue until another closes.
func (m *Main) limitConns(ln net.Listener) net.Listener {
	return netutil.LimitListener(ln, m.Config.MaxConnections)
}

// serveSide serves h on ln under the worker name, within limits; Close
// shuts it down with the API server.
func (m *Main) serveSide(name string, ln net.Listener, h http.Handler, limits rpc.ServerLimits) error {
	srv := limits.NewServer(h)
	if err := m.goServe(name, ln, srv.Serve, http.ErrServerClosed); err != nil {
		return err
	}
	m.side = append(m.side, srv)
	return nil
}

// goServe runs serve(ln) as the worker name until it fails, or returns
// closed when its server was shut down; ln is closed when the worker
// cannot start.
func (m *Main) goServe(name string, ln net.Listener, serve func(net.Listener) error, closed error) error {
	if err := m.workers.Go(name, func(context.Context) error {
		if err := serve(ln); !errors.Is(err, closed) {
			return err
		}
		return nil
	}); err != nil {
		_ = ln.Close()
		return err
	}
	return nil
}

// listenUnlessOff listens on addr, a setting that may say "off": then it
// returns no listener and no error.
func listenUnlessOff(name, addr string) (net.Listener, error) {
	if addr == "off" {
		return nil, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("%s listen: %w", name, err)
	}
	return ln, nil
}

// listenGRPC listens on grpc_listen, unless it is off, for the API's gRPC
// protocol on grpc-go's transport: the calls of mux, within the API's
// limits (the connection bound is its own, as large as the API port's).
func (m *Main) listenGRPC(mux http.Handler, opts rpc.Options) error {
	ln, err := listenUnlessOff("grpc", m.Config.GRPCListen)
	if ln == nil {
		return err
	}
	m.GRPCAddr = ln.Addr().String()
	m.grpcLn = m.limitConns(netwake.Listener(ln, m.Config.GRPCBusyRead))
	m.grpc = m.serverLimits().NewGRPCServer(mux, opts.MaxRequestBytes, m.Log)
	return nil
}

// serveGRPC serves the listener of listenGRPC.
func (m *Main) serveGRPC() error {
	if m.grpc == nil {
		return nil
	}
	if err := m.goServe("grpc", m.grpcLn, m.grpc.Serve, grpc.ErrServerStopped); err != nil {
		return err
	}
	m.Log.Info("serving gRPC", "addr", m.GRPCAddr)
	return nil
}

// stopGRPC stops the gRPC transport: its calls in flight may finish
// until ctx ends, then they are cancelled.
func (m *Main) stopGRPC(ctx context.Context) {
	if m.grpc == nil {
		return
	}
	done := make(chan struct{})
	go func() {
		m.grpc.GracefulStop()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		m.grpc.Stop()
		<-done
	}
}

// serveAdmin serves the admin surface (metrics, reflection, pprof) on
// admin_listen, unless it is off.
func (m *Main) serveAdmin(opts rpc.Options) error {
	ln, err := listenUnlessOff("admin", m.Config.AdminListen)
	if ln == nil {
		return err
	}
	m.AdminAddr = ln.Addr().String()
	// A CPU profile or trace takes 30 s by default: the answer may take longer.
	if err := m.serveSide("admin", ln, rpc.NewAdminMux(opts), rpc.ServerLimits{WriteTimeout: 5 * time.Minute}); err != nil {
		return err
	}
	m.Log.Info("admin surface (/metrics, gRPC reflection, /debug/pprof/)", "addr", m.AdminAddr)
	return nil
}

// localIMListener returns where the lane reaches the local Tencent
// endpoint when Tencent IM is not configured: a listener of its own on a
// free loopback port (ln), which outlives the API port at shutdown, so the
// lane and group control reach it until they stop, as they would Tencent.
func (m *Main) localIMListener() (addr string, ln net.Listener, err error) {
	if m.Config.TIMSDKAppID != "" {
		return "", nil, nil
	}
	ln, err = net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, fmt.Errorf("local IM endpoint: %w", err)
	}
	return ln.Addr().String(), ln, nil
}

// mountLocalIM serves the local Tencent endpoint's REST API on ln, for the
// lane, and on a development server also on the API mux, with /local/ to
// watch what each room's group would show.
func (m *Main) mountLocalIM(mux *http.ServeMux, local http.Handler, ln net.Listener) error {
	if m.Config.Development() {
		mux.Handle("/v4/", rpc.DevOnly(local))
		mux.Handle("/local/", rpc.DevOnly(local))
		m.Log.Info("local Tencent IM endpoint: watch room messages at http://" + m.Addr + "/local/")
	}
	only := http.NewServeMux()
	only.Handle("/v4/", rpc.DevOnly(local))
	srv := m.serverLimits().NewServer(only)
	if err := m.goServe("local-im", ln, srv.Serve, http.ErrServerClosed); err != nil {
		return err
	}
	m.localIM = srv
	return nil
}

// closeLocalIM stops the local Tencent endpoint, once the lane and group
// control no longer call it, and stores its groups.
func (m *Main) closeLocalIM(ctx context.Context) []error {
	var errs []error
	if m.localIM != nil {
		// Nothing calls it any more. Shutdown would wait up to 5 s for the
		// connections the lane's client opened and never used.
		if err := m.localIM.Close(); err != nil {
			errs = append(errs, fmt.Errorf("local IM endpoint shutdown: %w", err))
		}
		if err := m.workers.Stop(ctx, "local-im"); err != nil {
			errs = append(errs, err)
		}
	}
	if m.timLocal != nil {
		if err := m.timLocal.Flush(); err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

// shutdownSide shuts the side servers down.
func (m *Main) shutdownSide(ctx context.Context) []error {
	var errs []error
	for _, srv := range m.side {
		if err := shutdownServer(ctx, srv); err != nil {
			errs = append(errs, fmt.Errorf("http shutdown: %w", err))
		}
	}
	return errs
}

// shutdownServer lets srv finish its calls until ctx ends, then cuts what
// is left: calls that outlived ctx, and HTTP/2 connections that were still
// reading their preface when Shutdown began, which net/http never sends a
// GOAWAY, so they would stay open for as long as their client keeps them.
func shutdownServer(ctx context.Context, srv *http.Server) error {
	err := srv.Shutdown(ctx)
	if err != nil {
		_ = srv.Close()
	}
	return err
}

// mountTIMCallback serves Tencent IM's callbacks at rpc.TIMCallbackPath
// when a callback token is configured; without one the path is not served
// (it answers unknown_procedure, HTTP 501, as any path the API does not
// serve). The callbacks' state changes reach the rooms loaded on this node
// and, in fleet mode, are passed on to the other nodes for theirs by the
// worker tim-fanout.
func (m *Main) mountTIMCallback(mux *http.ServeMux) error {
	token := m.Config.TIMCallbackToken
	if token == "" {
		return nil
	}
	appID, _ := strconv.ParseUint(m.Config.TIMSDKAppID, 10, 64) // checked by Validate; 0 (local endpoint): any
	log := m.Log.With("component", "tim-callback")
	var fanout func(string, []byte)
	if m.members != nil {
		f := m.newTIMFanout(log)
		if err := m.workers.Go("tim-fanout", f.run); err != nil {
			return err
		}
		fanout = f.pass
	}
	mux.Handle(rpc.TIMCallbackPath, rpc.TIMCallback(token, appID, m.registry, fanout, time.Now, log))
	m.Log.Info("Tencent IM callbacks served", "path", rpc.TIMCallbackPath)
	return nil
}

// Bounds of passing Tencent's callbacks on to the other nodes.
const (
	// timFanoutTimeout bounds passing one callback on to one other node, and
	// reading the membership before.
	timFanoutTimeout = 2 * time.Second
	// timMembersEvery is how long one read of the membership serves: a read
	// scans Redis's key space, meant for occasional checks, not for each
	// callback of a storm (a reconnect wave brings thousands a second).
	timMembersEvery = time.Second
	// timFanoutQueue bounds the callbacks waiting to be passed on; past it
	// a callback is not passed on.
	timFanoutQueue = 4096
	// timPassesPerNode bounds the callbacks being passed on to one node at
	// once: a node that does not answer (frozen, cut off) holds that many
	// connections and goroutines of this node for timFanoutTimeout, not one
	// of each per callback. Past it a callback is not passed on to that
	// node.
	timPassesPerNode = 32
)

// timCallback is a callback to pass on, as it came.
type timCallback struct {
	rawQuery string
	body     []byte
}

// timFanout passes callbacks on to every other node of the membership, in
// the background and best effort: a node that misses one still notices the
// member's silence (presence_timeout). The nodes are sent each callback at
// once, each within timFanoutTimeout of its own, so a node that does not
// answer (frozen, or cut off) delays no other. A node that is draining and
// held no lease at its last heartbeat is left out: it takes no room again,
// so it holds no member's room. Its work is bounded however many callbacks
// come: one membership read a second, timFanoutQueue callbacks waiting and
// timPassesPerNode passes in flight to each node.
type timFanout struct {
	m      *Main
	client *http.Client
	log    *slog.Logger
	queue  chan timCallback
	// dropped counts callbacks not passed on because too many waited.
	dropped atomic.Int64
	// failed paces the lines of passes and membership reads that fail: a
	// node that is down fails every callback's pass to it.
	failed obs.Sometimes

	// Owned by run.
	members []redislease.Member
	readAt  time.Time
	passes  sync.WaitGroup

	mu       sync.Mutex
	inFlight map[string]int // node address → passes in flight
}

// newTIMFanout returns the fanout of m's callbacks; its run passes them on.
func (m *Main) newTIMFanout(log *slog.Logger) *timFanout {
	return &timFanout{m: m, client: &http.Client{Timeout: timFanoutTimeout}, log: log,
		queue: make(chan timCallback, timFanoutQueue), inFlight: map[string]int{}, failed: obs.Sometimes{Every: time.Second}}
}

// pass queues a callback to pass on; it never blocks the callback's answer.
func (f *timFanout) pass(rawQuery string, body []byte) {
	select {
	case f.queue <- timCallback{rawQuery: rawQuery, body: body}:
	default:
		if n := f.dropped.Add(1); n&(n-1) == 0 { // 1st, 2nd, 4th…: a storm does not flood the log
			f.log.Warn("pass a callback on: too many waiting; not passed on", "dropped", n)
		}
	}
}

// run passes the queued callbacks on until ctx ends, then waits for the
// passes in flight (each within timFanoutTimeout).
func (f *timFanout) run(ctx context.Context) error {
	defer f.passes.Wait()
	for {
		select {
		case <-ctx.Done():
			return nil
		case cb := <-f.queue:
			f.passOn(ctx, cb)
		}
	}
}

// passOn sends cb to every other live node, with the membership read at
// most timMembersEvery ago (a failed read keeps the one before).
func (f *timFanout) passOn(ctx context.Context, cb timCallback) {
	if now := time.Now(); now.Sub(f.readAt) >= timMembersEvery {
		f.readAt = now
		rctx, cancel := context.WithTimeout(ctx, timFanoutTimeout)
		members, err := f.m.members.Members(rctx)
		cancel()
		if err != nil {
			f.fail("pass a callback on: read the membership", "", err)
		} else {
			f.members = members
		}
	}
	for _, mb := range f.members {
		if mb.NodeID == f.m.nodeID || mb.Addr == "" || mb.Draining && mb.Rooms == 0 {
			continue
		}
		if !f.take(mb.Addr) {
			continue // the node has timPassesPerNode callbacks unanswered
		}
		f.passes.Go(func() {
			defer f.give(mb.Addr)
			if err := f.m.passOn(f.client, mb.Addr, cb.rawQuery, cb.body); err != nil {
				f.fail("pass a callback on", mb.NodeID, err)
			}
		})
	}
}

// fail logs a failed pass or read, at most once a second, with how many
// lines were held back since the last.
func (f *timFanout) fail(msg, nodeID string, err error) {
	if ok, held := f.failed.Allow(time.Now()); ok {
		f.log.Warn(msg, "node_id", nodeID, "err", err, "held_back", held)
	}
}

// take claims one of addr's passes in flight, if it has one left.
func (f *timFanout) take(addr string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.inFlight[addr] >= timPassesPerNode {
		return false
	}
	f.inFlight[addr]++
	return true
}

// give returns a pass claimed by take.
func (f *timFanout) give(addr string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.inFlight[addr]--; f.inFlight[addr] == 0 {
		delete(f.inFlight, addr)
	}
}

// passOn sends a callback to the node at addr, marked as passed on by this
// node so that it goes no further, within timFanoutTimeout.
func (m *Main) passOn(client *http.Client, addr, rawQuery string, body []byte) error {
	ctx, cancel := context.WithTimeout(context.Background(), timFanoutTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+rpc.TIMCallbackPath+"?"+rawQuery, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(rpc.TIMForwardedHeader, m.nodeID)
	res, err := client.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, res.Body)
	return res.Body.Close()
}
