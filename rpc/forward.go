package rpc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"time"

	"connectrpc.com/connect"

	"hyapp/room-service/lease"
	"hyapp/room-service/room"
)

// Owners says which node serves a room. The daemon adapts the fleet's
// lease and membership to it.
type Owners interface {
	// Owner returns the API address (host:port) of the live node other
	// than this one that holds the room; ok is false when this node holds
	// it or no live node does (then this node serves the call, claiming
	// the room). A node that is draining should name another live node
	// for a room nobody holds, so the call is not claimed by a node that
	// is leaving. An error (the lease service is down) makes this node
	// serve the call: a room it holds keeps working, and the database's
	// owner epoch fences any other. unreachable lists the addresses this
	// call's hops could not connect to, or that did not answer within the
	// hop's bound, so far: a node chosen for a room nobody holds should be
	// another, so that a member that does not serve (still starting,
	// crashed while its record lives on, frozen) is passed over; the
	// holder of the room's lease is named all the same, since only it
	// serves the room. Safe for concurrent use.
	Owner(ctx context.Context, roomID string, unreachable []string) (addr string, ok bool, err error)
}

// ForwardedBy is the loop-guard header of a forwarded call: it names the
// node that forwarded it. A call that carries it is served where it
// arrives and never forwarded again.
const ForwardedBy = "Room-Forwarded-By"

// forwardHeaders are the caller's headers a hop passes on: its credential
// and its user assertion, which the owner checks again. The deadline
// travels as the protocol's timeout header, from ctx.
// The caller's trace context goes on as it came, unless this node traces
// the hop (see hop).
var forwardHeaders = []string{"Authorization", UserHeader, "Traceparent", "Tracestate"}

// Routing tunes how calls reach the node that owns their room. Zero values
// take the defaults.
type Routing struct {
	// Client sends hops to other nodes (nil: http.DefaultClient). NewHopClient
	// makes one that multiplexes over HTTP/2 without TLS; its owner closes
	// its idle connections at shutdown.
	Client connect.HTTPClient
	// Attempts bounds the tries of one call: the first and its retries
	// after a room moved or a hop failed (default 12, about 1.3 s of
	// waiting with the default backoff: a hand-off takes far less).
	Attempts int
	// Backoff is the wait before the second retry; it doubles before each
	// next one up to MaxBackoff (defaults 10ms and 200ms). The first retry
	// goes at once: a moving room's old owner answers once the room is
	// released (see cell.Registry), so the next owner is usually there
	// already. The call's deadline bounds every wait.
	Backoff    time.Duration
	MaxBackoff time.Duration
	// HopTimeout bounds one hop to a room's owner, within the call's
	// deadline (0: the call's deadline alone). A hop that outlives it is
	// given up: a route that may be sent again (a room command, which
	// carries its command_id, or a read) is tried again on the owner found
	// then, another answers unavailable with its outcome unknown. Without
	// it, a call with no deadline forwarded to an owner that stopped
	// answering (frozen, or cut off by a partition that drops packets)
	// would wait for that owner as long as its connection lasts, after its
	// room had moved on. Set it above the longest an owner that is alive
	// takes to answer, and above the lease TTL, so that the owner found
	// then is not the one that stopped.
	HopTimeout time.Duration
	// Metrics observes forwarding; nil funcs observe nothing.
	Metrics RoutingMetrics
}

// RoutingMetrics observe forwarding.
type RoutingMetrics struct {
	// Forward counts hops by result: ok (the owner answered), retried (the
	// room moved or the hop failed; the call tries again), failed (the hop
	// failed and the call gave up), and loop_guard (a forwarded call
	// arrived and was served here).
	Forward func(result string)
	// Hop observes the latency of one hop; ctx carries the hop's span.
	Hop func(ctx context.Context, d time.Duration)
}

// Results of RoutingMetrics.Forward.
const (
	ForwardOK        = "ok"
	ForwardRetried   = "retried"
	ForwardFailed    = "failed"
	ForwardLoopGuard = "loop_guard"
)

// NewHopClient returns an HTTP client for hops between nodes: HTTP/2
// without TLS, so all calls to one node share a connection. Close its idle
// connections (CloseIdleConnections) at shutdown. A connection idle for
// hopIdle is closed, so one to a node that left does not stay open until
// that node's server gives up on it. A connection on which nothing arrived
// for silence is pinged, and closed when the ping is not answered within
// silence, failing the hops on it: TCP alone would keep a connection to a
// node that stopped answering for many minutes. The daemon passes the lease
// TTL, the time after which such a node's rooms move on; silence <= 0
// takes hopSilence.
func NewHopClient(silence time.Duration) *http.Client {
	if silence <= 0 {
		silence = hopSilence
	}
	p := new(http.Protocols)
	p.SetUnencryptedHTTP2(true)
	return &http.Client{Transport: &http.Transport{Protocols: p, IdleConnTimeout: hopIdle,
		HTTP2: &http.HTTP2Config{SendPingTimeout: silence, PingTimeout: silence}}}
}

