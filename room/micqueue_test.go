package room

import "testing"

// Expected events of the mic queue.

func reqEv(action string, e MicEntry, pending bool, op int64) Event {
	return ev(EventRoomMicRequestChanged, &RoomMicRequestChangedEvent{
		Action: action, UserID: e.UserID, SeatIndex: e.SeatIndex, RequestedAt: e.At, ExpiresAt: e.ExpiresAt,
		Pending: pending, OperatorUserID: op, At: tNow,
	})
}

func invEv(action string, e MicEntry, pending bool, op int64) Event {
	return ev(EventRoomMicInviteChanged, &RoomMicInviteChangedEvent{
		Action: action, UserID: e.UserID, SeatIndex: e.SeatIndex, InviterUserID: e.By, InvitedAt: e.At,
		ExpiresAt: e.ExpiresAt, Pending: pending, OperatorUserID: op, At: tNow,
	})
}

// takeEv is user taking the empty, unmuted seat 7 of the fixture at tNow, op acting.
func takeEv(user int64, op int64) Event {
	return micEv(RoomMicChangedEvent{
		Action: MicTake, UserID: user, SeatIndex: 7, FromSeatIndex: noSeat, MicOn: true, OperatorUserID: op, At: tNow,
	})
}

func seat7(user int64) func(s *State) {
	return func(s *State) { s.Seats[7] = Seat{UserID: user, MicOn: true, OccupiedSince: tNow} }
}

var (
	carolReq     = MicEntry{UserID: uCarol, SeatIndex: AnySeat, By: uCarol, At: tNow - 1000, ExpiresAt: tNow - 1000 + MicRequestTTL}
	carolInv     = MicEntry{UserID: uCarol, SeatIndex: 7, By: uAdmin, At: tNow - 1000, ExpiresAt: tNow - 1000 + MicInviteTTL}
	carolExpired = MicEntry{UserID: uCarol, SeatIndex: 7, By: uCarol, At: tNow - MicRequestTTL, ExpiresAt: tNow}
)

// states builds a fixture readied by preps, in order.
func states(preps ...func(*State)) func() *State {
	return func() *State {
		s := fixture()
		for _, p := range preps {
			p(s)
		}
		return s
	}
}

func TestSetMicApproval(t *testing.T) {
	changed := func(required bool, op int64) Event {
		return ev(EventRoomMicApprovalChanged, &RoomMicApprovalChangedEvent{Required: required, OperatorUserID: op})
	}
	runApplyCases(t, []applyCase{
		{name: "admin switches it on", env: env(uAdmin, &SetMicApproval{Required: true}), want: []Event{changed(true, uAdmin)},
			change: withApproval},
		{name: "off again drops the requests", state: states(withCarolRequest), env: env(uOwner, &SetMicApproval{Required: false}),
			want:   []Event{reqEv(MicQueueRemoved, carolReq, false, uOwner), changed(false, uOwner)},
			change: func(s *State) { s.MicApproval = false; delete(s.MicRequests, uCarol) }},
		{name: "invitations stay", state: states(withApproval, withCarolInvite), env: env(uAdmin, &SetMicApproval{Required: false}),
			want: []Event{changed(false, uAdmin)}, change: func(s *State) { s.MicApproval = false }},
		{name: "platform", env: platformEnv(&SetMicApproval{Required: true}), want: []Event{changed(true, uStaff)}, change: withApproval},
		{name: "member", env: env(uAlice, &SetMicApproval{Required: true}), err: ErrPermission},
		{name: "no change", env: env(uAdmin, &SetMicApproval{Required: false}), err: ErrNoChange},
	})
}

func TestCreateRoomWithApproval(t *testing.T) {
	s := creatingFixture()
	events, err := Apply(s, env(uOwner, &CreateRoom{OwnerUserID: uOwner, SeatCount: 8, MicApproval: true}))
	if err != nil {
		t.Fatal(err)
	}
	if !s.MicApproval || !events[0].Data.(*RoomCreatedEvent).MicApproval {
		t.Fatalf("approval %t, event %+v", s.MicApproval, events[0].Data)
	}
	apply(t, s, envAt(uOwner, tNow+1, &JoinRoom{}), nil)
	apply(t, s, envAt(uAlice, tNow+2, &JoinRoom{}), nil)
	apply(t, s, envAt(uAlice, tNow+3, &TakeMic{SeatIndex: 1}), ErrMicApprovalRequired)
	apply(t, s, envAt(uOwner, tNow+4, &TakeMic{SeatIndex: 0}), nil) // the owner needs nobody's approval
}

