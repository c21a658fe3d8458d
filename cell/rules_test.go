package cell_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/proto"

	"hyapp/room-service/cell"
	"hyapp/room-service/internal/poll"
	"hyapp/room-service/lease"
	"hyapp/room-service/room"
	"hyapp/room-service/snapshot"
	"hyapp/room-service/store"
)

// TestRulesChangeAcrossCrash ignites a rocket under one set of economy
// rules on a node that then dies (no final snapshot: the room is its log),
// and starts the next node after the launch time under other rules, one
// kind of change at a time. The room loads, its rocket launches once with
// the launch time and level it was ignited with, the switch to the new
// rules is a logged SetRules before the first command the new node applies,
// later gifts use the new rules, and a replay of the log alone equals the
// live room.
func TestRulesChangeAcrossCrash(t *testing.T) { stores(t, testRulesChangeAcrossCrash) }

func testRulesChangeAcrossCrash(t *testing.T, open func(testing.TB) store.Repository) {
	riyadh, err := time.LoadLocation("Asia/Riyadh")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		change func(r *room.Rules)
	}{
		{"countdown", func(r *room.Rules) { r.RocketLevels[0].Countdown = 30 * time.Minute }},
		{"fuel", func(r *room.Rules) { r.RocketLevels[0].Fuel = 20 }}, // below the 30 the level holds: it ignites at the switch
		{"levels", func(r *room.Rules) {
			r.RocketLevels = append(r.RocketLevels, room.RocketLevel{Fuel: 1000, Countdown: time.Minute})
		}},
		{"rank size", func(r *room.Rules) { r.RankSize = 1 }},
		{"zone", func(r *room.Rules) { r.Location = riyadh }},
		{"day start", func(r *room.Rules) { r.DayStart = time.Hour }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			repo := open(t)
			crashed := &cutRepo{Repository: repo}
			// 10:00 UTC: the hour the test jumps crosses no midnight, in
			// UTC or in Riyadh, so the rocket's day does not end whatever
			// the hour the test runs at.
			clock := &testClock{}
			clock.set(time.Now().UTC().Truncate(24 * time.Hour).Add(10 * time.Hour))
			cfg := rocketConfig(time.Hour, clock)
			cfg.NodeID = "crashed"
			before := cfg.Rules
			deadSink := &recordSink{}
			dead := newTimerRegistry(t, crashed, cfg, lease.NewLocal(), deadSink, nil)
			roomID := "rules-" + strings.ReplaceAll(tc.name, " ", "-")
			l := igniteRocket(t, dead, deadSink, roomID) // 100 coins: rocket 1
			mustSubmit(t, dead, env(roomID, "gift-2", 10, &room.SendGift{
				ReceiverUserIDs: []int64{11}, GiftID: "rose", Count: 3,
				Outcome: room.GiftOutcome{Name: "rose", Price: 10, Kind: room.GiftNormal},
			})) // 30 more fuel in level 0
			crashed.cut.Store(true)

			after := *before
			after.RocketLevels = slices.Clone(before.RocketLevels)
			tc.change(&after)
			clock.jump(time.Hour + time.Second)
			cfg = rocketConfig(time.Hour, clock)
			cfg.NodeID, cfg.Rules = "next", &after
			sink := &recordSink{}
			next := newTimerRegistry(t, repo, cfg, lease.NewLocal(), sink, nil)
			if _, err := next.Snapshot(context.Background(), roomID); err != nil {
				t.Fatalf("the room does not load under the new rules: %v", err)
			}
			poll.Until(t, 10*time.Second, "the launch", poll.Bool(func() bool { return len(launches(sink, roomID)) > 0 }))
			got := launches(sink, roomID)
			if got[0].RocketID != l.RocketID || got[0].Level != l.Level || got[0].LaunchAt != l.LaunchAt {
				t.Fatalf("launch %+v, want rocket %d level %d at its recorded %d", got[0], l.RocketID, l.Level, l.LaunchAt)
			}
			mustSubmit(t, next, env(roomID, "gift-3", 10, &room.SendGift{
				ReceiverUserIDs: []int64{11}, GiftID: "rose", Count: 1,
				Outcome: room.GiftOutcome{Name: "rose", Price: 10, Kind: room.GiftNormal},
			}))

			recs, err := repo.ListCommandsAfter(context.Background(), roomID, 0)
			if err != nil {
				t.Fatal(err)
			}
			switches := map[int64]string{} // version -> digest
			launchV, gift2V := int64(0), int64(0)
			for _, r := range recs {
				switch r.CommandID {
				case "gift-2":
					gift2V = r.RoomVersion
				case cell.RocketLaunchCommandID(l.RocketID):
					launchV = r.RoomVersion
				}
				if r.CommandType == string(room.CmdSetRules) {
					e, err := room.DecodeCommand(roomID, r.CommandID, room.CmdSetRules, r.Payload)
					if err != nil {
						t.Fatal(err)
					}
					rules, err := e.Command.(*room.SetRules).Rules.Rules()
					if err != nil {
						t.Fatal(err)
					}
					switches[r.RoomVersion] = rules.Digest()
				}
			}
			var toAfter int64
			for v, d := range switches {
				if d == after.Digest() {
					toAfter = v
				}
			}
			if len(switches) != 2 || toAfter <= gift2V || toAfter > launchV {
				t.Fatalf("switches %v (the new rules at %d), gift-2 at %d, launch at %d", switches, toAfter, gift2V, launchV)
			}
			live, err := next.Snapshot(context.Background(), roomID)
			if err != nil {
				t.Fatal(err)
			}
			if d := live.GetEconomy().GetRules().GetDigest(); d != after.Digest() {
				t.Fatalf("live rules %s, want %s", d, after.Digest())
			}

			// The log alone rebuilds the live room.
			meta, _, err := repo.GetRoomMeta(context.Background(), roomID)
			if err != nil {
				t.Fatal(err)
			}
			rec, err := cell.Recover(context.Background(), repo, meta)
			if err != nil {
				t.Fatal(err)
			}
			if replayed := snapshot.ToProto(rec.State); !proto.Equal(replayed, live) {
				t.Fatalf("replay differs from the live room\nreplay %v\nlive   %v", replayed.GetEconomy(), live.GetEconomy())
			}
		})
	}
}

