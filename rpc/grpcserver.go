package rpc

import (
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	grpccodes "google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"
	"google.golang.org/protobuf/proto"
)

// NewGRPCServer serves the gRPC protocol of h, the API's mux (NewMux), with
// grpc-go's HTTP/2 transport, within the limits and with requests of at
// most maxBytes (0: DefaultMaxRequestBytes).
//
// Why a second transport: on net/http's HTTP/2 server a call that does no
// work costs the service about 100 µs of CPU on a 2-core machine and caps
// the API near 12,000 calls/s; on grpc-go's, with the API's handlers
// behind it as here, 55 µs and 20,000 calls/s (roomctl bench -api).
//
// Every call still goes through h, as the same call would arrive over
// net/http: the authorisation, the interceptors, the limits, the routing
// to the room's owner and the error mapping are the API's, not a copy of
// them. The server passes each message to h as bytes and each answer back
// as bytes, so nothing is encoded twice. Streaming calls (health Watch,
// reflection) pass the same way.
func (l ServerLimits) NewGRPCServer(h http.Handler, maxBytes int64, log *slog.Logger) *grpc.Server {
	l = l.withDefaults()
	if maxBytes <= 0 {
		maxBytes = DefaultMaxRequestBytes
	}
	b := &grpcBridge{h: h, log: log}
	return grpc.NewServer(
		grpc.ForceServerCodecV2(rawCodec{}),
		// Calls run on long-lived workers instead of a goroutine each:
		// a new goroutine grows its stack, copying it, about twice on
		// the way through the API's handlers. In a profile of joins
		// through this transport, stack growth went from 7.4% of the
		// service's CPU to 4.3%. Past 1,024 calls at once, the others
		// get a goroutine each, as without workers.
		grpc.NumStreamWorkers(grpcWorkers),
		grpc.UnknownServiceHandler(b.serve),
		// The API refuses a message over maxBytes with its reason,
		// request_too_large, as it reads it (limitBody). grpc-go refuses a
		// larger one itself, with the same code and no reason, before the
		// API could: at twice the bound it holds no more in memory than
		// that, inflated or not.
		grpc.MaxRecvMsgSize(int(2*maxBytes)),
		// Fixed flow-control windows. With grpc-go's dynamic ones, the
		// first data a connection receives after each round trip makes
		// the server send a window update and a bandwidth-probing ping,
		// which the caller answers: in 50,000 health checks and 100,000
		// joins at 256 in flight, 6,300 pings and as many window updates
		// the callers did not need. A stream's window holds a request of
		// the default largest size; the dynamic ones grow up to 16 MiB.
		grpc.StaticStreamWindowSize(GRPCStreamWindow),
		grpc.StaticConnWindowSize(GRPCConnWindow),
		grpc.MaxConcurrentStreams(uint32(l.MaxConcurrentStreams)),
		grpc.MaxHeaderListSize(uint32(l.MaxHeaderBytes)),
		grpc.ConnectionTimeout(min(l.ReadTimeout, 10*time.Second)),
		grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionIdle: l.IdleTimeout}),
		// Clients that keep their connections warm with pings every
		// ten seconds or more are served; faster pingers are sent away.
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
		grpc.InTapHandle(keepHeaders),
	)
}

// headersKey is where keepHeaders leaves a call's headers.
type headersKey struct{}

// keepHeaders leaves the call's headers, as the transport parsed them, in
// its context for the bridge. metadata.FromIncomingContext would hand the
// bridge a copy of every key and value, made for each call and dropped at
// once: 3% of the allocations and 1.5-3.5% of the service's CPU in the
// joins through this transport.
func keepHeaders(ctx context.Context, info *tap.Info) (context.Context, error) {
	return context.WithValue(ctx, headersKey{}, info.Header), nil
}

// incomingHeaders are the call's headers: keepHeaders', else a copy. Its
// slices are the transport's: read them, never append to them.
func incomingHeaders(ctx context.Context) metadata.MD {
	if md, ok := ctx.Value(headersKey{}).(metadata.MD); ok {
		return md
	}
	md, _ := metadata.FromIncomingContext(ctx)
	return md
}

// The gRPC transport's flow-control windows: a stream's and a
// connection's.
const (
	GRPCStreamWindow = DefaultMaxRequestBytes
	GRPCConnWindow   = 4 << 20
)

// grpcWorkers is the number of goroutines that run the calls of the gRPC
// transport.
const grpcWorkers = 1024

// rawCodec passes messages through as bytes: the handlers behind the
// bridge decode and encode them.
type rawCodec struct{}