func TestTakeMicUnderApproval(t *testing.T) {
	runApplyCases(t, []applyCase{
		{name: "member", state: states(withApproval), env: env(uCarol, &TakeMic{SeatIndex: 7}), err: ErrMicApprovalRequired},
		{name: "admin", state: states(withApproval), env: env(uAdmin2, &TakeMic{SeatIndex: 7}),
			want: []Event{takeEv(uAdmin2, uAdmin2)}, change: seat7(uAdmin2)},
		{name: "a seat taken otherwise ends the invitation", state: states(withCarolInvite), env: env(uCarol, &TakeMic{SeatIndex: 7}),
			want:   []Event{invEv(MicQueueRemoved, carolInv, false, uCarol), takeEv(uCarol, uCarol)},
			change: func(s *State) { seat7(uCarol)(s); delete(s.MicInvites, uCarol) }},
	})
}

func TestRequestMic(t *testing.T) {
	mine := func(seat int32) MicEntry {
		return MicEntry{UserID: uCarol, SeatIndex: seat, By: uCarol, At: tNow, ExpiresAt: tNow + MicRequestTTL}
	}
	add := func(e MicEntry) func(s *State) {
		return func(s *State) { s.MicRequests[e.UserID] = &e }
	}
	runApplyCases(t, []applyCase{
		{name: "any seat", state: states(withApproval), env: env(uCarol, &RequestMic{SeatIndex: AnySeat}),
			want: []Event{reqEv(MicQueueRequested, mine(AnySeat), true, uCarol)}, change: add(mine(AnySeat))},
		{name: "a seat", state: states(withApproval), env: env(uCarol, &RequestMic{SeatIndex: 7}),
			want: []Event{reqEv(MicQueueRequested, mine(7), true, uCarol)}, change: add(mine(7))},
		{name: "an expired request is replaced", state: states(withExpiredRequest), env: env(uCarol, &RequestMic{SeatIndex: 6}),
			want:   []Event{reqEv(MicQueueExpired, carolExpired, false, uCarol), reqEv(MicQueueRequested, mine(6), true, uCarol)},
			change: add(mine(6))},
		{name: "approval not required", env: env(uCarol, &RequestMic{SeatIndex: AnySeat}), err: ErrMicApprovalNotRequired},
		{name: "pending already", state: states(withCarolRequest), env: env(uCarol, &RequestMic{SeatIndex: 7}), err: ErrMicRequestPending},
		{name: "seated", state: states(withApproval), env: env(uAlice, &RequestMic{SeatIndex: AnySeat}), err: ErrAlreadyOnMic},
		{name: "visitor", state: states(withApproval), env: env(uVisitor, &RequestMic{SeatIndex: AnySeat}), err: ErrNotInRoom},
		{name: "banned", state: states(withApproval), env: env(uBanned, &RequestMic{SeatIndex: AnySeat}), err: ErrNotInRoom},
		{name: "seat past the room's seats", state: states(withApproval), env: env(uCarol, &RequestMic{SeatIndex: 8}), err: ErrBadSeatIndex},
		{name: "seat below any", state: states(withApproval), env: env(uCarol, &RequestMic{SeatIndex: -2}), err: ErrBadSeatIndex},
	})
}

// fillQueue fills m with n entries of members who joined for it, expiring at until.
func fillQueue(n int, until int64, invites bool) func(s *State) {
	return func(s *State) {
		s.MicApproval = true
		for i := range n {
			id := int64(1000 + i)
			s.Members[id] = &Member{UserID: id, JoinedAt: t0}
			e := &MicEntry{UserID: id, SeatIndex: AnySeat, By: id, At: t0, ExpiresAt: until}
			if invites {
				e.By = uAdmin
				s.MicInvites[id] = e
			} else {
				s.MicRequests[id] = e
			}
		}
	}
}

