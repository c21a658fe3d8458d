package timlocal

import (
	"maps"
	"slices"
	"time"
)

// Message is one message a group received: delivered, or dropped by frequency control.
type Message struct {
	// MsgSeq is the sequence the send answered with; dropped messages consume one too.
	MsgSeq uint64 `json:"msg_seq"`
	// Random is the sender's duplicate-check value.
	Random uint32 `json:"random"`
	// Time is the local clock when the message arrived.
	Time time.Time `json:"time"`
	// Priority is High, Normal or Low.
	Priority string `json:"priority"`
	// From is From_Account, empty when the admin sent it as itself.
	From string `json:"from,omitempty"`
	// Desc and Data repeat the message's TIMCustomElem, if it has one (room events are one such element).
	Desc string `json:"desc,omitempty"`
	Data string `json:"data,omitempty"`
	// Elements are the message's elements in order.
	Elements []Element `json:"elements"`
	// Dropped is set when frequency control dropped the message: members never saw it.
	Dropped bool `json:"dropped"`
	// DropReason is the MsgDropReason answered, "MsgFreqCtrl".
	DropReason string `json:"drop_reason,omitempty"`
}

// Element is one element of a message's MsgBody.
type Element struct {
	// Type is the MsgType: TIMCustomElem or TIMTextElem.
	Type string `json:"type"`
	// Data, Desc, Ext and Sound are a TIMCustomElem's content.
	Data  string `json:"data,omitempty"`
	Desc  string `json:"desc,omitempty"`
	Ext   string `json:"ext,omitempty"`
	Sound string `json:"sound,omitempty"`
	// Text is a TIMTextElem's content.
	Text string `json:"text,omitempty"`
}

// GroupStats counts what happened to a group's messages.
type GroupStats struct {
	// Delivered counts messages members received.
	Delivered uint64 `json:"delivered"`
	// Dropped counts messages frequency control dropped while answering success.
	Dropped uint64 `json:"dropped"`
	// Duplicates counts sends discarded because their Random was seen in the last 5 minutes.
	Duplicates uint64 `json:"duplicates"`
	// MaxPerSecond is the most messages delivered in any one-second window.
	MaxPerSecond int `json:"max_per_second"`
	// MaxOfferedPerSecond is the most messages offered (delivered or dropped) in any one-second window:
	// what a sender's shaping should keep under the group rate.
	MaxOfferedPerSecond int `json:"max_offered_per_second"`
}

// group is one group's state, guarded by Server.mu.
type group struct {
	id, typ, name, owner string
	created              time.Time
	seq                  uint64
	history              []Message // at most historyPerGroup, oldest first
	seen                 map[uint32]sent
	seenOrder            []uint32    // Randoms in arrival order, for expiry
	delivered            []time.Time // delivery times within the last second
	offered              []time.Time // offer times within the last second
	stats                GroupStats
	shutUpAll            bool                 // ShutUpAllMember "On": only admins may send
	muted                map[string]time.Time // account → muted until
	banned               map[string]time.Time // account → banned until
}

// sent is the answer given to a Random, repeated for its duplicates.
type sent struct {
	at   time.Time
	seq  uint64
	drop string
}

func newGroup(id, typ, name, owner string, now time.Time) *group {
	return &group{
		id: id, typ: typ, name: name, owner: owner, created: now,
		seen:   make(map[uint32]sent),
		muted:  make(map[string]time.Time),
		banned: make(map[string]time.Time),
	}
}

// duplicate returns the earlier answer for random if it was used in the last dedupeWindow.
func (g *group) duplicate(random uint32, now time.Time) (sent, bool) {
	for len(g.seenOrder) > 0 {
		r := g.seenOrder[0]
		if now.Sub(g.seen[r].at) < dedupeWindow {
			break
		}
		delete(g.seen, r)
		g.seenOrder = g.seenOrder[1:]
	}
	prev, ok := g.seen[random]
	return prev, ok
}