// TestUnrecoverableRoomIsIsolated logs a command that the room's history
// refuses on replay (a launch of a rocket that never ignited, as a replay
// under other rules once produced): loading that room answers
// room_recovery_failed, never the domain's reason, and is counted, while
// another room on the same node is served.
func TestUnrecoverableRoomIsIsolated(t *testing.T) { stores(t, testUnrecoverableRoomIsIsolated) }

func testUnrecoverableRoomIsIsolated(t *testing.T, open func(testing.TB) store.Repository) {
	repo := open(t)
	first := cell.New(cell.Config{}, repo, lease.NewLocal(), &recordSink{}, nil, quiet)
	createRoom(t, first, "broken")
	createRoom(t, first, "fine")
	ctx := context.Background()
	if err := first.Close(ctx); err != nil {
		t.Fatal(err)
	}
	bad := &room.Envelope{RoomID: "broken", CommandID: cell.RocketLaunchCommandID(1), Operator: room.SystemOperator, Platform: true,
		At: time.Now().UnixMilli(), Command: &room.LaunchRocket{RocketID: 1, LaunchAt: 1}}
	payload, err := room.EncodeCommand(bad)
	if err != nil {
		t.Fatal(err)
	}
	if err := repo.SaveCommand(ctx, store.CommandRecord{RoomID: "broken", RoomVersion: 2, CommandID: bad.CommandID,
		CommandType: string(room.CmdLaunchRocket), Payload: payload, Replayable: true, CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}

	m := cell.NewMetrics(nil)
	reg := newTimerRegistry(t, repo, cell.Config{}, lease.NewLocal(), &recordSink{}, m)
	for range 2 { // a second call tries again and fails the same way
		_, err = reg.Submit(ctx, env("broken", "join", 5, &room.JoinRoom{}))
		if e := room.AsError(err); e.Reason != room.ErrRecoveryFailed.Reason || e.Code != room.CodeUnavailable {
			t.Fatalf("JoinRoom on the broken room: %v, want room_recovery_failed", err)
		}
	}
	if _, err := reg.Snapshot(ctx, "broken"); !errors.Is(err, room.ErrRecoveryFailed) {
		t.Fatalf("GetRoomSnapshot on the broken room: %v", err)
	}
	mustSubmit(t, reg, env("fine", "join", 5, &room.JoinRoom{}))
	var pb dto.Metric
	if err := m.Recoveries.WithLabelValues("failed").Write(&pb); err != nil || pb.GetCounter().GetValue() != 3 {
		t.Fatalf("failed recoveries %v (%v), want 3", pb.GetCounter().GetValue(), err)
	}
}