func TestMicQueueBound(t *testing.T) {
	s := states(fillQueue(MaxMicRequests, tNow+1, false))()
	apply(t, s, env(uCarol, &RequestMic{SeatIndex: AnySeat}), ErrMicQueueFull)
	s = states(fillQueue(MaxMicInvites, tNow+1, true))()
	apply(t, s, env(uAdmin, &InviteToMic{TargetUserID: uCarol, SeatIndex: AnySeat}), ErrMicQueueFull)

	// A full queue of expired entries makes room: they expire with the
	// request, each with its event.
	s = states(fillQueue(MaxMicRequests, tNow, false))()
	events, err := Apply(s, env(uCarol, &RequestMic{SeatIndex: AnySeat}))
	if err != nil {
		t.Fatal(err)
	}
	if len(events) != MaxMicRequests+1 || len(s.MicRequests) != 1 || s.MicRequests[uCarol] == nil {
		t.Fatalf("%d events, queue %d", len(events), len(s.MicRequests))
	}
	for i, e := range events[:MaxMicRequests] {
		if d := e.Data.(*RoomMicRequestChangedEvent); d.Action != MicQueueExpired || d.UserID != int64(1000+i) {
			t.Fatalf("event %d: %+v", i, d)
		}
	}
}

func TestCancelMicRequest(t *testing.T) {
	runApplyCases(t, []applyCase{
		{name: "pending", state: states(withCarolRequest), env: env(uCarol, &CancelMicRequest{}),
			want: []Event{reqEv(MicQueueCancelled, carolReq, false, uCarol)}, change: func(s *State) { delete(s.MicRequests, uCarol) }},
		{name: "none", state: states(withApproval), env: env(uCarol, &CancelMicRequest{}), err: ErrNoMicRequest},
		{name: "expired is absent", state: states(withExpiredRequest), env: env(uCarol, &CancelMicRequest{}), err: ErrNoMicRequest},
		{name: "another's", state: states(withCarolRequest), env: env(uAlice, &CancelMicRequest{}), err: ErrNoMicRequest},
	})
}

func TestApproveMicRequest(t *testing.T) {
	forSeat := func(i int32) func(s *State) {
		return func(s *State) { s.MicRequests[uCarol].SeatIndex = i }
	}
	lockAll := func(s *State) {
		for i := range s.Seats {
			if s.Seats[i].UserID == noUser {
				s.Seats[i].Locked = true
			}
		}
	}
	approved := func(s *State) { seat7(uCarol)(s); delete(s.MicRequests, uCarol) }
	runApplyCases(t, []applyCase{
		{name: "any seat takes the first free unlocked one", state: states(withCarolRequest), env: env(uAdmin, &ApproveMicRequest{TargetUserID: uCarol}),
			want: []Event{reqEv(MicQueueApproved, carolReq, false, uAdmin), micEv(RoomMicChangedEvent{
				Action: MicTake, UserID: uCarol, SeatIndex: 6, FromSeatIndex: noSeat, SeatMuted: true, OperatorUserID: uAdmin, At: tNow,
			})},
			change: func(s *State) {
				s.Seats[6] = Seat{UserID: uCarol, MutedByAdmin: true, OccupiedSince: tNow}
				delete(s.MicRequests, uCarol)
			}},
		{name: "the requested seat, and the invitation ends too", state: states(withCarolRequest, forSeat(7), withCarolInvite),
			env: env(uOwner, &ApproveMicRequest{TargetUserID: uCarol}),
			want: []Event{reqEv(MicQueueApproved, MicEntry{UserID: uCarol, SeatIndex: 7, By: uCarol, At: carolReq.At, ExpiresAt: carolReq.ExpiresAt}, false, uOwner),
				invEv(MicQueueRemoved, carolInv, false, uOwner), takeEv(uCarol, uOwner)},
			change: func(s *State) { approved(s); delete(s.MicInvites, uCarol) }},
		{name: "requested seat taken", state: states(withCarolRequest, forSeat(3)), env: env(uAdmin, &ApproveMicRequest{TargetUserID: uCarol}), err: ErrSeatOccupied},
		{name: "requested seat locked", state: states(withCarolRequest, forSeat(5)), env: env(uAdmin, &ApproveMicRequest{TargetUserID: uCarol}), err: ErrSeatLocked},
		{name: "no free seat", state: states(withCarolRequest, lockAll), env: env(uAdmin, &ApproveMicRequest{TargetUserID: uCarol}), err: ErrNoFreeSeat},
		{name: "member", state: states(withCarolRequest), env: env(uAlice, &ApproveMicRequest{TargetUserID: uCarol}), err: ErrPermission},
		{name: "no request", state: states(withApproval), env: env(uAdmin, &ApproveMicRequest{TargetUserID: uCarol}), err: ErrNoMicRequest},
		{name: "expired", state: states(withExpiredRequest), env: env(uAdmin, &ApproveMicRequest{TargetUserID: uCarol}), err: ErrNoMicRequest},
	})
}

