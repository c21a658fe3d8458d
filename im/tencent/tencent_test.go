package tencent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/tencentyun/tls-sig-api-v2-golang/tencentyun"
	"go.uber.org/goleak"

	"hyapp/room-service/im/timlocal"
	"hyapp/room-service/internal/poll"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	testAppID = 1400000001
	testKey   = "5bd2850fff3ecb11d7c805251c51ee463a25727bddc2385f3fa8bfee1bb93b5e"
	testAdmin = "administrator"
)

// clock is a settable clock for the local endpoint.
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
	srv *timlocal.Server
	clk *clock
	url string
}

// newEnv starts a local Tencent endpoint over real HTTP on a random port.
func newEnv(t *testing.T, mod func(*timlocal.Config)) *env {
	t.Helper()
	clk := &clock{t: time.Now()}
	cfg := timlocal.Config{SDKAppID: testAppID, SecretKey: testKey, Admin: testAdmin, Clock: clk.Now}
	if mod != nil {
		mod(&cfg)
	}
	srv := timlocal.New(cfg)
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	// Frees requests a Hang fault still holds, before the server closes (cleanups run last-in first-out).
	t.Cleanup(func() { srv.SetFaults(timlocal.Faults{}) })
	return &env{srv: srv, clk: clk, url: hs.URL}
}

// client returns a Client for endpoint with millisecond backoffs; mod adjusts the config.
func newClient(t *testing.T, endpoint string, mod func(*Config)) *Client {
	t.Helper()
	cfg := Config{SDKAppID: testAppID, SecretKey: testKey, Admin: testAdmin, Endpoint: endpoint, CallsPerSecond: 100000}
	if mod != nil {
		mod(&cfg)
	}
	c, err := New(cfg, nil)
	if err != nil {
		t.Fatalf("new client: %v", err)
	}
	c.backoff = func(int) time.Duration { return time.Millisecond }
	t.Cleanup(c.Close)
	return c
}

func (e *env) client(t *testing.T, mod func(*Config)) *Client { return newClient(t, e.url, mod) }

func apiCode(t *testing.T, err error) int {
	t.Helper()
	var apiErr *APIError
	if !errors.As(err, &apiErr) {
		t.Fatalf("error %v is not an *APIError", err)
	}
	return apiErr.Code
}

func TestConfigValidate(t *testing.T) {
	valid := Config{SDKAppID: testAppID, SecretKey: testKey, Admin: testAdmin, Endpoint: "https://adminapisgp.im.qcloud.com"}
	if err := valid.Validate(); err != nil {
		t.Fatalf("valid config: %v", err)
	}
	tests := []struct {
		name     string
		mod      func(*Config)
		problems int
	}{
		{"zero", func(c *Config) { *c = Config{} }, 4},
		{"negative numbers", func(c *Config) { c.Timeout, c.CallsPerSecond, c.SigTTL, c.Retries = -1, -1, -1, -1 }, 4},
		{"short sig ttl", func(c *Config) { c.SigTTL = 10 * time.Second }, 1},
		{"long admin", func(c *Config) { c.Admin = strings.Repeat("a", 33) }, 1},
		{"endpoint scheme", func(c *Config) { c.Endpoint = "ftp://adminapisgp.im.qcloud.com" }, 1},
		{"endpoint query", func(c *Config) { c.Endpoint = "https://adminapisgp.im.qcloud.com?x=1" }, 1},
		{"endpoint no host", func(c *Config) { c.Endpoint = "https://" }, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := valid
			tt.mod(&c)
			err := c.Validate()
			if err == nil {
				t.Fatal("Validate accepted an invalid config")
			}
			joined, ok := err.(interface{ Unwrap() []error })
			if !ok || len(joined.Unwrap()) != tt.problems {
				t.Fatalf("Validate reported %v, want %d problems", err, tt.problems)
			}
			if strings.Contains(err.Error(), testKey) {
				t.Fatal("Validate leaked the secret key")
			}
		})
	}
	if s := fmt.Sprintf("%v %+v", valid, valid); strings.Contains(s, testKey) {
		t.Fatalf("formatted config leaks the secret key: %s", s)
	}
	if _, err := New(Config{}, nil); err == nil {
		t.Fatal("New accepted an invalid config")
	}
}