// ceiling is how many messages may already have been delivered in the last second for one of priority p
// to be delivered too. Tencent keeps higher priorities first when a group is over its rate, yet answers
// each call at once and so cannot wait to see the whole second; lower priorities stopping earlier is how
// this fake keeps room for High whatever the arrival order: Low stops at 75% of the rate, Normal at 90%,
// High at 100%.
func ceiling(p string, rate int) int {
	switch p {
	case "High":
		return rate
	case "Normal":
		return max(1, rate*9/10)
	default:
		return max(1, rate*3/4)
	}
}

// admit applies the per-group frequency control over the sliding window (now-1s, now].
func (g *group) admit(now time.Time, priority string, rate int) bool {
	g.offered = append(inWindow(g.offered, now), now)
	g.stats.MaxOfferedPerSecond = max(g.stats.MaxOfferedPerSecond, len(g.offered))
	g.delivered = inWindow(g.delivered, now)
	if len(g.delivered) >= ceiling(priority, rate) {
		g.stats.Dropped++
		return false
	}
	g.delivered = append(g.delivered, now)
	g.stats.MaxPerSecond = max(g.stats.MaxPerSecond, len(g.delivered))
	g.stats.Delivered++
	return true
}

// inWindow drops the times at or before now-1s from ts, which is in arrival order.
func inWindow(ts []time.Time, now time.Time) []time.Time {
	start := now.Add(-time.Second)
	i := 0
	for i < len(ts) && !ts[i].After(start) {
		i++
	}
	return ts[i:]
}

func (g *group) record(m Message) {
	if len(g.history) == historyPerGroup {
		g.history = g.history[1:]
	}
	g.history = append(g.history, m)
}

// active returns the entries of m still in force at now, and forgets the others.
func active(m map[string]time.Time, now time.Time) map[string]time.Time {
	maps.DeleteFunc(m, func(_ string, until time.Time) bool { return !until.After(now) })
	return maps.Clone(m)
}

// sortedAccounts lists m's accounts with their end time in Tencent's unix-seconds form.
func sortedAccounts(m map[string]time.Time, untilKey string) []map[string]any {
	accounts := slices.Sorted(maps.Keys(m))
	out := make([]map[string]any, 0, len(accounts))
	for _, a := range accounts {
		out = append(out, map[string]any{"Member_Account": a, untilKey: m[a].Unix()})
	}
	return out
}

// Messages returns groupID's recent messages, delivered and dropped, oldest first (at most 500).
func (s *Server) Messages(groupID string) []Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	g := s.groups[groupID]
	if g == nil {
		return nil
	}
	return slices.Clone(g.history)
}

// Stats returns groupID's message counts; zero for a group that does not exist.
func (s *Server) Stats(groupID string) GroupStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	if g := s.groups[groupID]; g != nil {
		return g.stats
	}
	return GroupStats{}
}

// Muted returns the accounts muted in groupID now, with when each mute ends.
func (s *Server) Muted(groupID string) map[string]time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	if g := s.groups[groupID]; g != nil {
		return active(g.muted, s.now())
	}
	return nil
}

// Banned returns the accounts banned from groupID now, with when each ban ends.
func (s *Server) Banned(groupID string) map[string]time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	if g := s.groups[groupID]; g != nil {
		return active(g.banned, s.now())
	}
	return nil
}

// GroupInfo is a group's profile as modify_group_base_info sets it.
type GroupInfo struct {
	// Type is the group type, such as AVChatRoom.
	Type string `json:"type"`
	// Name is the group's name.
	Name string `json:"name"`
	// ShutUpAll is set while ShutUpAllMember is "On": only admins can send.
	ShutUpAll bool `json:"shut_up_all"`
}

// Group returns groupID's profile, and false if the group does not exist.
func (s *Server) Group(groupID string) (GroupInfo, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	g := s.groups[groupID]
	if g == nil {
		return GroupInfo{}, false
	}
	return GroupInfo{Type: g.typ, Name: g.name, ShutUpAll: g.shutUpAll}, true
}

// Groups returns the IDs of the groups that exist, sorted.
func (s *Server) Groups() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Sorted(maps.Keys(s.groups))
}
