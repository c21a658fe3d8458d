package cell

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	roomv1 "hyapp/room-service/gen/room/v1"
	"hyapp/room-service/internal/obs"
	"hyapp/room-service/lease"
	"hyapp/room-service/outbox"
	"hyapp/room-service/room"
	"hyapp/room-service/store"
	"hyapp/room-service/wallet"
)

// Config tunes the engine. Zero values take the defaults of DefaultConfig.
type Config struct {
	// NodeID names this node in rooms.owner_node.
	NodeID string
	// MailboxSize bounds each room's queue; a full mailbox answers mailbox_full at once.
	MailboxSize int
	// MaxBatch is the most commands a cell applies per commit.
	MaxBatch int
	// SnapshotEvery is the fewest commands between stored snapshots; a
	// room whose snapshot outweighs its log waits longer (see snapshotDue).
	SnapshotEvery int
	// IdleTimeout passivates a room that received nothing for this long.
	IdleTimeout time.Duration
	// Linger is how long a busy cell waits for more commands before it
	// decides a short queue (0: never). A cell is busy when its last batch
	// held lingerAfter commands or more and commands queued while it
	// committed; it waits until lingerTarget are queued or Linger has
	// passed. Each commit has a fixed cost (a transaction, a sync of the
	// log, the pages of the room's rows written again), so a room taking
	// a few thousand commands a second commits a few times as many per
	// transaction for a little more latency; a quiet room never waits.
	// DefaultLinger is the service's default.
	Linger time.Duration
	// MaxRooms bounds the rooms loaded at once (0: no bound). Loading one
	// more passivates the least recently used room that has nothing
	// queued (with a final snapshot); when every room is busy the load is
	// refused with node_full.
	MaxRooms int
	// CommitTimeout bounds one group-commit transaction.
	CommitTimeout time.Duration
	// CommitWorkers is the number of parallel group-commit transactions.
	CommitWorkers int
	// CommitMaxRooms and CommitMaxCommands bound one group-commit transaction.
	CommitMaxRooms    int
	CommitMaxCommands int
	// CommitLinger is how long a group-commit worker waits for more rooms
	// before it commits few (0: never). It waits when its last transaction
	// carried commitLingerAfter rooms or more and ended less than
	// commitLingerIdle times CommitLinger before the next room came, and
	// it finds fewer than commitLingerTarget queued, until that many are
	// or CommitLinger has passed. Where many rooms each commit a command
	// or two at a time, as when listeners join a thousand rooms, each
	// transaction then carries a few times as many rooms for its fixed
	// cost; a node whose commits carry a room or two never waits. Only a
	// single worker lingers (SQLite's): with several (MySQL's), the
	// database's own group commit joins their transactions' log writes,
	// and the other workers take the rooms a lingering one waits for.
	// DefaultCommitLinger is the service's default.
	CommitLinger time.Duration
	// MaxRecoveries bounds concurrent room recoveries (a node restart loads many rooms at once).
	MaxRecoveries int
	// RecentIDs is how many committed command ids each cell remembers for retries.
	RecentIDs int
	// Clock gives command times; tests may fix it.
	Clock func() time.Time
	// TimerScanEvery is how often the registry scans for due durable timers
	// (rocket launches) that no in-memory timer fires: rooms of a crashed
	// node, passivated rooms, failed wakeups. Negative: no scan (RunTimers
	// may still be run by hand).
	TimerScanEvery time.Duration
	// Rules are the economy rules configured now (nil: room.DefaultRules).
	// A room records the rules it runs under; one whose rules differ switches
	// to these through a logged SetRules command before the next command it
	// applies. Recovery never reads them: replay uses the recorded rules.
	Rules *room.Rules
	// Wallet pays for gifts. Without one, every gift is refused as unavailable.
	Wallet wallet.Wallet
	// SettleInCommit says the wallet is the embedded ledger in the room
	// store's own database: the transaction that commits a gift makes its
	// charge (store.Batch.Charges; the wallet is a wallet.Quoter) or
	// settles the charge made before it (store.Batch.Settle), so no
	// separate transaction follows. With a remote wallet, leave it false
	// and settle after the commit (GiftSettler).
	SettleInCommit bool
	// WalletTimeout bounds one charge call.
	WalletTimeout time.Duration
	// GiftApplyWindow is how old a charge may be when its gift applies: a
	// retry of a gift charged earlier than this is refused (gift_expired),
	// so the reconciler may refund charges older than the window plus the
	// commit timeout without racing a late commit.
	GiftApplyWindow time.Duration
	// PresenceTimeout: a member not seen for this long (no heartbeat, no
	// login callback, no command of their own) leaves the room through a
	// logged ExpirePresence. A seated member silent for a third of it
	// counts as offline.
	PresenceTimeout time.Duration
	// MicOfflineGrace: a seated member offline this long loses the seat
	// (and stays in the room); one seen again within it keeps the seat.
	MicOfflineGrace time.Duration
	// Features are plugged in after the built-in ones (the room directory's
	// projector).
	Features []Feature
	// Outbox, when set, gets the outbox rows of every commit that wrote
	// some, right after the commit, from the room's cell goroutine in
	// commit order: the outbox relay's Committed, which publishes them
	// without reading them back. It must not block or modify the rows.
	Outbox func(rows []outbox.Record)
}

