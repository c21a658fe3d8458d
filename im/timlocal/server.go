// Package timlocal is a local stand-in for the Tencent Cloud IM REST API, for development and tests. It
// speaks the same protocol as the real service for the group calls room-service makes: the
// /v4/{service}/{command} URL with its query parameters, UserSig verification with the official library,
// HTTP 200 with the ActionStatus/ErrorCode/ErrorInfo envelope, Tencent's error codes, the 5-minute
// duplicate check on Random, and the 40 messages/s per group frequency control that drops lower
// priorities while answering success, and the app-wide limit of each command (DefaultAPIRate calls in
// any one second for the whole app, whoever calls: every node of a fleet shares it), answered with 60007
// past it. Groups live in memory and, with Persist, in a file that outlives
// the process.
//
// Besides the API it serves, under /local/, a page showing what each group would have shown its members,
// JSON views of messages and statistics, and run-time fault switches.
package timlocal

import (
	"bytes"
	"compress/zlib"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tencentyun/tls-sig-api-v2-golang/tencentyun"
)

// Defaults applied by New to zero-valued Config fields.
const (
	// DefaultGroupRate is Tencent's per-group message limit per second.
	DefaultGroupRate = 40
	// DefaultAPIRate is Tencent's default per-command REST limit per second.
	DefaultAPIRate = 200
	// DefaultMaxMsgBytes is the message size limit (80002). Tencent documents 12 KB today and 8,000 bytes
	// on older pages; client SDKs say 8 KB. The fake uses the 8 KB budget room-service must stay within.
	DefaultMaxMsgBytes = 8192
)

const (
	groupService = "group_open_http_svc"
	// historyPerGroup is how many recent messages (delivered or dropped) each group keeps for inspection.
	historyPerGroup = 500
	// dedupeWindow is how long a message's Random makes later messages with the same Random duplicates.
	dedupeWindow = 5 * time.Minute
	maxBodyBytes = 1 << 20
)

// Config configures a Server.
type Config struct {
	// SDKAppID, SecretKey and Admin are the credentials calls must be signed with and made as.
	SDKAppID  uint64
	SecretKey string
	Admin     string
	// GroupRate is the per-group message limit per second (DefaultGroupRate).
	GroupRate int
	// APIRate is the app-wide limit of each command: at most this many calls of one command are accepted
	// in any one-second window, whoever makes them; the others are answered 60007 (DefaultAPIRate).
	APIRate int
	// MaxMsgBytes limits the bytes of a message's element contents, answered with 80002 (DefaultMaxMsgBytes).
	MaxMsgBytes int
	// Clock is the time used for signature expiry, rate windows, mutes, bans and duplicates (time.Now).
	Clock func() time.Time
}

// Validate reports every problem with c at once; New does not call it.
func (c Config) Validate() error {
	var errs []error
	if c.SDKAppID == 0 {
		errs = append(errs, errors.New("timlocal config: sdkappid is required"))
	}
	if c.SecretKey == "" {
		errs = append(errs, errors.New("timlocal config: secret key is required"))
	}
	if c.Admin == "" {
		errs = append(errs, errors.New("timlocal config: admin identifier is required"))
	}
	if c.GroupRate < 0 || c.APIRate < 0 || c.MaxMsgBytes < 0 {
		errs = append(errs, errors.New("timlocal config: group rate, api rate and max message bytes must not be negative"))
	}
	return errors.Join(errs...)
}

// Faults are failure switches for /v4/ calls, settable at run time with SetFaults or POST /local/faults.
// The zero value means no faults.
type Faults struct {
	// Latency is added before each call is handled.
	Latency time.Duration
	// FailNext makes the next N authenticated calls answer 10002 (internal error).
	FailNext int
	// FailAfterApply makes those calls take effect first and only their answer 10002, like a Tencent
	// internal timeout after the write: a retry then meets the effect (an existing group, a duplicate
	// Random) instead of a clean slate.
	FailAfterApply bool
	// BadGatewayNext makes the next N requests answer HTTP 502 with no envelope, as a proxy in front would.
	BadGatewayNext int
	// RateLimit makes every authenticated call answer 60007.
	RateLimit bool
	// ExpireSigs makes every call answer 70001, as if its UserSig had expired.
	ExpireSigs bool
	// Hang makes requests wait without answering until the caller gives up or the faults are set again.
	Hang bool
}

