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
}

// NewMux mounts the API, gRPC health, gRPC reflection and /metrics on one mux.
func NewMux(rooms *RoomHandler, ops *OperatorHandler, wallets *WalletHandler, opts Options, log *slog.Logger) *http.ServeMux {
	handlerOpts := connect.WithHandlerOptions(
		connect.WithInterceptors(authInterceptor(opts.Token)),
		connect.WithRecover(func(ctx context.Context, spec connect.Spec, _ http.Header, p any) error {
			log.ErrorContext(ctx, "handler panic", "procedure", spec.Procedure, "panic", p)
			return toConnect(ctx, log, room.Errorf(room.ErrInternal, "panic in %s", spec.Procedure))
		}),
	)
	mux := http.NewServeMux()
	mux.Handle(roomv1connect.NewRoomServiceHandler(rooms, handlerOpts))
	mux.Handle(roomv1connect.NewOperatorServiceHandler(ops, handlerOpts))
	mux.Handle(roomv1connect.NewWalletServiceHandler(wallets, handlerOpts))
	names := []string{roomv1connect.RoomServiceName, roomv1connect.OperatorServiceName, roomv1connect.WalletServiceName}
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

// NewServer returns an HTTP server for h that speaks HTTP/1.1 and HTTP/2
// without TLS (h2c), as gRPC clients on a private network expect.
func NewServer(h http.Handler) *http.Server {
	p := new(http.Protocols)
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	return &http.Server{Handler: h, Protocols: p, ReadHeaderTimeout: 10 * time.Second}
}

func authInterceptor(token string) connect.UnaryInterceptorFunc {
	want := []byte("Bearer " + token)
	return func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			if token != "" {
				got := []byte(strings.TrimSpace(req.Header().Get("Authorization")))
				if subtle.ConstantTimeCompare(got, want) != 1 {
					return nil, toConnect(ctx, nil, room.ErrUnauthorized)
				}
			}
			return next(ctx, req)
		}
	}
}

// Authorization returns the header value a client sends with token.
func Authorization(token string) (string, string) {
	return "Authorization", fmt.Sprintf("Bearer %s", token)
}
