package room

import (
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"
)

// allCommandTypes lists the 33 commands of command.go, rules.go, presence.go, micqueue.go and roles.go.
var allCommandTypes = []CommandType{
	CmdCreateRoom, CmdCloseRoom, CmdJoinRoom, CmdLeaveRoom, CmdTakeMic, CmdLeaveMic, CmdMoveMic,
	CmdKickFromMic, CmdLockMicSeat, CmdMuteMicSeat, CmdSetMyMic, CmdKickUser, CmdMuteUser,
	CmdUnbanUser, CmdSetAdmin, CmdUpdateProfile, CmdChangeBackground, CmdSetChatEnabled,
	CmdSendGift, CmdLaunchRocket, CmdSetRules,
	CmdExpirePresence,
	CmdSetMicApproval, CmdRequestMic, CmdCancelMicRequest, CmdApproveMicRequest, CmdRejectMicRequest,
	CmdInviteToMic, CmdAcceptMicInvite, CmdDeclineMicInvite, CmdExpireMicQueue,
	CmdTransferOwnership, CmdSetHost,
}

// sample is a command and an operator for which it succeeds on the fixture
// at tNow (CreateRoom: on creatingFixture).
type sample struct {
	op       int64
	cmd      Command
	platform bool
	// prep, when set, readies the fixture for the command (a pending mic
	// request to approve); the lifecycle tests leave it out.
	prep func(s *State)
}

func (smp sample) env() *Envelope {
	e := env(smp.op, smp.cmd)
	e.Platform = smp.platform
	return e
}

// rose is a normal gift of 10 coins a piece that anyone in the room may receive.
func rose(count int32, receivers ...int64) *SendGift {
	return &SendGift{ReceiverUserIDs: receivers, GiftID: "rose", Count: count,
		Outcome: GiftOutcome{Name: "Rose", Price: 10, Kind: GiftNormal}}
}

// launchFixtureRocket launches the fixture's pending rocket.
func launchFixtureRocket() *LaunchRocket {
	return &LaunchRocket{RocketID: 1, Level: 0, LaunchAt: tNow, Day: testDay}
}

func samples() map[CommandType]sample {
	return map[CommandType]sample{
		CmdCreateRoom:        {uOwner, &CreateRoom{OwnerUserID: uOwner, HostUserID: uHost, SeatCount: 8, Mode: "party", Region: "sg", Title: "Hello"}, false, nil},
		CmdCloseRoom:         {uOwner, &CloseRoom{}, false, nil},
		CmdJoinRoom:          {uVisitor, &JoinRoom{Nickname: "nine", AvatarURL: "https://img.example/9.png", Vehicle: "bike", EntryEffect: "stars"}, false, nil},
		CmdLeaveRoom:         {uCarol, &LeaveRoom{}, false, nil},
		CmdTakeMic:           {uCarol, &TakeMic{SeatIndex: 7}, false, nil},
		CmdLeaveMic:          {uAlice, &LeaveMic{}, false, nil},
		CmdMoveMic:           {uAlice, &MoveMic{ToSeatIndex: 7}, false, nil},
		CmdKickFromMic:       {uAdmin, &KickFromMic{TargetUserID: uAlice}, false, nil},
		CmdLockMicSeat:       {uAdmin, &LockMicSeat{SeatIndex: 7, Locked: true}, false, nil},
		CmdMuteMicSeat:       {uAdmin, &MuteMicSeat{SeatIndex: 7, Muted: true}, false, nil},
		CmdSetMyMic:          {uAlice, &SetMyMic{On: false}, false, nil},
		CmdKickUser:          {uAdmin, &KickUser{TargetUserID: uCarol, DurationSeconds: 60}, false, nil},
		CmdMuteUser:          {uAdmin, &MuteUser{TargetUserID: uAlice, DurationSeconds: 60}, false, nil},
		CmdUnbanUser:         {uAdmin, &UnbanUser{TargetUserID: uBanned}, false, nil},
		CmdSetAdmin:          {uOwner, &SetAdmin{TargetUserID: uAlice, Admin: true}, false, nil},
		CmdUpdateProfile:     {uOwner, &UpdateProfile{Title: strp("New title")}, false, nil},
		CmdChangeBackground:  {uAdmin, &ChangeBackground{BackgroundURL: "https://img.example/bg2.png"}, false, nil},
		CmdSetChatEnabled:    {uAdmin, &SetChatEnabled{Enabled: false}, false, nil},
		CmdSendGift:          {uCarol, rose(1, uAlice), false, nil},
		CmdLaunchRocket:      {SystemOperator, launchFixtureRocket(), true, nil},
		CmdSetRules:          {SystemOperator, NewSetRules(&Rules{RankSize: 3, RocketLevels: []RocketLevel{{Fuel: 5, Countdown: 1000}}}), true, nil},
		CmdSetMicApproval:    {uAdmin, &SetMicApproval{Required: true}, false, nil},
		CmdRequestMic:        {uCarol, &RequestMic{SeatIndex: AnySeat}, false, withApproval},
		CmdCancelMicRequest:  {uCarol, &CancelMicRequest{}, false, withCarolRequest},
		CmdApproveMicRequest: {uAdmin, &ApproveMicRequest{TargetUserID: uCarol}, false, withCarolRequest},
		CmdRejectMicRequest:  {uAdmin, &RejectMicRequest{TargetUserID: uCarol}, false, withCarolRequest},
		CmdInviteToMic:       {uAdmin, &InviteToMic{TargetUserID: uCarol, SeatIndex: 7}, false, nil},
		CmdAcceptMicInvite:   {uCarol, &AcceptMicInvite{}, false, withCarolInvite},
		CmdDeclineMicInvite:  {uCarol, &DeclineMicInvite{}, false, withCarolInvite},
		CmdExpireMicQueue:    {SystemOperator, &ExpireMicQueue{}, true, withExpiredRequest},
		CmdTransferOwnership: {uOwner, &TransferOwnership{NewOwnerUserID: uAlice}, false, nil},
		CmdSetHost:           {uOwner, &SetHost{HostUserID: uAlice}, false, nil},
		CmdExpirePresence:    {SystemOperator, &ExpirePresence{Leave: []int64{uAlice}, Unseat: []SeatExpiry{{uBob, 4}}}, true, nil},
	}
}

func TestAllCommandsCovered(t *testing.T) {
	if len(allCommandTypes) != 33 || len(factories) != len(allCommandTypes) {
		t.Fatalf("%d command types listed, %d registered; update the tests", len(allCommandTypes), len(factories))
	}
	smp := samples()
	for _, typ := range allCommandTypes {
		newCmd, ok := factories[typ]
		if !ok {
			t.Errorf("%s has no decoder", typ)
			continue
		}
		if got := newCmd().Type(); got != typ {
			t.Errorf("factory of %s makes a %s", typ, got)
		}
		if s, ok := smp[typ]; !ok || s.cmd.Type() != typ {
			t.Errorf("no sample for %s", typ)
		}
	}
}

// The samples are valid: each succeeds where the lifecycle tests below use it,
// so a refusal there is due to the room's status alone.
func TestSamplesSucceed(t *testing.T) {
	for typ, smp := range samples() {
		t.Run(string(typ), func(t *testing.T) {
			s := fixture()
			if typ == CmdCreateRoom {
				s = creatingFixture()
			}
			if smp.prep != nil {
				smp.prep(s)
			}
			before := cloneState(s)
			e := smp.env()
			events, err := Apply(s, e)
			if err != nil {
				t.Fatalf("Apply: %v", err)
			}
			checkSuccess(t, before, s, e, events)
		})
	}
}

func TestApplyLifecycle(t *testing.T) {
	// A room marked closed with everything else intact: only the status can refuse.
	closedButFull := func() *State {
		s := fixture()
		s.Status = StatusClosed
		return s
	}
	for typ, smp := range samples() {
		t.Run(string(typ), func(t *testing.T) {
			for _, st := range []struct {
				name  string
				state func() *State
				err   *Error
			}{
				{"closed", closedFixture, ErrRoomClosed},
				{"closed with members", closedButFull, ErrRoomClosed},
				{"creating", creatingFixture, ErrRoomNotOpen},
				{"open", fixture, ErrRoomExists},
			} {
				s := st.state()
				before := cloneState(s)
				_, err := Apply(s, smp.env())
				switch {
				case st.name == "creating" && typ == CmdCreateRoom:
					if err != nil {
						t.Errorf("%s: CreateRoom on a creating room: %v", st.name, err)
					}
					continue
				case st.name == "open" && typ != CmdCreateRoom:
					continue // TestSamplesSucceed
				}
				requireReason(t, err, st.err)
				requireUnchanged(t, before, s)
			}
		})
	}
	t.Run("platform cannot reopen a closed room", func(t *testing.T) {
		s := closedFixture()
		before := cloneState(s)
		_, err := Apply(s, platformEnv(&CreateRoom{OwnerUserID: uOwner, SeatCount: 8}))
		requireReason(t, err, ErrRoomClosed)
		requireUnchanged(t, before, s)
	})
}

func TestApplyEnvelopeValidation(t *testing.T) {
	valid := func() *Envelope { return env(uCarol, &TakeMic{SeatIndex: 7}) }
	long := strings.Repeat("r", MaxIDLen)
	cases := []struct {
		name string
		mod  func(e *Envelope)
		err  *Error
	}{
		{"missing room_id", func(e *Envelope) { e.RoomID = "" }, ErrMissingRoomID},
		{"missing command_id", func(e *Envelope) { e.CommandID = "" }, ErrMissingCommandID},
		{"missing operator", func(e *Envelope) { e.Operator = 0 }, ErrMissingOperator},
		{"negative operator", func(e *Envelope) { e.Operator = -5 }, ErrMissingOperator},
		{"nil command", func(e *Envelope) { e.Command = nil }, ErrUnknownCommand},
		{"room_id too long", func(e *Envelope) { e.RoomID = long + "r" }, ErrFieldTooLong},
		{"command_id too long", func(e *Envelope) { e.CommandID = long + "c" }, ErrFieldTooLong},
		{"room_id not ASCII", func(e *Envelope) { e.RoomID = "röom" }, ErrInvalidArgument},
		{"room_id with space", func(e *Envelope) { e.RoomID = "room 1" }, ErrInvalidArgument},
		{"room_id with control", func(e *Envelope) { e.RoomID = "room\x01" }, ErrInvalidArgument},
		{"room_id with DEL", func(e *Envelope) { e.RoomID = "room\x7f" }, ErrInvalidArgument},
		{"command_id not ASCII", func(e *Envelope) { e.CommandID = "命令" }, ErrInvalidArgument},
		{"command_id invalid UTF-8", func(e *Envelope) { e.CommandID = "c\xff" }, ErrInvalidArgument},
		{"room_id of another room", func(e *Envelope) { e.RoomID = "room-2" }, ErrInvalidArgument},
		{"room_id at the limit, another room", func(e *Envelope) { e.RoomID = long }, ErrInvalidArgument},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := fixture()
			before := cloneState(s)
			e := valid()
			tc.mod(e)
			events, err := Apply(s, e)
			requireReason(t, err, tc.err)
			if events != nil {
				t.Errorf("events on refusal: %v", events)
			}
			requireUnchanged(t, before, s)
		})
	}
	t.Run("ids at the limit are valid", func(t *testing.T) {
		e := valid()
		e.RoomID, e.CommandID = long, strings.Repeat("c", MaxIDLen)
		if err := e.Validate(); err != nil {
			t.Fatalf("Validate: %v", err)
		}
		if err := CheckRoomID("abc-DEF_123:~!"); err != nil {
			t.Fatalf("CheckRoomID: %v", err)
		}
	})
}

