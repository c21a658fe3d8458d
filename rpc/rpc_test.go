package rpc_test

import (
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"hyapp/room-service/auth"
	"hyapp/room-service/cell"
	roomv1 "hyapp/room-service/gen/room/v1"
	"hyapp/room-service/gen/room/v1/roomv1connect"
	"hyapp/room-service/gift"
	"hyapp/room-service/lease"
	"hyapp/room-service/room"
	"hyapp/room-service/rpc"
	"hyapp/room-service/store/sqlite"
	walletledger "hyapp/room-service/wallet/ledger"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	token = "tok"
	// platformUser is platform staff according to the stack's platform func.
	platformUser = 900
	// panicUser makes the platform func panic inside the handler.
	panicUser = 666
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// nopSink drops committed events: these tests read state through the API.
type nopSink struct{}

func (nopSink) Publish([]room.Committed) {}

// noRobots drops robot display events.
type noRobots struct{}

func (noRobots) PublishRobot(string, string, json.RawMessage) {}

// stack is the real service in-process: SQLite, the cell registry and the
// HTTP server on a random loopback port.
type stack struct {
	base     string
	grpcAddr string // the API on grpc-go's transport (NewGRPCServer)
	reg      *cell.Registry
	h1       *http.Client // HTTP/1.1
	h2c      *http.Client // HTTP/2 without TLS, for gRPC
	rooms    roomv1connect.RoomServiceClient
	ops      roomv1connect.OperatorServiceClient
	wallets  roomv1connect.WalletServiceClient
	ledger   *walletledger.Ledger
}

func start(t testing.TB) *stack {
	t.Helper()
	return startWith(t, rpc.Options{Callers: []auth.Caller{{Name: "test", Hash: auth.HashToken(token), Scopes: auth.Scopes}}}, quiet)
}

// startWith starts the stack with opts, logging to log.
func startWith(t testing.TB, opts rpc.Options, log *slog.Logger) *stack {
	t.Helper()
	ctx := context.Background()
	db, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "room.db"), sqlite.Options{Synchronous: "NORMAL"})
	if err != nil {
		t.Fatal(err)
	}
	ledger := walletledger.New(db.SQLStore(), walletledger.Options{})
	// The room directory's projector writes often, so the hot list catches up fast.
	directory := cell.NewDirectory(db, "node-1", 20*time.Millisecond, quiet)
	dirCtx, stopDirectory := context.WithCancel(context.Background())
	directoryDone := make(chan struct{})
	go func() { defer close(directoryDone); directory.Run(dirCtx) }()
	reg := cell.New(cell.Config{Wallet: ledger, Features: []cell.Feature{directory.Feature()}}, db, lease.NewLocal(), nopSink{}, nil, quiet)
	catalogue, err := gift.New(gift.DefaultGifts(), gift.Settings{Lucky: gift.DefaultLucky(), MaxPayoutBP: 9500, RegionalThreshold: 10_000})
	if err != nil {
		t.Fatal(err)
	}
	platform := func(id int64) bool {
		if id == panicUser {
			panic("the platform directory failed")
		}
		return id == platformUser
	}
	rooms := rpc.NewRoomHandler(reg, db, catalogue, noRobots{}, platform, log)
	mux := rpc.NewMux(rooms, rpc.NewOperatorHandler(db, nil, log), rpc.NewWalletHandler(ledger, log), opts, log)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := rpc.NewServer(mux)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	// The same API on grpc-go's transport.
	gln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gsrv := rpc.ServerLimits{}.NewGRPCServer(mux, opts.MaxRequestBytes, log)
	gserved := make(chan error, 1)
	go func() { gserved <- gsrv.Serve(gln) }()

	h1 := &http.Transport{}
	p := new(http.Protocols)
	p.SetUnencryptedHTTP2(true)
	h2 := &http.Transport{Protocols: p}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		h1.CloseIdleConnections()
		h2.CloseIdleConnections()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("server shutdown: %v", err)
		}
		if err := <-served; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("serve: %v", err)
		}
		gsrv.GracefulStop()
		if err := <-gserved; err != nil {
			t.Errorf("serve gRPC: %v", err)
		}
		if err := reg.Close(ctx); err != nil {
			t.Errorf("registry close: %v", err)
		}
		stopDirectory()
		<-directoryDone
		if err := ledger.Close(); err != nil {
			t.Errorf("ledger close: %v", err)
		}
		if err := db.Close(); err != nil {
			t.Errorf("db close: %v", err)
		}
	})
	s := &stack{base: "http://" + ln.Addr().String(), grpcAddr: gln.Addr().String(), reg: reg, h1: &http.Client{Transport: h1}, h2c: &http.Client{Transport: h2}, ledger: ledger}
	s.rooms = roomv1connect.NewRoomServiceClient(s.h1, s.base, withToken(token))
	s.ops = roomv1connect.NewOperatorServiceClient(s.h1, s.base, withToken(token))
	s.wallets = roomv1connect.NewWalletServiceClient(s.h1, s.base, withToken(token))
	return s
}

// withToken makes a client send the service token (or any other value).
func withToken(tok string) connect.ClientOption {
	return connect.WithInterceptors(connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			req.Header().Set(rpc.Authorization(tok))
			return next(ctx, req)
		}
	}))
}

// call adapts one client method and request to a func that returns only the error.
func call[Req, Resp any](f func(context.Context, *connect.Request[Req]) (*connect.Response[Resp], error), m *Req) func(context.Context) error {
	return func(ctx context.Context) error {
		_, err := f(ctx, connect.NewRequest(m))
		return err
	}
}

// must runs one call that has to succeed and returns its response message.
func must[Req, Resp any](t *testing.T, f func(context.Context, *connect.Request[Req]) (*connect.Response[Resp], error), m *Req) *Resp {
	t.Helper()
	res, err := f(context.Background(), connect.NewRequest(m))
	if err != nil {
		t.Fatalf("%T: %v (reason %q)", m, err, rpc.Reason(err))
	}
	return res.Msg
}