func TestErrorMapping(t *testing.T) {
	tests := []struct {
		code  int
		want  error
		retry bool
	}{
		{70001, ErrSignature, false}, {70003, ErrSignature, false}, {70009, ErrSignature, false},
		{70013, ErrSignature, false}, {70014, ErrSignature, false}, {70020, ErrSignature, false},
		{60010, ErrSignature, false}, {70050, ErrSignature, false},
		{60007, ErrRateLimited, true}, {60011, ErrRateLimited, true}, {60018, ErrRateLimited, true},
		{60019, ErrRateLimited, true}, {10023, ErrRateLimited, true}, {10006, ErrRateLimited, true},
		{10010, ErrGroupNotFound, false}, {10015, ErrGroupNotFound, false},
		{10021, ErrGroupExists, false}, {10025, ErrGroupExists, false},
		{80002, ErrTooLarge, false},
		{10002, ErrTransient, true},
		{10004, ErrInvalid, false}, {10007, ErrInvalid, false}, {60003, ErrInvalid, false},
		{99999, nil, false},
	}
	for _, tt := range tests {
		err := &APIError{Code: tt.code, Command: "send_group_msg"}
		if got := err.Unwrap(); got != tt.want {
			t.Errorf("code %d means %v, want %v", tt.code, got, tt.want)
		}
		if got := retryable(err); got != tt.retry {
			t.Errorf("code %d retryable %v, want %v", tt.code, got, tt.retry)
		}
	}
}

func TestSignatureAcceptedAndRenewed(t *testing.T) {
	e := newEnv(t, nil)
	c := e.client(t, nil)
	cclk := &clock{t: time.Now()}
	c.now = cclk.Now
	ctx := context.Background()

	if err := c.CreateGroup(ctx, "room-1", "Room 1"); err != nil {
		t.Fatalf("create group with a client-signed UserSig: %v", err)
	}
	first := c.sigAt
	cclk.Advance(DefaultSigTTL/2 - time.Minute)
	if err := c.CreateGroup(ctx, "room-1", "Room 1"); err != nil {
		t.Fatal(err)
	}
	if !c.sigAt.Equal(first) {
		t.Fatal("UserSig renewed before half its validity passed")
	}
	cclk.Advance(2 * time.Minute)
	if err := c.DestroyGroup(ctx, "room-1"); err != nil {
		t.Fatal(err)
	}
	if c.sigAt.Equal(first) {
		t.Fatal("UserSig not renewed after half its validity passed")
	}
	// The renewed signature verifies as the official library issues it.
	if err := tencentyun.VerifyUserSig(testAppID, testKey, testAdmin, c.sig, time.Now()); err != nil {
		t.Fatalf("renewed UserSig does not verify: %v", err)
	}
}

func TestSignatureRejected(t *testing.T) {
	tests := []struct {
		name  string
		mod   func(*Config)
		setup func(*env)
		code  int
	}{
		{"wrong key", func(c *Config) { c.SecretKey = "another-apps-key" }, nil, 70009},
		{"identifier not admin", func(c *Config) { c.Admin = "mallory" }, nil, 60010},
		{"wrong sdkappid", func(c *Config) { c.SDKAppID = testAppID + 1 }, nil, 70020},
		{"expired", nil, func(e *env) { e.clk.Advance(DefaultSigTTL + time.Hour) }, 70001},
		{"expired by fault", nil, func(e *env) { e.srv.SetFaults(timlocal.Faults{ExpireSigs: true}) }, 70001},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, nil)
			c := e.client(t, tt.mod)
			if tt.setup != nil {
				tt.setup(e)
			}
			err := c.CreateGroup(context.Background(), "room-1", "Room 1")
			if !errors.Is(err, ErrSignature) {
				t.Fatalf("err = %v, want ErrSignature", err)
			}
			if code := apiCode(t, err); code != tt.code {
				t.Fatalf("code %d, want %d", code, tt.code)
			}
			if n := e.srv.Calls("create_group"); n != 1 {
				t.Fatalf("%d calls, want 1: signature errors are not retried", n)
			}
			if c.sig != "" {
				t.Fatal("refused UserSig still cached")
			}
			if len(e.srv.Groups()) != 0 {
				t.Fatal("group created by a refused call")
			}
		})
	}
}

