package rpc_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding/gzip"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	roomv1 "hyapp/room-service/gen/room/v1"
	"hyapp/room-service/rpc"
)

// grpcConn is a grpc-go client of the stack's gRPC transport.
func grpcConn(t testing.TB, s *stack, opts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(s.grpcAddr, append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// withGRPCToken is ctx with the service token in the call's metadata.
func withGRPCToken(ctx context.Context, tok string) context.Context {
	k, v := rpc.Authorization(tok)
	return metadata.AppendToOutgoingContext(ctx, strings.ToLower(k), v)
}

// wantStatus fails unless err is a gRPC status of code whose ErrorInfo
// names reason.
func wantStatus(t *testing.T, err error, code codes.Code, reason string) {
	t.Helper()
	st := status.Convert(err)
	got := ""
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			got = info.GetReason()
		}
	}
	if err == nil || st.Code() != code || got != reason {
		t.Fatalf("got %v (code %v, reason %q); want code %v, reason %q", err, st.Code(), got, code, reason)
	}
}

// TestGRPCTransport: the API on grpc-go's transport answers as it does on
// net/http: the same answers, codes and reasons, the same credentials, the
// same refusals of malformed and oversized requests, which change nothing.
func TestGRPCTransport(t *testing.T) {
	s := start(t)
	conn := grpcConn(t, s)
	ctx := withGRPCToken(t.Context(), token)
	invoke := func(ctx context.Context, method string, req, res proto.Message, opts ...grpc.CallOption) error {
		return conn.Invoke(ctx, "/room.v1.RoomService/"+method, req, res, opts...)
	}
	var created roomv1.CreateRoomResponse
	if err := invoke(ctx, "CreateRoom", &roomv1.CreateRoomRequest{RoomId: "g1", CommandId: "create", OperatorUserId: 1, OwnerUserId: 1, SeatCount: 4}, &created); err != nil || created.GetRoomVersion() != 1 {
		t.Fatalf("create: %v %v", &created, err)
	}
	var joined roomv1.JoinRoomResponse
	if err := invoke(ctx, "JoinRoom", &roomv1.JoinRoomRequest{RoomId: "g1", CommandId: "join-7", OperatorUserId: 7, Nickname: "seven"}, &joined); err != nil || joined.GetRoomVersion() != 2 {
		t.Fatalf("join: %v %v", &joined, err)
	}
	var snap roomv1.GetRoomSnapshotResponse
	if err := invoke(ctx, "GetRoomSnapshot", &roomv1.GetRoomSnapshotRequest{RoomId: "g1"}, &snap); err != nil {
		t.Fatal(err)
	}
	if want := s.snapshot(t, "g1"); !proto.Equal(snap.GetSnapshot(), want) {
		t.Fatalf("the snapshot over grpc-go's transport:\n%v\nover net/http:\n%v", snap.GetSnapshot(), want)
	}

	// Refusals, each with its reason.
	var res roomv1.TakeMicResponse
	wantStatus(t, invoke(ctx, "TakeMic", &roomv1.TakeMicRequest{RoomId: "g1", CommandId: "mic", OperatorUserId: 1, SeatIndex: 4}, &res),
		codes.InvalidArgument, "bad_seat_index")
	wantStatus(t, invoke(ctx, "JoinRoom", &roomv1.JoinRoomRequest{RoomId: "nope", CommandId: "c", OperatorUserId: 1}, &joined),
		codes.NotFound, "room_not_found")
	wantStatus(t, invoke(t.Context(), "GetRoomSnapshot", &roomv1.GetRoomSnapshotRequest{RoomId: "g1"}, &snap),
		codes.Unauthenticated, "unauthenticated")
	wantStatus(t, invoke(withGRPCToken(t.Context(), "wrong"), "GetRoomSnapshot", &roomv1.GetRoomSnapshotRequest{RoomId: "g1"}, &snap),
		codes.Unauthenticated, "unauthenticated")
	wantStatus(t, invoke(ctx, "NoSuchMethod", &roomv1.GetRoomSnapshotRequest{RoomId: "g1"}, &snap), codes.Unimplemented, "unknown_procedure")
	wantStatus(t, conn.Invoke(ctx, "/no.such.Service/Method", &roomv1.GetRoomSnapshotRequest{RoomId: "g1"}, &snap), codes.Unimplemented, "unknown_procedure")
	// A message that is no JoinRoomRequest: field 1 (room_id) as a varint.
	wantStatus(t, conn.Invoke(ctx, "/room.v1.RoomService/JoinRoom", &roomv1.GetRoomSnapshotRequest{RoomId: "g1"}, &joined, grpc.ForceCodecV2(badWire{})),
		codes.InvalidArgument, "malformed_request")
	// A panic in the handler is an internal error, and the server serves on.
	wantStatus(t, invoke(ctx, "JoinRoom", &roomv1.JoinRoomRequest{RoomId: "g1", CommandId: "boom", OperatorUserId: panicUser}, &joined),
		codes.Internal, "internal")
	// Too large, as it is and inflated from gzip.
	big := &roomv1.JoinRoomRequest{RoomId: "g1", CommandId: "big", OperatorUserId: 8, Nickname: strings.Repeat("x", rpc.DefaultMaxRequestBytes)}
	wantStatus(t, invoke(ctx, "JoinRoom", big, &joined), codes.ResourceExhausted, "request_too_large")
	wantStatus(t, invoke(ctx, "JoinRoom", big, &joined, grpc.UseCompressor(gzip.Name)), codes.ResourceExhausted, "request_too_large")
	// Past twice the bound grpc-go refuses it before the API reads it:
	// the same code, without the API's reason.
	big.Nickname = strings.Repeat("x", 8*rpc.DefaultMaxRequestBytes)
	for _, opts := range [][]grpc.CallOption{nil, {grpc.UseCompressor(gzip.Name)}} {
		if err := invoke(ctx, "JoinRoom", big, &joined, opts...); status.Code(err) != codes.ResourceExhausted {
			t.Fatalf("an 8 MiB join (%d call options): %v", len(opts), err)
		}
	}
	if v := s.snapshot(t, "g1").GetRoomVersion(); v != 2 {
		t.Fatalf("refused calls changed the room: version %d", v)
	}
	// A small compressed request is served.
	if err := invoke(ctx, "JoinRoom", &roomv1.JoinRoomRequest{RoomId: "g1", CommandId: "join-8", OperatorUserId: 8}, &joined, grpc.UseCompressor(gzip.Name)); err != nil || joined.GetRoomVersion() != 3 {
		t.Fatalf("a gzip join: %v %v", &joined, err)
	}
}