// TestApplyStaticValidation covers the per-command checks that need no state.
func TestApplyStaticValidation(t *testing.T) {
	invalidUTF8 := "bad\xc3\x28"
	cases := []struct {
		name  string
		op    int64
		cmd   Command
		state func() *State
		err   *Error
	}{
		{"CreateRoom no owner", uOwner, &CreateRoom{SeatCount: 8}, creatingFixture, ErrInvalidArgument},
		{"CreateRoom negative host", uOwner, &CreateRoom{OwnerUserID: uOwner, HostUserID: -1, SeatCount: 8}, creatingFixture, ErrInvalidArgument},
		{"CreateRoom 0 seats", uOwner, &CreateRoom{OwnerUserID: uOwner, SeatCount: 0}, creatingFixture, ErrBadSeatCount},
		{"CreateRoom negative seats", uOwner, &CreateRoom{OwnerUserID: uOwner, SeatCount: -8}, creatingFixture, ErrBadSeatCount},
		{"CreateRoom 21 seats", uOwner, &CreateRoom{OwnerUserID: uOwner, SeatCount: MaxSeats + 1}, creatingFixture, ErrBadSeatCount},
		{"CreateRoom mode too long", uOwner, &CreateRoom{OwnerUserID: uOwner, SeatCount: 8, Mode: strings.Repeat("m", MaxShortText+1)}, creatingFixture, ErrFieldTooLong},
		{"CreateRoom region invalid UTF-8", uOwner, &CreateRoom{OwnerUserID: uOwner, SeatCount: 8, Region: invalidUTF8}, creatingFixture, ErrInvalidArgument},
		{"CreateRoom title too long", uOwner, &CreateRoom{OwnerUserID: uOwner, SeatCount: 8, Title: strings.Repeat("t", MaxTitleLen+1)}, creatingFixture, ErrFieldTooLong},
		{"JoinRoom nickname too long", uVisitor, &JoinRoom{Nickname: strings.Repeat("n", MaxShortText+1)}, nil, ErrFieldTooLong},
		{"JoinRoom avatar too long", uVisitor, &JoinRoom{AvatarURL: strings.Repeat("a", MaxURLLen+1)}, nil, ErrFieldTooLong},
		{"JoinRoom vehicle invalid UTF-8", uVisitor, &JoinRoom{Vehicle: invalidUTF8}, nil, ErrInvalidArgument},
		{"JoinRoom entry effect too long", uVisitor, &JoinRoom{EntryEffect: strings.Repeat("e", MaxShortText+1)}, nil, ErrFieldTooLong},
		{"JoinRoom nickname invalid UTF-8", uVisitor, &JoinRoom{Nickname: "\xff"}, nil, ErrInvalidArgument},
		{"TakeMic seat -1", uCarol, &TakeMic{SeatIndex: -1}, nil, ErrBadSeatIndex},
		{"TakeMic seat 20", uCarol, &TakeMic{SeatIndex: MaxSeats}, nil, ErrBadSeatIndex},
		{"MoveMic seat -1", uAlice, &MoveMic{ToSeatIndex: -1}, nil, ErrBadSeatIndex},
		{"MoveMic seat 20", uAlice, &MoveMic{ToSeatIndex: MaxSeats}, nil, ErrBadSeatIndex},
		{"LockMicSeat seat -1", uAdmin, &LockMicSeat{SeatIndex: -1, Locked: true}, nil, ErrBadSeatIndex},
		{"MuteMicSeat seat 20", uAdmin, &MuteMicSeat{SeatIndex: MaxSeats, Muted: true}, nil, ErrBadSeatIndex},
		{"KickFromMic self", uAdmin, &KickFromMic{TargetUserID: uAdmin}, nil, ErrBadTarget},
		{"KickFromMic no target", uAdmin, &KickFromMic{}, nil, ErrBadTarget},
		{"KickUser self", uAdmin, &KickUser{TargetUserID: uAdmin}, nil, ErrBadTarget},
		{"KickUser negative target", uAdmin, &KickUser{TargetUserID: -uAlice}, nil, ErrBadTarget},
		{"KickUser negative duration", uAdmin, &KickUser{TargetUserID: uAlice, DurationSeconds: -1}, nil, ErrBadDuration},
		{"KickUser duration too long", uAdmin, &KickUser{TargetUserID: uAlice, DurationSeconds: MaxDurationSecs + 1}, nil, ErrBadDuration},
		{"MuteUser self", uAdmin, &MuteUser{TargetUserID: uAdmin, DurationSeconds: 60}, nil, ErrBadTarget},
		{"MuteUser no target", uAdmin, &MuteUser{DurationSeconds: 60}, nil, ErrBadTarget},
		{"MuteUser negative duration", uAdmin, &MuteUser{TargetUserID: uAlice, DurationSeconds: -60}, nil, ErrBadDuration},
		{"MuteUser duration too long", uAdmin, &MuteUser{TargetUserID: uAlice, DurationSeconds: MaxDurationSecs + 1}, nil, ErrBadDuration},
		{"UnbanUser self", uAdmin, &UnbanUser{TargetUserID: uAdmin}, nil, ErrBadTarget},
		{"UnbanUser no target", uAdmin, &UnbanUser{}, nil, ErrBadTarget},
		{"SetAdmin self", uOwner, &SetAdmin{TargetUserID: uOwner, Admin: false}, nil, ErrBadTarget},
		{"SetAdmin no target", uOwner, &SetAdmin{Admin: true}, nil, ErrBadTarget},
		{"UpdateProfile nothing set", uOwner, &UpdateProfile{}, nil, ErrInvalidArgument},
		{"UpdateProfile title too long", uOwner, &UpdateProfile{Title: strp(strings.Repeat("t", MaxTitleLen+1))}, nil, ErrFieldTooLong},
		{"UpdateProfile notice too long", uOwner, &UpdateProfile{Notice: strp(strings.Repeat("n", MaxNoticeLen+1))}, nil, ErrFieldTooLong},
		{"UpdateProfile cover too long", uOwner, &UpdateProfile{CoverURL: strp(strings.Repeat("c", MaxURLLen+1))}, nil, ErrFieldTooLong},
		{"UpdateProfile notice invalid UTF-8", uOwner, &UpdateProfile{Title: strp("ok"), Notice: strp(invalidUTF8)}, nil, ErrInvalidArgument},
		{"ChangeBackground too long", uAdmin, &ChangeBackground{BackgroundURL: strings.Repeat("b", MaxURLLen+1)}, nil, ErrFieldTooLong},
		{"ChangeBackground invalid UTF-8", uAdmin, &ChangeBackground{BackgroundURL: invalidUTF8}, nil, ErrInvalidArgument},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			mk := tc.state
			if mk == nil {
				mk = fixture
			}
			s := mk()
			before := cloneState(s)
			e := env(tc.op, tc.cmd)
			requireReason(t, e.Validate(), tc.err)
			_, err := Apply(s, e)
			requireReason(t, err, tc.err)
			requireUnchanged(t, before, s)
		})
	}
	t.Run("limits themselves are valid", func(t *testing.T) {
		for _, cmd := range []Command{
			&CreateRoom{OwnerUserID: uOwner, SeatCount: MinSeats, Mode: strings.Repeat("m", MaxShortText), Title: strings.Repeat("t", MaxTitleLen)},
			&CreateRoom{OwnerUserID: uOwner, SeatCount: MaxSeats, Region: "东南亚"},
			&JoinRoom{Nickname: strings.Repeat("n", MaxShortText), AvatarURL: strings.Repeat("a", MaxURLLen)},
			&TakeMic{SeatIndex: MaxSeats - 1},
			&KickUser{TargetUserID: uAlice, DurationSeconds: MaxDurationSecs},
			&MuteUser{TargetUserID: uAlice, DurationSeconds: MaxDurationSecs},
			&UpdateProfile{Notice: strp(strings.Repeat("n", MaxNoticeLen))},
			&UpdateProfile{CoverURL: strp("")},
			&ChangeBackground{BackgroundURL: strings.Repeat("b", MaxURLLen)},
		} {
			if err := env(uOwner, cmd).Validate(); err != nil {
				t.Errorf("%s %+v: %v", cmd.Type(), cmd, err)
			}
		}
	})
}

func TestCreateRoom(t *testing.T) {
	created := func(owner, host int64) func(s *State) {
		return func(s *State) {
			s.Status, s.OwnerUserID, s.HostUserID = StatusOpen, owner, host
			s.Mode, s.Region, s.CreatedAt = "party", "sg", tNow
			s.Profile = Profile{Title: "Hello", ChatEnabled: true}
			s.Seats = make([]Seat, 8)
			s.Admins = map[int64]struct{}{owner: {}}
			if host != 0 {
				s.Admins[host] = struct{}{}
			}
			s.Economy.Day = testDay // the first command starts the business day
		}
	}
	cmd := func(owner, host int64) *CreateRoom {
		return &CreateRoom{OwnerUserID: owner, HostUserID: host, SeatCount: 8, Mode: "party", Region: "sg", Title: "Hello"}
	}
	createdEv := func(owner, host int64) []Event {
		return []Event{ev(EventRoomCreated, &RoomCreatedEvent{
			OwnerUserID: owner, HostUserID: host, SeatCount: 8, Mode: "party", Region: "sg", Title: "Hello", CreatedAt: tNow,
		})}
	}
	runApplyCases(t, []applyCase{
		{name: "owner creates", state: creatingFixture, env: env(uOwner, cmd(uOwner, uHost)),
			want: createdEv(uOwner, uHost), change: created(uOwner, uHost)},
		{name: "platform creates", state: creatingFixture, env: platformEnv(cmd(uOwner, uHost)),
			want: createdEv(uOwner, uHost), change: created(uOwner, uHost)},
		{name: "no host", state: creatingFixture, env: env(uOwner, cmd(uOwner, 0)),
			want: createdEv(uOwner, 0), change: created(uOwner, 0)},
		{name: "host is the owner", state: creatingFixture, env: env(uOwner, cmd(uOwner, uOwner)),
			want: createdEv(uOwner, uOwner), change: created(uOwner, uOwner)},
		{name: "the command's owner replaces the metadata's", state: creatingFixture, env: env(uAlice, cmd(uAlice, uBob)),
			want: createdEv(uAlice, uBob), change: created(uAlice, uBob)},
		{name: "someone else", state: creatingFixture, env: env(uAlice, cmd(uOwner, uHost)), err: ErrPermission},
		{name: "staff without the platform flag", state: creatingFixture, env: env(uStaff, cmd(uOwner, uHost)), err: ErrPermission},
		{name: "open room", env: env(uOwner, cmd(uOwner, uHost)), err: ErrRoomExists},
		{name: "closed room", state: closedFixture, env: env(uOwner, cmd(uOwner, uHost)), err: ErrRoomClosed},
	})
}

