package room

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"unicode/utf8"
)

// CommandType names a command; it is the command log's payload decoder key.
type CommandType string

// Command types.
const (
	CmdCreateRoom       CommandType = "CreateRoom"
	CmdCloseRoom        CommandType = "CloseRoom"
	CmdJoinRoom         CommandType = "JoinRoom"
	CmdLeaveRoom        CommandType = "LeaveRoom"
	CmdTakeMic          CommandType = "TakeMic"
	CmdLeaveMic         CommandType = "LeaveMic"
	CmdMoveMic          CommandType = "MoveMic"
	CmdKickFromMic      CommandType = "KickFromMic"
	CmdLockMicSeat      CommandType = "LockMicSeat"
	CmdMuteMicSeat      CommandType = "MuteMicSeat"
	CmdSetMyMic         CommandType = "SetMyMic"
	CmdKickUser         CommandType = "KickUser"
	CmdMuteUser         CommandType = "MuteUser"
	CmdUnbanUser        CommandType = "UnbanUser"
	CmdSetAdmin         CommandType = "SetAdmin"
	CmdUpdateProfile    CommandType = "UpdateProfile"
	CmdChangeBackground CommandType = "ChangeBackground"
	CmdSetChatEnabled   CommandType = "SetChatEnabled"
	CmdSendGift         CommandType = "SendGift"
	// CmdLaunchRocket is internal: the service submits it when an ignited
	// rocket's countdown ends; the API never does.
	CmdLaunchRocket CommandType = "LaunchRocket"
	// CmdSetRules is internal: the cell issues it to switch a room to the
	// economy rules configured now (see SetRules).
	CmdSetRules CommandType = "SetRules"
	// Mic requests and invitations (micqueue.go).
	CmdSetMicApproval    CommandType = "SetMicApproval"
	CmdRequestMic        CommandType = "RequestMic"
	CmdCancelMicRequest  CommandType = "CancelMicRequest"
	CmdApproveMicRequest CommandType = "ApproveMicRequest"
	CmdRejectMicRequest  CommandType = "RejectMicRequest"
	CmdInviteToMic       CommandType = "InviteToMic"
	CmdAcceptMicInvite   CommandType = "AcceptMicInvite"
	CmdDeclineMicInvite  CommandType = "DeclineMicInvite"
	// CmdExpireMicQueue is internal: the service submits it when a mic
	// request or invitation expires; the API never does.
	CmdExpireMicQueue CommandType = "ExpireMicQueue"
	// Roles (roles.go).
	CmdTransferOwnership CommandType = "TransferOwnership"
	CmdSetHost           CommandType = "SetHost"
)

// Command is one request to change a room. The set is closed: every
// implementation lives in this package.
type Command interface {
	// Type names the command.
	Type() CommandType
	// validate checks what can be checked without the room's state.
	validate(env *Envelope) error
	// apply checks the command against the state and, only if every check
	// passes, changes the state and returns the events. On error it must
	// leave the state untouched.
	apply(s *State, env *Envelope) ([]Event, error)
}

// Envelope is a command with everything replay needs: who, when, which room
// and the idempotency key.
type Envelope struct {
	RoomID    string
	CommandID string
	// Operator is the acting user.
	Operator int64
	// Platform marks a platform operator (staff), who may act as the owner.
	Platform bool
	// At is the command's time, unix ms, fixed when the command is accepted.
	At int64
	// Rev is the revision of the rules the command was decided under, fixed
	// with At (Rev); 0 in rows logged before revisions. Apply applies a
	// command under its revision's rules, so a row replays as it applied.
	Rev     int
	Command Command
}

// Rev is the revision of the rules this build decides commands under. A
// change of what a command does (not a new command or field, which earlier
// rows cannot hold) takes a new revision, and Apply keeps the earlier rules
// for commands of earlier revisions. Revisions:
//
//	1: a transfer ends the new owner's chat mute (the owner cannot be
//	   muted, and nobody may lift an owner's mute); a banned admin keeps
//	   their rank as a target, so only the owner or platform staff make
//	   their ban longer, mute them or lift what was put on them.
const Rev = 1

