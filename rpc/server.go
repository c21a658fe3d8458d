package rpc

import (
	"context"
	"crypto/subtle"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"connectrpc.com/connect"
	"connectrpc.com/grpchealth"
	"connectrpc.com/grpcreflect"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/protobuf/reflect/protoreflect"

	roomv1 "hyapp/room-service/gen/room/v1"
	"hyapp/room-service/gen/room/v1/roomv1connect"
	"hyapp/room-service/room"
)

// Options configure the HTTP surface.
type Options struct {
	// Token, when set, must arrive as "Authorization: Bearer <token>" on every
	// RoomService and OperatorService call. Health, reflection and metrics stay open.
	Token string
	// Metrics is the registry served at /metrics (nil: no /metrics).
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
	// Fleet serves Drain and ListNodes, and with Owners sends a Drain to
	// the node it names; nil: Drain answers not_in_fleet and ListNodes
	// lists nothing.
	Fleet Fleet
}

// NewMux mounts the API, gRPC health, gRPC reflection and /metrics on one
// mux. ops serves the fleet's calls with opts.Fleet.
func NewMux(rooms *RoomHandler, ops *OperatorHandler, wallets *WalletHandler, opts Options, log *slog.Logger) *http.ServeMux {
	ops.fleet = opts.Fleet
	handlerOpts := connect.WithHandlerOptions(
		strictCodecs(),
		// Most answers are a few bytes: compressing them costs more CPU
		// than it saves on the wire.
		connect.WithCompressMinBytes(compressMinBytes),
		connect.WithRequestGate(authGate(opts.Token)),
		connect.WithInterceptors(refuseMalformed(log)),
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
	mux := http.NewServeMux()
	mux.Handle(knownOnly(refuse)(roomv1connect.NewRoomServiceHandler(rooms, handlerOpts)))
	mux.Handle(knownOnly(refuse)(roomv1connect.NewOperatorServiceHandler(ops, handlerOpts)))
	mux.Handle(knownOnly(refuse)(roomv1connect.NewWalletServiceHandler(wallets, handlerOpts)))
	mux.Handle("/", refuse)
	names := ServiceNames()
	reflector := grpcreflect.NewStaticReflector(append(names, grpchealth.HealthV1ServiceName)...)
	mux.Handle(grpcreflect.NewHandlerV1(reflector))
	mux.Handle(grpcreflect.NewHandlerV1Alpha(reflector))
	health := opts.Health
	if health == nil {
		health = grpchealth.NewStaticChecker(names...)
	}
	mux.Handle(grpchealth.NewHandler(health))
	if opts.Metrics != nil {
		mux.Handle("/metrics", promhttp.HandlerFor(opts.Metrics, promhttp.HandlerOpts{}))
	}
	return mux
}

// compressMinBytes is the smallest answer the server compresses (when the
// caller accepts compression).
const compressMinBytes = 1024

// ServiceNames are the API's services, as gRPC health and reflection name them.
func ServiceNames() []string {
	return []string{roomv1connect.RoomServiceName, roomv1connect.OperatorServiceName, roomv1connect.WalletServiceName}
}

// unknownProcedure answers a path that is no procedure of this service with
// unknown_procedure, in the caller's protocol, where connect and the mux
// would answer a bare 404.
func unknownProcedure(w *connect.ErrorWriter, log *slog.Logger) http.Handler {
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		_ = w.Write(rw, r, toConnect(r.Context(), log, room.Errorf(room.ErrUnknownProcedure, "no procedure %s", r.URL.Path)))
	})
}

// knownOnly passes a service's handler the calls of its methods and
// refuses the other paths under it.
func knownOnly(refuse http.Handler) func(path string, h http.Handler) (string, http.Handler) {
	return func(path string, h http.Handler) (string, http.Handler) {
		name := protoreflect.FullName(strings.Trim(path, "/")).Name()
		svc := roomv1.File_room_v1_room_proto.Services().ByName(name)
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

// NewServer returns an HTTP server for h that speaks HTTP/1.1 and HTTP/2
// without TLS (h2c), as gRPC clients on a private network expect.
func NewServer(h http.Handler) *http.Server {
	p := new(http.Protocols)
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	return &http.Server{Handler: h, Protocols: p, ReadHeaderTimeout: 10 * time.Second}
}

// authGate refuses a call without the service token before its body is
// read, so an unauthenticated caller learns nothing about its request.
func authGate(token string) connect.RequestGateFunc {
	want := []byte("Bearer " + token)
	return func(ctx context.Context, _ connect.Spec, _ connect.Peer, header http.Header) (context.Context, error) {
		if token != "" {
			got := []byte(strings.TrimSpace(header.Get("Authorization")))
			if subtle.ConstantTimeCompare(got, want) != 1 {
				return ctx, toConnect(ctx, nil, room.ErrUnauthorized)
			}
		}
		return ctx, nil
	}
}

// Authorization returns the header value a client sends with token.
func Authorization(token string) (string, string) {
	return "Authorization", fmt.Sprintf("Bearer %s", token)
}
