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
	"sync/atomic"
	"time"

	"hyapp/room-service/outbox"
)

// Source is what the relay needs from storage.
type Source interface {
	ListOutboxHeads(ctx context.Context, afterID int64, limit int) ([]outbox.Record, error)
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

// InOrderPublisher is a Publisher that also publishes a room's rows in
// order, each once the broker acknowledged the one before it, without a
// goroutine waiting for each ack (natsbus.Bus). each runs on the
// publisher's goroutine after rows[i]'s ack, must not block, and false
// stops the rows there; it returns the rows acknowledged and the error of
// the one after them.
type InOrderPublisher interface {
	Publisher
	PublishInOrder(ctx context.Context, rows []outbox.Record, each func(i int) bool) (int, error)
}

// Positioner is a Publisher that can say which of a room's events the
// broker holds last (natsbus.Bus). Rows read from the table may have gone
// out before: a relay that died between the broker's ack and marking them,
// a chain whose mark failed, a publish that timed out after the broker
// stored it. Since a room's rows are published one at a time, each after
// the one before was acknowledged, that last event and every pending row
// before it are in the stream already: they are marked, not published
// again. Without a Positioner they go again and the broker's duplicate
// window must drop them.
type Positioner interface {
	LastOfRoom(ctx context.Context, roomID string) (eventID string, found bool, err error)
}

// Gate decides who may publish a room's events right now: exactly one relay
// per room at a time, across nodes when the gate is a shared lease. Acquire
// returns ok=false when another relay holds the room.
type Gate interface {
	Acquire(ctx context.Context, roomID string) (h Held, ok bool)
}

// Held is a room held through a Gate. A relay stops publishing the room as
// soon as Lost is closed (a shared lease taken by another holder), or as
// Check fails: no database fences a relay, so one that was paused or cut off
// past its lease must not publish another row before it knows the lease is
// still its own.
type Held interface {
	Lost() <-chan struct{}
	// Fresh reports, without blocking, whether the gate is known to be
	// this relay's now.
	Fresh() bool
	// Check tells whether the relay may publish the room's next row: the
	// gate is fresh, or was renewed now (which may ask the lease store).
	Check(ctx context.Context) error
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
	// recovery path (rows of a previous run, rows memory does not vouch
	// for, rows backing off, rooms another node's relay left). Commits hand
	// their rows to Committed, which publishes them without a scan.
	PollInterval time.Duration
	// MaxAttempts is the number of failed deliveries after which a row is dead.
	MaxAttempts int32
	// BackoffMin and BackoffMax bound the per-row retry delay after a failure.
	BackoffMin, BackoffMax time.Duration
	// MarkEvery bounds how long acknowledged rows wait to be marked together.
	MarkEvery time.Duration
	// Markers is how many mark transactions may run at once. One mark
	// waits on the database while chains that were not in it finish
	// publishing; a second takes their acknowledgements meanwhile. On
	// MariaDB, where the marks bound the relay, two raised its rate by
	// 8-15%; on SQLite, where marks ride room commits, they changed nothing.
	Markers int
	// MemoryRows bounds the committed rows held in memory for all rooms
	// (see Relay.Committed); a room that would pass it is read from the
	// table instead.
	MemoryRows int
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
	if c.Markers <= 0 {
		c.Markers = 2
	}
	if c.MemoryRows <= 0 {
		c.MemoryRows = 100_000
	}
	return c
}

// chainsPerTurn is how many chains (of up to RoomBatch rows) a room with a
// backlog runs before it yields its slot to other rooms.
const chainsPerTurn = 20

// forgetAfter is how long the relay keeps what it knows of a room with no
// commit: one read of the table brings it back.
const forgetAfter = time.Minute

// Metrics are the relay's counters; any field may be nil.
type Metrics struct {
	Published func(n int)
	Failed    func(transient bool)
	Dead      func()
	// Lag observes the commit-to-acknowledge delay; ctx carries the
	// publish's span when the row was traced.
	Lag func(ctx context.Context, d time.Duration)
	// Read counts the rows chains took: from memory (handed over by
	// Committed) or read from the table.
	Read func(fromMemory bool, n int)
	// Found counts rows read from the table that the broker already held
	// (see Positioner): marked published without going out again.
	Found func(n int)
}

// Relay delivers committed outbox rows to the message queue: at least once,
// each room's rows strictly in (room_version, seq) order, one publish in
// flight per room and up to MaxRooms rooms at once. A row is marked
// published only after the broker acknowledged it (in bulk); a failed row
// backs off its room alone, and after MaxAttempts goes dead, where operators
// see it, and the room moves on. Committed rows come to it in memory
// (Committed), so it costs what it sends; the table is read for what
// memory cannot know (see memRoom and Config.PollInterval). The scan is by
// status, never by an id cursor that late commits would slip behind.
type Relay struct {
	src     Source
	pub     Publisher
	inOrder InOrderPublisher // pub, when it is one
	pos     Positioner       // pub, when it is one
	gate    Gate
	cfg     Config
	log     *slog.Logger
	metrics Metrics
	now     func() time.Time

	wake  chan struct{} // a scan is due
	kick  chan struct{} // rooms are ready
	marks chan markReq

	mu    sync.Mutex
	ready map[string]bool      // rooms handed over by Committed, not started yet
	busy  map[string]bool      // rooms with a chain running; true: rows came in meanwhile
	until map[string]time.Time // rooms backing off in this process
	mem   map[string]*memRoom  // rooms that committed rows in this process
	kept  map[string]kept      // rooms whose gate is held between chains
	held  int                  // rows held in mem, across rooms
	pause time.Time            // the broker is away until then
	fails int                  // consecutive transient failures

	posDown atomic.Bool // the last LastOfRoom failed
}

// memRoom is what the relay knows of a room's pending rows from the
// room's commits in this process, so that a chain publishes them without
// reading the table.
//
// Memory is trusted (known) from a room's first commit (its version 1:
// nothing precedes it), or after a chain read every pending row of
// the room from the table, published and marked them all, and no commit
// was missed since that read began (gen unchanged), with the read begun
// after a commit of the room's current owner epoch arrived. The epoch
// matters because the database fences: once an epoch commits, no earlier
// epoch ever commits again, so a read begun after epoch E's first commit
// holds every row of earlier epochs, and every later row of epoch E is
// handed to Committed in commit order by the one cell that owns E. Rows
// of any other epoch (the room moved to another node and back) reset
// what is known. Anything else that may leave a pending row memory does
// not hold also resets it: a failed publish, a lost gate, a failed mark,
// the memory bound, or a row the scan finds pending longer than
// a poll interval or of another epoch. A reset room is read from the table
// again; a room with no commit or chain for a minute is forgotten.
type memRoom struct {
	epoch   int64           // owner epoch of the room's latest commit here
	rows    []outbox.Record // committed here, not yet taken, in order
	gen     uint64          // counts resets: a chain's read is stale if it changed
	known   bool            // rows holds every pending row after through
	through rowKey          // the last row a chain of this relay published
	last    rowKey          // the last row Committed handed over in this epoch
	used    time.Time       // last commit or chain, for forgetting idle rooms
}

// rowKey orders a room's rows.
type rowKey struct {
	version int64
	seq     int32
}

func keyOf(r *outbox.Record) rowKey { return rowKey{r.RoomVersion, r.Seq} }

func (k rowKey) after(o rowKey) bool {
	return k.version > o.version || (k.version == o.version && k.seq > o.seq)
}

type markReq struct {
	ids  []string
	done chan error
}

// NewRelay returns a relay; Run starts it.
func New(src Source, pub Publisher, gate Gate, cfg Config, m Metrics, log *slog.Logger) *Relay {
	inOrder, _ := pub.(InOrderPublisher)
	pos, _ := pub.(Positioner)
	return &Relay{
		src: src, pub: pub, inOrder: inOrder, pos: pos, gate: gate, cfg: cfg.withDefaults(), log: log, metrics: m, now: time.Now,
		wake: make(chan struct{}, 1), kick: make(chan struct{}, 1), marks: make(chan markReq, 1024),
		ready: make(map[string]bool), busy: make(map[string]bool), until: make(map[string]time.Time),
		mem: make(map[string]*memRoom), kept: make(map[string]kept),
	}
}

// kept is a room's gate held past its chain until a poll interval passed,
// so a room that keeps committing takes the gate once, not once per
// chain (with the shared lease, two Redis calls per commit).
type kept struct {
	held  Held
	until time.Time
}

// Wake makes the relay scan the table now, for rows it cannot know of in
// memory (an operator requeued dead rows). It never blocks.
func (r *Relay) Wake() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// Committed hands the relay the outbox rows one commit of one room wrote,
// in (room_version, seq) order, so it publishes them at once without
// reading them back. Call it after every commit that wrote outbox rows,
// in the room's commit order, from the one writer of the room's epoch. It
// never blocks; the rows must not be modified afterwards.
func (r *Relay) Committed(rows []outbox.Record) {
	if len(rows) == 0 {
		return
	}
	roomID, epoch := rows[0].RoomID, rows[0].OwnerEpoch
	r.mu.Lock()
	m := r.mem[roomID]
	if m == nil {
		m = &memRoom{}
		r.mem[roomID] = m
	}
	if m.epoch != epoch {
		r.reset(m)
		m.epoch = epoch
		// A room's first commit (its version 1) has nothing before it:
		// memory holds every row of a room it saw created.
		m.known = rows[0].RoomVersion == 1 && rows[0].Seq == 0
		m.last = rowKey{}
	}
	m.last = keyOf(&rows[len(rows)-1])
	m.used = r.now()
	if r.held+len(rows) > r.cfg.MemoryRows {
		r.reset(m) // the table has them
	} else {
		if m.rows == nil {
			// Capped: a later commit's rows go to an array of their own,
			// never into the caller's.
			m.rows = rows[:len(rows):len(rows)]
		} else {
			m.rows = append(m.rows, rows...)
		}
		r.held += len(rows)
	}
	r.ready[roomID] = true
	r.mu.Unlock()
	r.kickRun()
}

func (r *Relay) kickRun() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// reset makes the relay read the room from the table next; mu is held.
func (r *Relay) reset(m *memRoom) {
	r.held -= len(m.rows)
	m.rows, m.known = nil, false
	m.gen++
}

// forget resets what the relay knows of the room.
func (r *Relay) forget(roomID string) {
	r.mu.Lock()
	if m := r.mem[roomID]; m != nil {
		r.reset(m)
	}
	r.mu.Unlock()
}

// doubt resets what the relay knows of the row's room when the scan finds
// the row pending where trusted memory would have published it: it is of
// another owner epoch than the commits memory holds (another node
// committed it, whatever its clock says), or older than a poll interval
// and not among the rows memory still has to publish (a dead row
// requeued behind what memory published). A row memory holds or a chain
// is publishing is just waiting its turn in a backlog; and a room memory
// does not vouch for is read from the table anyway (a reset would only
// spoil the trust a running table chain is about to give it).
func (r *Relay) doubt(row outbox.Record, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := r.mem[row.RoomID]
	if m == nil || !m.known {
		return
	}
	k := keyOf(&row)
	queued := k.after(m.through) && !k.after(m.last)
	if row.OwnerEpoch != m.epoch || now.Sub(row.CreatedAt) > r.cfg.PollInterval && !queued {
		r.reset(m)
	}
}

// take starts a chain's work: the room's rows from memory when memory is
// trusted (limit at most; none when it holds none: the room has nothing
// pending), or fromTable with what the chain needs to trust memory after
// reading the table. more says memory holds rows beyond those taken.
//
// For a table chain, read.held is how many rows memory held when the read
// began: their commits came before it, so the read covers them.
func (r *Relay) take(roomID string, limit int) (rows []outbox.Record, fromTable, more bool, read readStart) {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := r.mem[roomID]
	if m == nil {
		return nil, true, false, readStart{}
	}
	m.used = r.now()
	if !m.known {
		return nil, true, false, readStart{gen: m.gen, epoch: m.epoch, held: len(m.rows)}
	}
	if len(m.rows) <= limit && (len(m.rows) == 0 || keyOf(&m.rows[0]).after(m.through)) {
		// All of them, none published yet: the usual case, handed over
		// as they are.
		rows, m.rows = m.rows, nil
		r.held -= len(rows)
		return rows, false, false, readStart{gen: m.gen, epoch: m.epoch}
	}
	n := 0
	for n < len(m.rows) && len(rows) < limit {
		if row := &m.rows[n]; keyOf(row).after(m.through) {
			rows = append(rows, *row)
		}
		n++
	}
	r.held -= n
	m.rows = m.rows[n:]
	if len(m.rows) == 0 {
		m.rows = nil // let the backing array go
	}
	return rows, false, len(m.rows) > 0, readStart{gen: m.gen, epoch: m.epoch}
}

// readStart is what a chain knew of the room's memory when it began.
type readStart struct {
	gen   uint64 // the room's resets so far
	epoch int64  // the owner epoch of the room's latest commit here (0: none)
	held  int    // rows memory held (table chains)
}

// published records the end of a chain that published and marked rows
// through last. A chain that read every pending row of the room from the
// table (complete) makes memory trusted, if nothing reset it since the
// read began and the read began after a commit of the room's epoch.
func (r *Relay) published(roomID string, last rowKey, fromTable, complete bool, read readStart) {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := r.mem[roomID]
	if m == nil || m.gen != read.gen {
		return
	}
	if last.after(m.through) {
		m.through = last
	}
	n := 0
	if fromTable && complete && read.epoch != 0 && m.epoch == read.epoch {
		// The read covered every row memory held when it began (another
		// relay may have published some of them: the read did not see
		// those, and they must not go out again).
		m.known = true
		n = min(read.held, len(m.rows))
	}
	if !m.known {
		return
	}
	// Drop what the read already held: rows whose Committed came late.
	for n < len(m.rows) && !keyOf(&m.rows[n]).after(m.through) {
		n++
	}
	r.held -= n
	m.rows = m.rows[n:]
}

// forgetIdle drops rooms with no commit or chain for idle: they are read
// from the table when they commit again. A room may still hold rows no
// chain will take (it backed off, and another relay published them
// meanwhile): the table has whatever of them is pending.
func (r *Relay) forgetIdle(idle time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	cut := r.now().Add(-idle)
	for id, m := range r.mem {
		if _, running := r.busy[id]; !running && m.used.Before(cut) {
			r.held -= len(m.rows)
			delete(r.mem, id)
		}
	}
}

// Run relays until ctx ends, then waits for its room chains and the marker.
// Rows acknowledged but not yet marked when it stops are published again by
// the next run; the broker drops them as duplicates of their event id.
func (r *Relay) Run(ctx context.Context) {
	chains := &chainPool{work: make(chan string), max: r.cfg.MaxRooms}
	markerDone := make(chan struct{})
	markCtx, stopMarker := context.WithCancel(context.WithoutCancel(ctx))
	go func() {
		defer close(markerDone)
		var markers sync.WaitGroup
		for range r.cfg.Markers {
			markers.Go(func() { r.marker(markCtx) })
		}
		markers.Wait()
	}()
	defer func() {
		chains.workers.Wait()
		r.releaseKept(time.Time{}) // all of them
		stopMarker()
		<-markerDone
	}()
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
			if err := r.scan(ctx, chains); err != nil && ctx.Err() == nil {
				r.log.Warn("outbox scan", "err", err)
			}
			r.forgetIdle(forgetAfter)
			r.releaseKept(r.now())
			poll.Reset(r.cfg.PollInterval)
		}
		r.dispatch(ctx, chains)
	}
}