// badWire sends bytes that are no valid message of any room request:
// field 1 as a varint where a string belongs.
type badWire struct{}

func (badWire) Name() string { return "proto" }

func (badWire) Marshal(any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer{0x08, 0x01}}, nil
}

func (badWire) Unmarshal(mem.BufferSlice, any) error { return errors.New("badWire decodes nothing") }

// TestGRPCHealthAndReflection: the health check, its Watch stream, and
// gRPC reflection (a bidirectional stream; a development server's) on
// grpc-go's transport.
func TestGRPCHealthAndReflection(t *testing.T) {
	s := startWith(t, rpc.Options{}, quiet) // no credentials: reflection is served on the API
	conn := grpcConn(t, s)
	health := healthpb.NewHealthClient(conn)
	for _, service := range append([]string{""}, rpc.ServiceNames()...) {
		res, err := health.Check(t.Context(), &healthpb.HealthCheckRequest{Service: service})
		if err != nil || res.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("health of %q: %v %v", service, res, err)
		}
	}
	_, err := health.Check(t.Context(), &healthpb.HealthCheckRequest{Service: "no.such.Service"})
	if status.Code(err) != codes.NotFound {
		t.Fatalf("health of an unknown service: %v", err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	watch, err := health.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if res, err := watch.Recv(); err != nil || res.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("watch: %v %v", res, err)
	}
	cancel()

	stream, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	res, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, svc := range res.GetListServicesResponse().GetService() {
		names = append(names, svc.GetName())
	}
	if !strings.Contains(strings.Join(names, " "), "room.v1.RoomService") {
		t.Fatalf("reflection lists %v", names)
	}
	if err := stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
}

// payloads records the sizes of the answers a client received.
type payloads struct {
	mu  sync.Mutex
	got []*stats.InPayload
}