func TestRejectMicRequest(t *testing.T) {
	runApplyCases(t, []applyCase{
		{name: "admin", state: states(withCarolRequest), env: env(uAdmin, &RejectMicRequest{TargetUserID: uCarol}),
			want: []Event{reqEv(MicQueueRejected, carolReq, false, uAdmin)}, change: func(s *State) { delete(s.MicRequests, uCarol) }},
		{name: "member", state: states(withCarolRequest), env: env(uAlice, &RejectMicRequest{TargetUserID: uCarol}), err: ErrPermission},
		{name: "none", state: states(withApproval), env: env(uAdmin, &RejectMicRequest{TargetUserID: uCarol}), err: ErrNoMicRequest},
		{name: "expired", state: states(withExpiredRequest), env: env(uAdmin, &RejectMicRequest{TargetUserID: uCarol}), err: ErrNoMicRequest},
	})
}

func TestInviteToMic(t *testing.T) {
	inv := MicEntry{UserID: uCarol, SeatIndex: 7, By: uAdmin, At: tNow, ExpiresAt: tNow + MicInviteTTL}
	expiredInv := MicEntry{UserID: uCarol, SeatIndex: AnySeat, By: uOwner, At: tNow - MicInviteTTL, ExpiresAt: tNow}
	runApplyCases(t, []applyCase{
		{name: "admin", env: env(uAdmin, &InviteToMic{TargetUserID: uCarol, SeatIndex: 7}),
			want: []Event{invEv(MicQueueInvited, inv, true, uAdmin)}, change: func(s *State) { e := inv; s.MicInvites[uCarol] = &e }},
		{name: "an expired invitation is replaced", state: states(func(s *State) { e := expiredInv; s.MicInvites[uCarol] = &e }),
			env:    env(uAdmin, &InviteToMic{TargetUserID: uCarol, SeatIndex: 7}),
			want:   []Event{invEv(MicQueueExpired, expiredInv, false, uAdmin), invEv(MicQueueInvited, inv, true, uAdmin)},
			change: func(s *State) { e := inv; s.MicInvites[uCarol] = &e }},
		{name: "pending already", state: states(withCarolInvite), env: env(uOwner, &InviteToMic{TargetUserID: uCarol, SeatIndex: AnySeat}), err: ErrMicInvitePending},
		{name: "member", env: env(uAlice, &InviteToMic{TargetUserID: uCarol, SeatIndex: 7}), err: ErrPermission},
		{name: "not in the room", env: env(uAdmin, &InviteToMic{TargetUserID: uVisitor, SeatIndex: 7}), err: ErrNotInRoom},
		{name: "banned", env: env(uAdmin, &InviteToMic{TargetUserID: uBanned, SeatIndex: 7}), err: ErrNotInRoom},
		{name: "seated", env: env(uAdmin, &InviteToMic{TargetUserID: uAlice, SeatIndex: 7}), err: ErrAlreadyOnMic},
		{name: "seat past the room's seats", env: env(uAdmin, &InviteToMic{TargetUserID: uCarol, SeatIndex: 8}), err: ErrBadSeatIndex},
		{name: "self", env: env(uAdmin, &InviteToMic{TargetUserID: uAdmin, SeatIndex: 7}), err: ErrBadTarget},
	})
}

