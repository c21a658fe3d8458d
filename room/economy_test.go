package room

import (
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
	_ "time/tzdata" // the zones below, also where the system has no zoneinfo
)

func mustZone(t testing.TB, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

// utcDay is the day number of a UTC calendar date.
func utcDay(y int, m time.Month, d int) int64 {
	return time.Date(y, m, d, 0, 0, 0, 0, time.UTC).Unix() / (24 * 3600)
}

func TestRulesDay(t *testing.T) {
	riyadh := &Rules{Location: mustZone(t, "Asia/Riyadh"), DayStart: 4 * time.Hour}
	berlin := &Rules{Location: mustZone(t, "Europe/Berlin")}
	berlinLate := &Rules{Location: berlin.Location, DayStart: 2*time.Hour + 30*time.Minute}
	at := func(loc *time.Location, y int, m time.Month, d, h, min int) int64 {
		return time.Date(y, m, d, h, min, 0, 0, loc).UnixMilli()
	}
	cases := []struct {
		name  string
		rules *Rules
		at    int64
		want  int64
	}{
		{"UTC epoch", &Rules{}, 0, 0},
		{"UTC last ms of day 0", &Rules{}, msPerDay - 1, 0},
		{"UTC day 1", &Rules{}, msPerDay, 1},
		{"UTC before the epoch", &Rules{}, -1, -1},
		{"UTC a day before the epoch", &Rules{}, -msPerDay, -1},
		{"UTC just over a day before the epoch", &Rules{}, -msPerDay - 1, -2},
		{"UTC fixture", DefaultRules(), tNow, testDay},
		// Riyadh is UTC+3 all year; the day starts at 04:00 there, 01:00 UTC.
		{"Riyadh 03:59:59.999", riyadh, at(riyadh.Location, 2023, 11, 15, 4, 0) - 1, utcDay(2023, 11, 14)},
		{"Riyadh 04:00", riyadh, at(riyadh.Location, 2023, 11, 15, 4, 0), utcDay(2023, 11, 15)},
		{"Riyadh 04:00 is 01:00 UTC", riyadh, at(time.UTC, 2023, 11, 15, 1, 0), utcDay(2023, 11, 15)},
		{"Riyadh 23:59 still the same day", riyadh, at(riyadh.Location, 2023, 11, 15, 23, 59), utcDay(2023, 11, 15)},
		{"Riyadh 00:30 is the day before", riyadh, at(riyadh.Location, 2023, 11, 16, 0, 30), utcDay(2023, 11, 15)},
		{"Riyadh first ms after the epoch", riyadh, 1, -1},
		// Berlin: CET (UTC+1) and CEST (UTC+2); the day starts at local midnight.
		{"Berlin spring-forward day begins", berlin, at(berlin.Location, 2024, 3, 31, 0, 0), utcDay(2024, 3, 31)},
		{"Berlin the ms before it", berlin, at(berlin.Location, 2024, 3, 31, 0, 0) - 1, utcDay(2024, 3, 30)},
		{"Berlin 03:00 CEST that day", berlin, at(time.UTC, 2024, 3, 31, 1, 0), utcDay(2024, 3, 31)},
		{"Berlin the next day begins at 22:00 UTC", berlin, at(time.UTC, 2024, 3, 31, 22, 0), utcDay(2024, 4, 1)},
		{"Berlin fall-back day begins at 22:00 UTC", berlin, at(time.UTC, 2024, 10, 26, 22, 0), utcDay(2024, 10, 27)},
		{"Berlin the day after begins at 23:00 UTC", berlin, at(time.UTC, 2024, 10, 27, 23, 0), utcDay(2024, 10, 28)},
		{"Berlin 23:59 UTC is already the next day", berlin, at(time.UTC, 2024, 10, 27, 22, 59), utcDay(2024, 10, 27)},
		// With the day starting in the hour the clock repeats, the wall clock passes the start twice.
		{"Berlin 02:30 CEST starts the day", berlinLate, at(time.UTC, 2024, 10, 27, 0, 30), utcDay(2024, 10, 27)},
		{"Berlin 02:10 CET is before the start again", berlinLate, at(time.UTC, 2024, 10, 27, 1, 10), utcDay(2024, 10, 26)},
		{"Berlin 02:30 CET", berlinLate, at(time.UTC, 2024, 10, 27, 1, 30), utcDay(2024, 10, 27)},
		{"the last command time", &Rules{}, MaxAt, utcDay(9999, 12, 31)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.rules.Day(tc.at); got != tc.want {
				t.Fatalf("Day(%d) = %d, want %d", tc.at, got, tc.want)
			}
		})
	}
}

func TestRulesValidate(t *testing.T) {
	if err := DefaultRules().Validate(); err != nil {
		t.Fatalf("default rules: %v", err)
	}
	if err := (&Rules{}).Validate(); err != nil {
		t.Fatalf("empty rules (UTC, no rank, no rocket): %v", err)
	}
	bad := &Rules{DayStart: 24 * time.Hour, RankSize: MaxRankSize + 1, RocketLevels: []RocketLevel{{Fuel: 0}, {Fuel: 5, Countdown: -time.Second}}}
	err := bad.Validate()
	if err == nil {
		t.Fatal("bad rules pass")
	}
	for _, want := range []string{"day start", "rank size", "level 0", "level 1"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q does not report %s", err, want)
		}
	}
}

// Expected events of the gift economy.

func heatEv(heat, day int64) Event {
	return ev(EventRoomHeatChanged, &RoomHeatChangedEvent{Heat: heat, BusinessDay: day})
}

// rankEv is RoomRankChanged with the fixture's seat occupants and the given charms, one per seat.
func rankEv(day int64, top []RankEntry, charms ...int64) Event {
	seats := fixture().Seats
	if len(charms) != len(seats) {
		panic("rankEv needs a charm per seat")
	}
	row := make([]SeatCharm, len(seats))
	for i := range seats {
		row[i] = SeatCharm{SeatIndex: int32(i), UserID: seats[i].UserID, Charm: charms[i]}
	}
	return ev(EventRoomRankChanged, &RoomRankChangedEvent{BusinessDay: day, Top: top, Seats: row})
}

