package room

import "slices"

// Apply validates env against s and, when every rule passes, applies it:
// the state changes, its version advances by one and the events are
// returned. A refused command returns an *Error and leaves s unchanged.
//
// The first command of a later business day (Rules.Day of its time) first
// resets the day's economy; the command then runs on the reset economy, and
// a refusal undoes the reset too. The display events of the values the reset
// zeroed come first, except those the command itself reports. Only a later
// day resets: when the clock goes back an hour Rules.Day can step back, and
// a room must not reset twice in one night.
//
// Every applied command also removes the bans and chat mutes that have
// ended by its time (State.NextExpiry), silently.
func Apply(s *State, env *Envelope) ([]Event, error) {
	if err := s.admit(env); err != nil {
		return nil, err
	}
	var rollback *dayRollback
	var reset []Event
	if day := s.rules().Day(env.At) + s.Economy.DayShift; day > s.Economy.Day {
		rollback, reset = s.startDay(day)
	}
	events, err := env.Command.apply(s, env)
	if err != nil {
		if rollback != nil {
			rollback.restore(s)
		}
		return nil, err
	}
	if len(reset) > 0 {
		events = withReset(reset, events)
	}
	s.Version++
	s.LastAt = max(s.LastAt, env.At)
	s.expire(env.At)
	return events, nil
}

// admit makes the checks every command passes before its own: the envelope,
// the time, the room and the room's status.
func (s *State) admit(env *Envelope) error {
	if err := env.Validate(); err != nil {
		return err
	}
	if env.At <= 0 || env.At > MaxAt {
		return Errorf(ErrBadTime, "command time %d", env.At)
	}
	if env.RoomID != s.RoomID {
		return Errorf(ErrInvalidArgument, "command for room %q applied to room %q", env.RoomID, s.RoomID)
	}
	switch _, create := env.Command.(*CreateRoom); {
	case s.Status == StatusClosed:
		return ErrRoomClosed
	case s.Status == StatusCreating && !create:
		return ErrRoomNotOpen
	case s.Status != StatusCreating && create:
		return ErrRoomExists
	}
	return nil
}

// withReset puts the reset's display events before the command's, leaving
// out a type the command reports itself: its value is the later one, and the
// IM lane keeps only the latest of a coalesced type.
func withReset(reset, events []Event) []Event {
	out := make([]Event, 0, len(reset)+len(events))
	for _, r := range reset {
		if !slices.ContainsFunc(events, func(e Event) bool { return e.Type == r.Type }) {
			out = append(out, r)
		}
	}
	return append(out, events...)
}

// CheckGift makes, without changing s, every check Apply makes of a
// SendGift envelope: the cell runs it before charging the sender's wallet,
// then applies the command with the charge's outcome filled in. The outcome's
// catalogue fields (price, kind) must already be set.
func CheckGift(s *State, env *Envelope) error {
	c, ok := env.Command.(*SendGift)
	if !ok {
		return Errorf(ErrInvalidArgument, "CheckGift needs a SendGift, not %T", env.Command)
	}
	if err := s.admit(env); err != nil {
		return err
	}
	return c.check(s, env)
}

func (s *State) seatAt(i int32) (*Seat, error) {
	if i < 0 || int(i) >= len(s.Seats) {
		return nil, Errorf(ErrBadSeatIndex, "seat_index %d, the room has %d seats", i, len(s.Seats))
	}
	return &s.Seats[i], nil
}

// vacate takes the occupant off seat i and closes their mic interval.
func (s *State) vacate(i int, action string, env *Envelope) Event {
	seat := &s.Seats[i]
	ev := &RoomMicChangedEvent{
		Action: action, UserID: seat.UserID, SeatIndex: int32(i), FromSeatIndex: noSeat,
		SeatMuted: seat.MutedByAdmin, OperatorUserID: env.Operator,
		IntervalStart: seat.OccupiedSince, IntervalEnd: env.At, At: env.At,
	}
	seat.UserID, seat.MicOn, seat.OccupiedSince, seat.Charm = noUser, false, 0, 0
	return Event{Type: EventRoomMicChanged, Data: ev}
}

