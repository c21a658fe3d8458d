package daemon

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"hyapp/room-service/cell"
	roomv1 "hyapp/room-service/gen/room/v1"
	"hyapp/room-service/internal/poll"
	"hyapp/room-service/room"
	"hyapp/room-service/snapshot"
	"hyapp/room-service/store"
	"hyapp/room-service/store/mysql/mysqltest"
)

// TestRulesChangeAfterSIGKILL runs the service under one set of rocket
// levels, ignites rockets, kills it with SIGKILL and restarts it under
// other rules, twice:
//   - levels of 100 and 300 fuel, heart x77 ignites three rockets; restarted
//     under the built-in levels, the room shows the same launches and fuel,
//     and every launch fires once at its recorded time;
//   - the built-in levels, a castle ignites level 0 (10 s countdown);
//     restarted with a 12 s countdown, the room loads and its launch keeps
//     the time it was ignited with.
//
// After each restart the rooms take commands, the switch to the new rules is
// a logged SetRules, and a replay of the stored snapshot and log (no
// configuration) equals the live room. On SQLite and on MariaDB.
func TestRulesChangeAfterSIGKILL(t *testing.T) {
	if testing.Short() {
		t.Skip("starts child processes")
	}
	t.Run("sqlite", func(t *testing.T) { rulesChangeAfterSIGKILL(t) })
	t.Run("mysql", func(t *testing.T) { rulesChangeAfterSIGKILL(t, "-mysql-dsn", mysqltest.DSN(t)) })
}

func rulesChangeAfterSIGKILL(t *testing.T, dbArgs ...string) {
	dir := t.TempDir()
	small := configFile(t, "rocket_levels:\n  - {fuel: 100, countdown: 10s}\n  - {fuel: 300, countdown: 10s}\n")
	slower := configFile(t, "rocket_levels:\n  - {fuel: 10000, countdown: 12s}\n  - {fuel: 50000, countdown: 10s}\n"+
		"  - {fuel: 200000, countdown: 15s}\n  - {fuel: 1000000, countdown: 20s}\n")

	// 1. Small levels: heart x77 (770 coins) ignites levels 0, 1 and 0 again.
	child, addr := startChildWith(t, dir, append([]string{"-config", small}, dbArgs...)...)
	c := clientsAt(addr)
	giftRoom(t, c, "hearts", []int64{2}, []int64{100})
	credit(t, c, 100, 100_000)
	sendGift(t, c, "hearts", "g1", "heart", 77)
	before := liveEconomy(t, c, "hearts")
	if n := len(before.GetRocket().GetLaunches()); n != 3 {
		t.Fatalf("heart x77 ignited %d rockets, want 3: %v", n, before)
	}
	kill(t, child)

	// 2. The built-in levels: the room is what it was, and its launches fire.
	child, addr = startChildWith(t, dir, dbArgs...)
	c = clientsAt(addr)
	after := liveEconomy(t, c, "hearts")
	if !proto.Equal(after.GetRocket(), before.GetRocket()) || after.GetHeat() != before.GetHeat() {
		t.Fatalf("the restart under other rules rewrote the room:\n was %v\n now %v", before, after)
	}
	join(t, c, "hearts", 101)
	awaitLaunches(t, c, "hearts", before.GetRocket().GetLaunches())
	if rk := liveEconomy(t, c, "hearts").GetRocket(); rk.GetLevel() != 1 || rk.GetFuel() != 270 || rk.GetThreshold() != 50_000 {
		t.Fatalf("under the built-in levels the rocket is %v, want level 1 with 270 of 50000", rk)
	}
	assertSwitchedTo(t, c, "hearts", room.DefaultRules())
	assertReplayEqualsLive(t, c, "hearts")

	// A castle (20,000 coins) under the built-in levels ignites level 0.
	giftRoom(t, c, "castle", []int64{2}, []int64{100})
	sendGift(t, c, "castle", "g1", "castle", 1)
	ignited := liveEconomy(t, c, "castle").GetRocket().GetLaunches()
	if len(ignited) != 1 || ignited[0].GetLaunchAtMs()-ignited[0].GetIgnitedAtMs() != 10_000 {
		t.Fatalf("the castle ignited %v, want one launch 10 s after its ignition", ignited)
	}
	kill(t, child)

	// 3. Level 0's countdown is 12 s now: the room loads, and the launch keeps its 10 s.
	_, addr = startChildWith(t, dir, append([]string{"-config", slower}, dbArgs...)...)
	c = clientsAt(addr)
	join(t, c, "castle", 101)
	if got := liveEconomy(t, c, "castle").GetRocket().GetLaunches(); len(got) != 1 || !proto.Equal(got[0], ignited[0]) {
		t.Fatalf("after the restart the launch is %v, want %v", got, ignited)
	}
	awaitLaunches(t, c, "castle", ignited)
	assertSwitchedTo(t, c, "castle", slowerRules())
	assertReplayEqualsLive(t, c, "castle")
	assertReplayEqualsLive(t, c, "hearts")
}

func slowerRules() *room.Rules {
	r := room.DefaultRules()
	r.RocketLevels[0].Countdown = 12 * time.Second
	return r
}

func configFile(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "room-service.yaml")
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func kill(t *testing.T, child *exec.Cmd) {
	t.Helper()
	if err := child.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = child.Wait()
}

