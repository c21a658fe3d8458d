package room

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
)

// Rules are the economy settings a room applies gifts with: the business
// calendar, the rank size and the rocket levels. A room records the rules it
// runs under: they are part of its snapshot, and a change reaches the room
// only through a logged SetRules command. Replay therefore never depends on
// the configuration in force today. A Rules value is immutable once a state
// holds it; states may share one.
type Rules struct {
	// Location is the business time zone (nil: UTC); DayStart the time of
	// day the business day begins there (0: midnight). Heat, rank, charm and
	// the rocket reset when the first command of a new business day applies.
	Location *time.Location
	DayStart time.Duration
	// RankSize is the length of the visible contribution rank (top N).
	RankSize int
	// RocketLevels are the rocket's levels in order; after the last one the
	// rocket starts again at level 0.
	RocketLevels []RocketLevel
}

// RocketLevel is one rocket level: the fuel (gift value) that ignites it and
// the countdown from ignition to launch.
type RocketLevel struct {
	Fuel      int64
	Countdown time.Duration
}

// Limits of the rules, so that a logged SetRules stays small.
const (
	MaxRocketLevels = 100
	MaxRocketFuel   = 1_000_000_000_000
	MaxCountdown    = time.Hour
)

// DefaultRules are the rules of a room whose state records none: UTC
// midnight, a top 10 and four levels. Rooms logged before rules were recorded
// replay under them, so these values must never change; a deployment that
// wants other rules configures them, and rooms switch through SetRules.
func DefaultRules() *Rules {
	return &Rules{
		Location: time.UTC, RankSize: 10,
		RocketLevels: []RocketLevel{
			{Fuel: 10_000, Countdown: 10 * time.Second},
			{Fuel: 50_000, Countdown: 10 * time.Second},
			{Fuel: 200_000, Countdown: 15 * time.Second},
			{Fuel: 1_000_000, Countdown: 20 * time.Second},
		},
	}
}

// defaultRules are the rules of every state whose Rules is nil; shared, so
// they must never be modified.
var defaultRules = DefaultRules()

// Validate reports every problem of r at once: the zone must be a named
// zone (not the host's Local), the business day must start within a day,
// the rank size is 0..MaxRankSize and every rocket level needs fuel in
// 1..MaxRocketFuel and a countdown in 0..MaxCountdown.
func (r *Rules) Validate() error {
	var errs []error
	if r.Location != nil && r.Location.String() == "Local" {
		errs = append(errs, errors.New(`time zone "Local" depends on the host; name an IANA zone`))
	}
	if r.DayStart < 0 || r.DayStart >= 24*time.Hour || r.DayStart%time.Millisecond != 0 {
		errs = append(errs, fmt.Errorf("day start %v is outside [0, 24h) or finer than a millisecond", r.DayStart))
	}
	if r.RankSize < 0 || r.RankSize > MaxRankSize {
		errs = append(errs, fmt.Errorf("rank size %d is outside 0..%d", r.RankSize, MaxRankSize))
	}
	if len(r.RocketLevels) > MaxRocketLevels {
		errs = append(errs, fmt.Errorf("%d rocket levels, at most %d", len(r.RocketLevels), MaxRocketLevels))
	}
	for i, l := range r.RocketLevels {
		if l.Fuel <= 0 || l.Fuel > MaxRocketFuel || l.Countdown < 0 || l.Countdown > MaxCountdown || l.Countdown%time.Millisecond != 0 {
			errs = append(errs, fmt.Errorf("rocket level %d needs fuel in 1..%d and a countdown in 0..%v in whole ms (fuel %d, countdown %v)",
				i, int64(MaxRocketFuel), MaxCountdown, l.Fuel, l.Countdown))
		}
	}
	return errors.Join(errs...)
}

// Day returns the business day of the unix ms time at: the wall-clock time
// in r.Location (UTC when nil), moved back by r.DayStart, as whole days
// since 1970-01-01 (floored, so times before the epoch give negative days).
// Around a daylight-saving change the wall clock repeats an hour, so Day can
// step back by one; Apply only ever moves a room to a later day.
func (r *Rules) Day(at int64) int64 {
	loc := r.Location
	if loc == nil {
		loc = time.UTC
	}
	_, offset := time.UnixMilli(at).In(loc).Zone()
	wall := at + int64(offset)*millisPerSecond - r.DayStart.Milliseconds()
	day := wall / msPerDay
	if wall%msPerDay < 0 {
		day--
	}
	return day
}

