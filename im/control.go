package im

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	roomv1 "hyapp/room-service/gen/room/v1"
	"hyapp/room-service/room"
)

// EventStream is the broker side of group control: a durable consumer of
// every durable room event, and a side stream where control keeps the events
// it gave up on. It speaks JetStream's delivery model (ack, nak with a delay,
// term), which is what control's ordering and retries are built on.
// outbox/natsbus's Bus implements it; cmd wires it in. Its methods are safe
// for concurrent use.
type EventStream interface {
	// Subscribe creates or updates the durable pull consumer cfg describes
	// over the room events of types (the implementation sets the stream and
	// filters) and starts pulling at most batch messages at a time. It may
	// deliver events of other types too (a broker that cannot filter by
	// several types); they are acknowledged unread. The caller stops the
	// iterator.
	Subscribe(ctx context.Context, cfg jetstream.ConsumerConfig, types []string, batch int) (jetstream.MessagesContext, error)
	// RoomEvent decodes a delivered message. The event is never nil: when
	// the body does not decode, it still carries the room id and event type
	// (from the message's headers) beside the error.
	RoomEvent(msg jetstream.Msg) (*roomv1.RoomEvent, error)
	// CreateSideStream creates or updates a small stream beside the room
	// events' (subjects must not overlap them), keeping at most maxMsgs
	// messages for at most maxAge.
	CreateSideStream(ctx context.Context, name string, subjects []string, maxAge time.Duration, maxMsgs int64) error
	// NextOfRoom returns the first event of eventType in roomID the stream
	// holds after stream sequence seq, with its sequence; nil when it holds
	// none. It passes over messages that do not decode.
	NextOfRoom(ctx context.Context, roomID, eventType string, seq uint64) (*roomv1.RoomEvent, uint64, error)
	// LatestOfRoom returns the last event of eventType in roomID the stream
	// holds, with its sequence; nil when it holds none. A last message that
	// does not decode is an error.
	LatestOfRoom(ctx context.Context, roomID, eventType string) (*roomv1.RoomEvent, uint64, error)
	// PublishSide stores data in a side stream on the subject prefix.key,
	// key escaped to one subject token; a non-empty msgID makes a repeat a
	// duplicate. A nil error means the broker stored it.
	PublishSide(ctx context.Context, prefix, key, msgID string, data []byte) error
}

// GroupAPI is the part of Tencent IM that group control needs. Every call
// must be idempotent: creating an existing group, destroying a missing one,
// muting a muted member all succeed. A call on a group that does not exist
// returns an error wrapping ErrGroupNotFound; a call that can never succeed
// as it is returns a *PermanentError. Anything else is retried.
type GroupAPI interface {
	CreateGroup(ctx context.Context, groupID, name string) error
	DestroyGroup(ctx context.Context, groupID string) error
	RenameGroup(ctx context.Context, groupID, name string) error
	ShutUpAllMember(ctx context.Context, groupID string, on bool) error
	ForbidSendMsg(ctx context.Context, groupID string, members []string, seconds uint32) error
	BanGroupMember(ctx context.Context, groupID string, members []string, seconds uint32, reason string) error
	UnbanGroupMember(ctx context.Context, groupID string, members []string) error
}

// ErrGroupNotFound is wrapped by Sender and GroupAPI errors that mean the
// group does not exist (never created, dissolved, or lost by the service).
var ErrGroupNotFound = errors.New("im group not found")

// PermanentError is a failure no retry of the same call can fix: a
// parameter the IM service refuses, a message too large, a plan limit.
// Group control terminates the event instead of retrying it.
type PermanentError struct {
	// Reason is a short stable label for metrics and operators, such as
	// "tencent_10004" or "bad_payload".
	Reason string
	Err    error
}

// Error returns the underlying error's text.
func (e *PermanentError) Error() string { return e.Err.Error() }

// Unwrap returns the underlying error.
func (e *PermanentError) Unwrap() error { return e.Err }

func permanent(reason string, err error) error { return &PermanentError{Reason: reason, Err: err} }

