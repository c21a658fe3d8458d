package cell

import (
	"context"
	"fmt"

	"hyapp/room-service/room"
	"hyapp/room-service/snapshot"
	"hyapp/room-service/store"
)

// Recovered is a room rebuilt from storage.
type Recovered struct {
	State *room.State
	// SnapshotVersion is the version of the snapshot it started from (0: rebuilt from metadata).
	SnapshotVersion int64
	// SnapshotBytes is the size of that snapshot's payload.
	SnapshotBytes int
	// Replayed are the command log rows applied after the snapshot, in order.
	Replayed []store.CommandRecord
}

// Recover rebuilds a room: its latest snapshot plus the commands after it,
// or, without a snapshot, its metadata (owner and host make the admin set,
// seat count the seats) plus the whole log. Replay re-applies state only: it
// sends nothing and writes nothing. It depends on storage alone: the
// economy rules are those the snapshot and the logged SetRules commands
// record, never the configuration in force.
func Recover(ctx context.Context, repo Log, meta store.RoomMeta) (*Recovered, error) {
	rec := &Recovered{}
	snap, found, err := repo.GetLatestSnapshot(ctx, meta.RoomID)
	if err != nil {
		return nil, fmt.Errorf("recover room=%s: %w", meta.RoomID, err)
	}
	if found {
		if rec.State, err = snapshot.Decode(snap.Payload); err != nil {
			return nil, room.Errorf(room.ErrRecoveryFailed, "room %s: %v", meta.RoomID, err)
		}
		if rec.State.RoomID != meta.RoomID || rec.State.Version != snap.RoomVersion {
			return nil, room.Errorf(room.ErrRecoveryFailed, "room %s: snapshot holds room %s at version %d, row says %d",
				meta.RoomID, rec.State.RoomID, rec.State.Version, snap.RoomVersion)
		}
		rec.SnapshotVersion, rec.SnapshotBytes = snap.RoomVersion, len(snap.Payload)
	} else {
		rec.State = room.Genesis(meta.RoomID, meta.OwnerUserID, meta.HostUserID, meta.SeatCount, meta.Mode, room.Status(meta.Status))
		rec.State.Status = room.StatusCreating // the log replays CreateRoom and everything after it
	}
	if rec.Replayed, err = repo.ListCommandsAfter(ctx, meta.RoomID, rec.State.Version); err != nil {
		return nil, fmt.Errorf("recover room=%s: %w", meta.RoomID, err)
	}
	if err := Replay(rec.State, rec.Replayed); err != nil {
		// Whatever the domain said (rocket_not_pending, …) is no answer for
		// a client: the room's stored history cannot be rebuilt.
		return nil, room.Errorf(room.ErrRecoveryFailed, "%v", err)
	}
	return rec, nil
}

// Replay applies command log rows to s in order. Every row must be the next
// version; a replayable row that the domain refuses means the log and the
// code disagree, which is reported, never skipped.
func Replay(s *room.State, records []store.CommandRecord) error {
	for _, r := range records {
		if r.RoomVersion != s.Version+1 {
			return fmt.Errorf("replay room=%s: version %d follows %d", s.RoomID, r.RoomVersion, s.Version)
		}
		env, err := room.DecodeCommand(r.RoomID, r.CommandID, room.CommandType(r.CommandType), r.Payload)
		if err != nil {
			return fmt.Errorf("replay room=%s version=%d: %w", s.RoomID, r.RoomVersion, err)
		}
		if !r.Replayable {
			s.Version, s.LastAt = r.RoomVersion, max(s.LastAt, env.At)
			continue
		}
		if _, err := room.Apply(s, env); err != nil {
			return fmt.Errorf("replay room=%s version=%d command=%s: %w", s.RoomID, r.RoomVersion, r.CommandID, err)
		}
	}
	return nil
}
