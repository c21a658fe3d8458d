package daemon

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"hyapp/room-service/cell"
	"hyapp/room-service/im"
	"hyapp/room-service/internal/obs"
	"hyapp/room-service/lease/redislease"
	"hyapp/room-service/outbox/relay"
	"hyapp/room-service/room"
	"hyapp/room-service/rpc"
	"hyapp/room-service/store/sqlite"
	"hyapp/room-service/store/sqlstore"
	"hyapp/room-service/wallet"
)

// metrics is every instrument the service exports, built and registered in
// one place, once per Run; /metrics serves registry.
type metrics struct {
	registry *prometheus.Registry
	cell     *cell.Metrics
	wallet   *wallet.Metrics
	relay    relay.Metrics
	lane     im.Metrics
	control  im.ControlMetrics
	routing  rpc.RoutingMetrics
	lease    redislease.Metrics
	sqlite   sqlite.Metrics
	// commits hears the path of each room commit transaction
	// (sqlstore.DB.SetCommitObserver).
	commits func(path string, declined bool)
	// handoffs counts rooms this node handed off when it drained.
	handoffs prometheus.Counter
	// snapshotsLeftOut counts snapshots too large for MySQL's packet limit.
	snapshotsLeftOut prometheus.Counter
	// laneRecreated counts IM groups the lane created again (control's
	// count is control.Recreated, the same metric under another label).
	laneRecreated func()
}

// newMetrics builds and registers every metric set: the Go runtime and the
// process, the cells, the wallet, the outbox relay, the IM lane, group
// control and the fleet's room leases.
func newMetrics() *metrics {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	recreated := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "room_im_groups_recreated_total", Help: "IM groups created again because a call found them missing, by path (lane, control)."}, []string{"path"})
	reg.MustRegister(recreated)
	handoffs := prometheus.NewCounter(prometheus.CounterOpts{Name: "room_handoffs_total", Help: "Rooms this node handed off when it drained (a final snapshot stored, the lease released)."})
	reg.MustRegister(handoffs)
	leftOut := prometheus.NewCounter(prometheus.CounterOpts{Name: "room_snapshots_left_out_total", Help: "Room snapshots a commit or a stop left out because they exceed MySQL's max_allowed_packet: the room recovers from an earlier snapshot and a longer replay (raise max_allowed_packet)."})
	reg.MustRegister(leftOut)
	return &metrics{
		handoffs:         handoffs,
		snapshotsLeftOut: leftOut,
		registry:         reg,
		cell:             cell.NewMetrics(reg),
		wallet:           wallet.NewMetrics(reg),
		relay:            newRelayMetrics(reg),
		lane:             newLaneMetrics(reg),
		control:          newControlMetrics(reg, recreated),
		routing:          newRoutingMetrics(reg),
		laneRecreated:    recreated.WithLabelValues("lane").Inc,
		lease:            newLeaseMetrics(reg),
		sqlite:           newSQLiteMetrics(reg),
		commits:          newCommitPathMetrics(reg),
	}
}

// newCommitPathMetrics registers the count of room commit transactions by
// the path they took, and of one-trip attempts that gave way (MySQL).
func newCommitPathMetrics(reg prometheus.Registerer) func(path string, declined bool) {
	paths := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "room_store_commits_total", Help: "Room commit transactions that committed, by path: one_trip (MySQL: the writes and the fence in one query), merged (a statement per step), one_by_one (each batch in a savepoint, after a duplicate key)."}, []string{"path"})
	declined := prometheus.NewCounter(prometheus.CounterOpts{Name: "room_store_one_trip_declined_total", Help: "One-trip commits that gave way to the statement-per-step path (a batch fenced, a duplicate key, a gift charge refused)."})
	reg.MustRegister(paths, declined)
	for _, p := range []string{sqlstore.PathOneTrip, sqlstore.PathMerged, sqlstore.PathOneByOne} {
		paths.WithLabelValues(p)
	}
	return func(path string, gaveWay bool) {
		paths.WithLabelValues(path).Inc()
		if gaveWay {
			declined.Inc()
		}
	}
}

