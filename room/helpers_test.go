package room

import (
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// The fixture room: who is who, and when things happened.
const (
	testRoomID = "room-1"

	uOwner        int64 = 1  // owner, on seat 0
	uHost         int64 = 2  // host (admin), on seat 1
	uAdmin        int64 = 3  // admin, on seat 2 with the mic off
	uAdmin2       int64 = 4  // admin, in the room, not seated; gave alice and bob their charm
	uAlice        int64 = 5  // member on seat 3, mic on, has charm
	uBob          int64 = 6  // member on seat 4, which an admin muted
	uCarol        int64 = 7  // member, not seated, chat-muted
	uVisitor      int64 = 9  // never joined
	uBanned       int64 = 10 // banned until tNow+1h
	uBannedAlways int64 = 11 // banned permanently
	uBanExpired   int64 = 12 // ban ended just before tNow
	uMuteExpired  int64 = 13 // chat mute ended just before tNow
	uStaff        int64 = 99 // platform staff when Platform is set

	t0   int64 = 1_700_000_000_000 // when the fixture room was created
	tNow int64 = t0 + 10_000       // the default command time

	banUntil  = tNow + 3_600_000
	muteUntil = tNow + 600_000

	testDay  int64 = 19675             // the UTC business day of t0 and tNow (2023-11-14)
	tNextDay int64 = 1_700_006_400_000 // 2023-11-15 00:00 UTC: the next business day starts
)

// fixture returns an open room with eight seats:
//
//	0 owner (mic on)   1 host (mic on)   2 admin (mic off)   3 alice (mic on, charm 40)
//	4 bob (seat muted, charm 7) 5 locked, empty   6 muted, empty      7 empty
//
// and the economy of its business day (default rules): the owner's gift of
// 10000 to admin2 (not seated) ignited rocket 1 at t0, which launches at
// tNow; then admin2 gave alice 40 and bob 7, the fuel of level 1.
//
// It is built by hand, not through Apply, so the tests of Apply do not depend on Apply.
func fixture() *State {
	s := &State{
		RoomID:      testRoomID,
		Version:     41,
		Status:      StatusOpen,
		OwnerUserID: uOwner,
		HostUserID:  uHost,
		Mode:        "party",
		Region:      "sg",
		CreatedAt:   t0,
		Profile: Profile{
			Title: "Friday", Notice: "be nice", CoverURL: "https://img.example/c.png",
			Background: "https://img.example/bg1.png", ChatEnabled: true,
		},
		Admins:  map[int64]struct{}{uOwner: {}, uHost: {}, uAdmin: {}, uAdmin2: {}},
		Members: map[int64]*Member{},
		Seats: []Seat{
			{UserID: uOwner, MicOn: true, OccupiedSince: t0 + 100},
			{UserID: uHost, MicOn: true, OccupiedSince: t0 + 200},
			{UserID: uAdmin, OccupiedSince: t0 + 300},
			{UserID: uAlice, MicOn: true, OccupiedSince: t0 + 500, Charm: 40},
			{UserID: uBob, MutedByAdmin: true, OccupiedSince: t0 + 600, Charm: 7},
			{Locked: true},
			{MutedByAdmin: true},
			{},
		},
		Mutes: map[int64]int64{uCarol: muteUntil, uMuteExpired: tNow - 1},
		Bans:  map[int64]int64{uBanned: banUntil, uBannedAlways: permanent, uBanExpired: tNow - 1},
		Economy: Economy{
			Day:     testDay,
			Heat:    10_047,
			Contrib: map[int64]int64{uOwner: 10_000, uAdmin2: 47},
			Top:     []RankEntry{{uOwner, 10_000}, {uAdmin2, 47}},
			Rocket: Rocket{
				Level: 1, Fuel: 47, Ignitions: 1, Contributors: map[int64]int64{uAdmin2: 47},
				Launches: []RocketLaunch{{RocketID: 1, Level: 0, IgnitedAt: t0, LaunchAt: t0 + 10_000, Day: testDay, Top: []RankEntry{{uOwner, 10_000}}}},
			},
		},
	}
	s.BanReasons, s.MuteReasons = map[int64]string{}, map[int64]string{}
	s.MicRequests, s.MicInvites = map[int64]*MicEntry{}, map[int64]*MicEntry{}
	for _, id := range []int64{uOwner, uHost, uAdmin, uAdmin2, uAlice, uBob, uCarol} {
		s.Members[id] = &Member{
			UserID: id, JoinedAt: t0 + id, Nickname: fmt.Sprintf("user%d", id),
			AvatarURL: fmt.Sprintf("https://img.example/a%d.png", id), Vehicle: "car", EntryEffect: "sparkle",
		}
	}
	s.DeriveExpiry()
	return s
}

// withApproval makes the fixture room require approval to take a seat.
func withApproval(s *State) { s.MicApproval = true }

// withCarolRequest: the room requires approval and carol asked for any seat at tNow-1000.
func withCarolRequest(s *State) {
	s.MicApproval = true
	s.MicRequests[uCarol] = &MicEntry{UserID: uCarol, SeatIndex: AnySeat, By: uCarol, At: tNow - 1000, ExpiresAt: tNow - 1000 + MicRequestTTL}
}

// withCarolInvite: the admin invited carol to seat 7 at tNow-1000.
func withCarolInvite(s *State) {
	s.MicInvites[uCarol] = &MicEntry{UserID: uCarol, SeatIndex: 7, By: uAdmin, At: tNow - 1000, ExpiresAt: tNow - 1000 + MicInviteTTL}
}

// withExpiredRequest: carol's request for seat 7 expired at tNow.
func withExpiredRequest(s *State) {
	s.MicApproval = true
	s.MicRequests[uCarol] = &MicEntry{UserID: uCarol, SeatIndex: 7, By: uCarol, At: tNow - MicRequestTTL, ExpiresAt: tNow}
}

// closedFixture is the fixture room after its owner closed it.
func closedFixture() *State {
	s := fixture()
	if _, err := Apply(s, envAt(uOwner, tNow-5, &CloseRoom{})); err != nil {
		panic(err)
	}
	return s
}

// creatingFixture is a room whose metadata exists but whose CreateRoom has not run.
func creatingFixture() *State {
	return Genesis(testRoomID, uOwner, uHost, 10, "party", "")
}

func envAt(op, at int64, cmd Command) *Envelope {
	return &Envelope{RoomID: testRoomID, CommandID: "cmd-1", Operator: op, At: at, Rev: Rev, Command: cmd}
}

func env(op int64, cmd Command) *Envelope { return envAt(op, tNow, cmd) }

// platformEnv is a command from platform staff.
func platformEnv(cmd Command) *Envelope {
	e := env(uStaff, cmd)
	e.Platform = true
	return e
}

func strp(s string) *string { return &s }

// cloneState deep-copies s so that a later change to s cannot reach the copy.
// It keeps nil maps nil so reflect.DeepEqual sees exactly what Apply left.
func cloneState(s *State) *State {
	c := *s
	c.Admins = maps.Clone(s.Admins)
	c.Mutes = maps.Clone(s.Mutes)
	c.Bans = maps.Clone(s.Bans)
	if s.Members != nil {
		c.Members = make(map[int64]*Member, len(s.Members))
		for id, m := range s.Members {
			mc := *m
			c.Members[id] = &mc
		}
	}
	if s.Seats != nil {
		c.Seats = append([]Seat(nil), s.Seats...)
	}
	c.Economy = cloneEconomy(s.Economy)
	c.BanReasons = maps.Clone(s.BanReasons)
	c.MuteReasons = maps.Clone(s.MuteReasons)
	c.MicRequests = cloneMicEntries(s.MicRequests)
	c.MicInvites = cloneMicEntries(s.MicInvites)
	return &c
}

func cloneMicEntries(m map[int64]*MicEntry) map[int64]*MicEntry {
	if m == nil {
		return nil
	}
	c := make(map[int64]*MicEntry, len(m))
	for id, e := range m {
		ec := *e
		c[id] = &ec
	}
	return c
}

func cloneEconomy(e Economy) Economy {
	c := e
	c.Contrib = maps.Clone(e.Contrib)
	c.Top = slices.Clone(e.Top)
	c.Rocket.Contributors = maps.Clone(e.Rocket.Contributors)
	if e.Rocket.Launches != nil {
		c.Rocket.Launches = make([]RocketLaunch, len(e.Rocket.Launches))
		for i, l := range e.Rocket.Launches {
			l.Top = slices.Clone(l.Top)
			c.Rocket.Launches[i] = l
		}
	}
	return c
}

// dumpState is a canonical, diffable text form of s.
func dumpState(s *State) string {
	var b strings.Builder
	fmt.Fprintf(&b, "room=%s v=%d status=%s owner=%d host=%d mode=%q region=%q created=%d\n",
		s.RoomID, s.Version, s.Status, s.OwnerUserID, s.HostUserID, s.Mode, s.Region, s.CreatedAt)
	fmt.Fprintf(&b, "profile=%+v\n", s.Profile)
	fmt.Fprintf(&b, "admins=%v (nil=%t)\n", SortedIDs(s.Admins), s.Admins == nil)
	fmt.Fprintf(&b, "members (nil=%t):\n", s.Members == nil)
	for _, id := range SortedIDs(s.Members) {
		fmt.Fprintf(&b, "  %d: %+v\n", id, *s.Members[id])
	}
	for i, seat := range s.Seats {
		fmt.Fprintf(&b, "seat %d: %+v\n", i, seat)
	}
	fmt.Fprintf(&b, "mutes (nil=%t):", s.Mutes == nil)
	for _, id := range SortedIDs(s.Mutes) {
		fmt.Fprintf(&b, " %d:%d", id, s.Mutes[id])
	}
	fmt.Fprintf(&b, "\nbans (nil=%t):", s.Bans == nil)
	for _, id := range SortedIDs(s.Bans) {
		fmt.Fprintf(&b, " %d:%d", id, s.Bans[id])
	}
	e := &s.Economy
	fmt.Fprintf(&b, "\nrules=%+v\neconomy day=%d heat=%d top=%v (nil=%t)\ncontrib (nil=%t):", s.Rules, e.Day, e.Heat, e.Top, e.Top == nil, e.Contrib == nil)
	for _, id := range SortedIDs(e.Contrib) {
		fmt.Fprintf(&b, " %d:%d", id, e.Contrib[id])
	}
	rk := &e.Rocket
	fmt.Fprintf(&b, "\nrocket level=%d fuel=%d ignitions=%d contributors (nil=%t):", rk.Level, rk.Fuel, rk.Ignitions, rk.Contributors == nil)
	for _, id := range SortedIDs(rk.Contributors) {
		fmt.Fprintf(&b, " %d:%d", id, rk.Contributors[id])
	}
	fmt.Fprintf(&b, "\nlaunches (nil=%t): %+v", rk.Launches == nil, rk.Launches)
	fmt.Fprintf(&b, "\nban reasons=%v mute reasons=%v mic approval=%t", s.BanReasons, s.MuteReasons, s.MicApproval)
	for name, m := range map[string]map[int64]*MicEntry{"requests": s.MicRequests, "invites": s.MicInvites} {
		fmt.Fprintf(&b, "\nmic %s (nil=%t):", name, m == nil)
		for _, e := range SortedMicEntries(m) {
			fmt.Fprintf(&b, " %+v", *e)
		}
	}
	return b.String() + "\n"
}

func dumpEvents(events []Event) string {
	var b strings.Builder
	for _, ev := range events {
		fmt.Fprintf(&b, "  %s %+v\n", ev.Type, reflect.Indirect(reflect.ValueOf(ev.Data)))
	}
	if len(events) == 0 {
		b.WriteString("  (none)\n")
	}
	return b.String()
}

// requireStateEqual fails the test when got differs from want in any field.
func requireStateEqual(t testing.TB, want, got *State) {
	t.Helper()
	if !reflect.DeepEqual(want, got) {
		t.Fatalf("state differs\nwant:\n%s\ngot:\n%s", dumpState(want), dumpState(got))
	}
}

// requireUnchanged fails the test when a refused command left a trace in the state.
func requireUnchanged(t testing.TB, before, after *State) {
	t.Helper()
	if !reflect.DeepEqual(before, after) {
		t.Fatalf("a refused command changed the state\nbefore:\n%s\nafter:\n%s", dumpState(before), dumpState(after))
	}
}

// requireReason fails the test unless err carries the sentinel's reason and code.
func requireReason(t testing.TB, err error, want *Error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("error = %v, want reason %q", err, want.Reason)
	}
	var e *Error
	if !errors.As(err, &e) || e.Code != want.Code {
		t.Fatalf("error = %#v, want an *Error with code %q", err, want.Code)
	}
}

