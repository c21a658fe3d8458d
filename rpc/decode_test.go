package rpc_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	roomv1 "hyapp/room-service/gen/room/v1"
	"hyapp/room-service/gen/room/v1/roomv1connect"
	"hyapp/room-service/rpc"
)

// postJSON sends body as a Connect JSON call with plain net/http and
// returns the HTTP status and the error's code and ErrorInfo reason.
func (s *stack) postJSON(t *testing.T, path, body string, auth bool) (status int, code, reason string) {
	t.Helper()
	h := http.Header{"Content-Type": {"application/json"}}
	if auth {
		h.Set(rpc.Authorization(token))
	}
	return s.post(t, path, strings.NewReader(body), h)
}

// post sends body with header to path with plain net/http and returns the
// HTTP status and the Connect error's code and ErrorInfo reason.
func (s *stack) post(t *testing.T, path string, body io.Reader, header http.Header) (status int, code, reason string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, s.base+path, body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header = header
	res, err := s.h1.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	var wire struct {
		Code    string `json:"code"`
		Details []struct {
			Type  string `json:"type"`
			Value string `json:"value"`
		} `json:"details"`
	}
	if res.StatusCode != http.StatusOK {
		if err := json.Unmarshal(raw, &wire); err != nil {
			t.Fatalf("status %d, body %q is not a Connect error: %v", res.StatusCode, raw, err)
		}
	}
	for _, d := range wire.Details {
		if d.Type != "google.rpc.ErrorInfo" {
			continue
		}
		b, err := base64.RawStdEncoding.DecodeString(strings.TrimRight(d.Value, "="))
		if err != nil {
			t.Fatalf("detail value %q: %v", d.Value, err)
		}
		var info errdetails.ErrorInfo
		if err := proto.Unmarshal(b, &info); err != nil {
			t.Fatal(err)
		}
		if info.GetDomain() == rpc.ErrorDomain {
			reason = info.GetReason()
		}
	}
	return res.StatusCode, wire.Code, reason
}

// TestUndecodableJSONIsRefusedWithAReason: bodies that do not decode as
// their request message are refused with invalid_argument and the reason
// malformed_request, and change nothing.
func TestUndecodableJSONIsRefusedWithAReason(t *testing.T) {
	s := start(t)
	seed(t, s)
	tests := []struct {
		name, path, body string
	}{
		{"malformed JSON", roomv1connect.RoomServiceJoinRoomProcedure, `{"room_id": "r1", "command_id": "c",`},
		{"not an object", roomv1connect.RoomServiceJoinRoomProcedure, `[1, 2]`},
		{"empty body", roomv1connect.RoomServiceJoinRoomProcedure, ``},
		{"string for an int64", roomv1connect.RoomServiceJoinRoomProcedure, `{"room_id": "r1", "command_id": "c", "operator_user_id": "seven"}`},
		{"object for a string", roomv1connect.RoomServiceJoinRoomProcedure, `{"room_id": {"id": "r1"}, "command_id": "c", "operator_user_id": 5}`},
		{"fraction for an int64", roomv1connect.RoomServiceJoinRoomProcedure, `{"room_id": "r1", "command_id": "c", "operator_user_id": 5.5}`},
		{"int32 out of range", roomv1connect.RoomServiceCreateRoomProcedure, `{"room_id": "fresh", "command_id": "c", "operator_user_id": 1, "owner_user_id": 1, "seat_count": 99999999999}`},
		{"int64 out of range", roomv1connect.RoomServiceJoinRoomProcedure, `{"room_id": "r1", "command_id": "c", "operator_user_id": 99999999999999999999}`},
		{"unknown enum name", roomv1connect.RoomServiceListRoomsProcedure, `{"status": "ROOM_STATUS_FOO"}`},
		{"misspelt field", roomv1connect.RoomServiceKickUserProcedure, `{"room_id": "r1", "command_id": "k", "operator_user_id": 1, "target_user_id": 3, "duration_secs": 60}`},
		{"misspelt operator", roomv1connect.RoomServiceJoinRoomProcedure, `{"room_id": "r1", "command_id": "c", "operater_user_id": 5}`},
		{"invalid UTF-8", roomv1connect.RoomServiceJoinRoomProcedure, "{\"room_id\": \"r1\", \"command_id\": \"c\", \"operator_user_id\": 5, \"nickname\": \"\xff\"}"},
		{"wallet", roomv1connect.WalletServiceCreditCoinsProcedure, `{"user_id": 5, "amount": "lots", "idempotency_key": "k"}`},
		{"operator service", roomv1connect.OperatorServiceListCommandsProcedure, `{"room_id": "r1", "limit": 1e12}`},
	}
	before := s.world(t, "r1", "shut")
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, code, reason := s.postJSON(t, tt.path, tt.body, true)
			if status != http.StatusBadRequest || code != "invalid_argument" || reason != "malformed_request" {
				t.Fatalf("got HTTP %d, code %q, reason %q; want 400, invalid_argument, malformed_request", status, code, reason)
			}
			if after := s.world(t, "r1", "shut"); after != before {
				t.Fatalf("a refused request changed the service:\nbefore:\n%s\nafter:\n%s", before, after)
			}
		})
	}
	if b := must(t, s.wallets.GetBalance, &roomv1.GetBalanceRequest{UserId: 5}).GetBalance(); b != 0 {
		t.Fatalf("a refused credit left user 5 a balance of %d", b)
	}

	// The same shape, well formed, is served: the refusals above are about decoding.
	if status, _, reason := s.postJSON(t, roomv1connect.RoomServiceKickUserProcedure,
		`{"room_id": "r1", "command_id": "k", "operator_user_id": 1, "target_user_id": 3, "duration_seconds": 60}`, true); status != http.StatusOK {
		t.Fatalf("a well-formed kick: HTTP %d, reason %q", status, reason)
	}
}

