package obs

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"strings"
	"testing"

	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// spans records what the tests' spans export.
var spans = tracetest.NewInMemoryExporter()

func TestMain(m *testing.M) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	otel.SetTracerProvider(tp)
	code := m.Run()
	_ = tp.Shutdown(context.Background())
	os.Exit(code)
}

// untraced work allocates nothing and starts no span: the cost of tracing
// where a call is not traced (tracing off, or not sampled).
func TestUntracedStartsNothing(t *testing.T) {
	ctx := context.Background()
	allocs := testing.AllocsPerRun(1000, func() {
		c, span := Start(ctx, "child")
		if span.IsRecording() || c != ctx {
			t.Fatal("a span under no recording parent")
		}
		span.End()
		_, span = StartFor(ctx, "commit", nil)
		span.End()
		_, span = StartFrom(ctx, "", "publish")
		span.End()
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per untraced step, want 0", allocs)
	}
}

func TestStartForParentsAndLinks(t *testing.T) {
	spans.Reset()
	_, a := Tracer.Start(context.Background(), "a")
	_, b := Tracer.Start(context.Background(), "b")
	_, c := StartFor(context.Background(), "commit", []trace.SpanContext{{}, a.SpanContext(), b.SpanContext()})
	c.End()
	a.End()
	b.End()
	got := spans.GetSpans()
	if len(got) != 3 || got[0].Name != "commit" {
		t.Fatalf("spans %v", got)
	}
	commit := got[0]
	if commit.Parent.SpanID() != a.SpanContext().SpanID() || commit.SpanContext.TraceID() != a.SpanContext().TraceID() {
		t.Errorf("parent %v, want %v", commit.Parent, a.SpanContext())
	}
	if len(commit.Links) != 1 || commit.Links[0].SpanContext.SpanID() != b.SpanContext().SpanID() {
		t.Errorf("links %v, want b", commit.Links)
	}
}

func TestTraceParentRoundTrip(t *testing.T) {
	_, span := Tracer.Start(context.Background(), "cmd")
	defer span.End()
	tp := FormatTraceParent(span.SpanContext())
	if !strings.HasPrefix(tp, "00-"+span.SpanContext().TraceID().String()+"-") || !strings.HasSuffix(tp, "-01") {
		t.Fatalf("traceparent %q", tp)
	}
	sc := ParseTraceParent(tp)
	if !sc.Equal(span.SpanContext().WithRemote(true)) {
		t.Fatalf("parsed %v, want %v", sc, span.SpanContext())
	}
	spans.Reset()
	_, pub := StartFrom(context.Background(), tp, "publish")
	pub.End()
	if got := spans.GetSpans(); len(got) != 1 || got[0].Parent.SpanID() != span.SpanContext().SpanID() {
		t.Fatalf("publish span %v, want a child of %v", got, span.SpanContext())
	}
	if ParseTraceParent("00-zz").IsValid() || ParseTraceParent("").IsValid() {
		t.Fatal("a malformed traceparent parsed")
	}
}

func TestLogLinesCarryTheTrace(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(LogHandler(slog.NewTextHandler(&buf, nil))).With("component", "x")
	ctx, span := Tracer.Start(context.Background(), "cmd")
	defer span.End()
	log.InfoContext(ctx, "traced")
	log.Info("untraced")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("lines %q", lines)
	}
	want := "trace_id=" + span.SpanContext().TraceID().String() + " span_id=" + span.SpanContext().SpanID().String()
	if !strings.Contains(lines[0], want) || !strings.Contains(lines[0], "component=x") {
		t.Errorf("traced line %q lacks %q", lines[0], want)
	}
	if strings.Contains(lines[1], "trace_id") {
		t.Errorf("untraced line %q has a trace id", lines[1])
	}
}
