package cell

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"hyapp/room-service/internal/obs"
	"hyapp/room-service/room"
)

// A traced request carries its caller's span (room.cell) into the cell:
// the cell records the mailbox wait and the apply under it, and the group
// commit and a run's wallet charge serve many requests at once, so their
// spans have the first traced request as parent and link the others.
// Untraced requests (tracing off, or not sampled) carry nothing and cost
// one nil check per step.

// startCall starts the caller's span of one call into a cell, when the
// caller's span records.
func startCall(ctx context.Context, roomID string, env *room.Envelope) (context.Context, trace.Span) {
	ctx, span := obs.Start(ctx, "room.cell")
	if span.IsRecording() {
		span.SetAttributes(attribute.String("room.id", roomID))
		if env != nil {
			span.SetAttributes(attribute.String("room.command_type", string(env.Command.Type())),
				attribute.String("room.command_id", env.CommandID))
		}
	}
	return ctx, span
}

// endCall ends a call's span with its outcome.
func endCall(span trace.Span, resp response, err error) {
	if span.IsRecording() {
		if err != nil {
			span.SetStatus(codes.Error, err.Error())
			span.SetAttributes(attribute.String("room.reason", room.AsError(err).Reason))
		} else if resp.result.RoomVersion > 0 {
			span.SetAttributes(attribute.Int64("room.version", resp.result.RoomVersion),
				attribute.Bool("room.duplicate", resp.result.Duplicate))
		}
	}
	span.End()
}

// traced marks req with the caller's span when it records, and the time
// it is queued.
func (req *request) traced(span trace.Span) {
	if span.IsRecording() {
		req.span, req.queued = span, time.Now()
	}
}

// ctx is a context carrying the request's span, for logging with its trace.
func (req *request) ctx() context.Context {
	if req.span == nil {
		return context.Background()
	}
	return trace.ContextWithSpan(context.Background(), req.span)
}

// start starts a child span of the request's span; a span that records
// nothing when the request is not traced.
func (req *request) start(name string, opts ...trace.SpanStartOption) trace.Span {
	if req.span == nil {
		return trace.SpanFromContext(context.Background())
	}
	_, span := obs.Tracer.Start(trace.ContextWithSpan(context.Background(), req.span), name, opts...)
	return span
}

// waited records the mailbox wait of each traced request of a batch the
// cell just took.
func waited(batch []*request, depth int) {
	now := time.Now()
	for _, req := range batch {
		if req.span != nil {
			span := req.start("cell.mailbox_wait", trace.WithTimestamp(req.queued))
			span.SetAttributes(attribute.Int("room.mailbox_depth", depth), attribute.Int("room.batch_requests", len(batch)))
			span.End(trace.WithTimestamp(now))
		}
	}
}

// parents are the valid span contexts sc finds among xs; nil when there
// is none (nothing traced: nothing allocated).
func parents[T any](xs []T, sc func(T) trace.SpanContext) []trace.SpanContext {
	var out []trace.SpanContext
	for _, x := range xs {
		if s := sc(x); s.IsValid() {
			out = append(out, s)
		}
	}
	return out
}

// spanContext is the request's span's context; invalid when not traced.
func (req *request) spanContext() trace.SpanContext {
	if req.span == nil {
		return trace.SpanContext{}
	}
	return req.span.SpanContext()
}

// traceParent is what the outbox rows and IM events of a request keep of
// its trace: its W3C traceparent, "" when not traced.
func (req *request) traceParent() string {
	if req.span == nil {
		return ""
	}
	return obs.FormatTraceParent(req.span.SpanContext())
}
