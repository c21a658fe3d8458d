package room

import (
	"cmp"
	"math"
	"math/bits"
	"slices"
)

// Gift kinds.
const (
	GiftNormal = "normal"
	GiftLucky  = "lucky"
)

// Economy limits.
const (
	MaxGiftReceivers = 20 // at most one per seat
	MaxGiftCount     = 9999
	MaxComboIDLen    = MaxIDLen
	// SystemOperator is the operator of the commands the service issues
	// itself (Internal). It is not a user id any client may act as: the API
	// never submits internal commands, and a new command of any other kind
	// that names it is refused (CheckOrigin).
	SystemOperator int64 = 1<<63 - 1
	// BasisPoints is a multiplier of 1x.
	BasisPoints = 10_000
)

// More economy limits.
const (
	// MaxGiftCost bounds the value of one SendGift (price x count x
	// receivers), so that a day's counters stay far from overflow.
	MaxGiftCost int64 = 1_000_000_000_000_000
	// MaxGiftNameLen bounds the catalogue name a gift carries into its event.
	MaxGiftNameLen = MaxTitleLen
	// MaxRankSize bounds Rules.RankSize: the visible rank travels in every
	// RoomRankChanged message.
	MaxRankSize = 100
	// MaxRocketLaunches bounds the ignited rockets waiting for launch. While
	// that many wait, the rocket does not ignite again: its level fills to
	// one below the threshold and the rest of a gift's fuel is not stored
	// (heat, rank and charm still count the whole gift). This also bounds
	// the ignitions, and so the events, that one gift can cause.
	MaxRocketLaunches = 1000
	// RocketTopContributors is how many contributors a launch remembers.
	RocketTopContributors = 3
	msPerDay              = 24 * 3600 * millisPerSecond
)

// LuckyReward is what a lucky multiplier of multiplierBP basis points pays
// back on a gift that cost cost coins: cost x multiplierBP / BasisPoints,
// rounded down. ok is false when either is negative or the reward does not
// fit an int64.
func LuckyReward(cost, multiplierBP int64) (reward int64, ok bool) {
	if cost < 0 || multiplierBP < 0 {
		return 0, false
	}
	hi, lo := bits.Mul64(uint64(cost), uint64(multiplierBP))
	if hi >= BasisPoints {
		return 0, false
	}
	q, _ := bits.Div64(hi, lo, BasisPoints)
	if q > math.MaxInt64 {
		return 0, false
	}
	return int64(q), true
}

// Economy is what gifts build up in a room during one business day.
type Economy struct {
	// Day is the business day the counters belong to: Rules.Day, plus
	// DayShift.
	Day int64
	// DayShift is added to Rules.Day to number the business day. A rules
	// switch sets it so that the day under way keeps its number under the
	// new rules: day numbers then never go back, and the next reset comes
	// at the new rules' next day start (see SetRules.KeepsDay).
	DayShift int64
	Heat     int64
	// Contrib maps each sender of the day to the gift value they sent.
	Contrib map[int64]int64
	// Top is derived from Contrib: its first RankSize entries, value
	// descending, then user id ascending.
	Top    []RankEntry
	Rocket Rocket
}

// RankEntry is one user's value in a rank.
type RankEntry struct {
	UserID int64 `json:"user_id"`
	Value  int64 `json:"value"`
}

// Rocket is the room rocket: the level charging now and the ignited rockets
// waiting for their launch.
type Rocket struct {
	// Level is the level charging now, an index into Rules.RocketLevels.
	Level int32
	// Fuel is the fuel in the current level; after a gift it is always below
	// the level's threshold.
	Fuel int64
	// Ignitions counts the rockets ignited in this room, ever (a daily reset
	// keeps it): it is the id of the last rocket.
	Ignitions int64
	// Contributors maps each user to the fuel they gave the current level.
	Contributors map[int64]int64
	// Launches are the ignited rockets waiting for launch, in launch order
	// (launch time, then rocket id). At most MaxRocketLaunches.
	Launches []RocketLaunch
}