func TestCloseRoom(t *testing.T) {
	closedBy := func(op int64) []Event {
		return []Event{
			offEv(MicRoomClose, 0, op), offEv(MicRoomClose, 1, op), offEv(MicRoomClose, 2, op),
			offEv(MicRoomClose, 3, op), offEv(MicRoomClose, 4, op),
			ev(EventRoomClosed, &RoomClosedEvent{OperatorUserID: op, ClosedAt: tNow, OnlineCount: 7}),
		}
	}
	closed := func(s *State) {
		s.Status = StatusClosed
		clear(s.Members)
		for i := range s.Seats {
			emptySeat(s, i)
		}
	}
	emptyRoom := func() *State {
		s := fixture()
		clear(s.Members)
		for i := range s.Seats {
			emptySeat(s, i)
		}
		return s
	}
	runApplyCases(t, []applyCase{
		{name: "owner closes", env: env(uOwner, &CloseRoom{}), want: closedBy(uOwner), change: closed},
		{name: "platform closes", env: platformEnv(&CloseRoom{}), want: closedBy(uStaff), change: closed},
		{name: "empty room", state: emptyRoom, env: env(uOwner, &CloseRoom{}), change: closed,
			want: []Event{ev(EventRoomClosed, &RoomClosedEvent{OperatorUserID: uOwner, ClosedAt: tNow})}},
		{name: "host", env: env(uHost, &CloseRoom{}), err: ErrPermission},
		{name: "admin", env: env(uAdmin, &CloseRoom{}), err: ErrPermission},
		{name: "member", env: env(uAlice, &CloseRoom{}), err: ErrPermission},
		{name: "visitor", env: env(uVisitor, &CloseRoom{}), err: ErrPermission},
		{name: "already closed", state: closedFixture, env: env(uOwner, &CloseRoom{}), err: ErrRoomClosed},
	})
}

func TestJoinRoom(t *testing.T) {
	join := &JoinRoom{Nickname: "nine", AvatarURL: "https://img.example/9.png", Vehicle: "bike", EntryEffect: "stars"}
	joined := func(user, joinedAt int64, rejoin bool, online int) []Event {
		return []Event{ev(EventRoomUserJoined, &RoomUserJoinedEvent{
			UserID: user, Nickname: "nine", AvatarURL: "https://img.example/9.png", Vehicle: "bike", EntryEffect: "stars",
			Rejoin: rejoin, JoinedAt: joinedAt, OnlineCount: online,
		})}
	}
	member := func(user, at int64) func(s *State) {
		return func(s *State) {
			s.Members[user] = &Member{UserID: user, JoinedAt: at, Nickname: "nine", AvatarURL: "https://img.example/9.png", Vehicle: "bike", EntryEffect: "stars"}
			delete(s.Bans, user)
		}
	}
	full := func() *State {
		s := fixture()
		for id := int64(1000); len(s.Members) < MaxMembers; id++ {
			s.Members[id] = &Member{UserID: id, JoinedAt: t0}
		}
		return s
	}
	runApplyCases(t, []applyCase{
		{name: "visitor joins", env: env(uVisitor, join), want: joined(uVisitor, tNow, false, 8), change: member(uVisitor, tNow)},
		{name: "rejoin refreshes display fields, keeps joined_at", env: env(uAlice, join),
			want: joined(uAlice, t0+uAlice, true, 7), change: member(uAlice, t0+uAlice)},
		{name: "rejoin with empty fields clears them", env: env(uBob, &JoinRoom{}),
			want:   []Event{ev(EventRoomUserJoined, &RoomUserJoinedEvent{UserID: uBob, Rejoin: true, JoinedAt: t0 + uBob, OnlineCount: 7})},
			change: func(s *State) { s.Members[uBob] = &Member{UserID: uBob, JoinedAt: t0 + uBob} }},
		{name: "owner rejoins", env: env(uOwner, join), want: joined(uOwner, t0+uOwner, true, 7), change: member(uOwner, t0+uOwner)},
		{name: "banned user", env: env(uBanned, join), err: ErrBanned},
		{name: "banned user a millisecond before the ban ends", env: envAt(uBanned, banUntil-1, join), err: ErrBanned},
		{name: "ban ends", env: envAt(uBanned, banUntil, join),
			want: joined(uBanned, banUntil, false, 8), change: member(uBanned, banUntil)},
		{name: "permanent ban", env: envAt(uBannedAlways, tNow+100*365*24*3_600_000, join), err: ErrBanned},
		{name: "expired ban is dropped", env: env(uBanExpired, join), want: joined(uBanExpired, tNow, false, 8), change: member(uBanExpired, tNow)},
		{name: "chat-muted user may join", env: env(uMuteExpired, join), want: joined(uMuteExpired, tNow, false, 8), change: member(uMuteExpired, tNow)},
		{name: "room full", state: full, env: env(uVisitor, join), err: ErrRoomFull},
		{name: "rejoin in a full room", state: full, env: env(uAlice, join),
			want: joined(uAlice, t0+uAlice, true, MaxMembers), change: member(uAlice, t0+uAlice)},
	})
}

func TestLeaveRoom(t *testing.T) {
	left := func(user int64, online int) Event {
		return ev(EventRoomUserLeft, &RoomUserLeftEvent{UserID: user, Reason: "leave", OnlineCount: online})
	}
	runApplyCases(t, []applyCase{
		{name: "member not seated", env: env(uCarol, &LeaveRoom{}), want: []Event{left(uCarol, 6)},
			change: func(s *State) { delete(s.Members, uCarol) }},
		{name: "member on a seat", env: env(uAlice, &LeaveRoom{}),
			want:   []Event{offEv(MicRoomLeave, 3, uAlice), left(uAlice, 6)},
			change: func(s *State) { delete(s.Members, uAlice); emptySeat(s, 3) }},
		{name: "member on a muted seat", env: env(uBob, &LeaveRoom{}),
			want:   []Event{offEv(MicRoomLeave, 4, uBob), left(uBob, 6)},
			change: func(s *State) { delete(s.Members, uBob); emptySeat(s, 4) }},
		{name: "owner on a seat stays owner and admin", env: env(uOwner, &LeaveRoom{}),
			want:   []Event{offEv(MicRoomLeave, 0, uOwner), left(uOwner, 6)},
			change: func(s *State) { delete(s.Members, uOwner); emptySeat(s, 0) }},
		{name: "chat mute outlives leaving", env: env(uCarol, &LeaveRoom{}), want: []Event{left(uCarol, 6)},
			change: func(s *State) { delete(s.Members, uCarol) }},
		{name: "visitor", env: env(uVisitor, &LeaveRoom{}), err: ErrNotInRoom},
		{name: "banned user", env: env(uBanned, &LeaveRoom{}), err: ErrNotInRoom},
	})
}

func TestTakeMic(t *testing.T) {
	took := func(user int64, seat int32, micOn, muted bool) []Event {
		return []Event{micEv(RoomMicChangedEvent{
			Action: MicTake, UserID: user, SeatIndex: seat, FromSeatIndex: noSeat,
			MicOn: micOn, SeatMuted: muted, OperatorUserID: user, At: tNow,
		})}
	}
	runApplyCases(t, []applyCase{
		{name: "empty seat", env: env(uCarol, &TakeMic{SeatIndex: 7}), want: took(uCarol, 7, true, false),
			change: func(s *State) { s.Seats[7] = Seat{UserID: uCarol, MicOn: true, OccupiedSince: tNow} }},
		{name: "admin-muted seat starts with the mic off", env: env(uCarol, &TakeMic{SeatIndex: 6}), want: took(uCarol, 6, false, true),
			change: func(s *State) { s.Seats[6] = Seat{UserID: uCarol, MutedByAdmin: true, OccupiedSince: tNow} }},
		{name: "admin not seated", env: env(uAdmin2, &TakeMic{SeatIndex: 7}), want: took(uAdmin2, 7, true, false),
			change: func(s *State) { s.Seats[7] = Seat{UserID: uAdmin2, MicOn: true, OccupiedSince: tNow} }},
		{name: "visitor", env: env(uVisitor, &TakeMic{SeatIndex: 7}), err: ErrNotInRoom},
		{name: "banned user", env: env(uBanned, &TakeMic{SeatIndex: 7}), err: ErrNotInRoom},
		{name: "already on another seat", env: env(uAlice, &TakeMic{SeatIndex: 7}), err: ErrAlreadyOnMic},
		{name: "already on this seat", env: env(uAlice, &TakeMic{SeatIndex: 3}), err: ErrAlreadyOnMic},
		{name: "locked seat", env: env(uCarol, &TakeMic{SeatIndex: 5}), err: ErrSeatLocked},
		{name: "occupied seat", env: env(uCarol, &TakeMic{SeatIndex: 3}), err: ErrSeatOccupied},
		{name: "owner cannot take an occupied seat either", env: env(uAdmin2, &TakeMic{SeatIndex: 4}), err: ErrSeatOccupied},
		{name: "seat past the room's seats", env: env(uCarol, &TakeMic{SeatIndex: 8}), err: ErrBadSeatIndex},
	})
}

// Two users racing for one seat: the cell applies them one after the other and exactly one wins.
func TestTakeMicRace(t *testing.T) {
	s := fixture()
	if _, err := Apply(s, env(uCarol, &TakeMic{SeatIndex: 7})); err != nil {
		t.Fatalf("first TakeMic: %v", err)
	}
	before := cloneState(s)
	_, err := Apply(s, env(uAdmin2, &TakeMic{SeatIndex: 7}))
	requireReason(t, err, ErrSeatOccupied)
	requireUnchanged(t, before, s)
	if s.Seats[7].UserID != uCarol {
		t.Fatalf("seat 7 holds %d", s.Seats[7].UserID)
	}
}

