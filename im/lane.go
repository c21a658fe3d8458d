// Package im is the direct IM lane: after a command commits, its UI events
// go straight to the room's Tencent IM group, low latency and best effort.
// Tencent silently drops a group's messages above 40 per second, lowest
// priority first, while answering success; so the lane shapes each room's
// traffic itself: a per-group budget below that limit, priority classes,
// latest-wins coalescing of heat, rank and rocket fuel (at most once a
// second), merging of join/leave bursts when over budget, and a bounded
// queue per room that sheds Low before Normal and never High. A High
// message whose send fails is sent again until it goes through; it ends
// otherwise only when a newer message carries the same state (a newer mic
// row) or when its room has closed. Every event carries its room_version and
// its seq within that version; every message of a room carries lost_through,
// the newest version of an event the lane lost, so clients know when to
// repair from GetRoomSnapshot (docs/im-messages.md). The lane never blocks a
// cell: Publish only queues.
package im

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"hyapp/room-service/room"
)

// Message is one IM message for a group: one TIMCustomElem whose Data is the
// JSON below and whose Desc is the type.
type Message struct {
	GroupID  string
	RoomID   string
	Type     string // event type, or "Batch" for merged events
	Priority room.Priority
	Data     []byte
	// Random is fixed per message, so a retried send is a duplicate to Tencent.
	Random uint32
	// Queued is when the lane received the event (just after its commit);
	// Released is when the room's budget let it go to a sender.
	Queued, Released time.Time

	version  int64 // the newest room_version the message carries
	attempts int   // failed sends so far
	closed   bool  // released after its room's RoomClosed
	regional bool  // to a region's broadcast group
}

// ErrDropped is returned by a Sender when Tencent accepted the call but
// dropped the message under its per-group frequency control.
var ErrDropped = errors.New("dropped by the IM service")

// Sender sends one message to Tencent IM (im/tencent, or the local endpoint).
// It must honour ctx.
type Sender interface {
	Send(ctx context.Context, m Message) error
}

// Regional is implemented by event payloads that may also be shown in a
// region-wide broadcast group (big gifts, big lucky wins): the room's region
// and whether this event goes there. The event decides (the gift's
// threshold is recorded in its command), so replay and display agree.
type Regional interface {
	RegionalDisplay() (region string, show bool)
}

// Config tunes the lane. Zero values take the defaults.
type Config struct {
	// Budget is the messages per second the lane sends to one group (default
	// 20: half of Tencent's 40, leaving room for client chat).
	Budget float64
	// QueueLimit bounds the Normal and Low messages queued per room (default
	// 200). Over it, High mic rows are superseded by the newest one; other
	// High events are never dropped.
	QueueLimit int
	// CoalesceEvery is the least time between two coalesced messages of one type (default 1s).
	CoalesceEvery time.Duration
	// MaxBytes is the largest message Data (default 8000, under Tencent's 8 KB).
	MaxBytes int
	// Workers bounds the sends in flight (default 64); SendTimeout bounds one (default 5s).
	Workers     int
	SendTimeout time.Duration
	// GroupOf maps a room to its group id (default GroupID).
	GroupOf func(roomID string) string
	// RegionalGroups maps a region to its broadcast group.
	RegionalGroups map[string]string
	// Tick is the dispatcher's period for budgets and coalescing (default 10ms).
	Tick time.Duration
}

func (c Config) withDefaults() Config {
	if c.Budget <= 0 {
		c.Budget = 20
	}
	if c.QueueLimit <= 0 {
		c.QueueLimit = 200
	}
	if c.CoalesceEvery <= 0 {
		c.CoalesceEvery = time.Second
	}
	if c.MaxBytes <= 0 {
		c.MaxBytes = 8000
	}
	if c.Workers <= 0 {
		c.Workers = 64
	}
	if c.SendTimeout <= 0 {
		c.SendTimeout = 5 * time.Second
	}
	if c.GroupOf == nil {
		c.GroupOf = GroupID
	}
	if c.Tick <= 0 {
		c.Tick = 10 * time.Millisecond
	}
	return c
}

// Metrics are the lane's counters; any field may be nil.
type Metrics struct {
	// Sent counts messages sent, by priority; Latency observes queued-to-sent.
	Sent    func(p room.Priority)
	Latency func(p room.Priority, d time.Duration)
	// Shed counts events dropped, by priority and reason (queue_full,
	// too_large, send_queue_full, send_failed, dropped_by_im, and for High
	// only room_closed: a failed send after the room's RoomClosed).
	Shed func(p room.Priority, reason string)
	// Merged counts events folded into a Batch message; Coalesced counts
	// values replaced by a newer one before they were sent (heat, rank and
	// fuel, and mic rows of a room whose High queue is over QueueLimit).
	Merged    func(n int)
	Coalesced func()
	// Retried counts High messages queued again after a failed send.
	Retried func()
}