func wantErr(t *testing.T, err error, code connect.Code, reason string) {
	t.Helper()
	if connect.CodeOf(err) != code || rpc.Reason(err) != reason {
		t.Fatalf("got %v (code %v, reason %q); want code %v, reason %q", err, connect.CodeOf(err), rpc.Reason(err), code, reason)
	}
}

func (s *stack) snapshot(t *testing.T, roomID string) *roomv1.RoomSnapshot {
	t.Helper()
	return must(t, s.rooms.GetRoomSnapshot, &roomv1.GetRoomSnapshotRequest{RoomId: roomID}).GetSnapshot()
}

// listAll pages through ListRooms until next_page_token is empty.
func (s *stack) listAll(t *testing.T, status roomv1.RoomStatus, pageSize int32) []*roomv1.RoomSummary {
	t.Helper()
	var out []*roomv1.RoomSummary
	tok := ""
	for range 100 {
		res := must(t, s.rooms.ListRooms, &roomv1.ListRoomsRequest{PageSize: pageSize, PageToken: tok, Status: status})
		if pageSize > 0 && int32(len(res.GetRooms())) > pageSize {
			t.Fatalf("a page of size %d holds %d rooms", pageSize, len(res.GetRooms()))
		}
		out = append(out, res.GetRooms()...)
		if tok = res.GetNextPageToken(); tok == "" {
			return out
		}
	}
	t.Fatal("ListRooms never returned an empty next_page_token")
	return nil
}

func ids(rooms []*roomv1.RoomSummary) []string {
	var out []string
	for _, r := range rooms {
		out = append(out, r.GetRoomId())
	}
	return out
}

// world is everything a refused request must leave unchanged: every room's
// durable summary and the live snapshots of the named rooms, in text form.
func (s *stack) world(t *testing.T, live ...string) string {
	t.Helper()
	var b strings.Builder
	for _, r := range s.listAll(t, roomv1.RoomStatus_ROOM_STATUS_UNSPECIFIED, 500) {
		fmt.Fprintf(&b, "room %s v%d %v epoch %d\n", r.GetRoomId(), r.GetRoomVersion(), r.GetStatus(), r.GetOwnerEpoch())
	}
	for _, id := range live {
		// prototext output is stable within one test binary.
		fmt.Fprintf(&b, "live %s: %s\n", id, prototext.Format(s.snapshot(t, id)))
	}
	return b.String()
}

// seed creates room r1 (owner 1, members 2 and 3, user 2 on seat 0) and
// room shut (closed by its owner 1).
func seed(t *testing.T, s *stack) {
	t.Helper()
	must(t, s.rooms.CreateRoom, &roomv1.CreateRoomRequest{RoomId: "r1", CommandId: "create", OperatorUserId: 1, OwnerUserId: 1, SeatCount: 8, Title: "Friday"})
	must(t, s.rooms.JoinRoom, &roomv1.JoinRoomRequest{RoomId: "r1", CommandId: "join-2", OperatorUserId: 2, Nickname: "two"})
	must(t, s.rooms.JoinRoom, &roomv1.JoinRoomRequest{RoomId: "r1", CommandId: "join-3", OperatorUserId: 3})
	must(t, s.rooms.TakeMic, &roomv1.TakeMicRequest{RoomId: "r1", CommandId: "mic-2", OperatorUserId: 2, SeatIndex: 0})
	must(t, s.rooms.CreateRoom, &roomv1.CreateRoomRequest{RoomId: "shut", CommandId: "create", OperatorUserId: 1, OwnerUserId: 1, SeatCount: 4})
	must(t, s.rooms.CloseRoom, &roomv1.CloseRoomRequest{RoomId: "shut", CommandId: "close", OperatorUserId: 1})
}

