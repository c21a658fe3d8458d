package snapshot_test

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"reflect"
	"slices"
	"testing"
	"time"
	_ "time/tzdata" // Asia/Riyadh, also where the system has no zoneinfo

	"google.golang.org/protobuf/proto"

	roomv1 "hyapp/room-service/gen/room/v1"
	"hyapp/room-service/room"
	"hyapp/room-service/snapshot"
)

const (
	roomID = "room-s"
	owner  = int64(1)
	t0     = int64(1_700_000_000_000)
)

// rules are small enough that a few gifts ignite rockets, in a zone whose
// business day starts at 04:00 local (01:00 UTC).
func rules(t testing.TB) *room.Rules {
	loc, err := time.LoadLocation("Asia/Riyadh")
	if err != nil {
		t.Fatal(err)
	}
	return &room.Rules{
		Location: loc, DayStart: 4 * time.Hour, RankSize: 3,
		RocketLevels: []room.RocketLevel{{Fuel: 100, Countdown: 2 * time.Second}, {Fuel: 250, Countdown: time.Second}, {Fuel: 400, Countdown: 3 * time.Second}},
	}
}

type applier struct {
	t   testing.TB
	s   *room.State
	seq int
}

func (a *applier) env(op, at int64, platform bool, cmd room.Command) *room.Envelope {
	a.seq++
	return &room.Envelope{RoomID: roomID, CommandID: fmt.Sprintf("c-%d", a.seq), Operator: op, Platform: platform, At: at, Command: cmd}
}

func (a *applier) must(op, at int64, cmd room.Command) {
	a.t.Helper()
	if _, err := room.Apply(a.s, a.env(op, at, false, cmd)); err != nil {
		a.t.Fatalf("%s by %d: %v", cmd.Type(), op, err)
	}
}

func gift(price int64, count int32, receivers ...int64) *room.SendGift {
	return &room.SendGift{ReceiverUserIDs: receivers, GiftID: "g", Count: count,
		Outcome: room.GiftOutcome{Name: "G", Price: price, Kind: room.GiftNormal, BalanceAfter: 5}}
}

// busyRoom is an open room with members, seats, a day of gifts, rockets
// waiting and one launched.
func busyRoom(t testing.TB) *room.State {
	s := room.Genesis(roomID, owner, 0, 8, "party", "")
	s.SetRules(rules(t))
	a := &applier{t: t, s: s}
	at := t0
	a.must(owner, at, &room.CreateRoom{OwnerUserID: owner, SeatCount: 8, Mode: "party", Region: "sa", Title: "t"})
	for u := int64(1); u <= 6; u++ {
		a.must(u, at+u, &room.JoinRoom{Nickname: fmt.Sprint("u", u)})
	}
	a.must(2, at+10, &room.TakeMic{SeatIndex: 1})
	a.must(3, at+11, &room.TakeMic{SeatIndex: 4})
	a.must(4, at+20, gift(30, 2, 2, 5))  // 120: ignites level 0
	a.must(5, at+21, gift(7, 1, 3))      // 7
	a.must(6, at+22, gift(150, 3, 2, 3)) // 900: ignites 1, 2 and 0
	a.must(4, at+23, gift(1, 1, 5))      // 1
	a.must(owner, at+24, gift(2, 1, 6))  // 2
	l := s.PendingLaunches()[0]
	e := a.env(room.SystemOperator, l.LaunchAt, true, l.LaunchCommand())
	if _, err := room.Apply(s, e); err != nil {
		t.Fatal(err)
	}
	if len(s.Economy.Contrib) <= 3 || len(s.PendingLaunches()) < 2 || s.Economy.Rocket.Fuel == 0 {
		t.Fatalf("the busy room is not busy: %+v", s.Economy)
	}
	return s
}

// canon makes the nil-or-empty choices of a state the same, so that
// reflect.DeepEqual compares contents.
// sameBytes reports whether a and b encode to the same snapshot bytes.
func sameBytes(t testing.TB, a, b *room.State) bool {
	t.Helper()
	x, err := snapshot.Encode(a)
	if err != nil {
		t.Fatal(err)
	}
	y, err := snapshot.Encode(b)
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Equal(x, y)
}