func fuelEv(level int32, fuel, threshold, ignitions, day int64) Event {
	return ev(EventRoomRocketFuelChanged, &RoomRocketFuelChangedEvent{
		Level: level, Fuel: fuel, Threshold: threshold, Ignitions: ignitions, BusinessDay: day,
	})
}

func ignitedEv(id int64, level int32, at, launchAt int64, top ...RankEntry) Event {
	return ev(EventRoomRocketIgnited, &RoomRocketIgnitedEvent{
		RocketID: id, Level: level, IgnitedAt: at, LaunchAt: launchAt, BusinessDay: testDay, TopContributors: append([]RankEntry{}, top...),
	})
}

// giftEv is the RoomGiftSent of c from sender at tNow in the fixture room.
func giftEv(sender int64, c *SendGift, heat int64, regional bool, receivers ...GiftReceiver) Event {
	o := c.Outcome
	return ev(EventRoomGiftSent, &RoomGiftSentEvent{
		SenderUserID: sender, Receivers: receivers, GiftID: c.GiftID, GiftName: o.Name, Kind: o.Kind,
		Price: o.Price, Count: c.Count, ComboID: c.ComboID, Cost: c.Cost(), MultiplierBP: o.MultiplierBP,
		Reward: o.Reward, Region: "sg", Regional: regional, BusinessDay: testDay, Heat: heat, At: tNow,
	})
}

func offMic(user int64) GiftReceiver { return GiftReceiver{UserID: user, SeatIndex: noSeat} }

// gift is a gift of the given price a piece.
func gift(price int64, count int32, receivers ...int64) *SendGift {
	return &SendGift{ReceiverUserIDs: receivers, GiftID: "g" + strings.Repeat("x", int(count%3)), Count: count,
		Outcome: GiftOutcome{Name: "Gift", Price: price, Kind: GiftNormal}}
}

func withOutcome(c *SendGift, mod func(o *GiftOutcome)) *SendGift {
	mod(&c.Outcome)
	return c
}

// giftRefusals are SendGift envelopes that Apply and CheckGift refuse, with
// the state each applies to (nil: fixture).
func giftRefusals() []applyCase {
	tooMany := make([]int64, MaxGiftReceivers+1)
	for i := range tooMany {
		tooMany[i] = int64(100 + i)
	}
	return []applyCase{
		{name: "closed room", state: closedFixture, env: env(uCarol, rose(1, uAlice)), err: ErrRoomClosed},
		{name: "room not created", state: creatingFixture, env: env(uCarol, rose(1, uAlice)), err: ErrRoomNotOpen},
		{name: "bad time", env: envAt(uCarol, 0, rose(1, uAlice)), err: ErrBadTime},
		{name: "another room", env: func() *Envelope { e := env(uCarol, rose(1, uAlice)); e.RoomID = "room-2"; return e }(), err: ErrInvalidArgument},
		{name: "sender not in the room", env: env(uVisitor, rose(1, uAlice)), err: ErrNotInRoom},
		{name: "banned sender", env: env(uBanned, rose(1, uAlice)), err: ErrNotInRoom},
		{name: "receiver not in the room", env: env(uCarol, rose(1, uVisitor)), err: ErrReceiverNotInRoom},
		{name: "one receiver not in the room", env: env(uCarol, rose(1, uAlice, uBanned)), err: ErrReceiverNotInRoom},
		{name: "receiver not on mic when required", env: env(uCarol, withOutcome(rose(1, uAlice, uAdmin2), func(o *GiftOutcome) { o.ReceiversOnMic = true })), err: ErrReceiverNotOnMic},
		{name: "self gift", env: env(uCarol, rose(1, uCarol)), err: ErrSelfGift},
		{name: "self among receivers", env: env(uAlice, rose(1, uBob, uAlice)), err: ErrSelfGift},
		{name: "duplicate receivers", env: env(uCarol, rose(1, uAlice, uBob, uAlice)), err: ErrBadReceivers},
		{name: "no receivers", env: env(uCarol, rose(1)), err: ErrBadReceivers},
		{name: "too many receivers", env: env(uCarol, rose(1, tooMany...)), err: ErrBadReceivers},
		{name: "receiver 0", env: env(uCarol, rose(1, 0)), err: ErrBadReceivers},
		{name: "negative receiver", env: env(uCarol, rose(1, -uAlice)), err: ErrBadReceivers},
		{name: "count 0", env: env(uCarol, rose(0, uAlice)), err: ErrCountNotAllowed},
		{name: "negative count", env: env(uCarol, rose(-1, uAlice)), err: ErrCountNotAllowed},
		{name: "count over the maximum", env: env(uCarol, rose(MaxGiftCount+1, uAlice)), err: ErrCountNotAllowed},
		{name: "no gift id", env: env(uCarol, func() *SendGift { c := rose(1, uAlice); c.GiftID = ""; return c }()), err: ErrUnknownGift},
		{name: "gift id with a space", env: env(uCarol, func() *SendGift { c := rose(1, uAlice); c.GiftID = "a rose"; return c }()), err: ErrInvalidArgument},
		{name: "gift id too long", env: env(uCarol, func() *SendGift { c := rose(1, uAlice); c.GiftID = strings.Repeat("g", MaxIDLen+1); return c }()), err: ErrFieldTooLong},
		{name: "combo id not ASCII", env: env(uCarol, func() *SendGift { c := rose(1, uAlice); c.ComboID = "连击"; return c }()), err: ErrInvalidArgument},
		{name: "zero price", env: env(uCarol, withOutcome(rose(1, uAlice), func(o *GiftOutcome) { o.Price = 0 })), err: ErrUnknownGift},
		{name: "negative price", env: env(uCarol, withOutcome(rose(1, uAlice), func(o *GiftOutcome) { o.Price = -10 })), err: ErrUnknownGift},
		{name: "no kind", env: env(uCarol, withOutcome(rose(1, uAlice), func(o *GiftOutcome) { o.Kind = "" })), err: ErrUnknownGift},
		{name: "unknown kind", env: env(uCarol, withOutcome(rose(1, uAlice), func(o *GiftOutcome) { o.Kind = "magic" })), err: ErrUnknownGift},
		{name: "no outcome at all", env: env(uCarol, withOutcome(rose(1, uAlice), func(o *GiftOutcome) { *o = GiftOutcome{} })), err: ErrUnknownGift},
		{name: "name too long", env: env(uCarol, withOutcome(rose(1, uAlice), func(o *GiftOutcome) { o.Name = strings.Repeat("n", MaxGiftNameLen+1) })), err: ErrFieldTooLong},
		{name: "negative reward", env: env(uCarol, withOutcome(rose(1, uAlice), func(o *GiftOutcome) { o.Reward = -1 })), err: ErrInvalidArgument},
		{name: "negative multiplier", env: env(uCarol, withOutcome(rose(1, uAlice), func(o *GiftOutcome) { o.MultiplierBP = -1 })), err: ErrInvalidArgument},
		{name: "negative regional minimum", env: env(uCarol, withOutcome(rose(1, uAlice), func(o *GiftOutcome) { o.RegionalThreshold = -1 })), err: ErrInvalidArgument},
		{name: "cost over the maximum", env: env(uCarol, gift(MaxGiftCost/2+1, 1, uAlice, uBob)), err: ErrInvalidArgument},
		{name: "cost overflows", env: env(uCarol, gift(math.MaxInt64/2, MaxGiftCount, uAlice, uBob)), err: ErrInvalidArgument},
		// The envelope's time starts a new business day: the refusal undoes the reset too.
		{name: "refused on a new business day", env: envAt(uCarol, tNextDay, rose(1, uVisitor)), err: ErrReceiverNotInRoom},
		{name: "refused statically on a new business day", env: envAt(uCarol, tNextDay, rose(0, uAlice)), err: ErrCountNotAllowed},
	}
}

