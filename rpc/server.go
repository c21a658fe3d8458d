package rpc

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/pprof"
	"path"
	"slices"
	"strings"

	"connectrpc.com/connect"
	"connectrpc.com/grpchealth"
	"connectrpc.com/grpcreflect"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/protobuf/reflect/protoreflect"

	"hyapp/room-service/auth"
	roomv1 "hyapp/room-service/gen/room/v1"
	"hyapp/room-service/gen/room/v1/roomv1connect"
	"hyapp/room-service/room"
)

// Options configure the HTTP surface.
type Options struct {
	// Callers are the services that may call the API, each with its token
	// and scopes (see accessTable). With no callers and no Token, no
	// credentials are configured: every call is served with every scope,
	// which the configuration allows on a loopback address only.
	Callers []auth.Caller
	// Token, when set, is one more caller, "token", with the scopes room
	// and act-as-any: the single service token of earlier versions.
	Token string
	// Users verifies the user assertions (UserHeader) of callers without
	// act-as-any; nil: such callers cannot act for a user.
	Users UserVerifier
	// MaxRequestBytes bounds a request message, before and after
	// decompression (default DefaultMaxRequestBytes).
	MaxRequestBytes int64
	// CreateRoomRate bounds the rooms each caller creates per second on
	// this node (bursts of twice as many); 0: no bound. Without
	// credentials configured there is one local caller and no bound.
	CreateRoomRate float64
	// Metrics is the registry served at /metrics by NewAdminMux, and by
	// NewMux when no credentials are configured (nil: no /metrics).
	Metrics prometheus.Gatherer
	// Health reports serving status; nil serves SERVING for every service.
	Health grpchealth.Checker
	// Owners, when set, sends each call that names a room to the node that
	// owns the room (see routes for which calls); nil: a single node,
	// serving every call itself.
	Owners Owners
	// NodeID names this node in the loop-guard header of the calls it forwards.
	NodeID string
	// Routing tunes forwarding; used only with Owners.
	Routing Routing
	// Tracing, when set, is the outermost interceptor: it starts each
	// call's span (honouring the caller's traceparent) before the callers
	// are authorised, so refusals are traced and audit lines carry the
	// trace id. nil: calls are not traced.
	Tracing connect.Interceptor
	// Calls observes every call the API serves (nil funcs: nothing).
	Calls CallMetrics
	// Fleet serves Drain and ListNodes, and with Owners sends a Drain to
	// the node it names; nil: Drain answers not_in_fleet and ListNodes
	// lists nothing.
	Fleet Fleet
}

// Open reports whether no credentials are configured: every call is
// served, and the admin surface is also served with the API.
func (o Options) Open() bool { return len(o.Callers) == 0 && o.Token == "" }

// NewMux mounts the API and gRPC health on one mux; with no credentials
// configured (Options.Open) also gRPC reflection and /metrics, which
// otherwise only NewAdminMux serves. ops serves the fleet's calls with
// opts.Fleet.
func NewMux(rooms *RoomHandler, ops *OperatorHandler, wallets *WalletHandler, opts Options, log *slog.Logger) *Mux {
	ops.fleet = opts.Fleet
	rooms.creates = newPerCaller(opts.CreateRoomRate)
	maxBytes := opts.MaxRequestBytes
	if maxBytes <= 0 {
		maxBytes = DefaultMaxRequestBytes
	}
	// Most answers are a few bytes: compressing them costs more CPU than
	// it saves on the wire. The health check answers in three.
	compression := connect.WithHandlerOptions(cappedGzip(maxBytes), connect.WithCompressMinBytes(compressMinBytes))
	handlerOpts := connect.WithHandlerOptions(
		strictCodecs(),
		compression,
		connect.WithRequestGate(authGate(callersOf(opts), opts.Users)),
		connect.WithInterceptors(interceptors(opts, log)...),
		connect.WithRecover(func(ctx context.Context, spec connect.Spec, _ http.Header, p any) error {
			log.ErrorContext(ctx, "handler panic", "procedure", spec.Procedure, "panic", p)
			return toConnect(ctx, log, room.Errorf(room.ErrInternal, "panic in %s", spec.Procedure))
		}),
	)
	if opts.Owners != nil {
		// Inside the recovery, after the malformed requests were refused.
		handlerOpts = connect.WithHandlerOptions(handlerOpts,
			connect.WithInterceptors(connect.UnaryInterceptorFunc(newRouter(opts.Owners, opts.Fleet, opts.NodeID, opts.Routing, log).intercept)))
	}
	refuse := unknownProcedure(connect.NewErrorWriter(handlerOpts), log)
	limit := limitBody(maxBytes)
	mux := &Mux{ServeMux: http.NewServeMux(), services: make(map[string]http.Handler)}
	mux.service(knownOnly(refuse, limit)(roomv1connect.NewRoomServiceHandler(rooms, handlerOpts)))
	mux.service(knownOnly(refuse, limit)(roomv1connect.NewOperatorServiceHandler(ops, handlerOpts)))
	mux.service(knownOnly(refuse, limit)(roomv1connect.NewWalletServiceHandler(wallets, handlerOpts)))
	mux.Handle("/", refuse)
	health := opts.Health
	if health == nil {
		health = grpchealth.NewStaticChecker(serviceNames...)
	}
	mux.service(grpchealth.NewHandler(health, compression))
	if opts.Open() {
		mountAdmin(mux.ServeMux, opts)
	}
	return mux
}