// Defaults of Control's zero fields.
const (
	DefaultControlDurable = "room-im-control"
	// DefaultControlMaxAckPending bounds the events delivered to group
	// control and not yet acknowledged. JetStream's default for a pull
	// consumer is 1,000: when 1,005 rooms' events kept failing, they filled
	// it and the consumer stopped delivering anyone's events. Events that
	// can never succeed are now terminated at once, so only events waiting
	// for a retry (and the ones of their rooms queued behind them) hold a
	// slot; 10,000 leaves room for ten times that incident's rooms failing
	// together while staying a small, bounded amount of broker and client
	// memory (control events are a few hundred bytes).
	DefaultControlMaxAckPending = 10_000
	// DefaultControlDeadStream keeps a record of every event group control
	// terminated (`roomctl im status` reads it), under
	// DefaultControlDeadSubject.<event type>.
	DefaultControlDeadStream  = "ROOM_IM_CONTROL_DEAD"
	DefaultControlDeadSubject = "im-control.dead"

	controlAckWait      = 30 * time.Second
	controlFetchBatch   = 256
	controlDeadMaxAge   = 30 * 24 * time.Hour
	controlDeadMaxMsgs  = 100_000
	controlDeferSlack   = 100 * time.Millisecond
	controlErrorBackoff = time.Second
	// controlResubscribeMax bounds the wait between attempts to make the
	// consumer again while its stream is missing.
	controlResubscribeMax = 10 * time.Second
)

// DeadLetter is the record group control keeps of an event it terminated.
type DeadLetter struct {
	EventID     string    `json:"event_id"`
	EventType   string    `json:"event_type"`
	RoomID      string    `json:"room_id"`
	GroupID     string    `json:"group_id"`
	RoomVersion int64     `json:"room_version"`
	StreamSeq   uint64    `json:"stream_seq"`
	Reason      string    `json:"reason"`
	Error       string    `json:"error"`
	At          time.Time `json:"at"`
}

// ControlMetrics are group control's counters; any field may be nil.
type ControlMetrics struct {
	// Applied counts events whose Tencent calls succeeded (or needed none).
	Applied func(eventType string)
	// Retried counts failed attempts that will be retried, by reason.
	Retried func(eventType, reason string)
	// Terminated counts events given up for good, by reason (a Tencent code
	// such as "tencent_10004", "invalid_request", "bad_payload", "undecodable").
	Terminated func(eventType, reason string)
	// Recreated counts groups created again because a call found them missing.
	Recreated func()
}

// Control drives the rooms' IM groups from the durable outbox, not from the
// best-effort lane: RoomCreated creates the group, RoomClosed destroys it,
// RoomProfileUpdated renames it, RoomChatEnabledChanged mutes or unmutes all
// members, RoomUserMuted mutes (forbid_send_msg), RoomUserKicked bans and
// RoomUserUnbanned lifts the ban. A call that finds the group missing
// creates it and calls again.
//
// It reads the durable events from JetStream with a durable consumer and
// acknowledges an event only after Tencent accepted its call, so a lost call
// is retried until it succeeds and a kicked user cannot keep chatting
// because a call failed. Rooms are independent: each room's events are
// applied in order by their own goroutine, a failing event holds back only
// the later events of its room (they wait for it), and an event that can
// never succeed (a *PermanentError) is terminated, recorded in the dead
// stream and counted instead of being retried.
type Control struct {
	Bus EventStream
	API GroupAPI
	// GroupOf maps a room to its group id (default GroupID).
	GroupOf func(roomID string) string
	// Durable is the consumer name (DefaultControlDurable).
	Durable string
	// MaxBackoff bounds the redelivery delay of a failing event (default 30s).
	MaxBackoff time.Duration
	// MaxAckPending is the consumer's bound on events in flight
	// (DefaultControlMaxAckPending).
	MaxAckPending int
	// Workers bounds the Tencent calls in flight (default 32).
	Workers int
	// CallTimeout bounds one event's calls (default 20s, under the 30s ack wait).
	CallTimeout time.Duration
	// DeadStream and DeadSubject name where terminated events are recorded
	// (DefaultControlDeadStream, DefaultControlDeadSubject).
	DeadStream, DeadSubject string
	Metrics                 ControlMetrics
	Log                     *slog.Logger

	now   func() time.Time // time.Now; a field for tests
	scans *memberScans     // set by Run
}