// vacateUser takes user off their seat, if any, appending the event.
func (s *State) vacateUser(user int64, action string, env *Envelope, events []Event) []Event {
	if i := s.SeatOf(user); i != noSeat {
		events = append(events, s.vacate(i, action, env))
	}
	return events
}

func (s *State) seatEvent(i int, action string, env *Envelope) Event {
	seat := &s.Seats[i]
	return Event{Type: EventRoomMicChanged, Data: &RoomMicChangedEvent{
		Action: action, UserID: seat.UserID, SeatIndex: int32(i), FromSeatIndex: noSeat,
		MicOn: seat.MicOn, SeatMuted: seat.MutedByAdmin, OperatorUserID: env.Operator, At: env.At,
	}}
}

func (c *CreateRoom) apply(s *State, env *Envelope) ([]Event, error) {
	s.OwnerUserID, s.HostUserID, s.Mode, s.Region = c.OwnerUserID, c.HostUserID, c.Mode, c.Region
	s.Profile = Profile{Title: c.Title, ChatEnabled: true}
	s.Seats = make([]Seat, c.SeatCount)
	s.CreatedAt = env.At
	s.Status = StatusOpen
	s.MicApproval = c.MicApproval
	s.Admins = make(map[int64]struct{})
	s.seedAdmins()
	return []Event{{Type: EventRoomCreated, Data: &RoomCreatedEvent{
		OwnerUserID: c.OwnerUserID, HostUserID: c.HostUserID, SeatCount: c.SeatCount,
		Mode: c.Mode, Region: c.Region, Title: c.Title, CreatedAt: env.At, MicApproval: c.MicApproval,
	}}}, nil
}

func (c *CloseRoom) apply(s *State, env *Envelope) ([]Event, error) {
	if err := s.require(env, RoleOwner); err != nil {
		return nil, err
	}
	var events []Event
	for i := range s.Seats {
		if s.Seats[i].UserID != noUser {
			events = append(events, s.vacate(i, MicRoomClose, env))
		}
	}
	online := len(s.Members)
	clear(s.Members)
	clear(s.MicRequests) // RoomClosed ends them: nobody is left to seat
	clear(s.MicInvites)
	s.Status = StatusClosed
	return append(events, Event{Type: EventRoomClosed, Data: &RoomClosedEvent{
		OperatorUserID: env.Operator, ClosedAt: env.At, OnlineCount: online,
	}}), nil
}

func (c *JoinRoom) apply(s *State, env *Envelope) ([]Event, error) {
	user := env.Operator
	if s.BannedAt(user, env.At) {
		return nil, ErrBanned
	}
	m, rejoin := s.Members[user]
	if !rejoin && len(s.Members) >= MaxMembers {
		return nil, ErrRoomFull
	}
	if !rejoin {
		m = &Member{UserID: user, JoinedAt: env.At}
		s.Members[user] = m
	}
	m.Nickname, m.AvatarURL, m.Vehicle, m.EntryEffect = c.Nickname, c.AvatarURL, c.Vehicle, c.EntryEffect
	return []Event{{Type: EventRoomUserJoined, Data: &RoomUserJoinedEvent{
		UserID: user, Nickname: c.Nickname, AvatarURL: c.AvatarURL, Vehicle: c.Vehicle,
		EntryEffect: c.EntryEffect, Rejoin: rejoin, JoinedAt: m.JoinedAt, OnlineCount: len(s.Members),
	}}}, nil
}

func (c *LeaveRoom) apply(s *State, env *Envelope) ([]Event, error) {
	if !s.IsMember(env.Operator) {
		return nil, ErrNotInRoom
	}
	events := s.vacateUser(env.Operator, MicRoomLeave, env, nil)
	events = s.dropMicEntries(env.Operator, MicQueueRemoved, env, events)
	delete(s.Members, env.Operator)
	return append(events, Event{Type: EventRoomUserLeft, Data: &RoomUserLeftEvent{
		UserID: env.Operator, Reason: "leave", OnlineCount: len(s.Members),
	}}), nil
}

