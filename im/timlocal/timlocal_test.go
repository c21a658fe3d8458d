package timlocal_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tencentyun/tls-sig-api-v2-golang/tencentyun"
	"go.uber.org/goleak"

	"hyapp/room-service/im/timlocal"
	"hyapp/room-service/internal/poll"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	appID = 1400000001
	key   = "5bd2850fff3ecb11d7c805251c51ee463a25727bddc2385f3fa8bfee1bb93b5e"
	admin = "administrator"
)

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

type env struct {
	srv  *timlocal.Server
	clk  *clock
	base string
	hc   *http.Client
}

func newEnv(t testing.TB, mod func(*timlocal.Config)) *env {
	t.Helper()
	clk := &clock{t: time.Now()}
	cfg := timlocal.Config{SDKAppID: appID, SecretKey: key, Admin: admin, Clock: clk.Now}
	if mod != nil {
		mod(&cfg)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	srv := timlocal.New(cfg)
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	t.Cleanup(func() { srv.SetFaults(timlocal.Faults{}) })
	hc := &http.Client{Transport: &http.Transport{}}
	t.Cleanup(hc.CloseIdleConnections)
	return &env{srv: srv, clk: clk, base: hs.URL, hc: hc}
}

func sig(t testing.TB, app int, k, user string, ttl int) string {
	t.Helper()
	s, err := tencentyun.GenUserSig(app, k, user, ttl)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// query returns the five parameters of a valid call.
func (e *env) query(t testing.TB) url.Values {
	return url.Values{
		"sdkappid":    {strconv.Itoa(appID)},
		"identifier":  {admin},
		"usersig":     {sig(t, appID, key, admin, 86400)},
		"random":      {"12345"},
		"contenttype": {"json"},
	}
}

type answer struct {
	ActionStatus string
	ErrorCode    int
	ErrorInfo    string
	RequestID    string `json:"RequestId"`
	raw          map[string]any
}

// do sends one raw request and decodes the envelope, requiring HTTP 200.
func (e *env) do(t testing.TB, method, path string, q url.Values, body string) answer {
	t.Helper()
	req, err := http.NewRequest(method, e.base+path+"?"+q.Encode(), strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := e.hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s %s: HTTP %d %s", method, path, resp.StatusCode, data)
	}
	var a answer
	if err := json.Unmarshal(data, &a); err != nil {
		t.Fatalf("%s: %v", data, err)
	}
	_ = json.Unmarshal(data, &a.raw)
	if a.RequestID == "" {
		t.Fatalf("answer without RequestId: %s", data)
	}
	if (a.ErrorCode == 0) != (a.ActionStatus == "OK") {
		t.Fatalf("inconsistent envelope: %s", data)
	}
	return a
}

// call makes a valid, signed group call.
func (e *env) call(t testing.TB, command, body string) answer {
	t.Helper()
	return e.do(t, http.MethodPost, "/v4/group_open_http_svc/"+command, e.query(t), body)
}

func (e *env) mustOK(t testing.TB, command, body string) answer {
	t.Helper()
	a := e.call(t, command, body)
	if a.ErrorCode != 0 {
		t.Fatalf("%s %s: %d %s", command, body, a.ErrorCode, a.ErrorInfo)
	}
	return a
}

func (e *env) createRoom(t testing.TB, id string) {
	t.Helper()
	e.mustOK(t, "create_group", `{"Type":"AVChatRoom","GroupId":"`+id+`","Name":"room"}`)
}

func msg(group string, random int, priority, data string) string {
	b, _ := json.Marshal(map[string]any{
		"GroupId": group, "Random": random, "MsgPriority": priority,
		"MsgBody": []any{map[string]any{"MsgType": "TIMCustomElem", "MsgContent": map[string]any{"Data": data, "Desc": "d"}}},
	})
	return string(b)
}

func TestRequestChecks(t *testing.T) {
	e := newEnv(t, nil)
	set := func(k, v string) func(url.Values) { return func(q url.Values) { q.Set(k, v) } }
	del := func(k string) func(url.Values) { return func(q url.Values) { q.Del(k) } }
	tests := []struct {
		name   string
		method string
		path   string
		query  func(url.Values)
		body   string
		code   int
	}{
		{"valid", "", "", nil, "", 0},
		{"GET", http.MethodGet, "", nil, "", 60002},
		{"missing sdkappid", "", "", del("sdkappid"), "", 60012},
		{"non-numeric sdkappid", "", "", set("sdkappid", "abc"), "", 60006},
		{"missing identifier", "", "", del("identifier"), "", 60002},
		{"missing usersig", "", "", del("usersig"), "", 60002},
		{"missing random", "", "", del("random"), "", 60002},
		{"random over uint32", "", "", set("random", "4294967296"), "", 60002},
		{"contenttype", "", "", set("contenttype", "xml"), "", 60002},
		{"unknown sdkappid", "", "", set("sdkappid", "1400000002"), "", 70020},
		{"garbage usersig", "", "", set("usersig", "not-a-sig"), "", 70003},
		{"truncated usersig", "", "", func(q url.Values) { q.Set("usersig", q.Get("usersig")[:40]) }, "", 70003},
		{"wrong key", "", "", func(q url.Values) { q.Set("usersig", sig(t, appID, "other", admin, 86400)) }, "", 70009},
		{"sig for another identifier", "", "", func(q url.Values) { q.Set("usersig", sig(t, appID, key, "bob", 86400)) }, "", 70013},
		{"sig for another sdkappid", "", "", func(q url.Values) { q.Set("usersig", sig(t, appID+1, key, admin, 86400)) }, "", 70014},
		{"identifier not admin", "", "", func(q url.Values) {
			q.Set("identifier", "bob")
			q.Set("usersig", sig(t, appID, key, "bob", 86400))
		}, "", 60010},
		{"unknown command", "", "/v4/group_open_http_svc/no_such_command", nil, "", 10003},
		{"unknown service", "", "/v4/no_such_svc/create_group", nil, "", 60009},
		{"extra path segment", "", "/v4/group_open_http_svc/create_group/x", nil, "", 60009},
		{"empty body", "", "", nil, " ", 60003},
		{"invalid json", "", "", nil, `{"Type":`, 60003},
		{"json array", "", "", nil, `[]`, 60003},
		{"unknown field", "", "", nil, `{"Type":"AVChatRoom","Name":"n","Bogus":1}`, 10004},
		{"wrong key case", "", "", nil, `{"type":"AVChatRoom","name":"n"}`, 10004},
		{"wrong field type", "", "", nil, `{"Type":"AVChatRoom","Name":5}`, 10004},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q := e.query(t)
			if tt.query != nil {
				tt.query(q)
			}
			method, path, body := tt.method, tt.path, tt.body
			if method == "" {
				method = http.MethodPost
			}
			if path == "" {
				path = "/v4/group_open_http_svc/create_group"
			}
			if body == "" {
				body = `{"Type":"AVChatRoom","Name":"n"}`
			}
			if a := e.do(t, method, path, q, body); a.ErrorCode != tt.code {
				t.Fatalf("code %d (%s), want %d", a.ErrorCode, a.ErrorInfo, tt.code)
			}
		})
	}
}