func (c Control) withDefaults() Control {
	if c.GroupOf == nil {
		c.GroupOf = GroupID
	}
	if c.Durable == "" {
		c.Durable = DefaultControlDurable
	}
	if c.MaxBackoff <= 0 {
		c.MaxBackoff = 30 * time.Second
	}
	if c.MaxAckPending <= 0 {
		c.MaxAckPending = DefaultControlMaxAckPending
	}
	if c.Workers <= 0 {
		c.Workers = 32
	}
	if c.CallTimeout <= 0 {
		c.CallTimeout = 20 * time.Second
	}
	if c.DeadStream == "" {
		c.DeadStream = DefaultControlDeadStream
	}
	if c.DeadSubject == "" {
		c.DeadSubject = DefaultControlDeadSubject
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	if c.now == nil {
		c.now = time.Now
	}
	return c
}

// Run consumes until ctx ends, then waits for the calls in flight; events
// not acknowledged by then are delivered again later. A ctx that ends while
// the consumer is being set up (a service stopped as it starts) is a
// clean stop: nothing was consumed.
func (c *Control) Run(ctx context.Context) error {
	cfg := c.withDefaults()
	if err := cfg.Bus.CreateSideStream(ctx, cfg.DeadStream, []string{cfg.DeadSubject + ".>"}, controlDeadMaxAge, controlDeadMaxMsgs); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("im control dead stream: %w", err)
	}
	subscribe := func() (jetstream.MessagesContext, error) {
		return cfg.Bus.Subscribe(ctx, jetstream.ConsumerConfig{
			Durable: cfg.Durable, AckPolicy: jetstream.AckExplicitPolicy, DeliverPolicy: jetstream.DeliverAllPolicy,
			AckWait: controlAckWait, MaxDeliver: -1, MaxAckPending: cfg.MaxAckPending,
		}, controlTypes, controlFetchBatch)
	}
	cfg.scans = newMemberScans()
	iter, err := subscribe()
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("im control consumer: %w", err)
	}
	stop := context.AfterFunc(ctx, iter.Stop)
	defer func() { stop() }()
	d := &dispatcher{c: &cfg, sem: make(chan struct{}, cfg.Workers), rooms: map[string]*roomWork{}, held: map[string]*roomHold{}}
	for ctx.Err() == nil {
		msg, err := iter.Next()
		if err == nil {
			d.dispatch(ctx, msg)
			continue
		}
		if ctx.Err() != nil {
			break
		}
		cfg.Log.Warn("im control fetch", "err", err)
		sleep(ctx, controlErrorBackoff)
		if !errors.Is(err, jetstream.ErrMsgIteratorClosed) && !errors.Is(err, jetstream.ErrConsumerDeleted) {
			continue
		}
		// The consumer went (with its stream, deleted and made again by
		// the bus's next publish): follow the rooms again on a new one,
		// from the start of the stream as it is now.
		// Until the stream is there again, it is asked less and less
		// often, and the failure is logged once.
		stop()
		iter.Stop()
		for wait := controlErrorBackoff; ctx.Err() == nil; wait = min(2*wait, controlResubscribeMax) {
			if iter, err = subscribe(); err == nil {
				cfg.Log.Warn("im control consumer made again")
				cfg.scans.reset() // the stream's sequences started over
				break
			}
			if wait == controlErrorBackoff {
				cfg.Log.Warn("im control consumer cannot be made again; retrying", "err", err)
			}
			sleep(ctx, wait)
		}
		if ctx.Err() != nil {
			d.wg.Wait()
			return nil
		}
		stop = context.AfterFunc(ctx, iter.Stop)
	}
	iter.Stop()
	d.wg.Wait()
	return nil
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// dispatcher runs each room's events in order on a goroutine of the room,
// started when the room has events and ended when it has none left.
type dispatcher struct {
	c   *Control
	sem chan struct{} // bounds the Tencent calls in flight
	wg  sync.WaitGroup

	mu    sync.Mutex
	rooms map[string]*roomWork // rooms with a goroutine running
	held  map[string]*roomHold // rooms with events waiting for an earlier one
}

type roomWork struct{ queue []delivery }

// delivery is a delivered message and the event it carries (err when its
// body did not decode).
type delivery struct {
	msg jetstream.Msg
	ev  *roomv1.RoomEvent
	err error
}

// roomHold is what keeps a room's events in order while one of them fails:
// the stream sequences of the room's events sent back to wait, the failed
// one among them. Only the lowest of them may be applied; the others go back
// again. An entry lapses at its time, in case its event never comes back
// (removed from the stream), so a lost event cannot hold the room forever.
type roomHold struct {
	waiting map[uint64]time.Time
	retryAt time.Time // the failed event's next delivery
}

