package room

import (
	"slices"
	"testing"
	"time"
)

func TestSetRulesRefusals(t *testing.T) {
	other := &Rules{RankSize: 2, RocketLevels: []RocketLevel{{Fuel: 100, Countdown: time.Second}}}
	cases := []struct {
		name  string
		state func() *State
		env   *Envelope
		want  *Error
	}{
		{"a user", fixture, env(uOwner, NewSetRules(other)), ErrPermission},
		{"platform staff", fixture, platformEnv(NewSetRules(other)), ErrPermission},
		{"the same rules", fixture, sysEnv(NewSetRules(DefaultRules())), ErrNoChange},
		{"an unknown zone", fixture, sysEnv(&SetRules{Rules: RulesSpec{TimeZone: "Mars/Olympus"}}), ErrInvalidArgument},
		{"the host's zone", fixture, sysEnv(&SetRules{Rules: RulesSpec{TimeZone: "Local"}}), ErrInvalidArgument},
		{"a level without fuel", fixture, sysEnv(&SetRules{Rules: RulesSpec{TimeZone: "UTC", RocketLevels: []LevelSpec{{Fuel: 0}}}}), ErrInvalidArgument},
		{"a negative countdown", fixture, sysEnv(&SetRules{Rules: RulesSpec{TimeZone: "UTC", RocketLevels: []LevelSpec{{Fuel: 1, CountdownMs: -1}}}}), ErrInvalidArgument},
		{"a rank too long", fixture, sysEnv(&SetRules{Rules: RulesSpec{TimeZone: "UTC", RankSize: MaxRankSize + 1}}), ErrInvalidArgument},
		{"a closed room", closedFixture, sysEnv(NewSetRules(other)), ErrRoomClosed},
		{"a room being created", creatingFixture, sysEnv(NewSetRules(other)), ErrRoomNotOpen},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.state()
			before := cloneState(s)
			_, err := Apply(s, tc.env)
			requireReason(t, err, tc.want)
			requireUnchanged(t, before, s)
		})
	}
}

func sysEnv(cmd Command) *Envelope {
	e := env(SystemOperator, cmd)
	e.Platform = true
	return e
}

// A switch keeps what was decided before it: the ignited rockets keep their
// launch time and level, and a launch logged under the old rules still
// applies under the new ones.
func TestSetRulesKeepsPendingLaunches(t *testing.T) {
	s := fixture()
	pending := s.PendingLaunches()
	slower := DefaultRules()
	slower.RocketLevels = slices.Clone(slower.RocketLevels)
	slower.RocketLevels[0].Countdown = time.Minute
	if _, err := Apply(s, sysEnv(NewSetRules(slower))); err != nil {
		t.Fatal(err)
	}
	if !slices.EqualFunc(s.PendingLaunches(), pending, func(a, b RocketLaunch) bool {
		return a.RocketID == b.RocketID && a.Level == b.Level && a.LaunchAt == b.LaunchAt
	}) {
		t.Fatalf("launches %+v, want %+v", s.PendingLaunches(), pending)
	}
	if _, err := Apply(s, sysEnv(launchFixtureRocket())); err != nil {
		t.Fatalf("the launch ignited under the old countdown: %v", err)
	}
}

// Lowering the threshold below the level's fuel ignites the level at the
// switch, with the contributors it had, and the new countdown.
func TestSetRulesIgnitesAFullLevel(t *testing.T) {
	s := fixture() // level 1 holds 47 fuel from admin2
	lower := &Rules{RankSize: 10, RocketLevels: []RocketLevel{{Fuel: 30, Countdown: time.Minute}, {Fuel: 20, Countdown: 2 * time.Minute}}}
	e := sysEnv(NewSetRules(lower))
	before := cloneState(s)
	events, err := Apply(s, e)
	if err != nil {
		t.Fatal(err)
	}
	checkSuccess(t, before, s, e, events)
	rk := s.Economy.Rocket
	if rk.Ignitions != before.Economy.Rocket.Ignitions+1 || rk.Level != 0 || rk.Fuel != 27 || rk.Contributors[uAdmin2] != 27 {
		t.Fatalf("rocket %+v", rk)
	}
	last := rk.Launches[len(rk.Launches)-1]
	if last.Level != 1 || last.LaunchAt != tNow+2*time.Minute.Milliseconds() || len(last.Top) != 1 || last.Top[0] != (RankEntry{uAdmin2, 20}) {
		t.Fatalf("launch %+v", last)
	}
	if got := typesOf(events); !slices.Contains(got, EventRoomRocketIgnited) || !slices.Contains(got, EventRoomRocketFuelChanged) {
		t.Fatalf("events %v", got)
	}
}