// TestRefusalsBeforeTheHandlerCarryAReason: a missing token is refused
// before the body is decoded, and a path that is no procedure is refused
// with unknown_procedure, both with an ErrorInfo reason.
func TestRefusalsBeforeTheHandlerCarryAReason(t *testing.T) {
	s := start(t)
	seed(t, s)
	before := s.world(t, "r1")
	tests := []struct {
		name, path, body string
		auth             bool
		status           int
		code, reason     string
	}{
		{"no token, malformed body", roomv1connect.RoomServiceJoinRoomProcedure, `{"room_id":`, false, http.StatusUnauthorized, "unauthenticated", "unauthenticated"},
		{"no token, well formed", roomv1connect.RoomServiceJoinRoomProcedure, `{"room_id": "r1", "command_id": "c", "operator_user_id": 5}`, false, http.StatusUnauthorized, "unauthenticated", "unauthenticated"},
		{"unknown method", "/room.v1.RoomService/JoinRooms", `{}`, true, http.StatusNotImplemented, "unimplemented", "unknown_procedure"},
		{"unknown service", "/room.v1.NoService/JoinRoom", `{}`, true, http.StatusNotImplemented, "unimplemented", "unknown_procedure"},
		{"unknown path", "/nothing", `{}`, false, http.StatusNotImplemented, "unimplemented", "unknown_procedure"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, code, reason := s.postJSON(t, tt.path, tt.body, tt.auth)
			if status != tt.status || code != tt.code || reason != tt.reason {
				t.Fatalf("got HTTP %d, code %q, reason %q; want %d, %q, %q", status, code, reason, tt.status, tt.code, tt.reason)
			}
			if after := s.world(t, "r1"); after != before {
				t.Fatalf("a refused request changed the service:\nbefore:\n%s\nafter:\n%s", before, after)
			}
		})
	}

	grpc := connect.NewClient[[]byte, roomv1.JoinRoomResponse](s.h2c, s.base+"/room.v1.RoomService/JoinRooms",
		connect.WithGRPC(), connect.WithCodec(rawCodec{}), withToken(token))
	empty := []byte{}
	_, err := grpc.CallUnary(context.Background(), connect.NewRequest(&empty))
	wantErr(t, err, connect.CodeUnimplemented, "unknown_procedure")
}