// threshold is the fuel that ignites level, 0 when the rocket is disabled.
func (r *Rules) threshold(level int32) int64 {
	if level < 0 || int(level) >= len(r.RocketLevels) {
		return 0
	}
	return max(r.RocketLevels[level].Fuel, 1)
}

// Zone is the name of the business time zone ("UTC" when none is set).
func (r *Rules) Zone() string {
	if r.Location == nil {
		return time.UTC.String()
	}
	return r.Location.String()
}

// RulesSpec is the recorded form of Rules: in a SetRules command's log
// payload and, field for field, in a snapshot.
type RulesSpec struct {
	TimeZone     string      `json:"time_zone"`
	DayStartMs   int64       `json:"day_start_ms"`
	RankSize     int         `json:"rank_size"`
	RocketLevels []LevelSpec `json:"rocket_levels"`
}

// LevelSpec is the recorded form of a RocketLevel.
type LevelSpec struct {
	Fuel        int64 `json:"fuel"`
	CountdownMs int64 `json:"countdown_ms"`
}

// Spec returns the recorded form of r.
func (r *Rules) Spec() RulesSpec {
	s := RulesSpec{TimeZone: r.Zone(), DayStartMs: r.DayStart.Milliseconds(), RankSize: r.RankSize,
		RocketLevels: make([]LevelSpec, len(r.RocketLevels))}
	for i, l := range r.RocketLevels {
		s.RocketLevels[i] = LevelSpec{Fuel: l.Fuel, CountdownMs: l.Countdown.Milliseconds()}
	}
	return s
}

// Rules rebuilds the rules a spec records and validates them; a zone the
// embedded zone database does not know is an error.
func (s RulesSpec) Rules() (*Rules, error) {
	if len(s.RocketLevels) > MaxRocketLevels {
		return nil, Errorf(ErrInvalidArgument, "%d rocket levels, at most %d", len(s.RocketLevels), MaxRocketLevels)
	}
	loc, err := LoadZone(s.TimeZone)
	if err != nil {
		return nil, Errorf(ErrInvalidArgument, "time zone %q: %v", s.TimeZone, err)
	}
	r := &Rules{Location: loc, DayStart: time.Duration(s.DayStartMs) * time.Millisecond, RankSize: s.RankSize,
		RocketLevels: make([]RocketLevel, len(s.RocketLevels))}
	for i, l := range s.RocketLevels {
		r.RocketLevels[i] = RocketLevel{Fuel: l.Fuel, Countdown: time.Duration(l.CountdownMs) * time.Millisecond}
	}
	if err := r.Validate(); err != nil {
		return nil, Errorf(ErrInvalidArgument, "rules: %v", err)
	}
	return r, nil
}

// Digest names the content of r: equal rules have equal digests, whichever
// value holds them. The cell compares a room's recorded rules with the
// configured ones by digest.
func (r *Rules) Digest() string {
	b, err := json.Marshal(r.Spec())
	if err != nil {
		panic(fmt.Sprintf("encode rules: %v", err)) // a struct of strings and integers
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:12])
}

// zones caches loaded time zones: every snapshot that records rules names
// one, and parsing the zone database per room load would cost more than
// the rest of the load.
var zones sync.Map // name -> *time.Location

// LoadZone returns the IANA time zone name from the zone database built
// into the service (zone.go), never the host's: a room's business day, and
// so what its commands reset, must not depend on the node that applies or
// replays them.
func LoadZone(name string) (*time.Location, error) {
	if name == "" || name == "Local" {
		return nil, errors.New("not an IANA zone name")
	}
	if loc, ok := zones.Load(name); ok {
		return loc.(*time.Location), nil
	}
	loc, err := zoneFromBuiltIn(name)
	if err != nil {
		return nil, err
	}
	zones.Store(name, loc)
	return loc, nil
}

// rules returns the rules the state applies gifts with.
func (s *State) rules() *Rules {
	if s.Rules != nil {
		return s.Rules
	}
	return defaultRules
}