func TestGroupLifecycleIsIdempotent(t *testing.T) {
	e := newEnv(t, nil)
	c := e.client(t, nil)
	ctx := context.Background()

	if err := c.CreateGroup(ctx, "room-1", "Room 1"); err != nil {
		t.Fatal(err)
	}
	if err := c.CreateGroup(ctx, "room-1", "Room 1"); err != nil {
		t.Fatalf("create existing group: %v, want nil", err)
	}
	// 20 three-byte characters: over Tencent's 30-byte name limit, so the client cuts it.
	if err := c.CreateGroup(ctx, "room-2", strings.Repeat("房", 20)); err != nil {
		t.Fatalf("create group with a long name: %v", err)
	}
	if got := e.srv.Groups(); len(got) != 2 {
		t.Fatalf("groups %v, want room-1 and room-2", got)
	}
	if err := c.DestroyGroup(ctx, "room-1"); err != nil {
		t.Fatal(err)
	}
	if err := c.DestroyGroup(ctx, "room-1"); err != nil {
		t.Fatalf("destroy missing group: %v, want nil", err)
	}
	if err := c.CreateGroup(ctx, "@TGS#taken", "x"); err == nil {
		t.Fatal("create group with a reserved @TGS# id accepted")
	}
	if got := e.srv.Groups(); len(got) != 1 || got[0] != "room-2" {
		t.Fatalf("groups %v, want [room-2]", got)
	}
}

func TestSendGroupMsg(t *testing.T) {
	e := newEnv(t, nil)
	c := e.client(t, nil)
	ctx := context.Background()
	if err := c.CreateGroup(ctx, "room-1", "Room 1"); err != nil {
		t.Fatal(err)
	}
	data := []byte(`{"type":"gift","gift_id":7,"from":"u1","note":"<b>\"hi\"</b>"}`)
	seq, err := c.SendGroupMsg(ctx, Msg{GroupID: "room-1", Random: 42, Priority: PriorityHigh, Desc: "gift", Data: data, FromAccount: "u1"})
	if err != nil || seq != 1 {
		t.Fatalf("send = %d, %v; want 1, nil", seq, err)
	}
	msgs := e.srv.Messages("room-1")
	if len(msgs) != 1 {
		t.Fatalf("%d messages stored, want 1", len(msgs))
	}
	m := msgs[0]
	if m.Data != string(data) || m.Desc != "gift" || m.Priority != "High" || m.Random != 42 || m.From != "u1" ||
		m.MsgSeq != 1 || m.Dropped || len(m.Elements) != 1 || m.Elements[0].Type != "TIMCustomElem" {
		t.Fatalf("stored message %+v", m)
	}

	if seq, err := c.SendGroupMsg(ctx, Msg{GroupID: "room-1", Data: []byte(`{}`)}); err != nil || seq != 2 {
		t.Fatalf("send with default priority and random = %d, %v", seq, err)
	}
	if m := e.srv.Messages("room-1")[1]; m.Priority != "Normal" || m.Random == 0 {
		t.Fatalf("defaults not applied: %+v", m)
	}

	_, err = c.SendGroupMsg(ctx, Msg{GroupID: "no-such-room", Data: []byte(`{}`)})
	if !errors.Is(err, ErrGroupNotFound) {
		t.Fatalf("send to missing group: %v, want ErrGroupNotFound", err)
	}
	_, err = c.SendGroupMsg(ctx, Msg{GroupID: "room-1", Data: []byte(`"` + strings.Repeat("x", 9000) + `"`)})
	if !errors.Is(err, ErrTooLarge) {
		t.Fatalf("oversized send: %v, want ErrTooLarge", err)
	}
	if n := e.srv.Calls("send_group_msg"); n != 4 {
		t.Fatalf("%d calls, want 4: not-found and too-large are not retried", n)
	}

	// Refused before any call.
	for _, m := range []Msg{
		{GroupID: "room-1", Priority: "high", Data: []byte(`{}`)},
		{GroupID: "room-1", Data: []byte{0xff, 0xfe}},
		{Data: []byte(`{}`)},
	} {
		if _, err := c.SendGroupMsg(ctx, m); err == nil {
			t.Fatalf("send %+v accepted", m)
		}
	}
	if n := e.srv.Calls("send_group_msg"); n != 4 {
		t.Fatalf("invalid messages reached the endpoint: %d calls", n)
	}
}

