package rpc

import (
	"slices"
	"strings"
	"sync"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	roomv1 "hyapp/room-service/gen/room/v1"
)

// snapshotWire keeps, per room, the protobuf encoding of the snapshot the
// last binary read answered with, so that the readers of one version (a
// room's listeners repairing what the IM group lost all at once) share one
// encoding instead of marshalling the whole room each. An entry is found by
// the identity of the room's snapshot, which the room replaces with every
// committed change, and by the member limit it was cut to.
type snapshotWire struct {
	mu    sync.Mutex
	rooms map[string]wireEntry
	bytes int // of the entries' encodings
}

type wireEntry struct {
	snap  *roomv1.RoomSnapshot // the room's snapshot the encoding is of
	limit int
	field []byte // the snapshot field of GetRoomSnapshotResponse, tag and length included
}

// Bounds of what the snapshot encodings hold in memory.
const (
	maxWireRooms = 4096
	maxWireBytes = 32 << 20
	maxWireEntry = 1 << 20 // a larger snapshot is marshalled for each read
)

// snapshotField is the field number of GetRoomSnapshotResponse.snapshot.
var snapshotField = (&roomv1.GetRoomSnapshotResponse{}).ProtoReflect().Descriptor().Fields().ByName("snapshot").Number()

func newSnapshotWire() *snapshotWire { return &snapshotWire{rooms: make(map[string]wireEntry)} }

// answer sets out's snapshot: for a binary protobuf read, as the encoded
// field (an unknown field of out, which protobuf marshals as it is, so the
// caller receives exactly what setting Snapshot would send); for JSON, as
// the message. cut is snap cut to limit members.
func (w *snapshotWire) answer(out *roomv1.GetRoomSnapshotResponse, contentType string, snap *roomv1.RoomSnapshot, limit int, cut func() *roomv1.RoomSnapshot) {
	if !binaryProto(contentType) {
		out.Snapshot = cut()
		return
	}
	roomID := snap.GetRoomId()
	w.mu.Lock()
	e, ok := w.rooms[roomID]
	w.mu.Unlock()
	if !ok || e.snap != snap || e.limit != limit {
		b, err := proto.Marshal(cut())
		if err != nil || len(b) > maxWireEntry {
			out.Snapshot = cut()
			return
		}
		// Clipped: the answers share it, so an append must copy.
		field := slices.Clip(protowire.AppendBytes(protowire.AppendTag(nil, snapshotField, protowire.BytesType), b))
		e = wireEntry{snap: snap, limit: limit, field: field}
		w.keep(roomID, e)
	}
	out.ProtoReflect().SetUnknown(e.field)
}

// keep stores e as the room's entry, making room for it first.
func (w *snapshotWire) keep(roomID string, e wireEntry) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if old, ok := w.rooms[roomID]; ok {
		w.bytes -= len(old.field)
		delete(w.rooms, roomID)
	}
	for id, old := range w.rooms { // a map's order is random: random eviction
		if len(w.rooms) < maxWireRooms && w.bytes+len(e.field) <= maxWireBytes {
			break
		}
		w.bytes -= len(old.field)
		delete(w.rooms, id)
	}
	w.rooms[roomID] = e
	w.bytes += len(e.field)
}

// binaryProto reports whether a request of contentType is answered in
// binary protobuf: gRPC and gRPC-Web by default or with +proto, Connect
// as application/proto.
func binaryProto(contentType string) bool {
	ct, _, _ := strings.Cut(contentType, ";")
	switch strings.TrimSpace(strings.ToLower(ct)) {
	case "application/grpc", "application/grpc+proto", "application/grpc-web", "application/grpc-web+proto", "application/proto":
		return true
	}
	return false
}
