package cell

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"slices"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	roomv1 "hyapp/room-service/gen/room/v1"
	"hyapp/room-service/internal/obs"
	"hyapp/room-service/lease"
	"hyapp/room-service/outbox"
	"hyapp/room-service/room"
	"hyapp/room-service/snapshot"
	"hyapp/room-service/store"
)

// Result is the answer to a committed command. What a command recorded
// besides (a gift's charge) is in its envelope: the engine fills it in, and
// a retry gets what the first attempt recorded (room.RestoreOutcome).
type Result struct {
	// RoomVersion is the version the command committed at.
	RoomVersion int64
	// Duplicate is true when the command_id had already committed: nothing was applied again.
	Duplicate bool
}

// request is one message in a cell's mailbox: a command (env set) or a
// snapshot query (env nil).
type request struct {
	env   *room.Envelope
	reply chan response
	// span is the caller's span when it records (see trace.go), queued
	// when the request entered the mailbox; nil otherwise.
	span   trace.Span
	queued time.Time
}

type response struct {
	result Result
	snap   *roomv1.RoomSnapshot
	err    error
}

// Stop reasons, also the label of the stops metric.
const (
	stopIdle     = "idle"
	stopEvicted  = "evicted" // passivated to make room for another (Config.MaxRooms)
	stopShutdown = "shutdown"
	stopFenced   = "fenced"
	stopLease    = "lease_lost"
	stopFailure  = "commit_failure"
	stopPanic    = "panic"
	stopExists   = "exists" // a fresh cell's room had a row: it loads as stored
)

// Cell is one loaded room: the only goroutine that reads or writes its state.
// Requests arrive through the bounded mailbox; the cell applies every queued
// command it can, commits them in one batch, then answers all of them.
type Cell struct {
	reg     *Registry
	roomID  string
	epoch   int64
	lease   lease.Handle
	mailbox *mailbox
	done    chan struct{}
	evict   chan chan bool // asks the cell to passivate; it answers whether it does
	used    atomic.Int64   // the registry's tick of its last call
	// touched is the unix ns of the last call served without the mailbox
	// that keeps the room in use (a heartbeat): the idle timeout counts
	// from it too.
	touched atomic.Int64

	// Reads without the mailbox (Registry.Snapshot): head is the version
	// the room last committed (stored before any caller is answered), view
	// the snapshot message the cell last built. A read may use the view
	// while it is of the head version.
	head atomic.Int64
	view atomic.Pointer[view]

	// existed: a fresh cell found its room's row (see exists); written
	// before the cell stops, read by callers once done is closed.
	existed bool
	// provisional: a fresh cell whose room may have a row after all: it
	// neither looked nor committed the create yet. A heartbeat does not
	// count members against its empty state.
	provisional atomic.Bool

	// Owned by the cell goroutine.
	// fresh: a CreateRoom found the room unloaded, and the cell started
	// from an empty state without reading the store: its next commit
	// creates the room's row. Until then the room may have a row after
	// all (created before, not loaded here): the commit that would create
	// it is refused, and a batch with more than creates looks first.
	fresh bool
	// again: the batch is decided again after the store refused it
	// (attemptFromLog); features read what they decide on anew.
	again        bool
	state        *room.State
	lastSnapshot int64 // version of the newest stored snapshot
	snapBytes    int   // size of the newest stored snapshot (0: not known)
	loggedBytes  int   // payload bytes of the commands logged after it
	recent       *recentIDs
	snapCache    *roomv1.RoomSnapshot
	protos       snapshot.Builder // the state's snapshot messages, reads' and stored ones'
	// membersMoved: a command applied since protos last built changed the
	// members; otherwise a read's build reuses the last list (see proto).
	membersMoved bool
	log          *slog.Logger
}

// pending is one command of a batch while it is decided and committed.
type pending struct {
	req     *request
	payload []byte // encoded command, when applied
	result  Result
	err     error
	events  []room.Event
	applied bool
	fromLog bool // answered from the command log (or the recent ids): a retry
	seats   []room.Seat
	logged  *recentEntry         // answered from the log row a Feature found
	trace   string               // the request's traceparent, set when its batch is built
	commit  func(b *store.Batch) // what its Verdict commits with it
}

// A cell whose last batch held at least lingerAfter commands, and that
// finds fewer than lingerTarget (at most MaxBatch) queued when it ends,
// waits up to Config.Linger for that many before it takes them.
const (
	lingerAfter  = 4
	lingerTarget = 32
)