// offSeatActions are the RoomMicChanged actions that take a user off a seat
// and so close a mic interval.
var offSeatActions = map[string]bool{
	MicLeave: true, MicMove: true, MicKick: true, MicLockEvict: true,
	MicRoomKick: true, MicRoomClose: true, MicRoomLeave: true,
	MicPresenceTimeout: true, MicOffline: true,
}

// checkMicIntervals checks DESIGN 2.3 "every path off a seat closes the mic
// interval exactly once": each user who left a seat got exactly one
// RoomMicChanged that closes [the time they sat down, the command time], the
// seat they left is empty, and no other event claims to close an interval.
func checkMicIntervals(t testing.TB, before, after *State, e *Envelope, events []Event) {
	t.Helper()
	var closing []*RoomMicChangedEvent
	for _, ev := range events {
		d, ok := ev.Data.(*RoomMicChangedEvent)
		if ev.Type != EventRoomMicChanged || !ok {
			continue
		}
		if offSeatActions[d.Action] {
			closing = append(closing, d)
		} else if d.IntervalStart != 0 || d.IntervalEnd != 0 || d.FromSeatIndex != noSeat {
			t.Errorf("%s event carries an interval or a from seat: %+v", d.Action, *d)
		}
	}
	vacated := 0
	for i, seat := range before.Seats {
		if seat.UserID == noUser || (i < len(after.Seats) && after.Seats[i].UserID == seat.UserID) {
			continue
		}
		vacated++
		var mine []*RoomMicChangedEvent
		for _, d := range closing {
			if d.UserID == seat.UserID {
				mine = append(mine, d)
			}
		}
		if len(mine) != 1 {
			t.Errorf("user %d left seat %d with %d interval-closing events, want 1:\n%s", seat.UserID, i, len(mine), dumpEvents(events))
			continue
		}
		d := mine[0]
		from := d.SeatIndex
		if d.Action == MicMove {
			from = d.FromSeatIndex
		}
		if int(from) != i || d.IntervalStart != seat.OccupiedSince || d.IntervalEnd != e.At || d.At != e.At {
			t.Errorf("user %d left seat %d (sat at %d, command at %d) with %+v", seat.UserID, i, seat.OccupiedSince, e.At, *d)
		}
		if i < len(after.Seats) && after.Seats[i].UserID != noUser {
			t.Errorf("seat %d still holds user %d after user %d left it", i, after.Seats[i].UserID, seat.UserID)
		}
	}
	if vacated != len(closing) {
		t.Errorf("%d seats were vacated but %d events close an interval:\n%s", vacated, len(closing), dumpEvents(events))
	}
}