// first is the lowest waiting sequence, after dropping lapsed entries.
func (h *roomHold) first(now time.Time) (uint64, bool) {
	var low uint64
	found := false
	for seq, lapse := range h.waiting {
		if now.After(lapse) {
			delete(h.waiting, seq)
			continue
		}
		if !found || seq < low {
			low, found = seq, true
		}
	}
	return low, found
}

func (d *dispatcher) dispatch(ctx context.Context, msg jetstream.Msg) {
	ev, err := d.c.Bus.RoomEvent(msg)
	dv := delivery{msg: msg, ev: ev, err: err}
	roomID := ev.GetRoomId()
	d.mu.Lock()
	if w := d.rooms[roomID]; w != nil {
		w.queue = append(w.queue, dv)
		d.mu.Unlock()
		return
	}
	w := &roomWork{queue: []delivery{dv}}
	d.rooms[roomID] = w
	d.mu.Unlock()
	d.wg.Add(1)
	go d.run(ctx, roomID, w)
}

func (d *dispatcher) run(ctx context.Context, roomID string, w *roomWork) {
	defer d.wg.Done()
	for {
		d.mu.Lock()
		if len(w.queue) == 0 {
			delete(d.rooms, roomID)
			d.mu.Unlock()
			return
		}
		dv := w.queue[0]
		w.queue = w.queue[1:]
		d.mu.Unlock()
		d.handle(ctx, roomID, dv)
	}
}

// handle applies one event and settles it: ack, retry later, or terminate.
func (d *dispatcher) handle(ctx context.Context, roomID string, dv delivery) {
	c, msg, ev := d.c, dv.msg, dv.ev
	var seq, tries uint64 = 0, 1
	if meta, err := msg.Metadata(); err == nil {
		seq, tries = meta.Sequence.Stream, meta.NumDelivered
	}
	if d.wait(roomID, seq, msg) {
		return
	}

	err := dv.err
	if err != nil {
		err = permanent("undecodable", err)
	} else {
		select {
		case d.sem <- struct{}{}:
		case <-ctx.Done():
			_ = msg.Nak()
			return
		}
		cctx, cancel := context.WithTimeout(ctx, c.CallTimeout)
		err = c.applyLatest(cctx, ev, seq)
		cancel()
		<-d.sem
	}
	typ := ev.GetEventType()
	var perm *PermanentError
	switch {
	case err == nil:
		_ = msg.Ack()
		d.settle(roomID, seq)
		if c.Metrics.Applied != nil {
			c.Metrics.Applied(typ)
		}
	case ctx.Err() != nil:
		_ = msg.Nak() // shutting down: the next run takes it at once
	case errors.As(err, &perm):
		if rerr := c.recordDead(ctx, ev, seq, perm); rerr != nil {
			// Not recorded yet: keep the event and try again.
			d.retry(roomID, msg, ev, seq, tries, rerr, "dead_record_failed")
			return
		}
		_ = msg.TermWithReason(perm.Reason)
		d.settle(roomID, seq)
		if c.Metrics.Terminated != nil {
			c.Metrics.Terminated(typ, perm.Reason)
		}
		c.Log.Error("im group control gave up an event", "room", ev.GetRoomId(), "event", ev.GetEventId(),
			"type", typ, "reason", perm.Reason, "err", err)
	default:
		d.retry(roomID, msg, ev, seq, tries, err, "transient")
	}
}

// wait sends an event back when an earlier event of its room is still to
// be applied, and reports whether it did.
func (d *dispatcher) wait(roomID string, seq uint64, msg jetstream.Msg) bool {
	now := time.Now()
	d.mu.Lock()
	h := d.held[roomID]
	if h == nil {
		d.mu.Unlock()
		return false
	}
	first, ok := h.first(now)
	if !ok || seq <= first {
		if !ok {
			delete(d.held, roomID)
		}
		d.mu.Unlock()
		return false
	}
	delay := max(h.retryAt.Sub(now), 0) + controlDeferSlack
	h.waiting[seq] = now.Add(delay + 2*controlAckWait)
	d.mu.Unlock()
	_ = msg.NakWithDelay(delay)
	return true
}

