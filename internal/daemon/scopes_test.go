package daemon

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/golang-jwt/jwt/v5"

	roomv1 "hyapp/room-service/gen/room/v1"
	"hyapp/room-service/gen/room/v1/roomv1connect"
	"hyapp/room-service/internal/poll"
	"hyapp/room-service/internal/servicetest"
	"hyapp/room-service/rpc"
	"hyapp/room-service/store/mysql/mysqltest"
)

// Credentials of the scope tests.
const (
	gatewayToken = "gateway-token-0123456789abcdef-0123"
	topupToken   = "topup-token-0123456789abcdef-012345"
	userSecret   = "user-secret-0123456789abcdef-0123456"
)

// scopeFlags configure the service token, a gateway that asserts its
// users, and a top-up service.
var scopeFlags = []string{"-token", serviceToken, "-tokens", "gw=" + gatewayToken + ":room;topup=" + topupToken + ":wallet.credit",
	"-user-jwt-keys", "hs256:" + userSecret}

// userAssertion signs an assertion for user, valid for a minute.
func userAssertion(t *testing.T, user int64) string {
	t.Helper()
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{
		"sub": fmt.Sprint(user), "aud": "room-service", "exp": time.Now().Add(time.Minute).Unix(),
	}).SignedString([]byte(userSecret))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// headers makes a client send the header pairs on every call.
func headers(kv ...string) connect.ClientOption {
	return connect.WithInterceptors(connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			for i := 0; i+1 < len(kv); i += 2 {
				req.Header().Set(kv[i], kv[i+1])
			}
			return next(ctx, req)
		}
	}))
}

func wantReason(t *testing.T, what string, err error, code connect.Code, reason string) {
	t.Helper()
	if connect.CodeOf(err) != code || rpc.Reason(err) != reason {
		t.Fatalf("%s: %v (reason %q); want %v %s", what, err, rpc.Reason(err), code, reason)
	}
}

// TestCallersHaveTheirScopes: the service token keeps working for rooms
// (acting as anyone) and for nothing else; the gateway acts only for the
// user it asserts; the top-up service credits; the admin surface and the
// development endpoints are not on the API port of a service with
// credentials; the admin listener serves /metrics.
func TestCallersHaveTheirScopes(t *testing.T) {
	m, _ := runMain(t, t.TempDir(), scopeFlags...)
	ctx := context.Background()
	base := "http://" + m.Addr
	service := roomv1connect.NewRoomServiceClient(http.DefaultClient, base, bearer(serviceToken))
	if _, err := service.CreateRoom(ctx, connect.NewRequest(&roomv1.CreateRoomRequest{RoomId: "r1", CommandId: "c1", OperatorUserId: 1, OwnerUserId: 1, SeatCount: 8})); err != nil {
		t.Fatalf("create with the service token: %v", err)
	}
	_, err := roomv1connect.NewWalletServiceClient(http.DefaultClient, base, bearer(serviceToken)).
		CreditCoins(ctx, connect.NewRequest(&roomv1.CreditCoinsRequest{UserId: 7, Amount: 1_000_000, IdempotencyKey: "mint"}))
	wantReason(t, "credit with the service token", err, connect.CodePermissionDenied, "missing_scope")
	_, err = roomv1connect.NewOperatorServiceClient(http.DefaultClient, base, bearer(serviceToken)).
		RequeueDeadOutbox(ctx, connect.NewRequest(&roomv1.RequeueDeadOutboxRequest{}))
	wantReason(t, "requeue with the service token", err, connect.CodePermissionDenied, "missing_scope")

	topup := roomv1connect.NewWalletServiceClient(http.DefaultClient, base, bearer(topupToken))
	if res, err := topup.CreditCoins(ctx, connect.NewRequest(&roomv1.CreditCoinsRequest{UserId: 7, Amount: 100, IdempotencyKey: "t1"})); err != nil || res.Msg.GetBalance() != 100 {
		t.Fatalf("top-up: %v %v", res, err)
	}

	gw := roomv1connect.NewRoomServiceClient(http.DefaultClient, base, bearer(gatewayToken), headers(rpc.UserHeader, userAssertion(t, 7)))
	_, err = gw.JoinRoom(ctx, connect.NewRequest(&roomv1.JoinRoomRequest{RoomId: "r1", CommandId: "j8", OperatorUserId: 8}))
	wantReason(t, "the gateway joining another user", err, connect.CodePermissionDenied, "operator_mismatch")
	if _, err := gw.JoinRoom(ctx, connect.NewRequest(&roomv1.JoinRoomRequest{RoomId: "r1", CommandId: "j7", OperatorUserId: 7})); err != nil {
		t.Fatalf("the gateway joining its user: %v", err)
	}
	_, err = gw.SendGift(ctx, connect.NewRequest(&roomv1.SendGiftRequest{RoomId: "r1", CommandId: "g1", OperatorUserId: 1,
		ReceiverUserIds: []int64{7}, GiftId: "rose", Count: 1}))
	wantReason(t, "the gateway spending another user's coins", err, connect.CodePermissionDenied, "operator_mismatch")

	for _, path := range []string{"/metrics", "/local/", "/local/faults", "/debug/pprof/"} {
		res, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		_ = res.Body.Close()
		if res.StatusCode == http.StatusOK {
			t.Errorf("%s is served on the API port of a service with credentials", path)
		}
	}
	res, err := http.Get("http://" + m.AdminAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	_ = res.Body.Close()
	if res.StatusCode != http.StatusOK || !strings.Contains(string(body), "room_commands_total") {
		t.Fatalf("admin /metrics: %d", res.StatusCode)
	}
	if res, err = http.Get("http://" + m.AdminAddr + "/debug/pprof/cmdline"); err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("admin pprof: %v %v", res, err)
	}
	_ = res.Body.Close()
	http.DefaultClient.CloseIdleConnections()
}

