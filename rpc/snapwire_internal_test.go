package rpc

import (
	"fmt"
	"testing"

	roomv1 "hyapp/room-service/gen/room/v1"
)

// TestSnapshotWireStaysBounded: the kept encodings never pass their bounds
// of rooms and bytes, and the byte count is the sum of what is kept.
func TestSnapshotWireStaysBounded(t *testing.T) {
	w := newSnapshotWire()
	check := func() {
		t.Helper()
		sum := 0
		for _, e := range w.rooms {
			sum += len(e.field)
		}
		if len(w.rooms) > maxWireRooms || w.bytes > maxWireBytes || sum != w.bytes {
			t.Fatalf("%d rooms, %d bytes counted, %d kept", len(w.rooms), w.bytes, sum)
		}
	}
	for i := range maxWireRooms + 100 {
		w.keep(fmt.Sprint("r", i), wireEntry{snap: &roomv1.RoomSnapshot{}, field: make([]byte, 10)})
	}
	check()
	for i := range 100 { // a room kept again replaces its entry
		w.keep("r1", wireEntry{snap: &roomv1.RoomSnapshot{}, field: make([]byte, 10+i)})
	}
	check()
	for i := range 2 * maxWireBytes / maxWireEntry {
		w.keep(fmt.Sprint("big", i), wireEntry{snap: &roomv1.RoomSnapshot{}, field: make([]byte, maxWireEntry)})
	}
	check()
	if _, ok := w.rooms[fmt.Sprint("big", 2*maxWireBytes/maxWireEntry-1)]; !ok {
		t.Fatal("the newest entry was not kept")
	}
}

func TestBinaryProto(t *testing.T) {
	for ct, want := range map[string]bool{
		"application/grpc": true, "application/grpc+proto": true, "application/proto": true, "application/grpc-web+proto": true,
		"Application/Proto; charset=utf-8": true,
		"application/grpc+json":            false, "application/json": false, "application/grpc-web+json": false, "": false,
	} {
		if got := binaryProto(ct); got != want {
			t.Errorf("binaryProto(%q) = %v, want %v", ct, got, want)
		}
	}
}
