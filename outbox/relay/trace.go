package relay

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"hyapp/room-service/internal/obs"
	"hyapp/room-service/outbox"
)

// startPublish starts the span of a row's publish in the trace of the
// command that wrote it (outbox.Record.TraceContext); an untraced row
// starts nothing. The publisher passes the span on in the message.
func startPublish(ctx context.Context, row outbox.Record) (context.Context, trace.Span) {
	ctx, span := obs.StartFrom(ctx, row.TraceContext, "outbox.publish", trace.WithSpanKind(trace.SpanKindProducer))
	if span.IsRecording() {
		span.SetAttributes(attribute.String("room.id", row.RoomID), attribute.String("outbox.event_id", row.EventID),
			attribute.String("outbox.event_type", row.EventType), attribute.Int("outbox.attempts", int(row.Attempts)))
	}
	return ctx, span
}

// endPublish ends a publish span with its outcome.
func endPublish(span trace.Span, err error) {
	if err != nil && span.IsRecording() {
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// traced reports whether the row's command was sampled: its publish gets a
// span of its own.
func traced(row *outbox.Record) bool {
	return row.TraceContext != "" && obs.ParseTraceParent(row.TraceContext).IsSampled()
}
