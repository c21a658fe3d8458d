package wallet

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Committed reports, by command id, which of a room's pending charges have
// their gift in the room's command log: the SendGift of the charge's
// command id, by the charge's user, for its amount. A log row of that id
// that is not the charge's gift (the id reused for another command, and
// the gift refused for it) is not: the charge is refunded.
type Committed func(ctx context.Context, roomID string, charges []Charge) (map[string]bool, error)

// Reconciler finishes the charges nothing else finished: a pending charge
// older than After is settled when its gift is in the command log and
// refunded when it is not. The room refuses to apply a gift whose charge is
// older than its apply window, and After exceeds that window plus the
// commit and wallet timeouts, so a refund never races a late commit.
type Reconciler struct {
	Wallet    Wallet
	Committed Committed
	// After is the age from which a pending charge is decided.
	After time.Duration
	// Clock gives the time; nil is time.Now.
	Clock   func() time.Time
	Log     *slog.Logger
	Metrics *Metrics
}

// Metrics count what the wallet side of gifts does.
type Metrics struct {
	Reconciled *prometheus.CounterVec // pending charges decided, by result: settled, refunded, stuck
	Settled    prometheus.Counter     // charges settled after their gift committed
}

// NewMetrics makes the instruments and registers them with reg (nil: not registered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Reconciled: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "room_wallet_reconciled_total", Help: "Old pending gift charges decided by the reconciler, by result.",
		}, []string{"result"}),
		Settled: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "room_wallet_settled_total", Help: "Gift charges settled after their gift committed.",
		}),
	}
	if reg != nil {
		reg.MustRegister(m.Reconciled, m.Settled)
	}
	return m
}

// reconcileBatch is how many pending charges one page reads;
// reconcilePages bounds the pages of one pass (the next pass goes on).
const (
	reconcileBatch = 500
	reconcilePages = 40
)

// Run reconciles every interval until ctx ends.
func (r *Reconciler) Run(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		if _, err := r.Once(ctx); err != nil && ctx.Err() == nil {
			r.Log.Warn("wallet reconcile", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Once decides the pending charges older than After and returns how many it
// decided. Charges it cannot decide now (a refund the balance no longer
// covers) stay pending and are counted as stuck.
func (r *Reconciler) Once(ctx context.Context) (int, error) {
	clock := r.Clock
	if clock == nil {
		clock = time.Now
	}
	if r.Metrics == nil {
		r.Metrics = NewMetrics(nil)
	}
	decided := 0
	cutoff := clock().Add(-r.After)
	var after Cursor
	// Page through every pending charge older than the cutoff. A charge that
	// cannot be decided now (stuck) is passed over, never in the way of the
	// ones after it.
	for range reconcilePages {
		pending, err := r.Wallet.Pending(ctx, cutoff, after, reconcileBatch)
		if err != nil || len(pending) == 0 {
			return decided, err
		}
		after = CursorOf(pending[len(pending)-1])
		n, err := r.decide(ctx, pending)
		decided += n
		if err != nil || len(pending) < reconcileBatch {
			return decided, err
		}
	}
	return decided, nil
}

// decide settles the page's charges whose gifts are in the log and refunds the others.
func (r *Reconciler) decide(ctx context.Context, pending []Receipt) (int, error) {
	decided := 0
	byRoom := map[string][]Charge{}
	for _, p := range pending {
		roomID, _, ok := SplitChargeKey(p.Key)
		if !ok {
			r.Log.Error("pending charge with a key that names no gift; left alone", "key", p.Key)
			continue
		}
		byRoom[roomID] = append(byRoom[roomID], p.Charge)
	}
	var settle []string
	for roomID, charges := range byRoom {
		found, err := r.Committed(ctx, roomID, charges)
		if err != nil {
			return decided, err
		}
		for _, c := range charges {
			key := c.Key
			_, id, _ := SplitChargeKey(key)
			if found[id] {
				settle = append(settle, key)
				continue
			}
			switch _, err := r.Wallet.Refund(ctx, key); {
			case err == nil:
				decided++
				r.Metrics.Reconciled.WithLabelValues("refunded").Inc()
				r.Log.Info("refunded a gift that never committed", "key", key)
			case isStuck(err):
				r.Metrics.Reconciled.WithLabelValues("stuck").Inc()
				r.Log.Warn("pending charge cannot be refunded now", "key", key, "err", err)
			default:
				return decided, err
			}
		}
	}
	if len(settle) > 0 {
		if err := r.Wallet.Settle(ctx, settle); err != nil {
			return decided, err
		}
		decided += len(settle)
		r.Metrics.Reconciled.WithLabelValues("settled").Add(float64(len(settle)))
	}
	return decided, nil
}

func isStuck(err error) bool {
	return errors.Is(err, ErrInsufficientFunds) || errors.Is(err, ErrFinal) || errors.Is(err, ErrNotFound)
}

// Settler settles the charges of committed gifts in batches, off the
// rooms' critical path. A settle it loses (a crash, a wallet error) is done
// later by the Reconciler, which finds the gift in the command log.
type Settler struct {
	wallet  Wallet
	log     *slog.Logger
	metrics *Metrics
	mu      sync.Mutex
	keys    []string
	closed  bool
	wake    chan struct{}
	done    chan struct{}
}

// settleMax bounds one Settle call; settlePending bounds what waits (beyond
// it keys are dropped and left to the reconciler).
const (
	settleMax     = 1000
	settlePending = 100_000
)

// NewSettler starts a settler; Close stops it after a last flush.
func NewSettler(w Wallet, m *Metrics, log *slog.Logger) *Settler {
	if m == nil {
		m = NewMetrics(nil)
	}
	s := &Settler{wallet: w, log: log, metrics: m, wake: make(chan struct{}, 1), done: make(chan struct{})}
	go s.run()
	return s
}

// Add queues keys to settle. It never blocks; after Close it drops them
// (the reconciler settles them).
func (s *Settler) Add(keys ...string) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	room := settlePending - len(s.keys)
	if room < len(keys) {
		keys = keys[:max(room, 0)]
	}
	s.keys = append(s.keys, keys...)
	defer s.mu.Unlock() // held across the wake so Close cannot close the channel under it
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *Settler) run() {
	defer close(s.done)
	for range s.wake {
		s.flush()
	}
	s.flush()
}

func (s *Settler) flush() {
	for {
		s.mu.Lock()
		n := min(len(s.keys), settleMax)
		batch := append([]string(nil), s.keys[:n]...)
		s.keys = s.keys[n:]
		s.mu.Unlock()
		if n == 0 {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := s.wallet.Settle(ctx, batch)
		cancel()
		if err != nil {
			s.log.Warn("settle gift charges; the reconciler will", "charges", len(batch), "err", err)
			continue
		}
		s.metrics.Settled.Add(float64(len(batch)))
	}
}

// Close flushes what is queued and stops the settler.
func (s *Settler) Close() {
	s.mu.Lock()
	if !s.closed {
		s.closed = true
		close(s.wake)
	}
	s.mu.Unlock()
	<-s.done
}
