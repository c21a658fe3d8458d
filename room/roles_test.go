package room

import "testing"

func TestTransferOwnership(t *testing.T) {
	owned := func(to, op int64) Event {
		return ev(EventRoomOwnerChanged, &RoomOwnerChangedEvent{OwnerUserID: to, PreviousOwnerUserID: uOwner, HostUserID: uHost, OperatorUserID: op})
	}
	runApplyCases(t, []applyCase{
		{name: "to a member, who becomes admin; the old owner stays admin", env: env(uOwner, &TransferOwnership{NewOwnerUserID: uAlice}),
			want:   []Event{owned(uAlice, uOwner), ev(EventRoomAdminChanged, &RoomAdminChangedEvent{UserID: uAlice, Admin: true, OperatorUserID: uOwner})},
			change: func(s *State) { s.OwnerUserID = uAlice; s.Admins[uAlice] = struct{}{} }},
		{name: "to an admin", env: env(uOwner, &TransferOwnership{NewOwnerUserID: uAdmin}), want: []Event{owned(uAdmin, uOwner)},
			change: func(s *State) { s.OwnerUserID = uAdmin }},
		{name: "by platform staff", env: platformEnv(&TransferOwnership{NewOwnerUserID: uAdmin2}), want: []Event{owned(uAdmin2, uStaff)},
			change: func(s *State) { s.OwnerUserID = uAdmin2 }},
		{name: "platform to the owner", env: platformEnv(&TransferOwnership{NewOwnerUserID: uOwner}), err: ErrNoChange},
		{name: "by an admin", env: env(uAdmin, &TransferOwnership{NewOwnerUserID: uAlice}), err: ErrPermission},
		{name: "to someone not in the room", env: env(uOwner, &TransferOwnership{NewOwnerUserID: uVisitor}), err: ErrNotInRoom},
		{name: "to a banned user", env: env(uOwner, &TransferOwnership{NewOwnerUserID: uBanned}), err: ErrNotInRoom},
		{name: "to self", env: env(uOwner, &TransferOwnership{NewOwnerUserID: uOwner}), err: ErrBadTarget},
		{name: "admin set full", state: states(func(s *State) {
			for i := range MaxAdmins - len(s.Admins) {
				s.Admins[int64(2000+i)] = struct{}{}
			}
		}), env: env(uOwner, &TransferOwnership{NewOwnerUserID: uAlice}), err: ErrTooManyAdmins},
	})
	// The new owner rules: the old one is an admin they can demote and kick.
	s := fixture()
	apply(t, s, env(uOwner, &TransferOwnership{NewOwnerUserID: uAlice}), nil)
	apply(t, s, envAt(uOwner, tNow+1, &SetAdmin{TargetUserID: uAdmin, Admin: false}), ErrPermission)
	apply(t, s, envAt(uOwner, tNow+2, &KickUser{TargetUserID: uAlice}), ErrTargetProtected)
	apply(t, s, envAt(uAlice, tNow+3, &SetAdmin{TargetUserID: uOwner, Admin: false}), nil)
	apply(t, s, envAt(uAlice, tNow+4, &KickUser{TargetUserID: uOwner, DurationSeconds: 60}), nil)
}

func TestSetHost(t *testing.T) {
	host := func(to, op int64) Event {
		return ev(EventRoomHostChanged, &RoomHostChangedEvent{HostUserID: to, PreviousHostUserID: uHost, OwnerUserID: uOwner, OperatorUserID: op})
	}
	runApplyCases(t, []applyCase{
		{name: "a member", env: env(uOwner, &SetHost{HostUserID: uAlice}), want: []Event{host(uAlice, uOwner)},
			change: func(s *State) { s.HostUserID = uAlice }},
		{name: "the owner", env: env(uOwner, &SetHost{HostUserID: uOwner}), want: []Event{host(uOwner, uOwner)},
			change: func(s *State) { s.HostUserID = uOwner }},
		{name: "nobody", env: platformEnv(&SetHost{}), want: []Event{host(0, uStaff)},
			change: func(s *State) { s.HostUserID = 0 }},
		{name: "by an admin", env: env(uAdmin, &SetHost{HostUserID: uAlice}), err: ErrPermission},
		{name: "not in the room", env: env(uOwner, &SetHost{HostUserID: uVisitor}), err: ErrNotInRoom},
		{name: "the host already", env: env(uOwner, &SetHost{HostUserID: uHost}), err: ErrNoChange},
		{name: "negative", env: env(uOwner, &SetHost{HostUserID: -1}), err: ErrBadTarget},
	})
}

