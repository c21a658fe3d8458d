package room

import (
	"reflect"
	"testing"
)

// presenceEnv is an expiry as the owner's cell submits it, at time at.
func presenceEnv(at int64, c *ExpirePresence) *Envelope {
	e := envAt(SystemOperator, at, c)
	e.Platform = true
	return e
}

// offByService is offEv for a seat the service took the occupant off.
func offByService(action string, seat int32) Event { return offEv(action, seat, noUser) }

func leftByTimeout(user int64, online int) Event {
	return ev(EventRoomUserLeft, &RoomUserLeftEvent{UserID: user, Reason: LeftPresenceTimeout, OnlineCount: online})
}

func TestExpirePresence(t *testing.T) {
	runApplyCases(t, []applyCase{
		{name: "a seated member leaves the seat and the room", env: presenceEnv(tNow, &ExpirePresence{Leave: []int64{uAlice}}),
			want:   []Event{offByService(MicPresenceTimeout, 3), leftByTimeout(uAlice, 6)},
			change: func(s *State) { delete(s.Members, uAlice); emptySeat(s, 3) }},
		{name: "a member not seated leaves", env: presenceEnv(tNow, &ExpirePresence{Leave: []int64{uCarol}}),
			want:   []Event{leftByTimeout(uCarol, 6)},
			change: func(s *State) { delete(s.Members, uCarol) }},
		{name: "an offline member loses the seat and stays", env: presenceEnv(tNow, &ExpirePresence{Unseat: []SeatExpiry{{uBob, 4}}}),
			want:   []Event{offByService(MicOffline, 4)},
			change: func(s *State) { emptySeat(s, 4) }},
		{name: "the owner times out like anyone", env: presenceEnv(tNow, &ExpirePresence{Leave: []int64{uOwner, uCarol}, Unseat: []SeatExpiry{{uHost, 1}}}),
			want: []Event{offByService(MicPresenceTimeout, 0), leftByTimeout(uOwner, 6), leftByTimeout(uCarol, 5), offByService(MicOffline, 1)},
			change: func(s *State) {
				delete(s.Members, uOwner)
				delete(s.Members, uCarol)
				emptySeat(s, 0)
				emptySeat(s, 1)
			}},
		{name: "users who left, never came or sit elsewhere are skipped",
			env:  presenceEnv(tNow, &ExpirePresence{Leave: []int64{uVisitor, uBanned, uCarol}, Unseat: []SeatExpiry{{uAdmin2, 2}, {uAlice, 4}, {uAdmin, 2}}}),
			want: []Event{leftByTimeout(uCarol, 6), offByService(MicOffline, 2)},
			change: func(s *State) {
				delete(s.Members, uCarol)
				emptySeat(s, 2)
			}},
		{name: "nobody left to expire", env: presenceEnv(tNow, &ExpirePresence{Leave: []int64{uVisitor}, Unseat: []SeatExpiry{{uCarol, 7}, {uAlice, 19}}}),
			err: ErrNoChange},
		{name: "closed room", state: closedFixture, env: presenceEnv(tNow, &ExpirePresence{Leave: []int64{uCarol}}), err: ErrRoomClosed},
	})
}

// TestExpirePresenceRefusesBadInput: only the service submits it, with a
// bounded list of distinct real users and real seats.
func TestExpirePresenceRefusesBadInput(t *testing.T) {
	many := make([]int64, MaxPresenceExpiries+1)
	for i := range many {
		many[i] = int64(i + 1)
	}
	user := presenceEnv(tNow, &ExpirePresence{Leave: []int64{uCarol}})
	user.Operator = uOwner
	notPlatform := presenceEnv(tNow, &ExpirePresence{Leave: []int64{uCarol}})
	notPlatform.Platform = false
	staff := platformEnv(&ExpirePresence{Leave: []int64{uCarol}})
	cases := []struct {
		name string
		env  *Envelope
		err  *Error
	}{
		{"a user", user, ErrPermission},
		{"the system without the platform flag", notPlatform, ErrPermission},
		{"platform staff", staff, ErrPermission},
		{"empty", presenceEnv(tNow, &ExpirePresence{}), ErrInvalidArgument},
		{"too many", presenceEnv(tNow, &ExpirePresence{Leave: many}), ErrInvalidArgument},
		{"too many in both lists", presenceEnv(tNow, &ExpirePresence{Leave: many[:MaxPresenceExpiries], Unseat: []SeatExpiry{{uAlice, 3}}}), ErrInvalidArgument},
		{"user 0", presenceEnv(tNow, &ExpirePresence{Leave: []int64{0}}), ErrInvalidArgument},
		{"negative user", presenceEnv(tNow, &ExpirePresence{Unseat: []SeatExpiry{{-5, 3}}}), ErrInvalidArgument},
		{"the system operator", presenceEnv(tNow, &ExpirePresence{Leave: []int64{SystemOperator}}), ErrInvalidArgument},
		{"listed twice", presenceEnv(tNow, &ExpirePresence{Leave: []int64{uCarol, uCarol}}), ErrInvalidArgument},
		{"in both lists", presenceEnv(tNow, &ExpirePresence{Leave: []int64{uAlice}, Unseat: []SeatExpiry{{uAlice, 3}}}), ErrInvalidArgument},
		{"bad seat", presenceEnv(tNow, &ExpirePresence{Unseat: []SeatExpiry{{uAlice, MaxSeats}}}), ErrBadSeatIndex},
		{"negative seat", presenceEnv(tNow, &ExpirePresence{Unseat: []SeatExpiry{{uAlice, -1}}}), ErrBadSeatIndex},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := fixture()
			before := cloneState(s)
			events, err := Apply(s, tc.env)
			requireReason(t, err, tc.err)
			if events != nil {
				t.Errorf("refused command returned events:\n%s", dumpEvents(events))
			}
			requireUnchanged(t, before, s)
		})
	}
}

