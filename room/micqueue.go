package room

import (
	"cmp"
	"slices"
)

// Mic requests and invitations.
//
// A room may require approval to speak (State.MicApproval, set at creation
// and by SetMicApproval): a member then cannot TakeMic but asks with
// RequestMic, and an owner or admin seats them with ApproveMicRequest (or
// refuses with RejectMicRequest). Independently of the setting, an owner or
// admin may invite a member with InviteToMic; the invitee takes the seat
// with AcceptMicInvite, approval or not. Owners and admins take seats
// directly in every room.
//
// Requests and invitations expire MicRequestTTL and MicInviteTTL after the
// command that made them. Expiry is decided from command times alone: every
// command treats an entry whose ExpiresAt is at or before its time as
// absent, and the engine removes expired entries with the internal
// ExpireMicQueue command, so the removal is logged, replayed and shown like
// every other change. The TTLs are constants, not configuration: a
// command's outcome (its entry's ExpiresAt, and which entries a later
// ExpireMicQueue removes) must be the same when the log is replayed by
// another build.

// Limits and lifetimes of the mic queue.
const (
	// MicRequestTTL is how long a mic request waits for an answer, in ms.
	MicRequestTTL int64 = 60_000
	// MicInviteTTL is how long a mic invitation waits for an answer, in ms.
	MicInviteTTL int64 = 30_000
	// MaxMicRequests and MaxMicInvites bound the pending entries of a room.
	MaxMicRequests = 100
	MaxMicInvites  = 100
	// AnySeat in a request or invitation leaves the seat to the approval
	// (or acceptance): the first free unlocked seat.
	AnySeat int32 = -1
)

// MicEntry is a pending mic request (UserID asks to speak) or invitation
// (By invites UserID).
type MicEntry struct {
	UserID    int64
	SeatIndex int32 // AnySeat: the first free seat
	By        int64 // who made the entry: the requester, or the inviter
	At        int64 // unix ms of the command that made it
	ExpiresAt int64 // unix ms; the entry is absent from then on
}

// live reports whether the entry is still pending at time at.
func (e *MicEntry) live(at int64) bool { return e != nil && at < e.ExpiresAt }

// Mic queue actions carried by RoomMicRequestChanged and RoomMicInviteChanged.
const (
	MicQueueRequested = "requested" // a member asked to speak
	MicQueueInvited   = "invited"   // an owner or admin invited a member
	MicQueueCancelled = "cancelled" // the requester withdrew the request
	MicQueueApproved  = "approved"  // an owner or admin seated the requester
	MicQueueRejected  = "rejected"  // an owner or admin refused the request
	MicQueueAccepted  = "accepted"  // the invitee took the seat
	MicQueueDeclined  = "declined"  // the invitee declined
	MicQueueExpired   = "expired"   // nobody answered in time
	// MicQueueRemoved: the entry ended with its user: they left or were
	// kicked, took a seat otherwise, or approval was switched off (requests).
	MicQueueRemoved = "removed"
)

// RoomMicRequestChangedEvent is the payload of RoomMicRequestChanged: the
// mic request of one user after the change. Pending false means the user
// has no request any more.
type RoomMicRequestChangedEvent struct {
	Action         string `json:"action"`
	UserID         int64  `json:"user_id"`
	SeatIndex      int32  `json:"seat_index"` // -1: any free seat
	RequestedAt    int64  `json:"requested_at"`
	ExpiresAt      int64  `json:"expires_at"`
	Pending        bool   `json:"pending"`
	OperatorUserID int64  `json:"operator_user_id"`
	At             int64  `json:"at"`
}

// RoomMicInviteChangedEvent is the payload of RoomMicInviteChanged: the mic
// invitation of one user after the change. Pending false means the user has
// no invitation any more.
type RoomMicInviteChangedEvent struct {
	Action         string `json:"action"`
	UserID         int64  `json:"user_id"`
	SeatIndex      int32  `json:"seat_index"` // -1: any free seat
	InviterUserID  int64  `json:"inviter_user_id"`
	InvitedAt      int64  `json:"invited_at"`
	ExpiresAt      int64  `json:"expires_at"`
	Pending        bool   `json:"pending"`
	OperatorUserID int64  `json:"operator_user_id"`
	At             int64  `json:"at"`
}

// RoomMicApprovalChangedEvent is the payload of RoomMicApprovalChanged.
type RoomMicApprovalChangedEvent struct {
	Required       bool  `json:"required"`
	OperatorUserID int64 `json:"operator_user_id"`
}

func requestEvent(action string, e *MicEntry, pending bool, env *Envelope) Event {
	return Event{Type: EventRoomMicRequestChanged, Data: &RoomMicRequestChangedEvent{
		Action: action, UserID: e.UserID, SeatIndex: e.SeatIndex, RequestedAt: e.At, ExpiresAt: e.ExpiresAt,
		Pending: pending, OperatorUserID: env.Operator, At: env.At,
	}}
}

