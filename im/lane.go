// Package im is the direct IM lane: after a command commits, its UI events
// go straight to the room's Tencent IM group, low latency and best effort.
// Tencent silently drops a group's messages above 40 per second, lowest
// priority first, while answering success; so the lane shapes each room's
// traffic itself: a per-group budget below that limit, priority classes,
// latest-wins coalescing of heat, rank and rocket fuel (at most once a
// second), merging of join/leave bursts when over budget, and a bounded
// queue per room that sheds Low before Normal and never High. Clients repair
// what they missed from GetRoomSnapshot: every message carries room_version.
// The lane never blocks a cell: Publish only queues.
package im

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"hyapp/room-service/cell"
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
	// QueueLimit bounds the Normal and Low messages queued per room (default 200).
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
	// too_large, send_queue_full, send_failed, dropped_by_im).
	Shed func(p room.Priority, reason string)
	// Merged counts events folded into a Batch message; Coalesced counts
	// values replaced by a newer one before they were sent.
	Merged    func(n int)
	Coalesced func()
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

var _ cell.EventSink = (*Lane)(nil)

// roomQueue is one room's shaped traffic. Guarded by Lane.mu.
type roomQueue struct {
	group     string
	limiter   *rate.Limiter
	high      []Message
	normal    []*item
	low       []*item
	coalesced map[string]*Message // latest value per coalescing type
	lastFlush map[string]time.Time
}