// TestUninflatableGzipIsRefusedWithAReason: a body that claims gzip but
// does not inflate does not decode: malformed_request, like bad JSON, and
// nothing changes.
func TestUninflatableGzipIsRefusedWithAReason(t *testing.T) {
	s := start(t)
	seed(t, s)
	var full bytes.Buffer
	w := gzip.NewWriter(&full)
	_, _ = w.Write([]byte(`{"room_id": "r1", "command_id": "cz", "operator_user_id": 5}`))
	_ = w.Close()
	before := s.world(t, "r1")
	for _, tc := range []struct {
		name string
		body []byte
	}{
		{"not gzip", []byte("definitely not gzip")},
		{"truncated gzip", full.Bytes()[:20]},
		{"a gzip header alone", full.Bytes()[:10]},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := http.Header{"Content-Type": {"application/json"}, "Content-Encoding": {"gzip"}}
			h.Set(rpc.Authorization(token))
			status, code, reason := s.post(t, roomv1connect.RoomServiceJoinRoomProcedure, bytes.NewReader(tc.body), h)
			if status != http.StatusBadRequest || code != "invalid_argument" || reason != "malformed_request" {
				t.Fatalf("got HTTP %d, code %q, reason %q; want 400, invalid_argument, malformed_request", status, code, reason)
			}
			if after := s.world(t, "r1"); after != before {
				t.Fatalf("a refused request changed the service:\nbefore:\n%s\nafter:\n%s", before, after)
			}
		})
	}
	// The whole body inflates and is served.
	h := http.Header{"Content-Type": {"application/json"}, "Content-Encoding": {"gzip"}}
	h.Set(rpc.Authorization(token))
	if status, code, reason := s.post(t, roomv1connect.RoomServiceJoinRoomProcedure, bytes.NewReader(full.Bytes()), h); status != http.StatusOK {
		t.Fatalf("the whole gzip body: HTTP %d, %q %q", status, code, reason)
	}
}

// TestUndecodableProtobufIsRefusedWithAReason sends bodies built on the
// wire over gRPC: each is refused with malformed_request and changes nothing.
func TestUndecodableProtobufIsRefusedWithAReason(t *testing.T) {
	s := start(t)
	seed(t, s)
	join := func(extra []byte) []byte {
		var b []byte
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendString(b, "r1")
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		b = protowire.AppendString(b, "c")
		b = protowire.AppendTag(b, 3, protowire.VarintType)
		b = protowire.AppendVarint(b, 5)
		return append(b, extra...)
	}
	tests := []struct {
		name string
		body []byte
	}{
		{"truncated", join(nil)[:5]},
		{"bad wire type", join([]byte{0x0f})},
		{"invalid UTF-8", join(protowire.AppendString(protowire.AppendTag(nil, 4, protowire.BytesType), "bad \xff name"))},
		{"unknown field", join(protowire.AppendVarint(protowire.AppendTag(nil, 99, protowire.VarintType), 1))},
	}
	client := connect.NewClient[[]byte, roomv1.JoinRoomResponse](s.h2c, s.base+roomv1connect.RoomServiceJoinRoomProcedure,
		connect.WithGRPC(), connect.WithCodec(rawCodec{}), withToken(token))
	before := s.world(t, "r1")
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := client.CallUnary(context.Background(), connect.NewRequest(&tt.body))
			wantErr(t, err, connect.CodeInvalidArgument, "malformed_request")
			if after := s.world(t, "r1"); after != before {
				t.Fatalf("a refused request changed the service:\nbefore:\n%s\nafter:\n%s", before, after)
			}
		})
	}
	ok := join(nil)
	if _, err := client.CallUnary(context.Background(), connect.NewRequest(&ok)); err != nil {
		t.Fatalf("the same request without the fault: %v", err)
	}
}

// TestCreditCoinsRetry: a retried credit answers the balance right after
// the original credit; its key reused for another user or amount is
// refused with idempotency_key_conflict and changes nothing.
func TestCreditCoinsRetry(t *testing.T) {
	s := start(t)
	credit := func(user, amount int64, key string) *roomv1.CreditCoinsRequest {
		return &roomv1.CreditCoinsRequest{UserId: user, Amount: amount, IdempotencyKey: key}
	}
	steps := []struct {
		req  *roomv1.CreditCoinsRequest
		want int64
		dup  bool
	}{
		{credit(7, 100, "k1"), 100, false},
		{credit(7, 50, "k2"), 150, false},
		{credit(7, 100, "k1"), 100, true},
	}
	for _, st := range steps {
		if res := must(t, s.wallets.CreditCoins, st.req); res.GetBalance() != st.want || res.GetDuplicate() != st.dup {
			t.Fatalf("%v: %v; want balance %d, duplicate %v", st.req, res, st.want, st.dup)
		}
	}
	for _, req := range []*roomv1.CreditCoinsRequest{credit(7, 99, "k1"), credit(8, 100, "k1")} {
		_, err := s.wallets.CreditCoins(context.Background(), connect.NewRequest(req))
		wantErr(t, err, connect.CodeAlreadyExists, "idempotency_key_conflict")
	}
	for user, want := range map[int64]int64{7: 150, 8: 0} {
		if b := must(t, s.wallets.GetBalance, &roomv1.GetBalanceRequest{UserId: user}).GetBalance(); b != want {
			t.Fatalf("balance of %d: %d, want %d", user, b, want)
		}
	}
}