// TestExpiredSignature: a signature is refused once it expires, even one
// the endpoint verified a moment before and trusts for a while: never past
// the signature's own expiry, as Tencent refuses it from then on.
func TestExpiredSignature(t *testing.T) {
	for _, tc := range []struct {
		name         string
		lifetimeSecs int
		after        time.Duration
	}{
		{"long past its expiry", 3600, 2 * time.Hour},
		{"15 s past its expiry, verified 45 s ago", 30, 45 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, nil)
			q := e.query(t)
			q.Set("usersig", sig(t, appID, key, admin, tc.lifetimeSecs))
			if a := e.do(t, http.MethodPost, "/v4/group_open_http_svc/create_group", q, `{"Type":"AVChatRoom","Name":"n"}`); a.ErrorCode != 0 {
				t.Fatalf("fresh sig refused: %d", a.ErrorCode)
			}
			e.clk.Advance(tc.after)
			if a := e.do(t, http.MethodPost, "/v4/group_open_http_svc/create_group", q, `{"Type":"AVChatRoom","Name":"n"}`); a.ErrorCode != 70001 {
				t.Fatalf("expired sig: %d, want 70001", a.ErrorCode)
			}
		})
	}
}

func TestCreateGroupRules(t *testing.T) {
	e := newEnv(t, nil)
	e.createRoom(t, "room-1")
	tests := []struct {
		name, body string
		code       int
	}{
		{"exists", `{"Type":"AVChatRoom","GroupId":"room-1","Name":"n"}`, 10021},
		{"members in AVChatRoom", `{"Type":"AVChatRoom","GroupId":"room-2","Name":"n","MemberList":[{"Member_Account":"a"}]}`, 10007},
		{"bad type", `{"Type":"avchatroom","GroupId":"room-2","Name":"n"}`, 10004},
		{"no name", `{"Type":"AVChatRoom","GroupId":"room-2"}`, 10004},
		{"long name", `{"Type":"AVChatRoom","GroupId":"room-2","Name":"` + strings.Repeat("n", 31) + `"}`, 10004},
		{"reserved prefix", `{"Type":"AVChatRoom","GroupId":"@TGS#abc","Name":"n"}`, 10015},
		{"long id", `{"Type":"AVChatRoom","GroupId":"` + strings.Repeat("r", 49) + `","Name":"n"}`, 10015},
		{"non-ascii id", `{"Type":"AVChatRoom","GroupId":"房间","Name":"n"}`, 10015},
	}
	for _, tt := range tests {
		if a := e.call(t, "create_group", tt.body); a.ErrorCode != tt.code {
			t.Errorf("%s: code %d (%s), want %d", tt.name, a.ErrorCode, a.ErrorInfo, tt.code)
		}
	}
	a := e.mustOK(t, "create_group", `{"Type":"Public","Name":"auto","Owner_Account":"leckie"}`)
	id, _ := a.raw["GroupId"].(string)
	if !strings.HasPrefix(id, "@TGS#") {
		t.Fatalf("auto group id %q", id)
	}
	if got := e.srv.Groups(); len(got) != 2 {
		t.Fatalf("groups %v", got)
	}
	e.mustOK(t, "destroy_group", `{"GroupId":"room-1"}`)
	if a := e.call(t, "destroy_group", `{"GroupId":"room-1"}`); a.ErrorCode != 10010 {
		t.Fatalf("destroy missing: %d, want 10010", a.ErrorCode)
	}
}