func (c *TakeMic) apply(s *State, env *Envelope) ([]Event, error) {
	seat, err := s.seatAt(c.SeatIndex)
	switch {
	case err != nil:
		return nil, err
	case !s.IsMember(env.Operator):
		return nil, ErrNotInRoom
	case s.SeatOf(env.Operator) != noSeat:
		return nil, ErrAlreadyOnMic
	case s.MicApproval && s.RoleOf(env.Operator, env.Platform, env.At) < RoleAdmin:
		return nil, ErrMicApprovalRequired
	case seat.Locked:
		return nil, ErrSeatLocked
	case seat.UserID != noUser:
		return nil, ErrSeatOccupied
	}
	events := s.dropMicEntries(env.Operator, MicQueueRemoved, env, nil)
	return append(events, s.sit(int(c.SeatIndex), env.Operator, env)), nil
}

func (c *LeaveMic) apply(s *State, env *Envelope) ([]Event, error) {
	i := s.SeatOf(env.Operator)
	if i == noSeat {
		return nil, ErrNotOnMic
	}
	return []Event{s.vacate(i, MicLeave, env)}, nil
}

func (c *MoveMic) apply(s *State, env *Envelope) ([]Event, error) {
	from := s.SeatOf(env.Operator)
	to, err := s.seatAt(c.ToSeatIndex)
	switch {
	case err != nil:
		return nil, err
	case from == noSeat:
		return nil, ErrNotOnMic
	case from == int(c.ToSeatIndex):
		return nil, ErrAlreadyOnMic
	case to.Locked:
		return nil, ErrSeatLocked
	case to.UserID != noUser:
		return nil, ErrSeatOccupied
	}
	micOn := s.Seats[from].MicOn
	closed := s.vacate(from, MicMove, env).Data.(*RoomMicChangedEvent)
	to.UserID, to.MicOn, to.OccupiedSince, to.Charm = env.Operator, micOn && !to.MutedByAdmin, env.At, 0
	closed.SeatIndex, closed.FromSeatIndex, closed.MicOn, closed.SeatMuted = c.ToSeatIndex, int32(from), to.MicOn, to.MutedByAdmin
	return []Event{{Type: EventRoomMicChanged, Data: closed}}, nil
}

func (c *KickFromMic) apply(s *State, env *Envelope) ([]Event, error) {
	if err := s.require(env, RoleAdmin); err != nil {
		return nil, err
	}
	i := s.SeatOf(c.TargetUserID)
	if i == noSeat {
		return nil, ErrNotOnMic
	}
	if err := s.requireOver(env, c.TargetUserID); err != nil {
		return nil, err
	}
	return []Event{s.vacate(i, MicKick, env)}, nil
}

// requireOverOccupant checks that the operator may act on the seat's occupant
// (an empty seat, or the operator's own seat, needs nothing more).
func (s *State) requireOverOccupant(env *Envelope, seat *Seat) error {
	if seat.UserID == noUser || seat.UserID == env.Operator {
		return nil
	}
	return s.requireOver(env, seat.UserID)
}

func (c *LockMicSeat) apply(s *State, env *Envelope) ([]Event, error) {
	if err := s.require(env, RoleAdmin); err != nil {
		return nil, err
	}
	seat, err := s.seatAt(c.SeatIndex)
	if err != nil {
		return nil, err
	}
	if seat.Locked == c.Locked {
		return nil, ErrNoChange
	}
	if c.Locked {
		if err := s.requireOverOccupant(env, seat); err != nil {
			return nil, err
		}
	}
	var events []Event
	if c.Locked && seat.UserID != noUser {
		events = append(events, s.vacate(int(c.SeatIndex), MicLockEvict, env))
	}
	seat.Locked = c.Locked
	return append(events, Event{Type: EventRoomMicSeatLocked, Data: &RoomMicSeatLockedEvent{
		SeatIndex: c.SeatIndex, Locked: c.Locked, OperatorUserID: env.Operator,
	}}), nil
}

