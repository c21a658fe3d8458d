package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	roomv1 "hyapp/room-service/gen/room/v1"
	"hyapp/room-service/internal/daemon"
	"hyapp/room-service/internal/poll"
)

// TestMain fails a run that leaves a goroutine behind. The gRPC port's
// reads keep a process-wide sampler running (internal/netwake) until a
// second after the last of them, so a goroutine still running is looked
// for again, until a deadline, before it counts as left behind.
func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		err := goleak.Find() // each look retries for a while itself
		for deadline := time.Now().Add(5 * time.Second); err != nil && time.Now().Before(deadline); {
			err = goleak.Find()
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "goleak: goroutines left behind: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// testToken is the test caller's token; the daemon gives it every scope
// roomctl uses.
const testToken = "test-token-0123456789abcdef-0123456"

// startServer runs room-service in-process on a random port, assembled as
// the daemon assembles it, with a stored snapshot every 3 commands.
func startServer(t *testing.T) string {
	t.Helper()
	return "http://" + runDaemon(t, "-listen", "127.0.0.1:0", "-snapshot-every", "3", "-sqlite-synchronous", "NORMAL").Addr
}

// runDaemon runs room-service in-process with the test token and args, and
// closes it when the test ends.
func runDaemon(t *testing.T, args ...string) *daemon.Main {
	t.Helper()
	return startMain(t, append([]string{"-tokens", "roomctl=" + testToken + ":room+act-as-any+operator+wallet.credit"}, args...)...)
}

// startMain runs room-service in-process with args, its own data
// directory and only errors logged, and closes it when the test ends.
func startMain(t *testing.T, args ...string) *daemon.Main {
	t.Helper()
	m := daemon.NewMain()
	args = append([]string{"-data-dir", t.TempDir(), "-grpc-listen", "127.0.0.1:0", "-log-level", "error"}, args...)
	if err := m.ParseFlags(args, func(string) string { return "" }); err != nil {
		t.Fatal(err)
	}
	if err := m.Run(context.Background()); err != nil {
		_ = m.Close(context.Background())
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := m.Close(ctx); err != nil {
			t.Error(err)
		}
	})
	return m
}

// roomctl runs the CLI in-process.
func roomctl(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = run(t.Context(), args, &out, &errOut)
	return code, out.String(), errOut.String()
}

// mustRun runs the CLI and fails the test unless it exits 0.
func mustRun(t *testing.T, args ...string) string {
	t.Helper()
	code, out, errOut := roomctl(t, args...)
	if code != 0 {
		t.Fatalf("roomctl %q: exit %d\nstdout: %s\nstderr: %s", args, code, out, errOut)
	}
	return out
}

// decode parses printed protojson into m.
func decode(t *testing.T, out string, m proto.Message) {
	t.Helper()
	if err := protojson.Unmarshal([]byte(out), m); err != nil {
		t.Fatalf("parse output %q: %v", out, err)
	}
}