func (p *payloads) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context   { return ctx }
func (p *payloads) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }
func (p *payloads) HandleConn(context.Context, stats.ConnStats)                       {}
func (p *payloads) HandleRPC(_ context.Context, s stats.RPCStats) {
	if in, ok := s.(*stats.InPayload); ok {
		p.mu.Lock()
		p.got = append(p.got, in)
		p.mu.Unlock()
	}
}

func (p *payloads) last() *stats.InPayload {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.got[len(p.got)-1]
}

// TestGRPCSmallAnswersAreNotCompressed: on grpc-go's transport too, a
// caller that takes gzip gets a few-byte answer as it is and a large one
// compressed, whether or not it compressed its request.
func TestGRPCSmallAnswersAreNotCompressed(t *testing.T) {
	s := start(t)
	seed(t, s)
	for u := int64(10); u < 60; u++ {
		must(t, s.rooms.JoinRoom, &roomv1.JoinRoomRequest{RoomId: "r1", CommandId: fmt.Sprint("join-", u), OperatorUserId: u, Nickname: fmt.Sprint("listener number ", u)})
	}
	var sizes payloads
	conn := grpcConn(t, s, grpc.WithStatsHandler(&sizes))
	ctx := withGRPCToken(t.Context(), token)
	for _, opts := range [][]grpc.CallOption{nil, {grpc.UseCompressor(gzip.Name)}} {
		var joined roomv1.JoinRoomResponse
		if err := conn.Invoke(ctx, "/room.v1.RoomService/JoinRoom", &roomv1.JoinRoomRequest{RoomId: "r1", CommandId: fmt.Sprint("join-70-", len(opts)), OperatorUserId: 70}, &joined, opts...); err != nil {
			t.Fatal(err)
		}
		if in := sizes.last(); in.CompressedLength != in.Length {
			t.Fatalf("a %d-byte answer came compressed to %d bytes", in.Length, in.CompressedLength)
		}
		var snap roomv1.GetRoomSnapshotResponse
		if err := conn.Invoke(ctx, "/room.v1.RoomService/GetRoomSnapshot", &roomv1.GetRoomSnapshotRequest{RoomId: "r1"}, &snap, opts...); err != nil {
			t.Fatal(err)
		}
		if in := sizes.last(); in.CompressedLength >= in.Length || len(snap.GetSnapshot().GetMembers()) < 50 {
			t.Fatalf("a %d-byte snapshot of %d members came as %d bytes: not compressed", in.Length, len(snap.GetSnapshot().GetMembers()), in.CompressedLength)
		}
	}
}

// TestGRPCWindowsAreFixed: the gRPC transport announces its fixed
// windows and answers a call without probing the connection's bandwidth
// (no ping of its own before the answer's trailers), which grpc-go does
// with dynamic windows on the first data a connection receives.
func TestGRPCWindowsAreFixed(t *testing.T) {
	s := startWith(t, rpc.Options{}, quiet)
	c, err := net.Dial("tcp", s.grpcAddr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if err := c.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(c, c)
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	var head bytes.Buffer
	enc := hpack.NewEncoder(&head)
	for _, f := range [][2]string{
		{":method", "POST"}, {":scheme", "http"}, {":path", "/grpc.health.v1.Health/Check"}, {":authority", "room-service"},
		{"content-type", "application/grpc"}, {"te", "trailers"},
	} {
		if err := enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]}); err != nil {
			t.Fatal(err)
		}
	}
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: head.Bytes(), EndHeaders: true}); err != nil {
		t.Fatal(err)
	}
	if err := fr.WriteData(1, true, []byte{0, 0, 0, 0, 0}); err != nil { // an empty HealthCheckRequest
		t.Fatal(err)
	}
	window, connWindow := uint32(65535), uint32(65535)
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("before the answer's trailers: %v", err)
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if v, ok := f.Value(http2.SettingInitialWindowSize); ok {
				window = v
			}
		case *http2.WindowUpdateFrame:
			if f.StreamID == 0 {
				connWindow += f.Increment
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				t.Fatalf("the server probed the connection with a ping (windows %d and %d)", window, connWindow)
			}
		case *http2.MetaHeadersFrame:
			if !f.StreamEnded() {
				continue
			}
			var code string
			for _, h := range f.RegularFields() {
				if h.Name == "grpc-status" {
					code = h.Value
				}
			}
			if f.StreamID != 1 || code != "0" {
				t.Fatalf("trailers of stream %d: %v", f.StreamID, f.Fields)
			}
			if window != rpc.GRPCStreamWindow || connWindow != rpc.GRPCConnWindow {
				t.Fatalf("windows %d and %d; want %d and %d", window, connWindow, rpc.GRPCStreamWindow, rpc.GRPCConnWindow)
			}
			return
		}
	}
}