// checkInvariants checks the rules of DESIGN 2.3 that hold in every state
// reachable from the fixtures, at command time at.
func checkInvariants(t testing.TB, s *State, at int64) {
	t.Helper()
	if n := len(s.Seats); n < MinSeats || n > MaxSeats {
		t.Errorf("room has %d seats", n)
	}
	seated := map[int64]int{}
	for i, seat := range s.Seats {
		if seat.UserID == noUser {
			if seat.MicOn || seat.OccupiedSince != 0 || seat.Charm != 0 {
				t.Errorf("empty seat %d keeps occupant data: %+v", i, seat)
			}
			continue
		}
		if prev, ok := seated[seat.UserID]; ok {
			t.Errorf("user %d sits on seats %d and %d", seat.UserID, prev, i)
		}
		seated[seat.UserID] = i
		if seat.Locked {
			t.Errorf("locked seat %d is occupied by %d", i, seat.UserID)
		}
		if !s.IsMember(seat.UserID) {
			t.Errorf("seat %d is held by %d, who is not in the room", i, seat.UserID)
		}
		if seat.MutedByAdmin && seat.MicOn {
			t.Errorf("seat %d is muted by an admin but its mic is on", i)
		}
	}
	for id, m := range s.Members {
		if m == nil || m.UserID != id {
			t.Errorf("member entry %d is %+v", id, m)
		}
		if s.BannedAt(id, at) {
			t.Errorf("user %d is in the room and banned", id)
		}
	}
	if s.Status != StatusCreating {
		if _, ok := s.Admins[s.OwnerUserID]; !ok {
			t.Errorf("owner %d is not in the admin set", s.OwnerUserID)
		}
	}
	if len(s.Admins) > MaxAdmins || len(s.Members) > MaxMembers {
		t.Errorf("%d admins, %d members", len(s.Admins), len(s.Members))
	}
	if s.Status == StatusClosed && (len(s.Members) != 0 || s.OnMicCount() != 0) {
		t.Errorf("closed room still holds %d members and %d seated users", len(s.Members), s.OnMicCount())
	}
	checkRestrictions(t, s, at)
	checkEconomy(t, s)
	checkMicQueue(t, s)
}