// retry asks for the event again after a backoff; the room's later events
// wait for it.
func (d *dispatcher) retry(roomID string, msg jetstream.Msg, ev *roomv1.RoomEvent, seq, tries uint64, err error, reason string) {
	c := d.c
	delay := min(time.Duration(1<<min(tries, 10))*100*time.Millisecond, c.MaxBackoff)
	now := time.Now()
	d.mu.Lock()
	h := d.held[roomID]
	if h == nil {
		h = &roomHold{waiting: map[uint64]time.Time{}}
		d.held[roomID] = h
	}
	h.waiting[seq] = now.Add(delay + 2*controlAckWait)
	h.retryAt = now.Add(delay)
	d.mu.Unlock()
	_ = msg.NakWithDelay(delay)
	if c.Metrics.Retried != nil {
		c.Metrics.Retried(ev.GetEventType(), reason)
	}
	if tries&(tries-1) == 0 { // 1st, 2nd, 4th, 8th… attempt: a stuck event does not flood the log
		c.Log.Warn("im group control failed; retrying", "room", ev.GetRoomId(), "type", ev.GetEventType(),
			"err", err, "attempt", tries, "retry_in", delay)
	}
}

// settle forgets an event that was applied or terminated.
func (d *dispatcher) settle(roomID string, seq uint64) {
	d.mu.Lock()
	if h := d.held[roomID]; h != nil {
		delete(h.waiting, seq)
		if len(h.waiting) == 0 {
			delete(d.held, roomID)
		}
	}
	d.mu.Unlock()
}

// recordDead stores the record of a terminated event in the dead stream;
// the event id makes a repeated record a duplicate.
func (c *Control) recordDead(ctx context.Context, ev *roomv1.RoomEvent, seq uint64, perm *PermanentError) error {
	data, err := json.Marshal(DeadLetter{
		EventID: ev.GetEventId(), EventType: ev.GetEventType(), RoomID: ev.GetRoomId(), GroupID: c.GroupOf(ev.GetRoomId()),
		RoomVersion: ev.GetRoomVersion(), StreamSeq: seq, Reason: perm.Reason, Error: perm.Error(), At: time.Now().UTC(),
	})
	if err != nil {
		return err
	}
	if err := c.Bus.PublishSide(ctx, c.DeadSubject, ev.GetEventType(), ev.GetEventId(), data); err != nil {
		return fmt.Errorf("record dead event=%s: %w", ev.GetEventId(), err)
	}
	return nil
}

// controlTypes are the room events group control acts on (apply); its
// consumer takes only these, so the joins, gifts and mic changes that make
// up most of the stream never reach it.
var controlTypes = []string{
	string(room.EventRoomCreated), string(room.EventRoomClosed), string(room.EventRoomProfileUpdated),
	string(room.EventRoomChatEnabledChanged), string(room.EventRoomUserMuted), string(room.EventRoomUserKicked),
	string(room.EventRoomUserUnbanned),
}

