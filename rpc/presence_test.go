package rpc_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"hyapp/room-service/auth"
	roomv1 "hyapp/room-service/gen/room/v1"
	"hyapp/room-service/gen/room/v1/roomv1connect"
	"hyapp/room-service/rpc"
)

func TestHeartbeat(t *testing.T) {
	s := start(t)
	must(t, s.rooms.CreateRoom, &roomv1.CreateRoomRequest{RoomId: "hb", CommandId: "c", OperatorUserId: 1, OwnerUserId: 1, SeatCount: 8})
	must(t, s.rooms.JoinRoom, &roomv1.JoinRoomRequest{RoomId: "hb", CommandId: "j", OperatorUserId: 10})
	before := s.snapshot(t, "hb").GetRoomVersion()

	res := must(t, s.rooms.Heartbeat, &roomv1.HeartbeatRequest{RoomId: "hb", UserIds: []int64{10, 11, 12}})
	if res.GetMembers() != 1 || res.GetNotMembers() != 2 || !slices.Equal(res.GetNotMemberUserIds(), []int64{11, 12}) {
		t.Fatalf("heartbeat of 10, 11, 12: %v, want 1 member and 11, 12 not", res)
	}
	snap := s.snapshot(t, "hb")
	if snap.GetRoomVersion() != before || len(snap.GetMembers()) != 1 {
		t.Fatalf("a heartbeat changed the room: version %d (was %d), %d members", snap.GetRoomVersion(), before, len(snap.GetMembers()))
	}

	many := make([]int64, 1001)
	for i := range many {
		many[i] = int64(i + 1)
	}
	for _, tc := range []struct {
		name   string
		req    *roomv1.HeartbeatRequest
		code   connect.Code
		reason string
	}{
		{"no room id", &roomv1.HeartbeatRequest{UserIds: []int64{10}}, connect.CodeInvalidArgument, "missing_room_id"},
		{"no users", &roomv1.HeartbeatRequest{RoomId: "hb"}, connect.CodeInvalidArgument, "too_many_users"},
		{"1,001 users", &roomv1.HeartbeatRequest{RoomId: "hb", UserIds: many}, connect.CodeInvalidArgument, "too_many_users"},
		{"user 0", &roomv1.HeartbeatRequest{RoomId: "hb", UserIds: []int64{10, 0}}, connect.CodeInvalidArgument, "bad_user_id"},
		{"a negative user", &roomv1.HeartbeatRequest{RoomId: "hb", UserIds: []int64{-10}}, connect.CodeInvalidArgument, "bad_user_id"},
		{"no such room", &roomv1.HeartbeatRequest{RoomId: "nope", UserIds: []int64{10}}, connect.CodeNotFound, "room_not_found"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := s.rooms.Heartbeat(context.Background(), connect.NewRequest(tc.req))
			wantErr(t, err, tc.code, tc.reason)
		})
	}
}

// TestHeartbeatNeedsActAsAny: a heartbeat vouches for many users, so a
// gateway that acts only for the users it asserts may not send one.
func TestHeartbeatNeedsActAsAny(t *testing.T) {
	s, _ := startScoped(t)
	must(t, s.rooms.CreateRoom, &roomv1.CreateRoomRequest{RoomId: "hb", CommandId: "c", OperatorUserId: 1, OwnerUserId: 1, SeatCount: 8})
	req := &roomv1.HeartbeatRequest{RoomId: "hb", UserIds: []int64{10}}

	gw := roomv1connect.NewRoomServiceClient(s.h1, s.base, withToken("gw"+scopeToken(auth.Room)))
	r := connect.NewRequest(req)
	r.Header().Set(rpc.UserHeader, assertion(t, 10))
	_, err := gw.Heartbeat(context.Background(), r)
	wantErr(t, err, connect.CodePermissionDenied, "missing_scope")

	trusted := roomv1connect.NewRoomServiceClient(s.h1, s.base, withToken(scopeToken(auth.Room)))
	if res := must(t, trusted.Heartbeat, req); res.GetNotMembers() != 1 {
		t.Fatalf("heartbeat with room and act-as-any: %v", res)
	}
}