// rawMessage is one message's bytes: data as received, or buf, a buffer of
// the transport's pool, to send (the transport frees it once written).
type rawMessage struct {
	data []byte
	buf  mem.Buffer
}

func (rawCodec) Name() string { return "proto" }

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	m, ok := v.(*rawMessage)
	if !ok {
		return nil, fmt.Errorf("marshal %T: not a raw message", v)
	}
	if m.buf != nil {
		return mem.BufferSlice{m.buf}, nil
	}
	return mem.BufferSlice{mem.SliceBuffer(m.data)}, nil
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	m, ok := v.(*rawMessage)
	if !ok {
		return fmt.Errorf("unmarshal into %T: not a raw message", v)
	}
	m.data = data.Materialize()
	return nil
}

var _ encoding.CodecV2 = rawCodec{}

// grpcBridge hands the calls of a grpc-go server to an http.Handler that
// serves the gRPC protocol (connect's handlers).
type grpcBridge struct {
	h   http.Handler
	log *slog.Logger
}

// grpcNotPassed are request headers the transport has consumed: the
// bridge hands the handler an uncompressed body and takes care of
// compressing the answer itself, and the call's deadline is its context's.
var grpcNotPassed = map[string]bool{
	"content-type": true, "grpc-encoding": true, "grpc-accept-encoding": true, "grpc-timeout": true, "te": true, ":authority": true,
}

func (b *grpcBridge) serve(_ any, stream grpc.ServerStream) (err error) {
	ctx := stream.Context()
	method, ok := grpc.MethodFromServerStream(stream)
	if !ok {
		return status.Error(grpccodes.Internal, "no method")
	}
	defer func() {
		if p := recover(); p != nil {
			b.log.ErrorContext(ctx, "gRPC bridge panic", "procedure", method, "panic", p)
			err = status.Errorf(grpccodes.Internal, "internal: panic in %s", method)
		}
	}()
	md := incomingHeaders(ctx)
	// One allocation for the call's parts; the handler's request is the
	// copy WithContext makes.
	c := &bridgeCall{url: url.URL{Path: method}}
	r := &c.req
	*r = http.Request{
		Method: http.MethodPost, URL: &c.url, RequestURI: method,
		Proto: "HTTP/2.0", ProtoMajor: 2, Header: make(http.Header, len(md)+1), ContentLength: -1,
	}
	for k, vs := range md {
		switch {
		case k == ":authority" && len(vs) > 0:
			r.Host = vs[0]
		case k == "content-type" && len(vs) > 0:
			r.Header["Content-Type"] = vs[:1:1]
		case grpcNotPassed[k] || strings.HasPrefix(k, ":"):
		case strings.HasSuffix(k, "-bin"):
			enc := make([]string, len(vs))
			for i, v := range vs {
				enc[i] = connect.EncodeBinaryHeader([]byte(v))
			}
			r.Header[http.CanonicalHeaderKey(k)] = enc
		default:
			// Capped: a handler's Header.Add gets a slice of its own
			// instead of writing past the end of the transport's.
			r.Header[http.CanonicalHeaderKey(k)] = vs[:len(vs):len(vs)]
		}
	}
	if r.Header["Content-Type"] == nil {
		r.Header["Content-Type"] = []string{"application/grpc"}
	}
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		r.RemoteAddr = remoteAddr(p.Addr)
	}
	body := &c.body
	body.stream = stream
	r.Body = body
	w := &c.resp
	*w = grpcResponse{stream: stream, header: make(http.Header, 4), gzipOK: acceptsGzip(md)}
	b.h.ServeHTTP(w, r.WithContext(ctx))
	return w.finish(body)
}

// remoteAddr is a's host:port, as net.TCPAddr.String writes it, formatted
// in one allocation instead of three.
func remoteAddr(a net.Addr) string {
	if t, ok := a.(*net.TCPAddr); ok {
		if ap := t.AddrPort(); ap.Addr().IsValid() {
			return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()).String()
		}
	}
	return a.String()
}

// bridgeCall is what the bridge makes for one call, in one allocation.
type bridgeCall struct {
	req  http.Request
	url  url.URL
	body grpcBody
	resp grpcResponse
}

// acceptsGzip reports whether the caller takes gzip answers.
func acceptsGzip(md metadata.MD) bool {
	for _, v := range md["grpc-accept-encoding"] {
		for name := range strings.SplitSeq(v, ",") {
			if strings.TrimSpace(name) == "gzip" {
				return true
			}
		}
	}
	return false
}