func TestBadRequestsAreRefusedAndChangeNothing(t *testing.T) {
	s := start(t)
	seed(t, s)
	anon := roomv1connect.NewRoomServiceClient(s.h1, s.base)
	wrong := roomv1connect.NewRoomServiceClient(s.h1, s.base, withToken("not-"+token))
	anonOps := roomv1connect.NewOperatorServiceClient(s.h1, s.base)
	long := strings.Repeat("r", 129)
	title200 := strings.Repeat("t", 200)
	mine := "mine"
	newRoom := func(seats int32, title string) *roomv1.CreateRoomRequest {
		return &roomv1.CreateRoomRequest{RoomId: "fresh", CommandId: "create", OperatorUserId: 1, OwnerUserId: 1, SeatCount: seats, Title: title}
	}
	tests := []struct {
		name   string
		call   func(context.Context) error
		code   connect.Code
		reason string
	}{
		{"unknown room", call(s.rooms.JoinRoom, &roomv1.JoinRoomRequest{RoomId: "nope", CommandId: "c", OperatorUserId: 5}), connect.CodeNotFound, "room_not_found"},
		{"unknown room snapshot", call(s.rooms.GetRoomSnapshot, &roomv1.GetRoomSnapshotRequest{RoomId: "nope"}), connect.CodeNotFound, "room_not_found"},
		{"unknown room command log", call(s.ops.ListCommands, &roomv1.ListCommandsRequest{RoomId: "nope"}), connect.CodeNotFound, "room_not_found"},
		{"empty room_id", call(s.rooms.JoinRoom, &roomv1.JoinRoomRequest{CommandId: "c", OperatorUserId: 5}), connect.CodeInvalidArgument, "missing_room_id"},
		{"empty room_id snapshot", call(s.rooms.GetRoomSnapshot, &roomv1.GetRoomSnapshotRequest{}), connect.CodeInvalidArgument, "missing_room_id"},
		{"empty room_id command log", call(s.ops.ListCommands, &roomv1.ListCommandsRequest{}), connect.CodeInvalidArgument, "missing_room_id"},
		{"empty room_id stored snapshot", call(s.ops.GetStoredSnapshot, &roomv1.GetStoredSnapshotRequest{}), connect.CodeInvalidArgument, "missing_room_id"},
		{"empty command_id", call(s.rooms.JoinRoom, &roomv1.JoinRoomRequest{RoomId: "r1", OperatorUserId: 5}), connect.CodeInvalidArgument, "missing_command_id"},
		{"operator 0", call(s.rooms.JoinRoom, &roomv1.JoinRoomRequest{RoomId: "r1", CommandId: "c"}), connect.CodeInvalidArgument, "missing_operator"},
		{"negative operator", call(s.rooms.JoinRoom, &roomv1.JoinRoomRequest{RoomId: "r1", CommandId: "c", OperatorUserId: -5}), connect.CodeInvalidArgument, "missing_operator"},
		{"room_id of 129 bytes", call(s.rooms.JoinRoom, &roomv1.JoinRoomRequest{RoomId: long, CommandId: "c", OperatorUserId: 5}), connect.CodeInvalidArgument, "field_too_long"},
		{"room_id of 129 bytes snapshot", call(s.rooms.GetRoomSnapshot, &roomv1.GetRoomSnapshotRequest{RoomId: long}), connect.CodeInvalidArgument, "field_too_long"},
		{"room_id with a space", call(s.rooms.JoinRoom, &roomv1.JoinRoomRequest{RoomId: "r 1", CommandId: "c", OperatorUserId: 5}), connect.CodeInvalidArgument, "invalid_argument"},
		{"command_id of 129 bytes", call(s.rooms.JoinRoom, &roomv1.JoinRoomRequest{RoomId: "r1", CommandId: long, OperatorUserId: 5}), connect.CodeInvalidArgument, "field_too_long"},
		{"title of 200 bytes", call(s.rooms.CreateRoom, newRoom(8, title200)), connect.CodeInvalidArgument, "field_too_long"},
		{"profile title of 200 bytes", call(s.rooms.UpdateProfile, &roomv1.UpdateProfileRequest{RoomId: "r1", CommandId: "c", OperatorUserId: 1, Title: &title200}), connect.CodeInvalidArgument, "field_too_long"},
		{"empty profile update", call(s.rooms.UpdateProfile, &roomv1.UpdateProfileRequest{RoomId: "r1", CommandId: "c", OperatorUserId: 1}), connect.CodeInvalidArgument, "invalid_argument"},
		{"seat_index -1", call(s.rooms.TakeMic, &roomv1.TakeMicRequest{RoomId: "r1", CommandId: "c", OperatorUserId: 3, SeatIndex: -1}), connect.CodeInvalidArgument, "bad_seat_index"},
		{"seat_index 99", call(s.rooms.TakeMic, &roomv1.TakeMicRequest{RoomId: "r1", CommandId: "c", OperatorUserId: 3, SeatIndex: 99}), connect.CodeInvalidArgument, "bad_seat_index"},
		{"seat_index past the room's seats", call(s.rooms.TakeMic, &roomv1.TakeMicRequest{RoomId: "r1", CommandId: "c", OperatorUserId: 3, SeatIndex: 8}), connect.CodeInvalidArgument, "bad_seat_index"},
		{"lock seat_index 99", call(s.rooms.LockMicSeat, &roomv1.LockMicSeatRequest{RoomId: "r1", CommandId: "c", OperatorUserId: 1, SeatIndex: 99, Locked: true}), connect.CodeInvalidArgument, "bad_seat_index"},
		{"seat_count 0", call(s.rooms.CreateRoom, newRoom(0, "")), connect.CodeInvalidArgument, "bad_seat_count"},
		{"seat_count 21", call(s.rooms.CreateRoom, newRoom(21, "")), connect.CodeInvalidArgument, "bad_seat_count"},
		{"negative kick duration", call(s.rooms.KickUser, &roomv1.KickUserRequest{RoomId: "r1", CommandId: "c", OperatorUserId: 1, TargetUserId: 2, DurationSeconds: -1}), connect.CodeInvalidArgument, "bad_duration"},
		{"negative mute duration", call(s.rooms.MuteUser, &roomv1.MuteUserRequest{RoomId: "r1", CommandId: "c", OperatorUserId: 1, TargetUserId: 2, DurationSeconds: -1}), connect.CodeInvalidArgument, "bad_duration"},
		{"target is the operator", call(s.rooms.KickUser, &roomv1.KickUserRequest{RoomId: "r1", CommandId: "c", OperatorUserId: 1, TargetUserId: 1}), connect.CodeInvalidArgument, "bad_target"},
		{"no target", call(s.rooms.SetAdmin, &roomv1.SetAdminRequest{RoomId: "r1", CommandId: "c", OperatorUserId: 1, Admin: true}), connect.CodeInvalidArgument, "bad_target"},
		{"unknown status", call(s.rooms.ListRooms, &roomv1.ListRoomsRequest{Status: 99}), connect.CodeInvalidArgument, "invalid_argument"},
		{"page_size 501", call(s.rooms.ListRooms, &roomv1.ListRoomsRequest{PageSize: 501}), connect.CodeInvalidArgument, "invalid_page_size"},
		{"page_size -1", call(s.rooms.ListRooms, &roomv1.ListRoomsRequest{PageSize: -1}), connect.CodeInvalidArgument, "invalid_page_size"},
		{"bad page_token", call(s.rooms.ListRooms, &roomv1.ListRoomsRequest{PageToken: "not base64!"}), connect.CodeInvalidArgument, "invalid_page_token"},
		{"known_version -1", call(s.rooms.GetRoomSnapshot, &roomv1.GetRoomSnapshotRequest{RoomId: "r1", KnownVersion: -1}), connect.CodeInvalidArgument, "invalid_argument"},
		{"member_limit -1", call(s.rooms.GetRoomSnapshot, &roomv1.GetRoomSnapshotRequest{RoomId: "r1", MemberLimit: -1}), connect.CodeInvalidArgument, "invalid_argument"},
		{"command log limit -1", call(s.ops.ListCommands, &roomv1.ListCommandsRequest{RoomId: "r1", Limit: -1}), connect.CodeInvalidArgument, "invalid_argument"},
		{"command log limit 10001", call(s.ops.ListCommands, &roomv1.ListCommandsRequest{RoomId: "r1", Limit: 10001}), connect.CodeInvalidArgument, "invalid_argument"},
		{"command log after_version -1", call(s.ops.ListCommands, &roomv1.ListCommandsRequest{RoomId: "r1", AfterVersion: -1}), connect.CodeInvalidArgument, "invalid_argument"},
		{"join a closed room", call(s.rooms.JoinRoom, &roomv1.JoinRoomRequest{RoomId: "shut", CommandId: "c", OperatorUserId: 5}), connect.CodeFailedPrecondition, "room_closed"},
		{"close a closed room", call(s.rooms.CloseRoom, &roomv1.CloseRoomRequest{RoomId: "shut", CommandId: "c", OperatorUserId: 1}), connect.CodeFailedPrecondition, "room_closed"},
		{"seat taken", call(s.rooms.TakeMic, &roomv1.TakeMicRequest{RoomId: "r1", CommandId: "c", OperatorUserId: 3, SeatIndex: 0}), connect.CodeFailedPrecondition, "seat_occupied"},
		{"not in the room", call(s.rooms.TakeMic, &roomv1.TakeMicRequest{RoomId: "r1", CommandId: "c", OperatorUserId: 5, SeatIndex: 1}), connect.CodeFailedPrecondition, "not_in_room"},
		{"member locks a seat", call(s.rooms.LockMicSeat, &roomv1.LockMicSeatRequest{RoomId: "r1", CommandId: "c", OperatorUserId: 3, SeatIndex: 1, Locked: true}), connect.CodePermissionDenied, "permission_denied"},
		{"member closes the room", call(s.rooms.CloseRoom, &roomv1.CloseRoomRequest{RoomId: "r1", CommandId: "c", OperatorUserId: 2}), connect.CodePermissionDenied, "permission_denied"},
		{"member kicks a member", call(s.rooms.KickUser, &roomv1.KickUserRequest{RoomId: "r1", CommandId: "c", OperatorUserId: 3, TargetUserId: 2}), connect.CodePermissionDenied, "permission_denied"},
		{"member edits the profile", call(s.rooms.UpdateProfile, &roomv1.UpdateProfileRequest{RoomId: "r1", CommandId: "c", OperatorUserId: 2, Title: &mine}), connect.CodePermissionDenied, "permission_denied"},
		{"admin kicks the owner", call(s.rooms.KickUser, &roomv1.KickUserRequest{RoomId: "r1", CommandId: "c", OperatorUserId: platformUser, TargetUserId: 1}), connect.CodePermissionDenied, "target_protected"},
		{"command_id reused for another request", call(s.rooms.JoinRoom, &roomv1.JoinRoomRequest{RoomId: "r1", CommandId: "join-2", OperatorUserId: 4}), connect.CodeAlreadyExists, "command_id_conflict"},
		{"command_id reused with other fields", call(s.rooms.JoinRoom, &roomv1.JoinRoomRequest{RoomId: "r1", CommandId: "join-2", OperatorUserId: 2, Nickname: "deux"}), connect.CodeAlreadyExists, "command_id_conflict"},
		{"create an existing room", call(s.rooms.CreateRoom, &roomv1.CreateRoomRequest{RoomId: "r1", CommandId: "create-again", OperatorUserId: 1, OwnerUserId: 1, SeatCount: 8}), connect.CodeAlreadyExists, "room_exists"},
		{"no token", call(anon.JoinRoom, &roomv1.JoinRoomRequest{RoomId: "r1", CommandId: "c", OperatorUserId: 5}), connect.CodeUnauthenticated, "unauthenticated"},
		{"no token, read", call(anon.GetRoomSnapshot, &roomv1.GetRoomSnapshotRequest{RoomId: "r1"}), connect.CodeUnauthenticated, "unauthenticated"},
		{"no token, list", call(anon.ListRooms, &roomv1.ListRoomsRequest{}), connect.CodeUnauthenticated, "unauthenticated"},
		{"no token, operator service", call(anonOps.ListCommands, &roomv1.ListCommandsRequest{RoomId: "r1"}), connect.CodeUnauthenticated, "unauthenticated"},
		{"wrong token", call(wrong.JoinRoom, &roomv1.JoinRoomRequest{RoomId: "r1", CommandId: "c", OperatorUserId: 5}), connect.CodeUnauthenticated, "unauthenticated"},
		{"wrong token, unknown room", call(wrong.JoinRoom, &roomv1.JoinRoomRequest{RoomId: "nope", CommandId: "c", OperatorUserId: 5}), connect.CodeUnauthenticated, "unauthenticated"},
	}
	before := s.world(t, "r1", "shut")
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wantErr(t, tt.call(context.Background()), tt.code, tt.reason)
			if after := s.world(t, "r1", "shut"); after != before {
				t.Fatalf("a refused request changed the service:\nbefore:\n%s\nafter:\n%s", before, after)
			}
		})
	}
}