func TestSendGroupMsgRules(t *testing.T) {
	e := newEnv(t, nil)
	e.createRoom(t, "room-1")
	tests := []struct {
		name, body string
		code       int
	}{
		{"missing group", msg("room-9", 1, "High", "{}"), 10010},
		{"invalid group id", msg(strings.Repeat("g", 60), 1, "High", "{}"), 10015},
		{"lower-case priority", msg("room-1", 1, "high", "{}"), 10004},
		{"Lowest priority", msg("room-1", 1, "Lowest", "{}"), 10004},
		{"no random", `{"GroupId":"room-1","MsgBody":[{"MsgType":"TIMCustomElem","MsgContent":{"Data":"x"}}]}`, 10004},
		{"negative random", `{"GroupId":"room-1","Random":-1,"MsgBody":[{"MsgType":"TIMCustomElem","MsgContent":{"Data":"x"}}]}`, 10004},
		{"no body", `{"GroupId":"room-1","Random":1,"MsgBody":[]}`, 10004},
		{"two custom elements", `{"GroupId":"room-1","Random":1,"MsgBody":[{"MsgType":"TIMCustomElem","MsgContent":{"Data":"x"}},{"MsgType":"TIMCustomElem","MsgContent":{"Data":"y"}}]}`, 10004},
		{"unknown content key", `{"GroupId":"room-1","Random":1,"MsgBody":[{"MsgType":"TIMCustomElem","MsgContent":{"data":"x"}}]}`, 10004},
		{"text without Text", `{"GroupId":"room-1","Random":1,"MsgBody":[{"MsgType":"TIMTextElem","MsgContent":{}}]}`, 10004},
		{"text with null Text", `{"GroupId":"room-1","Random":1,"MsgBody":[{"MsgType":"TIMTextElem","MsgContent":{"Text":null}}]}`, 10004},
		{"text with a number", `{"GroupId":"room-1","Random":1,"MsgBody":[{"MsgType":"TIMTextElem","MsgContent":{"Text":5}}]}`, 10004},
		{"Data not a string", `{"GroupId":"room-1","Random":1,"MsgBody":[{"MsgType":"TIMCustomElem","MsgContent":{"Data":{"a":1}}}]}`, 10004},
		{"MsgType not a string", `{"GroupId":"room-1","Random":1,"MsgBody":[{"MsgType":1,"MsgContent":{"Data":"x"}}]}`, 10004},
		{"element not an object", `{"GroupId":"room-1","Random":1,"MsgBody":["x"]}`, 10004},
		{"content not an object", `{"GroupId":"room-1","Random":1,"MsgBody":[{"MsgType":"TIMCustomElem","MsgContent":"x"}]}`, 10004},
		{"unknown element key", `{"GroupId":"room-1","Random":1,"MsgBody":[{"MsgType":"TIMCustomElem","msgContent":{"Data":"x"}}]}`, 10004},
		{"unsupported element", `{"GroupId":"room-1","Random":1,"MsgBody":[{"MsgType":"TIMFaceElem","MsgContent":{"Index":1}}]}`, 10004},
		{"too large", msg("room-1", 1, "High", strings.Repeat("x", 8192)), 80002},
	}
	for _, tt := range tests {
		if a := e.call(t, "send_group_msg", tt.body); a.ErrorCode != tt.code {
			t.Errorf("%s: code %d (%s), want %d", tt.name, a.ErrorCode, a.ErrorInfo, tt.code)
		}
	}
	if n := len(e.srv.Messages("room-1")); n != 0 {
		t.Fatalf("refused sends stored %d messages", n)
	}

	// Text plus custom, default priority, documented optional fields accepted.
	a := e.mustOK(t, "send_group_msg", `{"GroupId":"room-1","Random":7,"From_Account":"leckie","CloudCustomData":"c",
		"MsgBody":[{"MsgType":"TIMTextElem","MsgContent":{"Text":"red packet"}},{"MsgType":"TIMCustomElem","MsgContent":{"Data":"{\"a\":1}","Desc":"gift","Ext":"e","Sound":"s"}}]}`)
	if a.raw["MsgSeq"] != 1.0 || a.raw["MsgTime"] != float64(e.clk.Now().Unix()) {
		t.Fatalf("answer %v", a.raw)
	}
	// The same Random within five minutes is a duplicate: same answer, nothing stored.
	e.clk.Advance(4 * time.Minute)
	dup := e.mustOK(t, "send_group_msg", msg("room-1", 7, "High", "other"))
	if dup.raw["MsgSeq"] != 1.0 {
		t.Fatalf("duplicate answered %v", dup.raw)
	}
	msgs := e.srv.Messages("room-1")
	if len(msgs) != 1 || msgs[0].Priority != "Normal" || msgs[0].Data != `{"a":1}` || msgs[0].Desc != "gift" ||
		len(msgs[0].Elements) != 2 || msgs[0].Elements[0].Text != "red packet" || msgs[0].From != "leckie" {
		t.Fatalf("messages %+v", msgs)
	}
	if st := e.srv.Stats("room-1"); st.Duplicates != 1 || st.Delivered != 1 {
		t.Fatalf("stats %+v", st)
	}
	// After five minutes the Random is free again.
	e.clk.Advance(time.Minute)
	if a := e.mustOK(t, "send_group_msg", msg("room-1", 7, "High", "again")); a.raw["MsgSeq"] != 2.0 {
		t.Fatalf("reused Random after the window: %v", a.raw)
	}
}

