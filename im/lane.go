// Package im is the direct IM lane: after a command commits, its UI events
// go straight to the room's Tencent IM group, low latency and best effort.
//
// Two Tencent limits bind, at two scales. Each group takes 40 messages per
// second, above which Tencent silently drops lower priorities while
// answering success; so each room has a budget below that (Config.Budget).
// And send_group_msg is limited for the whole app (Config.AppBudget, 200
// calls/s by default, every room on every node), above which calls fail
// with 60007/60011; so the lane treats the app budget as a scheduled
// resource (Config.Calls shares it with the other nodes). Every send
// carries everything its room has pending, in one message (a Batch when
// there is more than one event): its High events, the latest value of each
// piece of state (a newer mic row, profile or background supersedes the
// queued one; heat, rank and fuel are latest-wins, at most once a second),
// and its display events, which fold into counts (gifts into combos per
// sender and gift) when a room's queue is over its limit. Rooms take turns: each call goes to the room waiting
// longest, rooms with High pending first (a room waiting over a second
// counts as High, so none starves), so R busy rooms are each served about
// every R/B seconds for an app budget of B, and a busy room takes one turn
// like any other. A frequency error (60007, 60011, 10023) slows the whole
// lane down and the same message goes again, same Random, so Tencent drops
// a duplicate. A High message whose send fails otherwise is sent again
// until it goes through; it ends otherwise only when its room has closed or
// when Tencent refuses it for good (a *PermanentError), which no resend
// could change.
// Every event carries its room_version and its seq within that version;
// every message of a room carries lost_through, the newest version of an
// event the lane lost, so clients know when to repair from GetRoomSnapshot
// (docs/im-messages.md). The lane never blocks a cell: Publish only queues.
package im

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"maps"
	"math/rand/v2"
	"slices"
	"sort"
	"strconv"
	"strings"
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
	// Queued is when the lane received the oldest event the message carries
	// (just after its commit); Released is when the budgets let it go to a
	// sender.
	Queued, Released time.Time

	version int64 // the newest room_version the message carries
	// since is when the lane received the oldest event of the message's
	// own priority: the wait its latency counts (Metrics.Latency). A High
	// event takes what its room has queued with it, and the Normal events
	// that waited for a send are theirs, not its.
	since    time.Time
	traces   []string  // traceparents of its traced events, the oldest first (see trace.go)
	attempts int       // failed sends so far
	due      time.Time // not sent again before, after a failed send
	closed   bool      // released after its room's RoomClosed
	regional bool      // to a region's broadcast group
	// roomClosed, set as the message is sent, reports whether the lane
	// knows its room closed by now.
	roomClosed func() bool
}

// ErrDropped is returned by a Sender when Tencent accepted the call but
// dropped the message under its per-group frequency control.
var ErrDropped = errors.New("dropped by the IM service")

// ErrRateLimited is wrapped by a Sender's error when Tencent refused the
// call for frequency (60007, 60011, 10023 and the like): the call was not
// made, so the same message goes again, and the lane slows down.
var ErrRateLimited = errors.New("refused for frequency by the IM service")

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
	// AppBudget is the send_group_msg calls per second Tencent allows the
	// whole app (default 200). The lane spends at most BudgetShare of it.
	AppBudget float64
	// Calls shares the app budget with the other nodes (im/redisbudget);
	// nil: this process has it to itself. While Calls cannot be asked, the
	// lane spends its node's share of the app budget on its own: 1/Nodes()
	// of it in whole calls a second (see fallbackInterval), or a quarter
	// while Nodes is nil or knows no count.
	Calls Budget
	// Nodes is how many nodes share Calls, as last counted while it could
	// be asked (0: not known). With it, a fleet that loses the shared
	// budget altogether still keeps to the app budget.
	Nodes func() int
	// QueueLimit bounds the Normal and Low events queued per room (default
	// 200). Over it, the oldest display event (join, leave, gift, robot)
	// folds into a count, and any other is lost (lost_through tells
	// clients); High is never dropped.
	QueueLimit int
	// CoalesceEvery is the least time between two coalesced values of one type (default 1s).
	CoalesceEvery time.Duration
	// MaxBytes is the largest message Data (default 8000, under Tencent's 8 KB).
	MaxBytes int
	// Workers is how many sends each of the two lanes, High and the rest,
	// has in flight at most (default 32: with Tencent answering in 30 ms,
	// about 1,000 calls a second a lane; each group's messages go through
	// one worker of each lane, so they keep their order within a class, and
	// a High message never waits for a Normal call); SendTimeout bounds one
	// send (default 5s).
	Workers     int
	SendTimeout time.Duration
	// GroupOf maps a room to its group id (default GroupID).
	GroupOf func(roomID string) string
	// RegionalGroups maps a region to its broadcast group.
	RegionalGroups map[string]string
	// Tick is the dispatcher's period (default 10ms).
	Tick time.Duration
}