// TestRefusedCreateLeavesNoRoom: a CreateRoom refused by a domain rule
// (here: the operator is not the owner) must not leave a room behind.
func TestRefusedCreateLeavesNoRoom(t *testing.T) {
	s := start(t)
	seed(t, s)
	before := s.world(t, "r1")
	err := call(s.rooms.CreateRoom, &roomv1.CreateRoomRequest{RoomId: "stolen", CommandId: "c", OperatorUserId: 7, OwnerUserId: 1, SeatCount: 8})(context.Background())
	wantErr(t, err, connect.CodePermissionDenied, "permission_denied")
	if after := s.world(t, "r1"); after != before {
		t.Fatalf("the refused CreateRoom left room metadata behind:\nbefore:\n%s\nafter:\n%s", before, after)
	}
}

// TestInvalidUTF8IsRefused sends a nickname that is not UTF-8. The generated
// client cannot even encode it, so the request is built by hand on the wire.
func TestInvalidUTF8IsRefused(t *testing.T) {
	s := start(t)
	seed(t, s)
	before := s.world(t, "r1")

	_, err := s.rooms.JoinRoom(context.Background(), connect.NewRequest(&roomv1.JoinRoomRequest{RoomId: "r1", CommandId: "c", OperatorUserId: 5, Nickname: "\xff"}))
	if err == nil {
		t.Fatal("the client sent a nickname that is not UTF-8")
	}

	var raw []byte
	raw = protowire.AppendTag(raw, 1, protowire.BytesType)
	raw = protowire.AppendString(raw, "r1")
	raw = protowire.AppendTag(raw, 2, protowire.BytesType)
	raw = protowire.AppendString(raw, "c")
	raw = protowire.AppendTag(raw, 3, protowire.VarintType)
	raw = protowire.AppendVarint(raw, 5)
	raw = protowire.AppendTag(raw, 4, protowire.BytesType)
	raw = protowire.AppendString(raw, "bad \xff name")
	client := connect.NewClient[[]byte, roomv1.JoinRoomResponse](s.h1, s.base+roomv1connect.RoomServiceJoinRoomProcedure,
		connect.WithCodec(rawCodec{}), withToken(token))
	_, err = client.CallUnary(context.Background(), connect.NewRequest(&raw))
	wantErr(t, err, connect.CodeInvalidArgument, "malformed_request")
	if after := s.world(t, "r1"); after != before {
		t.Fatalf("a refused request changed the service:\nbefore:\n%s\nafter:\n%s", before, after)
	}
}

