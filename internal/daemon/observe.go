package daemon

import (
	"context"
	"os"
	"time"

	"connectrpc.com/otelconnect"
	"github.com/prometheus/client_golang/prometheus"

	"hyapp/room-service/internal/obs"
	"hyapp/room-service/rpc"
	"hyapp/room-service/store"
)

// newCallMetrics registers the golden signals of the API's calls: rate and
// errors (room_rpc_requests_total by procedure and code) and latency
// (room_rpc_duration_seconds by procedure, with trace exemplars).
func newCallMetrics(reg prometheus.Registerer) rpc.CallMetrics {
	calls := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "room_rpc_requests_total", Help: "API calls served, by procedure and code (ok or the Connect code)."}, []string{"procedure", "code"})
	latency := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "room_rpc_duration_seconds", Help: "Latency of API calls, by procedure.", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16)}, []string{"procedure"})
	reg.MustRegister(calls, latency)
	return rpc.CallMetrics{Served: func(ctx context.Context, procedure, code string, d time.Duration) {
		calls.WithLabelValues(procedure, code).Inc()
		obs.Observe(ctx, latency.WithLabelValues(procedure), d.Seconds())
	}}
}

// newAppBudgetGauge registers the configured Tencent IM app budget, so
// dashboards and alerts can set the lane's sends against it.
func newAppBudgetGauge(reg prometheus.Registerer, budget float64) {
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "room_im_app_budget_calls_per_second", Help: "The configured Tencent IM app budget of send_group_msg (tim_app_budget), shared by the fleet."})
	reg.MustRegister(g)
	g.Set(budget)
}

// setupTracing installs the tracer provider the OTEL_* environment asks
// for and, when tracing is on, the API's tracing interceptor: it honours an
// incoming traceparent (the caller's trace goes on here) and records no
// metrics of its own (room_rpc_* are ours).
func (m *Main) setupTracing(ctx context.Context, nodeID string, opts *rpc.Options) error {
	shutdown, enabled, err := obs.Setup(ctx, "room-service", nodeID)
	if err != nil {
		return err
	}
	m.traceShutdown = shutdown
	if !enabled {
		return nil
	}
	ic, err := otelconnect.NewInterceptor(otelconnect.WithTrustRemote(), otelconnect.WithoutMetrics())
	if err != nil {
		return err
	}
	opts.Tracing = ic
	m.Log.Info("tracing on", "exporter", os.Getenv("OTEL_TRACES_EXPORTER"))
	return nil
}

// outboxStats adapts the repository's outbox backlog to outboxGauges.
func outboxStats(db store.Repository) func(ctx context.Context) (int64, time.Time, int64, error) {
	return func(ctx context.Context) (int64, time.Time, int64, error) {
		st, err := db.OutboxStats(ctx, 0)
		var dead int64
		for _, n := range st.Dead {
			dead += n
		}
		return st.Pending, st.OldestPending, dead, err
	}
}