// grpcBody is the request body the handler reads: the caller's messages,
// each in the gRPC envelope (uncompressed), until the caller closes its
// side.
type grpcBody struct {
	stream grpc.ServerStream
	prefix [envelopePrefix]byte
	head   []byte // what is left of the current message's prefix
	data   []byte // what is left of the current message
	err    error  // the end of the caller's messages, or why they stopped
	msg    rawMessage
}

func (b *grpcBody) Read(p []byte) (int, error) {
	if len(b.head) == 0 && len(b.data) == 0 {
		if b.err != nil {
			return 0, b.err
		}
		b.msg = rawMessage{}
		if err := b.stream.RecvMsg(&b.msg); err != nil {
			b.err = err
			return 0, err
		}
		binary.BigEndian.PutUint32(b.prefix[1:], uint32(len(b.msg.data)))
		b.head, b.data = b.prefix[:], b.msg.data
	}
	n := copy(p, b.head)
	b.head = b.head[n:]
	m := copy(p[n:], b.data)
	b.data = b.data[m:]
	return n + m, nil
}

func (*grpcBody) Close() error { return nil }

// grpcResponse is the handler's ResponseWriter: it sends each whole
// message of the body as it is written, the headers with the first, and
// the status and trailers when the handler returns.
type grpcResponse struct {
	stream  grpc.ServerStream
	header  http.Header
	code    int // the HTTP status; 0 until written
	pending []byte
	prefix  [envelopePrefix]byte // pending's first bytes
	sent    bool                 // a message went out
	gzipOK  bool
	err     error      // the first send that failed
	out     rawMessage // the message being sent
}

func (w *grpcResponse) Header() http.Header { return w.header }

func (w *grpcResponse) WriteHeader(code int) {
	if w.code != 0 {
		return
	}
	w.code = code
	if md := grpcMetadata(w.header); len(md) > 0 {
		w.fail(w.stream.SetHeader(md))
	}
}

func (w *grpcResponse) Flush() {}

func (w *grpcResponse) Write(p []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	if w.err != nil {
		return 0, w.err
	}
	if len(w.pending) == envelopePrefix && w.pending[0] == 0 && len(p) == int(binary.BigEndian.Uint32(w.pending[1:])) {
		// A whole message after its prefix, the way the handler writes
		// an answer: one copy, for the transport, not two.
		w.pending = w.pending[:0]
		w.send(p)
		if w.err != nil {
			return 0, w.err
		}
		return len(p), nil
	}
	if len(w.pending) == 0 {
		// Most often an envelope's prefix alone, its message to follow:
		// kept in the response's own bytes.
		w.pending = w.prefix[:0]
	}
	w.pending = append(w.pending, p...)
	for len(w.pending) >= envelopePrefix {
		n := int(binary.BigEndian.Uint32(w.pending[1:envelopePrefix]))
		if len(w.pending) < envelopePrefix+n {
			break
		}
		if w.pending[0] != 0 {
			// The handler compresses only for callers that ask it to,
			// and the bridge never asks.
			w.fail(status.Error(grpccodes.Internal, "internal: a compressed message from the handler"))
			return 0, w.err
		}
		msg := w.pending[envelopePrefix : envelopePrefix+n]
		w.pending = w.pending[envelopePrefix+n:]
		w.send(msg)
		if w.err != nil {
			return 0, w.err
		}
	}
	if len(w.pending) == 0 {
		w.pending = nil
	}
	return len(p), nil
}

// send sends one message, compressed when it is at least
// compressMinBytes and the caller takes gzip: the same rule as the
// API's answers over net/http. The transport writes the message after
// SendMsg returns, so it gets a copy of its own, in a buffer of its pool
// rather than in a slice allocated and cleared for every answer (a
// snapshot's kilobytes included).
func (w *grpcResponse) send(msg []byte) {
	if !w.sent {
		w.sent = true
		name := "identity"
		if w.gzipOK && len(msg) >= compressMinBytes {
			name = "gzip"
		}
		if err := grpc.SetSendCompressor(w.stream.Context(), name); err != nil {
			w.fail(err)
			return
		}
	}
	// The transport encodes the message before SendMsg returns and keeps
	// only the buffer, which it frees once written.
	w.out = rawMessage{buf: mem.Copy(msg, mem.DefaultBufferPool())}
	w.fail(w.stream.SendMsg(&w.out))
	w.out = rawMessage{}
}

func (w *grpcResponse) fail(err error) {
	if w.err == nil && err != nil {
		w.err = err
	}
}

