package cell_test

import (
	"context"
	"fmt"
	"testing"

	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"hyapp/room-service/cell"
	"hyapp/room-service/internal/obs"
	"hyapp/room-service/room"
)

// discard is a span exporter that keeps nothing.
type discard struct{}

func (discard) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discard) Shutdown(context.Context) error                             { return nil }

// BenchmarkSubmitTracing measures one command through a cell on SQLite:
// off is the default (the global no-op provider, an untraced call);
// off-incoming is a call that arrived with a sampled traceparent on a node
// that does not trace; on records every span (exported to nowhere).
// Compare off's ns/op and allocs/op with a build before tracing: the cell
// adds a nil check per step and allocates nothing for untraced calls
// (internal/obs TestUntracedStartsNothing asserts the zero).
//
//	go test ./cell -run '^$' -bench SubmitTracing -benchmem
func BenchmarkSubmitTracing(b *testing.B) {
	reg := newRegistry(b, openRepo(b), cell.DefaultConfig(), nil)
	createRoom(b, reg, "r")
	n := 0
	submit := func(b *testing.B, ctx func() (context.Context, trace.Span)) {
		b.ReportAllocs()
		for b.Loop() {
			n++
			title := fmt.Sprint("t", n)
			c, span := ctx()
			if _, err := reg.Submit(c, env("r", fmt.Sprint("c", n), 1, &room.UpdateProfile{Title: &title})); err != nil {
				b.Fatal(err)
			}
			span.End()
		}
	}
	untraced := func() (context.Context, trace.Span) {
		return context.Background(), trace.SpanFromContext(context.Background())
	}
	b.Run("off", func(b *testing.B) { submit(b, untraced) })
	incoming := trace.ContextWithRemoteSpanContext(context.Background(), obs.ParseTraceParent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"))
	b.Run("off-incoming", func(b *testing.B) {
		submit(b, func() (context.Context, trace.Span) { return incoming, trace.SpanFromContext(context.Background()) })
	})
	// The global provider can be set once per process: "on" runs last.
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(discard{}))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	otel.SetTracerProvider(tp)
	b.Run("on", func(b *testing.B) {
		submit(b, func() (context.Context, trace.Span) { return obs.Tracer.Start(context.Background(), "call") })
	})
}