func (c Config) withDefaults() Config {
	if c.Budget <= 0 {
		c.Budget = 20
	}
	if c.AppBudget <= 0 {
		c.AppBudget = 200
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
		c.Workers = 32
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
	// Sent counts messages sent, by priority; Latency observes queued-to-sent
	// of the oldest event of a message's own priority it carries.
	Sent    func(p room.Priority)
	Latency func(ctx context.Context, p room.Priority, d time.Duration)
	// Shed counts events dropped, by priority and reason (queue_full,
	// too_large, send_queue_full, send_failed, dropped_by_im, the reason of
	// a send the IM service refused for good, such as tencent_80001, and for
	// High only room_closed: a failed send after the room's RoomClosed).
	Shed func(p room.Priority, reason string)
	// Merged counts events that went without a message of their own: in a
	// Batch, or folded into a count. Coalesced counts values replaced by a
	// newer one before they were sent (heat, rank, fuel, mic rows, profile,
	// background, chat switch).
	Merged    func(n int)
	Coalesced func()
	// Retried counts High messages queued again after a failed send.
	Retried func()
	// RateLimited counts calls Tencent refused for frequency (sent again).
	RateLimited func()
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
	// pace is the lane's own spending of the app budget, slowed down by
	// frequency errors (slow) and recovering a second after the last one.
	pace        gcra
	slow        float64 // 1 = full pace; halved by each frequency error
	slowAt      time.Time
	pausedUntil time.Time

	// sendPace spaces the calls again as workers make them: a message
	// released on time can wait behind a slow call of its worker, and
	// several of those going at once would arrive at Tencent closer
	// together than the budget allows.
	sendPace *rate.Limiter

	// roster is the turn order while the lane is crowded; tidied is when
	// idle rooms were last forgotten.
	roster roster
	tidied time.Time

	// Dispatcher only: the local spending while Calls is unreachable, at
	// interval (the app budget's spacing) times the nodes sharing it.
	fallback   gcra
	interval   time.Duration
	callsDown  bool
	candidates []candidate
	free       []int // places left in the workers' queues (freeLocked)

	// The workers' queues, High and the rest: a group always uses the same
	// worker of each, so its messages keep their order within a class.
	high, rest []chan Message
	wg         sync.WaitGroup
	stop       context.CancelFunc
}

// roomQueue is one room's shaped traffic. Guarded by Lane.mu.
type roomQueue struct {
	key   string // the room id, or "region:<region>"
	group string
	// worker sends the group's messages (shard), so they keep their order
	// within a class.
	worker int
	// regional: a region's broadcast group, whose members keep no room
	// state, so its messages carry no lost_through.
	regional bool
	limiter  *rate.Limiter
	// retry holds messages to send again exactly as they were (same Data,
	// same Random), each not before its due time. While it holds a High
	// message the room releases no new High events: they wait in high,
	// where a newer state supersedes an older one, so an outage leaves one
	// message to send again, backing off, not one for every event.
	retry     []Message
	high      []*item
	normal    []*item
	low       []*item
	coalesced map[string]*item // latest value per coalescing type
	lastFlush map[string]time.Time
	// folded counts display events folded into counts, by type, and combos
	// the gifts folded by sender and gift, since foldedAt; they go with the
	// room's next message.
	folded   map[string]int
	combos   map[comboKey]*combo
	foldedAt time.Time
	// lost is the newest room_version of an event the lane lost (lost_through);
	// lostPending says no message carrying it was released yet, lostAt when
	// it was raised.
	lost        int64
	lostPending bool
	lostAt      time.Time
	// closed: the room's RoomClosed was queued; its group is going away.
	closed bool
	// out counts, by lane (High, and the rest), the room's messages with a
	// worker that have not come back. A room has at most maxOut out on
	// each: its budget is spent as messages are released, and a slow call
	// would otherwise hold its later messages queued behind it on the
	// worker, to go back to back when it returns, over the group's budget
	// (and Tencent's 40/s). Counted by lane, so that a High event never
	// waits for Normal messages of its room queued behind other rooms' on
	// the slower lane.
	out [2]int
}

// maxCombos bounds the gift combos a room folds until its next message;
// further gifts fold into the plain count, so the message stays small.
const maxCombos = 16

// maxFoldedTypes bounds the types a room folds display events of until its
// next message, as far as robot events add them (they name their own type,
// the room's own events are of a few): a robot event of a further type is
// lost, so the counts stay small and the message within MaxBytes.
const maxFoldedTypes = 16

// comboKey names a combo: gifts of one sender and one gift.
type comboKey struct {
	sender int64
	gift   string
}

// combo is the gifts of one sender and one gift folded together: shown as
// one "sent gift_name x count".
type combo struct {
	SenderUserID int64  `json:"sender_user_id"`
	GiftID       string `json:"gift_id"`
	GiftName     string `json:"gift_name"`
	Count        int64  `json:"count"` // pieces per receiver, summed
	Cost         int64  `json:"cost"`  // value, summed
	Gifts        int    `json:"gifts"` // gift events folded
}

// item is a queued event, kept unencoded so it can join a Batch and the
// room's lost_through can be added when it is released.
type item struct {
	typ      string
	priority room.Priority
	env      any    // the envelope: *envelope, or *robotEnvelope
	data     []byte // env encoded, once the item is taken (see encode)
	version  int64
	seq      int
	queued   time.Time
	merge    bool
	// kind names the state the event carries whole (seats, profile,
	// background, chat): a newer queued event of the same kind supersedes it.
	kind string
	// trace is the traceparent of the command that caused the event, "" when
	// it was not traced.
	trace string
}

// New starts a lane that sends through s.
func New(cfg Config, s Sender, m Metrics, log *slog.Logger) *Lane {
	cfg = cfg.withDefaults()
	ctx, cancel := context.WithCancel(context.Background())
	interval, tolerance := Pacing(cfg.AppBudget)
	l := &Lane{
		cfg: cfg, send: s, metrics: m, log: log, stop: cancel,
		rooms: make(map[string]*roomQueue), ready: make(map[string]bool), roster: roster{fresh: make(map[string]bool)},
		wake: make(chan struct{}, 1), high: make([]chan Message, cfg.Workers), rest: make([]chan Message, cfg.Workers),
		pace: gcra{interval: interval, tolerance: tolerance}, slow: 1, interval: interval,
		fallback: gcra{interval: fallbackInterval(interval, tolerance, unknownNodes), tolerance: tolerance},
		sendPace: rate.NewLimiter(rate.Every(interval), max(1, int(tolerance/interval))),
	}
	for i := range l.high {
		l.high[i], l.rest[i] = make(chan Message, 256), make(chan Message, restQueue)
		l.wg.Add(2)
		go l.worker(ctx, l.high[i])
		go l.worker(ctx, l.rest[i])
	}
	l.wg.Add(1)
	go l.dispatch(ctx)
	return l
}

// restQueue is how many Normal and Low messages wait for a worker at most:
// a few, so that a message is made just before a worker can send it. While
// the calls fall behind, a room's display events wait in its own queue
// (see restFull), where later ones join them in one message, instead of
// each going in a message of its own made long before its call.
const restQueue = 2

// unknownNodes is the fleet's size a lane assumes while the shared budget
// cannot be asked and Config.Nodes knows no count.
const unknownNodes = 4

// fallbackInterval is the spacing of a lane's own spending while the shared
// budget (spaced by interval, tolerance ahead) cannot be asked and nodes
// lanes spend alone. They lose it together, so their spending starts in
// step: each lane's share is counted in whole calls per second, the most
// the shared budget grants in one second split between them (at least one
// each), and its spacing lets no second hold more than that, tolerance
// included, and never spends faster than an even 1/nodes of the budget.
// An even 1/nodes alone would give each lane its share plus a call in some
// seconds, all lanes in the same ones.
func fallbackInterval(interval, tolerance time.Duration, nodes int) time.Duration {
	nodes = max(1, nodes)
	perSecond := int(time.Second/interval) + int(tolerance/interval) + 1 // the shared budget's bound (see Pacing)
	share := time.Duration(max(1, perSecond/nodes))
	return max(interval*time.Duration(nodes), (time.Second+tolerance+share-1)/share)
}

// Close stops the lane; queued messages are dropped (the lane is best effort).
func (l *Lane) Close() {
	l.stop()
	l.wg.Wait()
}

// envelope is the JSON every event carries: (room_version, seq) names it;
// a seat change also carries the whole mic row. The fields are in the order
// of their names, the order encoding/json writes a map's keys in, which is
// how the envelope was once encoded: the bytes on the wire are the same.
type envelope struct {
	At          int64  `json:"at"`
	Data        any    `json:"data"`
	RoomID      string `json:"room_id"`
	RoomVersion int64  `json:"room_version"`
	Seats       []seat `json:"seats,omitzero"`
	Seq         int    `json:"seq"`
	Type        string `json:"type"`
}

// robotEnvelope is the envelope of a robot display event (PublishRobot):
// no room_version or seq, and robot: true. Its fields are in name order too.
type robotEnvelope struct {
	At     int64           `json:"at"`
	Data   json.RawMessage `json:"data"`
	Robot  bool            `json:"robot"`
	RoomID string          `json:"room_id"`
	Type   string          `json:"type"`
}

// roomID is the room of the item's event.
func (it *item) roomID() string {
	switch e := it.env.(type) {
	case *envelope:
		return e.RoomID
	case *robotEnvelope:
		return e.RoomID
	}
	return ""
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
			env := &envelope{Type: string(ev.Type), RoomID: c.RoomID, RoomVersion: c.RoomVersion, Seq: seq, At: c.At, Data: ev.Data}
			micRow := c.Seats != nil && (ev.Type == room.EventRoomMicChanged || ev.Type == room.EventRoomMicSeatLocked)
			if micRow {
				env.Seats = seatView(c.Seats)
			}
			it := l.newItem(string(ev.Type), lanes, env, c.RoomVersion, now)
			it.seq, it.kind, it.trace = seq, stateKind(ev.Type, micRow), c.Trace
			q := l.queueLocked(c.RoomID, l.cfg.GroupOf(c.RoomID), false)
			q.closed = q.closed || ev.Type == room.EventRoomClosed
			l.enqueueLocked(c.RoomID, q, it, lanes.Coalesce)
			if r, ok := ev.Data.(Regional); ok {
				region, show := r.RegionalDisplay()
				if g := l.cfg.RegionalGroups[region]; g != "" && show {
					key := "region:" + region
					copied := *it
					copied.kind = ""
					l.enqueueLocked(key, l.queueLocked(key, g, true), &copied, lanes.Coalesce)
				}
			}
		}
	}
	l.signal()
}

