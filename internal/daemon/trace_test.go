package daemon

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/nats-io/nats.go"

	roomv1 "hyapp/room-service/gen/room/v1"
	"hyapp/room-service/internal/poll"
	"hyapp/room-service/outbox/natsbus"
)

// consoleSpan is what the console exporter prints of a span.
type consoleSpan struct {
	Name        string
	SpanContext struct{ TraceID, SpanID string }
	Parent      struct{ TraceID, SpanID string }
	Links       []struct{ SpanContext struct{ TraceID string } }
	Attributes  []struct {
		Key   string
		Value struct{ Value any }
	}
}

// spansOf reads the spans of trace traceID in the nodes' output.
func spansOf(traceID string, nodes ...*node) []consoleSpan {
	return spansWhere(func(s *consoleSpan) bool { return s.SpanContext.TraceID == traceID }, nodes...)
}

// spansWhere reads the spans in the nodes' output that keep says to keep.
func spansWhere(keep func(*consoleSpan) bool, nodes ...*node) []consoleSpan {
	var out []consoleSpan
	for _, nd := range nodes {
		sc := bufio.NewScanner(strings.NewReader(nd.stdout.String()))
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var s consoleSpan
			if json.Unmarshal(sc.Bytes(), &s) == nil && keep(&s) {
				out = append(out, s)
			}
		}
	}
	return out
}

// linkedSends reads the IM sends in other traces that link trace traceID:
// a message that carries events of several traces is sent in the trace of
// its oldest traced event and links the others.
func linkedSends(traceID string, nodes ...*node) []consoleSpan {
	return spansWhere(func(s *consoleSpan) bool {
		return s.Name == "im.send" && slices.ContainsFunc(s.Links, func(l struct{ SpanContext struct{ TraceID string } }) bool {
			return l.SpanContext.TraceID == traceID
		})
	}, nodes...)
}