func (c *MuteMicSeat) apply(s *State, env *Envelope) ([]Event, error) {
	if err := s.require(env, RoleAdmin); err != nil {
		return nil, err
	}
	seat, err := s.seatAt(c.SeatIndex)
	if err != nil {
		return nil, err
	}
	if seat.MutedByAdmin == c.Muted {
		return nil, ErrNoChange
	}
	if err := s.requireOverOccupant(env, seat); err != nil {
		return nil, err
	}
	seat.MutedByAdmin = c.Muted
	action := MicSeatUnmute
	if c.Muted {
		seat.MicOn = false
		action = MicSeatMute
	}
	return []Event{s.seatEvent(int(c.SeatIndex), action, env)}, nil
}

func (c *SetMyMic) apply(s *State, env *Envelope) ([]Event, error) {
	i := s.SeatOf(env.Operator)
	if i == noSeat {
		return nil, ErrNotOnMic
	}
	seat := &s.Seats[i]
	switch {
	case c.On && seat.MutedByAdmin:
		return nil, ErrSeatMuted
	case seat.MicOn == c.On:
		return nil, ErrNoChange
	}
	seat.MicOn = c.On
	action := MicOff
	if c.On {
		action = MicOn
	}
	return []Event{s.seatEvent(i, action, env)}, nil
}

func until(env *Envelope, secs int64) int64 {
	if secs == 0 {
		return permanent
	}
	return env.At + secs*millisPerSecond
}

func (c *KickUser) apply(s *State, env *Envelope) ([]Event, error) {
	if err := s.require(env, RoleAdmin); err != nil {
		return nil, err
	}
	if err := s.requireOver(env, c.TargetUserID); err != nil {
		return nil, err
	}
	ban := until(env, c.DurationSeconds)
	if old, banned := s.Bans[c.TargetUserID], s.BannedAt(c.TargetUserID, env.At); banned && (old == permanent || (ban != permanent && old > ban)) {
		ban = old // a kick never shortens a ban that is already longer
	} else if !banned && s.full(s.Bans, env.At) {
		return nil, ErrTooManyBans
	}
	wasIn := s.IsMember(c.TargetUserID)
	events := s.vacateUser(c.TargetUserID, MicRoomKick, env, nil)
	events = s.dropMicEntries(c.TargetUserID, MicQueueRemoved, env, events)
	delete(s.Members, c.TargetUserID)
	s.restrict(s.Bans, c.TargetUserID, ban)
	setReason(s.BanReasons, c.TargetUserID, c.Reason)
	return append(events, Event{Type: EventRoomUserKicked, Data: &RoomUserKickedEvent{
		UserID: c.TargetUserID, OperatorUserID: env.Operator, BannedUntil: ban, WasInRoom: wasIn, Reason: c.Reason,
	}}), nil
}

func (c *MuteUser) apply(s *State, env *Envelope) ([]Event, error) {
	if err := s.require(env, RoleAdmin); err != nil {
		return nil, err
	}
	if err := s.requireOver(env, c.TargetUserID); err != nil {
		return nil, err
	}
	ev := &RoomUserMutedEvent{UserID: c.TargetUserID, OperatorUserID: env.Operator}
	muted := s.MutedAt(c.TargetUserID, env.At)
	switch {
	case c.DurationSeconds == 0 && !c.Permanent && !muted:
		return nil, ErrNoChange
	case c.DurationSeconds == 0 && !c.Permanent:
		s.lift(s.Mutes, s.MuteReasons, c.TargetUserID)
	default:
		if !muted && s.full(s.Mutes, env.At) {
			return nil, ErrTooManyBans
		}
		ev.Muted, ev.MutedUntil, ev.Permanent, ev.Reason = true, until(env, c.DurationSeconds), c.Permanent, c.Reason
		s.restrict(s.Mutes, c.TargetUserID, ev.MutedUntil)
		setReason(s.MuteReasons, c.TargetUserID, c.Reason)
	}
	return []Event{{Type: EventRoomUserMuted, Data: ev}}, nil
}