func TestRoomctl(t *testing.T) {
	// The server address and token come from the environment, as an operator's shell would set them.
	t.Setenv("ROOM_ADDR", startServer(t))
	t.Setenv("ROOM_TOKEN", testToken)

	// lowerCamel field names are accepted as well as snake_case.
	var created roomv1.CreateRoomResponse
	decode(t, mustRun(t, "call", "CreateRoom",
		`{"roomId":"r1","commandId":"c1","operatorUserId":7,"ownerUserId":7,"hostUserId":7,"seatCount":4,"mode":"chat"}`), &created)
	if created.GetRoomVersion() != 1 {
		t.Fatalf("CreateRoom: room_version %d, want 1", created.GetRoomVersion())
	}
	mustRun(t, "call", "JoinRoom", `{"room_id":"r1","command_id":"c2","operator_user_id":7,"nickname":"seven"}`)
	mustRun(t, "call", "JoinRoom", `{"room_id":"r1","command_id":"c3","operator_user_id":8}`) // version 3: stored snapshot
	// Flags may follow the arguments; -grpc speaks gRPC over h2c.
	var took roomv1.TakeMicResponse
	decode(t, mustRun(t, "call", "TakeMic", `{"room_id":"r1","command_id":"c4","operator_user_id":7,"seat_index":2}`, "-grpc"), &took)
	if took.GetRoomVersion() != 4 {
		t.Fatalf("TakeMic: room_version %d, want 4", took.GetRoomVersion())
	}
	mustRun(t, "-grpc", "call", "TakeMic", `{"room_id":"r1","command_id":"c5","operator_user_id":8,"seat_index":0}`)

	t.Run("snapshot", func(t *testing.T) {
		var snap roomv1.RoomSnapshot
		decode(t, mustRun(t, "snapshot", "r1", "-members", "1"), &snap)
		if snap.GetRoomVersion() != 5 || len(snap.GetMembers()) != 1 || snap.GetOnlineCount() != 2 {
			t.Fatalf("snapshot: version %d, %d members, online %d; want 5, 1, 2",
				snap.GetRoomVersion(), len(snap.GetMembers()), snap.GetOnlineCount())
		}
		if got := snap.GetSeats()[2].GetUserId(); got != 7 {
			t.Fatalf("seat 2 holds user %d, want 7", got)
		}
	})

	t.Run("log", func(t *testing.T) {
		lines := strings.Split(strings.TrimSpace(mustRun(t, "log", "r1")), "\n")
		wantTypes := []string{"CreateRoom", "JoinRoom", "JoinRoom", "TakeMic", "TakeMic"}
		if len(lines) != len(wantTypes) {
			t.Fatalf("log: %d lines, want %d:\n%s", len(lines), len(wantTypes), strings.Join(lines, "\n"))
		}
		for i, line := range lines {
			f := strings.Split(line, "\t")
			if len(f) != 5 || f[0] != strconv.Itoa(i+1) || f[1] != "c"+f[0] || f[2] != wantTypes[i] || !strings.HasPrefix(f[4], "{") {
				t.Errorf("log line %d = %q, want version %d, command c%d, type %s, a time and a JSON payload", i, line, i+1, i+1, wantTypes[i])
			}
		}
		page := strings.Split(strings.TrimSpace(mustRun(t, "log", "-after", "1", "-limit", "2", "r1")), "\n")
		if len(page) != 2 || !strings.HasPrefix(page[0], "2\t") || !strings.HasPrefix(page[1], "3\t") {
			t.Fatalf("log -after 1 -limit 2:\n%s", strings.Join(page, "\n"))
		}
	})

	t.Run("verify", func(t *testing.T) {
		want := "ok: room r1 version 5: replay of 2 commands after snapshot 3 equals the live state\n"
		if got := mustRun(t, "verify", "r1"); got != want {
			t.Fatalf("verify r1 = %q, want %q", got, want)
		}
		// Without a stored snapshot, replay starts from the room's metadata.
		mustRun(t, "call", "CreateRoom", `{"room_id":"r2","command_id":"c1","operator_user_id":9,"owner_user_id":9,"seat_count":2}`)
		mustRun(t, "call", "JoinRoom", `{"room_id":"r2","command_id":"c2","operator_user_id":10}`)
		want = "ok: room r2 version 2: replay of 2 commands after snapshot 0 equals the live state\n"
		if got := mustRun(t, "verify", "r2", "-grpc"); got != want {
			t.Fatalf("verify r2 = %q, want %q", got, want)
		}
		// A chat mute that ended stays in the state until the room's next
		// command; the live answer leaves it out. Replay still agrees.
		mustRun(t, "call", "MuteUser", `{"room_id":"r2","command_id":"c3","operator_user_id":9,"target_user_id":10,"duration_seconds":1}`)
		poll.Until(t, 10*time.Second, "the mute to end", func() error {
			var snap roomv1.RoomSnapshot
			decode(t, mustRun(t, "snapshot", "r2"), &snap)
			if n := len(snap.GetChatMutes()); n != 0 {
				return fmt.Errorf("%d chat mutes", n)
			}
			return nil
		})
		want = "ok: room r2 version 3: replay of 0 commands after snapshot 3 equals the live state\n"
		if got := mustRun(t, "verify", "r2"); got != want {
			t.Fatalf("verify r2 after its mute ended = %q, want %q", got, want)
		}
	})

	t.Run("outbox status", func(t *testing.T) {
		// The relay publishes the rooms' durable events to the embedded
		// NATS: nothing stays pending, and the published rows are kept.
		var out string
		poll.Until(t, 30*time.Second, "the outbox drained", func() error {
			out = mustRun(t, "outbox", "status")
			if !strings.HasPrefix(out, "pending\t0\n") {
				return fmt.Errorf("status:\n%s", out)
			}
			return nil
		})
		var published int
		for line := range strings.Lines(out) {
			if n, ok := strings.CutPrefix(strings.TrimSpace(line), "published (kept)\t"); ok {
				published, _ = strconv.Atoi(n)
			}
		}
		if published < 5 || !strings.HasSuffix(out, "dead\t0\n") {
			t.Fatalf("outbox status after %d durable events or more:\n%s", 5, out)
		}
	})

	t.Run("rooms", func(t *testing.T) {
		out := mustRun(t, "rooms", "-page-size", "1", "-status", "open")
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if len(lines) != 2 || !strings.HasPrefix(lines[0], "r1\tstatus=open version=5 ") || !strings.HasPrefix(lines[1], "r2\t") {
			t.Fatalf("rooms:\n%s", out)
		}
		if out := mustRun(t, "rooms", "-status", "closed"); out != "" {
			t.Fatalf("rooms -status closed: %q, want nothing", out)
		}
	})

	t.Run("errors", func(t *testing.T) {
		for _, tc := range []struct {
			name string
			args []string
			code int
			want []string // substrings of stderr
		}{
			{"bad seat index", []string{"call", "TakeMic", `{"room_id":"r2","command_id":"c3","operator_user_id":10,"seat_index":99}`},
				exitFail, []string{"code=invalid_argument", "reason=bad_seat_index"}},
			{"no token", []string{"-token", "", "snapshot", "r1"}, exitFail, []string{"code=unauthenticated", "reason=unauthenticated"}},
			{"unknown room", []string{"log", "nope"}, exitFail, []string{"reason=room_not_found"}},
			{"unknown method", []string{"call", "Frobnicate", "{}"}, exitUsage, []string{`unknown method "Frobnicate"`, "TakeMic", "ListCommands"}},
			{"bad json", []string{"call", "TakeMic", `{"seat":1}`}, exitUsage, []string{"parse room.v1.TakeMicRequest"}},
			{"unknown command", []string{"frob"}, exitUsage, []string{`unknown command "frob"`}},
			{"missing room", []string{"verify"}, exitUsage, []string{"usage: roomctl verify <room_id>"}},
			{"bad status", []string{"rooms", "-status", "gone"}, exitUsage, []string{`-status "gone"`}},
			{"no arguments", nil, exitUsage, []string{"usage: roomctl", "verify <room_id>"}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				code, _, errOut := roomctl(t, tc.args...)
				if code != tc.code {
					t.Fatalf("exit %d, want %d; stderr: %s", code, tc.code, errOut)
				}
				for _, w := range tc.want {
					if !strings.Contains(errOut, w) {
						t.Errorf("stderr lacks %q:\n%s", w, errOut)
					}
				}
			})
		}
	})

	t.Run("help", func(t *testing.T) {
		out := mustRun(t, "help")
		if strings.Contains(out, testToken) {
			t.Errorf("help shows the token from ROOM_TOKEN:\n%s", out)
		}
		for _, sub := range subcommands {
			if !strings.Contains(out, "  "+sub.name+" ") {
				t.Errorf("help does not list %s:\n%s", sub.name, out)
			}
		}
	})

	t.Run("gifts", func(t *testing.T) {
		if got := mustRun(t, "wallet", "credit", "21", "1000", "-key", "top-up-1"); got != "user 21 balance 1000 key top-up-1\n" {
			t.Fatalf("credit: %q", got)
		}
		if got := mustRun(t, "wallet", "credit", "21", "1000", "-key", "top-up-1"); !strings.Contains(got, "balance 1000") || !strings.Contains(got, "nothing credited") {
			t.Fatalf("credit again with the key: %q", got)
		}
		if got := mustRun(t, "gifts"); !strings.Contains(got, "heart") || !strings.Contains(got, "lucky_clover") {
			t.Fatalf("gifts:\n%s", got)
		}
		mustRun(t, "call", "CreateRoom", `{"room_id":"r3","command_id":"c1","operator_user_id":20,"owner_user_id":20,"seat_count":4}`)
		mustRun(t, "call", "JoinRoom", `{"room_id":"r3","command_id":"c2","operator_user_id":21}`)
		mustRun(t, "call", "JoinRoom", `{"room_id":"r3","command_id":"c3","operator_user_id":22}`)
		mustRun(t, "call", "TakeMic", `{"room_id":"r3","command_id":"c4","operator_user_id":22,"seat_index":1}`)
		var sent roomv1.SendGiftResponse
		decode(t, mustRun(t, "call", "SendGift", `{"room_id":"r3","command_id":"g1","operator_user_id":21,"receiver_user_ids":[22],"gift_id":"heart","count":7}`), &sent)
		if sent.GetCoinBalanceAfter() != 930 || sent.GetCost() != 70 {
			t.Fatalf("SendGift: %v", &sent)
		}
		if got := mustRun(t, "wallet", "balance", "21"); got != "user 21 balance 930\n" {
			t.Fatalf("balance: %q", got)
		}
		// A second sender: the visible rank holds two users.
		mustRun(t, "wallet", "credit", "23", "1000", "-key", "top-up-2")
		mustRun(t, "call", "JoinRoom", `{"room_id":"r3","command_id":"c5","operator_user_id":23}`)
		mustRun(t, "call", "SendGift", `{"room_id":"r3","command_id":"g2","operator_user_id":23,"receiver_user_ids":[22],"gift_id":"heart","count":1}`)
		// The replayed economy (heat, rank, charm, rocket fuel) equals the live one.
		if got := mustRun(t, "verify", "r3"); !strings.HasPrefix(got, "ok: room r3 version 7") {
			t.Fatalf("verify r3: %q", got)
		}
		code, _, errOut := roomctl(t, "wallet", "credit", "21", "0")
		if code != exitFail || !strings.Contains(errOut, "reason=invalid_argument") {
			t.Fatalf("credit 0: exit %d, %s", code, errOut)
		}
	})
}