func inviteEvent(action string, e *MicEntry, pending bool, env *Envelope) Event {
	return Event{Type: EventRoomMicInviteChanged, Data: &RoomMicInviteChangedEvent{
		Action: action, UserID: e.UserID, SeatIndex: e.SeatIndex, InviterUserID: e.By, InvitedAt: e.At,
		ExpiresAt: e.ExpiresAt, Pending: pending, OperatorUserID: env.Operator, At: env.At,
	}}
}

// SortedMicEntries returns the entries of a queue in queue order: oldest
// first, then by user id.
func SortedMicEntries(m map[int64]*MicEntry) []*MicEntry {
	out := make([]*MicEntry, 0, len(m))
	for _, e := range m {
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b *MicEntry) int { return cmp.Or(cmp.Compare(a.At, b.At), cmp.Compare(a.UserID, b.UserID)) })
	return out
}

// NextMicExpiry returns the earliest ExpiresAt of the pending requests and
// invitations, 0 when there are none.
func (s *State) NextMicExpiry() int64 {
	next := int64(0)
	for _, m := range []map[int64]*MicEntry{s.MicRequests, s.MicInvites} {
		for _, e := range m {
			if next == 0 || e.ExpiresAt < next {
				next = e.ExpiresAt
			}
		}
	}
	return next
}

// dropMicEntries removes user's request and invitation, if any, with the
// action given (the user leaves, is kicked or takes a seat otherwise).
func (s *State) dropMicEntries(user int64, action string, env *Envelope, events []Event) []Event {
	if e, ok := s.MicRequests[user]; ok {
		delete(s.MicRequests, user)
		events = append(events, requestEvent(action, e, false, env))
	}
	if e, ok := s.MicInvites[user]; ok {
		delete(s.MicInvites, user)
		events = append(events, inviteEvent(action, e, false, env))
	}
	return events
}

// expireMic removes the entries of m that expired by env.At, oldest end
// first, and returns their events.
func (s *State) expireMic(m map[int64]*MicEntry, ev func(string, *MicEntry, bool, *Envelope) Event, env *Envelope, events []Event) []Event {
	var ended []*MicEntry
	for _, e := range m {
		if !e.live(env.At) {
			ended = append(ended, e)
		}
	}
	slices.SortFunc(ended, func(a, b *MicEntry) int {
		return cmp.Or(cmp.Compare(a.ExpiresAt, b.ExpiresAt), cmp.Compare(a.UserID, b.UserID))
	})
	for _, e := range ended {
		delete(m, e.UserID)
		events = append(events, ev(MicQueueExpired, e, false, env))
	}
	return events
}

// makeRoom makes space for one more entry in m: when m is at its bound, the
// entries that expired go (with their events); ErrMicQueueFull, with
// nothing changed, when max entries are live.
func (s *State) makeRoom(m map[int64]*MicEntry, max int, ev func(string, *MicEntry, bool, *Envelope) Event, env *Envelope) ([]Event, error) {
	if len(m) < max {
		return nil, nil
	}
	live := 0
	for _, e := range m {
		if e.live(env.At) {
			live++
		}
	}
	if live >= max {
		return nil, ErrMicQueueFull
	}
	return s.expireMic(m, ev, env, nil), nil
}

// freeSeat returns the seat a request or invitation for seat i takes now:
// seat i, or the first free unlocked seat for AnySeat.
func (s *State) freeSeat(i int32) (int, error) {
	if i == AnySeat {
		for j := range s.Seats {
			if !s.Seats[j].Locked && s.Seats[j].UserID == noUser {
				return j, nil
			}
		}
		return noSeat, ErrNoFreeSeat
	}
	seat, err := s.seatAt(i)
	switch {
	case err != nil:
		return noSeat, err
	case seat.Locked:
		return noSeat, ErrSeatLocked
	case seat.UserID != noUser:
		return noSeat, ErrSeatOccupied
	}
	return int(i), nil
}

// sit seats user on the free seat i, as TakeMic does.
func (s *State) sit(i int, user int64, env *Envelope) Event {
	seat := &s.Seats[i]
	seat.UserID, seat.MicOn, seat.OccupiedSince, seat.Charm = user, !seat.MutedByAdmin, env.At, 0
	return s.seatEvent(i, MicTake, env)
}

// checkQueueSeat checks the seat of a request or invitation: AnySeat or a
// seat index.
func checkQueueSeat(i int32) error {
	if i == AnySeat {
		return nil
	}
	return checkSeatIndex(i)
}