type faultsJSON struct {
	Latency        string `json:"latency"`
	FailNext       int    `json:"fail_next"`
	FailAfterApply bool   `json:"fail_after_apply"`
	BadGatewayNext int    `json:"bad_gateway_next"`
	RateLimit      bool   `json:"rate_limit"`
	ExpireSigs     bool   `json:"expire_sigs"`
	Hang           bool   `json:"hang"`
}

// MarshalJSON encodes f with snake_case keys and Latency as a duration string such as "250ms".
func (f Faults) MarshalJSON() ([]byte, error) {
	return json.Marshal(faultsJSON{f.Latency.String(), f.FailNext, f.FailAfterApply, f.BadGatewayNext, f.RateLimit, f.ExpireSigs, f.Hang})
}

// UnmarshalJSON decodes what MarshalJSON writes; unknown keys and negative counts are errors, and an
// absent key means its zero value.
func (f *Faults) UnmarshalJSON(b []byte) error {
	var j faultsJSON
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&j); err != nil {
		return err
	}
	var lat time.Duration
	if j.Latency != "" {
		d, err := time.ParseDuration(j.Latency)
		if err != nil {
			return fmt.Errorf("latency: %w", err)
		}
		lat = d
	}
	if lat < 0 || j.FailNext < 0 || j.BadGatewayNext < 0 {
		return errors.New("latency, fail_next and bad_gateway_next must not be negative")
	}
	*f = Faults{lat, j.FailNext, j.FailAfterApply, j.BadGatewayNext, j.RateLimit, j.ExpireSigs, j.Hang}
	return nil
}

// Server is the local endpoint: an http.Handler for /v4/ (the API) and /local/ (inspection and faults).
// It is safe for concurrent use. It starts no goroutines; requests held by the Hang fault end when their
// context does or when faults are set again.
//
// Lock order: mu and faultMu are never held together.
type Server struct {
	cfg      Config
	now      func() time.Time
	mux      *http.ServeMux
	verified sync.Map // identifier+usersig -> sigTrust

	faultMu sync.Mutex
	faults  Faults
	release chan struct{} // closed and replaced by SetFaults to free hung requests

	mu     sync.Mutex
	groups map[string]*group
	calls  map[string]uint64 // HTTP requests per command
	// windows holds each command's accepted calls of the last second and its counts.
	windows map[string]*callWindow
	hanging int // requests held by the Hang fault now
	autoID  uint64
	request uint64 // RequestId counter
	// statePath is the file Persist keeps the groups in ("" keeps them in memory only); saveErr is the
	// last write's failure.
	statePath string
	saveErr   error
	saveTimer *time.Timer // a write is due; under mu
	writeMu   sync.Mutex  // one write of the state file at a time
}

// New returns a Server for cfg with defaults applied to its zero fields.
func New(cfg Config) *Server {
	if cfg.GroupRate == 0 {
		cfg.GroupRate = DefaultGroupRate
	}
	if cfg.APIRate == 0 {
		cfg.APIRate = DefaultAPIRate
	}
	if cfg.MaxMsgBytes == 0 {
		cfg.MaxMsgBytes = DefaultMaxMsgBytes
	}
	s := &Server{
		cfg:     cfg,
		now:     cfg.Clock,
		release: make(chan struct{}),
		groups:  make(map[string]*group),
		calls:   make(map[string]uint64),
		windows: make(map[string]*callWindow),
	}
	if s.now == nil {
		s.now = time.Now
	}
	s.mux = http.NewServeMux()
	s.mux.HandleFunc("/v4/", s.serveAPI)
	s.mux.HandleFunc("GET /local/{$}", s.servePage)
	s.mux.HandleFunc("GET /local/stats", s.serveStats)
	s.mux.HandleFunc("GET /local/groups/{id}/messages", s.serveMessages)
	s.mux.HandleFunc("GET /local/faults", s.serveFaults)
	s.mux.HandleFunc("POST /local/faults", s.serveSetFaults)
	return s
}