// TestExpirePresenceReplays: a run of expiries mixed with the members'
// own commands, logged and replayed from their payloads on a fresh copy of
// the room, rebuilds the same state and the same events, including an
// expiry that arrives after the user came back (it changes nothing then).
func TestExpirePresenceReplays(t *testing.T) {
	run := []*Envelope{
		presenceEnv(tNow, &ExpirePresence{Unseat: []SeatExpiry{{uAlice, 3}}}),
		envAt(uAlice, tNow+1, &TakeMic{SeatIndex: 7}),
		// Decided for seat 3: alice sits on 7 now and keeps it.
		presenceEnv(tNow+2, &ExpirePresence{Unseat: []SeatExpiry{{uAlice, 3}}, Leave: []int64{uCarol}}),
		envAt(uCarol, tNow+3, &JoinRoom{Nickname: "back"}),
		presenceEnv(tNow+4, &ExpirePresence{Leave: []int64{uBob, uAlice}}),
	}
	live := fixture()
	var payloads [][]byte
	var liveEvents [][]Event
	for i, e := range run {
		e.CommandID = "c" + string(rune('a'+i))
		events, err := Apply(live, e)
		if err != nil {
			t.Fatalf("command %d %s: %v", i, e.Command.Type(), err)
		}
		p, err := EncodeCommand(e)
		if err != nil {
			t.Fatal(err)
		}
		payloads, liveEvents = append(payloads, p), append(liveEvents, events)
	}
	if !live.IsMember(uCarol) || live.IsMember(uAlice) || live.IsMember(uBob) || live.SeatOf(uAlice) != noSeat {
		t.Fatalf("after the run: carol in %v, alice in %v (seat %d), bob in %v; want carol back, alice and bob gone",
			live.IsMember(uCarol), live.IsMember(uAlice), live.SeatOf(uAlice), live.IsMember(uBob))
	}
	replayed := fixture()
	for i, e := range run {
		d, err := DecodeCommand(testRoomID, e.CommandID, e.Command.Type(), payloads[i])
		if err != nil {
			t.Fatalf("decode %d: %v", i, err)
		}
		events, err := Apply(replayed, d)
		if err != nil {
			t.Fatalf("replay %d: %v", i, err)
		}
		if !reflect.DeepEqual(events, liveEvents[i]) {
			t.Errorf("replayed events of command %d differ:\n%s\nlive:\n%s", i, dumpEvents(events), dumpEvents(liveEvents[i]))
		}
	}
	requireStateEqual(t, live, replayed)
}

// A member who leaves by the presence timeout leaves no mic request or
// invitation behind, as LeaveRoom does not: no admin can seat them once they
// are gone. A row logged before the command said so (EndsMicEntries false)
// replays as it was applied.
func TestAPresenceTimeoutEndsTheLeftMembersMicEntries(t *testing.T) {
	s := states(withCarolRequest, withCarolInvite)()
	if _, err := Apply(s, presenceEnv(tNow, &ExpirePresence{Leave: []int64{uCarol}, EndsMicEntries: true})); err != nil {
		t.Fatal(err)
	}
	if s.IsMember(uCarol) || s.MicRequests[uCarol] != nil || s.MicInvites[uCarol] != nil {
		t.Fatalf("carol left by the presence timeout: member %v, request %v, invitation %v", s.IsMember(uCarol), s.MicRequests[uCarol], s.MicInvites[uCarol])
	}
	if _, err := Apply(s, envAt(uAdmin, tNow+1, &ApproveMicRequest{TargetUserID: uCarol})); err == nil {
		t.Fatalf("an approval seated carol, who is no member, on seat %d", s.SeatOf(uCarol))
	}
	if !NewExpirePresence().EndsMicEntries {
		t.Fatal("the service's expiries do not end mic entries")
	}

	old := states(withCarolRequest, withCarolInvite)()
	if _, err := Apply(old, presenceEnv(tNow, &ExpirePresence{Leave: []int64{uCarol}})); err != nil {
		t.Fatal(err)
	}
	if old.MicRequests[uCarol] == nil || old.MicInvites[uCarol] == nil {
		t.Fatal("a row logged before EndsMicEntries does not replay as it was applied")
	}
}