// The example of Tencent's callback authentication page.
func TestTIMSignMatchesTencentsExample(t *testing.T) {
	if got := rpc.TIMSign("xxxxyyyy", "1669872112"); got != "17773bc39a671d7b9aa835458704d2a6db81360a5940292b587d6d760d484061" {
		t.Fatalf("Sign %s", got)
	}
}

// recordingPresence passes state changes to the registry and keeps them.
type recordingPresence struct {
	rpc.Presence
	mu   sync.Mutex
	seen []string
}

func (p *recordingPresence) UserOnline(user, at int64) int {
	n := p.Presence.UserOnline(user, at)
	p.record(fmt.Sprintf("online %d at %d: %d rooms", user, at, n))
	return n
}

func (p *recordingPresence) UserOffline(user, at int64) int {
	n := p.Presence.UserOffline(user, at)
	p.record(fmt.Sprintf("offline %d at %d: %d rooms", user, at, n))
	return n
}

func (p *recordingPresence) record(s string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.seen = append(p.seen, s)
}

func (p *recordingPresence) all() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.seen)
}

// TestTIMCallback sends Tencent IM state callbacks over HTTP to the
// callback handler in front of a real registry: a callback without a good
// signature, with a stale time or another app's id is refused and reaches
// nothing; a signed one reaches the rooms its user is in, and the answer
// is Tencent's.
func TestTIMCallback(t *testing.T) {
	const cbToken, appID = "callback-token-0123456789abcdef", 1400000001
	s := start(t)
	must(t, s.rooms.CreateRoom, &roomv1.CreateRoomRequest{RoomId: "cb", CommandId: "c", OperatorUserId: 1, OwnerUserId: 1, SeatCount: 8})
	must(t, s.rooms.JoinRoom, &roomv1.JoinRoomRequest{RoomId: "cb", CommandId: "j", OperatorUserId: 10})
	presence := &recordingPresence{Presence: s.reg}
	now := time.Now()
	srv := httptest.NewServer(rpc.TIMCallback(cbToken, appID, presence, nil, func() time.Time { return now }, quiet))
	t.Cleanup(srv.Close)

	body := func(action, account string) string {
		return fmt.Sprintf(`{"CallbackCommand":"State.StateChange","EventTime":%d,"Info":{"Action":%q,"To_Account":%q,"Reason":"Register"},"KickedDevice":[]}`,
			now.UnixMilli(), action, account)
	}
	signed := func(at time.Time, tok string) string {
		rt := strconv.FormatInt(at.Unix(), 10)
		return fmt.Sprintf("SdkAppid=%d&CallbackCommand=State.StateChange&contenttype=json&ClientIP=1.2.3.4&OptPlatform=IOS&RequestTime=%s&Sign=%s",
			appID, rt, rpc.TIMSign(tok, rt))
	}
	send := func(method, query, payload string) (int, map[string]any) {
		t.Helper()
		req, err := http.NewRequest(method, srv.URL+rpc.TIMCallbackPath+"?"+query, strings.NewReader(payload))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		res, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		raw, _ := io.ReadAll(res.Body)
		var ans map[string]any
		if err := json.Unmarshal(raw, &ans); err != nil {
			t.Fatalf("answer %q is not JSON: %v", raw, err)
		}
		return res.StatusCode, ans
	}
	good := signed(now, cbToken)
	for _, tc := range []struct {
		name, method, query, body string
		status                    int
		reason                    string
	}{
		{"no signature", http.MethodPost, fmt.Sprintf("SdkAppid=%d&CallbackCommand=State.StateChange", appID), body("Disconnect", "10"), 401, "missing_signature"},
		{"signed with another token", http.MethodPost, signed(now, "another-token"), body("Disconnect", "10"), 401, "bad_signature"},
		{"the signature of another time", http.MethodPost, strings.Replace(good, "RequestTime="+strconv.FormatInt(now.Unix(), 10), "RequestTime="+strconv.FormatInt(now.Unix()-1, 10), 1), body("Disconnect", "10"), 401, "bad_signature"},
		{"six minutes old", http.MethodPost, signed(now.Add(-6*time.Minute), cbToken), body("Disconnect", "10"), 401, "stale_request_time"},
		{"six minutes ahead", http.MethodPost, signed(now.Add(6*time.Minute), cbToken), body("Disconnect", "10"), 401, "stale_request_time"},
		{"not a time", http.MethodPost, "RequestTime=soon&Sign=" + rpc.TIMSign(cbToken, "soon"), body("Disconnect", "10"), 401, "bad_request_time"},
		{"another app", http.MethodPost, strings.Replace(good, fmt.Sprint(appID), "1400000002", 1), body("Disconnect", "10"), 401, "wrong_sdkappid"},
		{"GET", http.MethodGet, good, "", 405, "method_not_allowed"},
		{"not JSON", http.MethodPost, good, "{", 400, "malformed_request"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, ans := send(tc.method, tc.query, tc.body)
			if status != tc.status || ans["ActionStatus"] != "FAIL" || ans["ErrorInfo"] != tc.reason || ans["ErrorCode"] == float64(0) {
				t.Fatalf("status %d, answer %v; want %d FAIL %s", status, ans, tc.status, tc.reason)
			}
		})
	}
	if got := presence.all(); len(got) != 0 {
		t.Fatalf("refused callbacks reached the rooms: %v", got)
	}

	for _, tc := range []struct{ query, body string }{
		{signed(now.Add(-4*time.Minute), cbToken), body("Disconnect", "10")},
		{good, body("Login", "10")},
		{good, body("Logout", "11")},                                              // a user in no room here
		{good, body("Login", "administrator")},                                    // not a user of the service
		{good, body("Disconnect", "010")},                                         // another account than user 10's
		{good, body("Disconnect", "+10")},                                         // another account than user 10's
		{good, `{"CallbackCommand":"Group.CallbackAfterSendMsg","GroupId":"cb"}`}, // another callback
	} {
		status, ans := send(http.MethodPost, tc.query, tc.body)
		if status != http.StatusOK || ans["ActionStatus"] != "OK" || ans["ErrorCode"] != float64(0) || ans["ErrorInfo"] != "" {
			t.Fatalf("signed callback %s: status %d, answer %v", tc.body, status, ans)
		}
	}
	at := now.UnixMilli()
	want := []string{
		fmt.Sprintf("offline 10 at %d: 1 rooms", at),
		fmt.Sprintf("online 10 at %d: 1 rooms", at),
		fmt.Sprintf("offline 11 at %d: 0 rooms", at),
	}
	if got := presence.all(); !slices.Equal(got, want) {
		t.Fatalf("state changes %v, want %v", got, want)
	}
}