// A new rank size takes effect at the switch: the visible rank is derived
// again and shown.
func TestSetRulesRankSize(t *testing.T) {
	s := fixture()
	top1 := DefaultRules()
	top1.RankSize = 1
	events, err := Apply(s, sysEnv(NewSetRules(top1)))
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Economy.Top) != 1 || !slices.Equal(typesOf(events), []EventType{EventRoomRankChanged}) {
		t.Fatalf("top %v, events %v", s.Economy.Top, typesOf(events))
	}
}

// The command log records the rules, so a replay needs nothing else, and
// the digest names content, not the value holding it.
func TestSetRulesEncoding(t *testing.T) {
	riyadh := DefaultRules()
	loc, err := LoadZone("Asia/Riyadh")
	if err != nil {
		t.Fatal(err)
	}
	riyadh.Location, riyadh.DayStart = loc, 4*time.Hour
	e := sysEnv(NewSetRules(riyadh))
	payload, err := EncodeCommand(e)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeCommand(testRoomID, e.CommandID, CmdSetRules, payload)
	if err != nil {
		t.Fatal(err)
	}
	r, err := got.Command.(*SetRules).Rules.Rules()
	if err != nil {
		t.Fatal(err)
	}
	if r.Digest() != riyadh.Digest() || r.Digest() == DefaultRules().Digest() || r.Zone() != "Asia/Riyadh" || r.DayStart != 4*time.Hour {
		t.Fatalf("decoded rules %+v", r)
	}
	if (&Rules{}).Digest() != (&Rules{Location: time.UTC}).Digest() {
		t.Fatal("a nil zone and UTC differ")
	}
}

// TestARulesSwitchKeepsTheDayUnderWay: a switch that moves the day start
// later (here to 23:00, at 22:13) keeps the day under way, which ends at
// the new rules' next day start, not about two days later; day numbers go
// on. A switch logged before KeepsDay replays as it applied then.
func TestARulesSwitchKeepsTheDayUnderWay(t *testing.T) {
	later := DefaultRules()
	later.DayStart = 23 * time.Hour
	at := tNextDay + 30*60*1000 // 00:30 the next day: past 23:00 today

	s := fixture() // heat 10_047 on testDay
	day := s.Economy.Day
	if _, err := Apply(s, sysEnv(NewSetRules(later))); err != nil { // at 22:13
		t.Fatal(err)
	}
	if s.Economy.Day != day || s.Economy.Heat == 0 {
		t.Fatalf("the switch itself moved the day to %d (heat %d); want the day under way, %d, kept", s.Economy.Day, s.Economy.Heat, day)
	}
	if _, err := Apply(s, envAt(uOwner, at, gift(1, 1, uAlice))); err != nil {
		t.Fatal(err)
	}
	if s.Economy.Heat != 1 || s.Economy.Day != day+1 {
		t.Fatalf("after the new rules' day start: heat %d on day %d; want 1 on day %d", s.Economy.Heat, s.Economy.Day, day+1)
	}

	old := fixture()
	cmd := NewSetRules(later)
	cmd.KeepsDay = false
	if _, err := Apply(old, sysEnv(cmd)); err != nil {
		t.Fatal(err)
	}
	if _, err := Apply(old, envAt(uOwner, at, gift(1, 1, uAlice))); err != nil {
		t.Fatal(err)
	}
	if old.Economy.Heat == 1 {
		t.Fatal("a switch logged before KeepsDay no longer replays as it applied")
	}
}