func TestSendGiftRefusals(t *testing.T) {
	runApplyCases(t, giftRefusals())
}

// CheckGift refuses exactly what Apply refuses, and never changes the state.
func TestCheckGift(t *testing.T) {
	for _, tc := range giftRefusals() {
		t.Run(tc.name, func(t *testing.T) {
			mk := tc.state
			if mk == nil {
				mk = fixture
			}
			s := mk()
			before := cloneState(s)
			requireReason(t, CheckGift(s, tc.env), tc.err)
			requireUnchanged(t, before, s)
		})
	}
	t.Run("valid gifts pass and change nothing", func(t *testing.T) {
		for _, e := range []*Envelope{
			env(uCarol, rose(1, uAlice)),
			env(uCarol, rose(1, uAdmin2)),
			env(uCarol, withOutcome(rose(3, uAlice, uBob), func(o *GiftOutcome) { o.ReceiversOnMic = true })),
			envAt(uCarol, tNextDay, rose(1, uAlice)),
		} {
			s := fixture()
			before := cloneState(s)
			if err := CheckGift(s, e); err != nil {
				t.Fatalf("%+v: %v", e.Command, err)
			}
			requireUnchanged(t, before, s)
		}
	})
	t.Run("not a gift", func(t *testing.T) {
		requireReason(t, CheckGift(fixture(), env(uCarol, &TakeMic{SeatIndex: 7})), ErrInvalidArgument)
	})
}

// The fixture's seat charms: owner, host, admin, alice 40, bob 7, then three empty seats.
var fixtureCharms = []int64{0, 0, 0, 40, 7, 0, 0, 0}

func charms(mod func(c []int64)) []int64 {
	c := slices.Clone(fixtureCharms)
	mod(c)
	return c
}

