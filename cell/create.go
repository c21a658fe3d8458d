package cell

import (
	"context"
	"errors"
	"time"

	"hyapp/room-service/room"
	"hyapp/room-service/store"
)

// roomCreation is the feature that creates rooms. A room must have its
// metadata stored before its first command (recovery and the owner claim
// read it), so CreateRoom saves it when it is submitted, before the room
// loads; the batch that commits CreateRoom writes it again, so the row
// always matches the command that created the room, whatever a racing
// create saved before.
type roomCreation struct {
	store interface {
		SaveRoomMeta(ctx context.Context, meta store.RoomMeta) error
	}
}

func (rc roomCreation) feature() Feature {
	return Feature{Admit: rc.admit, Contribute: rc.contribute}
}

// admit stores the metadata of a room about to be created. For a room that
// already has commands it lets the command through: the cell answers a
// retry of its CreateRoom from the log and refuses anything else with
// room_exists.
func (rc roomCreation) admit(ctx context.Context, env *room.Envelope) error {
	c, ok := env.Command.(*room.CreateRoom)
	if !ok {
		return nil
	}
	err := rc.store.SaveRoomMeta(ctx, store.RoomMeta{
		RoomID: env.RoomID, OwnerUserID: c.OwnerUserID, HostUserID: c.HostUserID,
		SeatCount: c.SeatCount, Mode: c.Mode, Status: string(room.StatusCreating),
	})
	if errors.Is(err, store.ErrConflict) {
		return nil
	}
	return err
}

// contribute writes the created room's metadata with its CreateRoom.
func (roomCreation) contribute(b *store.Batch, env *room.Envelope, _ []room.Event, _ time.Time) error {
	if c, ok := env.Command.(*room.CreateRoom); ok {
		b.Meta = &store.RoomMeta{RoomID: env.RoomID, OwnerUserID: c.OwnerUserID, HostUserID: c.HostUserID, SeatCount: c.SeatCount, Mode: c.Mode}
	}
	return nil
}
