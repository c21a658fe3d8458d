package rpc_test

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/golang-jwt/jwt/v5"
	"google.golang.org/protobuf/reflect/protoreflect"

	"hyapp/room-service/auth"
	roomv1 "hyapp/room-service/gen/room/v1"
	"hyapp/room-service/gen/room/v1/roomv1connect"
	"hyapp/room-service/internal/servicetest"
	"hyapp/room-service/rpc"
)

// scopeToken is the token of the test caller holding scope s (and act-as-any).
func scopeToken(s auth.Scope) string { return "token-of-" + string(s) + strings.Repeat("x", 32) }

// userSecret signs the test's user assertions.
const userSecret = "user-assertion-secret-0123456789abcdef"

// assertion returns a user assertion for user, valid for a minute.
func assertion(t *testing.T, user int64) string {
	t.Helper()
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{
		"sub": fmt.Sprint(user), "aud": auth.Audience, "exp": time.Now().Add(time.Minute).Unix(),
	}).SignedString([]byte(userSecret))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// startScoped starts the stack with one caller per scope (each with
// act-as-any too), the gateway "gw" (room only: it asserts its users),
// "staff" (room and platform, asserting users) and the full test token;
// audit lines go to the returned buffer.
func startScoped(t *testing.T) (*stack, *servicetest.Buffer) {
	t.Helper()
	callers := []auth.Caller{{Name: "test", Hash: auth.HashToken(token), Scopes: auth.Scopes}}
	for _, s := range auth.Scopes {
		callers = append(callers, auth.Caller{Name: "only-" + string(s), Hash: auth.HashToken(scopeToken(s)), Scopes: []auth.Scope{s, auth.ActAsAny}})
	}
	callers = append(callers,
		auth.Caller{Name: "gw", Hash: auth.HashToken("gw" + scopeToken(auth.Room)), Scopes: []auth.Scope{auth.Room}},
		auth.Caller{Name: "staff", Hash: auth.HashToken("staff" + scopeToken(auth.Room)), Scopes: []auth.Scope{auth.Room, auth.Platform}})
	users, err := auth.ParseUserKeys("hs256:" + userSecret)
	if err != nil {
		t.Fatal(err)
	}
	logs := &servicetest.Buffer{}
	return startWith(t, rpc.Options{Callers: callers, Users: users}, slog.New(slog.NewTextHandler(logs, nil))), logs
}

// TestEveryMethodChecksItsCaller walks every method of every service in
// the API's descriptors, so a new RPC cannot skip the check: without a
// credential and with a wrong one it is unauthenticated; with a caller
// that holds another scope it is missing_scope; exactly one scope admits
// it, and it is the one this test expects.
func TestEveryMethodChecksItsCaller(t *testing.T) {
	s, _ := startScoped(t)
	want := map[protoreflect.FullName]auth.Scope{
		roomv1connect.RoomServiceName:     auth.Room,
		roomv1connect.OperatorServiceName: auth.Operator,
	}
	wantMethod := map[string]auth.Scope{
		roomv1connect.WalletServiceCreditCoinsProcedure:       auth.WalletCredit,
		roomv1connect.WalletServiceGetBalanceProcedure:        auth.Room,
		roomv1connect.WalletServiceListWalletEntriesProcedure: auth.Room,
	}
	call := func(path, tok string) (string, string) {
		h := http.Header{"Content-Type": {"application/json"}}
		if tok != "" {
			h.Set(rpc.Authorization(tok))
		}
		_, code, reason := s.post(t, path, strings.NewReader("{}"), h)
		return code, reason
	}
	services := roomv1.File_room_v1_room_proto.Services()
	methods := 0
	for i := range services.Len() {
		svc := services.Get(i)
		for j := range svc.Methods().Len() {
			md := svc.Methods().Get(j)
			path := "/" + string(svc.FullName()) + "/" + string(md.Name())
			methods++
			if code, reason := call(path, ""); code != "unauthenticated" || reason != "unauthenticated" {
				t.Errorf("%s without a credential: %s %s", path, code, reason)
			}
			if code, reason := call(path, "not-"+token); code != "unauthenticated" || reason != "unauthenticated" {
				t.Errorf("%s with a wrong credential: %s %s", path, code, reason)
			}
			var admitted []auth.Scope
			for _, sc := range auth.Scopes {
				code, reason := call(path, scopeToken(sc))
				switch {
				case code == "permission_denied" && reason == "missing_scope":
				case code == "unauthenticated":
					t.Errorf("%s with scope %s: %s %s", path, sc, code, reason)
				default:
					admitted = append(admitted, sc)
				}
			}
			expect, ok := wantMethod[path]
			if !ok {
				expect = want[svc.FullName()]
			}
			// act-as-any alone admits nothing: each test caller holds it.
			if len(admitted) != 1 || admitted[0] != expect {
				t.Errorf("%s is admitted by scopes %v, want exactly [%s]", path, admitted, expect)
			}
		}
	}
	if methods < 30 {
		t.Fatalf("walked %d methods; the descriptors were not read", methods)
	}
}