func TestDiff(t *testing.T) {
	replayed := &roomv1.RoomSnapshot{
		RoomId: "r1", RoomVersion: 5, Status: roomv1.RoomStatus_ROOM_STATUS_OPEN,
		Profile: &roomv1.RoomProfile{Title: "a", ChatEnabled: true},
		Seats:   []*roomv1.MicSeat{{Index: 0}, {Index: 1}},
	}
	live := proto.CloneOf(replayed)
	live.RoomVersion = 6
	live.Status = roomv1.RoomStatus_ROOM_STATUS_CLOSED
	live.Profile.Title = "b"
	live.Seats[1].UserId = 9

	got := diff(replayed, live)
	want := []string{"room_version: replayed 5, live 6", "status: replayed ROOM_STATUS_OPEN, live ROOM_STATUS_CLOSED",
		`profile.title: replayed "a", live "b"`, "seats: replayed has 2 entries, live 2; first difference at [1]"}
	if len(got) != len(want) {
		t.Fatalf("diff = %q, want %d lines", got, len(want))
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Errorf("diff line %d = %q, want prefix %q", i, got[i], want[i])
		}
	}
	if d := diff(replayed, proto.CloneOf(replayed)); len(d) != 0 {
		t.Fatalf("diff of equal snapshots = %q", d)
	}
}

func TestIMCasesRefuseBadLists(t *testing.T) {
	cases, err := imCases("300,1000", "2", "200")
	if err != nil || len(cases) != 2 || cases[1].Rooms != 1000 || cases[1].Rate != 2 || cases[1].Budget != 200 {
		t.Fatalf("cases %+v, %v", cases, err)
	}
	for _, bad := range [][3]string{{"0", "2", "200"}, {"300", "x", "200"}, {"300", "2", "1.5"}, {"", "2", "200"}} {
		if _, err := imCases(bad[0], bad[1], bad[2]); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
}