func TestLeaveMic(t *testing.T) {
	runApplyCases(t, []applyCase{
		{name: "member leaves", env: env(uAlice, &LeaveMic{}), want: []Event{offEv(MicLeave, 3, uAlice)},
			change: func(s *State) { emptySeat(s, 3) }},
		{name: "muted seat stays muted", env: env(uBob, &LeaveMic{}), want: []Event{offEv(MicLeave, 4, uBob)},
			change: func(s *State) { s.Seats[4] = Seat{MutedByAdmin: true} }},
		{name: "owner leaves", env: env(uOwner, &LeaveMic{}), want: []Event{offEv(MicLeave, 0, uOwner)},
			change: func(s *State) { emptySeat(s, 0) }},
		{name: "member not seated", env: env(uCarol, &LeaveMic{}), err: ErrNotOnMic},
		{name: "visitor", env: env(uVisitor, &LeaveMic{}), err: ErrNotOnMic},
	})
}

func TestMoveMic(t *testing.T) {
	moved := func(user int64, from, to int32, micOn, muted bool) []Event {
		return []Event{micEv(RoomMicChangedEvent{
			Action: MicMove, UserID: user, SeatIndex: to, FromSeatIndex: from, MicOn: micOn, SeatMuted: muted,
			OperatorUserID: user, IntervalStart: fixture().Seats[from].OccupiedSince, IntervalEnd: tNow, At: tNow,
		})}
	}
	runApplyCases(t, []applyCase{
		{name: "to an empty seat, mic stays on", env: env(uAlice, &MoveMic{ToSeatIndex: 7}), want: moved(uAlice, 3, 7, true, false),
			change: func(s *State) { emptySeat(s, 3); s.Seats[7] = Seat{UserID: uAlice, MicOn: true, OccupiedSince: tNow} }},
		{name: "to a muted seat, mic goes off", env: env(uAlice, &MoveMic{ToSeatIndex: 6}), want: moved(uAlice, 3, 6, false, true),
			change: func(s *State) {
				emptySeat(s, 3)
				s.Seats[6] = Seat{UserID: uAlice, MutedByAdmin: true, OccupiedSince: tNow}
			}},
		{name: "off a muted seat, mic stays off", env: env(uBob, &MoveMic{ToSeatIndex: 7}), want: moved(uBob, 4, 7, false, false),
			change: func(s *State) { emptySeat(s, 4); s.Seats[7] = Seat{UserID: uBob, OccupiedSince: tNow} }},
		{name: "owner moves", env: env(uOwner, &MoveMic{ToSeatIndex: 7}), want: moved(uOwner, 0, 7, true, false),
			change: func(s *State) { emptySeat(s, 0); s.Seats[7] = Seat{UserID: uOwner, MicOn: true, OccupiedSince: tNow} }},
		{name: "not seated", env: env(uCarol, &MoveMic{ToSeatIndex: 7}), err: ErrNotOnMic},
		{name: "visitor", env: env(uVisitor, &MoveMic{ToSeatIndex: 7}), err: ErrNotOnMic},
		{name: "same seat", env: env(uAlice, &MoveMic{ToSeatIndex: 3}), err: ErrAlreadyOnMic},
		{name: "locked seat", env: env(uAlice, &MoveMic{ToSeatIndex: 5}), err: ErrSeatLocked},
		{name: "occupied seat", env: env(uAlice, &MoveMic{ToSeatIndex: 0}), err: ErrSeatOccupied},
		{name: "seat past the room's seats", env: env(uAlice, &MoveMic{ToSeatIndex: 8}), err: ErrBadSeatIndex},
	})
}

func TestKickFromMic(t *testing.T) {
	runApplyCases(t, []applyCase{
		{name: "admin kicks a member", env: env(uAdmin, &KickFromMic{TargetUserID: uAlice}),
			want: []Event{offEv(MicKick, 3, uAdmin)}, change: func(s *State) { emptySeat(s, 3) }},
		{name: "the member stays in the room", env: env(uHost, &KickFromMic{TargetUserID: uBob}),
			want: []Event{offEv(MicKick, 4, uHost)}, change: func(s *State) { emptySeat(s, 4) }},
		{name: "owner kicks an admin", env: env(uOwner, &KickFromMic{TargetUserID: uAdmin}),
			want: []Event{offEv(MicKick, 2, uOwner)}, change: func(s *State) { emptySeat(s, 2) }},
		{name: "platform kicks the host", env: platformEnv(&KickFromMic{TargetUserID: uHost}),
			want: []Event{offEv(MicKick, 1, uStaff)}, change: func(s *State) { emptySeat(s, 1) }},
		{name: "admin on another admin", env: env(uAdmin, &KickFromMic{TargetUserID: uHost}), err: ErrPermission},
		{name: "admin on the owner", env: env(uAdmin, &KickFromMic{TargetUserID: uOwner}), err: ErrTargetProtected},
		{name: "platform on the owner", env: platformEnv(&KickFromMic{TargetUserID: uOwner}), err: ErrTargetProtected},
		{name: "member", env: env(uAlice, &KickFromMic{TargetUserID: uBob}), err: ErrPermission},
		{name: "visitor", env: env(uVisitor, &KickFromMic{TargetUserID: uBob}), err: ErrPermission},
		{name: "target not seated", env: env(uAdmin, &KickFromMic{TargetUserID: uCarol}), err: ErrNotOnMic},
		{name: "target not in the room", env: env(uAdmin, &KickFromMic{TargetUserID: uVisitor}), err: ErrNotOnMic},
	})
}

func TestLockMicSeat(t *testing.T) {
	locked := func(seat int32, lock bool, op int64) Event {
		return ev(EventRoomMicSeatLocked, &RoomMicSeatLockedEvent{SeatIndex: seat, Locked: lock, OperatorUserID: op})
	}
	lockSeat := func(i int) func(s *State) {
		return func(s *State) { emptySeat(s, i); s.Seats[i].Locked = true }
	}
	runApplyCases(t, []applyCase{
		{name: "lock an empty seat", env: env(uAdmin, &LockMicSeat{SeatIndex: 7, Locked: true}),
			want: []Event{locked(7, true, uAdmin)}, change: lockSeat(7)},
		{name: "lock a muted empty seat keeps the mute", env: env(uAdmin, &LockMicSeat{SeatIndex: 6, Locked: true}),
			want: []Event{locked(6, true, uAdmin)}, change: func(s *State) { s.Seats[6].Locked = true }},
		{name: "locking an occupied seat evicts first", env: env(uAdmin, &LockMicSeat{SeatIndex: 3, Locked: true}),
			want: []Event{offEv(MicLockEvict, 3, uAdmin), locked(3, true, uAdmin)}, change: lockSeat(3)},
		{name: "evict from a muted seat", env: env(uHost, &LockMicSeat{SeatIndex: 4, Locked: true}),
			want: []Event{offEv(MicLockEvict, 4, uHost), locked(4, true, uHost)}, change: lockSeat(4)},
		{name: "admin locks their own seat", env: env(uAdmin, &LockMicSeat{SeatIndex: 2, Locked: true}),
			want: []Event{offEv(MicLockEvict, 2, uAdmin), locked(2, true, uAdmin)}, change: lockSeat(2)},
		{name: "owner evicts an admin", env: env(uOwner, &LockMicSeat{SeatIndex: 2, Locked: true}),
			want: []Event{offEv(MicLockEvict, 2, uOwner), locked(2, true, uOwner)}, change: lockSeat(2)},
		{name: "platform evicts the host", env: platformEnv(&LockMicSeat{SeatIndex: 1, Locked: true}),
			want: []Event{offEv(MicLockEvict, 1, uStaff), locked(1, true, uStaff)}, change: lockSeat(1)},
		{name: "unlock", env: env(uAdmin, &LockMicSeat{SeatIndex: 5, Locked: false}),
			want: []Event{locked(5, false, uAdmin)}, change: func(s *State) { s.Seats[5].Locked = false }},
		{name: "admin on another admin's seat", env: env(uAdmin, &LockMicSeat{SeatIndex: 1, Locked: true}), err: ErrPermission},
		{name: "admin on the owner's seat", env: env(uAdmin, &LockMicSeat{SeatIndex: 0, Locked: true}), err: ErrTargetProtected},
		{name: "platform on the owner's seat", env: platformEnv(&LockMicSeat{SeatIndex: 0, Locked: true}), err: ErrTargetProtected},
		{name: "member", env: env(uAlice, &LockMicSeat{SeatIndex: 7, Locked: true}), err: ErrPermission},
		{name: "member on their own seat", env: env(uAlice, &LockMicSeat{SeatIndex: 3, Locked: true}), err: ErrPermission},
		{name: "visitor", env: env(uVisitor, &LockMicSeat{SeatIndex: 7, Locked: true}), err: ErrPermission},
		{name: "already locked", env: env(uAdmin, &LockMicSeat{SeatIndex: 5, Locked: true}), err: ErrNoChange},
		{name: "already unlocked", env: env(uAdmin, &LockMicSeat{SeatIndex: 7, Locked: false}), err: ErrNoChange},
		{name: "seat past the room's seats", env: env(uAdmin, &LockMicSeat{SeatIndex: 8, Locked: true}), err: ErrBadSeatIndex},
	})
}

