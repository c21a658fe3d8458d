package room

// Room roles that change after creation: the owner (TransferOwnership) and
// the host (SetHost).
//
// The new owner must be in the room: ownership goes to someone present to
// take it, never to an arbitrary id. The old owner stays in the room and
// in the admin set, so they keep moderating until the new owner demotes
// them with SetAdmin. A chat mute of the new owner ends with the transfer
// (from revision 1): nobody may mute the owner, or lift an owner's mute. The host is shown in the snapshot and carries no
// rights of its own: moderation comes from the admin set, which SetHost
// leaves as it is.

// TransferOwnership makes another member the room owner (owner or platform).
type TransferOwnership struct {
	NewOwnerUserID int64 `json:"new_owner_user_id"`
}

// SetHost sets the room's host, a member, or clears it with 0 (owner or platform).
type SetHost struct {
	HostUserID int64 `json:"host_user_id"`
}

// RoomOwnerChangedEvent is the payload of RoomOwnerChanged. Like
// RoomHostChanged it carries both roles after the change.
type RoomOwnerChangedEvent struct {
	OwnerUserID         int64 `json:"owner_user_id"`
	PreviousOwnerUserID int64 `json:"previous_owner_user_id"`
	HostUserID          int64 `json:"host_user_id"`
	OperatorUserID      int64 `json:"operator_user_id"`
}

// RoomHostChangedEvent is the payload of RoomHostChanged.
type RoomHostChangedEvent struct {
	HostUserID         int64 `json:"host_user_id"` // 0: no host
	PreviousHostUserID int64 `json:"previous_host_user_id"`
	OwnerUserID        int64 `json:"owner_user_id"`
	OperatorUserID     int64 `json:"operator_user_id"`
}

func (*TransferOwnership) Type() CommandType { return CmdTransferOwnership }
func (*SetHost) Type() CommandType           { return CmdSetHost }

func (c *TransferOwnership) validate(env *Envelope) error { return checkTarget(env, c.NewOwnerUserID) }
func (c *SetHost) validate(*Envelope) error {
	if c.HostUserID < 0 {
		return Errorf(ErrBadTarget, "host_user_id may not be negative")
	}
	return nil
}

func (c *TransferOwnership) apply(s *State, env *Envelope) ([]Event, error) {
	if err := s.require(env, RoleOwner); err != nil {
		return nil, err
	}
	to := c.NewOwnerUserID
	_, wasAdmin := s.Admins[to]
	switch {
	case to == s.OwnerUserID:
		return nil, ErrNoChange
	case !s.IsMember(to):
		return nil, ErrNotInRoom
	case !wasAdmin && len(s.Admins) >= MaxAdmins:
		return nil, ErrTooManyAdmins
	}
	prev := s.OwnerUserID
	s.OwnerUserID = to
	s.Admins[to] = struct{}{}
	s.Admins[prev] = struct{}{} // there already (the owner always is): the old owner stays an admin
	events := []Event{{Type: EventRoomOwnerChanged, Data: &RoomOwnerChangedEvent{
		OwnerUserID: to, PreviousOwnerUserID: prev, HostUserID: s.HostUserID, OperatorUserID: env.Operator,
	}}}
	if !wasAdmin {
		events = append(events, Event{Type: EventRoomAdminChanged, Data: &RoomAdminChangedEvent{
			UserID: to, Admin: true, OperatorUserID: env.Operator,
		}})
	}
	if env.Rev >= revOwnerUnmutedAndBannedRank && s.MutedAt(to, env.At) { // nobody may lift an owner's mute
		s.lift(s.Mutes, s.MuteReasons, to)
		events = append(events, Event{Type: EventRoomUserMuted, Data: &RoomUserMutedEvent{
			UserID: to, OperatorUserID: env.Operator,
		}})
	}
	return events, nil
}

func (c *SetHost) apply(s *State, env *Envelope) ([]Event, error) {
	if err := s.require(env, RoleOwner); err != nil {
		return nil, err
	}
	switch {
	case c.HostUserID == s.HostUserID:
		return nil, ErrNoChange
	case c.HostUserID != noUser && !s.IsMember(c.HostUserID):
		return nil, ErrNotInRoom
	}
	prev := s.HostUserID
	s.HostUserID = c.HostUserID
	return []Event{{Type: EventRoomHostChanged, Data: &RoomHostChangedEvent{
		HostUserID: c.HostUserID, PreviousHostUserID: prev, OwnerUserID: s.OwnerUserID, OperatorUserID: env.Operator,
	}}}, nil
}
