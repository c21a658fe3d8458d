package room

import "slices"

// Presence: members who disconnect without LeaveRoom.
//
// Who is online is not room state: the owner node keeps each member's
// last-seen time in memory (heartbeats, Tencent IM's state callbacks, the
// member's own commands) and decides, on its clock, who timed out. What it
// decides enters the room only through ExpirePresence, a logged internal
// command carrying the list of users and its time, so replay removes the
// same users at the same version. Apply re-checks every listed user against
// the state: a user who left, was kicked or changed seats since the decision
// is skipped, never removed twice.

// CmdExpirePresence is internal: the owner's cell issues it when members
// were not seen for the presence timeout, or seated members stayed offline
// past the mic grace; the API never submits it.
const CmdExpirePresence CommandType = "ExpirePresence"

// MaxPresenceExpiries bounds the users one ExpirePresence names (both
// lists together): a room of ten thousand silent listeners leaves in ten
// commands, not ten thousand, and one command's payload and events stay
// bounded.
const MaxPresenceExpiries = 1000

// Reasons a presence expiry gives, in RoomUserLeft.reason and
// RoomMicChanged.action.
const (
	// LeftPresenceTimeout: the member was not seen for the presence timeout.
	LeftPresenceTimeout = "presence_timeout"
	// MicPresenceTimeout: a seated member left the room by the presence
	// timeout, and so the seat.
	MicPresenceTimeout = "presence_timeout"
	// MicOffline: a seated member was offline longer than the mic grace and
	// lost the seat; they stay in the room.
	MicOffline = "mic_offline"
)

// ExpirePresence takes members the owner node found gone out of the room
// (Leave: not seen for the presence timeout; off their seat first) and
// seated members found offline past the grace off their seat (Unseat: they
// stay in the room). Internal: only SystemOperator with the platform flag
// may submit it. A listed user who is no longer a member (Leave) or no
// longer on the listed seat (Unseat) is skipped; when every one is, the command is refused
// (no_change) and nothing is logged.
type ExpirePresence struct {
	Leave  []int64      `json:"leave,omitempty"`
	Unseat []SeatExpiry `json:"unseat,omitempty"`
	// EndsMicEntries ends each Leave user's mic request and invitation, as
	// LeaveRoom does. NewExpirePresence sets it: it is false only in rows
	// logged before it was, which replay applies as they were applied (a
	// left user's entry stayed until it expired).
	EndsMicEntries bool `json:"ends_mic_entries,omitempty"`
}

// NewExpirePresence returns an empty ExpirePresence as the service issues
// one now.
func NewExpirePresence() *ExpirePresence { return &ExpirePresence{EndsMicEntries: true} }

// SeatExpiry is a seated member to take off the seat they were found
// offline on; one who sits elsewhere by then keeps that seat.
type SeatExpiry struct {
	UserID    int64 `json:"user_id"`
	SeatIndex int32 `json:"seat_index"`
}

// Type names the command.
func (*ExpirePresence) Type() CommandType { return CmdExpirePresence }

func (c *ExpirePresence) validate(env *Envelope) error {
	if !env.Platform || env.Operator != SystemOperator {
		return ErrPermission
	}
	n := len(c.Leave) + len(c.Unseat)
	if n == 0 || n > MaxPresenceExpiries {
		return Errorf(ErrInvalidArgument, "%d users to expire, want 1..%d", n, MaxPresenceExpiries)
	}
	users := slices.Clone(c.Leave)
	for _, e := range c.Unseat {
		if err := checkSeatIndex(e.SeatIndex); err != nil {
			return err
		}
		users = append(users, e.UserID)
	}
	all := make(map[int64]struct{}, n)
	for _, u := range users {
		if u <= 0 || u == SystemOperator {
			return Errorf(ErrInvalidArgument, "user %d", u)
		}
		if _, twice := all[u]; twice {
			return Errorf(ErrInvalidArgument, "user %d is listed twice", u)
		}
		all[u] = struct{}{}
	}
	return nil
}

// apply does for each Leave user what LeaveRoom does (off the seat, out of
// the room), with the reason presence_timeout, and takes each Unseat user
// off the listed seat (mic_offline). The events name no operator (0): the
// service decided.
func (c *ExpirePresence) apply(s *State, env *Envelope) ([]Event, error) {
	var events []Event
	for _, u := range c.Leave {
		if !s.IsMember(u) {
			continue
		}
		events = s.presenceVacate(u, MicPresenceTimeout, env, events)
		if c.EndsMicEntries {
			events = s.dropMicEntries(u, MicQueueRemoved, env, events)
		}
		delete(s.Members, u)
		events = append(events, Event{Type: EventRoomUserLeft, Data: &RoomUserLeftEvent{
			UserID: u, Reason: LeftPresenceTimeout, OnlineCount: len(s.Members),
		}})
	}
	for _, e := range c.Unseat {
		if int(e.SeatIndex) >= len(s.Seats) || s.Seats[e.SeatIndex].UserID != e.UserID {
			continue
		}
		events = s.presenceVacate(e.UserID, MicOffline, env, events)
	}
	if len(events) == 0 {
		return nil, ErrNoChange
	}
	return events, nil
}

// presenceVacate takes user off their seat, if any, as the service.
func (s *State) presenceVacate(user int64, action string, env *Envelope, events []Event) []Event {
	i := s.SeatOf(user)
	if i == noSeat {
		return events
	}
	ev := s.vacate(i, action, env)
	ev.Data.(*RoomMicChangedEvent).OperatorUserID = noUser
	return append(events, ev)
}

// MaxHeartbeatUsers bounds the users of one heartbeat: a gateway batches
// the members it serves, a thousand at a time at most.
const MaxHeartbeatUsers = 1000

// Refusals of a heartbeat. Each changes nothing.
var (
	// ErrTooManyUsers: a heartbeat names no user or more than MaxHeartbeatUsers.
	ErrTooManyUsers = sentinel(CodeInvalid, "too_many_users", "user_ids must hold 1 to MaxHeartbeatUsers users")
	// ErrBadUserID: a heartbeat names a user id that is not positive.
	ErrBadUserID = sentinel(CodeInvalid, "bad_user_id", "user ids are positive")
)

// CheckHeartbeat validates a heartbeat: a room id and 1..MaxHeartbeatUsers
// positive user ids (a user listed twice counts twice).
func CheckHeartbeat(roomID string, users []int64) error {
	if err := CheckRoomID(roomID); err != nil {
		return err
	}
	if len(users) == 0 || len(users) > MaxHeartbeatUsers {
		return Errorf(ErrTooManyUsers, "%d users, want 1..%d", len(users), MaxHeartbeatUsers)
	}
	for _, u := range users {
		if u <= 0 || u == SystemOperator {
			return Errorf(ErrBadUserID, "user %d", u)
		}
	}
	return nil
}