// dispatch starts a chain for each room Committed handed over. While the broker is
// away it starts none: the scan after the pause finds their rows.
func (r *Relay) dispatch(ctx context.Context, chains *chainPool) {
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
		if !r.start(ctx, roomID, now, chains) {
			return
		}
	}
}

// chainPool runs the rooms' chains on up to max long-lived workers, started
// as they are needed: a goroutine per turn would grow its stack, copying
// it, on the way into each publish. Only Run's goroutine hands out work.
type chainPool struct {
	work    chan string // a room for an idle worker
	max     int
	started int
	workers sync.WaitGroup
}

// start runs a turn for the room unless one runs or it backs off; it waits
// for a free worker. It returns false once ctx ended.
func (r *Relay) start(ctx context.Context, roomID string, now time.Time, chains *chainPool) bool {
	if !r.claim(roomID, now) {
		return true
	}
	select {
	case chains.work <- roomID:
		return true
	default:
	}
	if chains.started < chains.max {
		chains.started++
		chains.workers.Go(func() { r.worker(ctx, roomID, chains.work) })
		return true
	}
	select {
	case chains.work <- roomID:
		return true
	case <-ctx.Done():
		_ = r.free(roomID)
		return false
	}
}

// worker runs the turn of roomID, then of each room it is handed, until
// ctx ends.
func (r *Relay) worker(ctx context.Context, roomID string, work <-chan string) {
	for {
		r.turn(ctx, roomID)
		select {
		case roomID = <-work:
		case <-ctx.Done():
			return
		}
	}
}

