package room

import (
	"reflect"
	"slices"
	"testing"
)

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

// rev0 is env as a row logged before rules revisions has it.
func rev0(e *Envelope) *Envelope { e.Rev = 0; return e }

// The owner cannot be chat-muted: nobody may mute them, or lift a mute of
// theirs, so a member muted when the room passes to them would stay muted
// as its owner (in the IM group too) until the mute ends, for good when it
// is permanent. The transfer ends it and shows that it did. A row logged
// before revision 1 replays as it applied.
func TestANewOwnerIsNotChatMuted(t *testing.T) {
	mutedCarol := states(func(s *State) { s.Mutes[uCarol] = permanent; s.MuteReasons[uCarol] = "spam" })
	s := mutedCarol()
	events, err := Apply(s, env(uOwner, &TransferOwnership{NewOwnerUserID: uCarol}))
	if err != nil {
		t.Fatal(err)
	}
	if s.MutedAt(uCarol, tNow+1) || s.MuteReasons[uCarol] != "" {
		t.Fatalf("owner %d is chat-muted until %d (reason %q)", uCarol, s.Mutes[uCarol], s.MuteReasons[uCarol])
	}
	lifted := ev(EventRoomUserMuted, &RoomUserMutedEvent{UserID: uCarol, OperatorUserID: uOwner})
	if !slices.ContainsFunc(events, func(e Event) bool { return reflect.DeepEqual(e, lifted) }) {
		t.Fatalf("the lifted mute is not shown (the IM group keeps it):\n%s", dumpEvents(events))
	}
	// An owner who was not muted gets no RoomUserMuted.
	events, err = Apply(fixture(), env(uOwner, &TransferOwnership{NewOwnerUserID: uAlice}))
	if err != nil || slices.ContainsFunc(events, func(e Event) bool { return e.Type == EventRoomUserMuted }) {
		t.Fatalf("transfer to alice: %v\n%s", err, dumpEvents(events))
	}

	old := mutedCarol()
	apply(t, old, rev0(env(uOwner, &TransferOwnership{NewOwnerUserID: uCarol})), nil)
	if !old.MutedAt(uCarol, tNow+1) {
		t.Fatal("a row logged before revision 1 does not replay as it applied")
	}
}

// A banned admin is still an admin to the other admins: while the owner's
// ban runs, a peer may neither make it longer (a kick never shortens a ban)
// nor chat-mute them past it, nor lift what the owner decided. The owner
// and platform staff still may. Rows logged before revision 1 replay as
// they applied.
func TestABannedAdminKeepsTheirRank(t *testing.T) {
	s := fixture()
	apply(t, s, env(uOwner, &KickUser{TargetUserID: uAdmin2, DurationSeconds: 60, Reason: "cool down"}), nil)
	apply(t, s, envAt(uAdmin, tNow+1, &KickUser{TargetUserID: uAdmin2}), ErrPermission)
	apply(t, s, envAt(uAdmin, tNow+2, &MuteUser{TargetUserID: uAdmin2, Permanent: true}), ErrPermission)
	apply(t, s, envAt(uAdmin, tNow+3, &UnbanUser{TargetUserID: uAdmin2}), ErrPermission)
	apply(t, s, envAt(uOwner, tNow+4, &MuteUser{TargetUserID: uAdmin2, DurationSeconds: 600}), nil)
	apply(t, s, envAt(uAdmin, tNow+5, &UnbanUser{TargetUserID: uAdmin2}), ErrPermission)
	apply(t, s, envAt(uAdmin, tNow+6, &MuteUser{TargetUserID: uAdmin2}), ErrPermission)
	apply(t, s, envAt(uOwner, tNow+7, &KickUser{TargetUserID: uAdmin2, DurationSeconds: 3600}), nil)
	pe := platformEnv(&UnbanUser{TargetUserID: uAdmin2})
	pe.At = tNow + 8
	apply(t, s, pe, nil)
	// Banned members and visitors rank as before.
	apply(t, s, envAt(uAdmin, tNow+9, &UnbanUser{TargetUserID: uBanned}), nil)
	apply(t, s, envAt(uAdmin, tNow+10, &KickUser{TargetUserID: uBannedAlways, DurationSeconds: 60}), nil)
	apply(t, s, envAt(uAdmin, tNow+11, &MuteUser{TargetUserID: uVisitor, DurationSeconds: 60}), nil)

	old := fixture()
	apply(t, old, rev0(env(uOwner, &KickUser{TargetUserID: uAdmin2, DurationSeconds: 60})), nil)
	apply(t, old, rev0(envAt(uAdmin, tNow+1, &MuteUser{TargetUserID: uAdmin2, Permanent: true})), nil)
	apply(t, old, rev0(envAt(uAdmin, tNow+2, &KickUser{TargetUserID: uAdmin2})), nil)
	if !old.BannedAt(uAdmin2, tNow+MaxDurationSecs*1000) || !old.MutedAt(uAdmin2, tNow+3) {
		t.Fatal("rows logged before revision 1 do not replay as they applied")
	}
}