func TestTransientRetryKeepsRandom(t *testing.T) {
	for _, afterApply := range []bool{false, true} {
		t.Run(fmt.Sprintf("after_apply=%v", afterApply), func(t *testing.T) {
			e := newEnv(t, nil)
			c := e.client(t, nil)
			ctx := context.Background()

			e.srv.SetFaults(timlocal.Faults{FailNext: 2, FailAfterApply: afterApply})
			if err := c.CreateGroup(ctx, "room-1", "Room 1"); err != nil {
				t.Fatalf("create group through 10002 faults: %v", err)
			}
			e.srv.SetFaults(timlocal.Faults{FailNext: 2, FailAfterApply: afterApply})
			seq, err := c.SendGroupMsg(ctx, Msg{GroupID: "room-1", Priority: PriorityHigh, Data: []byte(`{"n":1}`)})
			if err != nil {
				t.Fatalf("send through 10002 faults: %v", err)
			}
			msgs := e.srv.Messages("room-1")
			if len(msgs) != 1 || msgs[0].MsgSeq != seq || seq != 1 {
				t.Fatalf("stored %+v for seq %d; want the message once, with the answered seq", msgs, seq)
			}
			wantDup := uint64(0)
			if afterApply {
				wantDup = 2 // both retries met the stored Random
			}
			if got := e.srv.Stats("room-1").Duplicates; got != wantDup {
				t.Fatalf("%d duplicates, want %d", got, wantDup)
			}
			if n := e.srv.Calls("send_group_msg"); n != 3 {
				t.Fatalf("%d calls, want 3", n)
			}
		})
	}
}

func TestBadGatewayRetried(t *testing.T) {
	e := newEnv(t, nil)
	c := e.client(t, nil)
	e.srv.SetFaults(timlocal.Faults{BadGatewayNext: 2})
	if err := c.CreateGroup(context.Background(), "room-1", "Room 1"); err != nil {
		t.Fatalf("create group through HTTP 502s: %v", err)
	}
	if n := e.srv.Calls("create_group"); n != 3 {
		t.Fatalf("%d calls, want 3", n)
	}
}

func TestRateLimitedRetriedThenReturned(t *testing.T) {
	e := newEnv(t, nil)
	c := e.client(t, nil)
	e.srv.SetFaults(timlocal.Faults{RateLimit: true})
	err := c.CreateGroup(context.Background(), "room-1", "Room 1")
	if !errors.Is(err, ErrRateLimited) || apiCode(t, err) != 60007 {
		t.Fatalf("err = %v, want ErrRateLimited 60007", err)
	}
	if n := e.srv.Calls("create_group"); n != DefaultRetries+1 {
		t.Fatalf("%d calls, want %d", n, DefaultRetries+1)
	}
}

// TestPacedCommandIsNotRetried: a command the caller paces (send_group_msg
// in the daemon) is called once whatever its failure, 10002, an HTTP 502 or a
// frequency code, since each call of it is one its caller's budget granted;
// the caller's resend with the same Random is stored once.
func TestPacedCommandIsNotRetried(t *testing.T) {
	e := newEnv(t, nil)
	c := e.client(t, func(c *Config) { c.Paced = []string{"send_group_msg"} })
	ctx := context.Background()
	if err := c.CreateGroup(ctx, "room-1", "Room 1"); err != nil {
		t.Fatal(err)
	}
	msg := Msg{GroupID: "room-1", Random: 7, Priority: PriorityHigh, Data: []byte(`{"n":1}`)}
	for i, f := range []struct {
		faults timlocal.Faults
		want   error
	}{
		{timlocal.Faults{FailNext: 1, FailAfterApply: true}, ErrTransient},
		{timlocal.Faults{BadGatewayNext: 1}, ErrTransient},
		{timlocal.Faults{RateLimit: true}, ErrRateLimited},
	} {
		e.srv.SetFaults(f.faults)
		if _, err := c.SendGroupMsg(ctx, msg); !errors.Is(err, f.want) {
			t.Fatalf("%+v: err = %v, want %v", f.faults, err, f.want)
		}
		if n := e.srv.Calls("send_group_msg"); n != uint64(i+1) {
			t.Fatalf("%+v: %d calls for %d sends", f.faults, n, i+1)
		}
	}
	e.srv.SetFaults(timlocal.Faults{})
	if _, err := c.SendGroupMsg(ctx, msg); err != nil {
		t.Fatal(err)
	}
	if msgs := e.srv.Messages("room-1"); len(msgs) != 1 {
		t.Fatalf("%d messages stored, want the one sent again with its Random", len(msgs))
	}
}