// RocketLaunch is an ignited rocket waiting for its launch time. Its fields
// never change once it is queued.
type RocketLaunch struct {
	RocketID  int64
	Level     int32
	IgnitedAt int64 // unix ms
	LaunchAt  int64 // unix ms
	// Day is the business day of the ignition; a daily reset drops the launch.
	Day int64
	// Top are the level's top RocketTopContributors contributors at ignition.
	Top []RankEntry
}

// LaunchCommand is the internal command that launches l when it is due. The
// cell submits it with Operator SystemOperator and Platform set.
func (l *RocketLaunch) LaunchCommand() *LaunchRocket {
	return &LaunchRocket{RocketID: l.RocketID, Level: l.Level, LaunchAt: l.LaunchAt, Day: l.Day}
}

// PendingLaunches returns a copy of the ignited rockets waiting for launch,
// in launch order. The cell takes them after loading a room and submits
// each one's LaunchCommand when due, in this order.
func (s *State) PendingLaunches() []RocketLaunch {
	return slices.Clone(s.Economy.Rocket.Launches)
}

// RankOf returns every entry of a user-keyed value map, value descending,
// then user id ascending.
func RankOf(m map[int64]int64) []RankEntry {
	out := make([]RankEntry, 0, len(m))
	for id, v := range m {
		out = append(out, RankEntry{UserID: id, Value: v})
	}
	slices.SortFunc(out, compareRank)
	return out
}

// topOf returns the first n entries of RankOf(m), nil when there are none.
func topOf(m map[int64]int64, n int) []RankEntry {
	if n <= 0 || len(m) == 0 {
		return nil
	}
	all := RankOf(m)
	return slices.Clip(all[:min(n, len(all))])
}

// compareRank orders rank entries: higher value first, then lower user id.
func compareRank(a, b RankEntry) int {
	if a.Value != b.Value {
		return cmp.Compare(b.Value, a.Value)
	}
	return cmp.Compare(a.UserID, b.UserID)
}