// rawCodec sends pre-encoded protobuf bytes and decodes answers into a
// message or, for *[]byte, keeps them encoded.
type rawCodec struct{}

func (rawCodec) Name() string { return "proto" }

func (rawCodec) Marshal(v any) ([]byte, error) {
	b, ok := v.(*[]byte)
	if !ok {
		return nil, fmt.Errorf("rawCodec marshals *[]byte, not %T", v)
	}
	return *b, nil
}

func (rawCodec) Unmarshal(data []byte, v any) error {
	switch m := v.(type) {
	case *[]byte:
		*m = slices.Clone(data)
		return nil
	case proto.Message:
		return proto.Unmarshal(data, m)
	}
	return fmt.Errorf("rawCodec cannot unmarshal into %T", v)
}

func TestHappyPath(t *testing.T) {
	s := start(t)
	create := &roomv1.CreateRoomRequest{RoomId: "r1", CommandId: "create", OperatorUserId: 1, OwnerUserId: 1, HostUserId: 1, SeatCount: 8, Mode: "chat", Region: "sg", Title: "Friday"}
	if v := must(t, s.rooms.CreateRoom, create).GetRoomVersion(); v != 1 {
		t.Fatalf("create at version %d", v)
	}
	if v := must(t, s.rooms.CreateRoom, create).GetRoomVersion(); v != 1 {
		t.Fatalf("a retried create answered version %d, want the original 1", v)
	}
	for i, user := range []int64{2, 3, 4} {
		res := must(t, s.rooms.JoinRoom, &roomv1.JoinRoomRequest{RoomId: "r1", CommandId: fmt.Sprint("join-", user), OperatorUserId: user, Nickname: fmt.Sprint("user ", user)})
		if res.GetRoomVersion() != int64(2+i) {
			t.Fatalf("join %d at version %d", user, res.GetRoomVersion())
		}
	}
	if v := must(t, s.rooms.TakeMic, &roomv1.TakeMicRequest{RoomId: "r1", CommandId: "mic", OperatorUserId: 3, SeatIndex: 2}).GetRoomVersion(); v != 5 {
		t.Fatalf("take mic at version %d", v)
	}

	snap := s.snapshot(t, "r1")
	if snap.GetRoomVersion() != 5 || snap.GetStatus() != roomv1.RoomStatus_ROOM_STATUS_OPEN || snap.GetOwnerUserId() != 1 ||
		snap.GetMode() != "chat" || snap.GetRegion() != "sg" || snap.GetProfile().GetTitle() != "Friday" || len(snap.GetSeats()) != 8 ||
		snap.GetSeats()[2].GetUserId() != 3 || snap.GetOnlineCount() != 3 || len(snap.GetMembers()) != 3 {
		t.Fatalf("snapshot: %v", snap)
	}
	for i, m := range snap.GetMembers() {
		if m.GetUserId() != int64(2+i) || m.GetNickname() != fmt.Sprint("user ", 2+i) {
			t.Fatalf("member %d: %v", i, m)
		}
	}

	same := must(t, s.rooms.GetRoomSnapshot, &roomv1.GetRoomSnapshotRequest{RoomId: "r1", KnownVersion: 5})
	if !same.GetNotModified() || same.GetSnapshot() != nil || same.GetRoomVersion() != 5 {
		t.Fatalf("known_version = current: %v", same)
	}
	older := must(t, s.rooms.GetRoomSnapshot, &roomv1.GetRoomSnapshotRequest{RoomId: "r1", KnownVersion: 4})
	if older.GetNotModified() || older.GetSnapshot().GetRoomVersion() != 5 {
		t.Fatalf("known_version behind: %v", older)
	}
	capped := must(t, s.rooms.GetRoomSnapshot, &roomv1.GetRoomSnapshotRequest{RoomId: "r1", MemberLimit: 1}).GetSnapshot()
	if len(capped.GetMembers()) != 1 || capped.GetMembers()[0].GetUserId() != 2 || capped.GetOnlineCount() != 3 {
		t.Fatalf("member_limit 1: %v", capped)
	}
	if full := s.snapshot(t, "r1"); len(full.GetMembers()) != 3 {
		t.Fatalf("a capped query changed the shared snapshot: %v", full)
	}

	notice := "be kind"
	must(t, s.rooms.UpdateProfile, &roomv1.UpdateProfileRequest{RoomId: "r1", CommandId: "notice", OperatorUserId: 1, Notice: &notice})
	if p := s.snapshot(t, "r1").GetProfile(); p.GetTitle() != "Friday" || p.GetNotice() != notice {
		t.Fatalf("profile after setting only the notice: %v", p)
	}
	empty := ""
	must(t, s.rooms.UpdateProfile, &roomv1.UpdateProfileRequest{RoomId: "r1", CommandId: "untitle", OperatorUserId: 1, Title: &empty})
	if p := s.snapshot(t, "r1").GetProfile(); p.GetTitle() != "" || p.GetNotice() != notice {
		t.Fatalf("profile after clearing the title: %v", p)
	}

	// Platform staff act as any room's owner.
	closed := must(t, s.rooms.CloseRoom, &roomv1.CloseRoomRequest{RoomId: "r1", CommandId: "close", OperatorUserId: platformUser})
	snap = s.snapshot(t, "r1")
	if snap.GetRoomVersion() != closed.GetRoomVersion() || snap.GetStatus() != roomv1.RoomStatus_ROOM_STATUS_CLOSED ||
		len(snap.GetMembers()) != 0 || snap.GetSeats()[2].GetUserId() != 0 {
		t.Fatalf("after a platform close: %v", snap)
	}
	must(t, s.rooms.CreateRoom, &roomv1.CreateRoomRequest{RoomId: "staff-made", CommandId: "create", OperatorUserId: platformUser, OwnerUserId: 1, SeatCount: 1})
	if o := s.snapshot(t, "staff-made").GetOwnerUserId(); o != 1 {
		t.Fatalf("owner of a room platform staff created: %d", o)
	}
}

