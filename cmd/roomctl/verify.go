package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"hyapp/room-service/cell"
	roomv1 "hyapp/room-service/gen/room/v1"
	"hyapp/room-service/room"
	"hyapp/room-service/rpc"
	"hyapp/room-service/snapshot"
	"hyapp/room-service/store"
)

// verifyAttempts bounds how often verify catches up with a room that keeps
// committing between its reads of the log and of the live state.
const verifyAttempts = 5

func setupVerify(*flag.FlagSet) func(context.Context, *client, []string, io.Writer) error {
	return func(ctx context.Context, c *client, args []string, out io.Writer) error {
		return verify(ctx, c, args[0], out)
	}
}

// verify rebuilds the room the way recovery does (cell.Recover): the stored
// snapshot, or without one the room's metadata, then every command after it
// through cell.Replay, under the economy rules the snapshot and the log
// record (no configuration is read). It compares the result with the live state. The cell
// answers a snapshot only after its commands committed, so the live version
// is never behind the log read before it; when it is ahead, the room moved
// on in between and verify reads the new commands and compares again.
func verify(ctx context.Context, c *client, roomID string, out io.Writer) error {
	state, base, err := baseState(ctx, c, roomID)
	if err != nil {
		return err
	}
	replayed := 0
	for attempt := 1; ; attempt++ {
		var recs []store.CommandRecord
		err := eachCommand(ctx, c, roomID, state.Version, 0, func(e *roomv1.CommandLogEntry) error {
			recs = append(recs, store.CommandRecord{
				RoomID: roomID, RoomVersion: e.GetRoomVersion(), CommandID: e.GetCommandId(),
				CommandType: e.GetCommandType(), Payload: []byte(e.GetPayloadJson()),
				Replayable: e.GetReplayable(), CreatedAt: time.UnixMilli(e.GetCreatedAtMs()),
			})
			return nil
		})
		if err != nil {
			return err
		}
		if err := cell.Replay(state, recs); err != nil {
			return err
		}
		replayed += len(recs)

		live, err := liveSnapshot(ctx, c, roomID, rpc.MaxMemberLimit)
		if err != nil {
			return err
		}
		if live.GetRoomVersion() > state.Version && attempt < verifyAttempts {
			continue
		}
		// The live answer leaves out the mutes and bans that had ended when
		// it was made; the state keeps them until its next command. Both
		// sides are compared without those ended by now.
		now := time.Now().UnixMilli()
		replayedNow, live := asQueried(state, now), snapshot.WithoutEnded(live, now)
		equal, err := sameEncoding(replayedNow, live)
		if err != nil {
			return err
		}
		if equal {
			fmt.Fprintf(out, "ok: room %s version %d: replay of %d commands after snapshot %d equals the live state\n",
				roomID, state.Version, replayed, base)
			return nil
		}
		fmt.Fprintf(out, "mismatch: room %s: replay of %d commands after snapshot %d reached version %d, live is at version %d\n",
			roomID, replayed, base, state.Version, live.GetRoomVersion())
		if live.GetRoomVersion() > state.Version {
			fmt.Fprintf(out, "  the room kept committing; gave up after %d attempts\n", attempt)
		}
		diffs := diff(replayedNow, live)
		if len(diffs) == 0 {
			diffs = []string{"no known field differs: the live snapshot carries fields this roomctl does not know"}
		}
		for _, d := range diffs {
			fmt.Fprintf(out, "  %s\n", d)
		}
		return errMismatch
	}
}

