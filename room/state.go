// Package room is the pure state machine of one voice-chat room: its state,
// the commands that change it, the events they cause and the rules that
// refuse them. It imports only the standard library and does no I/O: time
// and every other outside input arrive as fields of the recorded command, so
// replaying the command log rebuilds exactly the state that was served live.
package room

import "slices"

// Status of a room.
type Status string

// Room statuses. A room exists as StatusCreating between its metadata and
// its CreateRoom command.
const (
	StatusCreating Status = "creating"
	StatusOpen     Status = "open"
	StatusClosed   Status = "closed"
)

// Limits enforced by validation. They bound memory per room and message size.
const (
	MinSeats         = 1
	MaxSeats         = 20
	MaxMembers       = 100_000
	MaxAdmins        = 50
	MaxIDLen         = 128
	MaxShortText     = 64   // mode, region, nickname, vehicle, entry effect
	MaxTitleLen      = 128  // title
	MaxURLLen        = 1024 // cover, background, avatar
	MaxNoticeLen     = 2048 // notice
	MaxDurationSecs  = 10 * 365 * 24 * 3600
	MaxRestrictions  = 10_000          // bans, and chat mutes, held per room
	MaxAt            = 253402300799999 // the last millisecond of year 9999: command times stay far from overflow
	MaxReasonLen     = 256             // the reason of a kick or a chat mute
	millisPerSecond  = 1000
	permanent        = 0 // a ban or mute "until" of 0 never expires
	noUser           = 0
	noSeat           = -1
	defaultSeatCount = 10
)

// Member is a user present in the room, with what the UI shows on entry.
type Member struct {
	UserID      int64
	JoinedAt    int64 // unix ms
	Nickname    string
	AvatarURL   string
	Vehicle     string
	EntryEffect string
}

// Seat is one mic seat. UserID 0 means empty.
type Seat struct {
	UserID        int64
	Locked        bool
	MutedByAdmin  bool  // 禁麦: the seat's audio is off and its occupant cannot turn it on
	MicOn         bool  // the occupant's own microphone switch
	OccupiedSince int64 // unix ms; opens the mic interval that RoomMicChanged closes
	Charm         int64 // gift value received while seated, this session and business day
}

// Profile is the room's editable presentation.
type Profile struct {
	Title       string
	Notice      string
	CoverURL    string
	Background  string
	ChatEnabled bool
}

// State is the whole live state of one room. It is owned by exactly one
// goroutine (its cell); nothing in it is safe for concurrent use.
type State struct {
	RoomID      string
	Version     int64 // the version of the last applied command; gap-free
	Status      Status
	OwnerUserID int64
	HostUserID  int64
	Mode        string
	Region      string
	CreatedAt   int64 // unix ms
	// LastAt is the time of the last applied command, unix ms: the next
	// command's time is never earlier, on this node or the next owner.
	LastAt  int64
	Profile Profile

	Admins  map[int64]struct{}
	Members map[int64]*Member
	Seats   []Seat
	// Mutes maps a chat-muted user to the unix ms the mute ends (0: permanent).
	Mutes map[int64]int64
	// Bans maps a kicked user to the unix ms the ban ends (0: permanent).
	Bans map[int64]int64
	// expiry is derived from Mutes and Bans, not encoded: the earliest end
	// of a ban or mute that is not permanent, 0 when none has one. A
	// command whose time reaches it removes what has ended (see expire).
	expiry int64

	// Rules are the economy rules gifts apply with; nil means DefaultRules.
	// They come from configuration and are not part of a snapshot: set them
	// with SetRules after decoding one.
	Rules *Rules
	// Economy is what gifts built up during the current business day.
	Economy Economy

	// BanReasons and MuteReasons hold the reason given with a ban (KickUser)
	// or chat mute (MuteUser), for the users of Bans and Mutes that have one.
	BanReasons  map[int64]string
	MuteReasons map[int64]string
	// MicApproval: members need an owner's or admin's approval to take a
	// seat (see micqueue.go).
	MicApproval bool
	// MicRequests are the pending mic requests and MicInvites the pending
	// mic invitations, by the user they are for. An entry that expired is
	// absent to every command until ExpireMicQueue removes it.
	MicRequests map[int64]*MicEntry
	MicInvites  map[int64]*MicEntry
}

// Genesis rebuilds the state of a room that has metadata but no snapshot: the
// owner and host make the admin set and seatCount makes the seats. Status is
// the stored room status ("" means creating).
func Genesis(roomID string, owner, host int64, seatCount int32, mode string, status Status) *State {
	if seatCount < MinSeats || seatCount > MaxSeats {
		seatCount = defaultSeatCount
	}
	if status == "" {
		status = StatusCreating
	}
	s := &State{
		RoomID:      roomID,
		Status:      status,
		OwnerUserID: owner,
		HostUserID:  host,
		Mode:        mode,
		Profile:     Profile{ChatEnabled: true},
		Seats:       make([]Seat, seatCount),
	}
	s.initMaps()
	s.seedAdmins()
	return s
}

func (s *State) initMaps() {
	s.Admins = make(map[int64]struct{})
	s.Members = make(map[int64]*Member)
	s.Mutes = make(map[int64]int64)
	s.Bans = make(map[int64]int64)
	s.Economy.Contrib = make(map[int64]int64)
	s.Economy.Rocket.Contributors = make(map[int64]int64)
	s.BanReasons = make(map[int64]string)
	s.MuteReasons = make(map[int64]string)
	s.MicRequests = make(map[int64]*MicEntry)
	s.MicInvites = make(map[int64]*MicEntry)
}