// SetMicApproval switches whether members need approval to take a seat
// (owner/admin). Switching it off drops the pending requests: members then
// take seats themselves.
type SetMicApproval struct {
	Required bool `json:"required"`
}

// RequestMic asks to speak, on a seat or AnySeat (a member not seated, in a
// room that requires approval).
type RequestMic struct {
	SeatIndex int32 `json:"seat_index"`
}

// CancelMicRequest withdraws the operator's request.
type CancelMicRequest struct{}

// ApproveMicRequest seats the requester (owner/admin).
type ApproveMicRequest struct {
	TargetUserID int64 `json:"target_user_id"`
}

// RejectMicRequest refuses a request (owner/admin).
type RejectMicRequest struct {
	TargetUserID int64 `json:"target_user_id"`
}

// InviteToMic invites a member to a seat or AnySeat (owner/admin).
type InviteToMic struct {
	TargetUserID int64 `json:"target_user_id"`
	SeatIndex    int32 `json:"seat_index"`
}

// AcceptMicInvite seats the operator as their invitation says.
type AcceptMicInvite struct{}

// DeclineMicInvite declines the operator's invitation.
type DeclineMicInvite struct{}

// ExpireMicQueue removes the requests and invitations that expired by its
// time. Internal: the engine submits it, as SystemOperator with the
// platform flag, when the earliest entry expires.
type ExpireMicQueue struct{}

func (*SetMicApproval) Type() CommandType    { return CmdSetMicApproval }
func (*RequestMic) Type() CommandType        { return CmdRequestMic }
func (*CancelMicRequest) Type() CommandType  { return CmdCancelMicRequest }
func (*ApproveMicRequest) Type() CommandType { return CmdApproveMicRequest }
func (*RejectMicRequest) Type() CommandType  { return CmdRejectMicRequest }
func (*InviteToMic) Type() CommandType       { return CmdInviteToMic }
func (*AcceptMicInvite) Type() CommandType   { return CmdAcceptMicInvite }
func (*DeclineMicInvite) Type() CommandType  { return CmdDeclineMicInvite }
func (*ExpireMicQueue) Type() CommandType    { return CmdExpireMicQueue }

func (*SetMicApproval) validate(*Envelope) error        { return nil }
func (c *RequestMic) validate(*Envelope) error          { return checkQueueSeat(c.SeatIndex) }
func (*CancelMicRequest) validate(*Envelope) error      { return nil }
func (c *ApproveMicRequest) validate(e *Envelope) error { return checkTarget(e, c.TargetUserID) }
func (c *RejectMicRequest) validate(e *Envelope) error  { return checkTarget(e, c.TargetUserID) }
func (*AcceptMicInvite) validate(*Envelope) error       { return nil }
func (*DeclineMicInvite) validate(*Envelope) error      { return nil }
func (c *InviteToMic) validate(e *Envelope) error {
	if err := checkTarget(e, c.TargetUserID); err != nil {
		return err
	}
	return checkQueueSeat(c.SeatIndex)
}
func (*ExpireMicQueue) validate(env *Envelope) error {
	if !env.Platform || env.Operator != SystemOperator {
		return ErrPermission
	}
	return nil
}

func (c *SetMicApproval) apply(s *State, env *Envelope) ([]Event, error) {
	if err := s.require(env, RoleAdmin); err != nil {
		return nil, err
	}
	if s.MicApproval == c.Required {
		return nil, ErrNoChange
	}
	s.MicApproval = c.Required
	var events []Event
	if !c.Required {
		for _, e := range SortedMicEntries(s.MicRequests) {
			delete(s.MicRequests, e.UserID)
			events = append(events, requestEvent(MicQueueRemoved, e, false, env))
		}
	}
	return append(events, Event{Type: EventRoomMicApprovalChanged, Data: &RoomMicApprovalChangedEvent{
		Required: c.Required, OperatorUserID: env.Operator,
	}}), nil
}

func (c *RequestMic) apply(s *State, env *Envelope) ([]Event, error) {
	switch _, err := s.seatAt(max(c.SeatIndex, 0)); {
	case c.SeatIndex != AnySeat && err != nil:
		return nil, err
	case !s.IsMember(env.Operator):
		return nil, ErrNotInRoom
	case s.SeatOf(env.Operator) != noSeat:
		return nil, ErrAlreadyOnMic
	case !s.MicApproval:
		return nil, ErrMicApprovalNotRequired
	case s.MicRequests[env.Operator].live(env.At):
		return nil, ErrMicRequestPending
	}
	events, err := s.makeRoom(s.MicRequests, MaxMicRequests, requestEvent, env)
	if err != nil {
		return nil, err
	}
	if old, ok := s.MicRequests[env.Operator]; ok {
		delete(s.MicRequests, env.Operator) // expired: replaced
		events = append(events, requestEvent(MicQueueExpired, old, false, env))
	}
	e := &MicEntry{UserID: env.Operator, SeatIndex: c.SeatIndex, By: env.Operator, At: env.At, ExpiresAt: env.At + MicRequestTTL}
	s.MicRequests[env.Operator] = e
	return append(events, requestEvent(MicQueueRequested, e, true, env)), nil
}

