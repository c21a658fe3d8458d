package daemon

import (
	"context"
	"regexp"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	roomv1 "hyapp/room-service/gen/room/v1"
	"hyapp/room-service/rpc"
)

// TestGRPCListenServesTheAPI: grpc_listen serves the API's calls on the
// rooms listen serves, with the same credentials, and stops with the
// service; off, it is not served.
func TestGRPCListenServesTheAPI(t *testing.T) {
	m, client := runMain(t, t.TempDir(), "-token", serviceToken)
	if m.GRPCAddr == "" {
		t.Fatal("no gRPC address")
	}
	conn, err := grpc.NewClient(m.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx := t.Context()
	if res, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil || res.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health without a token: %v %v", res, err)
	}
	create := &roomv1.CreateRoomRequest{RoomId: "r1", CommandId: "c1", OperatorUserId: 1, OwnerUserId: 1, SeatCount: 8}
	var created roomv1.CreateRoomResponse
	if err := conn.Invoke(ctx, "/room.v1.RoomService/CreateRoom", create, &created); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("create without a token: %v", err)
	}
	k, v := rpc.Authorization(serviceToken)
	authed := metadata.AppendToOutgoingContext(ctx, strings.ToLower(k), v)
	if err := conn.Invoke(authed, "/room.v1.RoomService/CreateRoom", create, &created); err != nil || created.GetRoomVersion() != 1 {
		t.Fatalf("create: %v %v", &created, err)
	}
	var joined roomv1.JoinRoomResponse
	if err := conn.Invoke(authed, "/room.v1.RoomService/JoinRoom", &roomv1.JoinRoomRequest{RoomId: "r1", CommandId: "c2", OperatorUserId: 5, Nickname: "five"}, &joined); err != nil {
		t.Fatal(err)
	}
	// The same room on the API port.
	read := connect.NewRequest(&roomv1.GetRoomSnapshotRequest{RoomId: "r1"})
	read.Header().Set(k, v)
	snap, err := client.GetRoomSnapshot(ctx, read)
	if err != nil || snap.Msg.GetRoomVersion() != 2 || snap.Msg.GetSnapshot().GetMembers()[0].GetNickname() != "five" {
		t.Fatalf("the room on listen: %v %v", snap, err)
	}
	if err := m.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}); err == nil {
		t.Fatal("the gRPC transport still serves after Close")
	}

	off, _ := runMain(t, t.TempDir(), "-grpc-listen", "off")
	if off.GRPCAddr != "" {
		t.Fatalf("grpc_listen off is served at %s", off.GRPCAddr)
	}
}

func TestGRPCListenIsNotExposedWithoutToken(t *testing.T) {
	err := NewMain().ParseFlags([]string{"-grpc-listen", "0.0.0.0:9090"}, func(string) string { return "" })
	if err == nil || !regexp.MustCompile(`grpc_listen "0.0.0.0:9090" is not a loopback address`).MatchString(err.Error()) {
		t.Fatalf("got %v", err)
	}
}
