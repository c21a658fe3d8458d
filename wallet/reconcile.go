package wallet

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
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
	// PassLimit bounds the pending charges one pass reads (0: 20,000). A
	// pass that stops there, or on an error, leaves a cursor: the next one
	// goes on after it, and on from the oldest once it has read to the end,
	// so no run of charges it cannot decide (stuck, or refused by the
	// wallet) keeps it from those behind.
	PassLimit int

	mu   sync.Mutex // one pass at a time
	next Cursor     // where the next pass starts
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
// reconcilePassLimit is PassLimit's default. refundFailures is how many
// refunds the wallet may fail in one page (with an error that says neither
// stuck nor gone) before the page's other refunds wait for the next pass.
const (
	reconcileBatch     = 500
	reconcilePassLimit = 40 * reconcileBatch
	refundFailures     = 3
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

// Once decides up to PassLimit pending charges older than After, from
// where the last pass stopped, and returns how many it decided. Charges it
// cannot decide now (a refund the balance no longer covers, or one the
// wallet fails) stay pending, passed over, never in the way of the ones
// after them; the first such failure is returned after the rest.
func (r *Reconciler) Once(ctx context.Context) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	clock := r.Clock
	if clock == nil {
		clock = time.Now
	}
	if r.Metrics == nil {
		r.Metrics = NewMetrics(nil)
	}
	limit := r.PassLimit
	if limit <= 0 {
		limit = reconcilePassLimit
	}
	decided := 0
	cutoff := clock().Add(-r.After)
	start := r.next
	after := start
	lapped := start == Cursor{} // this pass reads from the oldest
	var failed error
	for read := 0; read < limit; {
		asked := min(reconcileBatch, limit-read)
		pending, err := r.Wallet.Pending(ctx, cutoff, after, asked)
		if err != nil {
			r.next = after
			return decided, errors.Join(failed, err)
		}
		if lapped && start != (Cursor{}) {
			// On from the oldest after reading to the end: this pass
			// stops where it began.
			if i := slices.IndexFunc(pending, start.before); i >= 0 {
				pending = pending[:i]
			}
		}
		read += len(pending)
		if len(pending) > 0 {
			after = CursorOf(pending[len(pending)-1])
		}
		n, err := r.decide(ctx, pending)
		decided += n
		if failed == nil {
			failed = err
		}
		if len(pending) < asked {
			if !lapped { // read to the end from where the last pass stopped: on from the oldest
				after, lapped = Cursor{}, true
				continue
			}
			r.next = Cursor{}
			return decided, failed
		}
	}
	r.next = after
	return decided, failed
}

// before reports whether the position c comes before the receipt p in the
// (At, Key) order of pending charges: a page read after c starts at p.
func (c Cursor) before(p Receipt) bool {
	return c.At.Before(p.At) || c.At.Equal(p.At) && c.Key < p.Key
}

// decide settles the page's charges whose gifts are in the log and refunds
// the others. A refund the wallet fails is passed over, and after
// refundFailures of them the page's other refunds wait for the next pass
// (the wallet is likely down); the page's settles go ahead. It returns the
// first failure.
func (r *Reconciler) decide(ctx context.Context, pending []Receipt) (int, error) {
	decided, failures := 0, 0
	var failed error
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
			failed = cmp.Or(failed, err)
			continue // the room's log could not be read: its charges wait
		}
		for _, c := range charges {
			key := c.Key
			_, id, _ := SplitChargeKey(key)
			if found[id] {
				settle = append(settle, key)
				continue
			}
			if failures >= refundFailures {
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
				failures++
				failed = cmp.Or(failed, fmt.Errorf("refund %s: %w", key, err))
				r.Log.Warn("pending charge not refunded; the reconciler tries again later", "key", key, "err", err)
			}
		}
	}
	if len(settle) > 0 {
		if err := r.Wallet.Settle(ctx, settle); err != nil {
			return decided, cmp.Or(failed, err)
		}
		decided += len(settle)
		r.Metrics.Reconciled.WithLabelValues("settled").Add(float64(len(settle)))
	}
	return decided, failed
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