func TestMuteMicSeat(t *testing.T) {
	seatEv := func(action string, user int64, seat int32, micOn, muted bool, op int64) []Event {
		return []Event{micEv(RoomMicChangedEvent{
			Action: action, UserID: user, SeatIndex: seat, FromSeatIndex: noSeat, MicOn: micOn, SeatMuted: muted,
			OperatorUserID: op, At: tNow,
		})}
	}
	runApplyCases(t, []applyCase{
		{name: "mute an occupied seat turns the mic off", env: env(uAdmin, &MuteMicSeat{SeatIndex: 3, Muted: true}),
			want:   seatEv(MicSeatMute, uAlice, 3, false, true, uAdmin),
			change: func(s *State) { s.Seats[3].MutedByAdmin, s.Seats[3].MicOn = true, false }},
		{name: "unmute leaves the mic off", env: env(uAdmin, &MuteMicSeat{SeatIndex: 4, Muted: false}),
			want:   seatEv(MicSeatUnmute, uBob, 4, false, false, uAdmin),
			change: func(s *State) { s.Seats[4].MutedByAdmin = false }},
		{name: "mute an empty seat", env: env(uAdmin, &MuteMicSeat{SeatIndex: 7, Muted: true}),
			want: seatEv(MicSeatMute, noUser, 7, false, true, uAdmin), change: func(s *State) { s.Seats[7].MutedByAdmin = true }},
		{name: "mute a locked seat", env: env(uAdmin, &MuteMicSeat{SeatIndex: 5, Muted: true}),
			want: seatEv(MicSeatMute, noUser, 5, false, true, uAdmin), change: func(s *State) { s.Seats[5].MutedByAdmin = true }},
		{name: "admin mutes their own seat", env: env(uAdmin, &MuteMicSeat{SeatIndex: 2, Muted: true}),
			want: seatEv(MicSeatMute, uAdmin, 2, false, true, uAdmin), change: func(s *State) { s.Seats[2].MutedByAdmin = true }},
		{name: "owner mutes the host", env: env(uOwner, &MuteMicSeat{SeatIndex: 1, Muted: true}),
			want:   seatEv(MicSeatMute, uHost, 1, false, true, uOwner),
			change: func(s *State) { s.Seats[1].MutedByAdmin, s.Seats[1].MicOn = true, false }},
		{name: "admin on another admin's seat", env: env(uAdmin, &MuteMicSeat{SeatIndex: 1, Muted: true}), err: ErrPermission},
		{name: "admin on the owner's seat", env: env(uAdmin, &MuteMicSeat{SeatIndex: 0, Muted: true}), err: ErrTargetProtected},
		{name: "platform on the owner's seat", env: platformEnv(&MuteMicSeat{SeatIndex: 0, Muted: true}), err: ErrTargetProtected},
		{name: "member", env: env(uAlice, &MuteMicSeat{SeatIndex: 7, Muted: true}), err: ErrPermission},
		{name: "occupant cannot unmute their seat", env: env(uBob, &MuteMicSeat{SeatIndex: 4, Muted: false}), err: ErrPermission},
		{name: "already muted", env: env(uAdmin, &MuteMicSeat{SeatIndex: 4, Muted: true}), err: ErrNoChange},
		{name: "already unmuted", env: env(uAdmin, &MuteMicSeat{SeatIndex: 7, Muted: false}), err: ErrNoChange},
		{name: "seat past the room's seats", env: env(uAdmin, &MuteMicSeat{SeatIndex: 8, Muted: true}), err: ErrBadSeatIndex},
	})
}

func TestSetMyMic(t *testing.T) {
	micOff := func(s *State) { s.Seats[3].MicOn = false }
	aliceMicOff := func() *State { s := fixture(); micOff(s); return s }
	runApplyCases(t, []applyCase{
		{name: "off", env: env(uAlice, &SetMyMic{On: false}), change: micOff,
			want: []Event{micEv(RoomMicChangedEvent{Action: MicOff, UserID: uAlice, SeatIndex: 3, FromSeatIndex: noSeat, OperatorUserID: uAlice, At: tNow})}},
		{name: "on", state: aliceMicOff, env: env(uAlice, &SetMyMic{On: true}), change: func(s *State) { s.Seats[3].MicOn = true },
			want: []Event{micEv(RoomMicChangedEvent{Action: MicOn, UserID: uAlice, SeatIndex: 3, FromSeatIndex: noSeat, MicOn: true, OperatorUserID: uAlice, At: tNow})}},
		{name: "admin turns their own mic on", env: env(uAdmin, &SetMyMic{On: true}), change: func(s *State) { s.Seats[2].MicOn = true },
			want: []Event{micEv(RoomMicChangedEvent{Action: MicOn, UserID: uAdmin, SeatIndex: 2, FromSeatIndex: noSeat, MicOn: true, OperatorUserID: uAdmin, At: tNow})}},
		{name: "already on", env: env(uAlice, &SetMyMic{On: true}), err: ErrNoChange},
		{name: "already off", env: env(uAdmin, &SetMyMic{On: false}), err: ErrNoChange},
		{name: "occupant of an admin-muted seat cannot turn it on", env: env(uBob, &SetMyMic{On: true}), err: ErrSeatMuted},
		{name: "occupant of an admin-muted seat: off is no change", env: env(uBob, &SetMyMic{On: false}), err: ErrNoChange},
		{name: "not seated", env: env(uCarol, &SetMyMic{On: true}), err: ErrNotOnMic},
		{name: "visitor", env: env(uVisitor, &SetMyMic{On: false}), err: ErrNotOnMic},
	})
}

// An admin's seat mute holds against the occupant until an admin lifts it.
func TestSeatMuteHoldsUntilAdminUnmutes(t *testing.T) {
	s := fixture()
	steps := []struct {
		e   *Envelope
		err *Error
	}{
		{env(uAdmin, &MuteMicSeat{SeatIndex: 3, Muted: true}), nil},
		{env(uAlice, &SetMyMic{On: true}), ErrSeatMuted},
		{env(uAlice, &MoveMic{ToSeatIndex: 6}), nil}, // to another muted seat: still muted
		{env(uAlice, &SetMyMic{On: true}), ErrSeatMuted},
		{env(uAdmin, &MuteMicSeat{SeatIndex: 6, Muted: false}), nil},
		{env(uAlice, &SetMyMic{On: true}), nil},
	}
	for i, st := range steps {
		before := cloneState(s)
		events, err := Apply(s, st.e)
		if st.err != nil {
			requireReason(t, err, st.err)
			requireUnchanged(t, before, s)
			continue
		}
		if err != nil {
			t.Fatalf("step %d %s: %v", i, st.e.Command.Type(), err)
		}
		checkSuccess(t, before, s, st.e, events)
	}
	if !s.Seats[6].MicOn || s.Seats[3].MutedByAdmin != true {
		t.Fatalf("seats after: %+v %+v", s.Seats[3], s.Seats[6])
	}
}

func TestKickUser(t *testing.T) {
	kicked := func(user, op, until int64, wasIn bool) Event {
		return ev(EventRoomUserKicked, &RoomUserKickedEvent{UserID: user, OperatorUserID: op, BannedUntil: until, WasInRoom: wasIn})
	}
	out := func(user int64, seat int, until int64) func(s *State) {
		return func(s *State) {
			delete(s.Members, user)
			if seat != noSeat {
				emptySeat(s, seat)
			}
			s.Bans[user] = until
		}
	}
	runApplyCases(t, []applyCase{
		{name: "seated member for a minute", env: env(uAdmin, &KickUser{TargetUserID: uAlice, DurationSeconds: 60}),
			want:   []Event{offEv(MicRoomKick, 3, uAdmin), kicked(uAlice, uAdmin, tNow+60_000, true)},
			change: out(uAlice, 3, tNow+60_000)},
		{name: "member, permanently", env: env(uAdmin, &KickUser{TargetUserID: uCarol}),
			want: []Event{kicked(uCarol, uAdmin, permanent, true)}, change: out(uCarol, noSeat, permanent)},
		{name: "member on a muted seat", env: env(uHost, &KickUser{TargetUserID: uBob, DurationSeconds: 1}),
			want:   []Event{offEv(MicRoomKick, 4, uHost), kicked(uBob, uHost, tNow+1000, true)},
			change: out(uBob, 4, tNow+1000)},
		{name: "someone not in the room is banned ahead", env: env(uAdmin, &KickUser{TargetUserID: uVisitor, DurationSeconds: 60}),
			want: []Event{kicked(uVisitor, uAdmin, tNow+60_000, false)}, change: out(uVisitor, noSeat, tNow+60_000)},
		{name: "a ban is replaced by the new one", env: env(uAdmin, &KickUser{TargetUserID: uBanned, DurationSeconds: 0}),
			want: []Event{kicked(uBanned, uAdmin, permanent, false)}, change: out(uBanned, noSeat, permanent)},
		{name: "maximum duration", env: env(uAdmin, &KickUser{TargetUserID: uCarol, DurationSeconds: MaxDurationSecs}),
			want:   []Event{kicked(uCarol, uAdmin, tNow+MaxDurationSecs*1000, true)},
			change: out(uCarol, noSeat, tNow+MaxDurationSecs*1000)},
		{name: "owner kicks an admin", env: env(uOwner, &KickUser{TargetUserID: uAdmin, DurationSeconds: 60}),
			want:   []Event{offEv(MicRoomKick, 2, uOwner), kicked(uAdmin, uOwner, tNow+60_000, true)},
			change: out(uAdmin, 2, tNow+60_000)},
		{name: "platform kicks the host", env: platformEnv(&KickUser{TargetUserID: uHost, DurationSeconds: 60}),
			want:   []Event{offEv(MicRoomKick, 1, uStaff), kicked(uHost, uStaff, tNow+60_000, true)},
			change: out(uHost, 1, tNow+60_000)},
		{name: "admin on another admin", env: env(uAdmin, &KickUser{TargetUserID: uAdmin2, DurationSeconds: 60}), err: ErrPermission},
		{name: "admin on the host", env: env(uAdmin, &KickUser{TargetUserID: uHost}), err: ErrPermission},
		{name: "admin on the owner", env: env(uAdmin, &KickUser{TargetUserID: uOwner, DurationSeconds: 60}), err: ErrTargetProtected},
		{name: "platform on the owner", env: platformEnv(&KickUser{TargetUserID: uOwner}), err: ErrTargetProtected},
		{name: "member", env: env(uAlice, &KickUser{TargetUserID: uCarol, DurationSeconds: 60}), err: ErrPermission},
		{name: "visitor", env: env(uVisitor, &KickUser{TargetUserID: uCarol, DurationSeconds: 60}), err: ErrPermission},
	})
}

// A kicked user is out, off any seat, and cannot come back until the ban
// expires or an admin lifts it.
func TestKickedUserStaysOut(t *testing.T) {
	t.Run("timed ban expires", func(t *testing.T) {
		s := fixture()
		apply(t, s, env(uAdmin, &KickUser{TargetUserID: uAlice, DurationSeconds: 60}), nil)
		if s.IsMember(uAlice) || s.SeatOf(uAlice) != noSeat || !s.BannedAt(uAlice, tNow) {
			t.Fatalf("kicked user: member=%t seat=%d banned=%t", s.IsMember(uAlice), s.SeatOf(uAlice), s.BannedAt(uAlice, tNow))
		}
		apply(t, s, envAt(uAlice, tNow+1, &TakeMic{SeatIndex: 3}), ErrNotInRoom)
		apply(t, s, envAt(uAlice, tNow+59_999, &JoinRoom{}), ErrBanned)
		apply(t, s, envAt(uAlice, tNow+60_000, &JoinRoom{}), nil)
		if _, banned := s.Bans[uAlice]; banned {
			t.Errorf("expired ban kept after rejoin")
		}
		apply(t, s, envAt(uAlice, tNow+60_001, &TakeMic{SeatIndex: 3}), nil)
	})
	t.Run("permanent ban needs UnbanUser", func(t *testing.T) {
		s := fixture()
		apply(t, s, env(uAdmin, &KickUser{TargetUserID: uAlice}), nil)
		apply(t, s, envAt(uAlice, tNow+50*365*24*3_600_000, &JoinRoom{}), ErrBanned)
		apply(t, s, envAt(uCarol, tNow+1, &UnbanUser{TargetUserID: uAlice}), ErrPermission)
		apply(t, s, envAt(uAdmin, tNow+2, &UnbanUser{TargetUserID: uAlice}), nil)
		apply(t, s, envAt(uAlice, tNow+3, &JoinRoom{}), nil)
		apply(t, s, envAt(uAdmin, tNow+4, &UnbanUser{TargetUserID: uAlice}), ErrNotBanned)
	})
}