func TestHangTimesOut(t *testing.T) {
	e := newEnv(t, nil)
	c := e.client(t, func(c *Config) { c.Timeout, c.Retries = 250*time.Millisecond, 1 })
	if err := c.CreateGroup(context.Background(), "room-1", "Room 1"); err != nil {
		t.Fatal(err)
	}
	e.srv.SetFaults(timlocal.Faults{Hang: true})
	_, err := c.SendGroupMsg(context.Background(), Msg{GroupID: "room-1", Data: []byte(`{}`)})
	if !errors.Is(err, ErrTransient) {
		t.Fatalf("err = %v, want ErrTransient", err)
	}
	if strings.Contains(err.Error(), "usersig") || strings.Contains(err.Error(), c.sig) {
		t.Fatalf("transport error leaks the UserSig: %v", err)
	}
	// Both attempts reached the endpoint, and it saw each abandoned request end.
	poll.Until(t, 5*time.Second, "two calls, none left hanging", poll.Bool(func() bool {
		return e.srv.Calls("send_group_msg") == 2 && e.srv.Hanging() == 0
	}))
}

func TestContextEndsRetries(t *testing.T) {
	e := newEnv(t, nil)
	c := e.client(t, func(c *Config) { c.Retries = 1000 })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The caller gives up while the client waits to retry.
	c.backoff = func(int) time.Duration { cancel(); return time.Hour }
	e.srv.SetFaults(timlocal.Faults{FailNext: 1})
	err := c.CreateGroup(ctx, "room-1", "Room 1")
	if !errors.Is(err, ErrTransient) || !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want the 10002 and the cancellation", err)
	}
	if n := e.srv.Calls("create_group"); n != 1 {
		t.Fatalf("%d calls, want 1", n)
	}
}

func TestPriorityFlood(t *testing.T) {
	e := newEnv(t, nil)
	c := e.client(t, nil)
	ctx := context.Background()
	if err := c.CreateGroup(ctx, "room-1", "Room 1"); err != nil {
		t.Fatal(err)
	}
	// All within one second of the endpoint's clock, which does not move: 45 Low first, then 5 High.
	dropped := 0
	for i := range 45 {
		_, err := c.SendGroupMsg(ctx, Msg{GroupID: "room-1", Random: uint32(1000 + i), Priority: PriorityLow, Data: []byte(`{"like":1}`)})
		switch {
		case errors.Is(err, ErrDropped):
			dropped++
		case err != nil:
			t.Fatalf("low %d: %v", i, err)
		}
	}
	for i := range 5 {
		if _, err := c.SendGroupMsg(ctx, Msg{GroupID: "room-1", Random: uint32(2000 + i), Priority: PriorityHigh, Data: []byte(`{"gift":1}`)}); err != nil {
			t.Fatalf("high %d: %v", i, err)
		}
	}
	st := e.srv.Stats("room-1")
	if st.Delivered > 40 || st.MaxPerSecond > 40 {
		t.Fatalf("stats %+v: more than 40 delivered in one second", st)
	}
	if dropped == 0 || st.Dropped != uint64(dropped) || st.Delivered+st.Dropped != 50 || st.MaxOfferedPerSecond != 50 {
		t.Fatalf("stats %+v, %d drops answered", st, dropped)
	}
	highs, marked := 0, 0
	for _, m := range e.srv.Messages("room-1") {
		if m.Dropped {
			marked++
			if m.Priority == "High" || m.DropReason != "MsgFreqCtrl" {
				t.Fatalf("dropped %+v", m)
			}
		} else if m.Priority == "High" {
			highs++
		}
	}
	if highs != 5 || marked != dropped {
		t.Fatalf("%d High delivered (want 5), %d marked dropped (want %d)", highs, marked, dropped)
	}

	e.clk.Advance(time.Second)
	if _, err := c.SendGroupMsg(ctx, Msg{GroupID: "room-1", Priority: PriorityLow, Data: []byte(`{}`)}); err != nil {
		t.Fatalf("low after the window moved on: %v", err)
	}
}