func TestAcceptAndDeclineMicInvite(t *testing.T) {
	accepted := func(s *State) { seat7(uCarol)(s); delete(s.MicInvites, uCarol) }
	expiredInvite := func(s *State) { s.MicInvites[uCarol].ExpiresAt = tNow }
	runApplyCases(t, []applyCase{
		{name: "accept", state: states(withCarolInvite), env: env(uCarol, &AcceptMicInvite{}),
			want: []Event{invEv(MicQueueAccepted, carolInv, false, uCarol), takeEv(uCarol, uCarol)}, change: accepted},
		{name: "accept under approval, the request ends too", state: states(withCarolRequest, withCarolInvite), env: env(uCarol, &AcceptMicInvite{}),
			want:   []Event{invEv(MicQueueAccepted, carolInv, false, uCarol), reqEv(MicQueueRemoved, carolReq, false, uCarol), takeEv(uCarol, uCarol)},
			change: func(s *State) { accepted(s); delete(s.MicRequests, uCarol) }},
		{name: "accept a seat taken since", state: states(withCarolInvite, seat7(uAdmin2)), env: env(uCarol, &AcceptMicInvite{}), err: ErrSeatOccupied},
		{name: "accept a seat locked since", state: states(withCarolInvite, func(s *State) { s.Seats[7].Locked = true }), env: env(uCarol, &AcceptMicInvite{}), err: ErrSeatLocked},
		{name: "accept none", env: env(uCarol, &AcceptMicInvite{}), err: ErrNoMicInvite},
		{name: "accept expired", state: states(withCarolInvite, expiredInvite), env: env(uCarol, &AcceptMicInvite{}), err: ErrNoMicInvite},
		{name: "decline", state: states(withCarolInvite), env: env(uCarol, &DeclineMicInvite{}),
			want: []Event{invEv(MicQueueDeclined, carolInv, false, uCarol)}, change: func(s *State) { delete(s.MicInvites, uCarol) }},
		{name: "decline none", env: env(uCarol, &DeclineMicInvite{}), err: ErrNoMicInvite},
		{name: "decline expired", state: states(withCarolInvite, expiredInvite), env: env(uCarol, &DeclineMicInvite{}), err: ErrNoMicInvite},
	})
}

func TestMicEntriesEndWithTheirUser(t *testing.T) {
	both := states(withCarolRequest, withCarolInvite)
	gone := func(s *State) { delete(s.MicRequests, uCarol); delete(s.MicInvites, uCarol); delete(s.Members, uCarol) }
	runApplyCases(t, []applyCase{
		{name: "leave", state: both, env: env(uCarol, &LeaveRoom{}),
			want: []Event{reqEv(MicQueueRemoved, carolReq, false, uCarol), invEv(MicQueueRemoved, carolInv, false, uCarol),
				ev(EventRoomUserLeft, &RoomUserLeftEvent{UserID: uCarol, Reason: "leave", OnlineCount: 6})},
			change: gone},
		{name: "kick", state: both, env: env(uAdmin, &KickUser{TargetUserID: uCarol, DurationSeconds: 60}),
			want: []Event{reqEv(MicQueueRemoved, carolReq, false, uAdmin), invEv(MicQueueRemoved, carolInv, false, uAdmin),
				ev(EventRoomUserKicked, &RoomUserKickedEvent{UserID: uCarol, OperatorUserID: uAdmin, BannedUntil: tNow + 60_000, WasInRoom: true})},
			change: func(s *State) { gone(s); s.Bans[uCarol] = tNow + 60_000 }},
	})
	s := both()
	apply(t, s, env(uOwner, &CloseRoom{}), nil)
	if len(s.MicRequests)+len(s.MicInvites) != 0 {
		t.Fatalf("a closed room keeps its mic queue: %s", dumpState(s))
	}
}