// A kicked admin is out of the room and banned from it (DESIGN 2.3 "a kicked
// user is out"), so they may no longer moderate it: they keep no power over
// the members of a room they cannot enter.
func TestKickedAdminCannotModerate(t *testing.T) {
	s := fixture()
	if _, err := Apply(s, env(uOwner, &KickUser{TargetUserID: uAdmin, DurationSeconds: 3600})); err != nil {
		t.Fatalf("owner kicks admin: %v", err)
	}
	for _, cmd := range []Command{
		&KickUser{TargetUserID: uCarol, DurationSeconds: 60},
		&LockMicSeat{SeatIndex: 3, Locked: true},
		&MuteUser{TargetUserID: uAlice, DurationSeconds: 60},
		&SetChatEnabled{Enabled: false},
	} {
		before := cloneState(s)
		_, err := Apply(s, envAt(uAdmin, tNow+1, cmd))
		if !errors.Is(err, ErrPermission) {
			t.Errorf("banned admin %d ran %s: error %v, want permission_denied", uAdmin, cmd.Type(), err)
		}
		if err == nil {
			s = before // keep the next row independent of this one
		}
	}
}

func TestMuteUser(t *testing.T) {
	muted := func(user, op, until int64) []Event {
		return []Event{ev(EventRoomUserMuted, &RoomUserMutedEvent{UserID: user, OperatorUserID: op, Muted: until != 0, MutedUntil: until})}
	}
	runApplyCases(t, []applyCase{
		{name: "mute a member", env: env(uAdmin, &MuteUser{TargetUserID: uAlice, DurationSeconds: 60}),
			want: muted(uAlice, uAdmin, tNow+60_000), change: func(s *State) { s.Mutes[uAlice] = tNow + 60_000 }},
		{name: "extend a mute", env: env(uAdmin, &MuteUser{TargetUserID: uCarol, DurationSeconds: 3600}),
			want: muted(uCarol, uAdmin, tNow+3_600_000), change: func(s *State) { s.Mutes[uCarol] = tNow + 3_600_000 }},
		{name: "mute someone not in the room", env: env(uAdmin, &MuteUser{TargetUserID: uVisitor, DurationSeconds: 60}),
			want: muted(uVisitor, uAdmin, tNow+60_000), change: func(s *State) { s.Mutes[uVisitor] = tNow + 60_000 }},
		{name: "duration 0 unmutes", env: env(uAdmin, &MuteUser{TargetUserID: uCarol}),
			want: muted(uCarol, uAdmin, 0), change: func(s *State) { delete(s.Mutes, uCarol) }},
		{name: "unmute a millisecond before expiry", env: envAt(uAdmin, muteUntil-1, &MuteUser{TargetUserID: uCarol}),
			want:   []Event{ev(EventRoomUserMuted, &RoomUserMutedEvent{UserID: uCarol, OperatorUserID: uAdmin})},
			change: func(s *State) { delete(s.Mutes, uCarol) }},
		{name: "owner mutes an admin", env: env(uOwner, &MuteUser{TargetUserID: uAdmin, DurationSeconds: 60}),
			want: muted(uAdmin, uOwner, tNow+60_000), change: func(s *State) { s.Mutes[uAdmin] = tNow + 60_000 }},
		{name: "platform mutes the host", env: platformEnv(&MuteUser{TargetUserID: uHost, DurationSeconds: 60}),
			want: muted(uHost, uStaff, tNow+60_000), change: func(s *State) { s.Mutes[uHost] = tNow + 60_000 }},
		{name: "unmute someone not muted", env: env(uAdmin, &MuteUser{TargetUserID: uAlice}), err: ErrNoChange},
		{name: "unmute an expired mute", env: env(uAdmin, &MuteUser{TargetUserID: uMuteExpired}), err: ErrNoChange},
		{name: "unmute at expiry", env: envAt(uAdmin, muteUntil, &MuteUser{TargetUserID: uCarol}), err: ErrNoChange},
		{name: "admin on another admin", env: env(uAdmin, &MuteUser{TargetUserID: uAdmin2, DurationSeconds: 60}), err: ErrPermission},
		{name: "admin on the owner", env: env(uAdmin, &MuteUser{TargetUserID: uOwner, DurationSeconds: 60}), err: ErrTargetProtected},
		{name: "platform on the owner", env: platformEnv(&MuteUser{TargetUserID: uOwner, DurationSeconds: 60}), err: ErrTargetProtected},
		{name: "member", env: env(uAlice, &MuteUser{TargetUserID: uCarol, DurationSeconds: 60}), err: ErrPermission},
		{name: "visitor", env: env(uVisitor, &MuteUser{TargetUserID: uCarol}), err: ErrPermission},
	})
}

// A chat mute lasts until its end and no longer.
func TestChatMuteExpires(t *testing.T) {
	s := fixture()
	if _, err := Apply(s, env(uAdmin, &MuteUser{TargetUserID: uAlice, DurationSeconds: 30})); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		at    int64
		muted bool
	}{{tNow, true}, {tNow + 29_999, true}, {tNow + 30_000, false}, {tNow + 86_400_000, false}} {
		if got := s.MutedAt(uAlice, tc.at); got != tc.muted {
			t.Errorf("MutedAt(%d) = %t, want %t", tc.at, got, tc.muted)
		}
	}
	if s.MutedAt(uBob, tNow) || s.MutedAt(uMuteExpired, tNow) || !s.MutedAt(uCarol, tNow) {
		t.Errorf("fixture mutes read wrong")
	}
}

func TestUnbanUser(t *testing.T) {
	unbanned := func(user, op int64) []Event {
		return []Event{ev(EventRoomUserUnbanned, &RoomUserUnbannedEvent{UserID: user, OperatorUserID: op})}
	}
	runApplyCases(t, []applyCase{
		{name: "timed ban", env: env(uAdmin, &UnbanUser{TargetUserID: uBanned}),
			want: unbanned(uBanned, uAdmin), change: func(s *State) { delete(s.Bans, uBanned) }},
		{name: "permanent ban", env: env(uOwner, &UnbanUser{TargetUserID: uBannedAlways}),
			want: unbanned(uBannedAlways, uOwner), change: func(s *State) { delete(s.Bans, uBannedAlways) }},
		{name: "platform", env: platformEnv(&UnbanUser{TargetUserID: uBanned}),
			want: unbanned(uBanned, uStaff), change: func(s *State) { delete(s.Bans, uBanned) }},
		{name: "not banned", env: env(uAdmin, &UnbanUser{TargetUserID: uAlice}), err: ErrNotBanned},
		{name: "ban expired", env: env(uAdmin, &UnbanUser{TargetUserID: uBanExpired}), err: ErrNotBanned},
		{name: "at the ban's end", env: envAt(uAdmin, banUntil, &UnbanUser{TargetUserID: uBanned}), err: ErrNotBanned},
		{name: "member", env: env(uAlice, &UnbanUser{TargetUserID: uBanned}), err: ErrPermission},
		{name: "visitor", env: env(uVisitor, &UnbanUser{TargetUserID: uBanned}), err: ErrPermission},
		{name: "the banned user", env: env(uBanned, &UnbanUser{TargetUserID: uBannedAlways}), err: ErrPermission},
	})
}

func TestSetAdmin(t *testing.T) {
	changed := func(user int64, admin bool, op int64) []Event {
		return []Event{ev(EventRoomAdminChanged, &RoomAdminChangedEvent{UserID: user, Admin: admin, OperatorUserID: op})}
	}
	fullAdmins := func(n int) func() *State {
		return func() *State {
			s := fixture()
			for id := int64(1000); len(s.Admins) < n; id++ {
				s.Admins[id] = struct{}{}
			}
			return s
		}
	}
	runApplyCases(t, []applyCase{
		{name: "owner promotes a member", env: env(uOwner, &SetAdmin{TargetUserID: uAlice, Admin: true}),
			want: changed(uAlice, true, uOwner), change: func(s *State) { s.Admins[uAlice] = struct{}{} }},
		{name: "owner demotes an admin", env: env(uOwner, &SetAdmin{TargetUserID: uAdmin, Admin: false}),
			want: changed(uAdmin, false, uOwner), change: func(s *State) { delete(s.Admins, uAdmin) }},
		{name: "owner demotes the host", env: env(uOwner, &SetAdmin{TargetUserID: uHost, Admin: false}),
			want: changed(uHost, false, uOwner), change: func(s *State) { delete(s.Admins, uHost) }},
		{name: "owner promotes someone not in the room", env: env(uOwner, &SetAdmin{TargetUserID: uVisitor, Admin: true}),
			want: changed(uVisitor, true, uOwner), change: func(s *State) { s.Admins[uVisitor] = struct{}{} }},
		{name: "platform promotes", env: platformEnv(&SetAdmin{TargetUserID: uCarol, Admin: true}),
			want: changed(uCarol, true, uStaff), change: func(s *State) { s.Admins[uCarol] = struct{}{} }},
		{name: "the last admin slot", state: fullAdmins(MaxAdmins - 1), env: env(uOwner, &SetAdmin{TargetUserID: uAlice, Admin: true}),
			want: changed(uAlice, true, uOwner), change: func(s *State) { s.Admins[uAlice] = struct{}{} }},
		{name: "too many admins", state: fullAdmins(MaxAdmins), env: env(uOwner, &SetAdmin{TargetUserID: uAlice, Admin: true}), err: ErrTooManyAdmins},
		{name: "already admin", env: env(uOwner, &SetAdmin{TargetUserID: uAdmin, Admin: true}), err: ErrNoChange},
		{name: "not an admin", env: env(uOwner, &SetAdmin{TargetUserID: uAlice, Admin: false}), err: ErrNoChange},
		{name: "platform demotes the owner", env: platformEnv(&SetAdmin{TargetUserID: uOwner, Admin: false}), err: ErrTargetProtected},
		{name: "platform promotes the owner", env: platformEnv(&SetAdmin{TargetUserID: uOwner, Admin: true}), err: ErrTargetProtected},
		{name: "admin", env: env(uAdmin, &SetAdmin{TargetUserID: uAlice, Admin: true}), err: ErrPermission},
		{name: "host", env: env(uHost, &SetAdmin{TargetUserID: uAlice, Admin: true}), err: ErrPermission},
		{name: "admin demotes another admin", env: env(uAdmin, &SetAdmin{TargetUserID: uAdmin2, Admin: false}), err: ErrPermission},
		{name: "admin on the owner", env: env(uAdmin, &SetAdmin{TargetUserID: uOwner, Admin: false}), err: ErrPermission},
		{name: "member", env: env(uAlice, &SetAdmin{TargetUserID: uCarol, Admin: true}), err: ErrPermission},
		{name: "visitor", env: env(uVisitor, &SetAdmin{TargetUserID: uVisitor + 1, Admin: true}), err: ErrPermission},
	})
}