func canon(s *room.State) *room.State {
	c := *s
	// Equal rules may be held by different values (decoded, shared, or nil
	// for the defaults); the tests compare them by digest and by the
	// snapshot's bytes, which record them.
	c.Rules = nil
	if len(c.Economy.Rocket.Launches) == 0 {
		c.Economy.Rocket.Launches = nil
	}
	if len(c.Economy.Top) == 0 {
		c.Economy.Top = nil
	}
	return &c
}

func TestRoundTripWithEconomy(t *testing.T) {
	s := busyRoom(t)
	payload, err := snapshot.Encode(s)
	if err != nil {
		t.Fatal(err)
	}
	got, err := snapshot.Decode(payload)
	if err != nil {
		t.Fatal(err)
	}
	// The snapshot records the rules: the decoded room runs under them, with
	// the rank of three they define, whatever the defaults are.
	if got.Rules == nil || got.EffectiveRules().Digest() != s.Rules.Digest() || got.EffectiveRules().Zone() != "Asia/Riyadh" {
		t.Fatalf("decoded rules %+v, want %+v", got.Rules, s.Rules)
	}
	if len(got.Economy.Top) != 3 {
		t.Fatalf("top %v", got.Economy.Top)
	}
	if d := snapshot.ToProto(s).GetEconomy().GetRules(); d.GetDigest() != s.Rules.Digest() || len(d.GetRocketLevels()) != 3 || d.GetDayStartMs() != 4*3600*1000 {
		t.Fatalf("rules in the snapshot %v", d)
	}
	got.Rules = s.Rules // equal content, another value
	if !reflect.DeepEqual(canon(s), canon(got)) {
		t.Fatalf("round trip\n got %+v\nwant %+v", got.Economy, s.Economy)
	}
	again, err := snapshot.Encode(got)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(payload, again) {
		t.Fatal("re-encoding the decoded state gives other bytes")
	}

	p := snapshot.ToProto(s)
	e := p.GetEconomy()
	if e.GetBusinessDay() != s.Economy.Day || e.GetHeat() != s.Economy.Heat || len(e.GetRank()) != 3 || len(e.GetContributions()) != len(s.Economy.Contrib) {
		t.Fatalf("economy %v", e)
	}
	for i := 1; i < len(e.GetContributions()); i++ {
		if e.Contributions[i-1].UserId >= e.Contributions[i].UserId {
			t.Fatalf("contributions not sorted by user id: %v", e.GetContributions())
		}
	}
	r := e.GetRocket()
	if r.GetThreshold() != s.RocketThreshold() || r.GetThreshold() == 0 || len(r.GetLaunches()) != len(s.PendingLaunches()) ||
		len(r.GetLaunches()[0].GetTopContributors()) == 0 || r.GetIgnitions() != s.Economy.Rocket.Ignitions {
		t.Fatalf("rocket %v", r)
	}
}

func TestDecodeRejectsBadRules(t *testing.T) {
	for name, mod := range map[string]func(r *roomv1.EconomyRules){
		"unknown zone":    func(r *roomv1.EconomyRules) { r.TimeZone = "Mars/Olympus" },
		"host zone":       func(r *roomv1.EconomyRules) { r.TimeZone = "Local" },
		"no fuel":         func(r *roomv1.EconomyRules) { r.RocketLevels[0].Fuel = 0 },
		"rank too large":  func(r *roomv1.EconomyRules) { r.RankSize = room.MaxRankSize + 1 },
		"day start a day": func(r *roomv1.EconomyRules) { r.DayStartMs = 24 * 3600 * 1000 },
	} {
		t.Run(name, func(t *testing.T) {
			p := snapshot.ToProto(busyRoom(t))
			mod(p.Economy.Rules)
			if _, err := snapshot.FromProto(p); err == nil {
				t.Fatal("bad rules accepted")
			}
		})
	}
}