func TestMuteBanUnban(t *testing.T) {
	e := newEnv(t, nil)
	c := e.client(t, nil)
	ctx := context.Background()
	if err := c.CreateGroup(ctx, "room-1", "Room 1"); err != nil {
		t.Fatal(err)
	}
	accounts := func(n int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = "user" + strconv.Itoa(i)
		}
		return out
	}

	if err := c.ForbidSendMsg(ctx, "room-1", accounts(501), 60); err != nil {
		t.Fatal(err)
	}
	muted := e.srv.Muted("room-1")
	if len(muted) != 501 || e.srv.Calls("forbid_send_msg") != 2 {
		t.Fatalf("%d muted in %d calls, want 501 in 2", len(muted), e.srv.Calls("forbid_send_msg"))
	}
	if until := muted["user500"]; !until.Equal(e.clk.Now().Add(time.Minute)) {
		t.Fatalf("muted until %v, want a minute from now", until)
	}
	// A muted sender cannot send.
	if _, err := c.SendGroupMsg(ctx, Msg{GroupID: "room-1", FromAccount: "user3", Data: []byte(`{}`)}); apiCode(t, err) != 10017 {
		t.Fatalf("muted sender: %v", err)
	}
	if err := c.ForbidSendMsg(ctx, "room-1", accounts(501), 0); err != nil {
		t.Fatal(err)
	}
	if n := len(e.srv.Muted("room-1")); n != 0 {
		t.Fatalf("%d still muted after unmute", n)
	}

	if err := c.BanGroupMember(ctx, "room-1", accounts(25), 3600, "spam"); err != nil {
		t.Fatal(err)
	}
	if n := len(e.srv.Banned("room-1")); n != 25 || e.srv.Calls("ban_group_member") != 2 {
		t.Fatalf("%d banned in %d calls, want 25 in 2", n, e.srv.Calls("ban_group_member"))
	}
	if err := c.UnbanGroupMember(ctx, "room-1", accounts(21)); err != nil {
		t.Fatal(err)
	}
	if b := e.srv.Banned("room-1"); len(b) != 4 || e.srv.Calls("unban_group_member") != 2 {
		t.Fatalf("banned after unban: %v", b)
	}
	if err := c.BanGroupMember(ctx, "room-1", accounts(1), 0, ""); err == nil {
		t.Fatal("ban for zero seconds accepted")
	}
	if err := c.ForbidSendMsg(ctx, "no-such-room", accounts(1), 60); !errors.Is(err, ErrGroupNotFound) {
		t.Fatalf("mute in missing group: %v", err)
	}
	if err := c.ForbidSendMsg(ctx, "room-1", nil, 60); err != nil {
		t.Fatalf("mute nobody: %v", err)
	}
}