// TestASlowBodyIsCutOff: a request whose body trickles in is closed by
// the server once the read timeout passes, without an answer.
func TestASlowBodyIsCutOff(t *testing.T) {
	m, _ := runMain(t, t.TempDir(), "-http-read-timeout", "1s")
	c, err := net.Dial("tcp", m.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := fmt.Fprintf(c, "POST /room.v1.RoomService/JoinRoom HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"); err != nil {
		t.Fatal(err)
	}
	// The client keeps sending a byte now and then, as the attack does;
	// the server must end the connection anyway.
	closed := make(chan error, 1)
	go func() {
		_, err := io.Copy(io.Discard, bufio.NewReader(c))
		closed <- err
	}()
	poll.Until(t, 30*time.Second, "the server closed the slow connection", func() error {
		select {
		case <-closed:
			return nil
		default:
			_, _ = c.Write([]byte(" "))
			return errors.New("still open")
		}
	})
}

// TestDevelopmentEndpointsRefuseCrossSiteWrites: without credentials on
// loopback, /local/faults takes JSON from its own origin only.
func TestDevelopmentEndpointsRefuseCrossSiteWrites(t *testing.T) {
	m, _ := runMain(t, t.TempDir())
	post := func(contentType, origin string) (int, string) {
		req, err := http.NewRequest(http.MethodPost, "http://"+m.Addr+"/local/faults", strings.NewReader(`{"fail_next":0}`))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", contentType)
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var refusal struct{ Reason string }
		_ = json.NewDecoder(res.Body).Decode(&refusal)
		return res.StatusCode, refusal.Reason
	}
	if code, reason := post("text/plain", ""); code != http.StatusUnsupportedMediaType || reason != "unsupported_media_type" {
		t.Errorf("text/plain: %d %q", code, reason)
	}
	if code, reason := post("application/json", "https://evil.example"); code != http.StatusForbidden || reason != "cross_origin" {
		t.Errorf("another origin: %d %q", code, reason)
	}
	if code, _ := post("application/json", "http://"+m.Addr); code != http.StatusOK {
		t.Errorf("its own origin: %d", code)
	}
	if code, _ := post("application/json", ""); code != http.StatusOK {
		t.Errorf("a tool: %d", code)
	}
	http.DefaultClient.CloseIdleConnections()
}

// TestAForwardedCallIsCheckedByTheOwner runs two nodes with a gateway
// that asserts its users: a call through the node that does not hold the
// room is forwarded with the credential and the assertion, and the owner
// serves it; a mismatch is refused with nothing applied.
func TestAForwardedCallIsCheckedByTheOwner(t *testing.T) {
	servicetest.Need(t, "Redis", "127.0.0.1:6379")
	servicetest.Need(t, "NATS", "127.0.0.1:4222")
	dsn := mysqltest.DSN(t)
	id := strings.ToLower(rand.Text()[:8])
	stream := ownStream(t, "s"+id)
	start := func(node string) *Main {
		addr := freeAddr(t)
		m, _ := runMain(t, t.TempDir(), append(append([]string{"-listen", addr, "-mysql-dsn", dsn, "-nats-url", fleetNATS,
			"-redis-url", "redis://127.0.0.1:6379/10", "-node-id", node + "-" + id, "-advertise-addr", addr, "-lease-ttl", "1s"},
			scopeFlags...), stream...)...)
		return m
	}
	a, b := start("a"), start("b")
	ctx := context.Background()
	roomID := "scopes-" + id
	service := roomv1connect.NewRoomServiceClient(http.DefaultClient, "http://"+a.Addr, bearer(serviceToken))
	if _, err := service.CreateRoom(ctx, connect.NewRequest(&roomv1.CreateRoomRequest{RoomId: roomID, CommandId: "c1", OperatorUserId: 1, OwnerUserId: 1, SeatCount: 8})); err != nil {
		t.Fatal(err)
	}
	viaB := roomv1connect.NewRoomServiceClient(http.DefaultClient, "http://"+b.Addr, bearer(gatewayToken), headers(rpc.UserHeader, userAssertion(t, 7)))
	res, err := viaB.JoinRoom(ctx, connect.NewRequest(&roomv1.JoinRoomRequest{RoomId: roomID, CommandId: "j7", OperatorUserId: 7}))
	if err != nil || res.Msg.GetRoomVersion() != 2 {
		t.Fatalf("join through b: %v %v", res, err)
	}
	if b.registry.Loaded() != 0 || a.registry.Loaded() != 1 {
		t.Fatalf("the room moved: a holds %d, b %d", a.registry.Loaded(), b.registry.Loaded())
	}
	_, err = viaB.JoinRoom(ctx, connect.NewRequest(&roomv1.JoinRoomRequest{RoomId: roomID, CommandId: "j8", OperatorUserId: 8}))
	wantReason(t, "a mismatch through b", err, connect.CodePermissionDenied, "operator_mismatch")
	// A hop that claims to come from b but carries no assertion is
	// refused by the owner itself.
	hop := roomv1connect.NewRoomServiceClient(http.DefaultClient, "http://"+a.Addr, bearer(gatewayToken), headers(rpc.ForwardedBy, "b-"+id))
	_, err = hop.JoinRoom(ctx, connect.NewRequest(&roomv1.JoinRoomRequest{RoomId: roomID, CommandId: "j9", OperatorUserId: 9}))
	wantReason(t, "a bare hop", err, connect.CodeUnauthenticated, "user_assertion_required")
	snap, err := service.GetRoomSnapshot(ctx, connect.NewRequest(&roomv1.GetRoomSnapshotRequest{RoomId: roomID}))
	if err != nil || snap.Msg.GetRoomVersion() != 2 {
		t.Fatalf("refused calls changed the room: %v %v", snap, err)
	}
	if err := errors.Join(a.Close(ctx), b.Close(ctx)); err != nil {
		t.Fatal(err)
	}
	http.DefaultClient.CloseIdleConnections()
}