// item is a queued Normal or Low event, kept unencoded so bursts can merge.
type item struct {
	msg   Message
	event map[string]any // the envelope, for merging
	merge bool
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

// envelope is the JSON every message carries.
func envelope(typ room.EventType, roomID string, version, at int64, data any) map[string]any {
	return map[string]any{"type": string(typ), "room_id": roomID, "room_version": version, "at": at, "data": data}
}

// Publish implements cell.EventSink: it queues the IM events of committed
// commands and returns at once.
func (l *Lane) Publish(batch []cell.Committed) {
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range batch {
		for _, ev := range c.Events {
			lanes := ev.Lanes()
			if !lanes.IM {
				continue
			}
			env := envelope(ev.Type, c.RoomID, c.RoomVersion, c.At, ev.Data)
			if c.Seats != nil && (ev.Type == room.EventRoomMicChanged || ev.Type == room.EventRoomMicSeatLocked) {
				env["seats"] = seatView(c.Seats)
			}
			l.enqueueLocked(c.RoomID, l.cfg.GroupOf(c.RoomID), string(ev.Type), lanes, env, now)
			if r, ok := ev.Data.(Regional); ok {
				region, show := r.RegionalDisplay()
				if g := l.cfg.RegionalGroups[region]; g != "" && show {
					l.enqueueLocked("region:"+region, g, string(ev.Type), lanes, env, now)
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
	env := map[string]any{"type": eventType, "room_id": roomID, "robot": true, "at": time.Now().UnixMilli(), "data": payload}
	l.mu.Lock()
	l.enqueueLocked(roomID, l.cfg.GroupOf(roomID), eventType, room.Lanes{IM: true, Priority: room.PriorityLow, Merge: true}, env, time.Now())
	l.mu.Unlock()
	l.signal()
}

func (l *Lane) signal() {
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

func (l *Lane) enqueueLocked(key, group, typ string, lanes room.Lanes, env map[string]any, now time.Time) {
	q := l.rooms[key]
	if q == nil {
		q = &roomQueue{
			group: group, limiter: rate.NewLimiter(rate.Limit(l.cfg.Budget), max(1, int(l.cfg.Budget/4))),
			coalesced: make(map[string]*Message), lastFlush: make(map[string]time.Time),
		}
		l.rooms[key] = q
	}
	data, err := json.Marshal(env)
	if err != nil || len(data) > l.cfg.MaxBytes {
		l.shed(lanes.Priority, "too_large")
		return
	}
	msg := Message{GroupID: q.group, RoomID: key, Type: typ, Priority: lanes.Priority, Data: data, Random: rand.Uint32(), Queued: now}
	l.ready[key] = true
	switch {
	case lanes.Coalesce:
		if q.coalesced[typ] != nil && l.metrics.Coalesced != nil {
			l.metrics.Coalesced()
		}
		q.coalesced[typ] = &msg
	case lanes.Priority == room.PriorityHigh:
		q.high = append(q.high, msg) // never shed
	default:
		it := &item{msg: msg, event: env, merge: lanes.Merge}
		if lanes.Priority == room.PriorityNormal {
			q.normal = append(q.normal, it)
		} else {
			q.low = append(q.low, it)
		}
		for len(q.normal)+len(q.low) > l.cfg.QueueLimit {
			if len(q.low) > 0 {
				q.low = q.low[1:]
				l.shed(room.PriorityLow, "queue_full")
			} else {
				q.normal = q.normal[1:]
				l.shed(room.PriorityNormal, "queue_full")
			}
		}
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
			m.Released = now
			w := shard(m.GroupID, len(l.high))
			if m.Priority == room.PriorityHigh {
				select {
				case l.high[w] <- m:
					continue
				default:
					q.high = append([]Message{m}, q.high...)
				}
				break
			}
			select {
			case l.rest[w] <- m:
			default:
				l.shed(m.Priority, "send_queue_full")
			}
		}
		if len(q.high)+len(q.normal)+len(q.low)+len(q.coalesced) == 0 {
			// An idle room holds nothing, but only once its budget has
			// refilled and no coalesced value went out within the period (a
			// fresh queue starts with a full budget); until then it stays
			// ready, so it is looked at again.
			recent := q.limiter.TokensAt(now) < float64(q.limiter.Burst())
			for _, t := range q.lastFlush {
				recent = recent || now.Sub(t) < l.cfg.CoalesceEvery
			}
			if !recent {
				delete(l.ready, key)
				delete(l.rooms, key)
			}
		}
	}
}

// nextLocked picks the room's next message if a token is available: High
// first, then a due coalesced value, then Normal, then Low; when more
// mergeable events wait than one second of budget, they go as one Batch.
func (l *Lane) nextLocked(q *roomQueue, now time.Time) (Message, bool) {
	var dueType string
	for typ := range q.coalesced {
		if now.Sub(q.lastFlush[typ]) >= l.cfg.CoalesceEvery {
			dueType = typ
			break
		}
	}
	if len(q.high) == 0 && dueType == "" && len(q.normal) == 0 && len(q.low) == 0 {
		return Message{}, false
	}
	if !q.limiter.AllowN(now, 1) {
		return Message{}, false
	}
	switch {
	case len(q.high) > 0:
		// High is never shed; a burst of it goes as one Batch instead.
		m, n := l.mergeHigh(q.high)
		q.high = q.high[n:]
		return m, true
	case dueType != "":
		m := *q.coalesced[dueType]
		delete(q.coalesced, dueType)
		q.lastFlush[dueType] = now
		return m, true
	case len(q.normal) > 0:
		var m Message
		q.normal, m = l.takeLocked(q.normal, room.PriorityNormal)
		return m, true
	default:
		var m Message
		q.low, m = l.takeLocked(q.low, room.PriorityLow)
		return m, true
	}
}

// mergeHigh folds the queued High messages, oldest first, into one Batch
// that stays under MaxBytes, and reports how many it took.
func (l *Lane) mergeHigh(msgs []Message) (Message, int) {
	if len(msgs) == 1 {
		return msgs[0], 1
	}
	events := make([]json.RawMessage, 0, len(msgs))
	size := 200
	for _, m := range msgs {
		if size+len(m.Data)+1 > l.cfg.MaxBytes && len(events) > 0 {
			break
		}
		events = append(events, m.Data)
		size += len(m.Data) + 1
	}
	if len(events) == 1 {
		return msgs[0], 1
	}
	var last struct {
		RoomVersion int64 `json:"room_version"`
	}
	_ = json.Unmarshal(events[len(events)-1], &last)
	data, err := json.Marshal(map[string]any{"type": "Batch", "room_id": msgs[0].RoomID, "room_version": last.RoomVersion, "events": events})
	if err != nil {
		return msgs[0], 1
	}
	if l.metrics.Merged != nil {
		l.metrics.Merged(len(events))
	}
	m := msgs[0]
	m.Type, m.Data = "Batch", data
	return m, len(events)
}

// takeLocked pops the first item; when the queue is longer than a second of
// budget, consecutive mergeable items join it in one Batch message that
// stays under MaxBytes.
func (l *Lane) takeLocked(items []*item, p room.Priority) ([]*item, Message) {
	first := items[0]
	if !first.merge || float64(len(items)) <= l.cfg.Budget {
		return items[1:], first.msg
	}
	events := []any{first.event}
	size := len(first.msg.Data)
	n := 1
	for ; n < len(items) && items[n].merge && size+len(items[n].msg.Data)+1 < l.cfg.MaxBytes-200; n++ {
		events = append(events, items[n].event)
		size += len(items[n].msg.Data) + 1
	}
	if n == 1 {
		return items[1:], first.msg
	}
	last := items[n-1].event
	data, err := json.Marshal(map[string]any{"type": "Batch", "room_id": first.event["room_id"], "room_version": last["room_version"], "events": events})
	if err != nil {
		return items[1:], first.msg
	}
	if l.metrics.Merged != nil {
		l.metrics.Merged(n)
	}
	m := first.msg
	m.Type, m.Data, m.Priority = "Batch", data, p
	return items[n:], m
}

// worker sends messages; a failed send is dropped and counted (the client
// already retried what can be retried; clients repair from the snapshot).
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
			l.shed(m.Priority, "dropped_by_im")
		default:
			l.shed(m.Priority, "send_failed")
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
