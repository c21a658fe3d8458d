package daemon

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	roomv1 "hyapp/room-service/gen/room/v1"
	"hyapp/room-service/internal/poll"
	"hyapp/room-service/internal/servicetest"
	"hyapp/room-service/lease/redislease"
	"hyapp/room-service/rpc"
)

// TestTIMCallbackIsServedWithItsToken: with tim_callback_token set, the API
// port serves Tencent's callbacks: a signed Disconnect of a seated member
// reaches their room (the seat goes after the grace), a callback signed
// with another token is refused; without a token the path is not served.
func TestTIMCallbackIsServedWithItsToken(t *testing.T) {
	const cbToken = "tencent-console-callback-token"
	m, client := runMain(t, t.TempDir(), "-tim-callback-token", cbToken, "-mic-offline-grace", "1s")
	ctx := context.Background()
	for _, req := range []any{
		&roomv1.CreateRoomRequest{RoomId: "cb", CommandId: "c", OperatorUserId: 1, OwnerUserId: 1, SeatCount: 8},
		&roomv1.JoinRoomRequest{RoomId: "cb", CommandId: "j", OperatorUserId: 10},
		&roomv1.TakeMicRequest{RoomId: "cb", CommandId: "t", OperatorUserId: 10, SeatIndex: 2},
	} {
		var err error
		switch r := req.(type) {
		case *roomv1.CreateRoomRequest:
			_, err = client.CreateRoom(ctx, connect.NewRequest(r))
		case *roomv1.JoinRoomRequest:
			_, err = client.JoinRoom(ctx, connect.NewRequest(r))
		case *roomv1.TakeMicRequest:
			_, err = client.TakeMic(ctx, connect.NewRequest(r))
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	callback := func(addr, tok string) (int, string) { return disconnect(t, addr, tok, 10) }
	if code, ans := callback(m.Addr, "not-the-token"); code != http.StatusUnauthorized || ans != "FAIL bad_signature" {
		t.Fatalf("callback signed with another token: %d %q", code, ans)
	}
	if code, ans := callback(m.Addr, cbToken); code != http.StatusOK || ans != "OK " {
		t.Fatalf("signed callback: %d %q", code, ans)
	}
	poll.Until(t, 15*time.Second, "the disconnected member's seat to go", poll.Bool(func() bool {
		res, err := client.GetRoomSnapshot(ctx, connect.NewRequest(&roomv1.GetRoomSnapshotRequest{RoomId: "cb"}))
		if err != nil {
			t.Fatal(err)
		}
		return res.Msg.GetSnapshot().GetSeats()[2].GetUserId() == 0
	}))
	res, err := client.GetRoomSnapshot(ctx, connect.NewRequest(&roomv1.GetRoomSnapshotRequest{RoomId: "cb"}))
	if err != nil || len(res.Msg.GetSnapshot().GetMembers()) != 1 {
		t.Fatalf("after the seat went: %v, %v; want 10 still in the room", res, err)
	}

	plain, _ := runMain(t, t.TempDir())
	if code, _ := callback(plain.Addr, cbToken); code != http.StatusNotImplemented {
		t.Fatalf("callback without a configured token: %d, want 501 (unknown_procedure: not served)", code)
	}
	http.DefaultClient.CloseIdleConnections()
}

// TestTIMCallbackReachesEveryNode: Tencent calls one address, so the node
// that gets a state change passes it on to the others: a Disconnect sent to
// a node that does not hold the member's room still takes the member off
// the seat after the grace (the member's silence alone would take 20
// minutes with a presence_timeout of an hour).
func TestTIMCallbackReachesEveryNode(t *testing.T) {
	const cbToken = "tencent-console-callback-token"
	f := newFleetOn(t, 2, "redis://127.0.0.1:6379/4", "ROOM_TIM_CALLBACK_TOKEN="+cbToken,
		"ROOM_MIC_OFFLINE_GRACE=1s", "ROOM_PRESENCE_TIMEOUT=1h", "ROOM_IDLE_TIMEOUT=2h")
	owner, other := f.nodes[0], f.nodes[1]
	ctx := context.Background()
	if _, err := owner.client.CreateRoom(ctx, connect.NewRequest(&roomv1.CreateRoomRequest{RoomId: "cb", CommandId: "c", OperatorUserId: 1, OwnerUserId: 1, SeatCount: 8})); err != nil {
		t.Fatal(err)
	}
	if _, err := owner.client.JoinRoom(ctx, connect.NewRequest(&roomv1.JoinRoomRequest{RoomId: "cb", CommandId: "j", OperatorUserId: 10})); err != nil {
		t.Fatal(err)
	}
	if _, err := owner.client.TakeMic(ctx, connect.NewRequest(&roomv1.TakeMicRequest{RoomId: "cb", CommandId: "t", OperatorUserId: 10, SeatIndex: 2})); err != nil {
		t.Fatal(err)
	}
	nodes, err := owner.ops.ListNodes(ctx, connect.NewRequest(&roomv1.ListNodesRequest{RoomIds: true}))
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes.Msg.GetNodes() {
		if n.GetNodeId() == other.id && len(n.GetRoomIds()) != 0 {
			t.Fatalf("the node the callback goes to holds %v", n.GetRoomIds())
		}
	}
	if code, ans := disconnect(t, other.addr, cbToken, 10); code != http.StatusOK {
		t.Fatalf("callback to the other node: %d %q", code, ans)
	}
	poll.Until(t, 30*time.Second, "the disconnected member's seat to go", poll.Bool(func() bool {
		res, err := other.client.GetRoomSnapshot(ctx, connect.NewRequest(&roomv1.GetRoomSnapshotRequest{RoomId: "cb"}))
		return err == nil && res.Msg.GetSnapshot().GetSeats()[2].GetUserId() == 0
	}))
}

// TestTIMCallbackReachesEveryNodePastOneThatDoesNotAnswer: a member of the
// fleet that accepts connections and never answers (a frozen node) does
// not keep a state change from the other nodes: the node the Disconnect
// reached passes it on to b, which holds the member's room, and the seat
// goes after the grace.
func TestTIMCallbackReachesEveryNodePastOneThatDoesNotAnswer(t *testing.T) {
	servicetest.Need(t, "Redis", "127.0.0.1:6379")
	servicetest.Need(t, "NATS", "127.0.0.1:4222")
	const cbToken = "tencent-console-callback-token"
	id := rand.Text()[:8]
	redisURL := "redis://127.0.0.1:6379/4"
	keys := redislease.Keys{Prefix: "tim-hung-" + id + ":"}
	stream := ownStream(t, "th"+strings.ToLower(id))
	flags := fleetFlags(t, redisURL, keys, stream, id,
		"-tim-callback-token", cbToken, "-mic-offline-grace", "1s", "-presence-timeout", "1h", "-idle-timeout", "2h")
	a, _ := runMain(t, t.TempDir(), flags("a")...)
	_, clientB := runMain(t, t.TempDir(), flags("b")...)

	ctx := context.Background()
	// A member whose id sorts before a's and b's, at an address that
	// accepts connections and answers nothing.
	fakeMember(t, redisOf(t, redisURL), keys, "0-"+id, silentListener(t))

	roomID := "cb-" + id
	if _, err := clientB.CreateRoom(ctx, connect.NewRequest(&roomv1.CreateRoomRequest{RoomId: roomID, CommandId: "c", OperatorUserId: 1, OwnerUserId: 1, SeatCount: 8})); err != nil {
		t.Fatal(err)
	}
	if _, err := clientB.JoinRoom(ctx, connect.NewRequest(&roomv1.JoinRoomRequest{RoomId: roomID, CommandId: "j", OperatorUserId: 10})); err != nil {
		t.Fatal(err)
	}
	if _, err := clientB.TakeMic(ctx, connect.NewRequest(&roomv1.TakeMicRequest{RoomId: roomID, CommandId: "t", OperatorUserId: 10, SeatIndex: 2})); err != nil {
		t.Fatal(err)
	}
	if a.registry.Loaded() != 0 {
		t.Fatal("the node the callback goes to holds the room")
	}
	if code, ans := disconnect(t, a.Addr, cbToken, 10); code != http.StatusOK {
		t.Fatalf("callback: %d %q", code, ans)
	}
	poll.Until(t, 10*time.Second, "the disconnected member's seat on b to go", poll.Bool(func() bool {
		res, err := clientB.GetRoomSnapshot(ctx, connect.NewRequest(&roomv1.GetRoomSnapshotRequest{RoomId: roomID}))
		return err == nil && res.Msg.GetSnapshot().GetSeats()[2].GetUserId() == 0
	}))
}

// silentListener returns the address of a listener that accepts
// connections and never reads or answers, as a frozen node's port does
// (SIGSTOP: the kernel still accepts). Its connections close when the test
// ends.
func silentListener(t *testing.T) string {
	addr, _ := countingSilentListener(t)
	return addr
}

// disconnect sends node addr Tencent's state callback that user
// disconnected, signed with token, and returns the HTTP status and the
// answer's ActionStatus and ErrorInfo.
func disconnect(t *testing.T, addr, token string, user int64) (int, string) {
	t.Helper()
	rt := strconv.FormatInt(time.Now().Unix(), 10)
	url := fmt.Sprintf("http://%s%s?SdkAppid=1400000000&CallbackCommand=State.StateChange&contenttype=json&RequestTime=%s&Sign=%s",
		addr, rpc.TIMCallbackPath, rt, rpc.TIMSign(token, rt))
	body := fmt.Sprintf(`{"CallbackCommand":"State.StateChange","EventTime":%d,"Info":{"Action":"Disconnect","To_Account":"%d","Reason":"TimeOut"}}`, time.Now().UnixMilli(), user)
	res, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var ans struct{ ActionStatus, ErrorInfo string }
	_ = json.NewDecoder(res.Body).Decode(&ans)
	return res.StatusCode, ans.ActionStatus + " " + ans.ErrorInfo
}

// TestTIMCallbackPassedOnByANodeNamedAfterItsHost: a node without node_id
// is named after its host, and passes a callback on marked with that name,
// to the other nodes only: a callback passed on unmarked would be passed on
// again by every node that gets it, itself included, for as long as its
// signature is fresh.
func TestTIMCallbackPassedOnByANodeNamedAfterItsHost(t *testing.T) {
	servicetest.Need(t, "Redis", "127.0.0.1:6379")
	servicetest.Need(t, "NATS", "127.0.0.1:4222")
	host, err := os.Hostname()
	if err != nil || host == "" {
		t.Skip("no host name")
	}
	const cbToken = "tencent-console-callback-token"
	id := rand.Text()[:8]
	redisURL := "redis://127.0.0.1:6379/4"
	keys := redislease.Keys{Prefix: "tim-host-" + id + ":"}
	stream := ownStream(t, "tn"+strings.ToLower(id))
	flags := fleetFlags(t, redisURL, keys, stream, id, "-tim-callback-token", cbToken, "-node-id", "")
	a, _ := runMain(t, t.TempDir(), flags("a")...)

	var mu sync.Mutex
	var marks []string // the X-Room-Forwarded of each callback the other node got
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		marks = append(marks, r.Header.Get(rpc.TIMForwardedHeader))
		mu.Unlock()
		_, _ = io.WriteString(w, `{"ActionStatus":"OK","ErrorCode":0}`)
	}))
	t.Cleanup(other.Close)
	fakeMember(t, redisOf(t, redisURL), keys, "other-"+id, other.Listener.Addr().String())

	if code, ans := disconnect(t, a.Addr, cbToken, 10); code != http.StatusOK {
		t.Fatalf("callback: %d %q", code, ans)
	}
	poll.Until(t, 10*time.Second, "the callback to be passed on", poll.Bool(func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(marks) > 0
	}))
	mu.Lock()
	defer mu.Unlock()
	if marks[0] != host {
		t.Fatalf("the callback was passed on marked %q, want the node's name %q", marks[0], host)
	}
}

