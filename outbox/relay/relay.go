// Package relay delivers the durable room facts of room_outbox to the
// message queue: at least once, in per-room order, one room at a time per
// relay lease.
package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"hyapp/room-service/outbox"
)

// Source is what the relay needs from storage.
type Source interface {
	ListPendingOutboxAfter(ctx context.Context, afterID int64, limit int) ([]outbox.Record, error)
	ListRoomOutbox(ctx context.Context, roomID string, limit int) ([]outbox.Record, error)
	MarkOutboxPublishedBatch(ctx context.Context, eventIDs []string) error
	FailOutbox(ctx context.Context, eventID string, lastErr string, next time.Time, maxAttempts int32) (dead bool, err error)
}

// Publisher delivers one record to the message queue and returns once the
// broker acknowledged it. Errors wrapping outbox.ErrTransient are the broker's;
// others count as the message's fault. Safe for concurrent use.
type Publisher interface {
	Publish(ctx context.Context, r outbox.Record) error
}

// Gate decides who may publish a room's events right now: exactly one relay
// per room at a time, across nodes when the gate is a shared lease. Acquire
// returns ok=false when another relay holds the room.
type Gate interface {
	Acquire(ctx context.Context, roomID string) (h Held, ok bool)
}

// Held is a room held through a Gate. A relay stops publishing the room as
// soon as Lost is closed (a shared lease that could not be renewed).
type Held interface {
	Lost() <-chan struct{}
	Release()
}

// Config tunes the relay. Zero values take the defaults.
type Config struct {
	// ScanLimit is the page size of the scan for rooms with pending rows.
	ScanLimit int
	// RoomBatch is the most rows one room chain publishes before yielding.
	RoomBatch int
	// MaxRooms bounds the rooms published concurrently (and so the publishes in flight).
	MaxRooms int
	// PollInterval is the period of the scan for pending rows: the
	// recovery path (rows of a previous run, a lost notification, rows
	// backing off, rooms another node's relay left). Commits name their
	// rooms to Notify, which publishes them without a scan.
	PollInterval time.Duration
	// MaxAttempts is the number of failed deliveries after which a row is dead.
	MaxAttempts int32
	// BackoffMin and BackoffMax bound the per-row retry delay after a failure.
	BackoffMin, BackoffMax time.Duration
	// MarkEvery bounds how long acknowledged rows wait to be marked together.
	MarkEvery time.Duration
}

func (c Config) withDefaults() Config {
	if c.ScanLimit <= 0 {
		c.ScanLimit = 2000
	}
	if c.RoomBatch <= 0 {
		c.RoomBatch = 500
	}
	if c.MaxRooms <= 0 {
		c.MaxRooms = 256
	}
	if c.PollInterval <= 0 {
		c.PollInterval = time.Second
	}
	if c.MaxAttempts <= 0 {
		c.MaxAttempts = 10
	}
	if c.BackoffMin <= 0 {
		c.BackoffMin = 500 * time.Millisecond
	}
	if c.BackoffMax <= 0 {
		c.BackoffMax = time.Minute
	}
	if c.MarkEvery <= 0 {
		c.MarkEvery = 2 * time.Millisecond
	}
	return c
}

// chainsPerTurn is how many chains (of up to RoomBatch rows) a room with a
// backlog runs before it yields its slot to other rooms.
const chainsPerTurn = 20

// Metrics are the relay's counters; any field may be nil.
type Metrics struct {
	Published func(n int)
	Failed    func(transient bool)
	Dead      func()
	// Lag observes commit-to-acknowledge delay.
	// Lag observes the commit-to-acknowledge delay; ctx carries the
	// publish's span when the row was traced.
	Lag func(ctx context.Context, d time.Duration)
}

