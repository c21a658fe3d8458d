package im

import (
	"bytes"
	"encoding/json"
	"testing"

	"hyapp/room-service/room"
)

// TestEnvelopeBytesAreTheMapsBytes: the envelopes encode to the bytes a map
// of the same keys encodes to (keys in name order), which is what clients
// have always been sent: a field out of order, renamed or dropped fails.
func TestEnvelopeBytesAreTheMapsBytes(t *testing.T) {
	gift := &room.RoomGiftSentEvent{SenderUserID: 7, GiftID: "rose", GiftName: "<Rose>", Count: 3, Cost: 30,
		Receivers: []room.GiftReceiver{{UserID: 8}}}
	mic := &room.RoomMicChangedEvent{Action: "up", UserID: 9, SeatIndex: 2, FromSeatIndex: -1, MicOn: true}
	seats := seatView([]room.Seat{{UserID: 9, MicOn: true, OccupiedSince: 5}, {Locked: true}})
	cases := []struct {
		name string
		env  any
		want map[string]any
	}{
		{"gift", &envelope{Type: "RoomGiftSent", RoomID: "r&1", RoomVersion: 12, Seq: 1, At: 99, Data: gift},
			map[string]any{"type": "RoomGiftSent", "room_id": "r&1", "room_version": int64(12), "seq": 1, "at": int64(99), "data": gift}},
		{"first event, no data", &envelope{Type: "RoomCreated", RoomID: "r"},
			map[string]any{"type": "RoomCreated", "room_id": "r", "room_version": int64(0), "seq": 0, "at": int64(0), "data": nil}},
		{"mic row", &envelope{Type: "RoomMicChanged", RoomID: "r", RoomVersion: 3, At: 4, Data: mic, Seats: seats},
			map[string]any{"type": "RoomMicChanged", "room_id": "r", "room_version": int64(3), "seq": 0, "at": int64(4), "data": mic, "seats": seats}},
		{"empty mic row", &envelope{Type: "RoomMicChanged", RoomID: "r", Data: mic, Seats: seatView([]room.Seat{})},
			map[string]any{"type": "RoomMicChanged", "room_id": "r", "room_version": int64(0), "seq": 0, "at": int64(0), "data": mic, "seats": []seat{}}},
		{"robot", &robotEnvelope{Type: "RobotGift", RoomID: "r", Robot: true, At: 6, Data: json.RawMessage(`{"n": 1}`)},
			map[string]any{"type": "RobotGift", "room_id": "r", "robot": true, "at": int64(6), "data": json.RawMessage(`{"n": 1}`)}},
	}
	for _, c := range cases {
		got, err := json.Marshal(c.env)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		want, err := json.Marshal(c.want)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s:\n got %s\nwant %s", c.name, got, want)
		}
	}
}
