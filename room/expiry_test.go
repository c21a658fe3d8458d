package room

import (
	"fmt"
	"maps"
	"testing"
)

// Bans and chat mutes that have ended leave the state with the first command
// applied at or after their end, decided by the command's own time, so that
// replaying the log removes them at the same command.
func TestEndedRestrictionsAreRemoved(t *testing.T) {
	n := 0
	bg := func(at int64) *Envelope { // an unrelated command that always applies
		n++
		return envAt(uAdmin, at, &ChangeBackground{BackgroundURL: fmt.Sprintf("https://img.example/bg-%d.png", n)})
	}
	always := map[int64]int64{uBanned: banUntil, uBannedAlways: permanent}
	cases := []struct {
		name  string
		steps []*Envelope // refused ones included: they must change nothing
		bans  map[int64]int64
		mutes map[int64]int64
		next  int64
	}{
		{name: "a command removes what ended before its time", steps: []*Envelope{bg(tNow)},
			bans: always, mutes: map[int64]int64{uCarol: muteUntil}, next: muteUntil},
		{name: "a refused command removes nothing",
			steps: []*Envelope{envAt(uVisitor, muteUntil, &SetChatEnabled{Enabled: false}), bg(tNow + 1)},
			bans:  always, mutes: map[int64]int64{uCarol: muteUntil}, next: muteUntil},
		{name: "a mute ends at its end time", steps: []*Envelope{bg(muteUntil)},
			bans: always, mutes: map[int64]int64{}, next: banUntil},
		{name: "a millisecond before its end it holds", steps: []*Envelope{bg(muteUntil - 1)},
			bans: always, mutes: map[int64]int64{uCarol: muteUntil}, next: muteUntil},
		{name: "a permanent ban never ends", steps: []*Envelope{bg(tNow), bg(MaxAt)},
			bans: map[int64]int64{uBannedAlways: permanent}, mutes: map[int64]int64{}, next: 0},
		{name: "lifting the earliest mute moves the next expiry to a ban",
			steps: []*Envelope{envAt(uAdmin, tNow, &MuteUser{TargetUserID: uCarol})},
			bans:  always, mutes: map[int64]int64{}, next: banUntil},
		{name: "then unbanning leaves only permanent bans",
			steps: []*Envelope{envAt(uAdmin, tNow, &MuteUser{TargetUserID: uCarol}), envAt(uAdmin, tNow+1, &UnbanUser{TargetUserID: uBanned})},
			bans:  map[int64]int64{uBannedAlways: permanent}, mutes: map[int64]int64{}, next: 0},
		{name: "a longer mute of the earliest moves the next expiry",
			steps: []*Envelope{envAt(uAdmin, tNow, &MuteUser{TargetUserID: uCarol, DurationSeconds: 7200})},
			bans:  always, mutes: map[int64]int64{uCarol: tNow + 7_200_000}, next: banUntil},
		{name: "a shorter ban becomes the next expiry",
			steps: []*Envelope{envAt(uAdmin, tNow, &KickUser{TargetUserID: uBanExpired, DurationSeconds: 60})},
			bans:  map[int64]int64{uBanned: banUntil, uBannedAlways: permanent, uBanExpired: tNow + 60_000},
			mutes: map[int64]int64{uCarol: muteUntil}, next: tNow + 60_000},
		{name: "a rejoin after the ban ended",
			steps: []*Envelope{envAt(uAdmin, tNow, &KickUser{TargetUserID: uAlice, DurationSeconds: 60}), envAt(uAlice, tNow+60_000, &JoinRoom{})},
			bans:  always, mutes: map[int64]int64{uCarol: muteUntil}, next: muteUntil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			live := fixture()
			var log []*Envelope
			unbans := 0
			for _, e := range tc.steps {
				before := cloneState(live)
				events, err := Apply(live, e)
				if err != nil {
					requireUnchanged(t, before, live)
					continue
				}
				checkSuccess(t, before, live, e, events)
				log = append(log, e)
				for _, ev := range events {
					if ev.Type == EventRoomUserUnbanned {
						unbans++
					}
				}
				if _, ok := e.Command.(*UnbanUser); ok {
					unbans--
				}
			}
			if !maps.Equal(live.Bans, tc.bans) || !maps.Equal(live.Mutes, tc.mutes) || live.NextExpiry() != tc.next {
				t.Fatalf("bans %v, mutes %v, next expiry %d\nwant bans %v, mutes %v, next expiry %d",
					live.Bans, live.Mutes, live.NextExpiry(), tc.bans, tc.mutes, tc.next)
			}
			if unbans != 0 {
				t.Fatalf("%d RoomUserUnbanned events besides those of UnbanUser", unbans)
			}
			// Replaying the log (the applied commands only) gives the same state.
			replay := fixture()
			for _, e := range log {
				if _, err := Apply(replay, e); err != nil {
					t.Fatalf("replay %s at %d: %v", e.Command.Type(), e.At, err)
				}
			}
			requireStateEqual(t, live, replay)
		})
	}
}

// A decoder fills Bans and Mutes directly; DeriveExpiry then gives the same
// next expiry as the live state, and the first command past it removes what
// ended, as it does live.
func TestDeriveExpiryMatchesLive(t *testing.T) {
	live := fixture()
	if _, err := Apply(live, envAt(uAdmin, tNow, &KickUser{TargetUserID: uVisitor, DurationSeconds: 30})); err != nil {
		t.Fatal(err)
	}
	decoded := cloneState(live)
	decoded.expiry = 0
	decoded.DeriveExpiry()
	requireStateEqual(t, live, decoded)
	if live.NextExpiry() != tNow+30_000 {
		t.Fatalf("next expiry %d, want the visitor's ban end %d", live.NextExpiry(), tNow+30_000)
	}
	for _, s := range []*State{live, decoded} {
		if _, err := Apply(s, envAt(uAdmin, tNow+30_000, &SetChatEnabled{Enabled: false})); err != nil {
			t.Fatal(err)
		}
	}
	requireStateEqual(t, live, decoded)
	if _, banned := live.Bans[uVisitor]; banned || live.NextExpiry() != muteUntil {
		t.Fatalf("bans %v, next expiry %d: want the visitor's ban gone and the mute next", live.Bans, live.NextExpiry())
	}
}
