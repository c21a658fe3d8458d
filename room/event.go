package room

// EventType names an event. The names are part of both lanes' contracts.
type EventType string

// Event types.
const (
	EventRoomCreated            EventType = "RoomCreated"
	EventRoomClosed             EventType = "RoomClosed"
	EventRoomUserJoined         EventType = "RoomUserJoined"
	EventRoomUserLeft           EventType = "RoomUserLeft"
	EventRoomMicChanged         EventType = "RoomMicChanged"
	EventRoomMicSeatLocked      EventType = "RoomMicSeatLocked"
	EventRoomUserKicked         EventType = "RoomUserKicked"
	EventRoomUserMuted          EventType = "RoomUserMuted"
	EventRoomUserUnbanned       EventType = "RoomUserUnbanned"
	EventRoomAdminChanged       EventType = "RoomAdminChanged"
	EventRoomProfileUpdated     EventType = "RoomProfileUpdated"
	EventRoomBackgroundChanged  EventType = "RoomBackgroundChanged"
	EventRoomChatEnabledChanged EventType = "RoomChatEnabledChanged"
	// EventRoomGiftSent is the durable fact of a gift: the gift animation and
	// public screen through IM; statistics, activity, growth, task and CP
	// relation consumers through the outbox.
	EventRoomGiftSent EventType = "RoomGiftSent"
	// Display-only economy events: the gift economy emits them; they go to
	// the IM lane alone, latest value wins.
	EventRoomHeatChanged       EventType = "RoomHeatChanged"
	EventRoomRankChanged       EventType = "RoomRankChanged"
	EventRoomRocketFuelChanged EventType = "RoomRocketFuelChanged"
	// Display-only rocket moments: shown at once, never coalesced.
	EventRoomRocketIgnited  EventType = "RoomRocketIgnited"
	EventRoomRocketLaunched EventType = "RoomRocketLaunched"
	// Mic requests and invitations, and the approval switch (micqueue.go).
	EventRoomMicRequestChanged  EventType = "RoomMicRequestChanged"
	EventRoomMicInviteChanged   EventType = "RoomMicInviteChanged"
	EventRoomMicApprovalChanged EventType = "RoomMicApprovalChanged"
	// Roles (roles.go).
	EventRoomOwnerChanged EventType = "RoomOwnerChanged"
	EventRoomHostChanged  EventType = "RoomHostChanged"
)

// Priority is the Tencent IM message priority class of a direct-IM event.
type Priority string

// Priorities, highest first. Under pressure Low is shed before Normal; High never is.
const (
	PriorityHigh   Priority = "High"
	PriorityNormal Priority = "Normal"
	PriorityLow    Priority = "Low"
)

// Lanes says where an event goes after its command commits.
type Lanes struct {
	// IM: shown directly through the room's IM group (best effort).
	IM bool
	// Outbox: a durable fact written to room_outbox in the commit transaction.
	Outbox bool
	// Priority of the IM message.
	Priority Priority
	// Coalesce: only the latest value matters; the IM lane sends it at most once a second.
	Coalesce bool
	// Merge: under pressure the IM lane may merge bursts of it into one message.
	Merge bool
}