func TestListRooms(t *testing.T) {
	s := start(t)
	if got := s.listAll(t, roomv1.RoomStatus_ROOM_STATUS_UNSPECIFIED, 0); len(got) != 0 {
		t.Fatalf("no rooms yet: %v", got)
	}
	for _, id := range []string{"c", "a", "b"} {
		must(t, s.rooms.CreateRoom, &roomv1.CreateRoomRequest{RoomId: id, CommandId: "create", OperatorUserId: 1, OwnerUserId: 1, HostUserId: 2, SeatCount: 6, Mode: "party"})
	}
	must(t, s.rooms.CloseRoom, &roomv1.CloseRoomRequest{RoomId: "b", CommandId: "close", OperatorUserId: 1})

	var pages [][]string
	tok := ""
	for range 10 {
		res := must(t, s.rooms.ListRooms, &roomv1.ListRoomsRequest{PageSize: 1, PageToken: tok})
		pages = append(pages, ids(res.GetRooms()))
		if tok = res.GetNextPageToken(); tok == "" {
			break
		}
	}
	if tok != "" {
		t.Fatalf("paging did not end: %v", pages)
	}
	if got := slices.Concat(pages...); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Fatalf("pages of 1: %v", pages)
	}
	for _, p := range pages[:3] {
		if len(p) != 1 {
			t.Fatalf("pages of 1: %v", pages)
		}
	}

	all := must(t, s.rooms.ListRooms, &roomv1.ListRoomsRequest{})
	if !slices.Equal(ids(all.GetRooms()), []string{"a", "b", "c"}) || all.GetNextPageToken() != "" {
		t.Fatalf("default page: %v", all)
	}
	a := all.GetRooms()[0]
	if a.GetOwnerUserId() != 1 || a.GetHostUserId() != 2 || a.GetSeatCount() != 6 || a.GetMode() != "party" ||
		a.GetStatus() != roomv1.RoomStatus_ROOM_STATUS_OPEN || a.GetRoomVersion() != 1 || a.GetOwnerEpoch() < 1 {
		t.Fatalf("summary: %v", a)
	}
	if b := all.GetRooms()[1]; b.GetStatus() != roomv1.RoomStatus_ROOM_STATUS_CLOSED || b.GetRoomVersion() != 2 {
		t.Fatalf("closed summary: %v", b)
	}

	for _, size := range []int32{0, 1, 2} {
		if got := ids(s.listAll(t, roomv1.RoomStatus_ROOM_STATUS_OPEN, size)); !slices.Equal(got, []string{"a", "c"}) {
			t.Errorf("open rooms, pages of %d: %v", size, got)
		}
		if got := ids(s.listAll(t, roomv1.RoomStatus_ROOM_STATUS_CLOSED, size)); !slices.Equal(got, []string{"b"}) {
			t.Errorf("closed rooms, pages of %d: %v", size, got)
		}
		if got := ids(s.listAll(t, roomv1.RoomStatus_ROOM_STATUS_CREATING, size)); len(got) != 0 {
			t.Errorf("creating rooms, pages of %d: %v", size, got)
		}
	}
}

