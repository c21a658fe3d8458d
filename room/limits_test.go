package room

import (
	"testing"
)

func TestCommandTimeMustBeInRange(t *testing.T) {
	for _, at := range []int64{0, -1000, MaxAt + 1} {
		s := fixture()
		before := cloneState(s)
		_, err := Apply(s, envAt(uOwner, at, &SetChatEnabled{Enabled: false}))
		requireReason(t, err, ErrBadTime)
		requireUnchanged(t, before, s)
	}
}

func TestKickNeverShortensALongerBan(t *testing.T) {
	s := fixture()
	// The owner bans carol for a day; an admin's one-minute kick keeps the day.
	if _, err := Apply(s, env(uOwner, &KickUser{TargetUserID: uCarol, DurationSeconds: 86400})); err != nil {
		t.Fatal(err)
	}
	events, err := Apply(s, env(uAdmin, &KickUser{TargetUserID: uCarol, DurationSeconds: 60}))
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Bans[uCarol]; got != tNow+86_400_000 {
		t.Fatalf("ban ends at %d, want the longer %d", got, tNow+86_400_000)
	}
	if got := events[len(events)-1].Data.(*RoomUserKickedEvent).BannedUntil; got != tNow+86_400_000 {
		t.Fatalf("event says %d", got)
	}
	// A permanent ban stays permanent.
	if _, err := Apply(s, env(uAdmin, &KickUser{TargetUserID: uBannedAlways, DurationSeconds: 60})); err != nil {
		t.Fatal(err)
	}
	if s.Bans[uBannedAlways] != permanent {
		t.Fatal("a timed kick shortened a permanent ban")
	}
	// A longer kick extends.
	if _, err := Apply(s, env(uAdmin, &KickUser{TargetUserID: uBanned, DurationSeconds: 7200})); err != nil {
		t.Fatal(err)
	}
	if s.Bans[uBanned] != tNow+7_200_000 {
		t.Fatalf("a longer kick did not extend: %d", s.Bans[uBanned])
	}
}

func TestRestrictionsAreBounded(t *testing.T) {
	s := fixture()
	delete(s.Bans, uBanExpired) // nothing may be prunable at tNow
	for u := int64(1_000_000); len(s.Bans) < MaxRestrictions; u++ {
		s.Bans[u] = tNow + 1 // all end a millisecond after tNow
	}
	before := cloneState(s)
	_, err := Apply(s, env(uOwner, &KickUser{TargetUserID: uAlice, DurationSeconds: 60}))
	requireReason(t, err, ErrTooManyBans)
	requireUnchanged(t, before, s)
	// Once they have ended, the next kick prunes them and fits.
	if _, err := Apply(s, envAt(uOwner, tNow+2, &KickUser{TargetUserID: uAlice, DurationSeconds: 60})); err != nil {
		t.Fatal(err)
	}
	if len(s.Bans) >= MaxRestrictions || !s.BannedAt(uBannedAlways, tNow+2) {
		t.Fatalf("pruning left %d bans or dropped a permanent one", len(s.Bans))
	}

	m := fixture()
	delete(m.Mutes, uMuteExpired)
	for u := int64(1_000_000); len(m.Mutes) < MaxRestrictions; u++ {
		m.Mutes[u] = tNow + 3_600_000
	}
	before = cloneState(m)
	_, err = Apply(m, env(uOwner, &MuteUser{TargetUserID: uAlice, DurationSeconds: 60}))
	requireReason(t, err, ErrTooManyBans)
	requireUnchanged(t, before, m)
}

func TestUpdateProfileWithTheSameValuesChangesNothing(t *testing.T) {
	s := fixture()
	before := cloneState(s)
	_, err := Apply(s, env(uOwner, &UpdateProfile{Title: strp(s.Profile.Title)}))
	requireReason(t, err, ErrNoChange)
	requireUnchanged(t, before, s)
}