// lanes is the one table that routes every event type. Direct-IM-only events
// (heat, rank, rocket) write no outbox row; every durable fact with UI display
// goes to both lanes. RoomUserLeft is durable as the seed lists it (active-user
// statistics need the end of a visit), where the design's table had it IM only.
var lanes = map[EventType]Lanes{
	EventRoomCreated:            {IM: false, Outbox: true},
	EventRoomClosed:             {IM: true, Outbox: true, Priority: PriorityHigh},
	EventRoomUserJoined:         {IM: true, Outbox: true, Priority: PriorityNormal, Merge: true},
	EventRoomUserLeft:           {IM: true, Outbox: true, Priority: PriorityLow, Merge: true},
	EventRoomMicChanged:         {IM: true, Outbox: true, Priority: PriorityHigh},
	EventRoomMicSeatLocked:      {IM: true, Outbox: true, Priority: PriorityHigh},
	EventRoomUserKicked:         {IM: true, Outbox: true, Priority: PriorityHigh},
	EventRoomUserMuted:          {IM: true, Outbox: true, Priority: PriorityHigh},
	EventRoomUserUnbanned:       {IM: true, Outbox: true, Priority: PriorityNormal},
	EventRoomAdminChanged:       {IM: true, Outbox: true, Priority: PriorityNormal},
	EventRoomProfileUpdated:     {IM: true, Outbox: true, Priority: PriorityNormal},
	EventRoomBackgroundChanged:  {IM: true, Outbox: true, Priority: PriorityNormal},
	EventRoomChatEnabledChanged: {IM: true, Outbox: true, Priority: PriorityNormal},
	EventRoomHeatChanged:        {IM: true, Outbox: false, Priority: PriorityLow, Coalesce: true},
	EventRoomRankChanged:        {IM: true, Outbox: false, Priority: PriorityLow, Coalesce: true},
	EventRoomRocketFuelChanged:  {IM: true, Outbox: false, Priority: PriorityLow, Coalesce: true},
	EventRoomGiftSent:           {IM: true, Outbox: true, Priority: PriorityNormal},
	EventRoomRocketIgnited:      {IM: true, Outbox: false, Priority: PriorityHigh},
	EventRoomRocketLaunched:     {IM: true, Outbox: false, Priority: PriorityHigh},
	EventRoomMicRequestChanged:  {IM: true, Outbox: true, Priority: PriorityHigh},
	EventRoomMicInviteChanged:   {IM: true, Outbox: true, Priority: PriorityHigh},
	EventRoomMicApprovalChanged: {IM: true, Outbox: true, Priority: PriorityHigh},
	EventRoomOwnerChanged:       {IM: true, Outbox: true, Priority: PriorityHigh},
	EventRoomHostChanged:        {IM: true, Outbox: true, Priority: PriorityNormal},
}

// LanesOf returns the lanes of an event type. Unknown types go nowhere.
func LanesOf(t EventType) Lanes { return lanes[t] }

// EventTypes lists every event type the domain emits.
func EventTypes() []EventType {
	out := make([]EventType, 0, len(lanes))
	for t := range lanes {
		out = append(out, t)
	}
	return out
}

// Event is one thing that happened in a room. Data is one of the *Event
// payload structs below; it is JSON-encoded for the outbox and the IM lane.
type Event struct {
	Type EventType
	Data any
}

// Lanes returns where the event goes. A payload may raise its own IM
// priority (a big gift is High, other gifts Normal).
func (e Event) Lanes() Lanes {
	l := LanesOf(e.Type)
	if p, ok := e.Data.(interface{ imPriority() Priority }); ok {
		l.Priority = p.imPriority()
	}
	return l
}

// RoomCreatedEvent is the payload of RoomCreated.
type RoomCreatedEvent struct {
	OwnerUserID int64  `json:"owner_user_id"`
	HostUserID  int64  `json:"host_user_id"`
	SeatCount   int32  `json:"seat_count"`
	Mode        string `json:"mode"`
	Region      string `json:"region"`
	Title       string `json:"title"`
	CreatedAt   int64  `json:"created_at"`
	// MicApproval: members need approval to take a seat.
	MicApproval bool `json:"mic_approval_required,omitempty"`
}

// RoomClosedEvent is the payload of RoomClosed.
type RoomClosedEvent struct {
	OperatorUserID int64 `json:"operator_user_id"`
	ClosedAt       int64 `json:"closed_at"`
	OnlineCount    int   `json:"online_count_before"`
}

// RoomUserJoinedEvent is the payload of RoomUserJoined: entry animation,
// vehicle and online display, and active-user statistics.
type RoomUserJoinedEvent struct {
	UserID      int64  `json:"user_id"`
	Nickname    string `json:"nickname,omitempty"`
	AvatarURL   string `json:"avatar_url,omitempty"`
	Vehicle     string `json:"vehicle,omitempty"`
	EntryEffect string `json:"entry_effect,omitempty"`
	Rejoin      bool   `json:"rejoin,omitempty"`
	JoinedAt    int64  `json:"joined_at"`
	OnlineCount int    `json:"online_count"`
}

// RoomUserLeftEvent is the payload of RoomUserLeft.
type RoomUserLeftEvent struct {
	UserID      int64  `json:"user_id"`
	Reason      string `json:"reason"` // leave | presence_timeout
	OnlineCount int    `json:"online_count"`
}