// TestRefusedTIMCallbacksAreLoggedOnceASecond: the callback URL faces the
// internet, and anyone can post to it without a signature. A stream of
// such posts writes a line a second to the log, saying how many it held
// back, not a line each.
func TestRefusedTIMCallbacksAreLoggedOnceASecond(t *testing.T) {
	var lines []string
	var mu sync.Mutex
	log := slog.New(recordHandler(func(r slog.Record) {
		mu.Lock()
		defer mu.Unlock()
		held := ""
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "held_back" {
				held = a.Value.String()
			}
			return true
		})
		lines = append(lines, r.Message+" held_back="+held)
	}))
	now := time.Now()
	clock := func() time.Time { return now }
	h := rpc.TIMCallback("callback-token-0123456789abcdef", 0, &recordingPresence{}, nil, clock, log)
	post := func() {
		t.Helper()
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, rpc.TIMCallbackPath+"?RequestTime=1&Sign=x", strings.NewReader("{}")))
		if rec.Code != http.StatusUnauthorized {
			t.Fatalf("an unsigned callback answered %d", rec.Code)
		}
	}
	for range 1000 {
		post()
	}
	now = now.Add(time.Second)
	post()
	want := []string{"Tencent IM callback refused held_back=0", "Tencent IM callback refused held_back=999"}
	if !slices.Equal(lines, want) {
		t.Fatalf("1,001 refused callbacks over a second logged %d lines (%v...); want %q", len(lines), lines[:min(len(lines), 2)], want)
	}
}

// recordHandler is a slog.Handler that hands each record to f.
type recordHandler func(slog.Record)

func (f recordHandler) Enabled(context.Context, slog.Level) bool { return true }

func (f recordHandler) Handle(_ context.Context, r slog.Record) error {
	f(r)
	return nil
}

func (f recordHandler) WithAttrs([]slog.Attr) slog.Handler { return f }
func (f recordHandler) WithGroup(string) slog.Handler      { return f }
