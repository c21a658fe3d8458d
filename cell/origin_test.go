package cell_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"hyapp/room-service/cell"
	"hyapp/room-service/internal/poll"
	"hyapp/room-service/lease"
	"hyapp/room-service/room"
	"hyapp/room-service/store"
)

// A client's command may not take the command id of one the service issues
// itself, nor be issued as the service's operator: such a command is
// refused and changes nothing, and the rocket whose launch id a member
// tried to take launches when its countdown ends.
func TestAClientCannotTakeTheIDOfACommandTheServiceIssues(t *testing.T) {
	repo := openRepo(t)
	sink := &recordSink{}
	reg := newTimerRegistry(t, repo, rocketConfig(200*time.Millisecond, nil), lease.NewLocal(), sink, nil)
	createRoom(t, reg, "rk")
	ctx := context.Background()
	before, err := reg.Snapshot(ctx, "rk")
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{cell.RocketLaunchCommandID(1), cell.RulesCommandID(9), cell.MicExpiryCommandID(1), room.PresenceIDPrefix + "x"} {
		if _, err := reg.Submit(ctx, env("rk", id, 12, &room.JoinRoom{})); !errors.Is(err, room.ErrReservedCommandID) {
			t.Errorf("a join with command_id %q: %v, want reserved_command_id", id, err)
		}
	}
	if _, err := reg.Submit(ctx, env("rk", "as-the-service", room.SystemOperator, &room.JoinRoom{})); !errors.Is(err, room.ErrReservedOperator) {
		t.Errorf("a join as the service's operator: %v, want reserved_operator", err)
	}
	after, err := reg.Snapshot(ctx, "rk")
	if err != nil {
		t.Fatal(err)
	}
	if after.GetRoomVersion() != before.GetRoomVersion() || len(after.GetMembers()) != 0 {
		t.Fatalf("refused commands changed the room: version %d -> %d, members %v", before.GetRoomVersion(), after.GetRoomVersion(), after.GetMembers())
	}
	// Ids that only resemble the service's are a client's to use.
	mustSubmit(t, reg, env("rk", "rules-9", 13, &room.JoinRoom{}))
	mustSubmit(t, reg, env("rk", "my/rocket-launch/1", 14, &room.JoinRoom{}))

	igniteRocketIn(t, reg, sink, "rk")
	poll.Until(t, 5*time.Second, "rocket 1's launch", poll.Bool(func() bool { return len(launches(sink, "rk")) == 1 }))
}

// A rules switch whose command id a client's command took, in a log
// written before the service kept the id's prefix, goes on under a unique
// id: the room does not refuse every command after it.
func TestARulesSwitchWhoseIDALoggedCommandTookGoesOn(t *testing.T) {
	stores(t, func(t *testing.T, open func(testing.TB) store.Repository) {
		repo := open(t)
		ctx := context.Background()
		a := newTimerRegistry(t, repo, rocketConfig(time.Hour, nil), lease.NewLocal(), &recordSink{}, nil)
		createRoom(t, a, "rl")
		mustSubmit(t, a, env("rl", "join-10", 10, &room.JoinRoom{}))
		snap, err := a.Snapshot(ctx, "rl")
		if err != nil {
			t.Fatal(err)
		}
		// The next command applies at version v+1; the switch after the
		// restart comes before it, at v+2, under RulesCommandID(v+2).
		taken := cell.RulesCommandID(snap.GetRoomVersion() + 2)
		if _, err := cell.SubmitUnchecked(a, env("rl", taken, 12, &room.JoinRoom{})); err != nil {
			t.Fatalf("a join under %q, as builds before the check took it: %v", taken, err)
		}
		if err := a.Close(ctx); err != nil {
			t.Fatal(err)
		}

		cfg := rocketConfig(time.Hour, nil)
		cfg.Rules.RocketLevels = append(slices.Clone(cfg.Rules.RocketLevels), room.RocketLevel{Fuel: 1000, Countdown: time.Minute})
		b := newTimerRegistry(t, repo, cfg, lease.NewLocal(), &recordSink{}, nil)
		for _, u := range []int64{20, 21, 22} {
			mustSubmit(t, b, env("rl", "join-after-"+string(rune('a'+u-20)), u, &room.JoinRoom{}))
		}
		recs, err := repo.ListCommandsAfter(ctx, "rl", 0)
		if err != nil {
			t.Fatal(err)
		}
		var switches []string
		for _, r := range recs {
			if r.CommandType == string(room.CmdSetRules) {
				switches = append(switches, r.CommandID)
			}
		}
		if len(switches) == 0 || !strings.HasPrefix(switches[len(switches)-1], taken+"/") {
			t.Fatalf("SetRules commands logged %v, want the last under a unique id after %q", switches, taken)
		}
	})
}

// A rocket whose launch id a client's command took, in a log written before
// the service kept the id's prefix, launches under a unique id.
func TestARocketWhoseLaunchIDALoggedCommandTookLaunches(t *testing.T) {
	repo := openRepo(t)
	sink := &recordSink{}
	reg := newTimerRegistry(t, repo, rocketConfig(200*time.Millisecond, nil), lease.NewLocal(), sink, nil)
	createRoom(t, reg, "rk")
	if _, err := cell.SubmitUnchecked(reg, env("rk", cell.RocketLaunchCommandID(1), 12, &room.JoinRoom{})); err != nil {
		t.Fatal(err)
	}
	igniteRocketIn(t, reg, sink, "rk")
	poll.Until(t, 5*time.Second, "rocket 1's launch", poll.Bool(func() bool { return len(launches(sink, "rk")) == 1 }))
	assertLaunchCommands(t, repo, "rk", 1)
}