func TestExpireMicQueue(t *testing.T) {
	sys := func(at int64) *Envelope {
		e := envAt(SystemOperator, at, &ExpireMicQueue{})
		e.Platform = true
		return e
	}
	s := states(withCarolRequest, withCarolInvite, func(s *State) {
		s.MicRequests[uAlice+100] = &MicEntry{UserID: uAlice + 100, SeatIndex: AnySeat, By: uAlice + 100, At: tNow, ExpiresAt: tNow + MicRequestTTL}
		s.Members[uAlice+100] = &Member{UserID: uAlice + 100}
	})()
	if got := s.NextMicExpiry(); got != carolInv.ExpiresAt {
		t.Fatalf("next expiry %d, want the invitation's %d", got, carolInv.ExpiresAt)
	}
	apply(t, s, sys(carolInv.ExpiresAt-1), ErrMicQueueNotDue)
	before := cloneState(s)
	e := sys(carolReq.ExpiresAt) // both of carol's have expired by then, the other not
	events, err := Apply(s, e)
	if err != nil {
		t.Fatal(err)
	}
	wantReq, wantInv := reqEv(MicQueueExpired, carolReq, false, SystemOperator), invEv(MicQueueExpired, carolInv, false, SystemOperator)
	wantReq.Data.(*RoomMicRequestChangedEvent).At, wantInv.Data.(*RoomMicInviteChangedEvent).At = e.At, e.At
	if got, want := dumpEvents(events), dumpEvents([]Event{wantReq, wantInv}); got != want {
		t.Fatalf("events\ngot:\n%swant:\n%s", got, want)
	}
	checkSuccess(t, before, s, e, events)
	if len(s.MicRequests) != 1 || len(s.MicInvites) != 0 || s.NextMicExpiry() != tNow+MicRequestTTL {
		t.Fatalf("after expiry: %s", dumpState(s))
	}
	// Only the engine submits it.
	for _, bad := range []*Envelope{envAt(uOwner, tNow+MicRequestTTL, &ExpireMicQueue{}), platformEnv(&ExpireMicQueue{})} {
		if _, err := Apply(s, bad); err == nil || AsError(err).Reason != ErrPermission.Reason {
			t.Fatalf("ExpireMicQueue from %d: %v", bad.Operator, err)
		}
	}
}

// A refused mic command leaves no trace, whatever the queue holds: the
// refusals of every mic command against rooms with entries of every kind.
func TestMicRefusalsChangeNothing(t *testing.T) {
	rooms := map[string]func() *State{
		"plain": fixture, "request": states(withCarolRequest), "invite": states(withCarolInvite),
		"expired": states(withExpiredRequest), "full": states(fillQueue(MaxMicRequests, tNow+1, false)),
	}
	cmds := []Command{&RequestMic{SeatIndex: AnySeat}, &RequestMic{SeatIndex: 3}, &CancelMicRequest{}, &AcceptMicInvite{}, &DeclineMicInvite{},
		&ApproveMicRequest{TargetUserID: uCarol}, &RejectMicRequest{TargetUserID: uCarol}, &InviteToMic{TargetUserID: uCarol, SeatIndex: 5}}
	for _, mk := range rooms {
		for _, op := range []int64{uCarol, uAlice, uAdmin, uVisitor} {
			for _, c := range cmds {
				s := mk()
				before := cloneState(s)
				if _, err := Apply(s, env(op, c)); err != nil {
					requireUnchanged(t, before, s)
				} else {
					checkInvariants(t, s, tNow)
				}
			}
		}
	}
}

// apply applies e to s: a refusal must carry want's reason and change
// nothing; a success keeps the invariants.
func apply(t *testing.T, s *State, e *Envelope, want *Error) {
	t.Helper()
	before := cloneState(s)
	events, err := Apply(s, e)
	if want != nil {
		requireReason(t, err, want)
		requireUnchanged(t, before, s)
		return
	}
	if err != nil {
		t.Fatalf("%s by %d at %d: %v", e.Command.Type(), e.Operator, e.At, err)
	}
	checkSuccess(t, before, s, e, events)
}
