package im

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	roomv1 "hyapp/room-service/gen/room/v1"
)

// scanStream is an EventStream of messages at sequences 1, 2, ...: what
// memberScans reads (NextOfRoom).
type scanStream struct {
	EventStream
	msgs []scanMsg
}

type scanMsg struct {
	room, typ string
	ev        *roomv1.RoomEvent
}

func (f *scanStream) add(room, typ string, user int64) {
	f.msgs = append(f.msgs, scanMsg{room, typ, &roomv1.RoomEvent{
		EventId: fmt.Sprint("ev-", len(f.msgs)+1), RoomId: room, EventType: typ, PayloadJson: fmt.Sprintf(`{"user_id":%d}`, user),
	}})
}

func (f *scanStream) NextOfRoom(_ context.Context, roomID, typ string, seq uint64) (*roomv1.RoomEvent, uint64, error) {
	for i := int(seq); i < len(f.msgs); i++ {
		if m := f.msgs[i]; m.room == roomID && m.typ == typ {
			return m.ev, uint64(i + 1), nil
		}
	}
	return nil, 0, nil
}

// TestAMemberScanInUseKeepsOnlyWhatLaterEventsAskFor: a room whose member
// events never pause for a minute keeps its scan; what the scan holds must
// not grow with every member the room ever muted. A scan kept each one's
// last event since its first, for as long as the process ran: a busy room
// that mutes a member a minute held a month's mutes.
func TestAMemberScanInUseKeepsOnlyWhatLaterEventsAskFor(t *testing.T) {
	f, m := &scanStream{}, newMemberScans()
	const n = 20_000
	for u := int64(1); u <= n; u++ {
		f.add("busy", "mute", u)
		if ev, _, err := m.memberLast(t.Context(), f, "busy", "mute", u, uint64(u)); err != nil || ev != nil {
			t.Fatalf("event %d: memberLast = %v, %v; want none later", u, ev, err)
		}
	}
	s := m.scans[scanKey{"busy", "mute"}]
	if len(s.last) > 1000 {
		t.Fatalf("after %d mutes applied in order, the room's scan holds %d members' events", n, len(s.last))
	}
}

// TestMemberScansAnswerAsAWalkDoes: whatever order the events of rooms are
// asked about in (in order, a retry of an earlier one, one between what a
// scan read), memberLast answers as reading the stream from the event does.
func TestMemberScansAnswerAsAWalkDoes(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 5))
	f, m := &scanStream{}, newMemberScans()
	rooms, types := []string{"a", "b"}, []string{"mute", "kick"}
	at := uint64(0) // the sequences asked about mostly move on
	for step := range 8_000 {
		room, typ, user := rooms[rng.IntN(2)], types[rng.IntN(2)], 1+rng.Int64N(300)
		if rng.IntN(2) == 0 {
			f.add(room, typ, user)
			continue
		}
		switch seq := uint64(len(f.msgs)); {
		case rng.IntN(10) == 0: // a retry of an earlier event
			at = rng.Uint64N(seq + 1)
		default:
			at = min(at+rng.Uint64N(4), seq)
		}
		got, gotSeq, err := m.memberLast(t.Context(), f, room, typ, user, at)
		if err != nil {
			t.Fatal(err)
		}
		var want *roomv1.RoomEvent
		var wantSeq uint64
		for i := int(at); i < len(f.msgs); i++ {
			if e := f.msgs[i]; e.room == room && e.typ == typ && userOf(e.ev) == user {
				want, wantSeq = e.ev, uint64(i+1)
			}
		}
		if got != want || gotSeq != wantSeq {
			t.Fatalf("step %d: member %d's last %s of room %s after %d: %v at %d, want %v at %d",
				step, user, typ, room, at, got.GetEventId(), gotSeq, want.GetEventId(), wantSeq)
		}
	}
}