func (c *Cell) run() {
	defer c.reg.cellExited(c)
	idle := time.NewTimer(c.reg.cfg.IdleTimeout)
	defer idle.Stop()
	batch := make([]*request, 0, 16)
	// work answers everything queued, batch by batch.
	work := func() (stop string) {
		prev := 0 // commands of the batch before, 0 before the first
		target := min(lingerTarget, c.reg.cfg.MaxBatch)
		for {
			depth := c.mailbox.len()
			if c.reg.cfg.Linger > 0 && prev >= lingerAfter && depth > 0 && depth < target {
				// Busy: the commit that just ended left a short queue
				// behind. A moment more makes the next commit carry
				// several times as many commands for the same fixed cost.
				c.reg.metrics.Lingers.Inc()
				c.mailbox.await(target, c.reg.cfg.Linger, c.reg.stopping)
				depth = c.mailbox.len()
			}
			if depth > 0 {
				c.reg.metrics.MailboxDepth.Observe(float64(depth))
			}
			batch = c.mailbox.take(batch[:0], c.reg.cfg.MaxBatch)
			if len(batch) == 0 {
				return ""
			}
			waited(batch, depth)
			stop = c.safeHandle(batch)
			prev = len(batch)
			clear(batch)
			if stop != "" {
				return stop
			}
		}
	}
	for {
		select {
		case <-c.mailbox.signal:
			c.reg.metrics.WorkingCells.Inc()
			reason := work()
			c.reg.metrics.WorkingCells.Dec()
			if reason != "" {
				c.finish(reason)
				return
			}
			idle.Reset(c.reg.cfg.IdleTimeout)
		case <-idle.C:
			if rest := c.reg.cfg.IdleTimeout - time.Duration(time.Now().UnixNano()-c.touched.Load()); rest > 0 {
				idle.Reset(rest) // in use without the mailbox: not idle
				continue
			}
			if c.reg.detachIdle(c) {
				c.finish(stopIdle)
				return
			}
			idle.Reset(c.reg.cfg.IdleTimeout)
		case ok := <-c.evict:
			if c.reg.detachIdle(c) {
				ok <- true
				c.finish(stopEvicted)
				return
			}
			ok <- false
		case <-c.lease.Lost():
			c.finish(stopLease)
			return
		case <-c.reg.stopping:
			// Shutdown: answer what is queued, then stop with a final snapshot.
			reason := work()
			if reason == "" {
				reason = stopShutdown
			}
			c.finish(reason)
			return
		}
	}
}

// safeHandle runs one batch and turns a panic into internal errors for the
// batch and a rebuild of the room from storage.
func (c *Cell) safeHandle(batch []*request) (stop string) {
	defer func() {
		if p := recover(); p != nil {
			c.log.Error("room cell panic; the room reloads from storage", "panic", p, "stack", string(debug.Stack()))
			replyAll(batch, response{err: room.Errorf(room.ErrInternal, "room %s failed; retry", c.roomID)})
			stop = stopPanic
		}
	}()
	return c.handle(batch)
}

func replyAll(batch []*request, r response) {
	for _, req := range batch {
		select {
		case req.reply <- r:
		default: // already answered
		}
	}
}

// handle decides, commits and answers one batch. It first checks that the
// room's lease is still this node's (free while the lease is fresh; a
// renewal otherwise), so that an owner that was paused past its lease and
// wakes up stops before it writes instead of relying on the database fence
// alone. A lease still not fresh after that could not be renewed (its
// store is unreachable), and another node may have taken the room: the
// fence refuses this node's commits, but not its reads and refusals, so
// the room's owner epoch is read first.
func (c *Cell) handle(batch []*request) (stop string) {
	if err := c.lease.Check(c.reg.ctx); err != nil {
		c.log.Warn("room lease lost; stopping before the batch", "err", err)
		replyAll(batch, response{err: room.Errorf(room.ErrFenced, "room %s: %v", c.roomID, err)})
		return stopLease
	}
	if !c.lease.Fresh() && !c.fresh {
		switch epoch, found, err := c.reg.store.RoomOwnerEpoch(c.reg.ctx, c.roomID); {
		case err != nil:
			replyAll(batch, response{err: room.Errorf(room.ErrUnavailable, "room %s: its lease could not be renewed nor its owner read: %v", c.roomID, err)})
			return ""
		case found && epoch != c.epoch:
			c.log.Warn("room claimed by another node while its lease could not be renewed; stopping", "epoch", c.epoch, "stored_epoch", epoch)
			replyAll(batch, response{err: room.Errorf(room.ErrFenced, "room %s: claimed by another node", c.roomID)})
			return stopFenced
		}
	}
	if c.provisional.Load() && !onlyCreates(batch) {
		// Only a create may be decided before the room is known to be
		// missing: anything else would be answered room_not_found.
		switch _, found, err := c.reg.store.GetRoomMeta(c.reg.ctx, c.roomID); {
		case err != nil:
			return c.fail(batch, &readError{"look up the room", err})
		case found:
			return c.exists(batch)
		}
		c.provisional.Store(false) // missing indeed
	}
	stored, err := c.olderInLog(batch)
	if err != nil {
		return c.fail(batch, &readError{"look up retried command ids", err})
	}
	cmds, out, err := c.attempt(batch, stored, false)
	for try := 0; errors.Is(err, store.ErrConflict) && try < redecide; try++ {
		// The store refused the batch, writing nothing: a command id
		// committed before this cell knew of it, or a gift charged inside
		// the commit was decided on a balance that has moved since. Reload
		// and decide again, every id looked up in the log first.
		c.log.Info("the store refused the batch; reloading the room to decide it again", "err", err)
		cmds, out, err = c.attemptFromLog(batch)
	}
	if err != nil {
		return c.fail(batch, err)
	}
	c.head.Store(c.state.Version) // committed: a read after any answer below sees it
	for _, p := range cmds {
		p.req.reply <- response{result: p.result, err: p.err}
		label := resultLabel(p)
		c.reg.metrics.Commands.WithLabelValues(string(p.req.env.Command.Type()), label).Inc()
		if p.err != nil {
			c.log.DebugContext(p.req.ctx(), "command refused", "command_id", p.req.env.CommandID, "type", string(p.req.env.Command.Type()), "reason", label)
		}
	}
	for _, r := range batch {
		switch {
		case r.env != nil:
		case c.fresh: // a create that has not committed: no room yet
			r.reply <- response{err: room.ErrRoomNotFound}
		default:
			r.reply <- response{snap: c.snapshot(), result: Result{RoomVersion: c.state.Version}}
		}
	}
	if len(out) > 0 {
		c.reg.sink.Publish(out)
	}
	return ""
}