// BenchmarkGRPCSnapshotRead reads the snapshot of a room of 150 members
// through the gRPC transport, as clients repairing what they missed do,
// many at once: the time and the allocations are both sides' of one call,
// the answer left encoded (a client's decoding is not the service's).
func BenchmarkGRPCSnapshotRead(b *testing.B) {
	s := start(b)
	conn := grpcConn(b, s)
	ctx := withGRPCToken(context.Background(), token)
	invoke := func(method string, req, res proto.Message) {
		b.Helper()
		if err := conn.Invoke(ctx, "/room.v1.RoomService/"+method, req, res); err != nil {
			b.Fatalf("%s: %v", method, err)
		}
	}
	invoke("CreateRoom", &roomv1.CreateRoomRequest{RoomId: "read", CommandId: "create", OperatorUserId: 1, OwnerUserId: 1, SeatCount: 8}, &roomv1.CreateRoomResponse{})
	for u := int64(1); u <= 150; u++ {
		invoke("JoinRoom", &roomv1.JoinRoomRequest{RoomId: "read", CommandId: fmt.Sprint("join-", u), OperatorUserId: u}, &roomv1.JoinRoomResponse{})
	}
	var snap roomv1.GetRoomSnapshotResponse
	invoke("GetRoomSnapshot", &roomv1.GetRoomSnapshotRequest{RoomId: "read"}, &snap)
	if n := len(snap.GetSnapshot().GetMembers()); n != 150 {
		b.Fatalf("the room has %d members; want 150", n)
	}
	req, size := &roomv1.GetRoomSnapshotRequest{RoomId: "read"}, proto.Size(&snap)
	b.ReportAllocs()
	b.SetBytes(int64(size))
	b.SetParallelism(32) // calls in flight: the cores stay busy, so the time is CPU
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			var raw rawAnswer
			if err := conn.Invoke(ctx, "/room.v1.RoomService/GetRoomSnapshot", req, &raw, grpc.ForceCodecV2(rawAnswerCodec{})); err != nil {
				b.Error(err)
				return
			}
			if raw.n != size {
				b.Errorf("an answer of %d bytes; want %d", raw.n, size)
				return
			}
		}
	})
}

// rawAnswer is the length of an answer a benchmark's client leaves
// encoded.
type rawAnswer struct{ n int }

// rawAnswerCodec encodes requests as protobuf and decodes no answer.
type rawAnswerCodec struct{}

func (rawAnswerCodec) Name() string { return "proto" }

func (rawAnswerCodec) Marshal(v any) (mem.BufferSlice, error) {
	b, err := proto.Marshal(v.(proto.Message))
	return mem.BufferSlice{mem.SliceBuffer(b)}, err
}

func (rawAnswerCodec) Unmarshal(data mem.BufferSlice, v any) error {
	v.(*rawAnswer).n = data.Len()
	return nil
}

// BenchmarkGRPCHealthCheck makes calls that do no work through the gRPC
// transport, many at once: the time and the allocations are both sides'
// of one call, the transport's and the bridge's cost with no handler's
// work beside it.
func BenchmarkGRPCHealthCheck(b *testing.B) {
	s := start(b)
	conn := grpcConn(b, s)
	ctx := withGRPCToken(context.Background(), token)
	b.ReportAllocs()
	b.SetParallelism(32)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			var res healthpb.HealthCheckResponse
			if err := conn.Invoke(ctx, "/grpc.health.v1.Health/Check", &healthpb.HealthCheckRequest{}, &res); err != nil {
				b.Error(err)
				return
			}
			if res.GetStatus() != healthpb.HealthCheckResponse_SERVING {
				b.Errorf("status %v", res.GetStatus())
				return
			}
		}
	})
}