// stateKind names the room state an event carries whole, so that a newer
// event of the kind supersedes a queued older one (docs/im-messages.md,
// the kinds table); "" for events that must each be delivered. Heat, rank
// and fuel are coalesced by type instead.
func stateKind(t room.EventType, micRow bool) string {
	switch t {
	case room.EventRoomMicChanged, room.EventRoomMicSeatLocked:
		if micRow {
			return "seats"
		}
	case room.EventRoomProfileUpdated:
		return "profile"
	case room.EventRoomBackgroundChanged:
		return "background"
	case room.EventRoomChatEnabledChanged:
		return "chat"
	case room.EventRoomMicApprovalChanged:
		return "mic_approval"
	case room.EventRoomHostChanged:
		return "host"
	}
	return ""
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
	env := &robotEnvelope{Type: eventType, RoomID: roomID, Robot: true, At: now.UnixMilli(), Data: payload}
	l.mu.Lock()
	it := l.newItem(eventType, room.Lanes{IM: true, Priority: room.PriorityLow, Merge: true}, env, 0, now)
	l.enqueueLocked(roomID, l.queueLocked(roomID, l.cfg.GroupOf(roomID), false), it, false)
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

// newItem queues an event unencoded: most events of a busy room are
// superseded, coalesced, folded or shed before any message could carry them,
// and those are never encoded (see encode).
func (l *Lane) newItem(typ string, lanes room.Lanes, env any, version int64, now time.Time) *item {
	return &item{typ: typ, priority: lanes.Priority, env: env, version: version, queued: now, merge: lanes.Merge}
}

// encode encodes the item as a message is made, and reports whether it can
// be sent at all: an event that cannot fit in MaxBytes alone is counted and
// dropped. With MaxSeats = 20 the largest High event, a mic row, is far below
// the default MaxBytes.
func (l *Lane) encode(it *item) bool {
	if it.data != nil {
		return true
	}
	data, err := json.Marshal(it.env)
	if err != nil || len(data)+lostThroughSize+batchOverhead > l.cfg.MaxBytes {
		l.shed(it.priority, "too_large")
		l.log.Error("im event not sendable", "type", it.typ, "bytes", len(data), "err", err)
		return false
	}
	it.data = data
	return true
}

// queueLocked returns the queue of key, made on first use.
func (l *Lane) queueLocked(key, group string, regional bool) *roomQueue {
	q := l.rooms[key]
	if q == nil {
		q = &roomQueue{
			key: key, group: group, worker: shard(group, len(l.high)), regional: regional, limiter: groupLimiter(l.cfg.Budget),
			coalesced: make(map[string]*item), lastFlush: make(map[string]time.Time), folded: make(map[string]int),
			combos: make(map[comboKey]*combo),
		}
		l.rooms[key] = q
	}
	return q
}

// groupLimiter shapes one group to budget messages per second. A group's
// limiter lets its burst go at once and then its rate, so a second can hold
// burst+rate messages: that sum is the budget (a budget of 40 would
// otherwise put more than Tencent's 40/s into a second). The burst is a
// tenth of the budget, enough for a quiet room's few quick events to go
// without waiting; a budget under 2 leaves no rate beside a burst of one,
// so it is spread to half a message a second.
func groupLimiter(budget float64) *rate.Limiter {
	burst := max(1, int(budget/10))
	return rate.NewLimiter(rate.Limit(max(budget-float64(burst), budget/2)), burst)
}

func (l *Lane) enqueueLocked(key string, q *roomQueue, it *item, coalesce bool) {
	l.ready[key] = true
	if !queued(q) || it.priority == room.PriorityHigh {
		l.roster.fresh[key] = true
	}
	switch {
	case coalesce:
		if old := q.coalesced[it.typ]; old != nil {
			it.queued = old.queued
			l.coalesced()
		}
		q.coalesced[it.typ] = it
	case it.priority == room.PriorityHigh:
		q.high = l.supersede(q.high, it)
		q.high = append(q.high, it)
	default:
		q.normal, q.low = l.supersede(q.normal, it), l.supersede(q.low, it)
		if it.priority == room.PriorityNormal {
			q.normal = append(q.normal, it)
		} else {
			q.low = append(q.low, it)
		}
		for len(q.normal)+len(q.low) > l.cfg.QueueLimit {
			l.overflowLocked(q)
		}
	}
}

// supersede removes the queued event of newer's kind (at most one is ever
// queued): newer carries a newer version of the same state. The state has
// been waiting since the older one was queued, and newer keeps that time,
// so a room whose state keeps changing keeps its place in the turn order.
func (l *Lane) supersede(items []*item, newer *item) []*item {
	if newer.kind == "" {
		return items
	}
	for i, it := range items {
		if it.kind == newer.kind {
			newer.queued = it.queued
			l.coalesced()
			return slices.Delete(items, i, i+1)
		}
	}
	return items
}

func (l *Lane) coalesced() {
	if l.metrics.Coalesced != nil {
		l.metrics.Coalesced()
	}
}

// overflowLocked makes room in a queue over QueueLimit: the oldest Low
// event, or else the oldest Normal one, folds into its type's count (a gift
// into its sender's combo of that gift) when it is a display event
// (foldable) whose state, if any (the online count), a newer queued event
// carries, and a robot event's type is one of the first maxFoldedTypes
// folded; otherwise it is lost and raises lost_through.
func (l *Lane) overflowLocked(q *roomQueue) {
	var it *item
	if len(q.low) > 0 {
		it, q.low = q.low[0], q.low[1:]
	} else {
		it, q.normal = q.normal[0], q.normal[1:]
	}
	if foldable(it) && (it.version == 0 || !carriesOnline(it) || l.newerOnlineLocked(q, it.version)) {
		if len(q.folded)+len(q.combos) == 0 {
			q.foldedAt = it.queued
		}
		var g *room.RoomGiftSentEvent
		gift := false
		if e, ok := it.env.(*envelope); ok {
			g, gift = e.Data.(*room.RoomGiftSentEvent)
		}
		k := comboKey{}
		if gift {
			k = comboKey{g.SenderUserID, g.GiftID}
		}
		_, counted := q.folded[it.typ]
		_, robot := it.env.(*robotEnvelope)
		switch c := q.combos[k]; {
		case gift && (c != nil || len(q.combos) < maxCombos):
			if c == nil {
				c = &combo{SenderUserID: g.SenderUserID, GiftID: g.GiftID, GiftName: g.GiftName}
				q.combos[k] = c
			}
			c.Count, c.Cost, c.Gifts = c.Count+int64(g.Count), c.Cost+g.Cost, c.Gifts+1
		case counted || !robot || len(q.folded) < maxFoldedTypes:
			q.folded[it.typ]++
		default:
			l.lostLocked(q, it.priority, "queue_full", it.version)
			return
		}
		if l.metrics.Merged != nil {
			l.metrics.Merged(1)
		}
		return
	}
	l.lostLocked(q, it.priority, "queue_full", it.version)
}

// foldable reports whether an event may be folded into a count: a display
// event, mergeable (joins, leaves, robots) or a gift, which carries no room
// state (its heat, rank and charm travel in their own latest-wins events).
func foldable(it *item) bool {
	return it.merge || it.typ == string(room.EventRoomGiftSent)
}

// carriesOnline reports whether an event carries the online count.
func carriesOnline(it *item) bool {
	return it.typ == string(room.EventRoomUserJoined) || it.typ == string(room.EventRoomUserLeft)
}

// newerOnlineLocked reports whether a queued join or leave newer than
// version carries the room's online count.
func (l *Lane) newerOnlineLocked(q *roomQueue, version int64) bool {
	for _, list := range [][]*item{q.normal, q.low} {
		for _, it := range list {
			if it.version > version && carriesOnline(it) {
				return true
			}
		}
	}
	return false
}

// lostLocked counts an event (or message) the room will not see and raises
// the room's lost_through, so its next message tells clients to repair.
func (l *Lane) lostLocked(q *roomQueue, p room.Priority, reason string, version int64) {
	l.shed(p, reason)
	// A closed room's group is going away: a notice would reach nobody, and
	// a sender that recreates missing groups would bring it back.
	if q.regional || q.closed {
		return
	}
	if version > q.lost {
		q.lost, q.lostAt = version, time.Now()
	}
	// Announced again even when nothing newer was lost: the lost message
	// may have been the one telling it.
	q.lostPending = q.lost > 0
}

// noticeDueLocked reports whether a room must tell its lost_through
// although it has no event to send: its last message was lost, so no later
// message would tell clients (for lostKeep at most).
func noticeDueLocked(q *roomQueue, now time.Time) bool {
	return q.lostPending && now.Sub(q.lostAt) < lostKeep
}

func (l *Lane) shed(p room.Priority, reason string) {
	if l.metrics.Shed != nil {
		l.metrics.Shed(p, reason)
	}
}

// dispatch hands messages to the workers as the budgets allow, every tick
// or when woken.
func (l *Lane) dispatch(ctx context.Context) {
	defer l.wg.Done()
	t := time.NewTicker(l.cfg.Tick)
	defer t.Stop()
	var last time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-l.wake:
			// A wake sends fresh events at once, but at most one round
			// per fifth of a tick: a busy node's commits wake it often,
			// and a round may look at every ready room.
			if time.Since(last) < l.cfg.Tick/5 || l.crowded() {
				continue
			}
			last = time.Now()
			l.round(ctx, last, false)
		case <-t.C:
			last = time.Now()
			l.round(ctx, last, true)
		}
	}
}