// Lane is the direct IM lane. It implements cell.EventSink.
type Lane struct {
	cfg     Config
	send    Sender
	metrics Metrics
	log     *slog.Logger

	mu    sync.Mutex
	rooms map[string]*roomQueue
	ready map[string]bool // rooms with something queued
	wake  chan struct{}

	// Per worker, a High queue and a queue for the rest; a group always uses
	// the same worker, so its messages keep their order within a class.
	high, rest []chan Message
	wg         sync.WaitGroup
	stop       context.CancelFunc
}

// roomQueue is one room's shaped traffic. Guarded by Lane.mu.
type roomQueue struct {
	group string
	// regional: a region's broadcast group, whose members keep no room
	// state, so its messages carry no lost_through.
	regional bool
	limiter  *rate.Limiter
	// retry holds High messages to send again exactly as they were (same
	// Data, same Random), not before retryAt.
	retry     []Message
	retryAt   time.Time
	high      []*item
	normal    []*item
	low       []*item
	coalesced map[string]*item // latest value per coalescing type
	lastFlush map[string]time.Time
	// lost is the newest room_version of an event the lane lost (lost_through);
	// lostPending says no message carrying it was released yet, lostAt when
	// it was raised.
	lost        int64
	lostPending bool
	lostAt      time.Time
	// closed: the room's RoomClosed was queued; its group is going away.
	closed bool
}

// item is a queued event, kept unencoded so bursts can merge and the
// room's lost_through can be added when it is released.
type item struct {
	typ      string
	priority room.Priority
	env      map[string]any // the envelope
	size     int            // its encoded size
	version  int64
	random   uint32
	queued   time.Time
	merge    bool
	micRow   bool // carries the whole mic row: a newer one supersedes it
}

// New starts a lane that sends through s.
func New(cfg Config, s Sender, m Metrics, log *slog.Logger) *Lane {
	cfg = cfg.withDefaults()
	ctx, cancel := context.WithCancel(context.Background())
	l := &Lane{
		cfg: cfg, send: s, metrics: m, log: log, stop: cancel,
		rooms: make(map[string]*roomQueue), ready: make(map[string]bool),
		wake: make(chan struct{}, 1), high: make([]chan Message, cfg.Workers), rest: make([]chan Message, cfg.Workers),
	}
	for i := range l.high {
		l.high[i], l.rest[i] = make(chan Message, 256), make(chan Message, 32)
		l.wg.Add(1)
		go l.worker(ctx, l.high[i], l.rest[i])
	}
	l.wg.Add(1)
	go l.dispatch(ctx)
	return l
}

// Close stops the lane; queued messages are dropped (the lane is best effort).
func (l *Lane) Close() {
	l.stop()
	l.wg.Wait()
}

// envelope is the JSON every event carries: (room_version, seq) names it.
func envelope(typ room.EventType, roomID string, version int64, seq int, at int64, data any) map[string]any {
	return map[string]any{"type": string(typ), "room_id": roomID, "room_version": version, "seq": seq, "at": at, "data": data}
}

// Publish implements cell.EventSink: it queues the IM events of committed
// commands and returns at once.
func (l *Lane) Publish(batch []room.Committed) {
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range batch {
		for seq, ev := range c.Events {
			lanes := ev.Lanes()
			if !lanes.IM {
				continue
			}
			env := envelope(ev.Type, c.RoomID, c.RoomVersion, seq, c.At, ev.Data)
			micRow := c.Seats != nil && (ev.Type == room.EventRoomMicChanged || ev.Type == room.EventRoomMicSeatLocked)
			if micRow {
				env["seats"] = seatView(c.Seats)
			}
			it := l.newItem(string(ev.Type), lanes, env, c.RoomVersion, now)
			if it == nil {
				continue
			}
			it.micRow = micRow
			q := l.queueLocked(c.RoomID, l.cfg.GroupOf(c.RoomID), false)
			q.closed = q.closed || ev.Type == room.EventRoomClosed
			l.enqueueLocked(c.RoomID, q, it, lanes.Coalesce)
			if r, ok := ev.Data.(Regional); ok {
				region, show := r.RegionalDisplay()
				if g := l.cfg.RegionalGroups[region]; g != "" && show {
					key := "region:" + region
					copied := *it
					copied.random, copied.micRow = rand.Uint32(), false
					l.enqueueLocked(key, l.queueLocked(key, g, true), &copied, lanes.Coalesce)
				}
			}
		}
	}
	l.signal()
}

