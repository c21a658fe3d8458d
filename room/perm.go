package room

// Role is what a user may do in a room. Roles are ordered: a role may act on
// users of a strictly lower role only.
type Role int

// Roles, lowest first.
const (
	RoleVisitor  Role = iota // not in the room
	RoleMember               // in the room
	RoleAdmin                // in the admin set
	RoleOwner                // the room owner
	RolePlatform             // platform staff acting through a trusted service
)

// RoleOf returns the role of user in the room at time at (unix ms); platform
// marks platform staff. A banned admin has no role until the ban ends: a
// kicked user is out, and out users do not moderate.
func (s *State) RoleOf(user int64, platform bool, at int64) Role {
	return s.role(user, platform, s.BannedAt(user, at))
}

// role is user's role, a visitor while banned unless it is the owner.
func (s *State) role(user int64, platform, banned bool) Role {
	switch {
	case platform:
		return RolePlatform
	case user == s.OwnerUserID:
		return RoleOwner
	case banned:
		return RoleVisitor
	case s.IsAdmin(user):
		return RoleAdmin
	case s.IsMember(user):
		return RoleMember
	}
	return RoleVisitor
}

// The permission rules, in one place:
//   - owner or platform: close the room, set admins, update the profile;
//   - admin or above: lock and mute seats, kick from mic, kick, chat-mute,
//     unban, change the background, switch chat;
//   - acting on another user needs a strictly higher role than theirs (a
//     ban takes away what a user may do, not who may act on them: see
//     targetRole), and nobody may kick, mute, mic-kick or demote the owner.
func (s *State) require(env *Envelope, min Role) error {
	if s.RoleOf(env.Operator, env.Platform, env.At) < min {
		return ErrPermission
	}
	return nil
}

// requireOver checks that the operator may act on target.
func (s *State) requireOver(env *Envelope, target int64) error {
	if target == s.OwnerUserID {
		return ErrTargetProtected
	}
	if s.RoleOf(env.Operator, env.Platform, env.At) <= s.targetRole(env, target) {
		return ErrPermission
	}
	return nil
}

// targetRole is target's role as the one acted on: as RoleOf, except that a
// banned admin or member keeps their rank, so a banned admin is still an
// admin to the other admins, and only the owner or platform staff make
// their ban longer, mute them or lift what was put on them. Commands of
// revisions before revOwnerUnmutedAndBannedRank ranked a banned target a
// visitor.
func (s *State) targetRole(env *Envelope, target int64) Role {
	if env.Rev < revOwnerUnmutedAndBannedRank {
		return s.RoleOf(target, false, env.At)
	}
	return s.role(target, false, false)
}