// withHeaders makes a client send the header pairs.
func withHeaders(kv ...string) connect.ClientOption {
	return connect.WithInterceptors(connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			for i := 0; i+1 < len(kv); i += 2 {
				req.Header().Set(kv[i], kv[i+1])
			}
			return next(ctx, req)
		}
	}))
}

// TestTheActingUserIsAsserted: a caller without act-as-any acts only for
// the user its assertion names; every refusal has its reason and changes
// nothing; platform rights need the platform scope.
func TestTheActingUserIsAsserted(t *testing.T) {
	s, logs := startScoped(t)
	ctx := context.Background()
	must(t, s.rooms.CreateRoom, &roomv1.CreateRoomRequest{RoomId: "r1", CommandId: "c1", OperatorUserId: 1, OwnerUserId: 1, SeatCount: 8})
	gw := func(kv ...string) roomv1connect.RoomServiceClient {
		return roomv1connect.NewRoomServiceClient(s.h1, s.base, withToken("gw"+scopeToken(auth.Room)), withHeaders(kv...))
	}
	join := func(user int64) *roomv1.JoinRoomRequest {
		return &roomv1.JoinRoomRequest{RoomId: "r1", CommandId: fmt.Sprint("join-", user), OperatorUserId: user}
	}
	_, err := gw().JoinRoom(ctx, connect.NewRequest(join(7)))
	wantErr(t, err, connect.CodeUnauthenticated, "user_assertion_required")
	_, err = gw(rpc.UserHeader, "not.a.jwt").JoinRoom(ctx, connect.NewRequest(join(7)))
	wantErr(t, err, connect.CodeUnauthenticated, "user_assertion_invalid")
	_, err = gw(rpc.UserHeader, assertion(t, 8)).JoinRoom(ctx, connect.NewRequest(join(7)))
	wantErr(t, err, connect.CodePermissionDenied, "operator_mismatch")
	if v := s.snapshot(t, "r1").GetRoomVersion(); v != 1 {
		t.Fatalf("refused joins changed the room: version %d", v)
	}
	if _, err := gw(rpc.UserHeader, assertion(t, 7)).JoinRoom(ctx, connect.NewRequest(join(7))); err != nil {
		t.Fatalf("join as the asserted user: %v", err)
	}
	// Reads that act for nobody need no assertion.
	if _, err := gw().GetRoomSnapshot(ctx, connect.NewRequest(&roomv1.GetRoomSnapshotRequest{RoomId: "r1"})); err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	// A balance is the asserted user's own.
	wallets := roomv1connect.NewWalletServiceClient(s.h1, s.base, withToken("gw"+scopeToken(auth.Room)), withHeaders(rpc.UserHeader, assertion(t, 7)))
	_, err = wallets.GetBalance(ctx, connect.NewRequest(&roomv1.GetBalanceRequest{UserId: 8}))
	wantErr(t, err, connect.CodePermissionDenied, "operator_mismatch")
	if _, err := wallets.GetBalance(ctx, connect.NewRequest(&roomv1.GetBalanceRequest{UserId: 7})); err != nil {
		t.Fatalf("own balance: %v", err)
	}

	// Platform staff (platformUser) close another's room only through a
	// caller with the platform scope.
	closeReq := &roomv1.CloseRoomRequest{RoomId: "r1", CommandId: "close", OperatorUserId: platformUser}
	_, err = gw(rpc.UserHeader, assertion(t, platformUser)).CloseRoom(ctx, connect.NewRequest(closeReq))
	wantErr(t, err, connect.CodePermissionDenied, "permission_denied")
	staff := roomv1connect.NewRoomServiceClient(s.h1, s.base, withToken("staff"+scopeToken(auth.Room)), withHeaders(rpc.UserHeader, assertion(t, platformUser)))
	if _, err := staff.CloseRoom(ctx, connect.NewRequest(closeReq)); err != nil {
		t.Fatalf("staff close: %v", err)
	}
	if !strings.Contains(logs.String(), "msg=audit caller=staff scope=platform user=900 command=CloseRoom room_id=r1") {
		t.Errorf("no audit line for the platform action:\n%s", logs.String())
	}

	// Top-ups are audited with their caller.
	topup := roomv1connect.NewWalletServiceClient(s.h1, s.base, withToken(scopeToken(auth.WalletCredit)))
	if _, err := topup.CreditCoins(ctx, connect.NewRequest(&roomv1.CreditCoinsRequest{UserId: 7, Amount: 5, IdempotencyKey: "k1"})); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), "msg=audit caller=only-wallet.credit scope=wallet.credit user=7 procedure=/room.v1.WalletService/CreditCoins outcome=ok") {
		t.Errorf("no audit line for the credit:\n%s", logs.String())
	}
}