// crowded says so many rooms are ready that a round must wait for the
// tick: a round looks at every ready room, and with this many the app
// budget, not the wake, decides when they send.
func (l *Lane) crowded() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.crowdedLocked()
}

func (l *Lane) crowdedLocked() bool { return len(l.ready) > crowdedRooms }

// Scheduling constants.
const (
	// crowdedRooms: with more rooms ready than this, rounds run on the
	// tick only (see Lane.crowded) and take rooms from the roster.
	crowdedRooms = 128
	// rosterEvery, rosterRooms, rosterMax: how long a crowded lane's turn
	// order is kept before it is made again from every ready room (see
	// roster): rosterEvery for each rosterRooms rooms it holds, at most
	// rosterMax. Making it looks at every waiting room, so a long order is
	// made less often and costs about the same CPU per second as a short
	// one: 8,000 rooms waiting for the app budget made every 50 ms took a
	// seventh of a busy node's CPU.
	rosterEvery = 50 * time.Millisecond
	rosterRooms = 500
	rosterMax   = time.Second
	// tidyEvery: how often idle rooms are forgotten.
	tidyEvery = 100 * time.Millisecond
	// promoteAfter: a room waiting this long is served with the rooms that
	// have High pending, so no room starves behind them.
	promoteAfter = time.Second
	// callsTimeout bounds one request to the shared budget.
	callsTimeout = 100 * time.Millisecond
	// rateLimitPause is how long the lane sends nothing after a frequency
	// error; its pace falls by slowFactor (down to minSlow) and recovers
	// fully within slowRecovery, starting a second after the last error.
	rateLimitPause = 100 * time.Millisecond
	slowFactor     = 0.7
	minSlow        = 1.0 / 32
	slowRecovery   = 2 * time.Second
	// lostKeep is how long an idle room's queue is kept only to carry its
	// lost_through on a next message.
	lostKeep = time.Minute
)

// round is one turn of the dispatcher: it counts the rooms that could send
// now, asks the budgets for that many calls (without holding the lane's
// lock over a request to the shared budget, so Publish never waits for
// it), and gives the calls to the rooms waiting longest, rooms with High
// pending first, one message each. While the lane's own pace has no call
// to give, it looks at no room: with thousands of rooms waiting for the
// app budget, the rounds cost what the budget lets go, not what is queued.
// Idle rooms are forgotten on ticks (tidy), not on every wake.
func (l *Lane) round(ctx context.Context, now time.Time, tidy bool) {
	l.mu.Lock()
	l.recoverLocked(now)
	want := 0
	if avail := l.pace.available(now); avail > 0 && !now.Before(l.pausedUntil) {
		// Rooms count as far as their messages have a place: a room with
		// only Normal or Low to send needs one in its worker's queue, and
		// rooms sharing a worker share its places (a call taken for a
		// message that cannot be made is lost to every node).
		if l.crowdedLocked() {
			cands := l.rosterLocked(now, avail)
			free := l.freeLocked()
			for _, c := range cands {
				if l.placeLocked(c.q, now, free) {
					if want++; want == avail {
						break
					}
				}
			}
		} else {
			free := l.freeLocked()
			for key := range l.ready {
				if l.placeLocked(l.rooms[key], now, free) {
					if want++; want == avail {
						break
					}
				}
			}
		}
	}
	l.mu.Unlock()

	granted := want
	if want > 0 && l.cfg.Calls != nil {
		granted = l.takeShared(ctx, now, want)
	}

	l.mu.Lock()
	defer l.mu.Unlock()
	if granted > 0 {
		l.pace.take(now, granted)
		l.releaseLocked(now, granted)
	}
	if tidy && now.Sub(l.tidied) >= tidyEvery {
		l.tidied = now
		l.tidyLocked(now)
	}
}

