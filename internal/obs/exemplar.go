package obs

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
)

// Observe records v in h, with the trace id of the span in ctx as the
// exemplar when that span is sampled, so a slow bucket leads to a trace.
func Observe(ctx context.Context, h prometheus.Observer, v float64) {
	ObserveFor(trace.SpanContextFromContext(ctx), h, v)
}

// ObserveFor records v in h with sc's trace id as the exemplar when sc is
// sampled.
func ObserveFor(sc trace.SpanContext, h prometheus.Observer, v float64) {
	if eo, ok := h.(prometheus.ExemplarObserver); ok && sc.IsSampled() {
		eo.ObserveWithExemplar(v, prometheus.Labels{"trace_id": sc.TraceID().String()})
		return
	}
	h.Observe(v)
}