func TestUpdateProfile(t *testing.T) {
	profile := func(title, notice, cover string, op int64) []Event {
		return []Event{ev(EventRoomProfileUpdated, &RoomProfileUpdatedEvent{Title: title, Notice: notice, CoverURL: cover, OperatorUserID: op})}
	}
	fx := fixture().Profile
	runApplyCases(t, []applyCase{
		{name: "title only", env: env(uOwner, &UpdateProfile{Title: strp("Saturday")}),
			want: profile("Saturday", fx.Notice, fx.CoverURL, uOwner), change: func(s *State) { s.Profile.Title = "Saturday" }},
		{name: "all fields", env: env(uOwner, &UpdateProfile{Title: strp("T"), Notice: strp("公告"), CoverURL: strp("https://img.example/c2.png")}),
			want: profile("T", "公告", "https://img.example/c2.png", uOwner),
			change: func(s *State) {
				s.Profile.Title, s.Profile.Notice, s.Profile.CoverURL = "T", "公告", "https://img.example/c2.png"
			}},
		{name: "clear the notice", env: env(uOwner, &UpdateProfile{Notice: strp("")}),
			want: profile(fx.Title, "", fx.CoverURL, uOwner), change: func(s *State) { s.Profile.Notice = "" }},
		{name: "platform", env: platformEnv(&UpdateProfile{CoverURL: strp("x")}),
			want: profile(fx.Title, fx.Notice, "x", uStaff), change: func(s *State) { s.Profile.CoverURL = "x" }},
		{name: "host", env: env(uHost, &UpdateProfile{Title: strp("x")}), err: ErrPermission},
		{name: "admin", env: env(uAdmin, &UpdateProfile{Title: strp("x")}), err: ErrPermission},
		{name: "member", env: env(uAlice, &UpdateProfile{Title: strp("x")}), err: ErrPermission},
		{name: "visitor", env: env(uVisitor, &UpdateProfile{Title: strp("x")}), err: ErrPermission},
	})
}

func TestChangeBackground(t *testing.T) {
	bg := func(url string, op int64) []Event {
		return []Event{ev(EventRoomBackgroundChanged, &RoomBackgroundChangedEvent{BackgroundURL: url, OperatorUserID: op})}
	}
	runApplyCases(t, []applyCase{
		{name: "admin", env: env(uAdmin, &ChangeBackground{BackgroundURL: "https://img.example/bg2.png"}),
			want: bg("https://img.example/bg2.png", uAdmin), change: func(s *State) { s.Profile.Background = "https://img.example/bg2.png" }},
		{name: "owner clears it", env: env(uOwner, &ChangeBackground{}),
			want: bg("", uOwner), change: func(s *State) { s.Profile.Background = "" }},
		{name: "platform", env: platformEnv(&ChangeBackground{BackgroundURL: "b"}),
			want: bg("b", uStaff), change: func(s *State) { s.Profile.Background = "b" }},
		{name: "same background", env: env(uAdmin, &ChangeBackground{BackgroundURL: fixture().Profile.Background}), err: ErrNoChange},
		{name: "member", env: env(uAlice, &ChangeBackground{BackgroundURL: "b"}), err: ErrPermission},
		{name: "visitor", env: env(uVisitor, &ChangeBackground{BackgroundURL: "b"}), err: ErrPermission},
	})
}

func TestSetChatEnabled(t *testing.T) {
	chat := func(on bool, op int64) []Event {
		return []Event{ev(EventRoomChatEnabledChanged, &RoomChatEnabledChangedEvent{Enabled: on, OperatorUserID: op})}
	}
	chatOff := func() *State { s := fixture(); s.Profile.ChatEnabled = false; return s }
	runApplyCases(t, []applyCase{
		{name: "admin turns chat off", env: env(uAdmin, &SetChatEnabled{Enabled: false}),
			want: chat(false, uAdmin), change: func(s *State) { s.Profile.ChatEnabled = false }},
		{name: "owner turns chat on", state: chatOff, env: env(uOwner, &SetChatEnabled{Enabled: true}),
			want: chat(true, uOwner), change: func(s *State) { s.Profile.ChatEnabled = true }},
		{name: "platform", env: platformEnv(&SetChatEnabled{Enabled: false}),
			want: chat(false, uStaff), change: func(s *State) { s.Profile.ChatEnabled = false }},
		{name: "already on", env: env(uAdmin, &SetChatEnabled{Enabled: true}), err: ErrNoChange},
		{name: "already off", state: chatOff, env: env(uAdmin, &SetChatEnabled{Enabled: false}), err: ErrNoChange},
		{name: "member", env: env(uAlice, &SetChatEnabled{Enabled: false}), err: ErrPermission},
		{name: "visitor", env: env(uVisitor, &SetChatEnabled{Enabled: false}), err: ErrPermission},
	})
}

// TestPermissionMatrix runs every moderated command as every kind of
// operator: owner/admin-level commands are open to owner, admins and platform;
// owner-level commands to owner and platform; everyone else gets
// permission_denied.
func TestPermissionMatrix(t *testing.T) {
	adminLevel := []Command{
		&KickFromMic{TargetUserID: uBob},
		&LockMicSeat{SeatIndex: 7, Locked: true},
		&MuteMicSeat{SeatIndex: 7, Muted: true},
		&KickUser{TargetUserID: uCarol, DurationSeconds: 60},
		&MuteUser{TargetUserID: uCarol, DurationSeconds: 60},
		&UnbanUser{TargetUserID: uBanned},
		&ChangeBackground{BackgroundURL: "b"},
		&SetChatEnabled{Enabled: false},
	}
	ownerLevel := []Command{
		&SetAdmin{TargetUserID: uCarol, Admin: true},
		&UpdateProfile{Title: strp("x")},
		&CloseRoom{},
	}
	operators := []struct {
		name     string
		env      func(Command) *Envelope
		admin    bool // may run admin-level commands
		ownerish bool // may run owner-level commands
	}{
		{"owner", func(c Command) *Envelope { return env(uOwner, c) }, true, true},
		{"platform", platformEnv, true, true},
		{"host", func(c Command) *Envelope { return env(uHost, c) }, true, false},
		{"admin", func(c Command) *Envelope { return env(uAdmin, c) }, true, false},
		{"admin not seated", func(c Command) *Envelope { return env(uAdmin2, c) }, true, false},
		{"member", func(c Command) *Envelope { return env(uAlice, c) }, false, false},
		{"visitor", func(c Command) *Envelope { return env(uVisitor, c) }, false, false},
		{"staff without the platform flag", func(c Command) *Envelope { return env(uStaff, c) }, false, false},
		{"banned user", func(c Command) *Envelope { return env(uBannedAlways, c) }, false, false},
	}
	check := func(t *testing.T, cmd Command, e *Envelope, allowed bool) {
		s := fixture()
		before := cloneState(s)
		events, err := Apply(s, e)
		if !allowed {
			requireReason(t, err, ErrPermission)
			requireUnchanged(t, before, s)
			return
		}
		if err != nil {
			t.Fatalf("%s: %v", cmd.Type(), err)
		}
		checkSuccess(t, before, s, e, events)
	}
	for _, op := range operators {
		t.Run(op.name, func(t *testing.T) {
			for _, cmd := range adminLevel {
				check(t, cmd, op.env(cmd), op.admin)
			}
			for _, cmd := range ownerLevel {
				check(t, cmd, op.env(cmd), op.ownerish)
			}
		})
	}
}

// TestEveryPathOffASeat takes alice (seated on 3 since t0+500) off her seat
// in every way there is and checks that exactly one RoomMicChanged closes
// [t0+500, command time] and that the seat is empty afterwards.
func TestEveryPathOffASeat(t *testing.T) {
	const at = tNow + 777
	paths := []struct {
		action string
		e      *Envelope
	}{
		{MicLeave, envAt(uAlice, at, &LeaveMic{})},
		{MicMove, envAt(uAlice, at, &MoveMic{ToSeatIndex: 7})},
		{MicKick, envAt(uAdmin, at, &KickFromMic{TargetUserID: uAlice})},
		{MicLockEvict, envAt(uAdmin, at, &LockMicSeat{SeatIndex: 3, Locked: true})},
		{MicRoomKick, envAt(uAdmin, at, &KickUser{TargetUserID: uAlice, DurationSeconds: 60})},
		{MicRoomClose, envAt(uOwner, at, &CloseRoom{})},
		{MicRoomLeave, envAt(uAlice, at, &LeaveRoom{})},
		{MicPresenceTimeout, presenceEnv(at, &ExpirePresence{Leave: []int64{uAlice}})},
		{MicOffline, presenceEnv(at, &ExpirePresence{Unseat: []SeatExpiry{{uAlice, 3}}})},
	}
	for _, p := range paths {
		t.Run(p.action, func(t *testing.T) {
			s := fixture()
			before := cloneState(s)
			events, err := Apply(s, p.e)
			if err != nil {
				t.Fatalf("Apply: %v", err)
			}
			var mine []*RoomMicChangedEvent
			for _, ev := range events {
				if d, ok := ev.Data.(*RoomMicChangedEvent); ok && d.UserID == uAlice {
					mine = append(mine, d)
				}
			}
			if len(mine) != 1 {
				t.Fatalf("%d RoomMicChanged for alice, want 1:\n%s", len(mine), dumpEvents(events))
			}
			d := mine[0]
			if d.Action != p.action || d.IntervalStart != t0+500 || d.IntervalEnd != at {
				t.Errorf("event %+v, want action %s interval [%d, %d]", *d, p.action, t0+500, at)
			}
			if s.Seats[3].UserID != noUser || s.Seats[3].OccupiedSince != 0 || s.Seats[3].MicOn || s.Seats[3].Charm != 0 {
				t.Errorf("seat 3 after: %+v", s.Seats[3])
			}
			checkSuccess(t, before, s, p.e, events)
		})
	}
}

