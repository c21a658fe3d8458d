package daemon

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"connectrpc.com/grpchealth"
	"github.com/prometheus/client_golang/prometheus"
)

// Readiness: each dependency is probed in the background every
// healthEvery (never per probe of a load balancer), and the node turns
// not ready only once one has failed for healthGrace without a break, so a
// short blip of a shared dependency does not take every node out at once.
const (
	healthEvery   = time.Second
	healthTimeout = time.Second
	healthGrace   = 5 * time.Second
	outboxEvery   = 15 * time.Second
)

// dependency is one background check.
type dependency struct {
	name  string
	probe func(ctx context.Context) error

	failingSince time.Time // zero while it answers
	lastErr      error
}

// readiness is the node's readiness: not draining (the static statuses,
// which drain turns to NOT_SERVING) and no dependency failing for the
// grace. It is the gRPC health checker and /readyz.
type readiness struct {
	static *grpchealth.StaticChecker
	grace  time.Duration
	up     *prometheus.GaugeVec // room_dependency_up{dependency}
	ready  prometheus.Gauge     // room_ready

	mu   sync.Mutex
	deps []*dependency
}

var _ grpchealth.Checker = (*readiness)(nil)

func newReadiness(static *grpchealth.StaticChecker, reg prometheus.Registerer) *readiness {
	r := &readiness{
		static: static, grace: healthGrace,
		up: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "room_dependency_up",
			Help: "Whether a dependency answered its latest background check (storage, nats, lease), 1 or 0."}, []string{"dependency"}),
		ready: prometheus.NewGauge(prometheus.GaugeOpts{Name: "room_ready",
			Help: "Whether the node reports ready: not draining, no dependency failing for the grace (5 s)."}),
	}
	reg.MustRegister(r.up, r.ready)
	return r
}

// add registers a dependency; call before run.
func (r *readiness) add(name string, probe func(ctx context.Context) error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.deps = append(r.deps, &dependency{name: name, probe: probe})
	r.up.WithLabelValues(name).Set(1)
}

// run probes every dependency every healthEvery until ctx ends.
func (r *readiness) run(ctx context.Context) error {
	ticker := time.NewTicker(healthEvery)
	defer ticker.Stop()
	for {
		r.probe(ctx, time.Now)
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		}
	}
}

// probe checks each dependency once, in parallel, each within healthTimeout.
func (r *readiness) probe(ctx context.Context, now func() time.Time) {
	r.mu.Lock()
	deps := append([]*dependency(nil), r.deps...)
	r.mu.Unlock()
	errs := make([]error, len(deps))
	var wg sync.WaitGroup
	for i, d := range deps {
		wg.Go(func() {
			pctx, cancel := context.WithTimeout(ctx, healthTimeout)
			defer cancel()
			errs[i] = d.probe(pctx)
		})
	}
	wg.Wait()
	if ctx.Err() != nil {
		return // shutting down: the probes were cut, not failed
	}
	t := now()
	r.mu.Lock()
	for i, d := range deps {
		d.lastErr = errs[i]
		switch {
		case errs[i] == nil:
			d.failingSince = time.Time{}
			r.up.WithLabelValues(d.name).Set(1)
		case d.failingSince.IsZero():
			d.failingSince = t
			r.up.WithLabelValues(d.name).Set(0)
		}
	}
	r.mu.Unlock()
	r.state(t)
}

// state says why the node is not ready ("" when it is ready) at now, and
// sets room_ready.
func (r *readiness) state(now time.Time) string {
	var why []string
	if res, err := r.static.Check(context.Background(), &grpchealth.CheckRequest{}); err != nil || res.Status != grpchealth.StatusServing {
		why = append(why, "draining")
	}
	r.mu.Lock()
	for _, d := range r.deps {
		if !d.failingSince.IsZero() && now.Sub(d.failingSince) >= r.grace {
			why = append(why, fmt.Sprintf("%s: failing for %s: %v", d.name, now.Sub(d.failingSince).Round(time.Second), d.lastErr))
		}
	}
	r.mu.Unlock()
	if len(why) > 0 {
		r.ready.Set(0)
	} else {
		r.ready.Set(1)
	}
	return strings.Join(why, "; ")
}

// Check implements grpchealth.Checker: the API's services (and "") follow
// readiness; an unknown service is NotFound.
func (r *readiness) Check(ctx context.Context, req *grpchealth.CheckRequest) (*grpchealth.CheckResponse, error) {
	res, err := r.static.Check(ctx, req)
	if err != nil || res.Status != grpchealth.StatusServing {
		return res, err
	}
	if r.state(time.Now()) != "" {
		return &grpchealth.CheckResponse{Status: grpchealth.StatusNotServing}, nil
	}
	return res, nil
}

// readyz answers whether load balancers should send calls here: 200 while
// the node serves, 503 with the failing checks in the body once it drains
// (SIGTERM or the Drain call) or a dependency has failed for the grace. A
// draining node still answers the calls that reach it, forwarding them to
// the rooms' next owners, for drain_grace after readiness turned false.
// gRPC health (grpc.health.v1) reports the same.
func (r *readiness) readyz() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if why := r.state(time.Now()); why != "" {
			http.Error(w, "not ready: "+why, http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ready\n"))
	})
}

// livez answers 200 while the process serves HTTP: restart it when this fails.
func livez() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("live\n"))
	})
}

// outboxGauges are the outbox's backlog as the database has it, read every
// outboxEvery (every node reads the one shared table: take max() across
// nodes).
type outboxGauges struct {
	pending, oldest, dead prometheus.Gauge
}

func newOutboxGauges(reg prometheus.Registerer) *outboxGauges {
	g := &outboxGauges{
		pending: prometheus.NewGauge(prometheus.GaugeOpts{Name: "room_outbox_pending_rows", Help: "Outbox rows still to deliver, due or not (the shared table, read every 15 s)."}),
		oldest:  prometheus.NewGauge(prometheus.GaugeOpts{Name: "room_outbox_oldest_pending_seconds", Help: "Age of the oldest pending outbox row; 0 when nothing is pending (read every 15 s)."}),
		dead:    prometheus.NewGauge(prometheus.GaugeOpts{Name: "room_outbox_dead_rows", Help: "Dead outbox rows waiting for an operator (roomctl outbox status / requeue; read every 15 s)."}),
	}
	reg.MustRegister(g.pending, g.oldest, g.dead)
	return g
}

// watch reads the outbox summary every outboxEvery until ctx ends.
func (g *outboxGauges) watch(ctx context.Context, stats func(ctx context.Context) (pending int64, oldest time.Time, dead int64, err error)) error {
	ticker := time.NewTicker(outboxEvery)
	defer ticker.Stop()
	for {
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		pending, oldest, dead, err := stats(sctx)
		cancel()
		if err == nil {
			g.pending.Set(float64(pending))
			g.dead.Set(float64(dead))
			age := 0.0
			if !oldest.IsZero() {
				age = max(0, time.Since(oldest).Seconds())
			}
			g.oldest.Set(age)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		}
	}
}