// apply makes the Tencent calls an event needs; events that need none
// succeed. Only the types of controlTypes need calls.
func (c *Control) apply(ctx context.Context, ev *roomv1.RoomEvent) error {
	roomID := ev.GetRoomId()
	group := c.GroupOf(roomID)
	payload := []byte(ev.GetPayloadJson())
	decode := func(v any) error {
		if err := json.Unmarshal(payload, v); err != nil {
			return permanent("bad_payload", fmt.Errorf("%s room=%s: payload: %w", ev.GetEventType(), roomID, err))
		}
		return nil
	}
	switch room.EventType(ev.GetEventType()) {
	case room.EventRoomCreated:
		var p room.RoomCreatedEvent
		if err := decode(&p); err != nil {
			return err
		}
		if err := c.API.CreateGroup(ctx, group, nameOr(p.Title, roomID)); err != nil {
			return fmt.Errorf("create group room=%s: %w", roomID, err)
		}
		return nil
	case room.EventRoomClosed:
		if err := c.API.DestroyGroup(ctx, group); err != nil {
			return fmt.Errorf("destroy group room=%s: %w", roomID, err)
		}
		return nil
	case room.EventRoomProfileUpdated:
		var p room.RoomProfileUpdatedEvent
		if err := decode(&p); err != nil {
			return err
		}
		return c.onGroup(ctx, "rename group", roomID, group, func() error {
			return c.API.RenameGroup(ctx, group, nameOr(p.Title, roomID))
		})
	case room.EventRoomChatEnabledChanged:
		var p room.RoomChatEnabledChangedEvent
		if err := decode(&p); err != nil {
			return err
		}
		return c.onGroup(ctx, "mute all members", roomID, group, func() error {
			return c.API.ShutUpAllMember(ctx, group, !p.Enabled)
		})
	case room.EventRoomUserMuted:
		var p room.RoomUserMutedEvent
		if err := decode(&p); err != nil {
			return err
		}
		// Tencent counts ShutUpTime from the call, which can come long
		// after the event (an outage, retries): the mute ends when the room
		// says, and one that has ended is lifted.
		secs, now := uint32(0), c.now().UnixMilli()
		switch {
		case p.Muted && p.Permanent:
			secs = foreverSeconds
		case p.Muted && p.MutedUntil > now:
			secs = untilSeconds(p.MutedUntil, now)
		}
		return c.onGroup(ctx, "mute member", roomID, group, func() error {
			return c.API.ForbidSendMsg(ctx, group, []string{account(p.UserID)}, secs)
		})
	case room.EventRoomUserKicked:
		var p room.RoomUserKickedEvent
		if err := decode(&p); err != nil {
			return err
		}
		// As for a mute, the ban ends when the room says; one that has
		// ended by the call is lifted, what the room holds: this kick may
		// be the latest word on a ban an unban before it was to lift (see
		// applyLatest), and an unban of a member not banned is harmless.
		secs, now := uint32(foreverSeconds), c.now().UnixMilli()
		if p.BannedUntil != 0 {
			if p.BannedUntil <= now {
				return c.onGroup(ctx, "lift ended ban", roomID, group, func() error {
					return c.API.UnbanGroupMember(ctx, group, []string{account(p.UserID)})
				})
			}
			secs = untilSeconds(p.BannedUntil, now)
		}
		return c.onGroup(ctx, "ban member", roomID, group, func() error {
			return c.API.BanGroupMember(ctx, group, []string{account(p.UserID)}, secs, "kicked from the room")
		})
	case room.EventRoomUserUnbanned:
		var p room.RoomUserUnbannedEvent
		if err := decode(&p); err != nil {
			return err
		}
		return c.onGroup(ctx, "unban member", roomID, group, func() error {
			return c.API.UnbanGroupMember(ctx, group, []string{account(p.UserID)})
		})
	}
	return nil
}

// maxLatestRounds bounds how many times applyLatest follows newer events
// stored while it made its calls; the events past it are applied by their
// own deliveries.
const maxLatestRounds = 8

// applyLatest applies the latest event of the state ev sets (a member's
// mute, a member's ban, the group's name or its mute-all, the group itself):
// ev, or the room's latest event after it that decides the same state, and
// once applied, checks again for one stored while its calls were made. Once
// the room closed, every earlier event dissolves the group instead: a group
// one of them made (a create, a call that found the group missing) must not
// outlive the room. Control's calls set states, so what Tencent holds is
// then what the room's latest events say, whatever order the events reach
// control in: every node of a fleet takes events from the one durable
// consumer, and an event retried, redelivered after a restart or after a
// lost ack comes after the room's later events, which another node or this
// one may have applied already. RoomClosed is applied as it is.
func (c *Control) applyLatest(ctx context.Context, ev *roomv1.RoomEvent, seq uint64) error {
	switch typ := ev.GetEventType(); {
	case !slices.Contains(controlTypes, typ):
		return nil // delivered by a server that cannot filter: nothing to do
	case typ == string(room.EventRoomClosed), seq == 0: // seq 0: not known where ev is in the stream
		return c.apply(ctx, ev)
	}
	applied := false
	for range maxLatestRounds {
		later, laterSeq, closed, err := c.later(ctx, ev, seq)
		switch {
		case err != nil:
			return err
		case closed:
			if err := c.API.DestroyGroup(ctx, c.GroupOf(ev.GetRoomId())); err != nil {
				return fmt.Errorf("destroy group of closed room=%s: %w", ev.GetRoomId(), err)
			}
			return nil
		case later != nil:
			ev, seq = later, laterSeq
		case applied:
			return nil
		}
		if err := c.apply(ctx, ev); err != nil {
			return err
		}
		applied = true
	}
	return nil
}

