package cell

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the engine's Prometheus instruments.
type Metrics struct {
	Commands       *prometheus.CounterVec // by command type and result reason ("ok", "duplicate", reasons)
	BatchSize      prometheus.Histogram   // commands per room batch
	TxnRooms       prometheus.Histogram   // room batches per database transaction
	CommitSeconds  prometheus.Histogram   // one CommitBatches call
	MailboxDepth   prometheus.Histogram   // queued requests seen when a cell starts a batch
	MailboxFull    prometheus.Counter     // requests refused at once: the room's mailbox was full
	Lingers        prometheus.Counter     // waits of a busy cell for more commands (Config.Linger)
	CommitLingers  prometheus.Counter     // waits of a group-commit worker for more rooms (Config.CommitLinger)
	LoadedCells    prometheus.Gauge
	WorkingCells   prometheus.Gauge       // cells deciding or committing what their mailbox holds
	Recoveries     *prometheus.CounterVec // by result
	Claims         *prometheus.CounterVec // rooms claimed, by how the previous owner left (see claimKind)
	ReplayLength   prometheus.Histogram   // commands replayed per recovery
	RecoverSeconds prometheus.Histogram
	Stops          *prometheus.CounterVec // cell stops by reason
	RocketWakeups  *prometheus.CounterVec // rocket launch wakeups by result
	WalletSeconds  prometheus.Histogram   // one wallet Charge call for a run of gifts
	GiftBalances   *prometheus.CounterVec // runs of gifts decided in the commit, by where their balances came from
}

// NewMetrics makes the instruments and registers them with reg (nil: not registered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	exp := func(start float64, n int) []float64 { return prometheus.ExponentialBuckets(start, 2, n) }
	m := &Metrics{
		Commands: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "room_commands_total", Help: "Commands handled by room cells, by type and result.",
		}, []string{"type", "result"}),
		BatchSize: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "room_commit_batch_commands", Help: "Commands committed per room batch.", Buckets: exp(1, 11),
		}),
		TxnRooms: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "room_commit_txn_rooms", Help: "Room batches merged into one database transaction.", Buckets: exp(1, 11),
		}),
		CommitSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "room_commit_seconds", Help: "Latency of one group-commit transaction.", Buckets: exp(0.0001, 16),
		}),
		MailboxDepth: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "room_mailbox_depth", Help: "Requests queued in a cell's mailbox when it starts a batch.", Buckets: exp(1, 12),
		}),
		MailboxFull: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "room_mailbox_full_total", Help: "Requests refused at once because the room's mailbox was full (mailbox_full).",
		}),
		Lingers: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "room_batch_lingers_total", Help: "Times a busy room cell waited, at most batch_linger, for more commands before it decided a short queue.",
		}),
		CommitLingers: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "room_commit_lingers_total", Help: "Times a group-commit worker whose last transaction carried many rooms waited, at most commit_linger, for more rooms before it committed a short queue.",
		}),
		LoadedCells: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "room_cells_loaded", Help: "Room cells loaded on this node.",
		}),
		WorkingCells: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "room_cells_working", Help: "Room cells deciding or committing commands now; the rest wait for their mailbox.",
		}),
		Recoveries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "room_recoveries_total", Help: "Room recoveries, by result.",
		}, []string{"result"}),
		Claims: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "room_claims_total",
			Help: "Rooms this node claimed and recovered, by kind: new (first owner), released (the previous owner stopped cleanly: idle or hand-off), failover (another node held it and did not release it), restart (this node held it and did not release it).",
		}, []string{"kind"}),
		ReplayLength: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "room_replay_commands", Help: "Commands replayed per recovery.", Buckets: append([]float64{0}, exp(1, 15)...),
		}),
		RecoverSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "room_recover_seconds", Help: "Time to recover one room.", Buckets: exp(0.0001, 16),
		}),
		Stops: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "room_cell_stops_total", Help: "Cells stopped, by reason.",
		}, []string{"reason"}),
		RocketWakeups: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "room_rocket_launch_wakeups_total",
			Help: "Rocket launch timer wakeups, by result: launched, duplicate, not_due, stale, not_pending, foreign, error.",
		}, []string{"result"}),
		WalletSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "room_wallet_charge_seconds", Help: "Latency of one wallet call for a run of gifts: its charge, or with the embedded ledger its quote.", Buckets: exp(0.0001, 16),
		}),
		GiftBalances: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "room_gift_balances_total",
			Help: "Runs of gifts the embedded ledger charges inside the room commit, by where the room took the senders' balances: hint (this node's last committed balances, no read) or read (the ledger's Quote).",
		}, []string{"source"}),
	}
	if reg != nil {
		reg.MustRegister(m.Commands, m.BatchSize, m.TxnRooms, m.CommitSeconds, m.MailboxDepth, m.MailboxFull, m.Lingers, m.CommitLingers, m.LoadedCells, m.WorkingCells,
			m.Recoveries, m.Claims, m.ReplayLength, m.RecoverSeconds, m.Stops, m.RocketWakeups, m.WalletSeconds, m.GiftBalances)
	}
	return m
}