// attempt decides the batch against the state and commits what applied.
// stored holds log rows of the batch's command ids; all says every id of
// the batch was looked up (else refused commands are looked up after).
func (c *Cell) attempt(batch []*request, stored map[string]store.CommandRecord, all bool) ([]*pending, []room.Committed, error) {
	base, prevStatus := c.state.Version, c.state.Status
	cmds := c.decideAll(batch, stored)
	if !all {
		if err := c.resolveRefused(cmds); err != nil {
			return nil, nil, &readError{"look up refused command ids", err}
		}
	}
	if c.state.Version == base {
		return cmds, nil, nil
	}
	b, err := c.buildBatch(cmds, base, prevStatus)
	if err == nil {
		_, span := obs.StartFor(c.reg.ctx, "cell.commit", parents(batch, (*request).spanContext))
		if span.IsRecording() {
			span.SetAttributes(attribute.String("room.id", c.roomID), attribute.Int("room.batch_commands", len(b.Commands)),
				attribute.Int("room.outbox_rows", len(b.Outbox)))
		}
		err = c.reg.committer.commit(span.SpanContext(), b)
		if err != nil && span.IsRecording() {
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
	}
	if err != nil {
		return nil, nil, err
	}
	return cmds, c.committed(cmds, b), nil
}

// redecide is how many times a batch the store refused (store.ErrConflict)
// is decided again before its callers are told to retry.
const redecide = 3

// attemptFromLog reloads the room and decides the batch again, knowing
// which of its command ids the log holds.
func (c *Cell) attemptFromLog(batch []*request) ([]*pending, []room.Committed, error) {
	c.again = true
	defer func() { c.again = false }()
	if err := c.reload(); err != nil {
		return nil, nil, &readError{"reload room", err}
	}
	ids := make([]string, 0, len(batch)+1)
	for _, r := range batch {
		if r.env != nil {
			ids = append(ids, r.env.CommandID)
		}
	}
	for _, f := range c.reg.features.all {
		if f.Lead != nil {
			if env := f.Lead(c.state); env != nil {
				ids = append(ids, env.CommandID) // see lead
			}
		}
	}
	stored, err := c.reg.store.GetCommands(c.reg.ctx, c.roomID, ids)
	if err != nil {
		return nil, nil, &readError{"look up command ids", err}
	}
	if stored == nil {
		stored = map[string]store.CommandRecord{} // looked up: none is in the log
	}
	return c.attempt(batch, stored, true)
}

// olderInLog reads the log rows of the batch's command ids that this cell
// saw commit but no longer keeps the answer of (recentIDs.older): a retry
// that came late is answered from its row instead of failing on the log's
// unique key, which would make the room reload. Nil when there are none.
func (c *Cell) olderInLog(batch []*request) (map[string]store.CommandRecord, error) {
	var ids []string
	for _, r := range batch {
		if r.env != nil && c.recent.older(r.env.CommandID) {
			ids = append(ids, r.env.CommandID)
		}
	}
	if len(ids) == 0 {
		return nil, nil
	}
	return c.reg.store.GetCommands(c.reg.ctx, c.roomID, ids)
}

// errRoomExists answers the callers of a fresh cell whose room has a row:
// Registry.call loads the room as stored and submits again. It never
// reaches a client.
var errRoomExists = errors.New("the room has a row: load it")

// exists stops a fresh cell whose room has a row after all: its callers
// are asked to load the room as stored and submit again (errRoomExists),
// and requests still queued go to that cell.
func (c *Cell) exists(batch []*request) (stop string) {
	c.log.Debug("a create found the room stored; loading it")
	c.existed = true
	// Out of the routing table before anyone hears: a caller that submits
	// again waits for this cell to exit, then loads the room as stored.
	c.reg.detach(c)
	replyAll(batch, response{err: errRoomExists})
	return stopExists
}

// onlyCreates reports whether every request of the batch is a CreateRoom.
func onlyCreates(batch []*request) bool {
	for _, r := range batch {
		if r.env == nil {
			return false
		}
		if _, ok := r.env.Command.(*room.CreateRoom); !ok {
			return false
		}
	}
	return true
}

// readError is a failed read the cell needed to decide a batch.
type readError struct {
	what string
	err  error
}

func (e *readError) Error() string { return e.what + ": " + e.err.Error() }
func (e *readError) Unwrap() error { return e.err }

// fail answers a batch that could not be decided or committed and returns
// why the cell stops: the room reloads from storage.
func (c *Cell) fail(batch []*request, err error) (stop string) {
	var re *readError
	switch {
	case errors.As(err, &re):
		c.log.Error(re.what, "err", re.err)
		replyAll(batch, response{err: room.ErrUnavailable})
		return stopFailure
	case errors.Is(err, store.ErrFenced) && c.fresh:
		return c.exists(batch) // the commit that creates the row found one
	case errors.Is(err, store.ErrFenced):
		c.log.Warn("room fenced: another owner committed; stopping", "err", err)
		replyAll(batch, response{err: room.ErrFenced})
		return stopFenced
	case errors.Is(err, store.ErrConflict):
		// Refused each time it was decided again (a sender spending one
		// balance in several rooms at once): nothing committed.
		c.log.Warn("the store refused the batch each time it was decided; the room reloads from storage", "err", err)
		replyAll(batch, response{err: room.Errorf(room.ErrUnavailable, "the batch conflicted with concurrent changes and nothing committed; retry with the same command_id")})
		return stopFailure
	}
	c.log.Error("commit failed; outcome unknown, the room reloads from storage", "err", err)
	replyAll(batch, response{err: room.Errorf(room.ErrUnavailable, "commit outcome unknown; retry with the same command_id")})
	return stopFailure
}

// decideAll decides every command of the batch in order. Consecutive
// commands that a Feature prepares form a run, decided together; every
// other command is decided alone. Before a run or a lone command, the
// features may lead with commands of their own.
func (c *Cell) decideAll(batch []*request, stored map[string]store.CommandRecord) []*pending {
	cmds := make([]*pending, 0, len(batch))
	seen := make(map[string]*pending, len(batch))
	ctx := withDeciding(c.reg.ctx, c.again) // one for the batch's runs
	var run []*pending
	var runBy *Feature // the feature preparing run
	for _, r := range batch {
		if r.env == nil {
			continue
		}
		f := c.reg.features.runs[r.env.Command.Type()]
		if len(run) > 0 && f != runBy {
			c.decideRun(ctx, run, runBy, seen, stored)
			run = run[:0]
		}
		if len(run) == 0 {
			cmds = c.lead(cmds, seen, stored)
		}
		p := &pending{req: r}
		cmds = append(cmds, p)
		if f == nil {
			c.decide(p, seen, stored)
			continue
		}
		run, runBy = append(run, p), f
	}
	if len(run) > 0 {
		c.decideRun(ctx, run, runBy, seen, stored)
	}
	return cmds
}

// decide answers a command from what is known of its id, or applies it.
func (c *Cell) decide(p *pending, seen map[string]*pending, stored map[string]store.CommandRecord) {
	if c.known(p, seen, stored) {
		return
	}
	c.stamp(p.req.env)
	c.apply(p, seen)
}

// stamp sets a command's time, this node's clock never going back within a
// room, and the revision of the rules it is decided under.
func (c *Cell) stamp(env *room.Envelope) {
	env.At = max(c.reg.cfg.Clock().UnixMilli(), c.state.LastAt)
	env.Rev = room.Rev
}

// apply applies a command to the state, or records its refusal.
func (c *Cell) apply(p *pending, seen map[string]*pending) {
	span := p.req.start("cell.apply")
	defer span.End()
	events, err := room.Apply(c.state, p.req.env)
	if err != nil {
		p.err = err
		if span.IsRecording() {
			span.SetAttributes(attribute.String("room.reason", room.AsError(err).Reason))
		}
		return
	}
	c.membersMoved = c.membersMoved || movesMembers(events)
	c.applied(p, events, seen)
}

// decideRun decides a run that f prepares: the commands answered from
// their ids first, then f.Prepare for the others, then each applied in
// order with what Prepare filled in. A command id repeated within the run
// is answered as its first occurrence was.
func (c *Cell) decideRun(ctx context.Context, run []*pending, f *Feature, seen map[string]*pending, stored map[string]store.CommandRecord) {
	fresh := make([]*pending, 0, len(run))
	envs := make([]*room.Envelope, 0, len(run))
	first := make(map[string]*pending, len(run))
	var repeats []*pending
	for _, p := range run {
		env := p.req.env
		if c.known(p, seen, stored) {
			continue
		}
		if _, ok := first[env.CommandID]; ok {
			repeats = append(repeats, p) // answered once the first is decided
			continue
		}
		first[env.CommandID] = p
		c.stamp(env)
		fresh, envs = append(fresh, p), append(envs, env)
	}
	if len(fresh) > 0 {
		// One span for the run's preparation (a gift run's wallet charge):
		// under the first traced command, linking the others.
		ctx, span := obs.StartFor(ctx, "cell.prepare", parents(fresh, func(p *pending) trace.SpanContext { return p.req.spanContext() }))
		if span.IsRecording() {
			span.SetAttributes(attribute.Int("room.run_commands", len(fresh)))
		}
		verdicts := f.Prepare(ctx, c.state, envs)
		span.End()
		if len(verdicts) != len(fresh) {
			panic(fmt.Sprintf("a feature prepared %d commands and returned %d verdicts", len(fresh), len(verdicts)))
		}
		for i, p := range fresh {
			c.settle(p, verdicts[i], seen)
		}
	}
	for _, p := range repeats {
		f := first[p.req.env.CommandID]
		switch {
		case f.applied:
			c.answerDuplicate(p, f.result.RoomVersion, f.req.env.Command.Type(), f.payload)
		case f.logged != nil:
			c.answerDuplicate(p, f.logged.version, f.logged.typ, f.logged.payload)
		default:
			p.err = f.err
		}
	}
}

// settle acts on a Feature's verdict on a prepared command.
func (c *Cell) settle(p *pending, v Verdict, seen map[string]*pending) {
	env := p.req.env
	switch {
	case v.Logged != nil:
		rec := v.Logged
		p.logged = &recentEntry{version: rec.RoomVersion, typ: room.CommandType(rec.CommandType), payload: rec.Payload}
		c.recent.add(env.CommandID, *p.logged)
		c.answerDuplicate(p, rec.RoomVersion, room.CommandType(rec.CommandType), rec.Payload)
	case v.Err != nil:
		p.err = v.Err
	default:
		c.apply(p, seen)
		if p.err == nil {
			p.commit = v.Commit
		} else {
			// Prepared a moment ago against the same state: unreachable,
			// and worth knowing about (a gift charged before its commit
			// stays pending until the reconciler refunds it).
			c.log.ErrorContext(p.req.ctx(), "prepared command refused on apply", "command_id", env.CommandID, "type", string(env.Command.Type()), "err", p.err)
		}
	}
}

// lead applies the commands the features lead with (a switch to the
// configured economy rules), ahead of the command about to be decided: each
// is logged and committed with the batch, so replay applies every command
// as it was decided. A lead whose id stored holds takes a unique one: a
// row of that id is never the lead's own (a lead that committed is not led
// again), but a client's command logged before the service kept the id's
// prefix (room.ReservedCommandID), which would refuse every commit of the
// lead.
func (c *Cell) lead(cmds []*pending, seen map[string]*pending, stored map[string]store.CommandRecord) []*pending {
	for _, f := range c.reg.features.all {
		if f.Lead == nil {
			continue
		}
		env := f.Lead(c.state)
		if env == nil {
			continue
		}
		if _, taken := stored[env.CommandID]; taken {
			c.log.Warn("a command the engine leads with finds its id taken in the log; it takes a unique one", "command_id", env.CommandID)
			env.CommandID += "/" + uniqueSuffix()
		}
		p := &pending{req: &request{env: env, reply: make(chan response, 1)}}
		c.decide(p, seen, nil)
		if p.err != nil {
			c.log.Error("a command the engine leads with was refused", "command_id", env.CommandID, "type", string(env.Command.Type()), "err", p.err)
			continue
		}
		cmds = append(cmds, p)
	}
	return cmds
}

// known answers a command whose id already committed (earlier in the batch,
// in the recent ids or in the stored rows) and reports whether it did.
func (c *Cell) known(p *pending, seen map[string]*pending, stored map[string]store.CommandRecord) bool {
	env := p.req.env
	if first, ok := seen[env.CommandID]; ok && first.applied {
		// The same id twice in one batch: the second is a retry of the first.
		c.answerDuplicate(p, first.result.RoomVersion, first.req.env.Command.Type(), first.payload)
		return true
	}
	if _, ok := seen[env.CommandID]; !ok {
		seen[env.CommandID] = p
	}
	if e, ok := c.recent.get(env.CommandID); ok {
		c.answerDuplicate(p, e.version, e.typ, e.payload)
		return true
	}
	if r, ok := stored[env.CommandID]; ok {
		c.recent.add(env.CommandID, recentEntry{version: r.RoomVersion, typ: room.CommandType(r.CommandType), payload: r.Payload})
		c.answerDuplicate(p, r.RoomVersion, room.CommandType(r.CommandType), r.Payload)
		return true
	}
	return false
}

// applied records a command the state accepted.
func (c *Cell) applied(p *pending, events []room.Event, seen map[string]*pending) {
	env := p.req.env
	payload, err := room.EncodeCommand(env)
	if err != nil {
		// Unreachable for the domain's own types; refuse rather than log a command we cannot replay.
		panic(fmt.Sprintf("encode command %s: %v", env.Command.Type(), err))
	}
	seen[env.CommandID] = p
	p.applied, p.payload, p.events, p.result = true, payload, events, Result{RoomVersion: c.state.Version}
	for _, ev := range events {
		if ev.Type == room.EventRoomMicChanged || ev.Type == room.EventRoomMicSeatLocked {
			p.seats = slices.Clone(c.state.Seats) // at most 20 seats
			break
		}
	}
}

// answerDuplicate answers a command whose id committed as the stored
// payload at version: the same request is a duplicate, answered with what
// the first attempt recorded; another request is a command id conflict.
func (c *Cell) answerDuplicate(p *pending, version int64, typ room.CommandType, payload []byte) {
	p.fromLog = true
	if !room.SameRequest(typ, payload, p.req.env) {
		p.result, p.err = Result{}, room.ErrCommandIDConflict
		return
	}
	p.result, p.err = Result{RoomVersion: version, Duplicate: true}, nil
	room.RestoreOutcome(p.req.env.Command, payload)
}

// resolveRefused looks up the ids of refused commands: a refusal may be a
// retry of a command committed before this cell knew its id (TakeMic
// retried after a restart finds its own seat taken). Only the log can tell,
// and only refusals pay for the read.
func (c *Cell) resolveRefused(cmds []*pending) error {
	var ids []string
	for _, p := range cmds {
		if p.err != nil && !p.fromLog {
			ids = append(ids, p.req.env.CommandID)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	stored, err := c.reg.store.GetCommands(c.reg.ctx, c.roomID, ids)
	if err != nil {
		return err
	}
	for _, p := range cmds {
		if r, ok := stored[p.req.env.CommandID]; ok && p.err != nil && !p.fromLog {
			c.answerDuplicate(p, r.RoomVersion, room.CommandType(r.CommandType), r.Payload)
		}
	}
	return nil
}

func resultLabel(p *pending) string {
	switch {
	case p.err != nil:
		return room.AsError(p.err).Reason
	case p.result.Duplicate:
		return "duplicate"
	}
	return "ok"
}

// buildBatch encodes the applied commands, their durable facts, what the
// features add to each and, every SnapshotEvery commands, a snapshot.
func (c *Cell) buildBatch(cmds []*pending, base int64, prevStatus room.Status) (store.Batch, error) {
	now := c.reg.cfg.Clock()
	b := store.Batch{RoomID: c.roomID, OwnerEpoch: c.epoch, BaseVersion: base}
	if c.fresh {
		b.CreatedBy = c.reg.cfg.NodeID
	}
	for _, p := range cmds {
		if !p.applied || p.result.Duplicate {
			continue
		}
		env := p.req.env
		p.trace = p.req.traceParent()
		b.Commands = append(b.Commands, store.CommandRecord{
			RoomID: c.roomID, RoomVersion: p.result.RoomVersion, CommandID: env.CommandID,
			CommandType: string(env.Command.Type()), Payload: p.payload, Replayable: true, CreatedAt: now,
		})
		seq := int32(0)
		for _, ev := range p.events {
			if !ev.Lanes().Outbox {
				continue
			}
			data, err := json.Marshal(ev.Data)
			if err != nil {
				return b, fmt.Errorf("encode event %s room=%s: %w", ev.Type, c.roomID, err)
			}
			b.Outbox = append(b.Outbox, outbox.Record{
				EventID: outbox.EventID(c.roomID, p.result.RoomVersion, seq), RoomID: c.roomID,
				RoomVersion: p.result.RoomVersion, Seq: seq, EventType: string(ev.Type), Payload: data,
				OwnerEpoch: c.epoch, Status: outbox.StatusPending, CreatedAt: now, NextAttemptAt: now,
				TraceContext: p.trace,
			})
			seq++
		}
		if err := c.reg.features.contribute(&b, env, p.events, now); err != nil {
			return b, err
		}
		if p.commit != nil {
			p.commit(&b)
		}
	}
	if c.state.Status != prevStatus {
		b.Status = string(c.state.Status)
	}
	logged := c.loggedBytes + payloadBytes(b.Commands)
	if snapshotDue(c.state.Version-c.lastSnapshot, logged, c.snapBytes, c.reg.cfg.SnapshotEvery) {
		payload, err := snapshot.Marshal(c.proto(false))
		if err != nil {
			return b, err
		}
		b.Snapshot = &store.SnapshotRecord{RoomID: c.roomID, RoomVersion: c.state.Version, Payload: payload, CreatedAt: now}
	}
	return b, nil
}

// committed records a successful commit, tells the features, and returns
// what the sink gets once every caller has its answer.
func (c *Cell) committed(cmds []*pending, b store.Batch) []room.Committed {
	c.reg.metrics.BatchSize.Observe(float64(len(b.Commands)))
	if len(b.Outbox) > 0 && c.reg.cfg.Outbox != nil {
		c.reg.cfg.Outbox(b.Outbox)
	}
	if c.fresh {
		c.reg.metrics.Claims.WithLabelValues(claimNew).Inc()
		c.fresh = false
		c.provisional.Store(false)
	}
	if b.Snapshot != nil {
		c.stored(b.Snapshot)
	} else {
		c.loggedBytes += payloadBytes(b.Commands)
	}
	out := make([]room.Committed, 0, len(b.Commands))
	for _, p := range cmds {
		if !p.applied || p.result.Duplicate {
			continue
		}
		env := p.req.env
		c.recent.add(env.CommandID, recentEntry{version: p.result.RoomVersion, typ: env.Command.Type(), payload: p.payload})
		out = append(out, room.Committed{
			RoomID: c.roomID, RoomVersion: p.result.RoomVersion, CommandID: env.CommandID,
			CommandType: env.Command.Type(), Operator: env.Operator, At: env.At, Events: p.events, Seats: p.seats,
			Trace: p.trace,
		})
	}
	c.reg.features.committed(out)
	c.reg.features.settled(c.state, c.epoch)
	return out
}

// snapshot returns the (cached) snapshot message of the current state, as
// a query answers it now: without the bans and mutes that ended since the
// last command (that costs a copy only then). The message is shared:
// callers must not modify it.
func (c *Cell) snapshot() *roomv1.RoomSnapshot {
	if c.snapCache == nil || c.snapCache.GetRoomVersion() != c.state.Version {
		c.snapCache = c.proto(true)
	}
	v := c.view.Load()
	if v == nil || v.snap != c.snapCache {
		v = &view{snap: c.snapCache, nextExpiry: c.state.NextExpiry()}
		c.view.Store(v)
	}
	return v.at(c.reg.cfg.Clock().UnixMilli())
}

// proto builds the snapshot message of the state. A read's (reuse) after
// commands that moved no member, such as a gift storm's, takes the last
// build's member list as it is: in a room of 100,000 members a read after
// each commit would otherwise walk them all on the room's goroutine (5 ms
// a commit). A stored snapshot's looks at every member.
func (c *Cell) proto(reuse bool) *roomv1.RoomSnapshot {
	if reuse && !c.membersMoved {
		return c.protos.Reuse(c.state)
	}
	c.membersMoved = false
	return c.protos.ToProto(c.state)
}

// movesMembers reports whether events say the room's members changed: the
// events presence follows them by.
func movesMembers(events []room.Event) bool {
	for _, ev := range events {
		switch ev.Data.(type) {
		case *room.RoomUserJoinedEvent, *room.RoomUserLeftEvent, *room.RoomUserKickedEvent, *room.RoomClosedEvent:
			return true
		}
	}
	return false
}

// view is a snapshot message the cell built, for reads without the mailbox.
type view struct {
	snap       *roomv1.RoomSnapshot
	nextExpiry int64 // unix ms of the earliest ban or mute end (0: none)
}

// at answers the view as a query at now (unix ms) does: without the bans and
// mutes that ended since (a copy only then).
func (v *view) at(now int64) *roomv1.RoomSnapshot {
	if v.nextExpiry != 0 && v.nextExpiry <= now {
		return snapshot.WithoutEnded(v.snap, now)
	}
	return v.snap
}

// current returns the room's snapshot without the mailbox when the cell
// built it at its committed head and its lease is fresh; nil otherwise (the
// read goes through the mailbox, where handle renews the lease or reads the
// room's owner epoch).
func (c *Cell) current() *roomv1.RoomSnapshot {
	v := c.view.Load()
	if v == nil || v.snap.GetRoomVersion() != c.head.Load() || !c.lease.Fresh() {
		return nil
	}
	return v.at(c.reg.cfg.Clock().UnixMilli())
}

// reload rebuilds the state from storage under the same epoch.
func (c *Cell) reload() error {
	meta, found, err := c.reg.store.GetRoomMeta(c.reg.ctx, c.roomID)
	if err != nil {
		return err
	}
	if !found {
		return room.ErrRoomNotFound
	}
	c.fresh = false // a row exists: commits advance it
	c.provisional.Store(false)
	rec, err := Recover(c.reg.ctx, c.reg.store, meta)
	if err != nil {
		return err
	}
	c.adopt(rec)
	return nil
}

// adopt takes a recovered state as the cell's own.
func (c *Cell) adopt(rec *Recovered) {
	c.state, c.lastSnapshot, c.snapBytes, c.snapCache = rec.State, rec.SnapshotVersion, rec.SnapshotBytes, nil
	c.protos.Reset()
	c.membersMoved = false
	c.loggedBytes = payloadBytes(rec.Replayed)
	c.view.Store(nil)
	c.head.Store(c.state.Version)
	c.recent = newRecentIDs(c.reg.cfg.RecentIDs)
	for _, r := range rec.Replayed {
		c.recent.add(r.CommandID, recentEntry{version: r.RoomVersion, typ: room.CommandType(r.CommandType), payload: r.Payload})
	}
	c.reg.features.loaded(c.state)
	c.reg.features.settled(c.state, c.epoch)
}

// passivate asks the cell to stop as an idle one does, and waits until it
// stopped. It reports false when the cell has queued requests (it stays),
// or ctx ends first.
func (c *Cell) passivate(ctx context.Context) bool {
	ok := make(chan bool, 1)
	select {
	case c.evict <- ok:
	case <-c.done:
		return true
	case <-ctx.Done():
		return false
	}
	select {
	case yes := <-ok:
		if !yes {
			return false
		}
	case <-ctx.Done():
		return false
	}
	select {
	case <-c.done:
		return true
	case <-ctx.Done():
		return false
	}
}

// finish ends the cell: a graceful stop stores a final snapshot so the next
// owner replays nothing, and releases the room; every stop releases the
// lease.
func (c *Cell) finish(reason string) {
	c.reg.features.stopped(c.roomID)
	c.reg.detach(c)
	c.reg.metrics.Stops.WithLabelValues(reason).Inc()
	graceful := reason == stopIdle || reason == stopShutdown || reason == stopEvicted
	if graceful {
		if err := c.stopCleanly(); err != nil {
			c.log.Warn("final snapshot and release", "err", err)
		}
	}
	if err := c.lease.Release(c.reg.releaseCtx()); err != nil {
		c.log.Warn("release lease", "err", err)
	}
	c.log.Debug("room cell stopped", "reason", reason, "room_version", c.state.Version)
}

// stopCleanly stores the final snapshot, unless the stored one is at the
// head, and tells the next owner that this one left cleanly (not a
// failover); a fresh cell owns no row to release. Many rooms' stops share
// a transaction.
func (c *Cell) stopCleanly() error {
	st := store.RoomStop{RoomID: c.roomID, Release: !c.fresh, Epoch: c.epoch}
	if c.state.Version > c.lastSnapshot {
		payload, err := snapshot.Marshal(c.proto(false))
		if err != nil {
			return err
		}
		st.Snapshot = &store.SnapshotRecord{RoomID: c.roomID, RoomVersion: c.state.Version, Payload: payload, CreatedAt: c.reg.cfg.Clock()}
	}
	if st.Snapshot == nil && !st.Release {
		return nil
	}
	if err := c.reg.stopper.stop(st); err != nil {
		return err
	}
	if st.Snapshot != nil {
		c.stored(st.Snapshot)
	}
	return nil
}

// stored records that s is the room's newest stored snapshot.
func (c *Cell) stored(s *store.SnapshotRecord) {
	c.lastSnapshot, c.snapBytes, c.loggedBytes = s.RoomVersion, len(s.Payload), 0
}

// payloadBytes is the size of the commands' payloads in the log.
func payloadBytes(cmds []store.CommandRecord) int {
	n := 0
	for _, c := range cmds {
		n += len(c.Payload)
	}
	return n
}

// SnapshotStretch bounds how far the log may run past the newest snapshot
// of a large room: SnapshotStretch × SnapshotEvery commands.
const SnapshotStretch = 20

// snapshotDue reports whether a commit that brings the commands after the
// newest stored snapshot to since, with logged bytes of payload, stores a
// snapshot too. It does once since reaches every, and the log since the
// snapshot holds at least as many bytes as the snapshot (snapBytes), or
// since reaches SnapshotStretch × every. A small room snapshots every
// `every` commands; a large one (tens of thousands of members make a
// snapshot of megabytes that takes milliseconds to encode) waits until its
// log has grown as large, so a snapshot costs each command a share bounded
// by the command's own log bytes, and recovery still replays at most
// SnapshotStretch × every commands.
func snapshotDue(since int64, logged, snapBytes, every int) bool {
	n := int64(every)
	return since >= n && (logged >= snapBytes || since >= SnapshotStretch*n)
}

// recentIDs remembers the last few committed command ids of a room with
// their answers, so most retries are answered without reading the log,
// and the ids of the last olderFor without (up to olderIDs), so that a
// later retry is answered from one read of its log row. Both are bounded:
// a retry older still reaches the log's unique key, and the room reloads
// to answer it.
type recentIDs struct {
	max   int
	ring  []string
	next  int
	items map[string]recentEntry
	ids   idRing // evicted from ring
}

// A room remembers the ids that left its answers for olderFor, and at most
// olderIDs of them (at 5,000 commands a second the last 1.6 s, under 1 MB);
// a quiet room's go as they age.
const (
	olderIDs = 8192
	olderFor = 30 * time.Second
)

// idRing is a bounded first-in first-out set of ids, each kept up to
// olderFor.
type idRing struct {
	buf  []idAt // a ring: n ids from head, oldest first
	head int
	n    int
	set  map[string]struct{}
}

type idAt struct {
	id string
	at time.Time
}

func (r *idRing) add(id string, now time.Time) {
	if r.set == nil {
		r.set = make(map[string]struct{})
	}
	for r.n > 0 && (r.n == olderIDs || now.Sub(r.buf[r.head].at) > olderFor) {
		delete(r.set, r.buf[r.head].id)
		r.buf[r.head] = idAt{}
		r.head = (r.head + 1) % len(r.buf)
		r.n--
	}
	if r.n == len(r.buf) { // grow, oldest first
		buf := make([]idAt, min(max(2*len(r.buf), 16), olderIDs))
		for i := range r.n {
			buf[i] = r.buf[(r.head+i)%len(r.buf)]
		}
		r.buf, r.head = buf, 0
	}
	r.buf[(r.head+r.n)%len(r.buf)] = idAt{id: id, at: now}
	r.n++
	r.set[id] = struct{}{}
}

type recentEntry struct {
	version int64
	typ     room.CommandType
	payload []byte
}

func newRecentIDs(max int) *recentIDs { return &recentIDs{max: max} }

func (r *recentIDs) get(id string) (recentEntry, bool) {
	e, ok := r.items[id]
	return e, ok
}

// older says the id committed but its answer is no longer kept.
func (r *recentIDs) older(id string) bool {
	if _, ok := r.items[id]; ok {
		return false
	}
	_, ok := r.ids.set[id]
	return ok
}

func (r *recentIDs) add(id string, e recentEntry) {
	if r.items == nil {
		r.items = make(map[string]recentEntry)
	}
	if _, ok := r.items[id]; ok {
		return
	}
	if len(r.ring) < r.max {
		r.ring = append(r.ring, id)
	} else {
		evicted := r.ring[r.next]
		delete(r.items, evicted)
		r.ids.add(evicted, time.Now())
		r.ring[r.next] = id
		r.next = (r.next + 1) % r.max
	}
	r.items[id] = e
}
