// Package obs is the service's tracing, the trace ids in its logs and the
// exemplars of its latency histograms. Tracing is configured by the
// standard OpenTelemetry environment (OTEL_TRACES_EXPORTER, default none;
// OTEL_TRACES_SAMPLER and _ARG; OTEL_EXPORTER_OTLP_*). With tracing off the
// global provider stays OpenTelemetry's no-op one and the helpers here
// start no span at all: a child span starts only under a recording parent.
package obs

import (
	"context"
	"errors"
	"os"
	"strings"

	"go.opentelemetry.io/contrib/exporters/autoexport"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// Tracer is the service's tracer. It is the global provider's, so it
// starts recording spans once Setup installed an exporting provider.
var Tracer = otel.Tracer("hyapp/room-service")

// noop is a span that records nothing; ending it does nothing.
var noop = trace.SpanFromContext(context.Background())

func init() {
	// W3C trace context (and baggage) in and out, whether or not this
	// process records spans: a call passing through keeps its trace.
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
}

// Setup installs the tracer provider the environment asks for and returns
// its shutdown (which flushes what is buffered) and whether spans are
// exported. OTEL_TRACES_EXPORTER unset, "none" or OTEL_SDK_DISABLED=true
// leave the global no-op provider: tracing costs nothing.
func Setup(ctx context.Context, service, node string) (shutdown func(context.Context) error, enabled bool, err error) {
	off := func(context.Context) error { return nil }
	exporter := strings.TrimSpace(os.Getenv("OTEL_TRACES_EXPORTER"))
	if exporter == "" || exporter == "none" || strings.EqualFold(os.Getenv("OTEL_SDK_DISABLED"), "true") {
		return off, false, nil
	}
	exp, err := autoexport.NewSpanExporter(ctx)
	if err != nil {
		return off, false, err
	}
	if autoexport.IsNoneSpanExporter(exp) {
		return off, false, nil
	}
	attrs := []attribute.KeyValue{semconv.ServiceName(service)}
	if node != "" {
		attrs = append(attrs, semconv.ServiceInstanceID(node))
	}
	// The environment (OTEL_RESOURCE_ATTRIBUTES, OTEL_SERVICE_NAME) wins.
	res, err := resource.Merge(resource.NewSchemaless(attrs...), resource.Environment())
	if err != nil {
		return off, false, errors.Join(err, exp.Shutdown(ctx))
	}
	// The sampler comes from OTEL_TRACES_SAMPLER/_ARG (default: parent
	// based, always on), the batching from OTEL_BSP_*.
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	otel.SetTracerProvider(tp)
	return tp.Shutdown, true, nil
}

// Start starts a child span of the span in ctx when that span records;
// otherwise it returns ctx and a span that records nothing, having
// allocated nothing. Check IsRecording before building attributes.
func Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	if !trace.SpanFromContext(ctx).IsRecording() {
		return ctx, noop
	}
	return Tracer.Start(ctx, name, opts...)
}

// StartFor starts one span for work done for several traced operations at
// once (a group commit, a wallet charge for a run of gifts, an IM message
// carrying several events): its parent is the first of parents, and it
// links the others. With no valid parent it records nothing.
func StartFor(ctx context.Context, name string, parents []trace.SpanContext, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	var first trace.SpanContext
	var links []trace.Link
	for _, sc := range parents {
		switch {
		case !sc.IsValid():
		case !first.IsValid():
			first = sc
		default:
			links = append(links, trace.Link{SpanContext: sc})
		}
	}
	if !first.IsSampled() {
		return ctx, noop
	}
	if len(links) > 0 {
		opts = append(opts, trace.WithLinks(links...))
	}
	return Tracer.Start(trace.ContextWithSpanContext(ctx, first), name, opts...)
}

// StartFrom starts a span in the trace of traceparent (a stored W3C
// traceparent: an outbox row's, an IM message's); with "" it starts
// nothing. opts may link further traces.
func StartFrom(ctx context.Context, traceparent, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	sc := ParseTraceParent(traceparent)
	if !sc.IsSampled() {
		return ctx, noop
	}
	return Tracer.Start(trace.ContextWithRemoteSpanContext(ctx, sc), name, opts...)
}

// FormatTraceParent encodes sc as a W3C traceparent header value.
func FormatTraceParent(sc trace.SpanContext) string {
	tid, sid := sc.TraceID(), sc.SpanID()
	var b strings.Builder
	b.Grow(55)
	b.WriteString("00-")
	b.WriteString(tid.String())
	b.WriteByte('-')
	b.WriteString(sid.String())
	b.WriteString("-")
	if sc.IsSampled() {
		b.WriteString("01")
	} else {
		b.WriteString("00")
	}
	return b.String()
}

// ParseTraceParent decodes a W3C traceparent header value; an empty or
// malformed one gives the invalid span context. The result is remote.
func ParseTraceParent(s string) trace.SpanContext {
	if s == "" {
		return trace.SpanContext{}
	}
	ctx := propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier{"traceparent": s})
	return trace.SpanContextFromContext(ctx)
}

// Inject writes the trace context of ctx into a header map (a forwarded
// call's, a published message's).
func Inject(ctx context.Context, carrier propagation.TextMapCarrier) {
	otel.GetTextMapPropagator().Inject(ctx, carrier)
}