// later returns the room's latest event after stream sequence seq that
// decides the state ev sets, with its sequence (nil when there is none),
// or reports that the room closed after ev.
func (c *Control) later(ctx context.Context, ev *roomv1.RoomEvent, seq uint64) (*roomv1.RoomEvent, uint64, bool, error) {
	roomID := ev.GetRoomId()
	closed, _, err := c.Bus.NextOfRoom(ctx, roomID, string(room.EventRoomClosed), seq)
	if err != nil {
		return nil, 0, false, err
	}
	if closed != nil && closed.GetEventId() != ev.GetEventId() {
		return nil, 0, true, nil
	}
	types, user := stateOf(ev)
	var latest *roomv1.RoomEvent
	var latestSeq uint64
	for _, typ := range types {
		if user != 0 { // a member's state: the member's last event of the type after ev
			last, lastSeq, err := c.scans.memberLast(ctx, c.Bus, roomID, typ, user, seq)
			if err != nil {
				return nil, 0, false, err
			}
			if last != nil && lastSeq > latestSeq && last.GetEventId() != ev.GetEventId() {
				latest, latestSeq = last, lastSeq
			}
			continue
		}
		// The group's own state: its last event decides, one read.
		last, lastSeq, err := c.Bus.LatestOfRoom(ctx, roomID, typ)
		if err == nil {
			if last != nil && lastSeq > seq && lastSeq > latestSeq && last.GetEventId() != ev.GetEventId() {
				latest, latestSeq = last, lastSeq
			}
			continue
		}
		// The last message does not decode (or the read failed): the
		// room's events of the type after ev, one read each, find the last
		// past it, or fail as well.
		for at := seq; ; {
			next, nextSeq, err := c.Bus.NextOfRoom(ctx, roomID, typ, at)
			if err != nil {
				return nil, 0, false, err
			}
			if next == nil {
				break
			}
			at = nextSeq
			if next.GetEventId() != ev.GetEventId() && nextSeq > latestSeq {
				latest, latestSeq = next, nextSeq
			}
		}
	}
	return latest, latestSeq, false, nil
}

// memberScanIdle is how long a memberScan no event used is kept.
const memberScanIdle = time.Minute

// memberScans keeps what group control read of a room's events of a type,
// for the members' later events: read one by one from each event on, a
// room's backlog of n member events (an outage in a busy room, a consumer
// made again) cost n² reads, and one long enough could not be read within
// an event's call timeout at all. Kept, each event reads only what the
// stream took since the last. A scan no event used for memberScanIdle is
// dropped. The nil memberScans keeps nothing. Safe for concurrent use.
type memberScans struct {
	mu      sync.Mutex
	scans   map[scanKey]*memberScan
	sweptAt time.Time
}

type scanKey struct{ room, typ string }

// memberScan is what is known of a room's events of a type in stream
// sequences (from, to]: the last of each member.
type memberScan struct {
	mu       sync.Mutex
	from, to uint64
	last     map[int64]seqEvent
	kept     int       // len(last) after its last trim (see memberLast)
	usedAt   time.Time // guarded by memberScans.mu
}

// memberScanSlack is how many more members than twice those its last trim
// kept a scan holds before it is trimmed again.
const memberScanSlack = 64

type seqEvent struct {
	ev  *roomv1.RoomEvent
	seq uint64
}

func newMemberScans() *memberScans { return &memberScans{scans: map[scanKey]*memberScan{}} }

// reset forgets every scan: the stream was made again, its sequences start over.
func (m *memberScans) reset() {
	if m == nil {
		return
	}
	m.mu.Lock()
	clear(m.scans)
	m.mu.Unlock()
}

// scan returns the scan of roomID's events of typ covering the sequences
// after seq, locked.
func (m *memberScans) scan(roomID, typ string, seq uint64) *memberScan {
	fresh := func() *memberScan { return &memberScan{from: seq, to: seq, last: map[int64]seqEvent{}} }
	if m == nil {
		s := fresh()
		s.mu.Lock()
		return s
	}
	now := time.Now()
	m.mu.Lock()
	if now.Sub(m.sweptAt) >= memberScanIdle {
		for k, s := range m.scans {
			if now.Sub(s.usedAt) >= memberScanIdle {
				delete(m.scans, k)
			}
		}
		m.sweptAt = now
	}
	k := scanKey{roomID, typ}
	s := m.scans[k]
	if s == nil {
		s = fresh()
		m.scans[k] = s
	}
	s.usedAt = now
	m.mu.Unlock()
	s.mu.Lock()
	if s.from > seq { // an earlier event than the scan knows of (a retry): start over from it
		s.from, s.to, s.last, s.kept = seq, seq, map[int64]seqEvent{}, 0
	}
	return s
}