// TestOversizedRequestsAreRefusedBeforeWork: a body over the limit, and a
// small gzip body that inflates past it, are refused with
// request_too_large; the room is unchanged.
func TestOversizedRequestsAreRefusedBeforeWork(t *testing.T) {
	s := start(t)
	must(t, s.rooms.CreateRoom, &roomv1.CreateRoomRequest{RoomId: "r1", CommandId: "c1", OperatorUserId: 1, OwnerUserId: 1, SeatCount: 8})
	big := `{"room_id":"r1","command_id":"big","operator_user_id":7,"nickname":"` + strings.Repeat("x", rpc.DefaultMaxRequestBytes) + `"}`
	// The server stops reading the body: the connection is not reused.
	h := http.Header{"Content-Type": {"application/json"}, "Connection": {"close"}}
	h.Set(rpc.Authorization(token))
	if _, code, reason := s.post(t, "/room.v1.RoomService/JoinRoom", strings.NewReader(big), h); code != "resource_exhausted" || reason != "request_too_large" {
		t.Errorf("a large body: %s %s", code, reason)
	}
	var bomb bytes.Buffer
	zw := gzip.NewWriter(&bomb)
	_, _ = zw.Write([]byte(`{"room_id":"r1","command_id":"bomb","operator_user_id":7,"nickname":"`))
	_, _ = zw.Write(bytes.Repeat([]byte("x"), 64<<20))
	_, _ = zw.Write([]byte(`"}`))
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	if bomb.Len() > 200<<10 {
		t.Fatalf("the bomb is %d bytes compressed", bomb.Len())
	}
	h.Set("Content-Encoding", "gzip")
	if _, code, reason := s.post(t, "/room.v1.RoomService/JoinRoom", &bomb, h); code != "resource_exhausted" || reason != "request_too_large" {
		t.Errorf("a gzip bomb: %s %s", code, reason)
	}
	// Without a credential the body is never read: the answer comes while
	// the caller has sent only its first bytes and waits to send the rest
	// (a server that read the body would wait with it).
	h.Del("Authorization")
	conn, err := net.Dial("tcp", strings.TrimPrefix(s.base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /room.v1.RoomService/JoinRoom HTTP/1.1\r\nHost: room\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(big), big[:4096])
	_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	if res, err := http.ReadResponse(bufio.NewReader(conn), nil); err != nil || res.StatusCode != http.StatusUnauthorized {
		t.Errorf("a large body without a credential, 4 KiB of it sent: %v %v; want 401 before the rest", res, err)
	}
	if v := s.snapshot(t, "r1").GetRoomVersion(); v != 1 {
		t.Fatalf("refused requests changed the room: version %d", v)
	}
	// gRPC, whose message frame names its size, is refused the same way.
	grpc := roomv1connect.NewRoomServiceClient(s.h2c, s.base, connect.WithGRPC(), withToken(token))
	_, err = grpc.JoinRoom(t.Context(), connect.NewRequest(&roomv1.JoinRoomRequest{RoomId: "r1", CommandId: "big", OperatorUserId: 7,
		Nickname: strings.Repeat("x", rpc.DefaultMaxRequestBytes)}))
	wantErr(t, err, connect.CodeResourceExhausted, "request_too_large")
	_, err = roomv1connect.NewRoomServiceClient(s.h2c, s.base, connect.WithGRPC(), withToken(token), connect.WithSendGzip()).
		JoinRoom(t.Context(), connect.NewRequest(&roomv1.JoinRoomRequest{RoomId: "r1", CommandId: "bomb", OperatorUserId: 7,
			Nickname: strings.Repeat("x", 8*rpc.DefaultMaxRequestBytes)}))
	wantErr(t, err, connect.CodeResourceExhausted, "request_too_large")
	if v := s.snapshot(t, "r1").GetRoomVersion(); v != 1 {
		t.Fatalf("refused gRPC requests changed the room: version %d", v)
	}
	// A small compressed request is served.
	var small bytes.Buffer
	zw = gzip.NewWriter(&small)
	_, _ = zw.Write([]byte(`{"room_id":"r1","command_id":"small","operator_user_id":7}`))
	_ = zw.Close()
	h.Set(rpc.Authorization(token))
	if status, code, reason := s.post(t, "/room.v1.RoomService/JoinRoom", &small, h); status != http.StatusOK {
		t.Errorf("a small gzip request: %d %s %s", status, code, reason)
	}
}