// checkMicQueue checks the mic queue: entries are of members who are not
// seated, within their bounds, for a seat of the room or any seat, and
// requests wait only where approval is required.
func checkMicQueue(t testing.TB, s *State) {
	t.Helper()
	if len(s.MicRequests) > MaxMicRequests || len(s.MicInvites) > MaxMicInvites {
		t.Errorf("%d mic requests, %d invitations", len(s.MicRequests), len(s.MicInvites))
	}
	if len(s.MicRequests) > 0 && !s.MicApproval {
		t.Errorf("mic requests wait in a room that requires no approval")
	}
	for name, m := range map[string]map[int64]*MicEntry{"request": s.MicRequests, "invitation": s.MicInvites} {
		for id, e := range m {
			switch {
			case e.UserID != id:
				t.Errorf("mic %s of %d is filed under %d", name, e.UserID, id)
			case !s.IsMember(id):
				t.Errorf("mic %s of %d, who is not in the room", name, id)
			case s.SeatOf(id) != noSeat:
				t.Errorf("mic %s of %d, who is seated", name, id)
			case e.SeatIndex < AnySeat || int(e.SeatIndex) >= len(s.Seats):
				t.Errorf("mic %s of %d for seat %d", name, id, e.SeatIndex)
			case e.ExpiresAt <= e.At:
				t.Errorf("mic %s of %d: %+v", name, id, *e)
			}
		}
	}
}