func TestOperatorService(t *testing.T) {
	s := start(t)
	seed(t, s)
	log := must(t, s.ops.ListCommands, &roomv1.ListCommandsRequest{RoomId: "r1"})
	wantIDs := []string{"create", "join-2", "join-3", "mic-2"}
	wantTypes := []string{"CreateRoom", "JoinRoom", "JoinRoom", "TakeMic"}
	if log.GetHeadVersion() != 4 || len(log.GetCommands()) != 4 {
		t.Fatalf("command log: %v", log)
	}
	for i, c := range log.GetCommands() {
		if c.GetRoomVersion() != int64(i+1) || c.GetCommandId() != wantIDs[i] || c.GetCommandType() != wantTypes[i] ||
			c.GetPayloadJson() == "" || c.GetCreatedAtMs() <= 0 {
			t.Fatalf("entry %d: %v", i, c)
		}
	}
	after := must(t, s.ops.ListCommands, &roomv1.ListCommandsRequest{RoomId: "r1", AfterVersion: 2, Limit: 1})
	if after.GetHeadVersion() != 4 || len(after.GetCommands()) != 1 || after.GetCommands()[0].GetRoomVersion() != 3 {
		t.Fatalf("after 2, limit 1: %v", after)
	}
	end := must(t, s.ops.ListCommands, &roomv1.ListCommandsRequest{RoomId: "r1", AfterVersion: 4})
	if end.GetHeadVersion() != 4 || len(end.GetCommands()) != 0 {
		t.Fatalf("after the head: %v", end)
	}

	if got := must(t, s.ops.GetStoredSnapshot, &roomv1.GetStoredSnapshotRequest{RoomId: "r1"}); got.GetFound() || got.GetSnapshot() != nil {
		t.Fatalf("a stored snapshot before any was taken: %v", got)
	}

	// Closing the registry stores each loaded room's final snapshot; the
	// operator service reads storage directly and keeps answering, while
	// the room service refuses with a retryable code.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.reg.Close(ctx); err != nil {
		t.Fatal(err)
	}
	stored := must(t, s.ops.GetStoredSnapshot, &roomv1.GetStoredSnapshotRequest{RoomId: "r1"})
	if !stored.GetFound() || stored.GetSnapshot().GetRoomVersion() != 4 || stored.GetSnapshot().GetSeats()[0].GetUserId() != 2 {
		t.Fatalf("stored snapshot after shutdown: %v", stored)
	}
	_, err := s.rooms.JoinRoom(context.Background(), connect.NewRequest(&roomv1.JoinRoomRequest{RoomId: "r1", CommandId: "late", OperatorUserId: 9}))
	wantErr(t, err, connect.CodeUnavailable, "shutting_down")
}

// TestProtocols: gRPC over h2c and Connect JSON carry answers, codes and reasons.
func TestProtocols(t *testing.T) {
	s := start(t)
	client := roomv1connect.NewRoomServiceClient(s.h2c, s.base, connect.WithGRPC(), withToken(token))
	ctx := context.Background()
	res, err := client.CreateRoom(ctx, connect.NewRequest(&roomv1.CreateRoomRequest{RoomId: "g1", CommandId: "create", OperatorUserId: 1, OwnerUserId: 1, SeatCount: 4}))
	if err != nil || res.Msg.GetRoomVersion() != 1 {
		t.Fatalf("create over gRPC: %v %v", res, err)
	}
	if res.Header().Get("Content-Type") != "application/grpc" {
		t.Fatalf("the answer is not gRPC: %v", res.Header())
	}
	snap, err := client.GetRoomSnapshot(ctx, connect.NewRequest(&roomv1.GetRoomSnapshotRequest{RoomId: "g1"}))
	if err != nil || snap.Msg.GetSnapshot().GetRoomVersion() != 1 {
		t.Fatalf("snapshot over gRPC: %v %v", snap, err)
	}
	_, err = client.TakeMic(ctx, connect.NewRequest(&roomv1.TakeMicRequest{RoomId: "g1", CommandId: "mic", OperatorUserId: 1, SeatIndex: 4}))
	wantErr(t, err, connect.CodeInvalidArgument, "bad_seat_index")
	_, err = client.JoinRoom(ctx, connect.NewRequest(&roomv1.JoinRoomRequest{RoomId: "nope", CommandId: "c", OperatorUserId: 1}))
	wantErr(t, err, connect.CodeNotFound, "room_not_found")
	anon := roomv1connect.NewRoomServiceClient(s.h2c, s.base, connect.WithGRPC())
	_, err = anon.GetRoomSnapshot(ctx, connect.NewRequest(&roomv1.GetRoomSnapshotRequest{RoomId: "g1"}))
	wantErr(t, err, connect.CodeUnauthenticated, "unauthenticated")

	// The Connect protocol's JSON form answers the same way.
	jsonClient := roomv1connect.NewRoomServiceClient(s.h1, s.base, connect.WithProtoJSON(), withToken(token))
	if v := must(t, jsonClient.GetRoomSnapshot, &roomv1.GetRoomSnapshotRequest{RoomId: "g1"}).GetRoomVersion(); v != 1 {
		t.Fatalf("snapshot over JSON: version %d", v)
	}
	_, err = jsonClient.TakeMic(ctx, connect.NewRequest(&roomv1.TakeMicRequest{RoomId: "g1", CommandId: "mic", OperatorUserId: 1, SeatIndex: 4}))
	wantErr(t, err, connect.CodeInvalidArgument, "bad_seat_index")
}

// TestHealthNeedsNoToken calls grpc.health.v1.Health/Check over gRPC,
// without a token. The messages are built on the wire: HealthCheckRequest
// is {1: service}, HealthCheckResponse is {1: status}, SERVING is 1.
func TestHealthNeedsNoToken(t *testing.T) {
	s := start(t)
	client := connect.NewClient[[]byte, []byte](s.h2c, s.base+"/grpc.health.v1.Health/Check", connect.WithGRPC(), connect.WithCodec(rawCodec{}))
	for _, service := range []string{"", roomv1connect.RoomServiceName, roomv1connect.OperatorServiceName} {
		req := protowire.AppendTag(nil, 1, protowire.BytesType)
		req = protowire.AppendString(req, service)
		res, err := client.CallUnary(context.Background(), connect.NewRequest(&req))
		if err != nil {
			t.Fatalf("health of %q: %v", service, err)
		}
		if want := protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), 1); !slices.Equal(*res.Msg, want) {
			t.Fatalf("health of %q: got %x, want SERVING (%x)", service, *res.Msg, want)
		}
	}
	req := protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), "no.such.Service")
	_, err := client.CallUnary(context.Background(), connect.NewRequest(&req))
	if connect.CodeOf(err) != connect.CodeNotFound {
		t.Fatalf("health of an unknown service: %v", err)
	}
}

