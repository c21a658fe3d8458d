package rpc

import (
	"context"
	"errors"
	"maps"
	"time"

	"connectrpc.com/connect"
	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"hyapp/room-service/internal/obs"
)

// CallMetrics observe the calls a node serves: the golden signals per
// procedure.
type CallMetrics struct {
	// Served observes one call: its procedure, its outcome ("ok" or the
	// Connect code), its latency; ctx carries the call's span.
	Served func(ctx context.Context, procedure, code string, d time.Duration)
}

// observeCalls is the interceptor that feeds CallMetrics; it sits inside
// the tracing interceptor, so the latency's exemplar is the call's trace.
func observeCalls(m CallMetrics) connect.UnaryInterceptorFunc {
	return func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			start := time.Now()
			res, err := next(ctx, req)
			code := "ok"
			if err != nil {
				code = connect.CodeOf(err).String()
			}
			m.Served(ctx, req.Spec().Procedure, code, time.Since(start))
			return res, err
		}
	}
}

// hop sends req to the owner at addr within a span of its own, passing the
// trace context on, and observes its latency.
func (rt *router) hop(ctx context.Context, rte route, addr string, req connect.AnyRequest, header map[string]string) (connect.AnyResponse, error) {
	ctx, span := obs.Start(ctx, "room.forward", trace.WithSpanKind(trace.SpanKindClient))
	if span.IsRecording() {
		span.SetAttributes(attribute.String("rpc.procedure", req.Spec().Procedure), attribute.String("server.address", addr))
		header = maps.Clone(header)
		delete(header, "Traceparent") // the caller's, passed on as it came: the hop's own span replaces it
		delete(header, "Tracestate")
		obs.Inject(ctx, propagation.MapCarrier(header))
	}
	start := time.Now()
	res, err := rte.hop(ctx, rt.client, addr, req, header)
	rt.metrics.Hop(ctx, time.Since(start))
	if err != nil && span.IsRecording() {
		span.SetStatus(otelcodes.Error, err.Error())
		var ce *connect.Error
		if errors.As(err, &ce) {
			span.SetAttributes(attribute.String("rpc.code", ce.Code().String()), attribute.String("room.reason", Reason(err)))
		}
	}
	span.End()
	return res, err
}