// Revisions of the rules; see Rev.
const (
	revOwnerUnmutedAndBannedRank = 1
)

// Validate checks the envelope and the command without any state.
func (env *Envelope) Validate() error {
	if err := CheckRoomID(env.RoomID); err != nil {
		return err
	}
	if env.CommandID == "" {
		return ErrMissingCommandID
	}
	if err := checkID("command_id", env.CommandID); err != nil {
		return err
	}
	if env.Operator <= 0 {
		return ErrMissingOperator
	}
	if env.Command == nil {
		return ErrUnknownCommand
	}
	return env.Command.validate(env)
}

// CheckRoomID validates a room id as every request must carry it.
func CheckRoomID(id string) error {
	if id == "" {
		return ErrMissingRoomID
	}
	return checkID("room_id", id)
}

// checkID accepts printable ASCII ids without spaces, up to MaxIDLen bytes.
func checkID(field, id string) error {
	if len(id) > MaxIDLen {
		return Errorf(ErrFieldTooLong, "%s is longer than %d bytes", field, MaxIDLen)
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; c <= ' ' || c > '~' {
			return Errorf(ErrInvalidArgument, "%s may hold only printable ASCII without spaces", field)
		}
	}
	return nil
}

func checkText(field, v string, max int) error {
	if len(v) > max {
		return Errorf(ErrFieldTooLong, "%s is longer than %d bytes", field, max)
	}
	if !utf8.ValidString(v) {
		return Errorf(ErrInvalidArgument, "%s is not valid UTF-8", field)
	}
	return nil
}

// text is one free-text field and its byte limit.
type text struct {
	name  string
	value string
	max   int
}

func checkTexts(fields ...text) error {
	for _, f := range fields {
		if err := checkText(f.name, f.value, f.max); err != nil {
			return err
		}
	}
	return nil
}

func checkTarget(env *Envelope, target int64) error {
	if target <= 0 || target == env.Operator {
		return ErrBadTarget
	}
	return nil
}

func checkSeatIndex(i int32) error {
	if i < 0 || i >= MaxSeats {
		return Errorf(ErrBadSeatIndex, "seat_index %d", i)
	}
	return nil
}

func checkDuration(secs int64) error {
	if secs < 0 || secs > MaxDurationSecs {
		return Errorf(ErrBadDuration, "duration_seconds %d is outside 0..%d", secs, MaxDurationSecs)
	}
	return nil
}

// CreateRoom creates the room from its metadata. It must be the room's first command.
type CreateRoom struct {
	OwnerUserID int64  `json:"owner_user_id"`
	HostUserID  int64  `json:"host_user_id"`
	SeatCount   int32  `json:"seat_count"`
	Mode        string `json:"mode"`
	Region      string `json:"region"`
	Title       string `json:"title"`
	// MicApproval: members need approval to take a seat (RequestMic).
	MicApproval bool `json:"mic_approval,omitempty"`
}

// CloseRoom closes the room: everyone leaves and every later command is refused.
type CloseRoom struct{}

// JoinRoom puts the operator in the room with their display fields.
type JoinRoom struct {
	Nickname    string `json:"nickname,omitempty"`
	AvatarURL   string `json:"avatar_url,omitempty"`
	Vehicle     string `json:"vehicle,omitempty"`
	EntryEffect string `json:"entry_effect,omitempty"`
}

// LeaveRoom takes the operator out of the room (and off any seat).
type LeaveRoom struct{}

// TakeMic seats the operator.
type TakeMic struct {
	SeatIndex int32 `json:"seat_index"`
}

// LeaveMic takes the operator off their seat.
type LeaveMic struct{}

// MoveMic moves the operator to another seat.
type MoveMic struct {
	ToSeatIndex int32 `json:"to_seat_index"`
}