// Relay delivers committed outbox rows to the message queue: at least once,
// each room's rows strictly in (room_version, seq) order, one publish in
// flight per room and up to MaxRooms rooms at once. A row is marked
// published only after the broker acknowledged it (in bulk); a failed row
// backs off its room alone, and after MaxAttempts goes dead, where operators
// see it, and the room moves on. Rooms come to it in memory from commits
// (Notify), so it costs what it sends; a scan of the table finds what
// memory cannot know (see Config.PollInterval). The scan is by status,
// never by an id cursor that late commits would slip behind.
type Relay struct {
	src     Source
	pub     Publisher
	gate    Gate
	cfg     Config
	log     *slog.Logger
	metrics Metrics
	now     func() time.Time

	wake  chan struct{} // a scan is due
	kick  chan struct{} // rooms are ready
	marks chan markReq

	mu    sync.Mutex
	ready map[string]bool      // rooms named by Notify, not started yet
	busy  map[string]bool      // rooms with a chain running; true: rows came in meanwhile
	until map[string]time.Time // rooms backing off in this process
	pause time.Time            // the broker is away until then
	fails int                  // consecutive transient failures
}

type markReq struct {
	ids  []string
	done chan error
}

// NewRelay returns a relay; Run starts it.
func New(src Source, pub Publisher, gate Gate, cfg Config, m Metrics, log *slog.Logger) *Relay {
	return &Relay{
		src: src, pub: pub, gate: gate, cfg: cfg.withDefaults(), log: log, metrics: m, now: time.Now,
		wake: make(chan struct{}, 1), kick: make(chan struct{}, 1), marks: make(chan markReq, 1024),
		ready: make(map[string]bool), busy: make(map[string]bool), until: make(map[string]time.Time),
	}
}