// takeShared asks the shared budget for n calls; while it cannot be asked,
// the lane spends from its fallback share.
func (l *Lane) takeShared(ctx context.Context, now time.Time, n int) int {
	cctx, cancel := context.WithTimeout(ctx, callsTimeout)
	got, err := l.cfg.Calls.Take(cctx, n)
	cancel()
	if err == nil {
		if l.callsDown {
			l.callsDown = false
			l.log.Info("im app budget shared again")
		}
		return got
	}
	if ctx.Err() != nil {
		return 0
	}
	if !l.callsDown {
		l.callsDown = true
		nodes := l.nodes()
		l.fallback.interval = fallbackInterval(l.interval, l.fallback.tolerance, nodes)
		l.log.Warn("im app budget cannot be shared; spending this node's share of it alone", "nodes", nodes, "err", err)
	}
	got = min(n, l.fallback.available(now))
	l.fallback.take(now, got)
	return got
}

// nodes is how many nodes the lane takes to share the app budget while
// Calls cannot be asked.
func (l *Lane) nodes() int {
	if l.cfg.Nodes != nil {
		if n := l.cfg.Nodes(); n > 0 {
			return n
		}
	}
	return unknownNodes
}

// candidate is a room that can send now, with its place in the turn order.
type candidate struct {
	key   string
	q     *roomQueue
	tier  int // 0: High pending (or waiting long), 1: the rest
	since time.Time
	at    int // its index in the roster's order, or -1
}

func (c *candidate) before(o *candidate) bool {
	if c.tier != o.tier {
		return c.tier < o.tier
	}
	return c.since.Before(o.since)
}

// first moves the n candidates to serve first to the front, in turn order.
// A round usually has a few calls for many rooms: picking them costs n
// passes, not a sort of every room.
func first(cands []candidate, n int) {
	if n > 16 {
		sort.Slice(cands, func(i, j int) bool { return cands[i].before(&cands[j]) })
		return
	}
	for i := 0; i < n && i < len(cands); i++ {
		best := i
		for j := i + 1; j < len(cands); j++ {
			if cands[j].before(&cands[best]) {
				best = j
			}
		}
		cands[i], cands[best] = cands[best], cands[i]
	}
}

// releaseLocked gives n calls to the rooms that can send now, in turn
// order, one message each; a room that makes no message (its worker's
// queue filled this round) passes its call to the next.
func (l *Lane) releaseLocked(now time.Time, n int) {
	crowded := l.crowdedLocked()
	var cands []candidate
	if crowded {
		cands = l.rosterLocked(now, n)
	} else {
		l.roster.reset()
		cands = l.candidates[:0]
		for key := range l.ready {
			if q := l.rooms[key]; l.eligibleLocked(q, now) {
				cands = append(cands, l.candidateLocked(key, q, now, -1))
			}
		}
	}
	first(cands, n)
	ordered := min(n, len(cands))
	for i, made := 0, 0; i < len(cands) && made < n; i++ {
		if i == ordered { // rooms passed over: order the next ones
			first(cands[i:], n-made)
			ordered = min(i+n-made, len(cands))
		}
		c := cands[i]
		q := c.q
		full := l.restFull(q)
		if full {
			if high, _ := l.sendableLocked(q, now); !high {
				// Its worker's queue filled with the messages of rooms
				// before it this round: it keeps its turn, and the call
				// goes to the next room.
				continue
			}
		}
		if crowded {
			l.roster.served(c)
		}
		// No message without High while its worker's queue is full, or
		// while its group's budget is down to the message kept for High,
		// unless its message to send again has waited too long for it.
		m, ok := l.nextLocked(q, now, full || q.limiter.TokensAt(now) < restTokens(q) && !restOverdue(q, now))
		if !ok {
			continue
		}
		made++
		q.limiter.AllowN(now, 1)
		m.RoomID, m.GroupID, m.Released, m.closed, m.regional = c.key, q.group, now, q.closed, q.regional
		w := q.worker
		if m.Priority == room.PriorityHigh {
			select {
			case l.high[w] <- m:
				q.out[outHigh]++
			default:
				q.retry = append([]Message{m}, q.retry...)
				l.roster.fresh[c.key] = true
			}
			continue
		}
		select {
		case l.rest[w] <- m:
			q.out[outRest]++
		default: // not while only this goroutine fills it: see restFull
			l.lostLocked(q, m.Priority, "send_queue_full", m.version)
		}
	}
	clear(cands)
	l.candidates = cands[:0]
}

// candidateLocked places a room that can send now in the turn order.
func (l *Lane) candidateLocked(key string, q *roomQueue, now time.Time, at int) candidate {
	high, since := l.waitingLocked(q, now)
	tier := 1
	if high || now.Sub(since) >= promoteAfter {
		tier = 0
	}
	return candidate{key: key, q: q, tier: tier, since: since, at: at}
}

// roster is the turn order of a crowded lane. A round has a few calls for
// thousands of waiting rooms; ordering every ready room each round cost a
// busy node a sixth of its CPU. So the order is made from every ready room
// once per keepFor of its length, and each round takes the next rooms from it, each
// room at most once per order, beside the fresh rooms: those that had
// nothing queued when the order was made, or got High since. A room that
// cannot send when its turn comes (its group's budget spent, its queue
// forgotten) waits for the next order.
type roster struct {
	order []candidate
	next  int // order[:next] is served or passed over
	built time.Time
	fresh map[string]bool
	free  []int // places left in the workers' queues, as the order is taken
}

// reset drops the order: the next crowded round makes a new one.
func (r *roster) reset() {
	if len(r.order) > 0 {
		clear(r.order)
		r.order, r.next = r.order[:0], 0
	}
	if len(r.fresh) > 0 {
		clear(r.fresh)
	}
}

// served takes a room out of the roster once a round gave it a call.
func (r *roster) served(c candidate) {
	if c.at >= 0 {
		r.order[c.at].q = nil
		for r.next < len(r.order) && r.order[r.next].q == nil {
			r.next++
		}
		return
	}
	delete(r.fresh, c.key)
}

// rosterLocked returns the candidates for n calls: the next n rooms of
// the order that can send now, and every fresh room that can (first picks
// among them). The order is made again once it is used up or older than
// keepFor its length. While a worker's queue is full its rooms cannot send
// and are passed over, so an order is used up at once and made again the
// next round: a place that frees goes to the room waiting longest.
func (l *Lane) rosterLocked(now time.Time, n int) []candidate {
	r := &l.roster
	if r.next >= len(r.order) || now.Sub(r.built) >= keepFor(len(r.order)) {
		r.reset()
		for key := range l.ready {
			if q := l.rooms[key]; l.eligibleLocked(q, now) {
				r.order = append(r.order, l.candidateLocked(key, q, now, len(r.order)))
			}
		}
		sort.Slice(r.order, func(i, j int) bool { return r.order[i].before(&r.order[j]) })
		for i := range r.order {
			r.order[i].at = i
		}
		r.built = now
	}
	cands := l.candidates[:0]
	for key := range r.fresh {
		q := l.rooms[key]
		switch {
		case q == nil:
			delete(r.fresh, key)
		case l.eligibleLocked(q, now):
			cands = append(cands, l.candidateLocked(key, q, now, -1))
		}
	}
	// The next n rooms of the order whose messages have a place (see
	// placeLocked): a room whose worker's places went to rooms before it
	// keeps its turn for a later round.
	r.free = append(r.free[:0], l.freeLocked()...)
	for i, got := r.next, 0; i < len(r.order) && got < n; i++ {
		c := r.order[i]
		switch {
		case c.q == nil || r.fresh[c.key]:
		case l.rooms[c.key] != c.q || !l.eligibleLocked(c.q, now):
			r.served(c)
		case l.placeLocked(c.q, now, r.free):
			cands = append(cands, l.candidateLocked(c.key, c.q, now, i))
			got++
		}
	}
	l.candidates = cands
	return cands
}