// KickFromMic takes another user off their seat (owner/admin).
type KickFromMic struct {
	TargetUserID int64 `json:"target_user_id"`
}

// LockMicSeat locks or unlocks a seat (owner/admin); locking evicts the occupant.
type LockMicSeat struct {
	SeatIndex int32 `json:"seat_index"`
	Locked    bool  `json:"locked"`
}

// MuteMicSeat mutes or unmutes a seat's audio (owner/admin).
type MuteMicSeat struct {
	SeatIndex int32 `json:"seat_index"`
	Muted     bool  `json:"muted"`
}

// SetMyMic turns the operator's own microphone on or off.
type SetMyMic struct {
	On bool `json:"on"`
}

// KickUser removes a user and bans them for DurationSeconds (0: permanent).
type KickUser struct {
	TargetUserID    int64 `json:"target_user_id"`
	DurationSeconds int64 `json:"duration_seconds"`
	// Reason is shown with the ban (at most MaxReasonLen bytes).
	Reason string `json:"reason,omitempty"`
}

// MuteUser chat-mutes a user for DurationSeconds, or until lifted when
// Permanent is set (DurationSeconds 0); DurationSeconds 0 without
// Permanent lifts the mute.
type MuteUser struct {
	TargetUserID    int64 `json:"target_user_id"`
	DurationSeconds int64 `json:"duration_seconds"`
	Permanent       bool  `json:"permanent,omitempty"`
	// Reason is shown with the mute (at most MaxReasonLen bytes).
	Reason string `json:"reason,omitempty"`
}

// UnbanUser lifts a ban.
type UnbanUser struct {
	TargetUserID int64 `json:"target_user_id"`
}

// SetAdmin adds a user to or removes them from the admin set (owner only).
type SetAdmin struct {
	TargetUserID int64 `json:"target_user_id"`
	Admin        bool  `json:"admin"`
}

// UpdateProfile changes the fields that are set (owner only).
type UpdateProfile struct {
	Title    *string `json:"title,omitempty"`
	Notice   *string `json:"notice,omitempty"`
	CoverURL *string `json:"cover_url,omitempty"`
}

// ChangeBackground sets the room background (owner/admin).
type ChangeBackground struct {
	BackgroundURL string `json:"background_url"`
}

// SetChatEnabled turns public chat on or off (owner/admin).
type SetChatEnabled struct {
	Enabled bool `json:"enabled"`
}

// SendGift sends Count pieces of a gift from the operator to each receiver.
type SendGift struct {
	ReceiverUserIDs []int64 `json:"receiver_user_ids"`
	GiftID          string  `json:"gift_id"`
	Count           int32   `json:"count"`
	ComboID         string  `json:"combo_id,omitempty"`
	// Outcome is decided by the service (catalogue facts, lucky draw,
	// charge) and recorded in the command log next to the body, not in it,
	// so SameRequest, which compares bodies, ignores it.
	Outcome GiftOutcome `json:"-"`
}

// GiftOutcome is what the service decided about a SendGift before applying
// it: the catalogue facts of the gift, the lucky draw and the wallet charge.
type GiftOutcome struct {
	Name           string `json:"name"`
	Price          int64  `json:"price"` // COIN per piece
	Kind           string `json:"kind"`  // GiftNormal | GiftLucky
	ReceiversOnMic bool   `json:"on_mic,omitempty"`
	// RegionalThreshold is the cost from which the gift is also shown in the
	// region's broadcast group; 0 never.
	RegionalThreshold int64 `json:"regional_min,omitempty"`
	// LuckyRegionalMin is the reward from which a lucky win is shown
	// regionally; 0 never.
	LuckyRegionalMin int64 `json:"lucky_regional_min,omitempty"`
	MultiplierBP     int64 `json:"multiplier_bp,omitempty"`
	Reward           int64 `json:"reward,omitempty"`
	// ChargedAt is the unix ms of the wallet charge.
	ChargedAt int64 `json:"charged_at,omitempty"`
	// BalanceAfter is the sender's balance after the charge (and reward): a
	// retry of the command is answered with it, from the log.
	BalanceAfter int64 `json:"balance_after,omitempty"`
}