// memberLast returns user's last event of typ in roomID after stream
// sequence seq, with its sequence; nil when there is none. It reads the
// events the stream took since the room's scan of typ last read it.
func (m *memberScans) memberLast(ctx context.Context, bus EventStream, roomID, typ string, user int64, seq uint64) (*roomv1.RoomEvent, uint64, error) {
	s := m.scan(roomID, typ, seq)
	defer s.mu.Unlock()
	for {
		next, nextSeq, err := bus.NextOfRoom(ctx, roomID, typ, s.to)
		if err != nil {
			return nil, 0, err
		}
		if next == nil {
			break
		}
		s.to = nextSeq
		if u := userOf(next); u != 0 {
			s.last[u] = seqEvent{next, nextSeq}
		}
	}
	var last *roomv1.RoomEvent
	var lastSeq uint64
	if l, ok := s.last[user]; ok && l.seq > seq {
		last, lastSeq = l.ev, l.seq
	}
	// A scan a room keeps using (a member event at least once a minute)
	// would otherwise hold the last event of every member since it began.
	// Only an event before seq (a retry) asks about the members whose last
	// event is not after seq: they go, and such a retry starts over. The
	// trim waits until the scan holds twice what the last one kept, so it
	// costs each event little.
	if seq > s.from && len(s.last) >= 2*s.kept+memberScanSlack {
		for u, l := range s.last {
			if l.seq <= seq {
				delete(s.last, u)
			}
		}
		s.from, s.kept = seq, len(s.last)
	}
	return last, lastSeq, nil
}

// stateOf names the state a control event sets: the event types whose
// later events decide it too, and the member it is of (0: the group's own).
// RoomCreated sets nothing a later event other than the close decides.
func stateOf(ev *roomv1.RoomEvent) (types []string, user int64) {
	switch typ := room.EventType(ev.GetEventType()); typ {
	case room.EventRoomProfileUpdated, room.EventRoomChatEnabledChanged:
		return []string{string(typ)}, 0
	case room.EventRoomUserMuted:
		if user := userOf(ev); user != 0 {
			return []string{string(typ)}, user
		}
	case room.EventRoomUserKicked, room.EventRoomUserUnbanned:
		if user := userOf(ev); user != 0 {
			return []string{string(room.EventRoomUserKicked), string(room.EventRoomUserUnbanned)}, user
		}
	}
	return nil, 0
}

// userOf is the user_id of a member event's payload, 0 when it has none.
func userOf(ev *roomv1.RoomEvent) int64 {
	var p struct {
		UserID int64 `json:"user_id"`
	}
	if json.Unmarshal([]byte(ev.GetPayloadJson()), &p) != nil {
		return 0
	}
	return p.UserID
}

// onGroup makes a call on an existing group; when the group is missing it
// creates the group (named after the room until its next title change) and
// calls once more.
func (c *Control) onGroup(ctx context.Context, what, roomID, group string, call func() error) error {
	err := call()
	if errors.Is(err, ErrGroupNotFound) {
		if cerr := c.API.CreateGroup(ctx, group, roomID); cerr != nil {
			return fmt.Errorf("%s room=%s: recreate group: %w", what, roomID, cerr)
		}
		if c.Metrics.Recreated != nil {
			c.Metrics.Recreated()
		}
		err = call()
	}
	if err != nil {
		return fmt.Errorf("%s room=%s: %w", what, roomID, err)
	}
	return nil
}

// nameOr is the group name for a room title: the title, or the room id when
// it has none (Tencent requires a name).
func nameOr(title, roomID string) string {
	if title == "" {
		return roomID
	}
	return title
}

// foreverSeconds is the longest ban or mute: ten years, Tencent's way to say until lifted.
const foreverSeconds = 10 * 365 * 24 * 3600

// untilSeconds is the time from now to until (unix ms), rounded up, at least 1.
func untilSeconds(untilMs, nowMs int64) uint32 {
	return uint32(max((untilMs-nowMs+999)/1000, 1))
}

// account is a user's Tencent IM identifier.
func account(user int64) string { return strconv.FormatInt(user, 10) }