// hopIdle is how long a hop connection may stay idle.
const hopIdle = 90 * time.Second

// hopSilence is how long a hop connection may hear nothing before it is
// pinged, and wait for the ping's answer, when no lease TTL is given: the
// default lease TTL.
const hopSilence = 5 * time.Second

// router sends each call that names a room to the node that owns it, and
// each call that names a node (Drain) to that node.
type router struct {
	owners  Owners
	fleet   Fleet // finds the node a Drain names; nil: every node serves it
	node    string
	client  connect.HTTPClient
	tries   int
	backoff time.Duration
	ceiling time.Duration // the longest backoff
	hopMax  time.Duration // bounds one hop to a room's owner; 0: none
	metrics RoutingMetrics
	log     *slog.Logger
}

func newRouter(owners Owners, fleet Fleet, node string, r Routing, log *slog.Logger) *router {
	rt := &router{owners: owners, fleet: fleet, node: node, client: r.Client, tries: r.Attempts, backoff: r.Backoff, ceiling: r.MaxBackoff, hopMax: r.HopTimeout, metrics: r.Metrics, log: log}
	if rt.client == nil {
		rt.client = http.DefaultClient
	}
	if rt.tries <= 0 {
		rt.tries = 12
	}
	if rt.backoff <= 0 {
		rt.backoff = 10 * time.Millisecond
	}
	if rt.ceiling < rt.backoff {
		rt.ceiling = max(rt.backoff, 200*time.Millisecond)
	}
	if rt.metrics.Forward == nil {
		rt.metrics.Forward = func(string) {}
	}
	if rt.metrics.Hop == nil {
		rt.metrics.Hop = func(context.Context, time.Duration) {}
	}
	return rt
}

// roomed is what every request that names a room has.
type roomed interface{ GetRoomId() string }

// intercept serves a call here or on its room's owner (see Owners). A
// call forwarded to this node (ForwardedBy) is served here. A call that
// meets a moving room (room_moved, room_leased_elsewhere, shutting_down),
// here or on the owner, or whose hop fails or outlives Routing.HopTimeout,
// is tried again on the owner found then (a hop whose outcome is unknown
// only when its route allows it), with the same request and so the same
// command_id, within the call's deadline and Routing.Attempts.
func (rt *router) intercept(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if req.Header().Get(ForwardedBy) != "" {
			rt.metrics.Forward(ForwardLoopGuard)
			return next(ctx, req)
		}
		rte := routes[req.Spec().Procedure]
		if rte.node {
			return rt.toNode(ctx, req, next, rte)
		}
		m, ok := req.Any().(roomed)
		if rte.hop == nil || !ok || room.CheckRoomID(m.GetRoomId()) != nil {
			return next(ctx, req) // the handler refuses a bad room id
		}
		return rt.serve(ctx, req, next, rte, m.GetRoomId())
	}
}

// noded is what every request that names a node has.
type noded interface{ GetNodeId() string }

// toNode serves a call that names a node (route.node) on that node: here
// when it names this one, else on the live node with that id, found in
// the fleet's membership, with one hop; no live node has the id:
// node_not_found. A bad id is refused by the handler here.
func (rt *router) toNode(ctx context.Context, req connect.AnyRequest, next connect.UnaryFunc, rte route) (connect.AnyResponse, error) {
	m, ok := req.Any().(noded)
	if !ok || rt.fleet == nil || m.GetNodeId() == rt.node || checkNodeID(m.GetNodeId()) != nil {
		return next(ctx, req)
	}
	id := m.GetNodeId()
	addr, found, err := rt.fleet.Addr(ctx, id)
	switch {
	case err != nil:
		return nil, toConnect(ctx, rt.log, err)
	case !found:
		return nil, toConnect(ctx, rt.log, room.Errorf(ErrNodeNotFound, "no live node has id %q", id))
	}
	res, err := rt.hop(ctx, rte, addr, req, rt.header(req))
	switch {
	case err == nil || connect.IsWireError(err):
		rt.metrics.Forward(ForwardOK)
		return res, err
	default:
		rt.metrics.Forward(ForwardFailed)
		return nil, toConnect(ctx, rt.log, room.Errorf(room.ErrUnavailable, "node %s at %s did not answer: %v", id, addr, err))
	}
}

// header is what a hop of req carries: the loop guard and the caller's
// credential.
func (rt *router) header(req connect.AnyRequest) map[string]string {
	header := map[string]string{ForwardedBy: rt.node}
	for _, k := range forwardHeaders {
		if v := req.Header().Get(k); v != "" {
			header[k] = v
		}
	}
	return header
}