// Mic actions carried by RoomMicChanged.
const (
	MicTake       = "take"
	MicLeave      = "leave"
	MicMove       = "move"
	MicKick       = "kick"        // an admin took the user off the seat
	MicLockEvict  = "lock_evict"  // the seat was locked under the user
	MicRoomKick   = "room_kick"   // the user was kicked from the room
	MicRoomClose  = "room_close"  // the room closed
	MicRoomLeave  = "room_leave"  // the user left the room
	MicSeatMute   = "seat_mute"   // an admin muted the seat
	MicSeatUnmute = "seat_unmute" // an admin unmuted the seat
	MicOn         = "mic_on"      // the occupant turned the microphone on
	MicOff        = "mic_off"     // the occupant turned the microphone off
)

// RoomMicChangedEvent is the payload of RoomMicChanged. When a user comes off
// a seat (every action but take, seat_mute/unmute and mic_on/off; move both
// closes one interval and opens another), IntervalStart and IntervalEnd close
// the mic interval exactly once, for mic-duration consumers.
type RoomMicChangedEvent struct {
	Action         string `json:"action"`
	UserID         int64  `json:"user_id"`
	SeatIndex      int32  `json:"seat_index"`
	FromSeatIndex  int32  `json:"from_seat_index"` // move only; otherwise -1
	MicOn          bool   `json:"mic_on"`
	SeatMuted      bool   `json:"seat_muted"`
	OperatorUserID int64  `json:"operator_user_id"`
	IntervalStart  int64  `json:"interval_start,omitempty"`
	IntervalEnd    int64  `json:"interval_end,omitempty"`
	At             int64  `json:"at"`
}

// RoomMicSeatLockedEvent is the payload of RoomMicSeatLocked.
type RoomMicSeatLockedEvent struct {
	SeatIndex      int32 `json:"seat_index"`
	Locked         bool  `json:"locked"`
	OperatorUserID int64 `json:"operator_user_id"`
}

// RoomUserKickedEvent is the payload of RoomUserKicked.
type RoomUserKickedEvent struct {
	UserID         int64  `json:"user_id"`
	OperatorUserID int64  `json:"operator_user_id"`
	BannedUntil    int64  `json:"banned_until"` // unix ms; 0 = permanent
	WasInRoom      bool   `json:"was_in_room"`
	Reason         string `json:"reason,omitempty"`
}

// RoomUserMutedEvent is the payload of RoomUserMuted (chat mute, 禁言).
type RoomUserMutedEvent struct {
	UserID         int64 `json:"user_id"`
	OperatorUserID int64 `json:"operator_user_id"`
	Muted          bool  `json:"muted"`
	MutedUntil     int64 `json:"muted_until"` // unix ms; 0 when unmuted or permanent
	// Permanent: muted until lifted (MuteUser or UnbanUser).
	Permanent bool   `json:"permanent,omitempty"`
	Reason    string `json:"reason,omitempty"`
}

// RoomUserUnbannedEvent is the payload of RoomUserUnbanned. Only an explicit
// UnbanUser emits it: a timed ban that runs out ends silently (its end was
// the BannedUntil of RoomUserKicked), and so does a chat mute.
type RoomUserUnbannedEvent struct {
	UserID         int64 `json:"user_id"`
	OperatorUserID int64 `json:"operator_user_id"`
}

// RoomAdminChangedEvent is the payload of RoomAdminChanged.
type RoomAdminChangedEvent struct {
	UserID         int64 `json:"user_id"`
	Admin          bool  `json:"admin"`
	OperatorUserID int64 `json:"operator_user_id"`
}

// RoomProfileUpdatedEvent is the payload of RoomProfileUpdated: the profile after the change.
type RoomProfileUpdatedEvent struct {
	Title          string `json:"title"`
	Notice         string `json:"notice"`
	CoverURL       string `json:"cover_url"`
	OperatorUserID int64  `json:"operator_user_id"`
}

// RoomBackgroundChangedEvent is the payload of RoomBackgroundChanged.
type RoomBackgroundChangedEvent struct {
	BackgroundURL  string `json:"background_url"`
	OperatorUserID int64  `json:"operator_user_id"`
}

// RoomChatEnabledChangedEvent is the payload of RoomChatEnabledChanged.
type RoomChatEnabledChangedEvent struct {
	Enabled        bool  `json:"enabled"`
	OperatorUserID int64 `json:"operator_user_id"`
}