func TestSendGift(t *testing.T) {
	r1 := rose(1, uAlice)
	offMicGift := rose(2, uAdmin2)
	several := rose(3, uAlice, uBob, uAdmin2)
	onMic := withOutcome(rose(1, uAlice, uBob), func(o *GiftOutcome) { o.ReceiversOnMic = true })
	owners := rose(5, uHost)
	lucky := withOutcome(gift(100, 10, uAlice), func(o *GiftOutcome) {
		o.Kind, o.MultiplierBP, o.Reward, o.LuckyRegionalMin, o.RegionalThreshold = GiftLucky, 5*BasisPoints, 5000, 5000, 1_000_000
	})
	luckyMiss := withOutcome(gift(100, 10, uAlice), func(o *GiftOutcome) {
		o.Kind, o.LuckyRegionalMin, o.RegionalThreshold = GiftLucky, 5000, 1_000_000
	})
	big := withOutcome(gift(500, 2, uAdmin2), func(o *GiftOutcome) { o.RegionalThreshold = 1000 })
	combo := func() *SendGift { c := rose(1, uAdmin2); c.ComboID = "combo-9"; return c }()
	top := func(extra ...RankEntry) []RankEntry {
		return append([]RankEntry{{uOwner, 10_000}, {uAdmin2, 47}}, extra...)
	}
	// gave records a sender's gift of value to the day's economy, whose rocket stays on level 1.
	gave := func(s *State, sender, value int64, top []RankEntry) {
		e := &s.Economy
		e.Heat += value
		e.Contrib[sender] += value
		e.Top = top
		e.Rocket.Fuel += value
		e.Rocket.Contributors[sender] += value
	}
	runApplyCases(t, []applyCase{
		{name: "to a seated receiver", env: env(uCarol, r1),
			want: []Event{
				giftEv(uCarol, r1, 10_057, false, GiftReceiver{uAlice, 3, 50}),
				heatEv(10_057, testDay),
				rankEv(testDay, top(RankEntry{uCarol, 10}), charms(func(c []int64) { c[3] = 50 })...),
				fuelEv(1, 57, 50_000, 1, testDay),
			},
			change: func(s *State) { gave(s, uCarol, 10, top(RankEntry{uCarol, 10})); s.Seats[3].Charm = 50 }},
		{name: "off-mic receiver when the gift allows it", env: env(uCarol, offMicGift),
			want: []Event{
				giftEv(uCarol, offMicGift, 10_067, false, offMic(uAdmin2)),
				heatEv(10_067, testDay),
				rankEv(testDay, top(RankEntry{uCarol, 20}), fixtureCharms...),
				fuelEv(1, 67, 50_000, 1, testDay),
			},
			change: func(s *State) { gave(s, uCarol, 20, top(RankEntry{uCarol, 20})) }},
		{name: "several receivers, seated or not", env: env(uCarol, several),
			want: []Event{
				giftEv(uCarol, several, 10_137, false, GiftReceiver{uAlice, 3, 70}, GiftReceiver{uBob, 4, 37}, offMic(uAdmin2)),
				heatEv(10_137, testDay),
				rankEv(testDay, []RankEntry{{uOwner, 10_000}, {uCarol, 90}, {uAdmin2, 47}}, charms(func(c []int64) { c[3], c[4] = 70, 37 })...),
				fuelEv(1, 137, 50_000, 1, testDay),
			},
			change: func(s *State) {
				gave(s, uCarol, 90, []RankEntry{{uOwner, 10_000}, {uCarol, 90}, {uAdmin2, 47}})
				s.Seats[3].Charm, s.Seats[4].Charm = 70, 37
			}},
		{name: "on-mic gift to seated receivers", env: env(uCarol, onMic),
			want: []Event{
				giftEv(uCarol, onMic, 10_067, false, GiftReceiver{uAlice, 3, 50}, GiftReceiver{uBob, 4, 17}),
				heatEv(10_067, testDay),
				rankEv(testDay, top(RankEntry{uCarol, 20}), charms(func(c []int64) { c[3], c[4] = 50, 17 })...),
				fuelEv(1, 67, 50_000, 1, testDay),
			},
			change: func(s *State) {
				gave(s, uCarol, 20, top(RankEntry{uCarol, 20}))
				s.Seats[3].Charm, s.Seats[4].Charm = 50, 17
			}},
		{name: "a seated sender already on top", env: env(uOwner, owners),
			want: []Event{
				giftEv(uOwner, owners, 10_097, false, GiftReceiver{uHost, 1, 50}),
				heatEv(10_097, testDay),
				rankEv(testDay, []RankEntry{{uOwner, 10_050}, {uAdmin2, 47}}, charms(func(c []int64) { c[1] = 50 })...),
				fuelEv(1, 97, 50_000, 1, testDay),
			},
			change: func(s *State) {
				gave(s, uOwner, 50, []RankEntry{{uOwner, 10_050}, {uAdmin2, 47}})
				s.Seats[1].Charm = 50
			}},
		{name: "a lucky win shows regionally", env: env(uCarol, lucky),
			want: []Event{
				giftEv(uCarol, lucky, 11_047, true, GiftReceiver{uAlice, 3, 1040}),
				heatEv(11_047, testDay),
				rankEv(testDay, []RankEntry{{uOwner, 10_000}, {uCarol, 1000}, {uAdmin2, 47}}, charms(func(c []int64) { c[3] = 1040 })...),
				fuelEv(1, 1047, 50_000, 1, testDay),
			},
			change: func(s *State) {
				gave(s, uCarol, 1000, []RankEntry{{uOwner, 10_000}, {uCarol, 1000}, {uAdmin2, 47}})
				s.Seats[3].Charm = 1040
			}},
		{name: "a lucky miss does not", env: env(uCarol, luckyMiss),
			want: []Event{
				giftEv(uCarol, luckyMiss, 11_047, false, GiftReceiver{uAlice, 3, 1040}),
				heatEv(11_047, testDay),
				rankEv(testDay, []RankEntry{{uOwner, 10_000}, {uCarol, 1000}, {uAdmin2, 47}}, charms(func(c []int64) { c[3] = 1040 })...),
				fuelEv(1, 1047, 50_000, 1, testDay),
			},
			change: func(s *State) {
				gave(s, uCarol, 1000, []RankEntry{{uOwner, 10_000}, {uCarol, 1000}, {uAdmin2, 47}})
				s.Seats[3].Charm = 1040
			}},
		{name: "a gift reaching the regional threshold shows regionally", env: env(uCarol, big),
			want: []Event{
				giftEv(uCarol, big, 11_047, true, offMic(uAdmin2)),
				heatEv(11_047, testDay),
				rankEv(testDay, []RankEntry{{uOwner, 10_000}, {uCarol, 1000}, {uAdmin2, 47}}, fixtureCharms...),
				fuelEv(1, 1047, 50_000, 1, testDay),
			},
			change: func(s *State) { gave(s, uCarol, 1000, []RankEntry{{uOwner, 10_000}, {uCarol, 1000}, {uAdmin2, 47}}) }},
		{name: "the combo id is carried", env: env(uCarol, combo),
			want: []Event{
				giftEv(uCarol, combo, 10_057, false, offMic(uAdmin2)),
				heatEv(10_057, testDay),
				rankEv(testDay, top(RankEntry{uCarol, 10}), fixtureCharms...),
				fuelEv(1, 57, 50_000, 1, testDay),
			},
			change: func(s *State) { gave(s, uCarol, 10, top(RankEntry{uCarol, 10})) }},
	})
}

func TestGiftRegionalDisplay(t *testing.T) {
	s := fixture()
	events, err := Apply(s, env(uCarol, withOutcome(gift(500, 2, uAdmin2), func(o *GiftOutcome) { o.RegionalThreshold = 1000 })))
	if err != nil {
		t.Fatal(err)
	}
	region, show := events[0].Data.(*RoomGiftSentEvent).RegionalDisplay()
	if region != "sg" || !show {
		t.Fatalf("RegionalDisplay = %q, %t", region, show)
	}
}

func typesOf(events []Event) []EventType {
	out := make([]EventType, len(events))
	for i, e := range events {
		out[i] = e.Type
	}
	return out
}