// finish ends the call: the handler's status and trailers, or what kept
// the bridge from passing the call on.
func (w *grpcResponse) finish(body *grpcBody) error {
	if _, ok := status.FromError(body.err); ok && body.err != nil {
		// The transport could not read the request (too large, cancelled,
		// a bad compressed message) and answered the call itself.
		return body.err
	}
	if w.err != nil {
		return w.err
	}
	if len(w.pending) > 0 {
		return status.Error(grpccodes.Internal, "internal: a partial message from the handler")
	}
	t := w.trailers()
	if len(t.md) > 0 {
		w.stream.SetTrailer(t.md)
	}
	if w.code != http.StatusOK && w.code != 0 {
		return status.Errorf(httpToGRPC(w.code), "HTTP status %d", w.code)
	}
	if t.status == "" {
		return status.Error(grpccodes.Internal, "internal: the handler sent no status")
	}
	code, err := strconv.ParseUint(t.status, 10, 32)
	if err != nil {
		return status.Errorf(grpccodes.Internal, "internal: status %q", t.status)
	}
	if grpccodes.Code(code) == grpccodes.OK {
		return nil
	}
	if t.details != "" {
		var st spb.Status
		if b, err := connect.DecodeBinaryHeader(t.details); err == nil && proto.Unmarshal(b, &st) == nil && st.GetCode() == int32(code) {
			return status.FromProto(&st).Err()
		}
	}
	msg := t.message
	if m, err := url.PathUnescape(msg); err == nil {
		msg = m
	}
	return status.Error(grpccodes.Code(code), msg)
}

// handlerTrailers are a handler's trailers: its gRPC status, message and
// details, and the metadata of the others.
type handlerTrailers struct {
	status, message, details string
	md                       metadata.MD
}

// trailers are the handler's trailers: the headers it wrote with
// http.TrailerPrefix or declared in Trailer, and all the others when it
// wrote no headers (an answer of trailers only).
func (w *grpcResponse) trailers() handlerTrailers {
	var declared map[string]bool
	for _, v := range w.header.Values("Trailer") {
		for name := range strings.SplitSeq(v, ",") {
			if declared == nil {
				declared = map[string]bool{}
			}
			declared[http.CanonicalHeaderKey(strings.TrimSpace(name))] = true
		}
	}
	var t handlerTrailers
	for k, vs := range w.header {
		name, ok := strings.CutPrefix(k, http.TrailerPrefix)
		switch {
		case ok:
			name = http.CanonicalHeaderKey(name)
		case w.code == 0 || declared[k]:
		default:
			continue
		}
		if len(vs) > 0 {
			switch name {
			case "Grpc-Status":
				t.status = vs[0]
			case "Grpc-Message":
				t.message = vs[0]
			case "Grpc-Status-Details-Bin":
				t.details = vs[0]
			}
		}
		t.md = appendMetadata(t.md, name, vs)
	}
	return t
}

// grpcProtocol are the headers and trailers the transport writes itself.
var grpcProtocol = map[string]bool{
	"Content-Type": true, "Content-Length": true, "Date": true, "Trailer": true, "Grpc-Accept-Encoding": true, "Grpc-Encoding": true,
	"Grpc-Status": true, "Grpc-Message": true, "Grpc-Status-Details-Bin": true,
}

// grpcMetadata is the metadata of the handler's headers h, without those
// of the protocol and the trailers announced in them.
func grpcMetadata(h http.Header) metadata.MD {
	var md metadata.MD
	for k, vs := range h {
		if !strings.HasPrefix(k, http.TrailerPrefix) {
			md = appendMetadata(md, k, vs)
		}
	}
	return md
}

// appendMetadata adds the header k's values vs to md, unless the transport
// writes k itself; binary values are decoded.
func appendMetadata(md metadata.MD, k string, vs []string) metadata.MD {
	if grpcProtocol[k] {
		return md
	}
	if md == nil {
		md = make(metadata.MD, 2)
	}
	key := strings.ToLower(k)
	if strings.HasSuffix(key, "-bin") {
		for _, v := range vs {
			if b, err := connect.DecodeBinaryHeader(v); err == nil {
				md[key] = append(md[key], string(b))
			}
		}
		return md
	}
	md[key] = append(md[key], vs...)
	return md
}

// httpToGRPC is gRPC's code for an HTTP status that ended a call without
// a gRPC status (the mapping of gRPC's HTTP guide).
func httpToGRPC(code int) grpccodes.Code {
	switch code {
	case http.StatusBadRequest:
		return grpccodes.Internal
	case http.StatusUnauthorized:
		return grpccodes.Unauthenticated
	case http.StatusForbidden:
		return grpccodes.PermissionDenied
	case http.StatusNotFound:
		return grpccodes.Unimplemented
	case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return grpccodes.Unavailable
	default:
		return grpccodes.Unknown
	}
}