func TestFrequencyControl(t *testing.T) {
	type send struct {
		priority string
		n        int
	}
	tests := []struct {
		name      string
		order     []send
		delivered map[string]int
	}{
		{"low flood then high", []send{{"Low", 45}, {"High", 5}}, map[string]int{"Low": 30, "High": 5}},
		{"high first", []send{{"High", 5}, {"Low", 45}}, map[string]int{"High": 5, "Low": 25}},
		{"normal flood then high", []send{{"Normal", 45}, {"High", 5}}, map[string]int{"Normal": 36, "High": 4}},
		{"high only", []send{{"High", 50}}, map[string]int{"High": 40}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, nil)
			e.createRoom(t, "room-1")
			random := 0
			answered := map[string]int{}
			for _, s := range tt.order {
				for range s.n {
					random++
					a := e.mustOK(t, "send_group_msg", msg("room-1", random, s.priority, "{}"))
					switch a.raw["MsgDropReason"] {
					case nil:
						answered[s.priority]++
					case "MsgFreqCtrl":
					default:
						t.Fatalf("MsgDropReason %v", a.raw["MsgDropReason"])
					}
				}
			}
			stored := map[string]int{}
			for _, m := range e.srv.Messages("room-1") {
				if !m.Dropped {
					stored[m.Priority]++
				}
			}
			for p, n := range tt.delivered {
				if answered[p] != n || stored[p] != n {
					t.Fatalf("%s delivered: answered %d, stored %d, want %d", p, answered[p], stored[p], n)
				}
			}
			st := e.srv.Stats("room-1")
			if st.MaxPerSecond > 40 || st.Delivered+st.Dropped != uint64(random) || st.MaxOfferedPerSecond != random {
				t.Fatalf("stats %+v after %d sends", st, random)
			}
		})
	}
}

func TestSlidingWindow(t *testing.T) {
	e := newEnv(t, func(c *timlocal.Config) { c.GroupRate = 4 })
	e.createRoom(t, "room-1")
	random := 0
	send := func() bool {
		random++
		return e.mustOK(t, "send_group_msg", msg("room-1", random, "High", "{}")).raw["MsgDropReason"] == nil
	}
	for i := range 2 {
		if !send() {
			t.Fatalf("send %d dropped", i)
		}
	}
	three := func() string { return fmt.Sprint(send(), send(), send()) }
	e.clk.Advance(600 * time.Millisecond)
	if got := three(); got != "true true false" {
		t.Fatalf("delivered %s; want two more delivered, the fifth in the second dropped", got)
	}
	// The first two leave the window exactly one second after they arrived.
	e.clk.Advance(400 * time.Millisecond)
	if got := three(); got != "true true false" {
		t.Fatalf("delivered %s; want two slots freed by the messages that left the window", got)
	}
	if st := e.srv.Stats("room-1"); st.MaxPerSecond != 4 || st.Dropped != 2 {
		t.Fatalf("stats %+v", st)
	}
}

func TestAPIRateLimit(t *testing.T) {
	e := newEnv(t, func(c *timlocal.Config) { c.APIRate = 3 })
	for i := range 3 {
		e.mustOK(t, "create_group", fmt.Sprintf(`{"Type":"AVChatRoom","GroupId":"r%d","Name":"n"}`, i))
	}
	if a := e.call(t, "create_group", `{"Type":"AVChatRoom","GroupId":"r9","Name":"n"}`); a.ErrorCode != 60007 {
		t.Fatalf("over the per-API rate: %d, want 60007", a.ErrorCode)
	}
	// Budgets are per command.
	e.mustOK(t, "destroy_group", `{"GroupId":"r0"}`)
	// The window slides: a call is accepted once the one a second before it has left the window.
	e.clk.Advance(999 * time.Millisecond)
	if a := e.call(t, "create_group", `{"Type":"AVChatRoom","GroupId":"r9","Name":"n"}`); a.ErrorCode != 60007 {
		t.Fatalf("within the same second: %d, want 60007", a.ErrorCode)
	}
	e.clk.Advance(time.Millisecond)
	e.mustOK(t, "create_group", `{"Type":"AVChatRoom","GroupId":"r9","Name":"n"}`)
	if st := e.srv.CallStats("create_group"); st.Accepted != 4 || st.Refused != 2 || st.MaxPerSecond != 3 {
		t.Fatalf("create_group stats %+v", st)
	}
}