// Cost is the gift's value: price x count for every receiver. Validation
// keeps it at most MaxGiftCost.
func (c *SendGift) Cost() int64 {
	return c.Outcome.Price * int64(c.Count) * int64(len(c.ReceiverUserIDs))
}

// regional reports whether the gift also shows in the region's broadcast group.
func (c *SendGift) regional() bool {
	o := &c.Outcome
	return (o.RegionalThreshold > 0 && c.Cost() >= o.RegionalThreshold) ||
		(o.LuckyRegionalMin > 0 && o.Reward >= o.LuckyRegionalMin)
}

func (c *SendGift) loggedOutcome() *GiftOutcome { return &c.Outcome }

// LaunchRocket launches an ignited rocket whose countdown ended. Internal:
// only SystemOperator with the platform flag may submit it.
type LaunchRocket struct {
	RocketID int64 `json:"rocket_id"`
	Level    int32 `json:"level"`
	LaunchAt int64 `json:"launch_at"`
	Day      int64 `json:"day"`
}

// Type implementations.

func (*CreateRoom) Type() CommandType       { return CmdCreateRoom }
func (*CloseRoom) Type() CommandType        { return CmdCloseRoom }
func (*JoinRoom) Type() CommandType         { return CmdJoinRoom }
func (*LeaveRoom) Type() CommandType        { return CmdLeaveRoom }
func (*TakeMic) Type() CommandType          { return CmdTakeMic }
func (*LeaveMic) Type() CommandType         { return CmdLeaveMic }
func (*MoveMic) Type() CommandType          { return CmdMoveMic }
func (*KickFromMic) Type() CommandType      { return CmdKickFromMic }
func (*LockMicSeat) Type() CommandType      { return CmdLockMicSeat }
func (*MuteMicSeat) Type() CommandType      { return CmdMuteMicSeat }
func (*SetMyMic) Type() CommandType         { return CmdSetMyMic }
func (*KickUser) Type() CommandType         { return CmdKickUser }
func (*MuteUser) Type() CommandType         { return CmdMuteUser }
func (*UnbanUser) Type() CommandType        { return CmdUnbanUser }
func (*SetAdmin) Type() CommandType         { return CmdSetAdmin }
func (*UpdateProfile) Type() CommandType    { return CmdUpdateProfile }
func (*ChangeBackground) Type() CommandType { return CmdChangeBackground }
func (*SetChatEnabled) Type() CommandType   { return CmdSetChatEnabled }
func (*SendGift) Type() CommandType         { return CmdSendGift }
func (*LaunchRocket) Type() CommandType     { return CmdLaunchRocket }

// Static validation.