// checkRestrictions checks that after a command at time at no ban or mute
// that has ended by then is left, and that the next expiry is the earliest
// end that is not permanent.
func checkRestrictions(t testing.TB, s *State, at int64) {
	t.Helper()
	want := int64(0)
	for what, m := range map[string]map[int64]int64{"ban": s.Bans, "mute": s.Mutes} {
		for user, until := range m {
			if until != permanent && until <= at {
				t.Errorf("user %d's %s ended at %d, still held at %d", user, what, until, at)
			}
			if until != permanent && (want == 0 || until < want) {
				want = until
			}
		}
	}
	if s.NextExpiry() != want {
		t.Errorf("next expiry %d, want %d", s.NextExpiry(), want)
	}
}

// checkEconomy checks the economy rules that hold in every reachable state
// whose rules did not change: heat is the sum of the day's contributions,
// Top is their visible head, the rocket's fuel is its level's contributors'
// sum and below the threshold, and the launches are of today, in launch
// order, with ids already given out.
func checkEconomy(t testing.TB, s *State) {
	t.Helper()
	e, rules := &s.Economy, s.rules()
	var sum int64
	for _, v := range e.Contrib {
		sum += v
	}
	if sum != e.Heat {
		t.Errorf("heat %d, contributions sum to %d", e.Heat, sum)
	}
	if want := topOf(e.Contrib, rules.RankSize); !slices.Equal(e.Top, want) {
		t.Errorf("top %v, want %v", e.Top, want)
	}
	rk := &e.Rocket
	var fuel int64
	for _, v := range rk.Contributors {
		fuel += v
	}
	if th := s.RocketThreshold(); th != 0 && (rk.Fuel != fuel || rk.Fuel >= th) {
		t.Errorf("rocket fuel %d, contributors give %d, threshold %d", rk.Fuel, fuel, th)
	}
	if len(rk.Launches) > MaxRocketLaunches {
		t.Errorf("%d launches wait", len(rk.Launches))
	}
	for i, l := range rk.Launches {
		if l.Day != e.Day || l.RocketID <= 0 || l.RocketID > rk.Ignitions || len(l.Top) > RocketTopContributors {
			t.Errorf("launch %d: %+v (day %d, ignitions %d)", i, l, e.Day, rk.Ignitions)
		}
		if i > 0 && rk.Launches[i-1].LaunchAt > l.LaunchAt {
			t.Errorf("launches out of order: %+v", rk.Launches)
		}
	}
	for _, seat := range s.Seats {
		if seat.Charm < 0 {
			t.Errorf("negative charm: %+v", seat)
		}
	}
}