// TestGiftRank follows a top 3 through ties, entries, a push-out and a
// re-entry, and checks that RoomRankChanged comes only when the visible top
// or a seat's charm changed.
func TestGiftRank(t *testing.T) {
	s := fixture()
	rules := DefaultRules()
	rules.RankSize = 3
	s.SetRules(rules)
	heart := func(n int32, receivers ...int64) *SendGift { return gift(1, n, receivers...) }
	withRank := []EventType{EventRoomGiftSent, EventRoomHeatChanged, EventRoomRankChanged, EventRoomRocketFuelChanged}
	noRank := []EventType{EventRoomGiftSent, EventRoomHeatChanged, EventRoomRocketFuelChanged}
	steps := []struct {
		name   string
		sender int64
		cmd    *SendGift
		types  []EventType
		top    []RankEntry
	}{
		{"carol ties admin2 and ranks after the lower id", uCarol, heart(47, uAdmin2), withRank,
			[]RankEntry{{uOwner, 10_000}, {uAdmin2, 47}, {uCarol, 47}}},
		{"alice ties too and pushes carol out", uAlice, heart(47, uAdmin2), withRank,
			[]RankEntry{{uOwner, 10_000}, {uAdmin2, 47}, {uAlice, 47}}},
		{"a small sender outside the top, to an off-mic receiver", uHost, heart(10, uAdmin2), noRank,
			[]RankEntry{{uOwner, 10_000}, {uAdmin2, 47}, {uAlice, 47}}},
		{"carol comes back in above the tie", uCarol, heart(1, uAdmin2), withRank,
			[]RankEntry{{uOwner, 10_000}, {uCarol, 48}, {uAdmin2, 47}}},
		{"a sender outside the top charms a seat", uBob, heart(1, uAlice), withRank,
			[]RankEntry{{uOwner, 10_000}, {uCarol, 48}, {uAdmin2, 47}}},
		{"the leader grows", uOwner, heart(5, uAdmin2), withRank,
			[]RankEntry{{uOwner, 10_005}, {uCarol, 48}, {uAdmin2, 47}}},
	}
	for _, st := range steps {
		before := cloneState(s)
		e := env(st.sender, st.cmd)
		events, err := Apply(s, e)
		if err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		checkSuccess(t, before, s, e, events)
		if got := typesOf(events); !slices.Equal(got, st.types) {
			t.Errorf("%s: events %v, want %v", st.name, got, st.types)
		}
		if !slices.Equal(s.Economy.Top, st.top) {
			t.Errorf("%s: top %v, want %v", st.name, s.Economy.Top, st.top)
		}
		if i := slices.Index(typesOf(events), EventRoomRankChanged); i >= 0 {
			if got := events[i].Data.(*RoomRankChangedEvent).Top; !slices.Equal(got, st.top) {
				t.Errorf("%s: event top %v, want %v", st.name, got, st.top)
			}
		}
	}
	if got := s.Economy.Contrib; got[uHost] != 10 || got[uBob] != 1 || len(got) != 6 {
		t.Errorf("contributions %v", got)
	}
}

// economyFixture is the fixture room at the start of its business day under
// rules: nothing given yet, no charm, the rocket at level 0.
func economyFixture(rules *Rules) func() *State {
	return func() *State {
		s := fixture()
		for i := range s.Seats {
			s.Seats[i].Charm = 0
		}
		s.Rules = rules
		s.Economy = Economy{Day: rules.Day(tNow), Contrib: map[int64]int64{}, Rocket: Rocket{Contributors: map[int64]int64{}}}
		return s
	}
}

func TestRocketSingleIgnition(t *testing.T) {
	// Level 1 holds 47 of 50000: a gift of 49953 fills it exactly.
	fill := gift(49_953, 1, uAdmin2)
	top := []RankEntry{{uOwner, 10_000}, {uCarol, 49_953}, {uAdmin2, 47}}
	slices.SortFunc(top, compareRank)
	runApplyCases(t, []applyCase{
		{name: "a gift fills the level", env: env(uCarol, fill),
			want: []Event{
				giftEv(uCarol, fill, 60_000, false, offMic(uAdmin2)),
				heatEv(60_000, testDay),
				rankEv(testDay, top, fixtureCharms...),
				fuelEv(2, 0, 200_000, 2, testDay),
				ignitedEv(2, 1, tNow, tNow+10_000, RankEntry{uCarol, 49_953}, RankEntry{uAdmin2, 47}),
			},
			change: func(s *State) {
				s.Economy.Heat = 60_000
				s.Economy.Contrib[uCarol] = 49_953
				s.Economy.Top = top
				s.Economy.Rocket = Rocket{Level: 2, Ignitions: 2, Contributors: map[int64]int64{}, Launches: []RocketLaunch{
					fixture().Economy.Rocket.Launches[0],
					{RocketID: 2, Level: 1, IgnitedAt: tNow, LaunchAt: tNow + 10_000, Day: testDay, Top: []RankEntry{{uCarol, 49_953}, {uAdmin2, 47}}},
				}}
			}},
	})
}

// One gift fills level 1, 2 and 3, wraps to level 0, fills it and leaves 123
// in level 1. The launches stay in launch order: level 0's rocket counts down
// 10s like level 1's, so it launches before levels 2 and 3.
func TestRocketOverflowAcrossLevels(t *testing.T) {
	const value = 49_953 + 200_000 + 1_000_000 + 10_000 + 123
	huge := gift(value, 1, uAdmin2)
	s := fixture()
	before := cloneState(s)
	e := env(uCarol, huge)
	events, err := Apply(s, e)
	if err != nil {
		t.Fatal(err)
	}
	checkSuccess(t, before, s, e, events)
	wantEvents := []Event{
		giftEv(uCarol, huge, 10_047+value, false, offMic(uAdmin2)),
		heatEv(10_047+value, testDay),
		rankEv(testDay, []RankEntry{{uCarol, value}, {uOwner, 10_000}, {uAdmin2, 47}}, fixtureCharms...),
		fuelEv(1, 123, 50_000, 5, testDay),
		ignitedEv(2, 1, tNow, tNow+10_000, RankEntry{uCarol, 49_953}, RankEntry{uAdmin2, 47}),
		ignitedEv(3, 2, tNow, tNow+15_000, RankEntry{uCarol, 200_000}),
		ignitedEv(4, 3, tNow, tNow+20_000, RankEntry{uCarol, 1_000_000}),
		ignitedEv(5, 0, tNow, tNow+10_000, RankEntry{uCarol, 10_000}),
	}
	if !reflect.DeepEqual(events, wantEvents) {
		t.Fatalf("events\ngot:\n%swant:\n%s", dumpEvents(events), dumpEvents(wantEvents))
	}
	rk := s.Economy.Rocket
	if rk.Level != 1 || rk.Fuel != 123 || rk.Ignitions != 5 || !reflect.DeepEqual(rk.Contributors, map[int64]int64{uCarol: 123}) {
		t.Fatalf("rocket %+v", rk)
	}
	var order []int64
	for _, l := range rk.Launches {
		order = append(order, l.RocketID)
	}
	if !slices.Equal(order, []int64{1, 2, 5, 3, 4}) {
		t.Fatalf("launch order %v", order)
	}
}