func (s *State) seedAdmins() {
	if s.OwnerUserID != noUser {
		s.Admins[s.OwnerUserID] = struct{}{}
	}
	if s.HostUserID != noUser {
		s.Admins[s.HostUserID] = struct{}{}
	}
}

// NewEmpty returns a state with its maps made, for decoders that fill it in.
func NewEmpty() *State {
	s := &State{}
	s.initMaps()
	return s
}

// SeatOf returns the index of the user's seat, or -1.
func (s *State) SeatOf(user int64) int {
	for i := range s.Seats {
		if s.Seats[i].UserID == user {
			return i
		}
	}
	return noSeat
}

// IsAdmin reports whether the user is in the admin set (the owner always is).
func (s *State) IsAdmin(user int64) bool {
	if user == s.OwnerUserID {
		return true
	}
	_, ok := s.Admins[user]
	return ok
}

// IsMember reports whether the user is in the room.
func (s *State) IsMember(user int64) bool {
	_, ok := s.Members[user]
	return ok
}

// BannedAt reports whether the user is banned at time at (unix ms).
func (s *State) BannedAt(user, at int64) bool {
	until, ok := s.Bans[user]
	return ok && (until == permanent || at < until)
}

// MutedAt reports whether the user is chat-muted at time at (unix ms).
func (s *State) MutedAt(user, at int64) bool {
	until, ok := s.Mutes[user]
	return ok && (until == permanent || at < until)
}

// NextExpiry returns the earliest time (unix ms) at which a ban or a chat
// mute ends, 0 when none will (there are none, or only permanent bans).
// The first command applied at or after it removes every restriction that
// has ended by its time.
func (s *State) NextExpiry() int64 { return s.expiry }

// DeriveExpiry computes NextExpiry from Bans and Mutes. A decoder that
// fills them in directly calls it once it is done.
func (s *State) DeriveExpiry() {
	s.expiry = 0
	for _, m := range []map[int64]int64{s.Bans, s.Mutes} {
		for _, until := range m {
			if until != permanent && (s.expiry == 0 || until < s.expiry) {
				s.expiry = until
			}
		}
	}
}

// ended reports whether a restriction that lasts until has ended at time at.
func ended(until, at int64) bool { return until != permanent && until <= at }

// restrict sets user's restriction in m (s.Bans or s.Mutes), keeping
// NextExpiry exact: replacing the earliest end looks for the next one.
func (s *State) restrict(m map[int64]int64, user, until int64) {
	old, had := m[user]
	m[user] = until
	switch {
	case had && old != permanent && old == s.expiry && until != old:
		s.DeriveExpiry()
	case until != permanent && (s.expiry == 0 || until < s.expiry):
		s.expiry = until
	}
}

// setReason records the reason of user's restriction in reasons ("" keeps none).
func setReason(reasons map[int64]string, user int64, reason string) {
	if reason == "" {
		delete(reasons, user)
	} else {
		reasons[user] = reason
	}
}

// lift removes user's restriction from m (s.Bans or s.Mutes) and its
// reason from reasons (s.BanReasons or s.MuteReasons).
func (s *State) lift(m map[int64]int64, reasons map[int64]string, user int64) {
	until, had := m[user]
	delete(m, user)
	delete(reasons, user)
	if had && until != permanent && until == s.expiry {
		s.DeriveExpiry()
	}
}

// full reports whether m (s.Bans or s.Mutes) has no room for one more
// restriction at time at; those that have ended by then do not count, as
// the command that adds one removes them.
func (s *State) full(m map[int64]int64, at int64) bool {
	if len(m) < MaxRestrictions {
		return false
	}
	if s.expiry == 0 || s.expiry > at {
		return true
	}
	over := 0
	for _, until := range m {
		if ended(until, at) {
			over++
		}
	}
	return len(m)-over >= MaxRestrictions
}

// expire removes the bans and mutes that have ended at time at. Apply calls
// it after every command it applies, so replay removes the same entries at
// the same command; it scans only when at reaches NextExpiry. Ending emits
// no event: RoomUserKicked and RoomUserMuted carried the end already.
func (s *State) expire(at int64) {
	if s.expiry == 0 || s.expiry > at {
		return
	}
	for _, r := range []struct {
		m       map[int64]int64
		reasons map[int64]string
	}{{s.Bans, s.BanReasons}, {s.Mutes, s.MuteReasons}} {
		for user, until := range r.m {
			if ended(until, at) {
				delete(r.m, user)
				delete(r.reasons, user)
			}
		}
	}
	s.DeriveExpiry()
}

// SortedMemberIDs returns member ids in ascending order (stable encodings).
func (s *State) SortedMemberIDs() []int64 { return SortedIDs(s.Members) }

// SortedAdminIDs returns admin ids in ascending order.
func (s *State) SortedAdminIDs() []int64 { return SortedIDs(s.Admins) }

// SortedIDs returns the keys of a user-keyed map in ascending order.
func SortedIDs[V any](m map[int64]V) []int64 {
	ids := make([]int64, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// OnMicCount is the number of occupied seats.
func (s *State) OnMicCount() int {
	n := 0
	for i := range s.Seats {
		if s.Seats[i].UserID != noUser {
			n++
		}
	}
	return n
}