// seat is one mic seat as clients show it.
type seat struct {
	Index  int   `json:"index"`
	UserID int64 `json:"user_id"`
	Locked bool  `json:"locked,omitempty"`
	Muted  bool  `json:"muted,omitempty"`
	MicOn  bool  `json:"mic_on,omitempty"`
	Charm  int64 `json:"charm,omitempty"`
	Since  int64 `json:"since,omitempty"`
}

// seatView is the whole mic row after a seat change: a client that missed
// an earlier mic message is right again with this one.
func seatView(seats []room.Seat) []seat {
	out := make([]seat, len(seats))
	for i, s := range seats {
		out[i] = seat{Index: i, UserID: s.UserID, Locked: s.Locked, Muted: s.MutedByAdmin, MicOn: s.MicOn, Charm: s.Charm, Since: s.OccupiedSince}
	}
	return out
}

// PublishRobot queues a robot display event (atmosphere: fake audience joins
// and gifts). It has no command, no outbox row and no state; it is shaped
// like everything else, at Low priority.
func (l *Lane) PublishRobot(roomID, eventType string, payload json.RawMessage) {
	now := time.Now()
	env := map[string]any{"type": eventType, "room_id": roomID, "robot": true, "at": now.UnixMilli(), "data": payload}
	l.mu.Lock()
	if it := l.newItem(eventType, room.Lanes{IM: true, Priority: room.PriorityLow, Merge: true}, env, 0, now); it != nil {
		l.enqueueLocked(roomID, l.queueLocked(roomID, l.cfg.GroupOf(roomID), false), it, false)
	}
	l.mu.Unlock()
	l.signal()
}

func (l *Lane) signal() {
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// lostThroughSize is room for the lost_through field added on release.
const lostThroughSize = len(`,"lost_through":`) + 20

// newItem encodes env once to check its size; an event that cannot be sent
// within MaxBytes is counted and dropped (nil). With MaxSeats = 20 the
// largest High event, a mic row, is far below the default MaxBytes.
func (l *Lane) newItem(typ string, lanes room.Lanes, env map[string]any, version int64, now time.Time) *item {
	data, err := json.Marshal(env)
	if err != nil || len(data)+lostThroughSize > l.cfg.MaxBytes {
		l.shed(lanes.Priority, "too_large")
		l.log.Error("im event not sendable", "type", typ, "bytes", len(data), "err", err)
		return nil
	}
	return &item{typ: typ, priority: lanes.Priority, env: env, size: len(data), version: version, random: rand.Uint32(), queued: now, merge: lanes.Merge}
}

// queueLocked returns the queue of key, made on first use.
func (l *Lane) queueLocked(key, group string, regional bool) *roomQueue {
	q := l.rooms[key]
	if q == nil {
		q = &roomQueue{
			group: group, regional: regional, limiter: rate.NewLimiter(rate.Limit(l.cfg.Budget), max(1, int(l.cfg.Budget/4))),
			coalesced: make(map[string]*item), lastFlush: make(map[string]time.Time),
		}
		l.rooms[key] = q
	}
	return q
}

func (l *Lane) enqueueLocked(key string, q *roomQueue, it *item, coalesce bool) {
	l.ready[key] = true
	switch {
	case coalesce:
		if q.coalesced[it.typ] != nil && l.metrics.Coalesced != nil {
			l.metrics.Coalesced()
		}
		q.coalesced[it.typ] = it
	case it.priority == room.PriorityHigh:
		q.high = append(q.high, it)
		if len(q.high) > l.cfg.QueueLimit {
			l.supersedeMicRowLocked(q)
		}
	default:
		if it.priority == room.PriorityNormal {
			q.normal = append(q.normal, it)
		} else {
			q.low = append(q.low, it)
		}
		for len(q.normal)+len(q.low) > l.cfg.QueueLimit {
			var shed *item
			if len(q.low) > 0 {
				shed, q.low = q.low[0], q.low[1:]
			} else {
				shed, q.normal = q.normal[0], q.normal[1:]
			}
			l.lostLocked(q, shed.priority, "queue_full", shed.version)
		}
	}
}

// supersedeMicRowLocked bounds a room's High queue without losing a High
// event: the oldest queued mic row that a newer queued mic row supersedes
// is removed (counted as coalesced). Other High events stay.
func (l *Lane) supersedeMicRowLocked(q *roomQueue) {
	newest := -1
	for i := len(q.high) - 1; i >= 0 && newest < 0; i-- {
		if q.high[i].micRow {
			newest = i
		}
	}
	for i := range newest {
		if q.high[i].micRow {
			q.high = slices.Delete(q.high, i, i+1)
			if l.metrics.Coalesced != nil {
				l.metrics.Coalesced()
			}
			return
		}
	}
}

// lostLocked counts an event (or message) the room will not see and raises
// the room's lost_through, so its next message tells clients to repair.
func (l *Lane) lostLocked(q *roomQueue, p room.Priority, reason string, version int64) {
	l.shed(p, reason)
	if version > q.lost && !q.regional {
		q.lost, q.lostPending, q.lostAt = version, true, time.Now()
	}
}

func (l *Lane) shed(p room.Priority, reason string) {
	if l.metrics.Shed != nil {
		l.metrics.Shed(p, reason)
	}
}

// dispatch hands each room's next message to the workers when the room's
// budget allows, every tick or when woken.
func (l *Lane) dispatch(ctx context.Context) {
	defer l.wg.Done()
	t := time.NewTicker(l.cfg.Tick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-l.wake:
		case <-t.C:
		}
		l.due(time.Now())
	}
}