// serve runs the call's attempts.
func (rt *router) serve(ctx context.Context, req connect.AnyRequest, next connect.UnaryFunc, rte route, roomID string) (connect.AnyResponse, error) {
	header := rt.header(req)
	wait := time.Duration(0) // the first retry goes at once
	var unreachable []string // owners found whose hops could not connect or answered nothing within the bound
	var err error
	for try := 1; ; try++ {
		var res connect.AnyResponse
		var again bool
		res, again, err = rt.attempt(ctx, req, next, rte, roomID, header, &unreachable, try == rt.tries)
		if !again {
			return res, err
		}
		if try == rt.tries {
			break
		}
		if wait > 0 {
			timer := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				timer.Stop()
				return nil, toConnect(ctx, rt.log, room.Errorf(room.ErrUnavailable, "room %s is moving: %v; retry with the same command_id", roomID, ctx.Err()))
			case <-timer.C:
			}
		}
		wait = min(max(2*wait, rt.backoff), rt.ceiling)
	}
	if connect.IsWireError(err) || Reason(err) != "" {
		return nil, err // the owner's or this node's last answer, unchanged
	}
	return nil, toConnect(ctx, rt.log, room.Errorf(room.ErrUnavailable, "room %s: its owner did not answer: %v; retry with the same command_id", roomID, err))
}

// attempt serves the call once, here or on the owner, and says whether to
// try again; last says no try follows. An owner the hop could not connect
// to is added to unreachable, for the next attempt's look-up.
func (rt *router) attempt(ctx context.Context, req connect.AnyRequest, next connect.UnaryFunc, rte route, roomID string, header map[string]string, unreachable *[]string, last bool) (res connect.AnyResponse, again bool, err error) {
	addr, remote, oerr := rt.owners.Owner(ctx, roomID, *unreachable)
	if oerr != nil {
		// Debug: while the lease service is down, every call would log it.
		rt.log.DebugContext(ctx, "room owner unknown; serving here", "room_id", roomID, "err", oerr)
	}
	if oerr != nil || !remote {
		res, err = next(ctx, req)
		return res, moving(err) && ctx.Err() == nil, err
	}
	res, err = rt.boundedHop(ctx, rte, addr, req, header)
	switch {
	case err == nil || connect.IsWireError(err) && !moving(err):
		rt.metrics.Forward(ForwardOK)
		return res, false, err
	case ctx.Err() != nil:
		rt.metrics.Forward(ForwardFailed)
		return nil, false, toConnect(ctx, rt.log, room.Errorf(room.ErrUnavailable, "room %s: %v; the command may still commit, retry with the same command_id", roomID, ctx.Err()))
	case connect.IsWireError(err) || rte.idempotent || unsent(err):
		if (unsent(err) || errors.Is(err, errHopBound)) && !slices.Contains(*unreachable, addr) {
			*unreachable = append(*unreachable, addr)
		}
		if last {
			rt.metrics.Forward(ForwardFailed)
		} else {
			rt.metrics.Forward(ForwardRetried)
		}
		return nil, true, err
	default:
		rt.metrics.Forward(ForwardFailed)
		return nil, false, toConnect(ctx, rt.log, room.Errorf(room.ErrUnavailable, "room %s: the hop to its owner failed after it was sent: %v", roomID, err))
	}
}

// boundedHop sends one hop to a room's owner within hopMax. When the
// hop's own bound ran out, not the call's, its error is no answer of the
// owner's: an owner that answered at that bound (deadline_exceeded, or
// unavailable from a cell that stopped waiting) did so only because the
// hop's deadline went with the call, so the call is not refused by it, and
// attempt treats the hop as one that failed after it was sent. The owner
// gets that deadline in whole milliseconds, rounded down, so its answer
// can come just before the hop's own context ends: an error within
// hopSlack of the bound counts as the bound's.
func (rt *router) boundedHop(ctx context.Context, rte route, addr string, req connect.AnyRequest, header map[string]string) (connect.AnyResponse, error) {
	if rt.hopMax <= 0 {
		return rt.hop(ctx, rte, addr, req, header)
	}
	hctx, cancel := context.WithTimeout(ctx, rt.hopMax)
	defer cancel()
	bound, _ := hctx.Deadline()
	caller, callerBound := ctx.Deadline()
	res, err := rt.hop(hctx, rte, addr, req, header)
	own := !callerBound || bound.Before(caller) // the bound is the hop's, not the call's
	if err != nil && ctx.Err() == nil && own && (hctx.Err() != nil || time.Until(bound) < hopSlack) {
		return nil, fmt.Errorf("owner at %s: %w within %v (%v)", addr, errHopBound, rt.hopMax, err)
	}
	return res, err
}

// errHopBound is a hop's own bound running out. Its node is passed over
// when the next attempt chooses a node for a room nobody holds, as one that
// refused the connection is: a member that accepts calls and answers none
// (frozen) would otherwise be chosen again on every attempt.
var errHopBound = errors.New("no answer")

// hopSlack is how close to a hop's bound an owner's error counts as the
// bound's (see boundedHop).
const hopSlack = 20 * time.Millisecond

// moving reports whether err says the room is changing owner, so the call
// may succeed on the owner found next.
func moving(err error) bool {
	switch Reason(err) {
	case room.ErrFenced.Reason, room.ErrShutdown.Reason, lease.ErrHeld.Reason:
		return true
	}
	return false
}

// unsent reports whether a hop failed before its request left this node
// (the connection could not be made), so it cannot have been applied.
func unsent(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}