// Mux is the API's ServeMux, which finds the handler of a call to one of
// the API's services (and gRPC health) by its path's first segment, in a
// map, instead of the ServeMux's pattern matching: that matching took 6%
// of the service's CPU under snapshot reads through the gRPC transport.
// Any other path, or one the ServeMux would clean or redirect first, goes
// through the ServeMux as before.
type Mux struct {
	*http.ServeMux
	services map[string]http.Handler // by "/package.Service/"
}

// service mounts a service's handler on its path prefix.
func (m *Mux) service(prefix string, h http.Handler) {
	m.services[prefix] = h
	m.Handle(prefix, h)
}

// ServeHTTP sends a call to its service's handler, or to the ServeMux.
func (m *Mux) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if h := m.services[servicePrefix(r)]; h != nil {
		h.ServeHTTP(w, r)
		return
	}
	m.ServeMux.ServeHTTP(w, r)
}

// servicePrefix returns the first segment of a call's path, slashes
// included ("/room.v1.RoomService/"), when the ServeMux would route the
// call by that path as it is: a clean path, no CONNECT. "" otherwise.
func servicePrefix(r *http.Request) string {
	p := r.URL.Path
	if r.Method == http.MethodConnect || len(p) < 2 || p[0] != '/' || path.Clean(p) != p {
		return ""
	}
	i := strings.IndexByte(p[1:], '/')
	if i < 0 {
		return ""
	}
	return p[:i+2]
}

// interceptors are the API's interceptors, outermost first: tracing,
// the call metrics, then the refusal of malformed requests and the
// authorisation.
func interceptors(opts Options, log *slog.Logger) []connect.Interceptor {
	var out []connect.Interceptor
	if opts.Tracing != nil {
		out = append(out, opts.Tracing)
	}
	if opts.Calls.Served != nil {
		out = append(out, observeCalls(opts.Calls))
	}
	return append(out, refuseMalformed(log), authorize(log))
}

// serviceNames are the API's services.
var serviceNames = []string{roomv1connect.RoomServiceName, roomv1connect.OperatorServiceName, roomv1connect.WalletServiceName}

// NewAdminMux serves what operators and their tools read and nobody else
// should: gRPC reflection, /metrics and /debug/pprof/. It has no
// credentials of its own: serve it on a loopback or private address.
func NewAdminMux(opts Options) *http.ServeMux {
	mux := http.NewServeMux()
	mountAdmin(mux, opts)
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}

// mountAdmin mounts gRPC reflection and /metrics.
func mountAdmin(mux *http.ServeMux, opts Options) {
	reflector := grpcreflect.NewStaticReflector(append(serviceNames, grpchealth.HealthV1ServiceName)...)
	mux.Handle(grpcreflect.NewHandlerV1(reflector))
	mux.Handle(grpcreflect.NewHandlerV1Alpha(reflector))
	if opts.Metrics != nil {
		// OpenMetrics when the scraper asks for it: the latency histograms'
		// exemplars (trace ids) travel only in that format.
		mux.Handle("/metrics", promhttp.HandlerFor(opts.Metrics, promhttp.HandlerOpts{EnableOpenMetrics: true}))
	}
}

// compressMinBytes is the smallest answer the server compresses (when the
// caller accepts compression).
const compressMinBytes = 1024

// ServiceNames are the API's services, as gRPC health and reflection name them.
func ServiceNames() []string { return slices.Clone(serviceNames) }

// unknownProcedure answers a path that is no procedure of this service with
// unknown_procedure, in the caller's protocol, where connect and the mux
// would answer a bare 404.
func unknownProcedure(w *connect.ErrorWriter, log *slog.Logger) http.Handler {
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		_ = w.Write(rw, r, toConnect(r.Context(), log, room.Errorf(room.ErrUnknownProcedure, "no procedure %s", r.URL.Path)))
	})
}

// knownOnly passes a service's handler, wrapped by wrap, the calls of its
// methods and refuses the other paths under it.
func knownOnly(refuse http.Handler, wrap func(http.Handler) http.Handler) func(path string, h http.Handler) (string, http.Handler) {
	return func(path string, h http.Handler) (string, http.Handler) {
		name := protoreflect.FullName(strings.Trim(path, "/")).Name()
		svc := roomv1.File_room_v1_room_proto.Services().ByName(name)
		h = wrap(h)
		return path, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			method := protoreflect.Name(strings.TrimPrefix(r.URL.Path, path))
			if svc == nil || svc.Methods().ByName(method) == nil {
				refuse.ServeHTTP(w, r)
				return
			}
			h.ServeHTTP(w, r)
		})
	}
}

// Authorization returns the header value a client sends with token.
func Authorization(token string) (string, string) {
	return "Authorization", fmt.Sprintf("Bearer %s", token)
}
