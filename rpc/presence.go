package rpc

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"connectrpc.com/connect"

	roomv1 "hyapp/room-service/gen/room/v1"
	"hyapp/room-service/internal/obs"
	"hyapp/room-service/room"
)

// Heartbeat implements RoomService: the listed members of the room are
// seen now. It logs no command.
func (h *RoomHandler) Heartbeat(ctx context.Context, r *connect.Request[roomv1.HeartbeatRequest]) (*connect.Response[roomv1.HeartbeatResponse], error) {
	m := r.Msg
	if err := room.CheckHeartbeat(m.GetRoomId(), m.GetUserIds()); err != nil {
		return nil, toConnect(ctx, h.log, err)
	}
	res, err := h.engine.Heartbeat(ctx, m.GetRoomId(), m.GetUserIds())
	if err != nil {
		return nil, toConnect(ctx, h.log, err)
	}
	return connect.NewResponse(&roomv1.HeartbeatResponse{
		Members: int32(res.Members), NotMembers: int32(len(res.NotMembers)), NotMemberUserIds: res.NotMembers,
	}), nil
}

// Tencent IM's state-change callback (State.StateChange).
//
// Tencent POSTs JSON to the callback URL configured in its console, with
// the query SdkAppid, CallbackCommand, contenttype, ClientIP, OptPlatform
// and, with callback authentication on, RequestTime (unix seconds) and
// Sign = hex(sha256(token + RequestTime)). The answer is HTTP 200 with
// {"ActionStatus":"OK","ErrorCode":0,"ErrorInfo":""} within 2 s; a refusal
// answers ActionStatus FAIL, a non-zero ErrorCode and a stable reason in
// ErrorInfo, with an HTTP status that says why (401 for the signature and
// the time, 400 for a malformed body, 405 for a method other than POST).

// TIMCallbackPath is where the API listener serves Tencent IM's callbacks.
const TIMCallbackPath = "/tim/callback"

// Limits of the callback.
const (
	// timCallbackSkew is how far RequestTime may be from the service's
	// clock: a captured callback cannot be replayed later than this.
	timCallbackSkew = 5 * time.Minute
	// maxTIMCallbackBytes bounds a callback body (a state change is a few hundred bytes).
	maxTIMCallbackBytes = 64 << 10
)

// Presence is what the callback tells about users (a *cell.Registry).
// Each returns the rooms of this node it marked.
type Presence interface {
	UserOnline(user, eventAt int64) int
	UserOffline(user, eventAt int64) int
}

// TIMForwardedHeader marks a callback one node passed on to the others.
const TIMForwardedHeader = "X-Room-Forwarded"

// TIMCallback returns the handler of Tencent IM's callbacks. token is the
// callback authentication token set in Tencent's console (required);
// sdkAppID, when not 0, must be the SdkAppid of every callback. State
// changes reach presence: Login marks the user seen, Logout and Disconnect
// offline, in the rooms loaded on this node; other callback commands are
// acknowledged and ignored.
//
// Tencent calls one address, so one node of a fleet gets each callback:
// fanout, when set, passes a state change that Tencent sent (not one a node
// passed on, marked TIMForwardedHeader) to the other nodes, as it came: its
// query and body, so each checks Tencent's signature itself and no node
// trusts another.
//
// Refusals are logged at most once a second, with how many were held back:
// the URL faces the internet, and a stream of unsigned posts would
// otherwise write a line each.
func TIMCallback(token string, sdkAppID uint64, presence Presence, fanout func(rawQuery string, body []byte), now func() time.Time, log *slog.Logger) http.Handler {
	refusals := &obs.Sometimes{Every: time.Second}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			timAnswer(w, http.StatusMethodNotAllowed, "method_not_allowed")
			return
		}
		q := r.URL.Query()
		if reason := checkTIMSign(token, q.Get("RequestTime"), q.Get("Sign"), now()); reason != "" {
			if ok, held := refusals.Allow(now()); ok {
				log.Warn("Tencent IM callback refused", "reason", reason, "client", r.RemoteAddr, "held_back", held)
			}
			timAnswer(w, http.StatusUnauthorized, reason)
			return
		}
		if sdkAppID != 0 && q.Get("SdkAppid") != strconv.FormatUint(sdkAppID, 10) {
			timAnswer(w, http.StatusUnauthorized, "wrong_sdkappid")
			return
		}
		body, err := io.ReadAll(io.LimitReader(r.Body, maxTIMCallbackBytes+1))
		if err != nil || len(body) > maxTIMCallbackBytes {
			timAnswer(w, http.StatusBadRequest, "malformed_request")
			return
		}
		var cb struct {
			CallbackCommand string `json:"CallbackCommand"`
			EventTime       int64  `json:"EventTime"`
			Info            struct {
				Action    string `json:"Action"`
				ToAccount string `json:"To_Account"`
			} `json:"Info"`
		}
		if json.Unmarshal(body, &cb) != nil {
			timAnswer(w, http.StatusBadRequest, "malformed_request")
			return
		}
		if cb.CallbackCommand != "State.StateChange" && q.Get("CallbackCommand") != "State.StateChange" {
			timAnswer(w, http.StatusOK, "")
			return
		}
		user, err := strconv.ParseInt(cb.Info.ToAccount, 10, 64)
		if err != nil || user <= 0 || strconv.FormatInt(user, 10) != cb.Info.ToAccount {
			// An account that is no user of this service: an admin
			// identifier, or one ParseInt reads as a user's that is
			// another account to Tencent ("010", "+10").
			timAnswer(w, http.StatusOK, "")
			return
		}
		if fanout != nil && r.Header.Get(TIMForwardedHeader) == "" {
			fanout(r.URL.RawQuery, body)
		}
		switch cb.Info.Action {
		case "Login":
			presence.UserOnline(user, cb.EventTime)
		case "Logout", "Disconnect":
			presence.UserOffline(user, cb.EventTime)
		}
		timAnswer(w, http.StatusOK, "")
	})
}

// checkTIMSign checks Tencent's callback authentication: RequestTime within
// timCallbackSkew of now, and Sign = hex(sha256(token + RequestTime)),
// compared in constant time. It returns the reason of a refusal, "" when
// the callback is Tencent's.
func checkTIMSign(token, requestTime, sign string, now time.Time) string {
	if requestTime == "" || sign == "" {
		return "missing_signature"
	}
	secs, err := strconv.ParseInt(requestTime, 10, 64)
	if err != nil {
		return "bad_request_time"
	}
	if d := now.Sub(time.Unix(secs, 0)); d > timCallbackSkew || d < -timCallbackSkew {
		return "stale_request_time"
	}
	if subtle.ConstantTimeCompare([]byte(TIMSign(token, requestTime)), []byte(sign)) != 1 {
		return "bad_signature"
	}
	return ""
}

// TIMSign is the Sign Tencent sends with requestTime for token: the
// lower-case hex of sha256(token + requestTime).
func TIMSign(token, requestTime string) string {
	sum := sha256.Sum256([]byte(token + requestTime))
	return hex.EncodeToString(sum[:])
}

// timAnswer writes Tencent's callback answer: OK when reason is "",
// otherwise FAIL with the reason in ErrorInfo.
func timAnswer(w http.ResponseWriter, status int, reason string) {
	ans := struct {
		ActionStatus string `json:"ActionStatus"`
		ErrorCode    int    `json:"ErrorCode"`
		ErrorInfo    string `json:"ErrorInfo"`
	}{ActionStatus: "OK"}
	if reason != "" {
		ans.ActionStatus, ans.ErrorCode, ans.ErrorInfo = "FAIL", 1, reason
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(ans)
}