func (c *CreateRoom) validate(env *Envelope) error {
	if c.OwnerUserID <= 0 || c.HostUserID < 0 {
		return Errorf(ErrInvalidArgument, "owner_user_id is required and host_user_id may not be negative")
	}
	// Checked before anything is stored: only the owner, or platform staff on
	// the owner's behalf, creates a room.
	if !env.Platform && env.Operator != c.OwnerUserID {
		return ErrPermission
	}
	if c.SeatCount < MinSeats || c.SeatCount > MaxSeats {
		return Errorf(ErrBadSeatCount, "seat_count %d is outside %d..%d", c.SeatCount, MinSeats, MaxSeats)
	}
	return checkTexts(text{"mode", c.Mode, MaxShortText}, text{"region", c.Region, MaxShortText}, text{"title", c.Title, MaxTitleLen})
}
func (*CloseRoom) validate(*Envelope) error { return nil }
func (c *JoinRoom) validate(*Envelope) error {
	return checkTexts(text{"nickname", c.Nickname, MaxShortText}, text{"avatar_url", c.AvatarURL, MaxURLLen},
		text{"vehicle", c.Vehicle, MaxShortText}, text{"entry_effect", c.EntryEffect, MaxShortText})
}
func (*LeaveRoom) validate(*Envelope) error         { return nil }
func (c *TakeMic) validate(*Envelope) error         { return checkSeatIndex(c.SeatIndex) }
func (*LeaveMic) validate(*Envelope) error          { return nil }
func (c *MoveMic) validate(*Envelope) error         { return checkSeatIndex(c.ToSeatIndex) }
func (c *KickFromMic) validate(env *Envelope) error { return checkTarget(env, c.TargetUserID) }
func (c *LockMicSeat) validate(*Envelope) error     { return checkSeatIndex(c.SeatIndex) }
func (c *MuteMicSeat) validate(*Envelope) error     { return checkSeatIndex(c.SeatIndex) }
func (*SetMyMic) validate(*Envelope) error          { return nil }
func (c *UnbanUser) validate(env *Envelope) error   { return checkTarget(env, c.TargetUserID) }
func (c *SetAdmin) validate(env *Envelope) error    { return checkTarget(env, c.TargetUserID) }
func (c *SetChatEnabled) validate(*Envelope) error  { return nil }
func (c *ChangeBackground) validate(*Envelope) error {
	return checkText("background_url", c.BackgroundURL, MaxURLLen)
}
func (c *KickUser) validate(env *Envelope) error {
	if err := checkTarget(env, c.TargetUserID); err != nil {
		return err
	}
	if err := checkDuration(c.DurationSeconds); err != nil {
		return err
	}
	return checkText("reason", c.Reason, MaxReasonLen)
}
func (c *MuteUser) validate(env *Envelope) error {
	if err := checkTarget(env, c.TargetUserID); err != nil {
		return err
	}
	if err := checkDuration(c.DurationSeconds); err != nil {
		return err
	}
	switch {
	case c.Permanent && c.DurationSeconds != 0:
		return Errorf(ErrBadDuration, "a permanent mute has no duration_seconds")
	case !c.Permanent && c.DurationSeconds == 0 && c.Reason != "":
		return Errorf(ErrInvalidArgument, "lifting a mute takes no reason")
	}
	return checkText("reason", c.Reason, MaxReasonLen)
}
func (c *UpdateProfile) validate(*Envelope) error {
	if c.Title == nil && c.Notice == nil && c.CoverURL == nil {
		return Errorf(ErrInvalidArgument, "set at least one of title, notice, cover_url")
	}
	return checkTexts(text{"title", deref(c.Title), MaxTitleLen}, text{"notice", deref(c.Notice), MaxNoticeLen},
		text{"cover_url", deref(c.CoverURL), MaxURLLen})
}

func (c *SendGift) validate(env *Envelope) error {
	n := len(c.ReceiverUserIDs)
	if n == 0 || n > MaxGiftReceivers {
		return Errorf(ErrBadReceivers, "%d receivers, want 1..%d", n, MaxGiftReceivers)
	}
	for i, r := range c.ReceiverUserIDs {
		switch {
		case r <= 0:
			return Errorf(ErrBadReceivers, "receiver %d", r)
		case r == env.Operator:
			return ErrSelfGift
		case slices.Contains(c.ReceiverUserIDs[:i], r):
			return Errorf(ErrBadReceivers, "receiver %d is listed twice", r)
		}
	}
	if c.GiftID == "" {
		return Errorf(ErrUnknownGift, "gift_id is required")
	}
	if err := checkID("gift_id", c.GiftID); err != nil {
		return err
	}
	if c.Count < 1 || c.Count > MaxGiftCount {
		return Errorf(ErrCountNotAllowed, "count %d is outside 1..%d", c.Count, MaxGiftCount)
	}
	if c.ComboID != "" {
		if err := checkID("combo_id", c.ComboID); err != nil {
			return err
		}
	}
	o := &c.Outcome
	if o.Price <= 0 || (o.Kind != GiftNormal && o.Kind != GiftLucky) {
		return Errorf(ErrUnknownGift, "gift %s has price %d and kind %q", c.GiftID, o.Price, o.Kind)
	}
	if err := checkText("gift name", o.Name, MaxGiftNameLen); err != nil {
		return err
	}
	if o.Reward < 0 || o.MultiplierBP < 0 || o.RegionalThreshold < 0 || o.LuckyRegionalMin < 0 {
		return Errorf(ErrInvalidArgument, "reward, multiplier and regional minimums may not be negative")
	}
	if o.Price > MaxGiftCost/(int64(c.Count)*int64(n)) {
		return Errorf(ErrInvalidArgument, "the gift costs more than %d", MaxGiftCost)
	}
	return nil
}