// lostKeep is how long an idle room's queue is kept only to carry its
// lost_through on a next message.
const lostKeep = time.Minute

// due hands, for every ready room, as many messages to the workers as its
// budget allows now. When the workers are behind (a slow endpoint, a
// saturated machine), a High message waits in its room's queue for the next
// tick and anything else is shed: the lane never waits and never sheds High.
func (l *Lane) due(now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for key := range l.ready {
		q := l.rooms[key]
		for {
			m, ok := l.nextLocked(q, now)
			if !ok {
				break
			}
			m.RoomID, m.GroupID, m.Released, m.closed, m.regional = key, q.group, now, q.closed, q.regional
			w := shard(m.GroupID, len(l.high))
			if m.Priority == room.PriorityHigh {
				select {
				case l.high[w] <- m:
					continue
				default:
					q.retry = append([]Message{m}, q.retry...)
				}
				break
			}
			select {
			case l.rest[w] <- m:
			default:
				l.lostLocked(q, m.Priority, "send_queue_full", m.version)
			}
		}
		if len(q.retry)+len(q.high)+len(q.normal)+len(q.low)+len(q.coalesced) == 0 {
			// An idle room holds nothing, but only once its budget has
			// refilled and no coalesced value went out within the period (a
			// fresh queue starts with a full budget), and no loss waits to be
			// told; until then it stays ready, so it is looked at again.
			recent := q.limiter.TokensAt(now) < float64(q.limiter.Burst())
			for _, t := range q.lastFlush {
				recent = recent || now.Sub(t) < l.cfg.CoalesceEvery
			}
			recent = recent || q.lostPending && now.Sub(q.lostAt) < lostKeep
			if !recent {
				delete(l.ready, key)
				delete(l.rooms, key)
			}
		}
	}
}

// nextLocked picks the room's next message if a token is available: a
// High message to send again, then High, then a due coalesced value, then
// Normal, then Low; when more mergeable events wait than one second of
// budget, they go as one Batch.
func (l *Lane) nextLocked(q *roomQueue, now time.Time) (Message, bool) {
	var dueType string
	for typ := range q.coalesced {
		if now.Sub(q.lastFlush[typ]) >= l.cfg.CoalesceEvery {
			dueType = typ
			break
		}
	}
	retry := len(q.retry) > 0 && !now.Before(q.retryAt)
	if !retry && len(q.high) == 0 && dueType == "" && len(q.normal) == 0 && len(q.low) == 0 {
		return Message{}, false
	}
	if !q.limiter.AllowN(now, 1) {
		return Message{}, false
	}
	var (
		items []*item
		p     room.Priority
	)
	switch {
	case retry:
		m := q.retry[0]
		q.retry = q.retry[1:]
		return m, true
	case len(q.high) > 0:
		// High is never shed; a burst of it goes as one Batch instead.
		items, p = l.takeLocked(q.high, true), room.PriorityHigh
		q.high = q.high[len(items):]
	case dueType != "":
		items, p = []*item{q.coalesced[dueType]}, q.coalesced[dueType].priority
		delete(q.coalesced, dueType)
		q.lastFlush[dueType] = now
	case len(q.normal) > 0:
		items, p = l.takeLocked(q.normal, false), room.PriorityNormal
		q.normal = q.normal[len(items):]
	default:
		items, p = l.takeLocked(q.low, false), room.PriorityLow
		q.low = q.low[len(items):]
	}
	return l.encodeLocked(q, items, p), true
}