func TestMuteAndBan(t *testing.T) {
	e := newEnv(t, nil)
	e.createRoom(t, "room-1")
	e.mustOK(t, "forbid_send_msg", `{"GroupId":"room-1","Members_Account":["peter","leckie"],"ShutUpTime":60}`)
	a := e.mustOK(t, "get_group_shutted_uin", `{"GroupId":"room-1"}`)
	until := float64(e.clk.Now().Add(time.Minute).Unix())
	want := []any{
		map[string]any{"Member_Account": "leckie", "ShuttedUntil": until},
		map[string]any{"Member_Account": "peter", "ShuttedUntil": until},
	}
	if fmt.Sprint(a.raw["ShuttedUinList"]) != fmt.Sprint(want) {
		t.Fatalf("ShuttedUinList %v, want %v", a.raw["ShuttedUinList"], want)
	}
	if a := e.call(t, "send_group_msg", `{"GroupId":"room-1","Random":1,"From_Account":"peter","MsgBody":[{"MsgType":"TIMTextElem","MsgContent":{"Text":"hi"}}]}`); a.ErrorCode != 10017 {
		t.Fatalf("muted sender: %d, want 10017", a.ErrorCode)
	}
	e.mustOK(t, "forbid_send_msg", `{"GroupId":"room-1","Members_Account":["peter"],"ShutUpTime":0}`)
	if m := e.srv.Muted("room-1"); len(m) != 1 || m["leckie"].IsZero() {
		t.Fatalf("muted %v, want leckie only", m)
	}
	e.clk.Advance(time.Minute)
	if m := e.srv.Muted("room-1"); len(m) != 0 {
		t.Fatalf("mute did not end: %v", m)
	}

	many := make([]string, 501)
	for i := range many {
		many[i] = "u" + strconv.Itoa(i)
	}
	body, _ := json.Marshal(map[string]any{"GroupId": "room-1", "Members_Account": many, "ShutUpTime": 60})
	if a := e.call(t, "forbid_send_msg", string(body)); a.ErrorCode != 10004 {
		t.Fatalf("501 accounts: %d, want 10004", a.ErrorCode)
	}
	body, _ = json.Marshal(map[string]any{"GroupId": "room-1", "Members_Account": many[:21], "Duration": 60})
	if a := e.call(t, "ban_group_member", string(body)); a.ErrorCode != 10004 {
		t.Fatalf("21 accounts: %d, want 10004", a.ErrorCode)
	}
	if a := e.call(t, "ban_group_member", `{"GroupId":"room-1","Members_Account":["a"],"Duration":0}`); a.ErrorCode != 10004 {
		t.Fatalf("zero duration: %d, want 10004", a.ErrorCode)
	}
	if a := e.call(t, "forbid_send_msg", `{"GroupId":"room-1","Members_Account":["a"]}`); a.ErrorCode != 10004 {
		t.Fatalf("no ShutUpTime: %d, want 10004", a.ErrorCode)
	}

	e.mustOK(t, "ban_group_member", `{"GroupId":"room-1","Members_Account":["brennanli3","brennanli12","x"],"Duration":3600,"Description":"spam"}`)
	e.mustOK(t, "unban_group_member", `{"GroupId":"room-1","Members_Account":["x"]}`)
	a = e.mustOK(t, "get_group_ban_member", `{"GroupId":"room-1","Offset":0,"Limit":1}`)
	list, _ := a.raw["BannedAccountList"].([]any)
	if len(list) != 1 || a.raw["NextOffset"] != 1.0 {
		t.Fatalf("first page %v", a.raw)
	}
	a = e.mustOK(t, "get_group_ban_member", `{"GroupId":"room-1","Offset":1,"Limit":10}`)
	if list, _ := a.raw["BannedAccountList"].([]any); len(list) != 1 || a.raw["NextOffset"] != 0.0 {
		t.Fatalf("last page %v", a.raw)
	}
	if b := e.srv.Banned("room-1"); len(b) != 2 || !b["brennanli3"].Equal(e.clk.Now().Add(time.Hour)) {
		t.Fatalf("banned %v", b)
	}
	if a := e.call(t, "ban_group_member", `{"GroupId":"room-9","Members_Account":["a"],"Duration":1}`); a.ErrorCode != 10010 {
		t.Fatalf("ban in missing group: %d, want 10010", a.ErrorCode)
	}
}