func TestPermanentMuteAndReasons(t *testing.T) {
	muted := func(d RoomUserMutedEvent) Event { return ev(EventRoomUserMuted, &d) }
	runApplyCases(t, []applyCase{
		{name: "permanent mute with a reason", env: env(uAdmin, &MuteUser{TargetUserID: uAlice, Permanent: true, Reason: "abuse"}),
			want:   []Event{muted(RoomUserMutedEvent{UserID: uAlice, OperatorUserID: uAdmin, Muted: true, Permanent: true, Reason: "abuse"})},
			change: func(s *State) { s.Mutes[uAlice] = permanent; s.MuteReasons[uAlice] = "abuse" }},
		{name: "a timed mute replaces a permanent one and its reason", state: states(func(s *State) { s.Mutes[uAlice] = permanent; s.MuteReasons[uAlice] = "x" }),
			env:    env(uAdmin, &MuteUser{TargetUserID: uAlice, DurationSeconds: 60}),
			want:   []Event{muted(RoomUserMutedEvent{UserID: uAlice, OperatorUserID: uAdmin, Muted: true, MutedUntil: tNow + 60_000})},
			change: func(s *State) { s.Mutes[uAlice] = tNow + 60_000; delete(s.MuteReasons, uAlice) }},
		{name: "UnbanUser lifts a permanent mute", state: states(func(s *State) { s.Mutes[uAlice] = permanent; s.MuteReasons[uAlice] = "x" }),
			env:    env(uAdmin, &UnbanUser{TargetUserID: uAlice}),
			want:   []Event{muted(RoomUserMutedEvent{UserID: uAlice, OperatorUserID: uAdmin})},
			change: func(s *State) { delete(s.Mutes, uAlice); delete(s.MuteReasons, uAlice) }},
		{name: "UnbanUser lifts a ban with its reason", state: states(func(s *State) { s.BanReasons[uBanned] = "spam" }),
			env:    env(uAdmin, &UnbanUser{TargetUserID: uBanned}),
			want:   []Event{ev(EventRoomUserUnbanned, &RoomUserUnbannedEvent{UserID: uBanned, OperatorUserID: uAdmin})},
			change: func(s *State) { delete(s.Bans, uBanned); delete(s.BanReasons, uBanned) }},
		{name: "UnbanUser of an admin's mute needs a higher role", state: states(func(s *State) { s.Mutes[uAdmin2] = permanent }),
			env: env(uAdmin, &UnbanUser{TargetUserID: uAdmin2}), err: ErrPermission},
		{name: "UnbanUser of nobody restricted", env: env(uAdmin, &UnbanUser{TargetUserID: uAlice}), err: ErrNotBanned},
		{name: "kick with a reason", env: env(uAdmin, &KickUser{TargetUserID: uCarol, Reason: "spam"}),
			want:   []Event{ev(EventRoomUserKicked, &RoomUserKickedEvent{UserID: uCarol, OperatorUserID: uAdmin, WasInRoom: true, Reason: "spam"})},
			change: func(s *State) { delete(s.Members, uCarol); s.Bans[uCarol] = permanent; s.BanReasons[uCarol] = "spam" }},
		{name: "permanent with a duration", env: env(uAdmin, &MuteUser{TargetUserID: uAlice, Permanent: true, DurationSeconds: 5}), err: ErrBadDuration},
		{name: "a reason on a lift", env: env(uAdmin, &MuteUser{TargetUserID: uCarol, Reason: "x"}), err: ErrInvalidArgument},
		{name: "reason too long", env: env(uAdmin, &KickUser{TargetUserID: uCarol, Reason: string(make([]byte, MaxReasonLen+1))}), err: ErrFieldTooLong},
		{name: "reason not UTF-8", env: env(uAdmin, &MuteUser{TargetUserID: uCarol, DurationSeconds: 5, Reason: "\xff"}), err: ErrInvalidArgument},
	})
	// A permanent mute never ends by itself; a timed one's reason ends with it.
	s := fixture()
	apply(t, s, env(uAdmin, &MuteUser{TargetUserID: uAlice, Permanent: true}), nil)
	apply(t, s, env(uAdmin, &MuteUser{TargetUserID: uBob, DurationSeconds: 1, Reason: "calm down"}), nil)
	apply(t, s, envAt(uAlice, tNow+MaxDurationSecs*1000, &JoinRoom{}), nil)
	if !s.MutedAt(uAlice, tNow+MaxDurationSecs*1000) || s.MutedAt(uBob, tNow+1000) || s.MuteReasons[uBob] != "" {
		t.Fatalf("after the timed mute ended: %s", dumpState(s))
	}
}