// baseState returns the state replay starts from and the version of the
// stored snapshot it came from (0: none, rebuilt from the room's metadata as
// cell.Recover does).
func baseState(ctx context.Context, c *client, roomID string) (*room.State, int64, error) {
	resp, err := c.ops.GetStoredSnapshot(ctx, connect.NewRequest(&roomv1.GetStoredSnapshotRequest{RoomId: roomID}))
	if err != nil {
		return nil, 0, fmt.Errorf("GetStoredSnapshot room=%s: %w", roomID, err)
	}
	if resp.Msg.GetFound() {
		s, err := snapshot.FromProto(resp.Msg.GetSnapshot())
		if err != nil {
			return nil, 0, err
		}
		if s.RoomID != roomID {
			return nil, 0, fmt.Errorf("stored snapshot of room=%s holds room %s", roomID, s.RoomID)
		}
		return s, s.Version, nil
	}
	var meta *roomv1.RoomSummary
	err = eachRoom(ctx, c, roomv1.RoomStatus_ROOM_STATUS_UNSPECIFIED, 500, func(r *roomv1.RoomSummary) (bool, error) {
		if r.GetRoomId() == roomID {
			meta = r
		}
		// Rooms come in id order: past roomID it cannot appear any more.
		return r.GetRoomId() < roomID, nil
	})
	if err != nil {
		return nil, 0, err
	}
	if meta == nil {
		return nil, 0, fmt.Errorf("room=%s: no stored snapshot and not in ListRooms", roomID)
	}
	// The log replays CreateRoom and everything after it.
	return room.Genesis(roomID, meta.GetOwnerUserId(), meta.GetHostUserId(), meta.GetSeatCount(), meta.GetMode(), room.StatusCreating), 0, nil
}

// deterministic is how the service encodes snapshots (snapshot.Encode).
var deterministic = proto.MarshalOptions{Deterministic: true}

// sameEncoding reports whether the replayed and the live snapshot encode to
// the same bytes.
func sameEncoding(replayed, live *roomv1.RoomSnapshot) (bool, error) {
	want, err := deterministic.Marshal(replayed)
	if err != nil {
		return false, err
	}
	got, err := deterministic.Marshal(live)
	if err != nil {
		return false, fmt.Errorf("encode live snapshot room=%s: %w", live.GetRoomId(), err)
	}
	return bytes.Equal(want, got), nil
}

// asQueried is the replayed state as GetRoomSnapshot answers it at now
// (unix ms): the most members a query returns, without the mutes and bans
// ended by then, and the economy without the day's full contribution list
// (the visible rank and the heat it adds up to are compared instead).
func asQueried(s *room.State, now int64) *roomv1.RoomSnapshot {
	return snapshot.WithoutEnded(snapshot.WithMemberLimit(snapshot.ToProto(s), rpc.MaxMemberLimit), now)
}

// diff names the fields of RoomSnapshot that differ between the replayed
// and the live snapshot, one line each. Singular messages (profile) are
// compared field by field; lists report their lengths and first difference.
func diff(replayed, live *roomv1.RoomSnapshot) []string {
	return diffMessage("", replayed.ProtoReflect(), live.ProtoReflect())
}

func diffMessage(prefix string, a, b protoreflect.Message) []string {
	var out []string
	fields := a.Descriptor().Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		va, vb := a.Get(fd), b.Get(fd)
		if va.Equal(vb) {
			continue
		}
		name := prefix + string(fd.Name())
		switch {
		case fd.IsList():
			la, lb := va.List(), vb.List()
			line := fmt.Sprintf("%s: replayed has %d entries, live %d", name, la.Len(), lb.Len())
			for j := range min(la.Len(), lb.Len()) {
				if !la.Get(j).Equal(lb.Get(j)) {
					line += fmt.Sprintf("; first difference at [%d]: replayed %s, live %s", j, render(fd, la.Get(j)), render(fd, lb.Get(j)))
					break
				}
			}
			out = append(out, line)
		case fd.IsMap():
			out = append(out, fmt.Sprintf("%s: replayed has %d entries, live %d", name, va.Map().Len(), vb.Map().Len()))
		case fd.Message() != nil:
			out = append(out, diffMessage(name+".", va.Message(), vb.Message())...)
		default:
			out = append(out, fmt.Sprintf("%s: replayed %s, live %s", name, render(fd, va), render(fd, vb)))
		}
	}
	return out
}

// render shows one value of fd (or one element, for a list) compactly.
func render(fd protoreflect.FieldDescriptor, v protoreflect.Value) string {
	switch {
	case fd.Message() != nil:
		b, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(v.Message().Interface())
		if err != nil {
			return fmt.Sprintf("<%v>", err)
		}
		return strings.Join(strings.Fields(string(b)), " ")
	case fd.Enum() != nil:
		if ev := fd.Enum().Values().ByNumber(v.Enum()); ev != nil {
			return string(ev.Name())
		}
		return fmt.Sprint(v.Enum())
	case fd.Kind() == protoreflect.StringKind:
		return fmt.Sprintf("%q", v.String())
	default:
		return fmt.Sprint(v.Interface())
	}
}