// TestATIMCallbackStormCostsBoundedWork: a storm of state changes (a
// reconnect wave after an outage) while one member of the fleet is frozen.
// The node passes them on with bounded work: it does not scan Redis's key
// space for the membership once per callback (Members is for occasional
// checks), and it does not open a connection to the frozen node, and keep
// a goroutine waiting on it, for every callback.
func TestATIMCallbackStormCostsBoundedWork(t *testing.T) {
	servicetest.Need(t, "Redis", "127.0.0.1:6379")
	servicetest.Need(t, "NATS", "127.0.0.1:4222")
	const cbToken, storm = "tencent-console-callback-token", 300
	id := rand.Text()[:8]
	redisURL := "redis://127.0.0.1:6379/4"
	keys := redislease.Keys{Prefix: "tim-storm-" + id + ":"}
	flags := fleetFlags(t, redisURL, keys, ownStream(t, "ts"+strings.ToLower(id)), id, "-tim-callback-token", cbToken)
	a, _ := runMain(t, t.TempDir(), flags("a")...)
	rc := redisOf(t, redisURL)
	frozen, accepted := countingSilentListener(t)
	fakeMember(t, rc, keys, "0-"+id, frozen)

	scans := func() int {
		info, err := rc.Info(t.Context(), "commandstats").Result()
		if err != nil {
			t.Fatal(err)
		}
		var n int
		for line := range strings.Lines(info) {
			if rest, ok := strings.CutPrefix(line, "cmdstat_scan:calls="); ok {
				n, _ = strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
			}
		}
		return n
	}
	goroutines, scansBefore := runtime.NumGoroutine(), scans()
	for range storm {
		if code, ans := disconnect(t, a.Addr, cbToken, 10); code != http.StatusOK {
			t.Fatalf("callback: %d %q", code, ans)
		}
	}
	// The passes to the frozen node take 2 s to fail: look while they wait.
	poll.Until(t, 5*time.Second, "a pass to the frozen node", poll.Bool(func() bool { return accepted() > 0 }))
	if n := scans() - scansBefore; n > storm/10 {
		t.Errorf("%d callbacks scanned Redis's keys %d times", storm, n)
	}
	if n := accepted(); n > storm/4 {
		t.Errorf("%d callbacks opened %d connections to the frozen node", storm, n)
	}
	if n := runtime.NumGoroutine() - goroutines; n > storm/2 {
		t.Errorf("%d callbacks left %d more goroutines", storm, n)
	}
}

// countingSilentListener is silentListener that also counts the
// connections it accepted.
func countingSilentListener(t *testing.T) (string, func() int) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var accepted atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		var conns []net.Conn
		defer func() {
			for _, c := range conns {
				_ = c.Close()
			}
		}()
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			conns = append(conns, conn)
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		<-done
	})
	return ln.Addr().String(), func() int { return int(accepted.Load()) }
}