// DefaultLinger is the service's Config.Linger. In a room offered 5,000
// joins a second through the API on SQLite it cut the service's CPU per
// join by 5-18% (docs/benchmarks.md, "A busy room lingers").
const DefaultLinger = 2 * time.Millisecond

// DefaultCommitLinger is the service's Config.CommitLinger. With listeners
// joining 1,000 rooms through the API on SQLite, 256 calls in flight, it
// cut the service's CPU per join by about 10% (docs/benchmarks.md, "Many
// rooms' commits linger").
const DefaultCommitLinger = time.Millisecond

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{
		NodeID: "node-1", MailboxSize: 4096, MaxBatch: 256, SnapshotEvery: 500,
		IdleTimeout: 10 * time.Minute, CommitTimeout: 5 * time.Second, CommitWorkers: 1,
		CommitMaxRooms: 2048, CommitMaxCommands: 8192, MaxRecoveries: 32, RecentIDs: 256, Clock: time.Now,
		WalletTimeout: 3 * time.Second, GiftApplyWindow: 30 * time.Second, TimerScanEvery: 2 * time.Second,
		PresenceTimeout: 90 * time.Second, MicOfflineGrace: 30 * time.Second,
	}
}

func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.NodeID == "" {
		c.NodeID = d.NodeID
	}
	for _, f := range []struct{ v, d *int }{
		{&c.MailboxSize, &d.MailboxSize}, {&c.MaxBatch, &d.MaxBatch}, {&c.SnapshotEvery, &d.SnapshotEvery},
		{&c.CommitWorkers, &d.CommitWorkers}, {&c.CommitMaxRooms, &d.CommitMaxRooms},
		{&c.CommitMaxCommands, &d.CommitMaxCommands}, {&c.MaxRecoveries, &d.MaxRecoveries}, {&c.RecentIDs, &d.RecentIDs},
	} {
		if *f.v <= 0 {
			*f.v = *f.d
		}
	}
	if c.IdleTimeout <= 0 {
		c.IdleTimeout = d.IdleTimeout
	}
	if c.CommitTimeout <= 0 {
		c.CommitTimeout = d.CommitTimeout
	}
	if c.Clock == nil {
		c.Clock = d.Clock
	}
	if c.TimerScanEvery == 0 {
		c.TimerScanEvery = d.TimerScanEvery
	}
	if c.WalletTimeout <= 0 {
		c.WalletTimeout = d.WalletTimeout
	}
	if c.GiftApplyWindow <= 0 {
		c.GiftApplyWindow = d.GiftApplyWindow
	}
	if c.Rules == nil {
		c.Rules = room.DefaultRules()
	}
	if c.PresenceTimeout <= 0 {
		c.PresenceTimeout = d.PresenceTimeout
	}
	if c.MicOfflineGrace <= 0 {
		c.MicOfflineGrace = d.MicOfflineGrace
	}
	return c
}