// TestMicIntervalAcrossCommands: the interval a user opens by sitting down is
// the one closed when they get up, also across a move.
func TestMicIntervalAcrossCommands(t *testing.T) {
	s := fixture()
	steps := []struct {
		e          *Envelope
		start, end int64 // the closed interval, if any
	}{
		{envAt(uCarol, tNow+1000, &TakeMic{SeatIndex: 7}), 0, 0},
		{envAt(uCarol, tNow+2000, &SetMyMic{On: false}), 0, 0},
		{envAt(uCarol, tNow+5000, &MoveMic{ToSeatIndex: 6}), tNow + 1000, tNow + 5000},
		{envAt(uAdmin, tNow+6000, &MuteMicSeat{SeatIndex: 6, Muted: false}), 0, 0},
		{envAt(uCarol, tNow+9000, &LeaveMic{}), tNow + 5000, tNow + 9000},
	}
	for i, st := range steps {
		before := cloneState(s)
		events, err := Apply(s, st.e)
		if err != nil {
			t.Fatalf("step %d %s: %v", i, st.e.Command.Type(), err)
		}
		checkSuccess(t, before, s, st.e, events)
		d := events[0].Data.(*RoomMicChangedEvent)
		if d.IntervalStart != st.start || d.IntervalEnd != st.end {
			t.Errorf("step %d %s: interval [%d, %d], want [%d, %d]", i, d.Action, d.IntervalStart, d.IntervalEnd, st.start, st.end)
		}
	}
}

// TestVersionAndReplay drives a room from genesis through a mix of accepted
// and refused commands: the version moves by exactly one per success and not
// at all on a refusal, and replaying the logged successes from genesis (after
// an encode/decode round trip, as recovery does) rebuilds the same state.
func TestVersionAndReplay(t *testing.T) {
	steps := []struct {
		op  int64
		cmd Command
		err *Error
	}{
		{uAlice, &JoinRoom{}, ErrRoomNotOpen},
		{uOwner, &CreateRoom{OwnerUserID: uOwner, HostUserID: uHost, SeatCount: 9, Mode: "party", Title: "t"}, nil},
		{uOwner, &CreateRoom{OwnerUserID: uOwner, SeatCount: 9}, ErrRoomExists},
		{uOwner, &JoinRoom{Nickname: "boss"}, nil},
		{uAlice, &JoinRoom{Nickname: "alice"}, nil},
		{uBob, &JoinRoom{Nickname: "bob"}, nil},
		{uAlice, &TakeMic{SeatIndex: 2}, nil},
		{uBob, &TakeMic{SeatIndex: 2}, ErrSeatOccupied},
		{uBob, &TakeMic{SeatIndex: 3}, nil},
		{uAlice, &KickUser{TargetUserID: uBob}, ErrPermission},
		{uOwner, &SetAdmin{TargetUserID: uAlice, Admin: true}, nil},
		{uAlice, &KickUser{TargetUserID: uBob, DurationSeconds: 30}, nil},
		{uBob, &JoinRoom{}, ErrBanned},
		{uAlice, &MoveMic{ToSeatIndex: 3}, nil},
		{uOwner, &LockMicSeat{SeatIndex: 3, Locked: true}, nil}, // evicts alice, an admin: the owner outranks her
		{uAlice, &MuteUser{TargetUserID: uOwner, DurationSeconds: 60}, ErrTargetProtected},
		{uOwner, &UpdateProfile{Notice: strp("hi")}, nil},
		{uOwner, &CloseRoom{}, nil},
		{uAlice, &JoinRoom{}, ErrRoomClosed},
	}
	s := creatingFixture()
	var log []*Envelope
	var logTypes []CommandType
	var payloads [][]byte
	version := s.Version
	for i, st := range steps {
		e := envAt(st.op, tNow+int64(i)*1000, st.cmd)
		before := cloneState(s)
		events, err := Apply(s, e)
		if st.err != nil {
			requireReason(t, err, st.err)
			requireUnchanged(t, before, s)
			continue
		}
		if err != nil {
			t.Fatalf("step %d %s: %v", i, st.cmd.Type(), err)
		}
		checkSuccess(t, before, s, e, events)
		version++
		if s.Version != version {
			t.Fatalf("step %d: version %d, want %d", i, s.Version, version)
		}
		p, err := EncodeCommand(e)
		if err != nil {
			t.Fatal(err)
		}
		log, logTypes, payloads = append(log, e), append(logTypes, e.Command.Type()), append(payloads, p)
	}
	if s.Version != int64(len(log)) {
		t.Fatalf("version %d after %d successes", s.Version, len(log))
	}
	replayed := creatingFixture()
	for i := range log {
		e, err := DecodeCommand(testRoomID, log[i].CommandID, logTypes[i], payloads[i])
		if err != nil {
			t.Fatalf("decode %s: %v", logTypes[i], err)
		}
		if _, err := Apply(replayed, e); err != nil {
			t.Fatalf("replay %d %s: %v", i, logTypes[i], err)
		}
	}
	requireStateEqual(t, s, replayed)
}

func TestLanes(t *testing.T) {
	// DESIGN 2.2, for the events the domain has; RoomUserLeft follows the
	// seed, which lists it among the durable facts that still write room_outbox.
	want := map[EventType]Lanes{
		EventRoomCreated:            {IM: false, Outbox: true},
		EventRoomUserLeft:           {IM: true, Outbox: true, Priority: PriorityLow, Merge: true},
		EventRoomUserJoined:         {IM: true, Outbox: true, Priority: PriorityNormal, Merge: true},
		EventRoomMicChanged:         {IM: true, Outbox: true, Priority: PriorityHigh},
		EventRoomMicSeatLocked:      {IM: true, Outbox: true, Priority: PriorityHigh},
		EventRoomClosed:             {IM: true, Outbox: true, Priority: PriorityHigh},
		EventRoomUserKicked:         {IM: true, Outbox: true, Priority: PriorityHigh},
		EventRoomUserMuted:          {IM: true, Outbox: true, Priority: PriorityHigh},
		EventRoomUserUnbanned:       {IM: true, Outbox: true, Priority: PriorityNormal},
		EventRoomProfileUpdated:     {IM: true, Outbox: true, Priority: PriorityNormal},
		EventRoomBackgroundChanged:  {IM: true, Outbox: true, Priority: PriorityNormal},
		EventRoomChatEnabledChanged: {IM: true, Outbox: true, Priority: PriorityNormal},
		EventRoomAdminChanged:       {IM: true, Outbox: true, Priority: PriorityNormal},
		EventRoomHeatChanged:        {IM: true, Priority: PriorityLow, Coalesce: true},
		EventRoomRankChanged:        {IM: true, Priority: PriorityLow, Coalesce: true},
		EventRoomRocketFuelChanged:  {IM: true, Priority: PriorityLow, Coalesce: true},
		EventRoomGiftSent:           {IM: true, Outbox: true, Priority: PriorityNormal},
		EventRoomRocketIgnited:      {IM: true, Priority: PriorityHigh},
		EventRoomRocketLaunched:     {IM: true, Priority: PriorityHigh},
		// Every change of the mic queue, and of the roles, is High: the
		// mic row and who may act change with them.
		EventRoomMicRequestChanged:  {IM: true, Outbox: true, Priority: PriorityHigh},
		EventRoomMicInviteChanged:   {IM: true, Outbox: true, Priority: PriorityHigh},
		EventRoomMicApprovalChanged: {IM: true, Outbox: true, Priority: PriorityHigh},
		EventRoomOwnerChanged:       {IM: true, Outbox: true, Priority: PriorityHigh},
		EventRoomHostChanged:        {IM: true, Outbox: true, Priority: PriorityNormal},
	}
	types := EventTypes()
	if got, exp := slices.Sorted(slices.Values(types)), slices.Sorted(maps.Keys(want)); !slices.Equal(got, exp) {
		t.Fatalf("EventTypes() = %v, want %v", got, exp)
	}
	for _, typ := range types {
		l := LanesOf(typ)
		if l != want[typ] {
			t.Errorf("%s lanes %+v, want %+v", typ, l, want[typ])
		}
		if l.IM && l.Priority == "" {
			t.Errorf("%s goes to IM without a priority", typ)
		}
		if (Event{Type: typ}).Lanes() != l {
			t.Errorf("Event.Lanes disagrees with LanesOf for %s", typ)
		}
	}
	if l := LanesOf("RoomNoSuchThing"); l.IM || l.Outbox {
		t.Errorf("unknown event type routed: %+v", l)
	}
}

func TestGenesis(t *testing.T) {
	s := Genesis(testRoomID, uOwner, uHost, 12, "party", "")
	if s.Status != StatusCreating || len(s.Seats) != 12 || !s.Profile.ChatEnabled || s.Version != 0 {
		t.Fatalf("genesis: %s", dumpState(s))
	}
	if !s.IsAdmin(uOwner) || !s.IsAdmin(uHost) || len(s.Admins) != 2 {
		t.Fatalf("admins: %v", SortedIDs(s.Admins))
	}
	for _, n := range []int32{0, -1, MaxSeats + 1} {
		if got := len(Genesis(testRoomID, uOwner, 0, n, "", StatusOpen).Seats); got != defaultSeatCount {
			t.Errorf("Genesis with %d seats made %d", n, got)
		}
	}
	if s := Genesis(testRoomID, uOwner, 0, 8, "", StatusClosed); s.Status != StatusClosed || len(s.Admins) != 1 {
		t.Errorf("closed genesis: %s", dumpState(s))
	}
}

func TestErrorMatching(t *testing.T) {
	detailed := Errorf(ErrSeatOccupied, "seat %d", 3)
	if !errors.Is(detailed, ErrSeatOccupied) || errors.Is(detailed, ErrSeatLocked) {
		t.Fatalf("errors.Is on a detailed copy")
	}
	wrapped := errors.Join(errors.New("context"), detailed)
	if !errors.Is(wrapped, ErrSeatOccupied) || AsError(wrapped).Code != CodeRejected {
		t.Fatalf("wrapped: %v", AsError(wrapped))
	}
	if e := AsError(errors.New("driver exploded")); e.Code != CodeInternal || e.Reason != "internal" {
		t.Fatalf("foreign error: %+v", e)
	}
	if AsError(nil) != nil {
		t.Fatal("AsError(nil) != nil")
	}
}