func TestClientCallBudget(t *testing.T) {
	e := newEnv(t, nil)
	c := e.client(t, func(c *Config) { c.CallsPerSecond = 1 })
	if err := c.CreateGroup(context.Background(), "room-1", "Room 1"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	// The next create_group token is a second away, past the deadline: refused at once.
	if err := c.CreateGroup(ctx, "room-2", "Room 2"); !errors.Is(err, ErrRateLimited) {
		t.Fatalf("err = %v, want ErrRateLimited", err)
	}
	if n := e.srv.Calls("create_group"); n != 1 {
		t.Fatalf("%d calls reached the endpoint, want 1", n)
	}
	// Budgets are per command: destroy_group's first token is there now.
	// A deadline of its own, still under the second a shared budget would
	// make it wait, leaves the local round trip time to spare.
	dctx, dcancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer dcancel()
	if err := c.DestroyGroup(dctx, "room-1"); err != nil {
		t.Fatal(err)
	}
}

func TestConcurrentSends(t *testing.T) {
	e := newEnv(t, func(c *timlocal.Config) { c.GroupRate = 1000 })
	c := e.client(t, nil)
	ctx := context.Background()
	if err := c.CreateGroup(ctx, "room-1", "Room 1"); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	seqs := make(chan uint64, 40)
	for g := range 8 {
		wg.Go(func() {
			for i := range 5 {
				seq, err := c.SendGroupMsg(ctx, Msg{GroupID: "room-1", Random: uint32(g*100 + i + 1), Data: []byte(`{}`)})
				if err != nil {
					t.Error(err)
					return
				}
				seqs <- seq
			}
		})
	}
	wg.Wait()
	close(seqs)
	seen := map[uint64]bool{}
	for s := range seqs {
		if seen[s] || s < 1 || s > 40 {
			t.Fatalf("seq %d repeated or out of range", s)
		}
		seen[s] = true
	}
	if len(seen) != 40 || len(e.srv.Messages("room-1")) != 40 {
		t.Fatalf("%d seqs, %d messages; want 40", len(seen), len(e.srv.Messages("room-1")))
	}
}

// TestWireFormat checks the exact request against a recording server: URL, query, headers and a body
// that stays byte-identical across retries while the query random changes.
func TestWireFormat(t *testing.T) {
	type seen struct {
		method, path, contentType string
		query                     map[string][]string
		body                      []byte
	}
	var mu sync.Mutex
	var got []seen
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, seen{r.Method, r.URL.Path, r.Header.Get("Content-Type"), r.URL.Query(), body})
		n := len(got)
		mu.Unlock()
		if n < 3 {
			fmt.Fprint(w, `{"ActionStatus":"FAIL","ErrorCode":10002,"ErrorInfo":"internal error"}`)
			return
		}
		// Tolerant decoding: no ErrorInfo, extra fields.
		fmt.Fprint(w, `{"ActionStatus":"OK","ErrorCode":0,"RequestId":"Id-1","ErrorDisplay":"","MsgTime":1497249503,"MsgSeq":9}`)
	}))
	t.Cleanup(hs.Close)
	c := newClient(t, hs.URL+"/prefix/", nil)

	seq, err := c.SendGroupMsg(context.Background(), Msg{GroupID: "room-1", Random: 8912345, Priority: PriorityLow, Desc: "d", Data: []byte(`{"k":"v"}`)})
	if err != nil || seq != 9 {
		t.Fatalf("send = %d, %v", seq, err)
	}
	if len(got) != 3 {
		t.Fatalf("%d requests, want 3", len(got))
	}
	randoms := map[string]bool{}
	for i, r := range got {
		if r.method != http.MethodPost || r.path != "/prefix/v4/group_open_http_svc/send_group_msg" || r.contentType != "application/json" {
			t.Fatalf("request %d: %s %s (%s)", i, r.method, r.path, r.contentType)
		}
		if len(r.query) != 5 {
			t.Fatalf("request %d query %v, want exactly sdkappid, identifier, usersig, random, contenttype", i, r.query)
		}
		q := func(k string) string {
			if len(r.query[k]) != 1 {
				t.Fatalf("request %d: query %s = %v", i, k, r.query[k])
			}
			return r.query[k][0]
		}
		if q("sdkappid") != strconv.Itoa(testAppID) || q("identifier") != testAdmin || q("contenttype") != "json" {
			t.Fatalf("request %d query %v", i, r.query)
		}
		if _, err := strconv.ParseUint(q("random"), 10, 32); err != nil {
			t.Fatalf("request %d random %q is not a uint32", i, q("random"))
		}
		randoms[q("random")] = true
		if err := tencentyun.VerifyUserSig(testAppID, testKey, testAdmin, q("usersig"), time.Now()); err != nil {
			t.Fatalf("request %d usersig does not verify: %v", i, err)
		}
		if string(r.body) != string(got[0].body) {
			t.Fatalf("request %d body changed on retry:\n%s\n%s", i, r.body, got[0].body)
		}
	}
	if len(randoms) < 2 {
		t.Fatal("the query random did not change between requests")
	}
	var body map[string]any
	if err := json.Unmarshal(got[0].body, &body); err != nil {
		t.Fatal(err)
	}
	want := `{"GroupId":"room-1","MsgBody":[{"MsgContent":{"Data":"{\"k\":\"v\"}","Desc":"d"},"MsgType":"TIMCustomElem"}],"MsgPriority":"Low","Random":8912345}`
	if b, _ := json.Marshal(body); string(b) != want {
		t.Fatalf("body %s\nwant %s", b, want)
	}
}

func TestEnvelopeOutcomes(t *testing.T) {
	tests := []struct {
		name   string
		status int
		body   string
		want   error // sentinel, or nil for success
		apiErr bool
		calls  int
	}{
		{"ok with extra fields", 200, `{"ActionStatus":"OK","ErrorCode":0,"RequestId":"x","Extra":{"a":1}}`, nil, false, 1},
		{"fail with mapped code", 200, `{"ActionStatus":"FAIL","ErrorCode":10010,"ErrorInfo":"gone"}`, ErrGroupNotFound, true, 1},
		{"ok status with a code", 200, `{"ActionStatus":"OK","ErrorCode":10004,"ErrorInfo":"bad"}`, nil, true, 1},
		{"fail without code", 200, `{"ActionStatus":"FAIL","ErrorInfo":"?"}`, nil, true, 1},
		{"not json", 200, `<html>proxy</html>`, nil, false, 1},
		{"http 404", 404, `not found`, nil, false, 1},
		{"http 500", 500, `oops`, ErrTransient, false, DefaultRetries + 1},
		{"http 429", 429, `slow down`, ErrRateLimited, false, DefaultRetries + 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var mu sync.Mutex
			calls := 0
			hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				calls++
				mu.Unlock()
				w.WriteHeader(tt.status)
				fmt.Fprint(w, tt.body)
			}))
			t.Cleanup(hs.Close)
			c := newClient(t, hs.URL, nil)
			err := c.ForbidSendMsg(context.Background(), "room-1", []string{"u1"}, 60)
			success := tt.status == 200 && !tt.apiErr && tt.want == nil && strings.HasPrefix(tt.body, "{")
			switch {
			case success && err != nil:
				t.Fatalf("err = %v, want success", err)
			case !success && err == nil:
				t.Fatal("success, want an error")
			case tt.want != nil && !errors.Is(err, tt.want):
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
			var apiErr *APIError
			if errors.As(err, &apiErr) != tt.apiErr {
				t.Fatalf("err = %v; *APIError expected: %v", err, tt.apiErr)
			}
			mu.Lock()
			defer mu.Unlock()
			if calls != tt.calls {
				t.Fatalf("%d calls, want %d", calls, tt.calls)
			}
		})
	}
}