func TestRoundTripWithoutRules(t *testing.T) {
	// A snapshot stored before rules were recorded: the room ran under the
	// built-in defaults, and decodes under them.
	p := snapshot.ToProto(busyRoom(t))
	p.Economy.Rules = nil
	s, err := snapshot.FromProto(p)
	if err != nil {
		t.Fatal(err)
	}
	if s.Rules != nil || s.EffectiveRules().Digest() != room.DefaultRules().Digest() ||
		s.RocketThreshold() != room.DefaultRules().RocketLevels[s.Economy.Rocket.Level].Fuel {
		t.Fatalf("rules %+v, threshold %d", s.Rules, s.RocketThreshold())
	}
}

func TestRoundTripWithoutEconomy(t *testing.T) {
	// A snapshot written before the economy existed decodes to an empty one.
	p := snapshot.ToProto(room.Genesis(roomID, owner, 0, 4, "", room.StatusOpen))
	p.Economy = nil
	s, err := snapshot.FromProto(p)
	if err != nil {
		t.Fatal(err)
	}
	if s.Economy.Contrib == nil || s.Economy.Rocket.Contributors == nil || s.Economy.Day != 0 || s.Economy.Heat != 0 {
		t.Fatalf("economy %+v", s.Economy)
	}
	if _, err := room.Apply(s, &room.Envelope{RoomID: roomID, CommandID: "c", Operator: 2, At: t0, Command: &room.JoinRoom{}}); err != nil {
		t.Fatal(err)
	}
}

func TestEncodeIsDeterministic(t *testing.T) {
	a, err := snapshot.Encode(busyRoom(t))
	if err != nil {
		t.Fatal(err)
	}
	for range 20 {
		// Another state built alike fills its maps in another order.
		b, err := snapshot.Encode(busyRoom(t))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(a, b) {
			t.Fatal("equal states encode to different bytes")
		}
	}
}