func names(spans []consoleSpan) []string {
	var out []string
	for _, s := range spans {
		out = append(out, s.Name)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// TestOneCommandsTraceAcrossTheFleet runs two nodes exporting spans to
// their standard output, sends a TakeMic and a SendGift to the node that
// does not own the room, each with its own traceparent, and finds under
// each trace id the API call on both nodes, the hop, the mailbox wait,
// the apply, the commit and its transaction, the gift's wallet quote,
// the IM send (in the trace, or linking it when the event shared its
// message with an older traced one) and the outbox publish; the NATS message of the mic change
// carries the trace id on to consumers.
func TestOneCommandsTraceAcrossTheFleet(t *testing.T) {
	f := newFleetOn(t, 2, "redis://127.0.0.1:6379/5", "OTEL_TRACES_EXPORTER=console", "OTEL_BSP_SCHEDULE_DELAY=50")
	owner, other := f.nodes[0], f.nodes[1]
	ctx := context.Background()
	roomID := f.run + "-traced"
	giftRoom(t, clientsAt(owner.addr), roomID, []int64{2}, []int64{100})
	// Topped up on the other node: the owner's ledger holds no hint of the
	// sender, so the gift is decided on a read (wallet.quote).
	credit(t, clientsAt(other.addr), 100, 1000)

	nc, err := nats.Connect(fleetNATS)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	prefix := f.stream[3] // -nats-subject-prefix
	sub, err := nc.SubscribeSync(prefix + ".RoomMicChanged.>")
	if err != nil {
		t.Fatal(err)
	}

	const micTrace, giftTrace = "4bf92f3577b34da6a3ce929d0e0e4736", "5cf92f3577b34da6a3ce929d0e0e4737"
	traceparent := func(id string) string { return "00-" + id + "-00f067aa0ba902b7-01" }
	c := clientsAt(other.addr)
	mic := connect.NewRequest(&roomv1.TakeMicRequest{RoomId: roomID, CommandId: "traced-mic", OperatorUserId: 100, SeatIndex: 5})
	mic.Header().Set("traceparent", traceparent(micTrace))
	if _, err := c.room.TakeMic(ctx, mic); err != nil {
		t.Fatal(err)
	}
	gift := connect.NewRequest(&roomv1.SendGiftRequest{RoomId: roomID, CommandId: "traced-gift", OperatorUserId: 100,
		ReceiverUserIds: []int64{2}, GiftId: "rose", Count: 1})
	gift.Header().Set("traceparent", traceparent(giftTrace))
	if _, err := c.room.SendGift(ctx, gift); err != nil {
		t.Fatal(err)
	}

	want := map[string][]string{
		micTrace: {"cell.apply", "cell.commit", "cell.mailbox_wait", "im.send", "outbox.publish", "room.cell", "room.forward",
			"room.v1.RoomService/TakeMic", "store.commit"},
		giftTrace: {"cell.apply", "cell.commit", "cell.mailbox_wait", "cell.prepare", "im.send", "outbox.publish", "room.cell",
			"room.forward", "room.v1.RoomService/SendGift", "store.commit", "wallet.quote"},
	}
	for id, spans := range want {
		poll.Until(t, 30*time.Second, "the spans of trace "+id, func() error {
			got := names(spansOf(id, owner, other))
			if len(linkedSends(id, owner, other)) > 0 {
				// The event went out in one message with an older traced
				// event: its send is in that trace, linking this one.
				got = append(got, "im.send")
			}
			var missing []string
			for _, n := range spans {
				if !slices.Contains(got, n) {
					missing = append(missing, n)
				}
			}
			if len(missing) > 0 {
				return fmt.Errorf("missing %v; have %v", missing, got)
			}
			// The API call is served on both nodes: the receiving one
			// and, after the hop, the owner, in the one trace. The
			// receiving node's span ends after the owner's, so it may
			// be exported after the others.
			rpcs := 0
			for _, s := range spansOf(id, owner, other) {
				if strings.HasPrefix(s.Name, "room.v1.RoomService/") {
					rpcs++
				}
			}
			if rpcs != 2 {
				return fmt.Errorf("%d API spans, want 2 (the receiving node and the owner)", rpcs)
			}
			return nil
		})
		// The owner's API span is a child of the hop.
		var hop string
		for _, s := range spansOf(id, other) {
			if s.Name == "room.forward" {
				hop = s.SpanContext.SpanID
			}
		}
		for _, s := range spansOf(id, owner) {
			if strings.HasPrefix(s.Name, "room.v1.RoomService/") && s.Parent.SpanID != hop {
				t.Errorf("trace %s: the owner's %s has parent %s, want the hop %s", id, s.Name, s.Parent.SpanID, hop)
			}
		}
	}
	for _, s := range spansOf(micTrace, owner) {
		if s.Name == "store.commit" && !slices.ContainsFunc(s.Attributes, func(a struct {
			Key   string
			Value struct{ Value any }
		}) bool {
			return a.Key == "db.batch_commands"
		}) {
			t.Errorf("store.commit has no batch size: %+v", s.Attributes)
		}
	}

	// The latency of the traced call carries its trace id as an exemplar,
	// served in the OpenMetrics format.
	req, err := http.NewRequest(http.MethodGet, "http://"+owner.addr+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "application/openmetrics-text; version=1.0.0")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	_ = res.Body.Close()
	exemplar := regexp.MustCompile(`room_rpc_duration_seconds_bucket\{[^}]*procedure="/room.v1.RoomService/TakeMic"[^}]*\} \d+ # \{trace_id="` + micTrace + `"\}`)
	if !strings.HasPrefix(res.Header.Get("Content-Type"), "application/openmetrics-text") || !exemplar.Match(body) {
		t.Errorf("/metrics (%s) has no TakeMic latency exemplar of trace %s", res.Header.Get("Content-Type"), micTrace)
	}

	// The durable fact of the mic change carries the trace on.
	for {
		msg, err := sub.NextMsg(10 * time.Second)
		if err != nil {
			t.Fatalf("no RoomMicChanged of the traced command: %v", err)
		}
		if msg.Header.Get(natsbus.HeaderRoomID) != roomID {
			continue
		}
		if strings.Contains(msg.Header.Get(natsbus.HeaderTraceParent), micTrace) {
			break
		}
	}
}