// TestRenameAndShutUpAll: a long name is cut on a character boundary, mute-all
// goes on and off, bad input is refused before any call, a missing group is
// ErrGroupNotFound.
func TestRenameAndShutUpAll(t *testing.T) {
	e := newEnv(t, nil)
	c := e.client(t, nil)
	ctx := context.Background()
	if err := c.CreateGroup(ctx, "room-1", "Room 1"); err != nil {
		t.Fatal(err)
	}
	name := "a" + strings.Repeat("房", 11) // 34 bytes; byte 30 falls inside the 10th character
	if err := c.RenameGroup(ctx, "room-1", name); err != nil {
		t.Fatal(err)
	}
	if g, _ := e.srv.Group("room-1"); g.Name != "a"+strings.Repeat("房", 9) || !utf8.ValidString(g.Name) {
		t.Fatalf("name %q (%d bytes), want the first 28 bytes", g.Name, len(g.Name))
	}
	if err := c.ShutUpAllMember(ctx, "room-1", true); err != nil {
		t.Fatal(err)
	}
	if g, _ := e.srv.Group("room-1"); !g.ShutUpAll {
		t.Fatal("mute-all not on")
	}
	if err := c.ShutUpAllMember(ctx, "room-1", false); err != nil {
		t.Fatal(err)
	}
	if g, _ := e.srv.Group("room-1"); g.ShutUpAll {
		t.Fatal("mute-all not off")
	}

	calls := e.srv.Calls("modify_group_base_info")
	for _, err := range []error{
		c.RenameGroup(ctx, "room-1", ""),
		c.RenameGroup(ctx, "room-1", "bad \xff"),
		c.ShutUpAllMember(ctx, "", true),
		c.CreateGroup(ctx, strings.Repeat("r", 49), "x"),
	} {
		if !errors.Is(err, ErrInvalid) || !Permanent(err) {
			t.Fatalf("bad input: %v, want ErrInvalid", err)
		}
	}
	if e.srv.Calls("modify_group_base_info") != calls || e.srv.Calls("create_group") != 1 {
		t.Fatal("bad input reached the endpoint")
	}
	if g, _ := e.srv.Group("room-1"); g.Name != "a"+strings.Repeat("房", 9) {
		t.Fatalf("bad input changed the name to %q", g.Name)
	}
	if err := c.RenameGroup(ctx, "room-9", "x"); !errors.Is(err, ErrGroupNotFound) || Permanent(err) {
		t.Fatalf("rename missing group: %v, want ErrGroupNotFound, not permanent", err)
	}
}

func TestPermanentAndReason(t *testing.T) {
	for _, tc := range []struct {
		err       error
		permanent bool
		reason    string
	}{
		{&APIError{Code: 10004}, true, "tencent_10004"},
		{&APIError{Code: 80002}, true, "tencent_80002"},
		{&APIError{Code: 10007}, true, "tencent_10007"},
		{&APIError{Code: 10010}, false, "tencent_10010"},
		{&APIError{Code: 10015}, false, "tencent_10015"},
		{&APIError{Code: 10002}, false, "tencent_10002"},
		{&APIError{Code: 60011}, false, "tencent_60011"},
		{&APIError{Code: 70001}, false, "tencent_70001"},
		{&APIError{Code: 99999}, false, "tencent_99999"},
		{fmt.Errorf("x: %w", ErrTransient), false, "transient"},
		{fmt.Errorf("x: %w", ErrInvalid), true, "invalid_request"},
		{context.DeadlineExceeded, false, "other"},
	} {
		if got := Permanent(tc.err); got != tc.permanent {
			t.Errorf("Permanent(%v) = %v", tc.err, got)
		}
		if got := Reason(tc.err); got != tc.reason {
			t.Errorf("Reason(%v) = %q, want %q", tc.err, got, tc.reason)
		}
	}
}
