package im

import (
	"context"
	"slices"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"hyapp/room-service/internal/obs"
)

// traces are the traceparents of the traced items of a message, the
// oldest event's first, each once; nil when none is traced (nothing
// allocated).
func traces(items []*item) []string {
	oldest := -1
	for i, it := range items {
		if it.trace != "" && (oldest < 0 || it.queued.Before(items[oldest].queued)) {
			oldest = i
		}
	}
	if oldest < 0 {
		return nil
	}
	out := []string{items[oldest].trace}
	for _, it := range items {
		if it.trace != "" && !slices.Contains(out, it.trace) {
			out = append(out, it.trace)
		}
	}
	return out
}

// startSend starts the span of a message's send in the trace of its oldest
// traced event, linking the traces of the others; a message with no
// traced event starts nothing.
func startSend(ctx context.Context, m Message) (context.Context, trace.Span) {
	if len(m.traces) == 0 {
		return obs.StartFrom(ctx, "", "")
	}
	var opts []trace.SpanStartOption
	for _, tp := range m.traces[1:] {
		if sc := obs.ParseTraceParent(tp); sc.IsValid() {
			opts = append(opts, trace.WithLinks(trace.Link{SpanContext: sc}))
		}
	}
	ctx, span := obs.StartFrom(ctx, m.traces[0], "im.send", append(opts, trace.WithSpanKind(trace.SpanKindClient))...)
	if span.IsRecording() {
		span.SetAttributes(attribute.String("im.group_id", m.GroupID), attribute.String("im.type", m.Type),
			attribute.String("im.priority", string(m.Priority)), attribute.Int("im.attempt", m.attempts+1),
			attribute.Int64("room.version", m.version))
	}
	return ctx, span
}

// endSend ends a send span with its outcome.
func endSend(span trace.Span, err error) {
	if err != nil && span.IsRecording() {
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}