// Each sender's contribution to a level is the part of their gift that went into it.
func TestRocketContributorSplit(t *testing.T) {
	rules := &Rules{RankSize: 10, RocketLevels: []RocketLevel{{Fuel: 100, Countdown: time.Second}, {Fuel: 200, Countdown: 2 * time.Second}}}
	s := economyFixture(rules)()
	steps := []struct {
		sender, value int64
		launches      []RocketLaunch // the new ones
		level         int32
		fuel          int64
		contributors  map[int64]int64
	}{
		{uAlice, 60, nil, 0, 60, map[int64]int64{uAlice: 60}},
		{uBob, 70, []RocketLaunch{{RocketID: 1, Level: 0, Top: []RankEntry{{uAlice, 60}, {uBob, 40}}}},
			1, 30, map[int64]int64{uBob: 30}},
		{uCarol, 500, []RocketLaunch{
			{RocketID: 2, Level: 1, Top: []RankEntry{{uCarol, 170}, {uBob, 30}}},
			{RocketID: 3, Level: 0, Top: []RankEntry{{uCarol, 100}}},
			{RocketID: 4, Level: 1, Top: []RankEntry{{uCarol, 200}}},
		}, 0, 30, map[int64]int64{uCarol: 30}},
	}
	at := tNow
	var want []RocketLaunch
	for i, st := range steps {
		at += 1000
		e := envAt(st.sender, at, gift(st.value, 1, uAdmin2))
		before := cloneState(s)
		events, err := Apply(s, e)
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		checkSuccess(t, before, s, e, events)
		for _, l := range st.launches {
			l.IgnitedAt, l.Day = at, testDay
			l.LaunchAt = at + rules.RocketLevels[l.Level].Countdown.Milliseconds()
			want = append(want, l)
		}
		slices.SortStableFunc(want, func(a, b RocketLaunch) int { return int(a.LaunchAt - b.LaunchAt) })
		rk := s.Economy.Rocket
		if rk.Level != st.level || rk.Fuel != st.fuel || !reflect.DeepEqual(rk.Contributors, st.contributors) {
			t.Errorf("step %d: rocket level %d fuel %d contributors %v", i, rk.Level, rk.Fuel, rk.Contributors)
		}
		if !reflect.DeepEqual(rk.Launches, want) {
			t.Errorf("step %d: launches\n got %+v\nwant %+v", i, rk.Launches, want)
		}
		if got := len(events) - 4; got != len(st.launches) {
			t.Errorf("step %d: %d ignition events, want %d", i, got, len(st.launches))
		}
	}
	if s.PendingLaunches()[0].RocketID != 1 || len(s.PendingLaunches()) != 4 {
		t.Fatalf("pending %+v", s.PendingLaunches())
	}
}

// While MaxRocketLaunches rockets wait, the rocket fills to one below its
// threshold and ignites again once a launch makes room.
func TestRocketLaunchQueueIsBounded(t *testing.T) {
	rules := &Rules{RankSize: 10, RocketLevels: []RocketLevel{{Fuel: 10, Countdown: time.Hour}}}
	s := economyFixture(rules)()
	e := env(uCarol, gift(10*MaxRocketLaunches+15, 1, uAdmin2))
	before := cloneState(s)
	events, err := Apply(s, e)
	if err != nil {
		t.Fatal(err)
	}
	checkSuccess(t, before, s, e, events)
	rk := &s.Economy.Rocket
	if len(events) != 4+MaxRocketLaunches || len(rk.Launches) != MaxRocketLaunches || rk.Ignitions != MaxRocketLaunches || rk.Fuel != 9 {
		t.Fatalf("%d events, %d launches, %d ignitions, fuel %d", len(events), len(rk.Launches), rk.Ignitions, rk.Fuel)
	}
	if s.Economy.Heat != 10*MaxRocketLaunches+15 {
		t.Fatalf("heat %d: the whole gift counts", s.Economy.Heat)
	}
	// Full: a gift changes no rocket state but its fuel event still shows it.
	events, err = Apply(s, env(uAlice, gift(5, 1, uAdmin2)))
	if err != nil {
		t.Fatal(err)
	}
	if rk.Fuel != 9 || rk.Ignitions != MaxRocketLaunches || typesOf(events)[len(events)-1] != EventRoomRocketFuelChanged {
		t.Fatalf("full queue: fuel %d, ignitions %d, events %v", rk.Fuel, rk.Ignitions, typesOf(events))
	}
	// A launch makes room: the next gift ignites rocket 1001.
	first := rk.Launches[0]
	if _, err := Apply(s, systemEnv(first.LaunchAt, first.LaunchCommand())); err != nil {
		t.Fatal(err)
	}
	events, err = Apply(s, envAt(uAlice, first.LaunchAt, gift(1, 1, uAdmin2)))
	if err != nil {
		t.Fatal(err)
	}
	if rk.Ignitions != MaxRocketLaunches+1 || len(rk.Launches) != MaxRocketLaunches || typesOf(events)[len(events)-1] != EventRoomRocketIgnited {
		t.Fatalf("after a launch: %d ignitions, %d launches, events %v", rk.Ignitions, len(rk.Launches), typesOf(events))
	}
}

func TestRocketDisabled(t *testing.T) {
	rules := &Rules{RankSize: 10}
	s := economyFixture(rules)()
	e := env(uCarol, gift(1_000_000, 1, uAlice))
	before := cloneState(s)
	events, err := Apply(s, e)
	if err != nil {
		t.Fatal(err)
	}
	checkSuccess(t, before, s, e, events)
	if got := typesOf(events); !slices.Equal(got, []EventType{EventRoomGiftSent, EventRoomHeatChanged, EventRoomRankChanged}) {
		t.Fatalf("events %v", got)
	}
	if rk := s.Economy.Rocket; rk.Fuel != 0 || rk.Ignitions != 0 || len(rk.Contributors) != 0 || s.RocketThreshold() != 0 {
		t.Fatalf("rocket %+v, threshold %d", rk, s.RocketThreshold())
	}
}