// GiftReceiver is one receiver of a gift as RoomGiftSent shows it.
type GiftReceiver struct {
	UserID    int64 `json:"user_id"`
	SeatIndex int32 `json:"seat_index"` // -1 when not seated
	Charm     int64 `json:"charm"`      // the seat's charm after the gift; 0 when not seated
}

// RoomGiftSentEvent is the payload of RoomGiftSent. It is broadcast, so it
// carries no balance.
type RoomGiftSentEvent struct {
	SenderUserID int64          `json:"sender_user_id"`
	Receivers    []GiftReceiver `json:"receivers"`
	GiftID       string         `json:"gift_id"`
	GiftName     string         `json:"gift_name"`
	Kind         string         `json:"kind"`
	Price        int64          `json:"price"` // COIN per piece
	Count        int32          `json:"count"` // pieces per receiver
	ComboID      string         `json:"combo_id,omitempty"`
	Cost         int64          `json:"cost"` // price x count x receivers: the gift's value
	MultiplierBP int64          `json:"multiplier_bp"`
	Reward       int64          `json:"reward"`
	Region       string         `json:"region"`
	// Regional: the gift is big enough to show in the region's broadcast group.
	Regional    bool  `json:"regional"`
	BusinessDay int64 `json:"business_day"`
	Heat        int64 `json:"heat"` // the room's heat after the gift
	At          int64 `json:"at"`
}

// RegionalDisplay returns the room's region and whether the gift is shown
// in the region's broadcast group too.
func (e *RoomGiftSentEvent) RegionalDisplay() (region string, show bool) { return e.Region, e.Regional }

// imPriority makes a big gift (one shown regionally) High on the IM lane:
// its animation is never shed. Other gifts stay Normal.
func (e *RoomGiftSentEvent) imPriority() Priority {
	if e.Regional {
		return PriorityHigh
	}
	return PriorityNormal
}

// RoomHeatChangedEvent is the payload of RoomHeatChanged: the heat now.
type RoomHeatChangedEvent struct {
	Heat        int64 `json:"heat"`
	BusinessDay int64 `json:"business_day"`
}

// SeatCharm is one seat's charm as RoomRankChanged shows it.
type SeatCharm struct {
	SeatIndex int32 `json:"seat_index"`
	UserID    int64 `json:"user_id"` // 0: empty
	Charm     int64 `json:"charm"`
}

// RoomRankChangedEvent is the payload of RoomRankChanged: the visible rank
// and every seat's charm now.
type RoomRankChangedEvent struct {
	BusinessDay int64       `json:"business_day"`
	Top         []RankEntry `json:"top"`
	Seats       []SeatCharm `json:"seats"`
}

// RoomRocketFuelChangedEvent is the payload of RoomRocketFuelChanged: the
// rocket level charging now and its fuel.
type RoomRocketFuelChangedEvent struct {
	Level       int32 `json:"level"`
	Fuel        int64 `json:"fuel"`
	Threshold   int64 `json:"threshold"`
	Ignitions   int64 `json:"ignitions"`
	BusinessDay int64 `json:"business_day"`
}

// RoomRocketIgnitedEvent is the payload of RoomRocketIgnited: a level filled
// and its rocket launches at launch_at.
type RoomRocketIgnitedEvent struct {
	RocketID        int64       `json:"rocket_id"`
	Level           int32       `json:"level"`
	IgnitedAt       int64       `json:"ignited_at"`
	LaunchAt        int64       `json:"launch_at"`
	BusinessDay     int64       `json:"business_day"`
	TopContributors []RankEntry `json:"top_contributors"`
}

// RoomRocketLaunchedEvent is the payload of RoomRocketLaunched.
type RoomRocketLaunchedEvent struct {
	RocketID        int64       `json:"rocket_id"`
	Level           int32       `json:"level"`
	LaunchAt        int64       `json:"launch_at"`
	LaunchedAt      int64       `json:"launched_at"`
	TopContributors []RankEntry `json:"top_contributors"`
}

// CheckEventType accepts "" or a known event type.
func CheckEventType(t string) error {
	if _, ok := lanes[EventType(t)]; t != "" && !ok {
		return Errorf(ErrInvalidArgument, "unknown event type %q", t)
	}
	return nil
}