func (c *LaunchRocket) validate(env *Envelope) error {
	if !env.Platform || env.Operator != SystemOperator {
		return ErrPermission
	}
	return nil
}

func deref(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

// Encoding. The command log stores each command as JSON:
// {"op":operator,"platform":bool,"at":unix_ms,"rev":revision,"body":{command
// fields}}, and a command the service decided an outcome for adds
// "gift":{outcome}.

type wire struct {
	Op       int64           `json:"op"`
	Platform bool            `json:"platform,omitempty"`
	At       int64           `json:"at"`
	Rev      int             `json:"rev,omitempty"`
	Body     json.RawMessage `json:"body"`
	Gift     *GiftOutcome    `json:"gift,omitempty"`
}

// outcomeCarrier is a command with a service-decided outcome that the log
// records beside its body: part of the command for replay, not of the
// request for SameRequest.
type outcomeCarrier interface {
	loggedOutcome() *GiftOutcome
}

var factories = map[CommandType]func() Command{
	CmdCreateRoom:       func() Command { return new(CreateRoom) },
	CmdCloseRoom:        func() Command { return new(CloseRoom) },
	CmdJoinRoom:         func() Command { return new(JoinRoom) },
	CmdLeaveRoom:        func() Command { return new(LeaveRoom) },
	CmdTakeMic:          func() Command { return new(TakeMic) },
	CmdLeaveMic:         func() Command { return new(LeaveMic) },
	CmdMoveMic:          func() Command { return new(MoveMic) },
	CmdKickFromMic:      func() Command { return new(KickFromMic) },
	CmdLockMicSeat:      func() Command { return new(LockMicSeat) },
	CmdMuteMicSeat:      func() Command { return new(MuteMicSeat) },
	CmdSetMyMic:         func() Command { return new(SetMyMic) },
	CmdKickUser:         func() Command { return new(KickUser) },
	CmdMuteUser:         func() Command { return new(MuteUser) },
	CmdUnbanUser:        func() Command { return new(UnbanUser) },
	CmdSetAdmin:         func() Command { return new(SetAdmin) },
	CmdUpdateProfile:    func() Command { return new(UpdateProfile) },
	CmdChangeBackground: func() Command { return new(ChangeBackground) },
	CmdSetChatEnabled:   func() Command { return new(SetChatEnabled) },
	CmdSendGift:         func() Command { return new(SendGift) },
	CmdLaunchRocket:     func() Command { return new(LaunchRocket) },
	CmdSetRules:         func() Command { return new(SetRules) },
	CmdExpirePresence:   func() Command { return new(ExpirePresence) },
	// Mic requests and invitations, roles.
	CmdSetMicApproval:    func() Command { return new(SetMicApproval) },
	CmdRequestMic:        func() Command { return new(RequestMic) },
	CmdCancelMicRequest:  func() Command { return new(CancelMicRequest) },
	CmdApproveMicRequest: func() Command { return new(ApproveMicRequest) },
	CmdRejectMicRequest:  func() Command { return new(RejectMicRequest) },
	CmdInviteToMic:       func() Command { return new(InviteToMic) },
	CmdAcceptMicInvite:   func() Command { return new(AcceptMicInvite) },
	CmdDeclineMicInvite:  func() Command { return new(DeclineMicInvite) },
	CmdExpireMicQueue:    func() Command { return new(ExpireMicQueue) },
	CmdTransferOwnership: func() Command { return new(TransferOwnership) },
	CmdSetHost:           func() Command { return new(SetHost) },
}

// EncodeCommand returns the command log payload of env.
func EncodeCommand(env *Envelope) ([]byte, error) {
	body, err := json.Marshal(env.Command)
	if err != nil {
		return nil, fmt.Errorf("encode %s: %w", env.Command.Type(), err)
	}
	w := wire{Op: env.Operator, Platform: env.Platform, At: env.At, Rev: env.Rev, Body: body}
	if oc, ok := env.Command.(outcomeCarrier); ok {
		w.Gift = oc.loggedOutcome()
	}
	return json.Marshal(w)
}

// DecodeCommand rebuilds the envelope of a command log row. Unknown types,
// unknown fields and malformed JSON are ErrUnknownCommand or ErrInvalidArgument.
func DecodeCommand(roomID, commandID string, typ CommandType, payload []byte) (*Envelope, error) {
	newCmd, ok := factories[typ]
	if !ok {
		return nil, Errorf(ErrUnknownCommand, "command type %q", typ)
	}
	var w wire
	if err := strictUnmarshal(payload, &w); err != nil {
		return nil, Errorf(ErrInvalidArgument, "decode %s envelope: %v", typ, err)
	}
	cmd := newCmd()
	if len(w.Body) > 0 {
		if err := strictUnmarshal(w.Body, cmd); err != nil {
			return nil, Errorf(ErrInvalidArgument, "decode %s body: %v", typ, err)
		}
	}
	if w.Gift != nil {
		oc, ok := cmd.(outcomeCarrier)
		if !ok {
			return nil, Errorf(ErrInvalidArgument, "decode %s: a gift outcome on a command without one", typ)
		}
		*oc.loggedOutcome() = *w.Gift
	}
	if w.Rev < 0 || w.Rev > Rev {
		return nil, Errorf(ErrInvalidArgument, "decode %s: rules revision %d is not one of this build (0-%d)", typ, w.Rev, Rev)
	}
	return &Envelope{RoomID: roomID, CommandID: commandID, Operator: w.Op, Platform: w.Platform, At: w.At, Rev: w.Rev, Command: cmd}, nil
}

func strictUnmarshal(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if err := dec.Decode(new(json.RawMessage)); !errors.Is(err, io.EOF) {
		return fmt.Errorf("trailing data after the JSON value")
	}
	return nil
}

// SameRequest reports whether a stored command log payload was made from the
// same request as env: same type, operator and fields. The command time and
// its rules' revision are not part of the request, so a retry made later, or
// by a later build, still matches.
func SameRequest(storedType CommandType, storedPayload []byte, env *Envelope) bool {
	if storedType != env.Command.Type() {
		return false
	}
	var w wire
	if err := json.Unmarshal(storedPayload, &w); err != nil {
		return false
	}
	body, err := json.Marshal(env.Command)
	if err != nil {
		return false
	}
	return w.Op == env.Operator && w.Platform == env.Platform && bytes.Equal(w.Body, body)
}

// RestoreOutcome copies into cmd the outcome recorded with a stored payload
// of the same request, for a command that records one (SendGift): a retry
// is answered with what the first attempt decided and paid, not with what
// the retry prepared. It reports whether it did: false for a command that
// records no outcome, or a payload that is unreadable or records none.
func RestoreOutcome(cmd Command, storedPayload []byte) bool {
	oc, ok := cmd.(outcomeCarrier)
	if !ok {
		return false
	}
	var w wire
	if err := json.Unmarshal(storedPayload, &w); err != nil || w.Gift == nil {
		return false
	}
	*oc.loggedOutcome() = *w.Gift
	return true
}