// keepFor is how long a turn order of n rooms is kept.
func keepFor(n int) time.Duration {
	return min(rosterMax, rosterEvery*time.Duration(max(1, n/rosterRooms)))
}

// queued reports whether a room has anything waiting to be sent.
func queued(q *roomQueue) bool {
	return len(q.retry)+len(q.high)+len(q.normal)+len(q.low)+len(q.coalesced)+len(q.folded)+len(q.combos) > 0
}

// tidyLocked forgets idle rooms, but only once their budget has refilled
// and no coalesced value went out within the period (a fresh queue starts
// with a full budget), and no loss waits to be told; until then a room
// stays ready, so it is looked at again.
func (l *Lane) tidyLocked(now time.Time) {
	for key := range l.ready {
		q := l.rooms[key]
		if queued(q) || q.out[outHigh]+q.out[outRest] > 0 {
			continue
		}
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

// dueTypeLocked returns a coalesced type whose value may go now, or "".
func (l *Lane) dueTypeLocked(q *roomQueue, now time.Time) string {
	for typ := range q.coalesced {
		if now.Sub(q.lastFlush[typ]) >= l.cfg.CoalesceEvery {
			return typ
		}
	}
	return ""
}

// The two lanes a room may have messages out on (roomQueue.out).
const (
	outHigh = iota
	outRest
)

// maxOut is how many messages a room may have out on one lane. More than
// one, so that a room's next message need not wait for the last to come
// back: a busy room's High events would wait for two trips through the
// workers; few, so that a slow call holds few of them to go back to back
// (with the group's budget of 20 a second, at most 24 in one).
const maxOut = 4

// back counts a message out no more.
func (q *roomQueue) back(m Message) {
	if l := outOf(m.Priority); q.out[l] > 0 {
		q.out[l]--
	}
}

// outOf is the lane a message goes out on.
func outOf(p room.Priority) int {
	if p == room.PriorityHigh {
		return outHigh
	}
	return outRest
}

// eligibleLocked reports whether a room has something to send now on a
// lane where it has fewer than maxOut messages out and its worker has room
// (see restFull), and its group's budget allows a message of that lane
// (see restTokens).
func (l *Lane) eligibleLocked(q *roomQueue, now time.Time) bool {
	high, rest := l.sendableLocked(q, now)
	return high || rest
}

// sendableLocked reports whether a room can send now on the High lane,
// and on the other (see eligibleLocked).
func (l *Lane) sendableLocked(q *roomQueue, now time.Time) (high, rest bool) {
	high, rest = l.pendingLocked(q, now)
	tokens := q.limiter.TokensAt(now)
	return high && q.out[outHigh] < maxOut && tokens >= 1,
		rest && q.out[outRest] < maxOut && !l.restFull(q) && tokens >= restTokens(q)
}

// freeLocked returns the places left in each worker's queue of Normal and
// Low messages, for placeLocked to count down through one round.
func (l *Lane) freeLocked() []int {
	l.free = l.free[:0]
	for _, ch := range l.rest {
		l.free = append(l.free, cap(ch)-len(ch))
	}
	return l.free
}

// placeLocked reports whether a room can send now and its message has a
// place: a room with High to send sends on the High lane; any other takes
// one of the places left in its worker's queue (free), so that no more
// rooms of a worker count than it can take messages.
func (l *Lane) placeLocked(q *roomQueue, now time.Time, free []int) bool {
	high, rest := l.sendableLocked(q, now)
	// With High to send, a room sends its Normal message to send again
	// first only once that is overdue (see nextLocked).
	needs := rest && !high || high && q.out[outRest] < maxOut && restOverdue(q, now)
	if needs && free[q.worker] > 0 {
		free[q.worker]--
		return true
	}
	return high
}

// restTokens is how much of its group's budget a room must have to send a
// message without High events in it: two, where the group's burst allows
// (a budget of 20 or more), so that in a busy room, whose display events
// spend the budget as it comes, a High event finds the one kept for it and
// goes at once instead of waiting up to a message's interval for the next.
func restTokens(q *roomQueue) float64 {
	return float64(min(2, q.limiter.Burst()))
}

// restOverdue reports whether the room's Normal or Low message to send
// again (refused for frequency) has waited promoteAfter: it may then take
// the message of its group's budget kept for High. No later message can
// carry it, and a room whose High events spend its budget as it refills
// would otherwise never leave it the two restTokens asks for.
func restOverdue(q *roomQueue, now time.Time) bool {
	i := retryDue(q, now, false)
	return i >= 0 && now.Sub(q.retry[i].Queued) >= promoteAfter
}

// restFull reports whether the worker of a room's group has as many
// Normal and Low messages waiting as it holds: its calls fall behind. The
// room then makes no such message: its display events stay queued, where
// later ones join them and, past QueueLimit, fold into counts, to go in
// one message once the worker catches up; a message made now could only
// be lost, and its events with it. Its High events still go, on the High
// lane, with everything it has queued. Only the dispatcher fills the
// workers' queues, so one that is not full takes the message it releases.
func (l *Lane) restFull(q *roomQueue) bool {
	return len(l.rest[q.worker]) == cap(l.rest[q.worker])
}

// pendingLocked reports whether the room has something to send now that
// goes out on the High lane, and on the other.
func (l *Lane) pendingLocked(q *roomQueue, now time.Time) (high, rest bool) {
	high = retryDue(q, now, true) >= 0 || len(q.high) > 0 && !highHeld(q)
	rest = retryDue(q, now, false) >= 0 || len(q.normal)+len(q.low)+len(q.folded)+len(q.combos) > 0 || l.dueTypeLocked(q, now) != "" || noticeDueLocked(q, now)
	return high, rest
}

// waitingLocked reports whether the room has High to send now and since
// when its oldest pending event waits.
func (l *Lane) waitingLocked(q *roomQueue, now time.Time) (high bool, since time.Time) {
	since = now
	older := func(t time.Time) {
		if t.Before(since) {
			since = t
		}
	}
	if i := retryDue(q, now, true); i >= 0 {
		older(q.retry[i].Queued)
		high = true
	}
	if i := retryDue(q, now, false); i >= 0 {
		older(q.retry[i].Queued)
	}
	held := highHeld(q)
	if len(q.high) > 0 && !held {
		older(q.high[0].queued)
	}
	for _, list := range [][]*item{q.normal, q.low} {
		if len(list) > 0 {
			older(list[0].queued)
		}
	}
	for typ, it := range q.coalesced {
		if now.Sub(q.lastFlush[typ]) >= l.cfg.CoalesceEvery {
			older(it.queued)
		}
	}
	if len(q.folded)+len(q.combos) > 0 {
		older(q.foldedAt)
	}
	if noticeDueLocked(q, now) {
		older(q.lostAt)
	}
	return high || len(q.high) > 0 && !held, since
}

// retryDue returns the index in q.retry of the room's first message to
// send again on the High lane (high) or the other, if it is due, or -1.
// Each lane's messages go again in their order; the lanes do not wait for
// each other, so a High message is not held behind a Normal one that
// cannot go while its worker's queue is full.
func retryDue(q *roomQueue, now time.Time, high bool) int {
	for i, m := range q.retry {
		if (m.Priority == room.PriorityHigh) == high {
			if now.Before(m.due) {
				return -1
			}
			return i
		}
	}
	return -1
}

// highHeld reports whether the room holds its new High events back: a High
// message of it waits to be sent again.
func highHeld(q *roomQueue) bool {
	for _, m := range q.retry {
		if m.Priority == room.PriorityHigh {
			return true
		}
	}
	return false
}

// batchOverhead is room for a Batch's own fields around its events
// (type, room_id, room_version, lost_through); comboSize is room for one
// folded gift combo (its gift id and name are a catalogue's short
// strings).
const (
	batchOverhead = 400
	comboSize     = 300
	// foldedTypeSize is room for one folded type's count: a type of up to
	// 64 bytes (a robot's), quoted, and its count.
	foldedTypeSize = 96
)

// nextLocked takes the room's next message: a message to send again as it
// was (a Normal or Low one only when the room has no High to send, or
// once it is overdue), or else everything pending that fits in MaxBytes, in one message:
// High events first (oldest first, unless a High message waits to be sent
// again), then due coalesced values, then Normal, then Low, with the counts
// of folded display events.
//
// A room with maxOut messages out on one lane (roomQueue.out) sends only
// what goes on the other: with Normal or Low messages out, only its High
// events; with High messages out, everything but them. With noRest (its
// worker's queue of Normal and Low messages is full, see restFull, or its
// group's budget is down to the message kept for High, see restTokens), it
// sends only a message with High events in it.
func (l *Lane) nextLocked(q *roomQueue, now time.Time, noRest bool) (Message, bool) {
	highOnly, restOnly := q.out[outRest] >= maxOut, q.out[outHigh] >= maxOut
	if highOnly && restOnly {
		return Message{}, false
	}
	// The message to send again that may go now: a High one, or else the
	// room's High events, go before a Normal or Low one (the lanes keep no
	// order between them), unless that has waited promoteAfter (see
	// restOverdue); a round counted the room's call on the High lane (see
	// placeLocked).
	again := -1
	if i := retryDue(q, now, true); i >= 0 && !restOnly {
		again = i
	}
	highNow := again >= 0 || !restOnly && len(q.high) > 0 && !highHeld(q)
	if i := retryDue(q, now, false); i >= 0 && !highOnly && !noRest && (!highNow || restOverdue(q, now)) {
		again = i
	}
	if again >= 0 {
		m := q.retry[again]
		q.retry = slices.Delete(q.retry, again, again+1)
		return m, true
	}
	var items []*item
	size := batchOverhead
	size += len(q.combos)*comboSize + len(q.folded)*foldedTypeSize
	add := func(it *item) bool {
		if size+len(it.data)+1 > l.cfg.MaxBytes {
			return false
		}
		size += len(it.data) + 1
		items = append(items, it)
		return true
	}
	take := func(list []*item) []*item {
		for len(list) > 0 && (!l.encode(list[0]) || add(list[0])) {
			list = list[1:]
		}
		return list
	}
	if !highHeld(q) && !restOnly {
		q.high = take(q.high)
	}
	if len(items) == 0 && noRest {
		return Message{}, false
	}
	if highOnly {
		if len(items) == 0 {
			return Message{}, false
		}
		return l.encodeLocked(q, items, nil), true
	}
	types := slices.Sorted(maps.Keys(q.coalesced))
	for _, typ := range types {
		it := q.coalesced[typ]
		if now.Sub(q.lastFlush[typ]) < l.cfg.CoalesceEvery {
			continue
		}
		if !l.encode(it) || add(it) {
			delete(q.coalesced, typ)
			q.lastFlush[typ] = now
		}
	}
	q.normal = take(q.normal)
	q.low = take(q.low)
	var f *foldedEvents
	if len(q.folded)+len(q.combos) > 0 {
		f = &foldedEvents{counts: q.folded}
		for _, c := range q.combos {
			f.combos = append(f.combos, c)
		}
		slices.SortFunc(f.combos, func(a, b *combo) int {
			if a.SenderUserID != b.SenderUserID {
				return int(a.SenderUserID - b.SenderUserID)
			}
			return strings.Compare(a.GiftID, b.GiftID)
		})
		q.folded, q.combos = make(map[string]int), make(map[comboKey]*combo)
	}
	if len(items) == 0 && f == nil && !noticeDueLocked(q, now) {
		return Message{}, false
	}
	return l.encodeLocked(q, items, f), true
}

// foldedEvents are the display events a message carries as counts and
// combos.
type foldedEvents struct {
	counts map[string]int
	combos []*combo
}

// encodeLocked makes the message of one event, or a Batch of several (in
// key order, oldest first, with the counts of folded display events).
// Every message to a room's own group carries the room's lost_through once
// the lane has lost one of its events.
func (l *Lane) encodeLocked(q *roomQueue, items []*item, f *foldedEvents) Message {
	slices.SortStableFunc(items, func(a, b *item) int {
		if a.version != b.version {
			return int(a.version - b.version)
		}
		return a.seq - b.seq
	})
	m := Message{Priority: room.PriorityLow, Random: rand.Uint32()}
	for i, it := range items {
		m.Priority = higher(m.Priority, it.priority)
		m.version = max(m.version, it.version)
		if i == 0 || it.queued.Before(m.Queued) {
			m.Queued = it.queued
		}
	}
	for _, it := range items {
		if it.priority == m.Priority && (m.since.IsZero() || it.queued.Before(m.since)) {
			m.since = it.queued
		}
	}
	m.traces = traces(items)
	lost := q.lost > 0 && !q.regional
	if lost {
		q.lostPending = false
	}
	if len(items) == 1 && f == nil {
		m.Type, m.Data = items[0].typ, items[0].data
		if lost { // the envelope, one field more
			m.Data = append(strconv.AppendInt(append(slices.Clip(m.Data[:len(m.Data)-1]), `,"lost_through":`...), q.lost, 10), '}')
		}
		return m
	}
	m.Type = "Batch"
	msg := map[string]any{}
	msg["type"], msg["room_id"] = m.Type, q.roomID(items)
	if m.version > 0 {
		msg["room_version"] = m.version
	}
	if f != nil {
		if len(f.counts) > 0 {
			msg["folded"] = f.counts
		}
		if len(f.combos) > 0 {
			msg["folded_gifts"] = f.combos
		}
	}
	if len(items) == 0 { // folded events, or only the notice of a loss
		m.Queued = q.foldedAt
		if f == nil {
			m.Queued = q.lostAt
		}
		m.since = m.Queued
	}
	if l.metrics.Merged != nil && len(items) > 1 {
		l.metrics.Merged(len(items))
	}
	if lost {
		msg["lost_through"] = q.lost
	}
	// Encoding cannot fail: every event was encoded when it was taken.
	rest, _ := json.Marshal(msg)
	m.Data = withEvents(rest, items)
	return m
}

// withEvents puts the events of items, each encoded when it was taken, in
// front of the fields of the encoded object rest: the bytes json.Marshal
// gives for the object with an "events" array too, whose key sorts first,
// without checking every event's bytes again as it checks a RawMessage.
func withEvents(rest []byte, items []*item) []byte {
	n := len(rest) + len(`{"events":[],`)
	for _, it := range items {
		n += len(it.data) + 1
	}
	out := make([]byte, 0, n)
	out = append(out, `{"events":[`...)
	for i, it := range items {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, it.data...)
	}
	out = append(out, "],"...)
	return append(out, rest[1:]...)
}

// roomID is the room of a queue's Batch: its room, or for a regional
// queue, which mixes rooms, the room of the first event.
func (q *roomQueue) roomID(items []*item) any {
	if q.regional && len(items) > 0 {
		return items[0].roomID()
	}
	return q.key
}

// higher is the higher of two priorities.
func higher(a, b room.Priority) room.Priority {
	switch {
	case a == room.PriorityHigh || b == room.PriorityHigh:
		return room.PriorityHigh
	case a == room.PriorityNormal || b == room.PriorityNormal:
		return room.PriorityNormal
	}
	return room.PriorityLow
}

// failed takes back a message whose send failed. A message refused for
// frequency goes again first on its lane, as it was, whatever its
// priority (a Normal one after its room's High, see nextLocked), and the
// whole lane slows down. A High message is queued to be sent again as it
// was, after a backoff, unless its room has closed; a message Tencent
// dropped gets a new Random, since Tencent would drop a resend with the
// same one as a duplicate. Anything else is counted as lost.
func (l *Lane) failed(m Message, reason string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	q := l.backLocked(m)
	l.ready[m.RoomID], l.roster.fresh[m.RoomID] = true, true
	m.attempts++
	switch {
	case reason == "rate_limited":
		m.due = time.Time{}
		q.retry = append([]Message{m}, q.retry...)
		l.slowLocked(time.Now())
		if l.metrics.RateLimited != nil {
			l.metrics.RateLimited()
		}
		return
	case m.Priority != room.PriorityHigh:
		l.lostLocked(q, m.Priority, reason, m.version)
		return
	case q.closed:
		l.lostLocked(q, m.Priority, "room_closed", m.version)
		return
	}
	if reason == "dropped_by_im" {
		m.Random = rand.Uint32()
	}
	m.due = time.Now().Add(retryBackoff(m.attempts))
	q.retry = append(q.retry, m)
	if l.metrics.Retried != nil {
		l.metrics.Retried()
	}
}

// refused takes back a message the IM service refused for good (a
// *PermanentError: an invalid parameter, content it will not carry, a
// message too large): sent again it would be refused again, so it is lost
// whatever its priority, counted with the refusal's reason, and the room's
// next message tells its lost_through.
func (l *Lane) refused(m Message, reason string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	q := l.backLocked(m)
	l.ready[m.RoomID], l.roster.fresh[m.RoomID] = true, true
	if m.version == 0 {
		// No event of the room's log in it (only lost_through, folded
		// counts or robot events): its loss is nothing to tell, and a
		// notice of it, refused again, would be told again without end.
		l.shed(m.Priority, reason)
		return
	}
	l.lostLocked(q, m.Priority, reason, m.version)
}

// sent takes back a message that went through: its room may release its
// next one.
func (l *Lane) sent(m Message) {
	l.mu.Lock()
	if q := l.rooms[m.RoomID]; q != nil {
		q.back(m)
	}
	l.mu.Unlock()
	l.signal()
}

// backLocked returns the queue of a message that failed, which may release
// again.
func (l *Lane) backLocked(m Message) *roomQueue {
	q := l.queueLocked(m.RoomID, m.GroupID, m.regional)
	q.back(m)
	q.closed = q.closed || m.closed // the queue may have been forgotten since
	return q
}

// slowLocked answers a frequency error: the lane pauses, and its pace
// falls.
func (l *Lane) slowLocked(now time.Time) {
	l.slow = max(l.slow*slowFactor, minSlow)
	l.slowAt, l.pausedUntil = now, now.Add(rateLimitPause)
	l.setPaceLocked()
	l.log.Warn("im send refused for frequency; slowing down", "pace", l.slow)
}

// recoverLocked brings the pace back to full, from a second after the last
// frequency error, within slowRecovery.
func (l *Lane) recoverLocked(now time.Time) {
	if l.slow >= 1 || now.Sub(l.slowAt) < time.Second {
		return
	}
	l.slow = min(1, l.slow+float64(l.cfg.Tick)/float64(slowRecovery))
	l.setPaceLocked()
}

func (l *Lane) setPaceLocked() {
	interval, _ := Pacing(l.cfg.AppBudget * l.slow)
	l.pace.interval = interval
	l.sendPace.SetLimit(rate.Every(interval))
}

// retryBackoff is the wait before a failed High message's next attempt:
// 100ms doubling up to 5s.
func retryBackoff(attempts int) time.Duration {
	return min(100*time.Millisecond<<min(attempts-1, 6), 5*time.Second)
}

// worker sends the messages of one queue. A failed send goes back to the
// lane (failed), one the IM service refuses for good is lost (refused).
func (l *Lane) worker(ctx context.Context, in <-chan Message) {
	defer l.wg.Done()
	var perm *PermanentError
	for {
		var m Message
		select {
		case <-ctx.Done():
			return
		case m = <-in:
		}
		if l.sendPace.Wait(ctx) != nil {
			return // the lane is closing
		}
		// The room may close while the message waits for this worker or
		// for Tencent's answer; a sender that would make a missing group
		// again asks then.
		m.roomClosed = l.closedFunc(m.RoomID)
		sctx, cancel := context.WithTimeout(ctx, l.cfg.SendTimeout)
		sctx, span := startSend(sctx, m)
		err := l.send.Send(sctx, m)
		endSend(span, err)
		cancel()
		switch {
		case err == nil:
			l.sent(m)
			if l.metrics.Sent != nil {
				l.metrics.Sent(m.Priority)
			}
			if l.metrics.Latency != nil {
				l.metrics.Latency(sctx, m.Priority, time.Since(m.since))
			}
		case errors.Is(err, context.Canceled) && ctx.Err() != nil:
			return
		case errors.Is(err, ErrRateLimited):
			l.failed(m, "rate_limited")
		case errors.Is(err, ErrDropped):
			l.failed(m, "dropped_by_im")
		case errors.As(err, &perm):
			l.refused(m, perm.Reason)
			l.log.WarnContext(sctx, "im send refused for good", "group", m.GroupID, "type", m.Type, "reason", perm.Reason, "err", err)
		default:
			l.failed(m, "send_failed")
			l.log.DebugContext(sctx, "im send failed", "group", m.GroupID, "type", m.Type, "err", err)
		}
	}
}

// closedFunc reports, when called, whether the lane knows the room of key
// closed.
func (l *Lane) closedFunc(key string) func() bool {
	return func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		q := l.rooms[key]
		return q != nil && q.closed
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