func (c *UnbanUser) apply(s *State, env *Envelope) ([]Event, error) {
	if err := s.require(env, RoleAdmin); err != nil {
		return nil, err
	}
	banned, muted := s.BannedAt(c.TargetUserID, env.At), s.MutedAt(c.TargetUserID, env.At)
	if !banned && !muted {
		return nil, ErrNotBanned
	}
	if muted || env.Rev >= revOwnerUnmutedAndBannedRank { // as MuteUser lifting it; a ban too from that revision
		if err := s.requireOver(env, c.TargetUserID); err != nil {
			return nil, err
		}
	}
	var events []Event
	if banned {
		s.lift(s.Bans, s.BanReasons, c.TargetUserID)
		events = append(events, Event{Type: EventRoomUserUnbanned, Data: &RoomUserUnbannedEvent{
			UserID: c.TargetUserID, OperatorUserID: env.Operator,
		}})
	}
	if muted {
		s.lift(s.Mutes, s.MuteReasons, c.TargetUserID)
		events = append(events, Event{Type: EventRoomUserMuted, Data: &RoomUserMutedEvent{
			UserID: c.TargetUserID, OperatorUserID: env.Operator,
		}})
	}
	return events, nil
}

func (c *SetAdmin) apply(s *State, env *Envelope) ([]Event, error) {
	if err := s.require(env, RoleOwner); err != nil {
		return nil, err
	}
	_, isAdmin := s.Admins[c.TargetUserID]
	switch {
	case c.TargetUserID == s.OwnerUserID:
		return nil, ErrTargetProtected
	case isAdmin == c.Admin:
		return nil, ErrNoChange
	case c.Admin && len(s.Admins) >= MaxAdmins:
		return nil, ErrTooManyAdmins
	}
	if c.Admin {
		s.Admins[c.TargetUserID] = struct{}{}
	} else {
		delete(s.Admins, c.TargetUserID)
	}
	return []Event{{Type: EventRoomAdminChanged, Data: &RoomAdminChangedEvent{
		UserID: c.TargetUserID, Admin: c.Admin, OperatorUserID: env.Operator,
	}}}, nil
}

func (c *UpdateProfile) apply(s *State, env *Envelope) ([]Event, error) {
	if err := s.require(env, RoleOwner); err != nil {
		return nil, err
	}
	p := &s.Profile
	fields := []struct {
		dst *string
		src *string
	}{{&p.Title, c.Title}, {&p.Notice, c.Notice}, {&p.CoverURL, c.CoverURL}}
	changed := false
	for _, f := range fields {
		changed = changed || (f.src != nil && *f.src != *f.dst)
	}
	if !changed {
		return nil, ErrNoChange
	}
	for _, f := range fields {
		if f.src != nil {
			*f.dst = *f.src
		}
	}
	return []Event{{Type: EventRoomProfileUpdated, Data: &RoomProfileUpdatedEvent{
		Title: p.Title, Notice: p.Notice, CoverURL: p.CoverURL, OperatorUserID: env.Operator,
	}}}, nil
}

func (c *ChangeBackground) apply(s *State, env *Envelope) ([]Event, error) {
	if err := s.require(env, RoleAdmin); err != nil {
		return nil, err
	}
	if s.Profile.Background == c.BackgroundURL {
		return nil, ErrNoChange
	}
	s.Profile.Background = c.BackgroundURL
	return []Event{{Type: EventRoomBackgroundChanged, Data: &RoomBackgroundChangedEvent{
		BackgroundURL: c.BackgroundURL, OperatorUserID: env.Operator,
	}}}, nil
}