// takeLocked returns the items the next message carries: the first one
// and, when the queue is longer than a second of budget (always for High),
// the consecutive mergeable items after it that fit under MaxBytes.
func (l *Lane) takeLocked(items []*item, high bool) []*item {
	first := items[0]
	if !high && (!first.merge || float64(len(items)) <= l.cfg.Budget) {
		return items[:1]
	}
	size, n := batchOverhead+first.size, 1
	for ; n < len(items) && (high || items[n].merge) && size+items[n].size+1 <= l.cfg.MaxBytes; n++ {
		size += items[n].size + 1
	}
	return items[:n]
}

// batchOverhead is room for a Batch's own fields around its events.
const batchOverhead = 200

// encodeLocked makes the message of one event, or a Batch of several, oldest
// first. Every message to a room's own group carries the room's
// lost_through once the lane has lost one of its events.
func (l *Lane) encodeLocked(q *roomQueue, items []*item, p room.Priority) Message {
	first, last := items[0], items[len(items)-1]
	msg := map[string]any{}
	typ := first.typ
	if len(items) == 1 {
		maps.Copy(msg, first.env)
	} else {
		events := make([]map[string]any, len(items))
		for i, it := range items {
			events[i] = it.env
		}
		typ = "Batch"
		msg["type"], msg["room_id"], msg["events"] = typ, first.env["room_id"], events
		if last.version > 0 {
			msg["room_version"] = last.version
		}
		if l.metrics.Merged != nil {
			l.metrics.Merged(len(items))
		}
	}
	if q.lost > 0 && !q.regional {
		msg["lost_through"] = q.lost
		q.lostPending = false
	}
	// Encoding cannot fail: every envelope was encoded once in newItem.
	data, _ := json.Marshal(msg)
	return Message{Type: typ, Priority: p, Data: data, Random: first.random, Queued: first.queued, version: last.version}
}

// failed takes back a message whose send failed. A High message is queued
// to be sent again as it was, after a backoff, unless its room has closed;
// a message Tencent dropped gets a new Random, since Tencent would drop a
// resend with the same one as a duplicate. Anything else is counted as lost.
func (l *Lane) failed(m Message, reason string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	q := l.queueLocked(m.RoomID, m.GroupID, m.regional)
	switch {
	case m.Priority != room.PriorityHigh:
		l.lostLocked(q, m.Priority, reason, m.version)
		return
	case m.closed || q.closed:
		l.lostLocked(q, m.Priority, "room_closed", m.version)
		return
	}
	if reason == "dropped_by_im" {
		m.Random = rand.Uint32()
	}
	m.attempts++
	q.retry = append(q.retry, m)
	q.retryAt = time.Now().Add(retryBackoff(m.attempts))
	l.ready[m.RoomID] = true
	if l.metrics.Retried != nil {
		l.metrics.Retried()
	}
}

// retryBackoff is the wait before a failed High message's next attempt:
// 100ms doubling up to 5s.
func retryBackoff(attempts int) time.Duration {
	return min(100*time.Millisecond<<min(attempts-1, 6), 5*time.Second)
}

// worker sends messages. A failed send goes back to the lane (failed): a
// High message is sent again, anything else is counted as lost.
func (l *Lane) worker(ctx context.Context, high, rest <-chan Message) {
	defer l.wg.Done()
	for {
		var m Message
		select { // High first
		case m = <-high:
		default:
			select {
			case <-ctx.Done():
				return
			case m = <-high:
			case m = <-rest:
			}
		}
		sctx, cancel := context.WithTimeout(ctx, l.cfg.SendTimeout)
		err := l.send.Send(sctx, m)
		cancel()
		switch {
		case err == nil:
			if l.metrics.Sent != nil {
				l.metrics.Sent(m.Priority)
			}
			if l.metrics.Latency != nil {
				l.metrics.Latency(m.Priority, time.Since(m.Queued))
			}
		case errors.Is(err, context.Canceled) && ctx.Err() != nil:
			return
		case errors.Is(err, ErrDropped):
			l.failed(m, "dropped_by_im")
		default:
			l.failed(m, "send_failed")
			l.log.Debug("im send failed", "group", m.GroupID, "type", m.Type, "err", err)
		}
	}
}

// shard maps a group to a worker (FNV-1a).
func shard(group string, n int) int {
	h := uint32(2166136261)
	for i := 0; i < len(group); i++ {
		h = (h ^ uint32(group[i])) * 16777619
	}
	return int(h % uint32(n))
}