// Registry owns the cells of this node. It is safe for concurrent use.
//
// Lock order: Registry.mu is never held while waiting on a cell, the
// database or the lease.
type Registry struct {
	cfg       Config
	store     Store
	features  features
	builtin   builtins
	lease     lease.Lease
	sink      EventSink
	metrics   *Metrics
	log       *slog.Logger
	committer *committer
	stopper   *stopper
	recoverys chan struct{}
	ctx       context.Context // for storage calls that must finish regardless of callers
	cancel    context.CancelFunc
	stopping  chan struct{}
	wg        sync.WaitGroup // cells, loads and the timer scanner
	wakes     *wakers        // wakeups of the features' in-memory timers
	// loadFailed and unrecoverable pace the lines of failed loads: in a
	// storage outage every call for a room not loaded fails one, and a
	// client retrying a room that cannot be rebuilt makes one per call.
	loadFailed, unrecoverable obs.Sometimes

	uses atomic.Int64 // a clock of calls: each cell keeps the tick of its last one (LRU)

	mu      sync.Mutex
	closed  bool
	cells   map[string]*Cell
	exiting map[string]*Cell
	loading map[string]*load
}

type load struct {
	done chan struct{}
	err  error
}

// New starts a registry with the built-in features. Nothing is loaded until
// a room is asked for; the timer scanner (RunTimers) runs every
// cfg.TimerScanEvery until Close.
func New(cfg Config, st Store, l lease.Lease, sink EventSink, m *Metrics, log *slog.Logger) *Registry {
	cfg = cfg.withDefaults()
	if m == nil {
		m = NewMetrics(nil)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &Registry{
		cfg: cfg, store: st, lease: l, sink: sink, metrics: m, log: log,
		recoverys: make(chan struct{}, cfg.MaxRecoveries),
		stopper:   newStopper(ctx, st, cfg.CommitWorkers, cfg.CommitMaxRooms),
		ctx:       ctx, cancel: cancel, stopping: make(chan struct{}), wakes: newWakers(ctx),
		cells: make(map[string]*Cell), exiting: make(map[string]*Cell), loading: make(map[string]*load),
		loadFailed: obs.Sometimes{Every: time.Second}, unrecoverable: obs.Sometimes{Every: time.Second},
	}
	r.committer = newCommitter(st, cfg, r.stopping, m)
	r.features = r.plugIn()
	if cfg.TimerScanEvery > 0 {
		r.wg.Go(func() { r.RunTimers(ctx, cfg.TimerScanEvery) })
	}
	return r
}

// Submit runs one command in its room and returns once it committed (or was
// refused). Errors are *room.Error values; an unavailable error means the
// outcome may be unknown and the caller retries with the same command_id.
// Submit fills in env what the engine decided: its time and, for a command
// that records an outcome (a gift's charge), that outcome; for a duplicate,
// what the first attempt recorded. Read them once Submit returned nil.
func (r *Registry) Submit(ctx context.Context, env *room.Envelope) (Result, error) {
	if err := env.Validate(); err != nil {
		return Result{}, err
	}
	if err := env.CheckOrigin(); err != nil {
		return Result{}, err
	}
	if err := r.features.admit(ctx, env); err != nil {
		return Result{}, err
	}
	resp, err := r.call(ctx, env.RoomID, env)
	return resp.result, err
}

// Snapshot returns the room's live state. The message is shared and must not be modified.
// A loaded room whose state has not changed since the cell last built its
// snapshot answers without the mailbox: a read does not wait behind writes.
func (r *Registry) Snapshot(ctx context.Context, roomID string) (*roomv1.RoomSnapshot, error) {
	r.mu.Lock()
	c := r.cells[roomID]
	r.mu.Unlock()
	if c != nil {
		if snap := c.current(); snap != nil {
			c.used.Store(r.uses.Add(1)) // a read is a use: max_rooms passivates the least recently used
			return snap, nil
		}
	}
	resp, err := r.call(ctx, roomID, nil)
	return resp.snap, err
}

// maxStoredRetries bounds how often one call is sent back by an empty
// cell that found its room stored (see Registry.call).
const maxStoredRetries = 16

// settled is what call learns from c, a cell that stopped before taking its
// request: if c was an empty cell that found its room stored, the call
// loads the room as stored, and the try does not count against the call.
func settled(c *Cell, create bool, try, stored int) (bool, int, int) {
	if c.existed {
		return false, try - 1, stored + 1
	}
	return create, try, stored
}

func (r *Registry) call(ctx context.Context, roomID string, env *room.Envelope) (resp response, err error) {
	ctx, span := startCall(ctx, roomID, env)
	defer func() { endCall(span, resp, err) }()
	var create bool
	if env != nil {
		_, create = env.Command.(*room.CreateRoom)
	}
	// Three tries for a cell that stops under the request, and beyond them
	// one for each empty cell that found the room stored: among many
	// creates of a stored room that is not loaded, a request that learned
	// it may still meet the empty cell another create started meanwhile,
	// and each such cell settles the room for the creates it took.
	for try, stored := 0, 0; try < 3 && stored <= maxStoredRetries; try++ {
		c, err := r.cell(ctx, roomID, create)
		if err != nil {
			return response{}, err
		}
		c.used.Store(r.uses.Add(1))
		req := &request{env: env, reply: make(chan response, 1)}
		req.traced(span)
		if !c.mailbox.push(req) {
			select {
			case <-c.done:
				create, try, stored = settled(c, create, try, stored)
				continue // the cell stopped with a full mailbox: try its successor
			default:
				r.metrics.MailboxFull.Inc()
				return response{}, room.ErrMailboxFull
			}
		}
		select {
		case resp = <-req.reply:
		case <-c.done:
			select {
			case resp = <-req.reply:
			default: // the cell stopped before taking the request: try its successor
				create, try, stored = settled(c, create, try, stored)
				continue
			}
		case <-ctx.Done():
			return response{}, room.Errorf(room.ErrUnavailable, "%v; the command may still commit, retry with the same command_id", ctx.Err())
		}
		if errors.Is(resp.err, errRoomExists) {
			// A fresh cell found the room stored: load it so.
			create, try, stored = false, try-1, stored+1
			continue
		}
		return resp, resp.err
	}
	return response{}, room.Errorf(room.ErrUnavailable, "room %s is restarting; retry", roomID)
}

// cell returns the room's loaded cell, loading it once if needed. For a
// create, a room without a row loads as a fresh cell (see roomCreation).
func (r *Registry) cell(ctx context.Context, roomID string, create bool) (*Cell, error) {
	for {
		r.mu.Lock()
		if r.closed {
			// A room this node still runs is being handed off: answer once
			// its final snapshot is stored and its lease released, so the
			// caller's retry finds the room free for the next owner instead
			// of guessing how long the hand-off takes.
			c := r.cells[roomID]
			if c == nil {
				c = r.exiting[roomID]
			}
			r.mu.Unlock()
			if c != nil {
				select {
				case <-c.done:
				case <-ctx.Done():
				}
			}
			return nil, room.ErrShutdown
		}
		if c := r.cells[roomID]; c != nil {
			r.mu.Unlock()
			return c, nil
		}
		var wait <-chan struct{}
		var pending *load
		old := r.exiting[roomID]
		if old != nil {
			wait = old.done
		} else if l := r.loading[roomID]; l != nil {
			wait, pending = l.done, l
		}
		if wait != nil {
			r.mu.Unlock()
			select {
			case <-wait:
				if pending != nil && errors.Is(pending.err, store.ErrNotFound) && !create {
					return nil, pending.err // no need to look again for a room that is not there
				}
				if old != nil && old.existed {
					create = false // an empty cell found the room stored: load it so
				}
				continue
			case <-ctx.Done():
				return nil, room.Errorf(room.ErrUnavailable, "room %s is loading: %v", roomID, ctx.Err())
			}
		}
		if r.cfg.MaxRooms > 0 && len(r.cells)+len(r.loading) >= r.cfg.MaxRooms {
			victim := r.leastRecentlyUsedLocked()
			r.mu.Unlock()
			if victim == nil || !victim.passivate(ctx) {
				return nil, room.Errorf(room.ErrNodeFull, "room %s: %d rooms loaded", roomID, r.cfg.MaxRooms)
			}
			continue
		}
		l := &load{done: make(chan struct{})}
		r.loading[roomID] = l
		r.wg.Add(1) // Close waits for the load: it takes the room's lease
		r.mu.Unlock()
		return r.start(ctx, roomID, create, l)
	}
}

// start loads the room of l and runs its cell, unless the registry closed
// meanwhile: then it releases the room at once. It is counted in r.wg, so
// Close waits for it to end before it abandons storage calls, and a room
// whose load began before Close is not left leased.
func (r *Registry) start(ctx context.Context, roomID string, create bool, l *load) (*Cell, error) {
	defer r.wg.Done()
	c, err := r.load(ctx, roomID, create)
	r.mu.Lock()
	delete(r.loading, roomID)
	var release lease.Handle // released after the lock: a lease call may be a network call
	if err == nil {
		if r.closed {
			err = room.ErrShutdown
			release = c.lease
		} else {
			r.cells[roomID] = c
			r.metrics.LoadedCells.Inc()
			r.wg.Add(1)
			go func() {
				defer r.wg.Done()
				c.run()
			}()
		}
	}
	l.err = err
	close(l.done)
	r.mu.Unlock()
	if release != nil {
		r.features.stopped(roomID)
		_ = release.Release(r.releaseCtx())
	}
	if err != nil {
		return nil, err
	}
	return c, nil
}

// leastRecentlyUsedLocked returns the loaded cell called least recently
// among those with nothing queued, or nil. It scans every cell: it runs
// only when the node is full.
func (r *Registry) leastRecentlyUsedLocked() *Cell {
	var lru *Cell
	for _, c := range r.cells {
		if c.mailbox.len() == 0 && (lru == nil || c.used.Load() < lru.used.Load()) {
			lru = c
		}
	}
	return lru
}

// load takes the lease, claims the room's epoch and recovers its state.
func (r *Registry) load(ctx context.Context, roomID string, create bool) (*Cell, error) {
	select {
	case r.recoverys <- struct{}{}:
		defer func() { <-r.recoverys }()
	case <-ctx.Done():
		return nil, room.Errorf(room.ErrUnavailable, "too many rooms loading: %v", ctx.Err())
	}
	start := time.Now()
	h, err := r.lease.Acquire(r.ctx, roomID)
	if err != nil {
		r.metrics.Recoveries.WithLabelValues("lease").Inc()
		return nil, err
	}
	c, err := r.recoverCell(roomID, h, create)
	if err != nil {
		_ = h.Release(r.releaseCtx())
		result := "error"
		switch {
		case errors.Is(err, store.ErrNotFound):
			result = "not_found"
		case errors.Is(err, room.ErrRecoveryFailed):
			result = "failed"
			if ok, held := r.unrecoverable.Allow(time.Now()); ok {
				r.log.Error("room cannot be recovered; it answers room_recovery_failed until its storage is repaired", "room_id", roomID, "err", err, "held_back", held)
			}
		default:
			if ok, held := r.loadFailed.Allow(time.Now()); ok {
				r.log.Error("recover room", "room_id", roomID, "err", err, "held_back", held)
			}
		}
		r.metrics.Recoveries.WithLabelValues(result).Inc()
		return nil, err
	}
	if c.fresh {
		r.metrics.Recoveries.WithLabelValues("new").Inc() // nothing was read: not a recovery
		return c, nil
	}
	r.metrics.Recoveries.WithLabelValues("ok").Inc()
	r.metrics.RecoverSeconds.Observe(time.Since(start).Seconds())
	return c, nil
}

func (r *Registry) recoverCell(roomID string, h lease.Handle, create bool) (c *Cell, err error) {
	defer func() {
		// A panic while rebuilding (a corrupt snapshot the decoder chokes on)
		// fails this load instead of wedging the room's loaders.
		if p := recover(); p != nil {
			r.log.Error("panic while recovering a room", "room_id", roomID, "panic", p, "stack", string(debug.Stack()))
			c, err = nil, room.Errorf(room.ErrRecoveryFailed, "room %s: panic while rebuilding: %v", roomID, p)
		}
	}()
	if create {
		return r.freshCell(roomID, h), nil
	}
	claim, err := r.store.ClaimRoom(r.ctx, roomID, r.cfg.NodeID)
	if err != nil {
		return nil, err
	}
	rec, err := Recover(r.ctx, r.store, claim.Meta)
	if err != nil {
		return nil, err
	}
	switch {
	case rec.State.Version > claim.HeadVersion:
		// Another node claimed the room and committed after our claim: we are already fenced.
		return nil, room.Errorf(room.ErrFenced, "room %s: another owner committed version %d while this node loaded it", roomID, rec.State.Version)
	case rec.State.Version < claim.HeadVersion:
		return nil, room.Errorf(room.ErrRecoveryFailed, "room %s: replay reached version %d, the head is %d", roomID, rec.State.Version, claim.HeadVersion)
	}
	r.metrics.ReplayLength.Observe(float64(len(rec.Replayed)))
	kind := claimKind(claim, r.cfg.NodeID)
	r.metrics.Claims.WithLabelValues(kind).Inc()
	if kind == claimFailover || kind == claimRestart {
		r.log.Info("room taken over from an owner that did not release it", "room_id", roomID,
			"previous_node", claim.PreviousNode, "epoch", claim.Epoch, "replayed", len(rec.Replayed))
	}
	c = r.newCell(roomID, claim.Epoch, h)
	c.adopt(rec)
	return c, nil
}

// freshCell is the cell of a room that a CreateRoom found unloaded: an
// empty state at owner epoch 1, whose first commit inserts the row (see
// roomCreation), without a read of the store before. A room that has a
// row refuses that commit, and its callers load it as stored (see
// Cell.fresh).
func (r *Registry) freshCell(roomID string, h lease.Handle) *Cell {
	c := r.newCell(roomID, 1, h)
	c.fresh = true
	c.provisional.Store(true)
	c.adopt(&Recovered{State: room.Genesis(roomID, 0, 0, 0, "", room.StatusCreating)})
	return c
}

func (r *Registry) newCell(roomID string, epoch int64, h lease.Handle) *Cell {
	return &Cell{
		reg: r, roomID: roomID, epoch: epoch, lease: h,
		mailbox: newMailbox(r.cfg.MailboxSize), done: make(chan struct{}), evict: make(chan chan bool),
		log: r.log.With("room_id", roomID),
	}
}

// releaseCtx is the context of a lease's release: the registry's without
// its end. A drain that runs out of time abandons the storage calls still
// running (it cancels r.ctx), not the releases: a lease left held makes the
// room's next owner wait a lease TTL. The lease bounds its own call.
func (r *Registry) releaseCtx() context.Context { return context.WithoutCancel(r.ctx) }

// Kinds of room_claims_total.
const (
	claimNew      = "new"
	claimReleased = "released"
	claimFailover = "failover"
	claimRestart  = "restart"
)

// claimKind says how a claimed room's previous owner left it.
func claimKind(c store.Claim, self string) string {
	switch {
	case c.Epoch == 1:
		return claimNew
	case c.PreviousNode == "":
		return claimReleased
	case c.PreviousNode == self:
		return claimRestart
	}
	return claimFailover
}

// detachIdle removes an idle cell from the routing table, unless requests
// arrived after its idle timer fired.
func (r *Registry) detachIdle(c *Cell) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if c.mailbox.len() > 0 {
		return false
	}
	r.detachLocked(c)
	return true
}