// turn runs a few chains of the room, frees it and, when rows came in
// meanwhile or more wait, makes it ready again. A room with a backlog keeps
// its worker for a few chains (no rescan of every pending row per chain),
// then yields it.
func (r *Relay) turn(ctx context.Context, roomID string) {
	more := true
	for i := 0; more && i < chainsPerTurn && ctx.Err() == nil; i++ {
		more = r.chain(ctx, roomID)
	}
	if missed := r.free(roomID); missed || more {
		r.mu.Lock()
		r.ready[roomID] = true
		r.mu.Unlock()
		r.kickRun()
	}
}

// scan finds rooms with due rows and starts a chain for each one that is
// free, waiting for workers when all are busy.
func (r *Relay) scan(ctx context.Context, chains *chainPool) error {
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
	for after := int64(0); ; {
		// A room's first pending row decides: whether the room is due, and
		// whether memory can vouch for it.
		rows, err := r.src.ListOutboxHeads(ctx, after, r.cfg.ScanLimit)
		if err != nil {
			return err
		}
		for _, row := range rows {
			if row.NextAttemptAt.After(now) {
				continue
			}
			r.doubt(row, now)
			if !r.start(ctx, row.RoomID, now, chains) {
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
// Committed that finds the room busy leaves a note, so the chain's end starts
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
// room's gate, and marks them before the room is free again: the rows
// Committed handed over when memory is trusted, else the room's rows read
// from the table. It reports whether the room may have more rows ready.
func (r *Relay) chain(ctx context.Context, roomID string) (more bool) {
	held, ok := r.hold(ctx, roomID)
	if !ok {
		r.forget(roomID) // another relay has the room: what it publishes is unknown here
		return false
	}
	defer r.keep(ctx, roomID, held)
	if !mayPublish(ctx, held) {
		// The gate is stale and could not be renewed (the lease store is
		// unreachable): nothing may go out, so nothing is read. Another
		// relay may publish the room meanwhile, and the room waits a poll
		// interval, however often it commits.
		r.forget(roomID)
		r.backoff(roomID, r.now().Add(r.cfg.PollInterval))
		return false
	}
	rows, fromTable, more, read := r.take(roomID, r.cfg.RoomBatch)
	if fromTable {
		// Read the rows under the gate: a relay that held the room before
		// us has marked what it published.
		var err error
		if rows, err = r.src.ListRoomOutbox(ctx, roomID, r.cfg.RoomBatch); err != nil {
			r.log.Warn("outbox room read", "room_id", roomID, "err", err)
			r.forget(roomID)
			return false
		}
	}
	if r.metrics.Read != nil && len(rows) > 0 {
		r.metrics.Read(!fromTable, len(rows))
	}
	var found []string
	if fromTable {
		found = r.alreadyOut(ctx, roomID, rows)
	}
	acked, ok := r.publish(ctx, roomID, held, rows[len(found):])
	acked = append(found, acked...)
	if len(acked) > 0 && !r.mark(ctx, roomID, acked) {
		ok = false
	}
	if !ok {
		r.forget(roomID) // rows this chain took may still be pending
		return false
	}
	var last rowKey
	if len(rows) > 0 {
		last = keyOf(&rows[len(rows)-1])
	}
	full := fromTable && len(rows) == r.cfg.RoomBatch
	r.published(roomID, last, fromTable, !full, read)
	return full || more
}

// alreadyOut returns the event ids of the leading rows the broker holds
// already (see Positioner): none when it holds none of them, or cannot
// say. The order of publishing says so only for rows that never failed:
// a row with an error on record before the broker's last event of the room
// leaves every row to go again.
func (r *Relay) alreadyOut(ctx context.Context, roomID string, rows []outbox.Record) []string {
	if r.pos == nil || len(rows) == 0 {
		return nil
	}
	last, found, err := r.pos.LastOfRoom(ctx, roomID)
	if err != nil {
		// The rows go again; the broker's duplicate window drops those it
		// has. Said once until the broker answers again: in an outage every
		// room would say it.
		if !r.posDown.Swap(true) {
			r.log.Warn("outbox: the broker cannot say which events it holds; rows read back go out again", "room_id", roomID, "err", err)
		}
		return nil
	}
	if r.posDown.Swap(false) {
		r.log.Info("outbox: the broker says which events it holds again")
	}
	if !found {
		return nil
	}
	for i := range rows {
		if rows[i].LastError != "" {
			// The broker refused this row once, or it went dead and an
			// operator requeued it after later rows went out: it may be
			// missing from the stream while later rows are there.
			return nil
		}
		if rows[i].EventID != last {
			continue
		}
		ids := make([]string, i+1)
		for j := range ids {
			ids[j] = rows[j].EventID
		}
		if r.metrics.Found != nil {
			r.metrics.Found(len(ids))
		}
		return ids
	}
	return nil
}

// hold returns the room's gate: the one kept from its last chain, or a
// new one. A kept gate that was lost meanwhile may have let another relay
// publish the room, so memory is not trusted after it.
func (r *Relay) hold(ctx context.Context, roomID string) (Held, bool) {
	r.mu.Lock()
	k, found := r.kept[roomID]
	delete(r.kept, roomID)
	r.mu.Unlock()
	if found {
		select {
		case <-k.held.Lost():
			k.held.Release()
			r.forget(roomID)
		default:
			return k.held, true
		}
	}
	return r.gate.Acquire(ctx, roomID)
}

// keep keeps a chain's gate for the room's next chain, unless it was lost
// or the relay stops.
func (r *Relay) keep(ctx context.Context, roomID string, held Held) {
	select {
	case <-held.Lost():
		held.Release()
		return
	default:
	}
	if ctx.Err() != nil {
		held.Release()
		return
	}
	r.mu.Lock()
	r.kept[roomID] = kept{held: held, until: r.now().Add(r.cfg.PollInterval)}
	r.mu.Unlock()
}

// releaseKept releases the kept gates whose time is over at now (the zero
// time: all of them).
func (r *Relay) releaseKept(now time.Time) {
	var over []Held
	r.mu.Lock()
	for id, k := range r.kept {
		if now.IsZero() || !now.Before(k.until) {
			over = append(over, k.held)
			delete(r.kept, id)
		}
	}
	r.mu.Unlock()
	for _, h := range over {
		h.Release()
	}
}

// publish publishes the rows in order until one fails, and returns the
// event ids the broker acknowledged, and whether every row went out (or
// went dead).
func (r *Relay) publish(ctx context.Context, roomID string, held Held, rows []outbox.Record) (acked []string, ok bool) {
	for i := 0; i < len(rows); {
		if !mayPublish(ctx, held) {
			return acked, false // another relay may hold the room now: publish nothing more
		}
		now := r.now()
		if rows[i].NextAttemptAt.After(now) {
			r.backoff(roomID, rows[i].NextAttemptAt)
			return acked, false
		}
		n, err := r.send(ctx, held, rows[i:], now)
		for _, row := range rows[i : i+n] {
			acked = append(acked, row.EventID)
		}
		if n > 0 {
			r.brokerOK()
		}
		i += n
		switch {
		case err == nil && n > 0:
			continue
		case err == nil || ctx.Err() != nil:
			return acked, false
		case errors.Is(err, outbox.ErrTransient):
			r.brokerDown(err)
			return acked, false
		case !r.failed(ctx, roomID, rows[i], err):
			return acked, false // the row backs off: nothing after it may go first
		}
		i++ // the row went dead
	}
	return acked, true
}

// mayPublish tells whether the room's next row may go out: its gate is
// neither lost nor, as far as Check knows, past its lease.
func mayPublish(ctx context.Context, held Held) bool {
	select {
	case <-held.Lost():
		return false
	default:
		return held.Check(ctx) == nil
	}
}

// send publishes rows from the first on and returns how many the broker
// acknowledged and the error of the one after them. The due rows ahead
// whose commands were not sampled go through the in-order publisher when
// there is one, stopping when the gate is lost; otherwise the first row
// goes alone, in its own span when it was sampled.
func (r *Relay) send(ctx context.Context, held Held, rows []outbox.Record, now time.Time) (int, error) {
	if r.inOrder != nil && !traced(&rows[0]) {
		run := 1
		for run < len(rows) && !traced(&rows[run]) && !rows[run].NextAttemptAt.After(now) {
			run++
		}
		rows = rows[:run]
		return r.inOrder.PublishInOrder(ctx, rows, func(i int) bool {
			r.lag(ctx, &rows[i])
			// On the client's goroutine, which must not block: a gate
			// that is not fresh ends the run, and the next one renews it.
			select {
			case <-held.Lost():
				return false
			default:
				return held.Fresh()
			}
		})
	}
	pctx, span := startPublish(ctx, rows[0])
	err := r.pub.Publish(pctx, rows[0])
	endPublish(span, err)
	if err != nil {
		return 0, err
	}
	r.lag(pctx, &rows[0])
	return 1, nil
}

// lag observes the row's commit-to-acknowledge delay.
func (r *Relay) lag(ctx context.Context, row *outbox.Record) {
	if r.metrics.Lag != nil && !row.CreatedAt.IsZero() {
		r.metrics.Lag(ctx, r.now().Sub(row.CreatedAt))
	}
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

// mark hands acknowledged ids to the marker, waits until they are stored
// and reports whether they were.
func (r *Relay) mark(ctx context.Context, roomID string, ids []string) bool {
	req := markReq{ids: ids, done: make(chan error, 1)}
	select {
	case r.marks <- req:
	case <-ctx.Done():
		return false
	}
	if err := <-req.done; err != nil {
		// They stay pending and go out again; the broker drops the duplicates.
		r.log.Warn("outbox mark published", "room_id", roomID, "rows", len(ids), "err", err)
		return false
	}
	if r.metrics.Published != nil {
		r.metrics.Published(len(ids))
	}
	return true
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