func TestDecodeRejectsACorruptEconomy(t *testing.T) {
	base := snapshot.ToProto(busyRoom(t))
	cases := []struct {
		name string
		mod  func(p *roomv1.RoomSnapshot)
	}{
		{"a contribution twice", func(p *roomv1.RoomSnapshot) {
			p.Economy.Contributions = append(p.Economy.Contributions, p.Economy.Contributions[0])
		}},
		{"a rocket contributor twice", func(p *roomv1.RoomSnapshot) {
			p.Economy.Rocket.Contributors = append(p.Economy.Rocket.Contributors, &roomv1.RankEntry{UserId: 9}, &roomv1.RankEntry{UserId: 9})
		}},
		{"too many launches", func(p *roomv1.RoomSnapshot) {
			for range room.MaxRocketLaunches {
				p.Economy.Rocket.Launches = append(p.Economy.Rocket.Launches, &roomv1.RocketLaunch{RocketId: 1})
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := proto.Clone(base).(*roomv1.RoomSnapshot)
			tc.mod(p)
			if _, err := snapshot.FromProto(p); err == nil {
				t.Fatal("corrupt economy accepted")
			}
		})
	}
}

func TestWithMemberLimit(t *testing.T) {
	p := snapshot.ToProto(busyRoom(t))
	orig := proto.Clone(p)
	for _, limit := range []int{0, 2, 100} {
		q := snapshot.WithMemberLimit(p, limit)
		want := len(p.GetMembers())
		if limit > 0 {
			want = min(want, limit)
		}
		if len(q.GetMembers()) != want || q.GetOnlineCount() != p.GetOnlineCount() {
			t.Errorf("limit %d: %d members, online %d", limit, len(q.GetMembers()), q.GetOnlineCount())
		}
		e := q.GetEconomy()
		if len(e.GetContributions()) != 0 {
			t.Errorf("limit %d: the query answer lists every contribution", limit)
		}
		if e.GetHeat() != p.Economy.Heat || e.GetBusinessDay() != p.Economy.BusinessDay ||
			!proto.Equal(e.GetRocket(), p.Economy.Rocket) || len(e.GetRank()) != len(p.Economy.Rank) {
			t.Errorf("limit %d: economy %v", limit, e)
		}
	}
	if !proto.Equal(p, orig) {
		t.Fatal("WithMemberLimit modified its argument")
	}
	quiet := snapshot.ToProto(room.Genesis(roomID, owner, 0, 4, "", room.StatusOpen))
	if snapshot.WithMemberLimit(quiet, 0) != quiet {
		t.Fatal("a snapshot with nothing to drop was copied")
	}
}

// TestReplayDeterminism drives a room with a random mix of commands, gifts,
// rocket launches and switches of the economy rules across business days.
// Halfway it stores a snapshot and recovers from it as a cell does (decode,
// replay the logged commands; no rules come from outside); the recovered
// state then follows the live one command for command, and both end in the
// same snapshot bytes.
func TestReplayDeterminism(t *testing.T) {
	for seed := range uint64(8) {
		t.Run(fmt.Sprint("seed ", seed), func(t *testing.T) { replay(t, seed) })
	}
}

func replay(t *testing.T, seed uint64) {
	rnd := rand.New(rand.NewPCG(seed, 42))
	r := rules(t)
	live := room.Genesis(roomID, owner, 0, 6, "party", "")
	live.SetRules(r)
	a := &applier{t: t, s: live}
	at := t0
	a.must(owner, at, &room.CreateRoom{OwnerUserID: owner, SeatCount: 6, Region: "sa"})

	const steps = 600
	var snap []byte
	type logged struct {
		id      string
		typ     room.CommandType
		payload []byte
		events  []room.Event
	}
	launched, switched, days := 0, 0, map[int64]bool{}
	var log []logged // the commands after the snapshot
	for i := range steps {
		at += rnd.Int64N(90_000) // ~45s apart
		if i%150 == 149 {
			// Half a day passes now and then: a rules switch keeps the day
			// under way, so the run's days come from the clock.
			at += 12 * 3600 * 1000
		}
		e := nextCommand(a, rnd, at)
		events, err := room.Apply(live, e)
		if err != nil {
			var de *room.Error
			if !errors.As(err, &de) || de.Code == room.CodeInternal {
				t.Fatalf("step %d %s: %v", i, e.Command.Type(), err)
			}
			continue
		}
		if len(events) == 0 && e.Command.Type() != room.CmdSetRules { // a new countdown alone shows nothing
			t.Fatalf("step %d %s: no events", i, e.Command.Type())
		}
		if len(events) > 0 && events[len(events)-1].Type == room.EventRoomRocketLaunched {
			launched++
		}
		if e.Command.Type() == room.CmdSetRules {
			switched++
		}
		days[live.Economy.Day] = true
		if snap != nil {
			p, err := room.EncodeCommand(e)
			if err != nil {
				t.Fatal(err)
			}
			log = append(log, logged{e.CommandID, e.Command.Type(), p, events})
		}
		if snap == nil && i >= steps/2 {
			if snap, err = snapshot.Encode(live); err != nil {
				t.Fatal(err)
			}
		}
	}
	if launched == 0 || len(days) < 2 || switched == 0 {
		t.Fatalf("the run launched %d rockets on %d business days and switched rules %d times", launched, len(days), switched)
	}

	recovered, err := snapshot.Decode(snap)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range log {
		e, err := room.DecodeCommand(roomID, l.id, l.typ, l.payload)
		if err != nil {
			t.Fatal(err)
		}
		events, err := room.Apply(recovered, e)
		if err != nil {
			t.Fatalf("replay %s %s: %v", l.typ, l.payload, err)
		}
		if !reflect.DeepEqual(events, l.events) {
			t.Fatalf("replay %s %s: other events", l.typ, l.payload)
		}
	}
	if !sameBytes(t, live, recovered) {
		t.Fatalf("recovered state differs\n got %+v\nwant %+v", recovered.Economy, live.Economy)
	}
	if !reflect.DeepEqual(canon(live), canon(recovered)) {
		t.Fatal("recovered state differs outside the snapshot's bytes")
	}
}

// ruleVariant returns rules(t) with one kind of change: countdowns, fuel,
// the rank size, the zone, the day start, or none.
func ruleVariant(t testing.TB, rnd *rand.Rand) *room.Rules {
	r := rules(t)
	r.RocketLevels = slices.Clone(r.RocketLevels)
	switch rnd.IntN(6) {
	case 0:
		r.RocketLevels[0].Countdown += time.Duration(1+rnd.IntN(5)) * time.Second
	case 1:
		r.RocketLevels[1].Fuel = int64(50 + rnd.IntN(400))
	case 2:
		r.RankSize = 1 + rnd.IntN(5)
	case 3:
		r.Location = time.UTC
	case 4:
		r.DayStart = time.Duration(rnd.IntN(24)) * time.Hour
	}
	return r
}

// nextCommand picks a command for the room at time at: mostly gifts, due
// rocket launches and seat and membership changes, some of them refused.
func nextCommand(a *applier, rnd *rand.Rand, at int64) *room.Envelope {
	user := 1 + rnd.Int64N(8)
	other := 1 + rnd.Int64N(8)
	switch n := rnd.IntN(27); {
	case n >= 20:
		return micCommand(a, rnd, n-20, user, other, at)
	case n == 0 && rnd.IntN(4) == 0:
		return a.env(room.SystemOperator, at, true, room.NewSetRules(ruleVariant(a.t, rnd)))
	case n < 8:
		receivers := []int64{other}
		if rnd.IntN(3) == 0 {
			receivers = append(receivers, 1+(other%8))
		}
		g := gift(1+rnd.Int64N(60), int32(1+rnd.IntN(5)), receivers...)
		g.Outcome.ReceiversOnMic = rnd.IntN(4) == 0
		return a.env(user, at, false, g)
	case n < 11:
		if p := a.s.PendingLaunches(); len(p) > 0 {
			l := p[rnd.IntN(len(p))]
			return a.env(room.SystemOperator, max(at, l.LaunchAt), true, l.LaunchCommand())
		}
		return a.env(room.SystemOperator, at, true, &room.LaunchRocket{RocketID: 1, Day: a.s.Economy.Day})
	case n < 14:
		return a.env(user, at, false, &room.JoinRoom{})
	case n < 16:
		return a.env(user, at, false, &room.TakeMic{SeatIndex: rnd.Int32N(6)})
	case n < 17:
		return a.env(user, at, false, &room.LeaveMic{})
	case n < 18:
		return a.env(user, at, false, &room.LeaveRoom{})
	default:
		return a.env(user, at, false, &room.MoveMic{ToSeatIndex: rnd.Int32N(6)})
	}
}

// TestLoadsSnapshotOfAnOlderBuild decodes a snapshot stored by the build
// before rules were recorded (testdata/busy-room.v1.snap: busyRoom plus a
// permanent ban, a long-expired ban and a chat mute). It loads, under the
// built-in defaults, with every ignited rocket's launch as it was stored,
// and takes commands.
func TestLoadsSnapshotOfAnOlderBuild(t *testing.T) {
	payload, err := os.ReadFile("testdata/busy-room.v1.snap")
	if err != nil {
		t.Fatal(err)
	}
	s, err := snapshot.Decode(payload)
	if err != nil {
		t.Fatal(err)
	}
	want := busyRoom(t)
	if s.Version != 15 || s.Version != want.Version || len(s.Members) != len(want.Members) || s.Economy.Heat != want.Economy.Heat {
		t.Fatalf("version %d, %d members, heat %d", s.Version, len(s.Members), s.Economy.Heat)
	}
	if s.Rules != nil || s.EffectiveRules().Digest() != room.DefaultRules().Digest() {
		t.Fatalf("rules %+v", s.Rules)
	}
	if !reflect.DeepEqual(s.PendingLaunches(), want.PendingLaunches()) {
		t.Fatalf("launches %+v, want %+v", s.PendingLaunches(), want.PendingLaunches())
	}
	if _, ok := s.Bans[77]; !ok || s.Mutes[79] == 0 {
		t.Fatalf("bans %v, mutes %v", s.Bans, s.Mutes)
	}
	l := s.PendingLaunches()[0]
	e := &room.Envelope{RoomID: roomID, CommandID: "launch", Operator: room.SystemOperator, Platform: true, At: l.LaunchAt, Command: l.LaunchCommand()}
	if _, err := room.Apply(s, e); err != nil {
		t.Fatalf("launch after loading: %v", err)
	}
}

// restrictedRoom is an open room with timed and permanent bans and a chat
// mute, at time t0+100.
func restrictedRoom(t testing.TB) *room.State {
	s := room.Genesis(roomID, owner, 0, 8, "party", "")
	a := &applier{t: t, s: s}
	a.must(owner, t0, &room.CreateRoom{OwnerUserID: owner, SeatCount: 8, Title: "t"})
	a.must(owner, t0+10, &room.KickUser{TargetUserID: 7, DurationSeconds: 60})
	a.must(owner, t0+20, &room.KickUser{TargetUserID: 9})
	a.must(owner, t0+30, &room.MuteUser{TargetUserID: 8, DurationSeconds: 30})
	a.must(owner, t0+100, &room.SetChatEnabled{Enabled: false})
	return s
}

func TestRoundTripKeepsNextExpiry(t *testing.T) {
	s := restrictedRoom(t)
	if s.NextExpiry() != t0+30+30_000 {
		t.Fatalf("live next expiry %d, want the mute's end %d", s.NextExpiry(), t0+30+30_000)
	}
	got := roundTrip(t, s)
	if got.NextExpiry() != s.NextExpiry() {
		t.Fatalf("decoded next expiry %d, want %d", got.NextExpiry(), s.NextExpiry())
	}
	if !reflect.DeepEqual(canon(s), canon(got)) {
		t.Fatal("the decoded state differs")
	}
}

// TestOlderSnapshotWithEndedRestrictionsLoads decodes a snapshot as an
// older build stored it, listing a ban and a mute that had ended by its
// last command. It loads as stored, and the next command removes them: the
// state is then the one a build that removed them live has.
func TestOlderSnapshotWithEndedRestrictionsLoads(t *testing.T) {
	live := restrictedRoom(t)
	old := snapshot.ToProto(live)
	old.Bans = append([]*roomv1.Restriction{{UserId: 5, UntilMs: t0 + 50}}, old.Bans...)
	old.ChatMutes = append([]*roomv1.Restriction{{UserId: 6, UntilMs: t0 + 100}}, old.ChatMutes...)
	payload, err := proto.MarshalOptions{Deterministic: true}.Marshal(old)
	if err != nil {
		t.Fatal(err)
	}
	got, err := snapshot.Decode(payload)
	if err != nil {
		t.Fatal(err)
	}
	if got.Bans[5] != t0+50 || got.Mutes[6] != t0+100 || got.NextExpiry() != t0+50 {
		t.Fatalf("decoded bans %v, mutes %v, next expiry %d: want them as stored, next expiry %d", got.Bans, got.Mutes, got.NextExpiry(), t0+50)
	}
	for _, s := range []*room.State{live, got} {
		e := &room.Envelope{RoomID: roomID, CommandID: "next", Operator: owner, At: t0 + 200, Command: &room.SetChatEnabled{Enabled: true}}
		if _, err := room.Apply(s, e); err != nil {
			t.Fatal(err)
		}
	}
	if !reflect.DeepEqual(canon(live), canon(got)) {
		t.Fatalf("after the next command: bans %v, mutes %v; want %v, %v", got.Bans, got.Mutes, live.Bans, live.Mutes)
	}
	if !sameBytes(t, live, got) {
		t.Fatal("the snapshots differ after the next command")
	}
}

func TestWithoutEnded(t *testing.T) {
	p := snapshot.ToProto(restrictedRoom(t)) // ban of 7 ends at t0+60010, mute of 8 at t0+30030, ban of 9 is permanent
	if got := snapshot.WithoutEnded(p, t0+30_029); got != p {
		t.Fatal("nothing has ended, yet the message was copied")
	}
	got := snapshot.WithoutEnded(p, t0+60_010)
	if len(got.GetChatMutes()) != 0 || len(got.GetBans()) != 1 || got.GetBans()[0].GetUserId() != 9 {
		t.Fatalf("mutes %v, bans %v: want none and the permanent one", got.GetChatMutes(), got.GetBans())
	}
	if got.GetRoomVersion() != p.GetRoomVersion() || len(p.GetBans()) != 2 || len(p.GetChatMutes()) != 1 {
		t.Fatal("the answer moved the version or the shared message changed")
	}
}

// micCommand picks one of the mic queue's commands (k in 0..6).
func micCommand(a *applier, rnd *rand.Rand, k int, user, other, at int64) *room.Envelope {
	seat := rnd.Int32N(7) - 1 // AnySeat too
	switch k {
	case 0:
		return a.env(owner, at, false, &room.SetMicApproval{Required: rnd.IntN(3) > 0})
	case 1:
		return a.env(user, at, false, &room.RequestMic{SeatIndex: seat})
	case 2:
		return a.env(owner, at, false, &room.ApproveMicRequest{TargetUserID: other})
	case 3:
		return a.env(owner, at, false, &room.InviteToMic{TargetUserID: other, SeatIndex: seat})
	case 4:
		return a.env(user, at, false, &room.AcceptMicInvite{})
	case 5:
		return a.env(user, at, false, &room.CancelMicRequest{})
	}
	return a.env(room.SystemOperator, at, true, &room.ExpireMicQueue{})
}

// queuedRoom is busyRoom requiring approval, with a request, an
// invitation, a permanent chat mute and a ban with reasons.
func queuedRoom(t testing.TB) *room.State {
	s := busyRoom(t)
	a := &applier{t: t, s: s}
	at := s.LastAt + 1
	a.must(owner, at, &room.SetMicApproval{Required: true})
	a.must(5, at+1, &room.RequestMic{SeatIndex: 6})
	a.must(owner, at+2, &room.InviteToMic{TargetUserID: 6, SeatIndex: room.AnySeat})
	a.must(owner, at+3, &room.MuteUser{TargetUserID: 4, Permanent: true, Reason: "spam"})
	a.must(owner, at+4, &room.KickUser{TargetUserID: 3, DurationSeconds: 60, Reason: "rude"})
	return s
}

func TestRoundTripKeepsTheMicQueueAndReasons(t *testing.T) {
	s := queuedRoom(t)
	got := roundTrip(t, s)
	got.Rules = s.Rules
	if !reflect.DeepEqual(canon(s), canon(got)) || !sameBytes(t, s, got) {
		t.Fatalf("round trip: requests %v invites %v reasons %v %v", got.MicRequests, got.MicInvites, got.BanReasons, got.MuteReasons)
	}
	p := snapshot.ToProto(s)
	req, inv := p.GetMicRequests(), p.GetMicInvites()
	if !p.GetMicApprovalRequired() || len(req) != 1 || req[0].GetUserId() != 5 || req[0].GetSeatIndex() != 6 ||
		req[0].GetExpiresAtMs() != req[0].GetAtMs()+room.MicRequestTTL || len(inv) != 1 || inv[0].GetUserId() != 6 ||
		inv[0].GetSeatIndex() != room.AnySeat || inv[0].GetByUserId() != owner {
		t.Fatalf("queue in the snapshot: %v %v", req, inv)
	}
	if m := p.GetChatMutes()[0]; !m.GetPermanent() || m.GetReason() != "spam" || m.GetUntilMs() != 0 {
		t.Fatalf("mute %v", m)
	}
	if b := p.GetBans()[0]; b.GetPermanent() || b.GetReason() != "rude" {
		t.Fatalf("ban %v", b)
	}
	for _, q := range []*roomv1.RoomSnapshot{snapshot.WithMemberLimit(p, 1), snapshot.WithoutEnded(p, s.LastAt+3_600_000)} {
		if !q.GetMicApprovalRequired() || len(q.GetMicRequests()) != 1 || len(q.GetMicInvites()) != 1 {
			t.Fatalf("a query answer lost the queue: %v", q)
		}
	}
	// A corrupt queue does not load.
	p.MicRequests = append(p.MicRequests, p.MicRequests[0])
	if _, err := snapshot.FromProto(p); err == nil {
		t.Fatal("a user twice in the mic requests loaded")
	}
}

// roundTrip encodes s as a stored snapshot and decodes it again.
func roundTrip(t *testing.T, s *room.State) *room.State {
	t.Helper()
	payload, err := snapshot.Encode(s)
	if err != nil {
		t.Fatal(err)
	}
	got, err := snapshot.Decode(payload)
	if err != nil {
		t.Fatal(err)
	}
	return got
}