// newSQLiteMetrics registers the instruments of the embedded database's
// background checkpoints (they stay at zero on MySQL).
func newSQLiteMetrics(reg prometheus.Registerer) sqlite.Metrics {
	took := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "room_sqlite_checkpoint_seconds",
		Help:    "SQLite checkpoints by mode: a passive pass's copy and sync of the database file (commits wait on the disk meanwhile), a restart's hold on the writer.",
		Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1},
	}, []string{"mode"})
	failed := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "room_sqlite_checkpoint_failures_total", Help: "SQLite checkpoints that failed, by mode (a restart a reader kept from starting the log over is tried again at the next pass)."}, []string{"mode"})
	frames := prometheus.NewGauge(prometheus.GaugeOpts{Name: "room_sqlite_wal_frames", Help: "Frames in SQLite's write-ahead log at the last checkpoint pass (4 KiB each; it starts over past 65,536)."})
	reg.MustRegister(took, failed, frames)
	return sqlite.Metrics{
		Checkpoint: func(mode string, d time.Duration, err error) {
			took.WithLabelValues(mode).Observe(d.Seconds())
			if err != nil {
				failed.WithLabelValues(mode).Inc()
			}
		},
		LogFrames: func(n int64) { frames.Set(float64(n)) },
	}
}

// newLeaseMetrics registers the Redis lease's instruments (fleet mode; they
// stay at zero on a single node).
func newLeaseMetrics(reg prometheus.Registerer) redislease.Metrics {
	held := prometheus.NewGauge(prometheus.GaugeOpts{Name: "room_leases_held", Help: "Room and relay leases this node holds in Redis."})
	acquired := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "room_lease_acquisitions_total", Help: "Lease acquisitions, by result (ok, held, unavailable)."}, []string{"result"})
	renewFailed := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "room_lease_renew_failures_total", Help: "Failed lease renewals, by kind (not_ours: another holder; unreachable: Redis did not answer)."}, []string{"kind"})
	degraded := prometheus.NewGauge(prometheus.GaugeOpts{Name: "room_leases_degraded", Help: "Held leases Redis could not renew lately; their rooms are served on, fenced by the owner epoch."})
	lost := prometheus.NewCounter(prometheus.CounterOpts{Name: "room_leases_lost_total", Help: "Leases another holder took; the room stopped here."})
	reg.MustRegister(held, acquired, renewFailed, degraded, lost)
	return redislease.Metrics{
		Held:        func(n int) { held.Set(float64(n)) },
		Acquired:    func(r string) { acquired.WithLabelValues(r).Inc() },
		RenewFailed: func(k string) { renewFailed.WithLabelValues(k).Inc() },
		Degraded:    func(n int) { degraded.Set(float64(n)) },
		Lost:        lost.Inc,
	}
}

// newRoutingMetrics registers the instruments of calls forwarded to their
// room's owner.
func newRoutingMetrics(reg prometheus.Registerer) rpc.RoutingMetrics {
	forwards := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "room_forwards_total", Help: "Calls forwarded to their room's owner, by result (ok, retried, failed, loop_guard)."}, []string{"result"})
	hop := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "room_forward_hop_seconds", Help: "Latency of one hop to a room's owner.", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14)})
	reg.MustRegister(forwards, hop)
	for _, r := range []string{rpc.ForwardOK, rpc.ForwardRetried, rpc.ForwardFailed, rpc.ForwardLoopGuard} {
		forwards.WithLabelValues(r)
	}
	return rpc.RoutingMetrics{
		Forward: func(r string) { forwards.WithLabelValues(r).Inc() },
		Hop:     func(ctx context.Context, d time.Duration) { obs.Observe(ctx, hop, d.Seconds()) },
	}
}

// newControlMetrics registers group control's instruments.
func newControlMetrics(reg prometheus.Registerer, recreated *prometheus.CounterVec) im.ControlMetrics {
	applied := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "room_im_control_applied_total", Help: "Durable events group control applied, by event type."}, []string{"event_type"})
	retried := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "room_im_control_retried_total", Help: "Group control attempts that failed and will be retried, by event type and reason."}, []string{"event_type", "reason"})
	terminated := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "room_im_control_terminated_total", Help: "Durable events group control gave up for good (terminated), by event type and reason (roomctl im status lists them)."}, []string{"event_type", "reason"})
	reg.MustRegister(applied, retried, terminated)
	return im.ControlMetrics{
		Applied:    func(t string) { applied.WithLabelValues(t).Inc() },
		Retried:    func(t, r string) { retried.WithLabelValues(t, r).Inc() },
		Terminated: func(t, r string) { terminated.WithLabelValues(t, r).Inc() },
		Recreated:  recreated.WithLabelValues("control").Inc,
	}
}