// checkSuccess checks what every successful Apply must do, whatever the command.
func checkSuccess(t testing.TB, before, after *State, e *Envelope, events []Event) {
	t.Helper()
	if after.Version != before.Version+1 {
		t.Errorf("version %d after %d, want +1", after.Version, before.Version)
	}
	if len(events) == 0 {
		t.Errorf("a successful %s emitted no event", e.Command.Type())
	}
	for _, ev := range events {
		if l := ev.Lanes(); !l.IM && !l.Outbox {
			t.Errorf("event %s has no lane", ev.Type)
		}
	}
	checkInvariants(t, after, e.At)
	checkMicIntervals(t, before, after, e, events)
}

// applyCase is one row of a table test of Apply.
type applyCase struct {
	name  string
	state func() *State // nil: fixture
	env   *Envelope
	err   *Error // the expected refusal; nil for success
	want  []Event
	// change turns a copy of the state before into the expected state after
	// (the version bump is added by the runner); nil means only the version moves.
	change func(s *State)
}

func runApplyCases(t *testing.T, cases []applyCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			mk := tc.state
			if mk == nil {
				mk = fixture
			}
			s := mk()
			before := cloneState(s)
			events, err := Apply(s, tc.env)
			if tc.err != nil {
				requireReason(t, err, tc.err)
				if events != nil {
					t.Errorf("refused command returned events:\n%s", dumpEvents(events))
				}
				requireUnchanged(t, before, s)
				return
			}
			if err != nil {
				t.Fatalf("Apply: %v", err)
			}
			if !reflect.DeepEqual(events, tc.want) {
				t.Errorf("events\ngot:\n%swant:\n%s", dumpEvents(events), dumpEvents(tc.want))
			}
			want := cloneState(before)
			want.Version++
			want.LastAt = max(want.LastAt, tc.env.At)
			if tc.change != nil {
				tc.change(want)
			}
			endRestrictions(want, tc.env.At)
			requireStateEqual(t, want, s)
			checkSuccess(t, before, s, tc.env, events)
		})
	}
}

// endRestrictions is what every applied command does to the bans and mutes,
// written out for expected states: those that ended by at go, and the
// earliest end left is the next expiry.
func endRestrictions(s *State, at int64) {
	s.expiry = 0
	reasons := []map[int64]string{s.BanReasons, s.MuteReasons}
	for i, m := range []map[int64]int64{s.Bans, s.Mutes} {
		for user, until := range m {
			switch {
			case until == permanent:
			case until <= at:
				delete(m, user)
				delete(reasons[i], user)
			case s.expiry == 0 || until < s.expiry:
				s.expiry = until
			}
		}
	}
}

// Event constructors for expected values.

func ev(typ EventType, data any) Event { return Event{Type: typ, Data: data} }

func micEv(d RoomMicChangedEvent) Event { return Event{Type: EventRoomMicChanged, Data: &d} }

// offEv is the event that takes the fixture occupant of seat i off it at tNow.
func offEv(action string, seat int32, op int64) Event {
	occ := fixture().Seats[seat]
	return micEv(RoomMicChangedEvent{
		Action: action, UserID: occ.UserID, SeatIndex: seat, FromSeatIndex: noSeat,
		SeatMuted: occ.MutedByAdmin, OperatorUserID: op,
		IntervalStart: occ.OccupiedSince, IntervalEnd: tNow, At: tNow,
	})
}

// emptySeat empties seat i the way a user leaving it does: the seat keeps
// its lock and admin mute.
func emptySeat(s *State, i int) {
	s.Seats[i] = Seat{Locked: s.Seats[i].Locked, MutedByAdmin: s.Seats[i].MutedByAdmin}
}
