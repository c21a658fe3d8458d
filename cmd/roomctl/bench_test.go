package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	roomv1 "hyapp/room-service/gen/room/v1"
)

// TestBenchAPI runs the API scenarios, small, against a development server
// (zero configuration on a loopback port, as the README runs it): every call
// of every scenario must succeed, or the command fails; on the API port and
// on the gRPC transport. With ghz on the PATH or in $GOPATH/bin the same
// scenarios run driven by ghz too.
func TestBenchAPI(t *testing.T) {
	m := startMain(t, "-listen", "127.0.0.1:0", "-sqlite-synchronous", "NORMAL") // no credentials: a development server
	args := []string{"-addr", "http://" + m.Addr, "bench", "-api", "-grpc-addr", m.GRPCAddr, "-only", "", "-rooms", "4", "-api-commands", "40"}
	ghz := findGhz()
	if ghz != "" {
		args = append(args, "-ghz", ghz)
	} else {
		t.Log("ghz not found: the scenarios run with this command's own client only")
	}
	out := mustRun(t, args...)

	// A table for each port (the API's, the gRPC transport's) and each
	// load generator.
	tables := strings.Split(out, "\nthe service")
	if want := map[bool]int{false: 3, true: 5}[ghz != ""]; len(tables) != want {
		t.Fatalf("%d tables, want %d:\n%s", len(tables)-1, want-1, out)
	}
	if !strings.Contains(out, "gRPC transport at "+m.GRPCAddr) {
		t.Fatalf("no table of the gRPC transport:\n%s", out)
	}
	// Each scenario's row: its name, then the calls it made.
	rows := map[string]string{
		"Health/Check, 256 in flight":                        "40",
		"CreateRoom, 16 in flight":                           "5",  // 4 rooms and the hot room
		"CreateRoom, 256 in flight":                          "16", // 4 more per room of the joins
		"JoinRoom, 4 rooms, 256 in flight":                   "40",
		"JoinRoom, 4 rooms, 8 in flight":                     "40",
		"JoinRoom, one hot room, 256":                        "40",
		"JoinRoom, one hot room, 64":                         "40",
		"JoinRoom, one hot room, 5000/s offered (open loop)": "40",
		"GetRoomSnapshot, 4 rooms":                           "40",
	}
	for _, table := range tables[1:] {
		for name, ops := range rows {
			re := regexp.MustCompile(regexp.QuoteMeta(name) + `[^\n]*?\s` + ops + `\s+[0-9.]+\s+[0-9]+\s+[0-9.]+\s+[0-9.]+`)
			if !re.MatchString(table) {
				t.Errorf("no row %q with %s calls in:\n%s", name, ops, table)
			}
		}
		// The service's cost per call, read from its /metrics, and the
		// share of the transport's ceiling.
		if !strings.Contains(table, "µs CPU") || !strings.Contains(table, "of the transport's ceiling") {
			t.Errorf("no cost per call or share of the ceiling in:\n%s", table)
		}
	}
	// Each table closed the rooms it made (21 per table), so none of their
	// members is left to expire during a later table.
	var open, closed roomv1.ListRoomsResponse
	decode(t, mustRun(t, "-addr", "http://"+m.Addr, "call", "ListRooms", `{"page_size":500,"status":"ROOM_STATUS_OPEN"}`), &open)
	decode(t, mustRun(t, "-addr", "http://"+m.Addr, "call", "ListRooms", `{"page_size":500,"status":"ROOM_STATUS_CLOSED"}`), &closed)
	if want := 21 * (len(tables) - 1); len(open.GetRooms()) != 0 || len(closed.GetRooms()) != want || open.GetNextPageToken()+closed.GetNextPageToken() != "" {
		t.Fatalf("after the run %d rooms are open and %d closed, want 0 and %d", len(open.GetRooms()), len(closed.GetRooms()), want)
	}

	// -api-listen=false measures the gRPC transport alone.
	out = mustRun(t, "-addr", "http://"+m.Addr, "bench", "-api", "-api-listen=false", "-grpc-addr", m.GRPCAddr, "-only", "", "-rooms", "4", "-api-commands", "40")
	if tables := strings.Split(out, "\nthe service"); len(tables) != 2 || !strings.HasPrefix(tables[1], "'s gRPC transport at "+m.GRPCAddr) {
		t.Fatalf("want only the gRPC transport's table:\n%s", out)
	}

	// -api-scenarios runs the named scenarios, beside the ceiling and the
	// rooms' creation; an unknown name is a usage error.
	out = mustRun(t, "-addr", "http://"+m.Addr, "bench", "-api", "-api-listen=false", "-grpc-addr", m.GRPCAddr, "-only", "", "-rooms", "4", "-api-commands", "40", "-api-scenarios", "hot")
	for name, want := range map[string]bool{
		"Health/Check": true, "CreateRoom, 16 in flight": true,
		"JoinRoom, one hot room, 256": true, "JoinRoom, one hot room, 64": true, "JoinRoom, one hot room, 5000/s offered": true,
		"CreateRoom, 256 in flight": false, "JoinRoom, 4 rooms": false, "GetRoomSnapshot": false,
	} {
		if strings.Contains(out, name) != want {
			t.Errorf("row %q shown: %v, want %v, with -api-scenarios hot:\n%s", name, !want, want, out)
		}
	}
	code, _, stderr := roomctl(t, "-addr", "http://"+m.Addr, "bench", "-api", "-only", "", "-api-scenarios", "hot,warm")
	if code != 2 || !strings.Contains(stderr, `unknown scenario "warm"`) {
		t.Fatalf("-api-scenarios hot,warm: exit %d, stderr %q; want a usage error naming warm", code, stderr)
	}

	// -api-profile profiles the service from its admin listener during the
	// many-room joins at 256 in flight: rows after that one split its CPU
	// and its allocations by component, and the CPU shares add up to the
	// whole. (The service runs in this process here, so its profile holds
	// the load generator's CPU too.)
	out = mustRun(t, "-addr", "http://"+m.Addr, "bench", "-api", "-api-listen=false", "-grpc-addr", m.GRPCAddr, "-only", "", "-rooms", "4",
		"-api-commands", "2000", "-api-scenarios", "joins", "-api-profile", "http://"+m.AdminAddr, "-api-profile-duration", "1s")
	joins := strings.Index(out, "JoinRoom, 4 rooms, 256 in flight")
	share := regexp.MustCompile(`CPU by component: ([^\n]*?)\s+0\s.*?([0-9.]+)% of the service's CPU`)
	found := share.FindAllStringSubmatchIndex(out, -1)
	if joins < 0 || len(found) == 0 || found[0][0] < joins {
		t.Fatalf("no CPU by component after the joins at 256 in flight:\n%s", out)
	}
	sum, components := 0.0, map[string]bool{}
	for _, f := range found {
		pct, _ := strconv.ParseFloat(out[f[4]:f[5]], 64)
		sum += pct
		components[strings.TrimSpace(out[f[2]:f[3]])] = true
	}
	// A second of a small row holds few samples: which parts hold them
	// varies, but some named part does.
	delete(components, "the rest (the scheduler, others)")
	if sum < 99 || sum > 101 || len(components) == 0 {
		t.Fatalf("components %v add up to %.1f%%, want 100%% with a named part in them:\n%s", components, sum, out)
	}
	if !regexp.MustCompile(`CPU by component: [^\n]*% of its allocations, [0-9]+ a call`).MatchString(out) {
		t.Fatalf("no allocations a call by component:\n%s", out)
	}
	for _, bad := range [][]string{{"-api-profile", "127.0.0.1:9100"}, {"-api-profile", "http://" + m.AdminAddr, "-api-profile-duration", "500ms"}} {
		code, _, stderr := roomctl(t, append([]string{"-addr", "http://" + m.Addr, "bench", "-api", "-only", ""}, bad...)...)
		if code != 2 || !strings.Contains(stderr, bad[len(bad)-2]) {
			t.Errorf("%v: exit %d, stderr %q; want a usage error naming %s", bad, code, stderr, bad[len(bad)-2])
		}
	}
}

// findGhz returns the path of a ghz binary, or "".
func findGhz() string {
	if p, err := exec.LookPath("ghz"); err == nil {
		return p
	}
	if gopath, err := exec.Command("go", "env", "GOPATH").Output(); err == nil {
		p := filepath.Join(strings.TrimSpace(string(gopath)), "bin", "ghz")
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return ""
}