// Wake makes the relay scan the table now, for rows it cannot know of in
// memory (an operator requeued dead rows). It never blocks.
func (r *Relay) Wake() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// Notify tells the relay that roomID committed outbox rows, so it
// publishes them now. It never blocks; call it after each commit that
// wrote outbox rows.
func (r *Relay) Notify(roomID string) {
	r.mu.Lock()
	r.ready[roomID] = true
	r.mu.Unlock()
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// Run relays until ctx ends, then waits for its room chains and the marker.
// Rows acknowledged but not yet marked when it stops are published again by
// the next run; the broker drops them as duplicates of their event id.
func (r *Relay) Run(ctx context.Context) {
	var chains sync.WaitGroup
	markerDone := make(chan struct{})
	markCtx, stopMarker := context.WithCancel(context.WithoutCancel(ctx))
	go func() {
		defer close(markerDone)
		r.marker(markCtx)
	}()
	defer func() {
		chains.Wait()
		stopMarker()
		<-markerDone
	}()
	slots := make(chan struct{}, r.cfg.MaxRooms)
	poll := time.NewTimer(0)
	defer poll.Stop()
	for {
		scan := false
		select {
		case <-ctx.Done():
			return
		case <-r.wake:
			scan = true
		case <-poll.C:
			scan = true
		case <-r.kick:
		}
		if scan {
			if err := r.scan(ctx, slots, &chains); err != nil && ctx.Err() == nil {
				r.log.Warn("outbox scan", "err", err)
			}
			poll.Reset(r.cfg.PollInterval)
		}
		r.dispatch(ctx, slots, &chains)
	}
}

// dispatch starts a chain for each room Notify named. While the broker is
// away it starts none: the scan after the pause finds their rows.
func (r *Relay) dispatch(ctx context.Context, slots chan struct{}, chains *sync.WaitGroup) {
	r.mu.Lock()
	rooms := r.ready
	now := r.now()
	paused := now.Before(r.pause)
	if len(rooms) == 0 || paused {
		r.mu.Unlock()
		return
	}
	r.ready = make(map[string]bool)
	r.mu.Unlock()
	for roomID := range rooms {
		if !r.start(ctx, roomID, now, slots, chains) {
			return
		}
	}
}

// start runs a chain for the room unless one runs or it backs off; it
// waits for a free slot. It returns false once ctx ended.
func (r *Relay) start(ctx context.Context, roomID string, now time.Time, slots chan struct{}, chains *sync.WaitGroup) bool {
	if !r.claim(roomID, now) {
		return true
	}
	select {
	case slots <- struct{}{}:
	case <-ctx.Done():
		_ = r.free(roomID)
		return false
	}
	chains.Add(1)
	go func() {
		defer chains.Done()
		// A room with a backlog keeps its slot for a few chains (no
		// rescan of every pending row per chain), then yields it.
		more := true
		for i := 0; more && i < chainsPerTurn && ctx.Err() == nil; i++ {
			more = r.chain(ctx, roomID)
		}
		missed := r.free(roomID)
		<-slots
		if missed || more {
			r.Notify(roomID) // rows came in while the chain ran, or more wait
		}
	}()
	return true
}

// scan finds rooms with due rows and starts a chain for each one that is
// free, until the slots run out.
func (r *Relay) scan(ctx context.Context, slots chan struct{}, chains *sync.WaitGroup) error {
	now := r.now()
	r.mu.Lock()
	paused := now.Before(r.pause)
	for roomID, until := range r.until {
		if !now.Before(until) {
			delete(r.until, roomID) // over; and another relay may have published the room meanwhile
		}
	}
	r.mu.Unlock()
	if paused {
		return nil
	}
	seen := make(map[string]bool)
	for after := int64(0); ; {
		rows, err := r.src.ListPendingOutboxAfter(ctx, after, r.cfg.ScanLimit)
		if err != nil {
			return err
		}
		for _, row := range rows {
			if seen[row.RoomID] {
				continue
			}
			seen[row.RoomID] = true // its first pending row decides
			if row.NextAttemptAt.After(now) {
				continue
			}
			if !r.start(ctx, row.RoomID, now, slots, chains) {
				return nil
			}
		}
		if len(rows) < r.cfg.ScanLimit {
			return nil
		}
		after = rows[len(rows)-1].ID
	}
}

// claim marks a room busy unless a chain runs or it backs off. A scan or a
// Notify that finds the room busy leaves a note, so the chain's end starts
// the room again.
func (r *Relay) claim(roomID string, now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, running := r.busy[roomID]; running {
		r.busy[roomID] = true
		return false
	}
	if now.Before(r.until[roomID]) {
		return false
	}
	delete(r.until, roomID)
	r.busy[roomID] = false
	return true
}

// free ends a room's chain and reports whether a scan found it busy meanwhile.
func (r *Relay) free(roomID string) (missed bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	missed = r.busy[roomID]
	delete(r.busy, roomID)
	return missed
}

// chain publishes one room's pending rows in order, one at a time, under the
// room's gate, and marks them before the room is free again. It reports
// whether the room may have more rows ready.
func (r *Relay) chain(ctx context.Context, roomID string) (more bool) {
	held, ok := r.gate.Acquire(ctx, roomID)
	if !ok {
		return false // another relay has the room
	}
	defer held.Release()
	// Read the rows under the gate: a relay that held the room before us has
	// marked what it published.
	rows, err := r.src.ListRoomOutbox(ctx, roomID, r.cfg.RoomBatch)
	if err != nil {
		r.log.Warn("outbox room read", "room_id", roomID, "err", err)
		return false
	}
	var acked []string
	defer func() {
		if len(acked) > 0 {
			r.mark(ctx, roomID, acked)
		}
	}()
	for _, row := range rows {
		select {
		case <-held.Lost():
			return false // another relay may hold the room now: publish nothing more
		default:
		}
		if now := r.now(); row.NextAttemptAt.After(now) {
			r.backoff(roomID, row.NextAttemptAt)
			return false
		}
		pctx, span := startPublish(ctx, row)
		err := r.pub.Publish(pctx, row)
		endPublish(span, err)
		if err == nil {
			acked = append(acked, row.EventID)
			if r.metrics.Lag != nil && !row.CreatedAt.IsZero() {
				r.metrics.Lag(pctx, r.now().Sub(row.CreatedAt))
			}
			r.brokerOK()
			continue
		}
		if ctx.Err() != nil {
			return false
		}
		if errors.Is(err, outbox.ErrTransient) {
			r.brokerDown(err)
			return false
		}
		if !r.failed(ctx, roomID, row, err) {
			return false // the row backs off: nothing after it may go first
		}
	}
	return len(rows) == r.cfg.RoomBatch
}

// failed records a message failure; it reports whether the chain may go on
// past the row (it went dead).
func (r *Relay) failed(ctx context.Context, roomID string, row outbox.Record, err error) bool {
	if r.metrics.Failed != nil {
		r.metrics.Failed(false)
	}
	next := r.now().Add(r.delay(row.Attempts + 1))
	dead, ferr := r.src.FailOutbox(ctx, row.EventID, err.Error(), next, r.cfg.MaxAttempts)
	if ferr != nil {
		r.log.Warn("outbox record failure", "event_id", row.EventID, "err", ferr)
		r.backoff(roomID, next)
		return false
	}
	if dead {
		r.log.Error("outbox row is dead after its last attempt; the room moves on", "event_id", row.EventID,
			"room_id", roomID, "event_type", row.EventType, "attempts", row.Attempts+1, "err", err)
		if r.metrics.Dead != nil {
			r.metrics.Dead()
		}
		return true
	}
	r.log.Warn("outbox publish failed; the room backs off", "event_id", row.EventID, "room_id", roomID,
		"attempt", row.Attempts+1, "retry_at", next, "err", err)
	r.backoff(roomID, next)
	return false
}

func (r *Relay) delay(attempt int32) time.Duration {
	d := r.cfg.BackoffMin
	for i := int32(1); i < attempt && d < r.cfg.BackoffMax; i++ {
		d *= 2
	}
	return min(d, r.cfg.BackoffMax)
}

func (r *Relay) backoff(roomID string, until time.Time) {
	r.mu.Lock()
	r.until[roomID] = until
	r.mu.Unlock()
}

// brokerDown pauses every chain for a growing delay; brokerOK resets it.
func (r *Relay) brokerDown(err error) {
	if r.metrics.Failed != nil {
		r.metrics.Failed(true)
	}
	r.mu.Lock()
	r.fails++
	// Short pauses: the broker's return is noticed within a second, so the
	// backlog starts draining at once (the client reconnects on its own).
	d := min(r.cfg.BackoffMin<<min(r.fails-1, 4), time.Second)
	r.pause = r.now().Add(d)
	first := r.fails == 1
	r.mu.Unlock()
	if first {
		r.log.Warn("message queue unavailable; relay pauses", "err", err)
	}
}

func (r *Relay) brokerOK() {
	r.mu.Lock()
	if r.fails > 0 {
		r.log.Info("message queue is back")
	}
	r.fails = 0
	r.mu.Unlock()
}

// mark hands acknowledged ids to the marker and waits until they are stored.
func (r *Relay) mark(ctx context.Context, roomID string, ids []string) {
	req := markReq{ids: ids, done: make(chan error, 1)}
	select {
	case r.marks <- req:
	case <-ctx.Done():
		return
	}
	if err := <-req.done; err != nil {
		// They stay pending and go out again; the broker drops the duplicates.
		r.log.Warn("outbox mark published", "room_id", roomID, "rows", len(ids), "err", err)
		return
	}
	if r.metrics.Published != nil {
		r.metrics.Published(len(ids))
	}
}

// marker stores acknowledgements of many chains in few transactions.
func (r *Relay) marker(ctx context.Context) {
	for {
		var batch []markReq
		select {
		case <-ctx.Done():
			return
		case req := <-r.marks:
			batch = append(batch, req)
		}
		t := time.NewTimer(r.cfg.MarkEvery)
		n := len(batch[0].ids)
	gather:
		for n < 5000 {
			select {
			case req := <-r.marks:
				batch = append(batch, req)
				n += len(req.ids)
			case <-t.C:
				break gather
			}
		}
		t.Stop()
		ids := make([]string, 0, n)
		for _, b := range batch {
			ids = append(ids, b.ids...)
		}
		err := r.src.MarkOutboxPublishedBatch(ctx, ids)
		if err != nil {
			err = fmt.Errorf("mark %d rows published: %w", len(ids), err)
		}
		for _, b := range batch {
			b.done <- err
		}
	}
}