// satAdd adds two non-negative values, stopping at the largest int64.
func satAdd(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// contribute adds value to user's contribution of the day and keeps Top the
// first RankSize entries of Contrib. Values only grow within a day, so a
// user outside Top can only enter it, pushing out the last entry. It reports
// whether the visible Top changed.
func (e *Economy) contribute(user, value int64, rankSize int) bool {
	if e.Contrib == nil {
		e.Contrib = make(map[int64]int64)
	}
	e.Contrib[user] = satAdd(e.Contrib[user], value)
	entry := RankEntry{UserID: user, Value: e.Contrib[user]}
	i := slices.IndexFunc(e.Top, func(r RankEntry) bool { return r.UserID == user })
	switch {
	case i >= 0:
		if e.Top[i].Value == entry.Value {
			return false
		}
		e.Top[i] = entry
	case len(e.Top) < rankSize:
		e.Top = append(e.Top, entry)
		i = len(e.Top) - 1
	case len(e.Top) > 0 && compareRank(entry, e.Top[len(e.Top)-1]) < 0:
		i = len(e.Top) - 1
		e.Top[i] = entry
	default:
		return false
	}
	for ; i > 0 && compareRank(e.Top[i], e.Top[i-1]) < 0; i-- {
		e.Top[i], e.Top[i-1] = e.Top[i-1], e.Top[i]
	}
	return true
}

// fuel adds a gift's value to the rocket and returns one RoomRocketIgnited
// per ignition. Fuel beyond a level's threshold carries into the next level
// (after the last, level 0); the sender's contribution to each level is the
// part of the value that went into it.
func (s *State) fuel(sender, value int64, env *Envelope) []Event {
	rules := s.rules()
	rk := &s.Economy.Rocket
	if len(rules.RocketLevels) == 0 {
		return nil
	}
	if rules.threshold(rk.Level) == 0 {
		rk.Level = 0
	}
	if rk.Contributors == nil {
		rk.Contributors = make(map[int64]int64)
	}
	give := func(part int64) {
		if part > 0 {
			rk.Contributors[sender] += part
			rk.Fuel += part
		}
	}
	var events []Event
	for {
		th := rules.threshold(rk.Level)
		need := th - rk.Fuel // not positive only after the rules lowered th
		if value < need {
			give(value)
			return events
		}
		if len(rk.Launches) >= MaxRocketLaunches {
			give(min(value, need-1))
			return events
		}
		part := max(need, 0)
		give(part)
		value -= part
		rk.Fuel -= th
		events = append(events, s.ignite(rules, env))
	}
}

// ignite turns the full current level into a rocket waiting for launch and
// moves the rocket to the next level.
func (s *State) ignite(rules *Rules, env *Envelope) Event {
	rk := &s.Economy.Rocket
	rk.Ignitions++
	l := RocketLaunch{
		RocketID: rk.Ignitions, Level: rk.Level, IgnitedAt: env.At,
		LaunchAt: env.At + rules.RocketLevels[rk.Level].Countdown.Milliseconds(),
		Day:      s.Economy.Day, Top: topOf(rk.Contributors, RocketTopContributors),
	}
	i := len(rk.Launches)
	for i > 0 && rk.Launches[i-1].LaunchAt > l.LaunchAt {
		i--
	}
	rk.Launches = slices.Insert(rk.Launches, i, l)
	clear(rk.Contributors)
	rk.Level = (rk.Level + 1) % int32(len(rules.RocketLevels))
	return Event{Type: EventRoomRocketIgnited, Data: &RoomRocketIgnitedEvent{
		RocketID: l.RocketID, Level: l.Level, IgnitedAt: l.IgnitedAt, LaunchAt: l.LaunchAt,
		BusinessDay: l.Day, TopContributors: nonNil(l.Top),
	}}
}

// nonNil returns a copy of r that encodes as [] rather than null when empty.
func nonNil(r []RankEntry) []RankEntry { return append([]RankEntry{}, r...) }

// dayRollback is what a business-day reset replaced, to restore it when the
// command that caused the reset is refused.
type dayRollback struct {
	economy Economy
	charms  []int64
}

func (b *dayRollback) restore(s *State) {
	s.Economy = b.economy
	for i := range s.Seats {
		s.Seats[i].Charm = b.charms[i]
	}
}

// startDay moves the economy to business day day: heat, rank, rocket level,
// fuel and pending launches and every seat's charm go back to zero (the
// rocket ids go on). It returns what it replaced and the display events of
// the values that were not zero already.
func (s *State) startDay(day int64) (*dayRollback, []Event) {
	old := s.Economy
	b := &dayRollback{economy: old, charms: make([]int64, len(s.Seats))}
	charmed := false
	for i := range s.Seats {
		b.charms[i] = s.Seats[i].Charm
		charmed = charmed || s.Seats[i].Charm != 0
		s.Seats[i].Charm = 0
	}
	s.Economy = Economy{Day: day, DayShift: old.DayShift, Contrib: make(map[int64]int64), Rocket: Rocket{
		Ignitions: old.Rocket.Ignitions, Contributors: make(map[int64]int64),
	}}
	var events []Event
	if old.Heat != 0 {
		events = append(events, s.heatEvent())
	}
	if len(old.Top) != 0 || charmed {
		events = append(events, s.rankEvent())
	}
	if r := old.Rocket; r.Level != 0 || r.Fuel != 0 || len(r.Launches) != 0 {
		events = append(events, s.fuelEvent())
	}
	return b, events
}

func (s *State) heatEvent() Event {
	return Event{Type: EventRoomHeatChanged, Data: &RoomHeatChangedEvent{Heat: s.Economy.Heat, BusinessDay: s.Economy.Day}}
}

func (s *State) rankEvent() Event {
	seats := make([]SeatCharm, len(s.Seats))
	for i, seat := range s.Seats {
		seats[i] = SeatCharm{SeatIndex: int32(i), UserID: seat.UserID, Charm: seat.Charm}
	}
	return Event{Type: EventRoomRankChanged, Data: &RoomRankChangedEvent{
		BusinessDay: s.Economy.Day, Top: nonNil(s.Economy.Top), Seats: seats,
	}}
}

func (s *State) fuelEvent() Event {
	rk := &s.Economy.Rocket
	return Event{Type: EventRoomRocketFuelChanged, Data: &RoomRocketFuelChangedEvent{
		Level: rk.Level, Fuel: rk.Fuel, Threshold: s.RocketThreshold(), Ignitions: rk.Ignitions, BusinessDay: s.Economy.Day,
	}}
}