func (c *SetChatEnabled) apply(s *State, env *Envelope) ([]Event, error) {
	if err := s.require(env, RoleAdmin); err != nil {
		return nil, err
	}
	if s.Profile.ChatEnabled == c.Enabled {
		return nil, ErrNoChange
	}
	s.Profile.ChatEnabled = c.Enabled
	return []Event{{Type: EventRoomChatEnabledChanged, Data: &RoomChatEnabledChangedEvent{
		Enabled: c.Enabled, OperatorUserID: env.Operator,
	}}}, nil
}

// check makes the checks of a gift against the state.
func (c *SendGift) check(s *State, env *Envelope) error {
	if !s.IsMember(env.Operator) {
		return ErrNotInRoom
	}
	for _, r := range c.ReceiverUserIDs {
		if !s.IsMember(r) {
			return Errorf(ErrReceiverNotInRoom, "receiver %d", r)
		}
		if c.Outcome.ReceiversOnMic && s.SeatOf(r) == noSeat {
			return Errorf(ErrReceiverNotOnMic, "receiver %d", r)
		}
	}
	return nil
}

func (c *SendGift) apply(s *State, env *Envelope) ([]Event, error) {
	if err := c.check(s, env); err != nil {
		return nil, err
	}
	o, e := &c.Outcome, &s.Economy
	value := c.Cost()
	e.Heat = satAdd(e.Heat, value)
	rankChanged := e.contribute(env.Operator, value, s.rules().RankSize)
	perReceiver := o.Price * int64(c.Count)
	receivers := make([]GiftReceiver, len(c.ReceiverUserIDs))
	for i, r := range c.ReceiverUserIDs {
		receivers[i] = GiftReceiver{UserID: r, SeatIndex: noSeat}
		if seat := s.SeatOf(r); seat != noSeat {
			s.Seats[seat].Charm = satAdd(s.Seats[seat].Charm, perReceiver)
			receivers[i].SeatIndex, receivers[i].Charm = int32(seat), s.Seats[seat].Charm
			rankChanged = true
		}
	}
	ignitions := s.fuel(env.Operator, value, env)
	events := make([]Event, 0, 4+len(ignitions))
	events = append(events, Event{Type: EventRoomGiftSent, Data: &RoomGiftSentEvent{
		SenderUserID: env.Operator, Receivers: receivers, GiftID: c.GiftID, GiftName: o.Name, Kind: o.Kind,
		Price: o.Price, Count: c.Count, ComboID: c.ComboID, Cost: value, MultiplierBP: o.MultiplierBP,
		Reward: o.Reward, Region: s.Region, Regional: c.regional(), BusinessDay: e.Day, Heat: e.Heat, At: env.At,
	}}, s.heatEvent())
	if rankChanged {
		events = append(events, s.rankEvent())
	}
	if len(s.rules().RocketLevels) > 0 {
		events = append(events, s.fuelEvent())
	}
	return append(events, ignitions...), nil
}

func (c *LaunchRocket) apply(s *State, env *Envelope) ([]Event, error) {
	rk := &s.Economy.Rocket
	if c.Day != s.Economy.Day {
		return nil, ErrRocketStale
	}
	i := slices.IndexFunc(rk.Launches, func(l RocketLaunch) bool { return l.RocketID == c.RocketID })
	switch {
	case i < 0 || rk.Launches[i].Level != c.Level || rk.Launches[i].LaunchAt != c.LaunchAt:
		return nil, ErrRocketNotPending
	case env.At < c.LaunchAt:
		return nil, ErrRocketNotDue
	}
	l := rk.Launches[i]
	rk.Launches = slices.Delete(rk.Launches, i, i+1)
	return []Event{{Type: EventRoomRocketLaunched, Data: &RoomRocketLaunchedEvent{
		RocketID: l.RocketID, Level: l.Level, LaunchAt: l.LaunchAt, LaunchedAt: env.At, TopContributors: nonNil(l.Top),
	}}}, nil
}