// newLaneMetrics registers the IM lane's instruments.
func newLaneMetrics(reg prometheus.Registerer) im.Metrics {
	sent := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "room_im_sent_total", Help: "IM messages sent, by priority."}, []string{"priority"})
	shed := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "room_im_shed_total", Help: "IM events the lane dropped, by priority and reason."}, []string{"priority", "reason"})
	merged := prometheus.NewCounter(prometheus.CounterOpts{Name: "room_im_merged_total", Help: "IM events sent without a message of their own: in a Batch, or folded into a count."})
	coalesced := prometheus.NewCounter(prometheus.CounterOpts{Name: "room_im_coalesced_total", Help: "Display values replaced by a newer one before they were sent."})
	retried := prometheus.NewCounter(prometheus.CounterOpts{Name: "room_im_retried_total", Help: "High IM messages queued again after a failed send."})
	rateLimited := prometheus.NewCounter(prometheus.CounterOpts{Name: "room_im_rate_limited_total", Help: "IM sends Tencent refused for frequency (sent again; the lane slows down)."})
	latency := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "room_im_latency_seconds", Help: "Committed-to-sent delay of IM messages, by priority.", Buckets: prometheus.ExponentialBuckets(0.001, 2, 14)}, []string{"priority"})
	reg.MustRegister(sent, shed, merged, coalesced, retried, rateLimited, latency)
	return im.Metrics{
		Sent:        func(p room.Priority) { sent.WithLabelValues(string(p)).Inc() },
		Shed:        func(p room.Priority, reason string) { shed.WithLabelValues(string(p), reason).Inc() },
		Merged:      func(n int) { merged.Add(float64(n)) },
		Coalesced:   coalesced.Inc,
		Retried:     retried.Inc,
		RateLimited: rateLimited.Inc,
		Latency: func(ctx context.Context, p room.Priority, d time.Duration) {
			obs.Observe(ctx, latency.WithLabelValues(string(p)), d.Seconds())
		},
	}
}

// newRelayMetrics registers the outbox relay's instruments.
func newRelayMetrics(reg prometheus.Registerer) relay.Metrics {
	published := prometheus.NewCounter(prometheus.CounterOpts{Name: "room_outbox_published_total", Help: "Outbox rows the broker acknowledged."})
	failed := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "room_outbox_publish_failures_total", Help: "Failed publishes, by kind (broker: outage; message: counts against the row)."}, []string{"kind"})
	dead := prometheus.NewCounter(prometheus.CounterOpts{Name: "room_outbox_dead_total", Help: "Outbox rows that went dead."})
	lag := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "room_outbox_lag_seconds", Help: "Commit-to-acknowledge delay of published rows.", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 18)})
	read := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "room_outbox_rows_taken_total", Help: "Outbox rows relay chains took, by source (memory: handed over by the commit; table: read back, the recovery path)."}, []string{"source"})
	found := prometheus.NewCounter(prometheus.CounterOpts{Name: "room_outbox_found_published_total", Help: "Outbox rows read back from the table that the broker already held (a relay died between the ack and the mark): marked, not published again."})
	reg.MustRegister(published, failed, dead, lag, read, found)
	return relay.Metrics{
		Published: func(n int) { published.Add(float64(n)) },
		Failed: func(transient bool) {
			kind := "message"
			if transient {
				kind = "broker"
			}
			failed.WithLabelValues(kind).Inc()
		},
		Dead: dead.Inc,
		Lag:  func(ctx context.Context, d time.Duration) { obs.Observe(ctx, lag, d.Seconds()) },
		Read: func(fromMemory bool, n int) {
			source := "table"
			if fromMemory {
				source = "memory"
			}
			read.WithLabelValues(source).Add(float64(n))
		},
		Found: func(n int) { found.Add(float64(n)) },
	}
}