// detach removes c from the routing table: new requests for its room wait
// for it to exit, then load its successor.
func (r *Registry) detach(c *Cell) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.detachLocked(c)
}

func (r *Registry) detachLocked(c *Cell) {
	if r.cells[c.roomID] == c {
		delete(r.cells, c.roomID)
		r.exiting[c.roomID] = c
		r.metrics.LoadedCells.Dec()
	}
}

// cellExited is the last thing a cell goroutine does.
func (r *Registry) cellExited(c *Cell) {
	r.mu.Lock()
	if r.cells[c.roomID] == c {
		delete(r.cells, c.roomID)
		r.metrics.LoadedCells.Dec()
	}
	if r.exiting[c.roomID] == c {
		delete(r.exiting, c.roomID)
	}
	r.mu.Unlock()
	close(c.done)
}

// fullFor reports whether loading roomID here would first evict another
// room: the room is not loaded and max_rooms are.
func (r *Registry) fullFor(roomID string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cells[roomID] == nil && r.cfg.MaxRooms > 0 && len(r.cells)+len(r.loading) >= r.cfg.MaxRooms
}

// Loaded returns the number of loaded cells.
func (r *Registry) Loaded() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.cells)
}

// Close stops intake, waits for the rooms still loading, lets every cell
// answer what it has queued and store a final snapshot, releases the
// leases and stops the group committer. It returns when all of that is
// done or ctx ends.
func (r *Registry) Close(ctx context.Context) error {
	_, err := r.Drain(ctx)
	return err
}

// Drain is Close that also returns how many cells were loaded when intake
// stopped: the rooms handed off (0 when the registry was closed already).
func (r *Registry) Drain(ctx context.Context) (int, error) {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return 0, nil
	}
	r.closed = true
	rooms := len(r.cells)
	close(r.stopping)
	r.mu.Unlock()
	r.wakes.stop() // and with it the scanner: a wakeup after Close could only be refused

	done := make(chan struct{})
	go func() {
		r.wg.Wait()
		r.wakes.wait()
		close(done)
	}()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		err = fmt.Errorf("close registry: %w", ctx.Err())
		r.cancel() // abandon storage calls still running
		<-done
	}
	r.committer.close()
	r.stopper.close()
	r.cancel()
	return rooms, err
}