func TestFaults(t *testing.T) {
	e := newEnv(t, nil)
	post := func(body string) int {
		resp, err := e.hc.Post(e.base+"/local/faults", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := post(`{"fail_next":2,"latency":"1ms","bogus":true}`); code != http.StatusBadRequest {
		t.Fatalf("unknown fault key: HTTP %d", code)
	}
	if code := post(`{"fail_next":-1}`); code != http.StatusBadRequest {
		t.Fatalf("negative count: HTTP %d", code)
	}
	if code := post(`{"fail_next":2,"latency":"1ms"}`); code != http.StatusOK {
		t.Fatalf("set faults: HTTP %d", code)
	}
	if f := e.srv.CurrentFaults(); f.FailNext != 2 || f.Latency != time.Millisecond {
		t.Fatalf("faults %+v", f)
	}
	for i := range 2 {
		if a := e.call(t, "create_group", `{"Type":"AVChatRoom","GroupId":"room-1","Name":"n"}`); a.ErrorCode != 10002 {
			t.Fatalf("failure %d: %d, want 10002", i, a.ErrorCode)
		}
	}
	if len(e.srv.Groups()) != 0 {
		t.Fatal("a failed-before-apply call took effect")
	}
	e.createRoom(t, "room-1")

	e.srv.SetFaults(timlocal.Faults{FailNext: 1, FailAfterApply: true})
	if a := e.call(t, "create_group", `{"Type":"AVChatRoom","GroupId":"room-2","Name":"n"}`); a.ErrorCode != 10002 {
		t.Fatalf("after-apply failure: %d", a.ErrorCode)
	}
	if len(e.srv.Groups()) != 2 {
		t.Fatal("the after-apply failure did not take effect")
	}

	e.srv.SetFaults(timlocal.Faults{RateLimit: true})
	if a := e.call(t, "destroy_group", `{"GroupId":"room-1"}`); a.ErrorCode != 60007 {
		t.Fatalf("rate-limit fault: %d", a.ErrorCode)
	}
	e.srv.SetFaults(timlocal.Faults{ExpireSigs: true})
	if a := e.call(t, "destroy_group", `{"GroupId":"room-1"}`); a.ErrorCode != 70001 {
		t.Fatalf("expire fault: %d", a.ErrorCode)
	}

	e.srv.SetFaults(timlocal.Faults{BadGatewayNext: 1})
	resp, err := e.hc.Post(e.base+"/v4/group_open_http_svc/destroy_group?"+e.query(t).Encode(), "application/json", strings.NewReader(`{"GroupId":"room-1"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadGateway {
		t.Fatalf("bad gateway fault: HTTP %d", resp.StatusCode)
	}
	e.mustOK(t, "destroy_group", `{"GroupId":"room-1"}`)
}

func TestHangEndsWithTheRequest(t *testing.T) {
	e := newEnv(t, nil)
	e.srv.SetFaults(timlocal.Faults{Hang: true})
	post := func(ctx context.Context, body string, done chan<- error) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost,
			e.base+"/v4/group_open_http_svc/create_group?"+e.query(t).Encode(), strings.NewReader(body))
		resp, err := e.hc.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		done <- err
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go post(ctx, `{"Type":"AVChatRoom","Name":"n"}`, done)
	poll.Until(t, 5*time.Second, "the request to hang", poll.Bool(func() bool { return e.srv.Hanging() == 1 }))
	select {
	case err := <-done:
		t.Fatalf("hung request answered: %v", err)
	default:
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	poll.Until(t, 5*time.Second, "the hung handler to end", poll.Bool(func() bool { return e.srv.Hanging() == 0 }))

	// Setting the faults again frees a hung request, which is then answered normally.
	go post(context.Background(), `{"Type":"AVChatRoom","GroupId":"room-1","Name":"n"}`, done)
	poll.Until(t, 5*time.Second, "the request to hang", poll.Bool(func() bool { return e.srv.Hanging() == 1 }))
	e.srv.SetFaults(timlocal.Faults{})
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if g := e.srv.Groups(); len(g) != 1 {
		t.Fatalf("groups %v", g)
	}
}

func TestLocalViews(t *testing.T) {
	e := newEnv(t, nil)
	e.createRoom(t, "room-1")
	e.mustOK(t, "create_group", `{"Type":"AVChatRoom","GroupId":"a#b/c","Name":"odd"}`)
	for i := 1; i <= 3; i++ {
		e.mustOK(t, "send_group_msg", msg("room-1", i, "High", fmt.Sprintf(`{"n":%d,"html":"<script>x</script>"}`, i)))
	}
	e.mustOK(t, "send_group_msg", msg("a#b/c", 1, "Low", "odd"))

	get := func(path string) (int, []byte) {
		resp, err := e.hc.Get(e.base + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}

	code, page := get("/local/")
	if code != 200 || !bytes.Contains(page, []byte("room-1")) || !bytes.Contains(page, []byte("a#b/c")) {
		t.Fatalf("page: HTTP %d\n%s", code, page)
	}
	if bytes.Contains(page, []byte("<script>x")) || !bytes.Contains(page, []byte("&lt;script&gt;x")) {
		t.Fatal("message data not escaped on the page")
	}
	if !bytes.Contains(page, []byte(`href="groups/a%23b%2Fc/messages"`)) {
		t.Fatalf("group link not path-escaped:\n%s", page)
	}

	var view struct {
		Group    string
		LastSeq  uint64 `json:"last_seq"`
		Messages []timlocal.Message
	}
	code, body := get("/local/groups/room-1/messages?since=1")
	if err := json.Unmarshal(body, &view); code != 200 || err != nil {
		t.Fatalf("messages: HTTP %d %s", code, body)
	}
	if view.LastSeq != 3 || len(view.Messages) != 2 || view.Messages[0].MsgSeq != 2 || view.Messages[1].Data != `{"n":3,"html":"<script>x</script>"}` {
		t.Fatalf("messages since 1: %+v", view)
	}
	code, body = get("/local/groups/" + url.PathEscape("a#b/c") + "/messages")
	if err := json.Unmarshal(body, &view); code != 200 || err != nil || len(view.Messages) != 1 || view.Group != "a#b/c" {
		t.Fatalf("escaped group id: HTTP %d %s", code, body)
	}
	if code, _ := get("/local/groups/nope/messages"); code != http.StatusNotFound {
		t.Fatalf("missing group: HTTP %d", code)
	}
	if code, _ := get("/local/groups/room-1/messages?since=x"); code != http.StatusBadRequest {
		t.Fatalf("bad since: HTTP %d", code)
	}

	var stats struct {
		Groups map[string]timlocal.GroupStats
		Calls  map[string]uint64
		Faults timlocal.Faults
	}
	code, body = get("/local/stats")
	if err := json.Unmarshal(body, &stats); code != 200 || err != nil {
		t.Fatalf("stats: HTTP %d %s", code, body)
	}
	if stats.Groups["room-1"].Delivered != 3 || stats.Groups["room-1"].MaxPerSecond != 3 || stats.Calls["send_group_msg"] != 4 {
		t.Fatalf("stats %+v", stats)
	}
}

func TestHistoryIsBounded(t *testing.T) {
	e := newEnv(t, func(c *timlocal.Config) { c.GroupRate = 10000; c.APIRate = 10000 })
	e.createRoom(t, "room-1")
	for i := 1; i <= 510; i++ {
		e.mustOK(t, "send_group_msg", msg("room-1", i, "Normal", "{}"))
	}
	msgs := e.srv.Messages("room-1")
	if len(msgs) != 500 || msgs[0].MsgSeq != 11 || msgs[499].MsgSeq != 510 {
		t.Fatalf("%d kept, first %d", len(msgs), msgs[0].MsgSeq)
	}
}

func TestConcurrentCalls(t *testing.T) {
	e := newEnv(t, func(c *timlocal.Config) { c.GroupRate = 10000; c.APIRate = 10000 })
	e.createRoom(t, "room-1")
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 10 {
				a := e.call(t, "send_group_msg", msg("room-1", g*100+i, "High", "{}"))
				if a.ErrorCode != 0 {
					t.Error(a.ErrorInfo)
				}
				_ = e.srv.Stats("room-1")
				_ = e.srv.Messages("room-1")
			}
		})
	}
	wg.Wait()
	msgs := e.srv.Messages("room-1")
	seen := map[uint64]bool{}
	for _, m := range msgs {
		seen[m.MsgSeq] = true
	}
	if len(msgs) != 80 || len(seen) != 80 {
		t.Fatalf("%d messages, %d distinct seqs; want 80", len(msgs), len(seen))
	}
}

func TestConfigValidate(t *testing.T) {
	err := timlocal.Config{GroupRate: -1}.Validate()
	joined, ok := err.(interface{ Unwrap() []error })
	if !ok || len(joined.Unwrap()) != 4 {
		t.Fatalf("Validate = %v, want 4 problems", err)
	}
}

// TestModifyGroupBaseInfo: the name and mute-all change, mute-all stops
// members (not the admin), and bad input is refused with 10004 and changes
// nothing.
func TestModifyGroupBaseInfo(t *testing.T) {
	e := newEnv(t, nil)
	e.createRoom(t, "room-1")
	e.mustOK(t, "modify_group_base_info", `{"GroupId":"room-1","Name":"夜谈","ShutUpAllMember":"On"}`)
	if g, _ := e.srv.Group("room-1"); g.Name != "夜谈" || !g.ShutUpAll {
		t.Fatalf("group %+v after the change", g)
	}
	text := `"MsgBody":[{"MsgType":"TIMTextElem","MsgContent":{"Text":"hi"}}]`
	if a := e.call(t, "send_group_msg", `{"GroupId":"room-1","Random":1,"From_Account":"peter",`+text+`}`); a.ErrorCode != 10017 {
		t.Fatalf("member with all muted: %d, want 10017", a.ErrorCode)
	}
	e.mustOK(t, "send_group_msg", `{"GroupId":"room-1","Random":2,`+text+`}`)
	for _, body := range []string{
		`{"GroupId":"room-1","Name":""}`,
		`{"GroupId":"room-1","Name":"` + strings.Repeat("x", 31) + `"}`,
		`{"GroupId":"room-1","ShutUpAllMember":"on"}`,
		`{"GroupId":"room-1","MuteAllMember":"Off"}`,
	} {
		if a := e.call(t, "modify_group_base_info", body); a.ErrorCode != 10004 {
			t.Fatalf("%s: %d, want 10004", body, a.ErrorCode)
		}
	}
	if g, _ := e.srv.Group("room-1"); g.Name != "夜谈" || !g.ShutUpAll {
		t.Fatalf("refused changes changed the group: %+v", g)
	}
	if a := e.call(t, "modify_group_base_info", `{"GroupId":"room-9","Name":"x"}`); a.ErrorCode != 10010 {
		t.Fatalf("missing group: %d, want 10010", a.ErrorCode)
	}
	e.mustOK(t, "modify_group_base_info", `{"GroupId":"room-1","ShutUpAllMember":"Off"}`)
	e.mustOK(t, "send_group_msg", `{"GroupId":"room-1","Random":3,"From_Account":"peter",`+text+`}`)
}

// TestPersist: groups, their names, mute-all, mutes and bans survive a new
// server on the same state file (a restarted service); a damaged file is
// an error and loads nothing.
func TestPersist(t *testing.T) {
	path := filepath.Join(t.TempDir(), "im", "groups.json")
	e := newEnv(t, nil)
	if err := e.srv.Persist(path); err != nil {
		t.Fatal(err)
	}
	e.createRoom(t, "room-1")
	e.createRoom(t, "room-2")
	e.mustOK(t, "modify_group_base_info", `{"GroupId":"room-1","Name":"renamed","ShutUpAllMember":"On"}`)
	e.mustOK(t, "forbid_send_msg", `{"GroupId":"room-1","Members_Account":["peter"],"ShutUpTime":600}`)
	e.mustOK(t, "ban_group_member", `{"GroupId":"room-1","Members_Account":["x"],"Duration":3600}`)
	e.mustOK(t, "destroy_group", `{"GroupId":"room-2"}`)
	poll.Until(t, 10*time.Second, "the changes written within saveDelay", func() error {
		data, err := os.ReadFile(path)
		if err != nil || !bytes.Contains(data, []byte(`"x"`)) || bytes.Contains(data, []byte("room-2")) {
			return fmt.Errorf("state file %s, %v", data, err)
		}
		return nil
	})
	e.createRoom(t, "room-3")
	if err := e.srv.Flush(); err != nil { // what a stopping service does
		t.Fatal(err)
	}

	again := timlocal.New(timlocal.Config{SDKAppID: appID, SecretKey: key, Admin: admin, Clock: e.clk.Now})
	if err := again.Persist(path); err != nil {
		t.Fatal(err)
	}
	if got := again.Groups(); len(got) != 2 || got[0] != "room-1" || got[1] != "room-3" {
		t.Fatalf("groups after restart %v, want [room-1 room-3]", got)
	}
	if g, _ := again.Group("room-1"); g.Name != "renamed" || !g.ShutUpAll || g.Type != "AVChatRoom" {
		t.Fatalf("group after restart %+v", g)
	}
	if _, ok := again.Muted("room-1")["peter"]; !ok {
		t.Fatal("mute lost in the restart")
	}
	if _, ok := again.Banned("room-1")["x"]; !ok {
		t.Fatal("ban lost in the restart")
	}

	if err := os.WriteFile(path, []byte(`[{"id":`), 0o600); err != nil {
		t.Fatal(err)
	}
	broken := timlocal.New(timlocal.Config{SDKAppID: appID, SecretKey: key, Admin: admin})
	if err := broken.Persist(path); err == nil || len(broken.Groups()) != 0 {
		t.Fatalf("damaged state file: err %v, groups %v", err, broken.Groups())
	}
}

// TestUnknownCommandsShareOneCounter: made-up command names are counted
// under one key, so they cannot grow the endpoint's memory.
func TestUnknownCommandsShareOneCounter(t *testing.T) {
	e := newEnv(t, nil)
	for i := range 3 {
		e.do(t, http.MethodPost, fmt.Sprintf("/v4/group_open_http_svc/made_up_%d_%s", i, strings.Repeat("x", 1000)), e.query(t), `{}`)
	}
	e.do(t, http.MethodPost, "/v4/group_open_http_svc/create_group", e.query(t), `{"Type":"AVChatRoom","Name":"n"}`)
	if n := e.srv.Calls("(unknown)"); n != 3 {
		t.Errorf("unknown calls %d, want 3", n)
	}
	if n := e.srv.Calls("made_up_0_" + strings.Repeat("x", 1000)); n != 0 {
		t.Errorf("a made-up command has a counter of its own: %d", n)
	}
	if n := e.srv.Calls("create_group"); n != 1 {
		t.Errorf("create_group calls %d, want 1", n)
	}
}

// BenchmarkSendGroupMsg measures the endpoint's own work for the lane's usual message: one custom element
// whose Data is a Batch of about 7 KB, sent to a group that takes it.
func BenchmarkSendGroupMsg(b *testing.B) {
	e := newEnv(b, func(c *timlocal.Config) { c.GroupRate = 1 << 30; c.APIRate = 1 << 30 })
	e.createRoom(b, "room-1")
	events := make([]map[string]any, 0, 48)
	for i := range cap(events) {
		events = append(events, map[string]any{"type": "MemberJoined", "room_version": 1000 + i,
			"user": map[string]any{"user_id": "user-" + strconv.Itoa(i), "nickname": "Nick \"" + strconv.Itoa(i) + "\"", "avatar": "https://cdn.example.com/a/" + strconv.Itoa(i) + ".png"}})
	}
	data, err := json.Marshal(map[string]any{"type": "Batch", "events": events})
	if err != nil {
		b.Fatal(err)
	}
	target := "/v4/group_open_http_svc/send_group_msg?" + e.query(b).Encode()
	// Each call has a Random of its own, or it would be answered as a duplicate.
	head, tail, found := strings.Cut(msg("room-1", 1234567, "Normal", string(data)), "1234567")
	if !found {
		b.Fatal("no Random in the message")
	}
	random := 0
	b.ReportAllocs()
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		random++
		e.clk.Advance(time.Millisecond) // the service's clock moves; a verified signature is then trusted again
		body := head + strconv.Itoa(random) + tail
		w := httptest.NewRecorder()
		e.srv.ServeHTTP(w, httptest.NewRequest(http.MethodPost, target, strings.NewReader(body)))
		if w.Code != http.StatusOK || !strings.Contains(w.Body.String(), `"ErrorCode":0`) {
			b.Fatalf("answer %d %s", w.Code, w.Body)
		}
	}
}