func TestSetRules(t *testing.T) {
	s := fixture()
	s.Economy.Contrib[uCarol] = 30
	s.Economy.Top = append(s.Economy.Top, RankEntry{uCarol, 30})
	s.SetRules(&Rules{RankSize: 2, RocketLevels: []RocketLevel{{Fuel: 100}}})
	if want := []RankEntry{{uOwner, 10_000}, {uAdmin2, 47}}; !slices.Equal(s.Economy.Top, want) {
		t.Fatalf("top %v, want %v", s.Economy.Top, want)
	}
	// Level 1 no longer exists: the rocket charges level 0 with the fuel it had.
	if rk := s.Economy.Rocket; rk.Level != 0 || rk.Fuel != 47 || s.RocketThreshold() != 100 {
		t.Fatalf("rocket %+v, threshold %d", rk, s.RocketThreshold())
	}
	s.SetRules(nil)
	if len(s.Economy.Top) != 3 || s.Rules != nil || s.RocketThreshold() != 10_000 {
		t.Fatalf("back to the defaults: top %v, threshold %d", s.Economy.Top, s.RocketThreshold())
	}
	// A level whose threshold the new rules lowered below its fuel ignites with the next gift.
	s.SetRules(&Rules{RocketLevels: []RocketLevel{{Fuel: 20, Countdown: time.Second}}})
	events, err := Apply(s, env(uCarol, gift(1, 1, uAdmin2)))
	if err != nil {
		t.Fatal(err)
	}
	if rk := s.Economy.Rocket; rk.Fuel != 8 || rk.Ignitions != 3 || typesOf(events)[len(events)-1] != EventRoomRocketIgnited {
		t.Fatalf("rocket %+v, events %v", rk, typesOf(events))
	}
}

// riyadhRules start the business day at 04:00 in Riyadh (UTC+3): 01:00 UTC.
func riyadhRules(t testing.TB) *Rules {
	r := DefaultRules()
	r.Location, r.DayStart = mustZone(t, "Asia/Riyadh"), 4*time.Hour
	return r
}

func TestBusinessDayReset(t *testing.T) {
	rules := riyadhRules(t)
	boundary := time.Date(2023, 11, 15, 1, 0, 0, 0, time.UTC).UnixMilli()
	newDay := utcDay(2023, 11, 15)
	if rules.Day(tNow) != testDay || rules.Day(boundary-1) != testDay || rules.Day(boundary) != newDay {
		t.Fatalf("the test's days are off: %d %d %d", rules.Day(tNow), rules.Day(boundary-1), rules.Day(boundary))
	}
	inRiyadh := func() *State { s := fixture(); s.Rules = rules; return s }
	chatOff := func(op int64) []Event {
		return []Event{ev(EventRoomChatEnabledChanged, &RoomChatEnabledChangedEvent{Enabled: false, OperatorUserID: op})}
	}
	reset := func(s *State) {
		s.Economy = Economy{Day: newDay, Contrib: map[int64]int64{}, Rocket: Rocket{Ignitions: 1, Contributors: map[int64]int64{}}}
		for i := range s.Seats {
			s.Seats[i].Charm = 0
		}
	}
	r1 := rose(1, uAlice)
	runApplyCases(t, []applyCase{
		{name: "the last ms of the day", state: inRiyadh, env: envAt(uAdmin, boundary-1, &SetChatEnabled{}),
			want: chatOff(uAdmin), change: func(s *State) { s.Profile.ChatEnabled = false }},
		{name: "the first command of the new day resets", state: inRiyadh, env: envAt(uAdmin, boundary, &SetChatEnabled{}),
			want:   []Event{heatEv(0, newDay), rankEv(newDay, []RankEntry{}, 0, 0, 0, 0, 0, 0, 0, 0), fuelEv(0, 0, 10_000, 1, newDay), chatOff(uAdmin)[0]},
			change: func(s *State) { reset(s); s.Profile.ChatEnabled = false }},
		{name: "a gift on the new day counts from zero and reports each value once", state: inRiyadh, env: envAt(uCarol, boundary, r1),
			want: []Event{
				func() Event {
					e := giftEv(uCarol, r1, 10, false, GiftReceiver{uAlice, 3, 10})
					d := e.Data.(*RoomGiftSentEvent)
					d.BusinessDay, d.At = newDay, boundary
					return e
				}(),
				heatEv(10, newDay),
				rankEv(newDay, []RankEntry{{uCarol, 10}}, 0, 0, 0, 10, 0, 0, 0, 0),
				fuelEv(0, 10, 10_000, 1, newDay),
			},
			change: func(s *State) {
				reset(s)
				s.Economy.Heat, s.Economy.Contrib[uCarol], s.Economy.Top = 10, 10, []RankEntry{{uCarol, 10}}
				s.Economy.Rocket.Fuel, s.Economy.Rocket.Contributors[uCarol] = 10, 10
				s.Seats[3].Charm = 10
			}},
		{name: "a reset of nothing reports nothing", state: economyFixture(rules),
			env: envAt(uAdmin, boundary, &SetChatEnabled{}), want: chatOff(uAdmin),
			change: func(s *State) { s.Economy.Day = newDay; s.Profile.ChatEnabled = false }},
		{name: "a refused command keeps yesterday's economy", state: inRiyadh, env: envAt(uAdmin, boundary, &SetChatEnabled{Enabled: true}), err: ErrNoChange},
		{name: "a refused gift keeps yesterday's economy", state: inRiyadh, env: envAt(uCarol, boundary, rose(1, uVisitor)), err: ErrReceiverNotInRoom},
		{name: "a refused launch keeps yesterday's economy", state: inRiyadh, env: systemEnv(boundary, launchFixtureRocket()), err: ErrRocketStale},
	})
}

// Around the autumn clock change the wall clock passes a 02:30 day start
// twice; the room's day never goes back, so the second pass resets nothing.
func TestBusinessDayNeverGoesBack(t *testing.T) {
	rules := DefaultRules()
	rules.Location, rules.DayStart = mustZone(t, "Europe/Berlin"), 2*time.Hour+30*time.Minute
	utc := func(h, m int) int64 { return time.Date(2024, 10, 27, h, m, 0, 0, time.UTC).UnixMilli() }
	s := economyFixture(rules)()
	s.Economy.Day = rules.Day(utc(0, 0))
	s.Economy.Heat, s.Economy.Contrib[uOwner] = 5, 5
	for _, st := range []struct {
		at   int64
		heat int64
		day  int64
	}{
		{utc(0, 29), 6, utcDay(2024, 10, 26)},
		{utc(0, 30), 1, utcDay(2024, 10, 27)}, // 02:30 CEST: the new day
		{utc(1, 10), 2, utcDay(2024, 10, 27)}, // 02:10 CET: Day says the 26th
		{utc(1, 30), 3, utcDay(2024, 10, 27)}, // 02:30 CET: no second reset
	} {
		if _, err := Apply(s, envAt(uCarol, st.at, gift(1, 1, uAdmin2))); err != nil {
			t.Fatal(err)
		}
		if s.Economy.Heat != st.heat || s.Economy.Day != st.day {
			t.Fatalf("at %d: heat %d day %d, want %d %d", st.at, s.Economy.Heat, s.Economy.Day, st.heat, st.day)
		}
	}
}