// TestHandlerPanicIsInternal: the platform func panics for panicUser inside
// the handler; the caller gets internal, and the server keeps serving.
func TestHandlerPanicIsInternal(t *testing.T) {
	s := start(t)
	seed(t, s)
	before := s.world(t, "r1")
	_, err := s.rooms.JoinRoom(context.Background(), connect.NewRequest(&roomv1.JoinRoomRequest{RoomId: "r1", CommandId: "boom", OperatorUserId: panicUser}))
	wantErr(t, err, connect.CodeInternal, "internal")
	if after := s.world(t, "r1"); after != before {
		t.Fatalf("a panicking request changed the service:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	must(t, s.rooms.JoinRoom, &roomv1.JoinRoomRequest{RoomId: "r1", CommandId: "join-5", OperatorUserId: 5})
}

// TestSmallAnswersAreNotCompressed: a caller that accepts gzip gets a
// few-byte answer (a command's, the health check's) as it is, and a large
// one (a room of many members) compressed.
func TestSmallAnswersAreNotCompressed(t *testing.T) {
	s := start(t)
	seed(t, s)
	for u := int64(10); u < 60; u++ {
		must(t, s.rooms.JoinRoom, &roomv1.JoinRoomRequest{RoomId: "r1", CommandId: fmt.Sprint("join-", u), OperatorUserId: u, Nickname: fmt.Sprint("listener number ", u)})
	}
	post := func(procedure, body string) (encoding string, size int) {
		req, err := http.NewRequest(http.MethodPost, s.base+procedure, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept-Encoding", "gzip")
		req.Header.Set(rpc.Authorization(token))
		res, err := s.h1.Transport.RoundTrip(req) // the transport would ask for gzip and unpack it itself
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		if err != nil || res.StatusCode != http.StatusOK {
			t.Fatalf("%s: %d %v %s", procedure, res.StatusCode, err, b)
		}
		encoding, size = res.Header.Get("Content-Encoding"), len(b)
		if encoding == "gzip" {
			// Any gzip reader unpacks it: the standard library's here.
			zr, err := gzip.NewReader(strings.NewReader(string(b)))
			if err != nil {
				t.Fatalf("%s: %v", procedure, err)
			}
			if b, err = io.ReadAll(zr); err != nil {
				t.Fatalf("%s: %v", procedure, err)
			}
		}
		if !json.Valid(b) {
			t.Fatalf("%s: the answer is not JSON: %q", procedure, b)
		}
		return encoding, size
	}
	if enc, n := post(roomv1connect.RoomServiceJoinRoomProcedure, `{"roomId":"r1","commandId":"join-70","operatorUserId":"70"}`); enc != "" {
		t.Fatalf("a %d-byte answer was sent with Content-Encoding %q", n, enc)
	}
	// Load balancers ask the health check every few seconds on every node.
	if enc, n := post("/grpc.health.v1.Health/Check", `{}`); enc != "" {
		t.Fatalf("a %d-byte health answer was sent with Content-Encoding %q", n, enc)
	}
	if enc, n := post(roomv1connect.RoomServiceGetRoomSnapshotProcedure, `{"roomId":"r1"}`); enc != "gzip" {
		t.Fatalf("a %d-byte snapshot was sent with Content-Encoding %q, want gzip", n, enc)
	}
}

// TestSnapshotReadsAgreeAcrossEncodings: a room read in binary protobuf
// (gRPC, Connect) and in JSON is the same room, read after read, after a
// change and with another member limit; the binary answers of one version
// share one encoding.
func TestSnapshotReadsAgreeAcrossEncodings(t *testing.T) {
	s := start(t)
	seed(t, s)
	clients := map[string]roomv1connect.RoomServiceClient{
		"grpc":          roomv1connect.NewRoomServiceClient(s.h2c, s.base, connect.WithGRPC(), withToken(token)),
		"connect-proto": roomv1connect.NewRoomServiceClient(s.h1, s.base, withToken(token)),
		"connect-json":  roomv1connect.NewRoomServiceClient(s.h1, s.base, connect.WithProtoJSON(), withToken(token)),
	}
	read := func(name string, limit int32) *roomv1.RoomSnapshot {
		t.Helper()
		res, err := clients[name].GetRoomSnapshot(context.Background(), connect.NewRequest(&roomv1.GetRoomSnapshotRequest{RoomId: "r1", MemberLimit: limit}))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if len(res.Msg.ProtoReflect().GetUnknown()) != 0 {
			t.Fatalf("%s: the answer has unknown fields", name)
		}
		return res.Msg.GetSnapshot()
	}
	agree := func(limit int32, members int) {
		t.Helper()
		want := read("connect-json", limit)
		if len(want.GetMembers()) != members {
			t.Fatalf("member_limit %d: %d members, want %d", limit, len(want.GetMembers()), members)
		}
		for _, name := range []string{"grpc", "connect-proto", "grpc", "connect-proto"} {
			if got := read(name, limit); !proto.Equal(got, want) {
				t.Fatalf("member_limit %d: %s read\n%v\nJSON read\n%v", limit, name, got, want)
			}
		}
	}
	agree(0, 2) // users 2 and 3
	agree(1, 1)
	agree(0, 2)
	// A change, read at the limit of the last read before it.
	must(t, s.rooms.JoinRoom, &roomv1.JoinRoomRequest{RoomId: "r1", CommandId: "join-4", OperatorUserId: 4, Nickname: "four"})
	agree(0, 3)
	agree(2, 2)
	title := "Saturday"
	must(t, s.rooms.UpdateProfile, &roomv1.UpdateProfileRequest{RoomId: "r1", CommandId: "title", OperatorUserId: 1, Title: &title})
	agree(2, 2)
	if got := read("grpc", 2); got.GetProfile().GetTitle() != "Saturday" {
		t.Fatalf("after the title change: %v", got)
	}
}