// EffectiveRules are the rules the room runs under (DefaultRules when the
// state records none). They must not be modified.
func (s *State) EffectiveRules() *Rules { return s.rules() }

// RecordsRules reports whether the room runs under rules equal to r. When it
// does but holds another value, the state takes r, so that later checks are
// a pointer comparison and loaded rooms share one Rules.
func (s *State) RecordsRules(r *Rules) bool {
	if s.rules() == r {
		return true
	}
	if s.rules().Digest() != r.Digest() {
		return false
	}
	s.Rules = r
	return true
}

// SetRules sets the rules (nil: DefaultRules) and re-derives what depends on
// them: the visible rank for the new RankSize, and a rocket level that no
// longer exists restarts at level 0 with its fuel. Snapshot decoding calls
// it with the rules the snapshot records; a running room changes its rules
// only through the SetRules command.
func (s *State) SetRules(r *Rules) {
	s.Rules = r
	s.Economy.Top = topOf(s.Economy.Contrib, s.rules().RankSize)
	if rk := &s.Economy.Rocket; s.rules().threshold(rk.Level) == 0 {
		rk.Level = 0
	}
}

// RocketThreshold is the fuel that ignites the level charging now, 0 when
// the rules have no rocket.
func (s *State) RocketThreshold() int64 { return s.rules().threshold(s.Economy.Rocket.Level) }

// SetRules switches a room to new economy rules. Internal: the cell
// issues it, as SystemOperator with the platform flag, before the first
// command it applies under rules other than the room's. From its version on
// the room runs under the new rules; what was applied before keeps the
// outcome it had, and ignited rockets keep their launch time and level.
type SetRules struct {
	Rules RulesSpec `json:"rules"`
	// KeepsDay keeps the business day under way through the switch: its
	// number under the new rules is made the one the room records
	// (Economy.DayShift), so the next reset comes at the new rules' next
	// day start. Without it (rows logged before it) a switch that moved the
	// day start later numbered the day under way lower than the recorded
	// one, and the reset waited until the new numbers passed it, up to
	// about two days. NewSetRules sets it.
	KeepsDay bool `json:"keeps_day,omitempty"`
}

// NewSetRules returns the command that switches a room to r.
func NewSetRules(r *Rules) *SetRules { return &SetRules{Rules: r.Spec(), KeepsDay: true} }

// Type names the command.
func (*SetRules) Type() CommandType { return CmdSetRules }

func (c *SetRules) validate(env *Envelope) error {
	if !env.Platform || env.Operator != SystemOperator {
		return ErrPermission
	}
	_, err := c.Rules.Rules()
	return err
}

// apply switches the rules. When the level's fuel already reaches its new
// threshold, the fuel is given again under the new rules, contributor by
// contributor in rank order, so the level ignites at the switch's time as a
// gift would have ignited it (launching after the new countdown) and every
// level keeps its contributors.
func (c *SetRules) apply(s *State, env *Envelope) ([]Event, error) {
	rules, err := c.Rules.Rules()
	if err != nil {
		return nil, err
	}
	if s.rules().Digest() == rules.Digest() {
		return nil, ErrNoChange
	}
	top, level, threshold := s.Economy.Top, s.Economy.Rocket.Level, s.RocketThreshold()
	s.SetRules(rules)
	if c.KeepsDay {
		s.Economy.DayShift = s.Economy.Day - rules.Day(env.At)
	}
	var ignitions []Event
	if rk := &s.Economy.Rocket; s.RocketThreshold() > 0 && rk.Fuel >= s.RocketThreshold() {
		prior := RankOf(rk.Contributors)
		rk.Fuel = 0
		clear(rk.Contributors)
		for _, e := range prior {
			ignitions = append(ignitions, s.fuel(e.UserID, e.Value, env)...)
		}
	}
	var events []Event
	if !slices.Equal(top, s.Economy.Top) {
		events = append(events, s.rankEvent())
	}
	if len(ignitions) > 0 || level != s.Economy.Rocket.Level || threshold != s.RocketThreshold() {
		events = append(events, s.fuelEvent())
	}
	return append(events, ignitions...), nil
}