func sendGift(t *testing.T, c clients, roomID, commandID, giftID string, count int32) {
	t.Helper()
	if _, err := c.room.SendGift(context.Background(), connect.NewRequest(&roomv1.SendGiftRequest{
		RoomId: roomID, CommandId: commandID, OperatorUserId: 100, ReceiverUserIds: []int64{2}, GiftId: giftID, Count: count,
	})); err != nil {
		t.Fatalf("SendGift %s x%d in %s: %v", giftID, count, roomID, err)
	}
}

func join(t *testing.T, c clients, roomID string, user int64) {
	t.Helper()
	if _, err := c.room.JoinRoom(context.Background(), connect.NewRequest(&roomv1.JoinRoomRequest{
		RoomId: roomID, CommandId: fmt.Sprint("join-", user), OperatorUserId: user,
	})); err != nil {
		t.Fatalf("JoinRoom %s after the restart: %v", roomID, err)
	}
}

func liveEconomy(t *testing.T, c clients, roomID string) *roomv1.RoomEconomy {
	t.Helper()
	return liveSnapshot(t, c, roomID).GetEconomy()
}

func liveSnapshot(t *testing.T, c clients, roomID string) *roomv1.RoomSnapshot {
	t.Helper()
	res, err := c.room.GetRoomSnapshot(context.Background(), connect.NewRequest(&roomv1.GetRoomSnapshotRequest{RoomId: roomID}))
	if err != nil {
		t.Fatalf("GetRoomSnapshot %s: %v", roomID, err)
	}
	return res.Msg.GetSnapshot()
}

// awaitLaunches waits for a LaunchRocket of each launch in the log, and
// checks each launched once, as ignited, not before its time.
func awaitLaunches(t *testing.T, c clients, roomID string, want []*roomv1.RocketLaunch) {
	t.Helper()
	var got map[int64][]logRow
	poll.Until(t, 60*time.Second, "the launches of "+roomID, func() error {
		got = map[int64][]logRow{}
		for _, r := range readLog(t, c, roomID) {
			if l, ok := r.env.Command.(*room.LaunchRocket); ok {
				got[l.RocketID] = append(got[l.RocketID], r)
			}
		}
		if len(got) < len(want) {
			return fmt.Errorf("%d of %d rockets launched", len(got), len(want))
		}
		return nil
	})
	for _, w := range want {
		rows := got[w.GetRocketId()]
		if len(rows) != 1 {
			t.Fatalf("rocket %d launched %d times", w.GetRocketId(), len(rows))
		}
		l := rows[0].env.Command.(*room.LaunchRocket)
		if l.Level != w.GetLevel() || l.LaunchAt != w.GetLaunchAtMs() || rows[0].env.At < w.GetLaunchAtMs() {
			t.Fatalf("rocket %d launched as %+v at %d, ignited as %v", w.GetRocketId(), l, rows[0].env.At, w)
		}
	}
}

// assertSwitchedTo checks the room's newest logged SetRules names want and
// the live room runs under it.
func assertSwitchedTo(t *testing.T, c clients, roomID string, want *room.Rules) {
	t.Helper()
	var last string
	for _, r := range readLog(t, c, roomID) {
		if s, ok := r.env.Command.(*room.SetRules); ok {
			rules, err := s.Rules.Rules()
			if err != nil {
				t.Fatal(err)
			}
			last = rules.Digest()
		}
	}
	if last != want.Digest() {
		t.Fatalf("room %s: the last logged switch is to %q, want %q", roomID, last, want.Digest())
	}
	if got := liveEconomy(t, c, roomID).GetRules().GetDigest(); got != want.Digest() {
		t.Fatalf("room %s runs under %q, want %q", roomID, got, want.Digest())
	}
}

// assertReplayEqualsLive rebuilds the room from its stored snapshot and log,
// as recovery and roomctl verify do, with no configuration, and compares it
// with the live room.
func assertReplayEqualsLive(t *testing.T, c clients, roomID string) {
	t.Helper()
	res, err := c.ops.GetStoredSnapshot(context.Background(), connect.NewRequest(&roomv1.GetStoredSnapshotRequest{RoomId: roomID}))
	if err != nil {
		t.Fatal(err)
	}
	var s *room.State
	if res.Msg.GetFound() {
		if s, err = snapshot.FromProto(res.Msg.GetSnapshot()); err != nil {
			t.Fatal(err)
		}
	} else {
		s = room.Genesis(roomID, 1, 0, 10, "", room.StatusCreating)
	}
	var recs []store.CommandRecord
	for _, r := range readLog(t, c, roomID) {
		if r.entry.GetRoomVersion() > s.Version {
			recs = append(recs, store.CommandRecord{RoomID: roomID, RoomVersion: r.entry.GetRoomVersion(), CommandID: r.entry.GetCommandId(),
				CommandType: r.entry.GetCommandType(), Payload: []byte(r.entry.GetPayloadJson()), Replayable: r.entry.GetReplayable()})
		}
	}
	if err := cell.Replay(s, recs); err != nil {
		t.Fatalf("replay %s: %v", roomID, err)
	}
	live := liveSnapshot(t, c, roomID)
	if replayed := snapshot.WithMemberLimit(snapshot.ToProto(s), 0); !proto.Equal(replayed, live) {
		t.Fatalf("room %s: replay differs from the live room\nreplay %v\nlive   %v", roomID, replayed, live)
	}
}