// ServeHTTP serves the API under /v4/ and the inspection pages under /local/.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// SetFaults replaces the fault switches and frees requests held by an earlier Hang.
func (s *Server) SetFaults(f Faults) {
	s.faultMu.Lock()
	defer s.faultMu.Unlock()
	s.faults = f
	close(s.release)
	s.release = make(chan struct{})
}

// CurrentFaults returns the fault switches in force, with the remaining FailNext and BadGatewayNext counts.
func (s *Server) CurrentFaults() Faults {
	s.faultMu.Lock()
	defer s.faultMu.Unlock()
	return s.faults
}

func (s *Server) faultState() (Faults, chan struct{}) {
	s.faultMu.Lock()
	defer s.faultMu.Unlock()
	return s.faults, s.release
}

// takeBadGateway consumes one BadGatewayNext count if any is left.
func (s *Server) takeBadGateway() bool {
	s.faultMu.Lock()
	defer s.faultMu.Unlock()
	if s.faults.BadGatewayNext == 0 {
		return false
	}
	s.faults.BadGatewayNext--
	return true
}

// takeFailure consumes one FailNext count if any is left and reports whether it applies after the call.
func (s *Server) takeFailure() (fail, afterApply bool) {
	s.faultMu.Lock()
	defer s.faultMu.Unlock()
	if s.faults.FailNext == 0 {
		return false, false
	}
	s.faults.FailNext--
	return true, s.faults.FailAfterApply
}

// Calls returns how many HTTP requests reached /v4/…/command, whatever their outcome.
func (s *Server) Calls(command string) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[command]
}

// reply is an API answer: code 0 with fields, or a Tencent error code with its info text.
type reply struct {
	code   int
	info   string
	fields map[string]any
}

func ok(fields map[string]any) reply { return reply{fields: fields} }

func fail(code int, format string, args ...any) reply {
	return reply{code: code, info: fmt.Sprintf(format, args...)}
}

// request is what a command handler gets: the clock reading for the call and the body, already known to
// be a JSON object.
type request struct {
	now    time.Time
	body   []byte
	fields map[string]json.RawMessage
}

// unknownCommand is the key under which calls of commands the endpoint
// does not serve are counted.
const unknownCommand = "(unknown)"

func (s *Server) serveAPI(w http.ResponseWriter, r *http.Request) {
	service, command, pathOK := splitAPIPath(r.URL.Path)
	s.mu.Lock()
	if _, known := commands[command]; known {
		s.calls[command]++
	} else {
		s.calls[unknownCommand]++ // one key: a caller's made-up names must not grow the map
	}
	s.mu.Unlock()

	// Read the body first: only then does net/http watch the connection and end r.Context() when the
	// caller goes away, which is what releases a hung request.
	body, readErr := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBodyBytes))

	f, release := s.faultState()
	if f.Hang && !s.hang(r.Context(), release) {
		return
	}
	if f.Latency > 0 {
		t := time.NewTimer(f.Latency)
		select {
		case <-r.Context().Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
	if s.takeBadGateway() {
		http.Error(w, "502 Bad Gateway", http.StatusBadGateway)
		return
	}
	s.write(w, s.handle(r, service, command, pathOK, body, readErr))
}

// hang holds a request until its context ends (false) or the faults are set again (true).
func (s *Server) hang(ctx context.Context, release <-chan struct{}) bool {
	s.mu.Lock()
	s.hanging++
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.hanging--
		s.mu.Unlock()
	}()
	select {
	case <-ctx.Done():
		return false
	case <-release:
		return true
	}
}

// Hanging returns how many requests the Hang fault is holding now.
func (s *Server) Hanging() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.hanging
}

func (s *Server) handle(r *http.Request, service, command string, pathOK bool, body []byte, readErr error) reply {
	if r.Method != http.MethodPost {
		return fail(60002, "HTTP parse error: only POST is supported")
	}
	if !pathOK {
		return fail(60009, "resource %q not found", r.URL.Path)
	}
	now := s.now()
	if rep, authed := s.authenticate(r.URL.Query(), now); !authed {
		return rep
	}
	if service != groupService {
		return fail(60009, "service %q not found", service)
	}
	handler := commands[command]
	if handler == nil {
		return fail(10003, "invalid command %q", command)
	}
	if s.CurrentFaults().RateLimit || !s.admitCall(command, now) {
		return fail(60007, "REST API call frequency over the limit")
	}
	if readErr != nil {
		return fail(60003, "request body unreadable or over %d bytes", maxBodyBytes)
	}
	var fields map[string]json.RawMessage
	if len(bytes.TrimSpace(body)) == 0 {
		return fail(60003, "request body is empty; send {} when the API takes no fields")
	}
	if err := json.Unmarshal(body, &fields); err != nil || fields == nil {
		return fail(60003, "request JSON parse error: body is not a JSON object")
	}
	failing, afterApply := s.takeFailure()
	if failing && !afterApply {
		return fail(10002, "internal server error (injected)")
	}
	rep := handler(s, request{now: now, body: body, fields: fields})
	if failing {
		return fail(10002, "internal server error after apply (injected)")
	}
	return rep
}

