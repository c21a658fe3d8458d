package natsbus

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	roomv1 "hyapp/room-service/gen/room/v1"
	"hyapp/room-service/outbox"
)

// Header names carried by every published room event. HeaderMsgID is
// JetStream's own dedup header; the others let consumers route and filter
// without decoding the body.
const (
	HeaderMsgID       = jetstream.MsgIDHeader // "Nats-Msg-Id" = event_id
	HeaderContentType = "Content-Type"
	HeaderRoomID      = "Room-Id"
	HeaderRoomVersion = "Room-Version"
	HeaderEventType   = "Event-Type"
	// HeaderTraceParent is the W3C trace context of the publish (or of the
	// command that wrote the row), when it was traced: a consumer continues
	// the trace from it.
	HeaderTraceParent = "traceparent"

	// ContentType is the value of HeaderContentType: the body is a
	// protobuf-encoded room.v1.RoomEvent.
	ContentType = "application/protobuf"
)

// ErrInvalidRecord is returned (wrapped) by Encode and Publish for a record
// that cannot be put on the wire: no event id, no event type or no room id.
// The record will never publish; retrying it is pointless.
var ErrInvalidRecord = errors.New("natsbus: invalid record")

// ErrInvalidToken is returned (wrapped) by ParseRoomToken for a token that
// RoomToken could not have produced.
var ErrInvalidToken = errors.New("natsbus: invalid room token")

// Encode returns the wire form of r: the body is a protobuf room.v1.RoomEvent
// and the headers carry the dedup id (Nats-Msg-Id = event_id), the content
// type, the room id, the room version and the event type. A zero CreatedAt
// encodes as occurred_at_ms 0. Publish and BareAsyncPublish use it; tests and
// benchmarks may too. The returned header is freshly allocated and owned by
// the caller.
func Encode(r outbox.Record) ([]byte, nats.Header, error) {
	var missing []string
	if r.EventID == "" {
		missing = append(missing, "event id")
	}
	if r.EventType == "" {
		missing = append(missing, "event type")
	}
	if r.RoomID == "" {
		missing = append(missing, "room id")
	}
	if len(missing) > 0 {
		return nil, nil, fmt.Errorf("encode event=%q: %w: no %s", r.EventID, ErrInvalidRecord, strings.Join(missing, ", "))
	}
	ev := &roomv1.RoomEvent{
		EventId:     r.EventID,
		EventType:   r.EventType,
		RoomId:      r.RoomID,
		RoomVersion: r.RoomVersion,
		Seq:         r.Seq,
		PayloadJson: string(r.Payload),
	}
	if !r.CreatedAt.IsZero() {
		ev.OccurredAtMs = r.CreatedAt.UnixMilli()
	}
	data, err := proto.Marshal(ev)
	if err != nil {
		return nil, nil, fmt.Errorf("encode event=%s: %w", r.EventID, err)
	}
	h := make(nats.Header, 6)
	// Direct map writes: the keys are already canonical and Set would
	// re-canonicalise them on every message. The values share one array,
	// each capped so that an Add gets a slice of its own.
	vals := [...]string{r.EventID, ContentType, r.RoomID, strconv.FormatInt(r.RoomVersion, 10), r.EventType, r.TraceContext}
	all := vals[:]
	one := func(i int) []string { return all[i : i+1 : i+1] }
	h[HeaderMsgID] = one(0)
	h[HeaderContentType] = one(1)
	h[HeaderRoomID] = one(2)
	h[HeaderRoomVersion] = one(3)
	h[HeaderEventType] = one(4)
	if r.TraceContext != "" {
		h[HeaderTraceParent] = one(5)
	}
	return data, h, nil
}

// Decode parses the body of a published room event (msg.Data() of a
// jetstream.Msg, or the Data of a nats.Msg or jetstream.RawStreamMsg).
func Decode(data []byte) (*roomv1.RoomEvent, error) {
	ev := new(roomv1.RoomEvent)
	if err := proto.Unmarshal(data, ev); err != nil {
		return nil, fmt.Errorf("decode room event: %w", err)
	}
	return ev, nil
}

// RoomToken returns a subject token for roomID that contains no NATS
// separator or wildcard: '.', '*', '>', '%', and every byte <= ' ' or >= 0x7f
// become %XX (upper-case hex). Other bytes pass through, so ordinary ids are
// their own token. The mapping is one to one; ParseRoomToken reverses it.
// The empty id yields the empty token, which is not a valid subject token.
func RoomToken(roomID string) string {
	n := 0
	for i := 0; i < len(roomID); i++ {
		if needsEscape(roomID[i]) {
			n++
		}
	}
	if n == 0 {
		return roomID
	}
	const hex = "0123456789ABCDEF"
	var sb strings.Builder
	sb.Grow(len(roomID) + 2*n)
	for i := 0; i < len(roomID); i++ {
		c := roomID[i]
		if needsEscape(c) {
			sb.WriteByte('%')
			sb.WriteByte(hex[c>>4])
			sb.WriteByte(hex[c&0xf])
			continue
		}
		sb.WriteByte(c)
	}
	return sb.String()
}

// ParseRoomToken is the inverse of RoomToken. It accepts exactly the tokens
// RoomToken produces and returns ErrInvalidToken, wrapped, for anything else
// (a lower-case escape, an escaped byte that needs no escape, a raw byte that
// does).
func ParseRoomToken(token string) (string, error) {
	if !strings.Contains(token, "%") {
		for i := 0; i < len(token); i++ {
			if needsEscape(token[i]) {
				return "", fmt.Errorf("parse room token %q: %w: unescaped byte %#x", token, ErrInvalidToken, token[i])
			}
		}
		return token, nil
	}
	b := make([]byte, 0, len(token))
	for i := 0; i < len(token); i++ {
		c := token[i]
		if c != '%' {
			if needsEscape(c) {
				return "", fmt.Errorf("parse room token %q: %w: unescaped byte %#x", token, ErrInvalidToken, c)
			}
			b = append(b, c)
			continue
		}
		if i+2 >= len(token) {
			return "", fmt.Errorf("parse room token %q: %w: truncated escape", token, ErrInvalidToken)
		}
		hi, ok1 := unhex(token[i+1])
		lo, ok2 := unhex(token[i+2])
		// Only escapes RoomToken writes are accepted, so that every id has
		// exactly one token ("A" and "%41" must not both mean "A").
		if !ok1 || !ok2 || !needsEscape(hi<<4|lo) {
			return "", fmt.Errorf("parse room token %q: %w: bad escape %q", token, ErrInvalidToken, token[i:i+3])
		}
		b = append(b, hi<<4|lo)
		i += 2
	}
	return string(b), nil
}

func needsEscape(c byte) bool {
	return c <= ' ' || c >= 0x7f || c == '.' || c == '*' || c == '>' || c == '%'
}

func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}