// systemEnv is an internal command the service submits at time at.
func systemEnv(at int64, cmd Command) *Envelope {
	e := envAt(SystemOperator, at, cmd)
	e.Platform = true
	return e
}

func TestLaunchRocket(t *testing.T) {
	launched := func(at int64) []Event {
		return []Event{ev(EventRoomRocketLaunched, &RoomRocketLaunchedEvent{
			RocketID: 1, Level: 0, LaunchAt: tNow, LaunchedAt: at, TopContributors: []RankEntry{{uOwner, 10_000}},
		})}
	}
	gone := func(s *State) { s.Economy.Rocket.Launches = []RocketLaunch{} }
	with := func(mod func(c *LaunchRocket)) *LaunchRocket {
		c := launchFixtureRocket()
		mod(c)
		return c
	}
	launchedOnce := func() *State {
		s := fixture()
		if _, err := Apply(s, systemEnv(tNow, launchFixtureRocket())); err != nil {
			panic(err)
		}
		return s
	}
	asUser := func(op int64, platform bool) *Envelope {
		e := systemEnv(tNow, launchFixtureRocket())
		e.Operator, e.Platform = op, platform
		return e
	}
	runApplyCases(t, []applyCase{
		{name: "due", env: systemEnv(tNow, launchFixtureRocket()), want: launched(tNow), change: gone},
		{name: "late", env: systemEnv(tNow+5000, launchFixtureRocket()), want: launched(tNow + 5000), change: gone},
		{name: "not due", env: systemEnv(tNow-1, launchFixtureRocket()), err: ErrRocketNotDue},
		{name: "stale after the daily reset", env: systemEnv(tNextDay, launchFixtureRocket()), err: ErrRocketStale},
		{name: "of another day", env: systemEnv(tNow, with(func(c *LaunchRocket) { c.Day = testDay - 1 })), err: ErrRocketStale},
		{name: "wrong level", env: systemEnv(tNow, with(func(c *LaunchRocket) { c.Level = 1 })), err: ErrRocketNotPending},
		{name: "wrong launch time", env: systemEnv(tNow, with(func(c *LaunchRocket) { c.LaunchAt = tNow - 1 })), err: ErrRocketNotPending},
		{name: "unknown rocket", env: systemEnv(tNow, with(func(c *LaunchRocket) { c.RocketID = 2 })), err: ErrRocketNotPending},
		{name: "already launched", state: launchedOnce, env: systemEnv(tNow+1, launchFixtureRocket()), err: ErrRocketNotPending},
		{name: "the owner", env: asUser(uOwner, false), err: ErrPermission},
		{name: "platform staff", env: asUser(uStaff, true), err: ErrPermission},
		{name: "the system operator without the platform flag", env: asUser(SystemOperator, false), err: ErrPermission},
		{name: "closed room", state: closedFixture, env: systemEnv(tNow, launchFixtureRocket()), err: ErrRoomClosed},
	})
}

func TestPendingLaunchesIsACopy(t *testing.T) {
	s := fixture()
	p := s.PendingLaunches()
	if len(p) != 1 || p[0].LaunchCommand() == nil || *p[0].LaunchCommand() != *launchFixtureRocket() {
		t.Fatalf("pending %+v", p)
	}
	p[0].RocketID = 99
	if s.Economy.Rocket.Launches[0].RocketID != 1 {
		t.Fatal("PendingLaunches shares the state's slice")
	}
}

// Event payloads never share memory with the state: the cell encodes them
// after later commands have applied.
func TestEconomyEventsDoNotAliasTheState(t *testing.T) {
	s := fixture()
	events, err := Apply(s, env(uCarol, gift(49_953, 1, uAlice)))
	if err != nil {
		t.Fatal(err)
	}
	before := dumpEvents(events)
	for range 3 {
		if _, err := Apply(s, env(uBob, gift(1, 1, uAlice))); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := Apply(s, systemEnv(tNow+20_000, s.PendingLaunches()[1].LaunchCommand())); err != nil {
		t.Fatal(err)
	}
	if after := dumpEvents(events); after != before {
		t.Fatalf("events changed under later commands\nbefore:\n%safter:\n%s", before, after)
	}
}

func TestBigGiftIsHighOnTheIMLane(t *testing.T) {
	small := Event{Type: EventRoomGiftSent, Data: &RoomGiftSentEvent{}}
	big := Event{Type: EventRoomGiftSent, Data: &RoomGiftSentEvent{Regional: true}}
	if small.Lanes().Priority != PriorityNormal || big.Lanes().Priority != PriorityHigh || !big.Lanes().Outbox {
		t.Fatalf("small %+v, big %+v", small.Lanes(), big.Lanes())
	}
}

func TestLuckyReward(t *testing.T) {
	cases := []struct {
		name       string
		cost, bp   int64
		want       int64
		overflowed bool
	}{
		{"a miss", 1000, 0, 0, false},
		{"half back", 1000, 5000, 500, false},
		{"ten times", 70, 100_000, 700, false},
		{"rounds down", 3, 3333, 0, false},
		{"rounds down above one", 7, 15_000, 10, false},
		{"the largest cost at 1x", MaxGiftCost, BasisPoints, MaxGiftCost, false},
		{"a product beyond 64 bits that fits after division", math.MaxInt64, BasisPoints, math.MaxInt64, false},
		{"a reward beyond int64", math.MaxInt64, 2 * BasisPoints, 0, true},
		{"negative cost", -1, 5000, 0, true},
		{"negative multiplier", 1000, -1, 0, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := LuckyReward(tc.cost, tc.bp)
			if got != tc.want || ok == tc.overflowed {
				t.Fatalf("LuckyReward(%d, %d) = %d, %t; want %d, %t", tc.cost, tc.bp, got, ok, tc.want, !tc.overflowed)
			}
		})
	}
}