// splitAPIPath splits /v4/{service}/{command}.
func splitAPIPath(p string) (service, command string, ok bool) {
	parts := strings.Split(strings.TrimPrefix(p, "/v4/"), "/")
	if len(parts) != 2 || parts[0] == "" || parts[1] == "" {
		if len(parts) > 0 {
			command = parts[len(parts)-1]
		}
		return "", command, false
	}
	return parts[0], parts[1], true
}

// authenticate checks the query parameters and the UserSig as Tencent does.
func (s *Server) authenticate(q url.Values, now time.Time) (reply, bool) {
	appParam := q.Get("sdkappid")
	if appParam == "" {
		return fail(60012, "sdkappid missing in URL"), false
	}
	app, err := strconv.ParseUint(appParam, 10, 64)
	if err != nil {
		return fail(60006, "sdkappid %q invalid", appParam), false
	}
	identifier, usersig := q.Get("identifier"), q.Get("usersig")
	switch {
	case identifier == "":
		return fail(60002, "HTTP parse error: identifier missing in URL"), false
	case usersig == "":
		return fail(60002, "HTTP parse error: usersig missing in URL"), false
	}
	if _, err := strconv.ParseUint(q.Get("random"), 10, 32); err != nil {
		return fail(60002, "HTTP parse error: random must be an unsigned 32-bit integer"), false
	}
	if ct := q.Get("contenttype"); ct != "json" {
		return fail(60002, "HTTP parse error: contenttype must be json, got %q", ct), false
	}
	if app != s.cfg.SDKAppID {
		return fail(70020, "sdkappid %d not found; check the SDKAppID and the data center", app), false
	}
	if s.CurrentFaults().ExpireSigs {
		return fail(70001, "UserSig expired (injected); generate a new one"), false
	}
	if code, info := s.verifySig(identifier, usersig, now); code != 0 {
		return fail(code, "%s", info), false
	}
	if identifier != s.cfg.Admin {
		return fail(60010, "identifier %q is not an App admin", identifier), false
	}
	return reply{}, true
}

// sigEncoding is the UserSig base64 variant: + → *, / → -, = → _.
var sigEncoding = base64.NewEncoding("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789*-").WithPadding('_')

// sigTrust is a verified signature's stay in the cache: from when it was
// verified until a minute later or its own expiry, whichever is first.
type sigTrust struct{ from, until time.Time }

// verifySig checks a UserSig with the official library and maps its verdict to Tencent's codes.
func (s *Server) verifySig(identifier, usersig string, now time.Time) (int, string) {
	// A signature verified within the last minute is trusted again, up to
	// its expiry: the check (base64, zlib, JSON, HMAC) costs more than the
	// rest of a call.
	key := identifier + "\x00" + usersig
	if v, ok := s.verified.Load(key); ok && now.Before(v.(sigTrust).until) && now.After(v.(sigTrust).from) {
		return 0, ""
	}
	code, info, expires := s.checkSig(identifier, usersig, now)
	if code == 0 {
		until := now.Add(time.Minute)
		if expires.Before(until) {
			until = expires
		}
		s.verified.Store(key, sigTrust{from: now, until: until})
	}
	return code, info
}

