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

// TestBatchBytesAreTheMapsBytes: a Batch's bytes, its events put in front
// of its other fields, are the bytes json.Marshal gives for the whole map
// with the events as raw messages (keys in name order, HTML escaped): with
// no events, one, and several, and with every optional field.
func TestBatchBytesAreTheMapsBytes(t *testing.T) {
	encode := func(env any) *item {
		data, err := json.Marshal(env)
		if err != nil {
			t.Fatal(err)
		}
		return &item{data: data}
	}
	gift := encode(&envelope{Type: "RoomGiftSent", RoomID: "r<1>", RoomVersion: 12, Seq: 1, At: 99,
		Data: &room.RoomGiftSentEvent{SenderUserID: 7, GiftID: "rose", GiftName: "<Rose> & co", Count: 3, Cost: 30}})
	joined := encode(&envelope{Type: "RoomUserJoined", RoomID: "r<1>", RoomVersion: 13, Seq: 2, At: 100})
	robot := encode(&robotEnvelope{Type: "RobotGift", RoomID: "r<1>", Robot: true, At: 6, Data: json.RawMessage(`{"n":1}`)})
	for _, c := range []struct {
		name  string
		items []*item
		extra map[string]any
	}{
		{"none, only a loss", nil, map[string]any{"lost_through": int64(40)}},
		{"one, folded", []*item{joined}, map[string]any{"folded": map[string]int{"RoomUserJoined": 3}}},
		{"several, everything", []*item{gift, joined, robot}, map[string]any{"room_version": int64(13),
			"folded": map[string]int{"RoomUserLeft": 2}, "folded_gifts": []string{"<x>"}, "lost_through": int64(9)}},
	} {
		msg := map[string]any{"type": "Batch", "room_id": "r<1>"}
		for k, v := range c.extra {
			msg[k] = v
		}
		rest, err := json.Marshal(msg)
		if err != nil {
			t.Fatal(err)
		}
		events := make([]json.RawMessage, len(c.items))
		for i, it := range c.items {
			events[i] = it.data
		}
		msg["events"] = events
		want, err := json.Marshal(msg)
		if err != nil {
			t.Fatal(err)
		}
		if got := withEvents(rest, c.items); !bytes.Equal(got, want) {
			t.Errorf("%s:\n got %s\nwant %s", c.name, got, want)
		}
	}
}