func (c *CancelMicRequest) apply(s *State, env *Envelope) ([]Event, error) {
	e := s.MicRequests[env.Operator]
	if !e.live(env.At) {
		return nil, ErrNoMicRequest
	}
	delete(s.MicRequests, env.Operator)
	return []Event{requestEvent(MicQueueCancelled, e, false, env)}, nil
}

func (c *ApproveMicRequest) apply(s *State, env *Envelope) ([]Event, error) {
	if err := s.require(env, RoleAdmin); err != nil {
		return nil, err
	}
	e := s.MicRequests[c.TargetUserID]
	if !e.live(env.At) {
		return nil, ErrNoMicRequest
	}
	i, err := s.freeSeat(e.SeatIndex)
	if err != nil {
		return nil, err
	}
	delete(s.MicRequests, c.TargetUserID)
	events := []Event{requestEvent(MicQueueApproved, e, false, env)}
	events = s.dropMicEntries(c.TargetUserID, MicQueueRemoved, env, events)
	return append(events, s.sit(i, c.TargetUserID, env)), nil
}

func (c *RejectMicRequest) apply(s *State, env *Envelope) ([]Event, error) {
	if err := s.require(env, RoleAdmin); err != nil {
		return nil, err
	}
	e := s.MicRequests[c.TargetUserID]
	if !e.live(env.At) {
		return nil, ErrNoMicRequest
	}
	delete(s.MicRequests, c.TargetUserID)
	return []Event{requestEvent(MicQueueRejected, e, false, env)}, nil
}

func (c *InviteToMic) apply(s *State, env *Envelope) ([]Event, error) {
	if err := s.require(env, RoleAdmin); err != nil {
		return nil, err
	}
	switch _, err := s.seatAt(max(c.SeatIndex, 0)); {
	case c.SeatIndex != AnySeat && err != nil:
		return nil, err
	case !s.IsMember(c.TargetUserID):
		return nil, ErrNotInRoom
	case s.SeatOf(c.TargetUserID) != noSeat:
		return nil, ErrAlreadyOnMic
	case s.MicInvites[c.TargetUserID].live(env.At):
		return nil, ErrMicInvitePending
	}
	events, err := s.makeRoom(s.MicInvites, MaxMicInvites, inviteEvent, env)
	if err != nil {
		return nil, err
	}
	if old, ok := s.MicInvites[c.TargetUserID]; ok {
		delete(s.MicInvites, c.TargetUserID) // expired: replaced
		events = append(events, inviteEvent(MicQueueExpired, old, false, env))
	}
	e := &MicEntry{UserID: c.TargetUserID, SeatIndex: c.SeatIndex, By: env.Operator, At: env.At, ExpiresAt: env.At + MicInviteTTL}
	s.MicInvites[c.TargetUserID] = e
	return append(events, inviteEvent(MicQueueInvited, e, true, env)), nil
}

func (c *AcceptMicInvite) apply(s *State, env *Envelope) ([]Event, error) {
	e := s.MicInvites[env.Operator]
	switch {
	case !e.live(env.At):
		return nil, ErrNoMicInvite
	case !s.IsMember(env.Operator):
		return nil, ErrNotInRoom // unreachable: leaving drops the invitation
	case s.SeatOf(env.Operator) != noSeat:
		return nil, ErrAlreadyOnMic // unreachable: taking a seat drops it
	}
	i, err := s.freeSeat(e.SeatIndex)
	if err != nil {
		return nil, err
	}
	delete(s.MicInvites, env.Operator)
	events := []Event{inviteEvent(MicQueueAccepted, e, false, env)}
	events = s.dropMicEntries(env.Operator, MicQueueRemoved, env, events)
	return append(events, s.sit(i, env.Operator, env)), nil
}

func (c *DeclineMicInvite) apply(s *State, env *Envelope) ([]Event, error) {
	e := s.MicInvites[env.Operator]
	if !e.live(env.At) {
		return nil, ErrNoMicInvite
	}
	delete(s.MicInvites, env.Operator)
	return []Event{inviteEvent(MicQueueDeclined, e, false, env)}, nil
}

func (c *ExpireMicQueue) apply(s *State, env *Envelope) ([]Event, error) {
	events := s.expireMic(s.MicRequests, requestEvent, env, nil)
	events = s.expireMic(s.MicInvites, inviteEvent, env, events)
	if len(events) == 0 {
		return nil, ErrMicQueueNotDue
	}
	return events, nil
}