// checkSig verifies a UserSig from scratch and returns, for a good one, when it expires.
func (s *Server) checkSig(identifier, usersig string, now time.Time) (int, string, time.Time) {
	// tencentyun v1.4.0 treats a zlib stream that is not JSON as a zero document (its JSON error is
	// dropped) and reports an sdkappid mismatch; decode first so such a sig is 70003 like other garbage.
	expires, decodes := sigExpiry(usersig)
	if !decodes {
		return 70003, "UserSig could not be parsed", time.Time{}
	}
	err := tencentyun.VerifyUserSig(s.cfg.SDKAppID, s.cfg.SecretKey, identifier, usersig, now)
	switch {
	case err == nil:
		return 0, "", expires
	case errors.Is(err, tencentyun.ErrExpired):
		return 70001, "UserSig expired; generate a new one", time.Time{}
	case errors.Is(err, tencentyun.ErrIdentifierNotMatch):
		return 70013, "identifier in the request does not match the one in the UserSig", time.Time{}
	case errors.Is(err, tencentyun.ErrSdkAppIDNotMatch):
		return 70014, "sdkappid in the request does not match the one in the UserSig", time.Time{}
	case errors.Is(err, tencentyun.ErrSigNotMatch), errors.Is(err, tencentyun.ErrUserBufTypeNotMatch),
		errors.Is(err, tencentyun.ErrUserBufNotMatch):
		return 70009, "UserSig verification failed; is it signed with this SDKAppID's key?", time.Time{}
	default:
		return 70003, "UserSig could not be parsed", time.Time{}
	}
}

// sigExpiry decodes a UserSig's document and returns when it expires
// (TLS.time + TLS.expire, as the official verifier reads them), and
// whether it decodes.
func sigExpiry(usersig string) (time.Time, bool) {
	raw, err := sigEncoding.DecodeString(usersig)
	if err != nil {
		return time.Time{}, false
	}
	zr, err := zlib.NewReader(bytes.NewReader(raw))
	if err != nil {
		return time.Time{}, false
	}
	defer func() { _ = zr.Close() }()
	var doc struct {
		Time   int64 `json:"TLS.time"`
		Expire int64 `json:"TLS.expire"`
	}
	if json.NewDecoder(io.LimitReader(zr, 64<<10)).Decode(&doc) != nil {
		return time.Time{}, false
	}
	return time.Unix(doc.Time+doc.Expire, 0), true
}

// write answers HTTP 200 with the envelope, as Tencent does for every API-level outcome. RequestId is
// extra, like newer Tencent APIs add, so clients are exercised on tolerant decoding.
func (s *Server) write(w http.ResponseWriter, rep reply) {
	s.mu.Lock()
	s.request++
	id := s.request
	s.mu.Unlock()
	out := make(map[string]any, len(rep.fields)+4)
	for k, v := range rep.fields {
		out[k] = v
	}
	out["ActionStatus"], out["ErrorCode"], out["ErrorInfo"] = "OK", 0, ""
	if rep.code != 0 {
		out = map[string]any{"ActionStatus": "FAIL", "ErrorCode": rep.code, "ErrorInfo": rep.info}
	}
	out["RequestId"] = "Id-local-" + strconv.FormatUint(id, 10)
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	_ = json.NewEncoder(w).Encode(out)
}

// CallStats counts the authenticated calls of one command against the app-wide limit (APIRate).
type CallStats struct {
	// Accepted counts calls within the limit; Refused counts calls answered 60007 for it.
	Accepted uint64 `json:"accepted"`
	Refused  uint64 `json:"refused"`
	// MaxPerSecond is the most calls accepted in any one-second window.
	MaxPerSecond int `json:"max_per_second"`
}

// callWindow is one command's accepted calls within the last second, in arrival order, and its counts.
type callWindow struct {
	times []time.Time
	stats CallStats
}

// admitCall applies the app-wide limit of command over the sliding window (now-1s, now].
func (s *Server) admitCall(command string, now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	w := s.windows[command]
	if w == nil {
		w = &callWindow{}
		s.windows[command] = w
	}
	w.times = inWindow(w.times, now)
	if len(w.times) >= s.cfg.APIRate {
		w.stats.Refused++
		return false
	}
	w.times = append(w.times, now)
	w.stats.Accepted++
	w.stats.MaxPerSecond = max(w.stats.MaxPerSecond, len(w.times))
	return true
}

// CallStats returns the counts of command against the app-wide limit.
func (s *Server) CallStats(command string) CallStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	if w := s.windows[command]; w != nil {
		return w.stats
	}
	return CallStats{}
}
