package cell

import (
	"time"

	"hyapp/room-service/room"
	"hyapp/room-service/store"
)

// roomCreation is the feature that creates rooms. A room has no row
// before its CreateRoom commits: the registry starts the cell of a room that
// a CreateRoom finds missing from an empty state (a fresh cell), and the
// batch that commits the CreateRoom inserts the row, claimed at epoch 1, in
// the same transaction (store.Batch.CreatedBy). So a created room costs one
// shared commit, and a create that did not commit leaves nothing behind.
type roomCreation struct{}

func (rc roomCreation) feature() Feature {
	return Feature{Contribute: rc.contribute}
}

// contribute writes the created room's metadata with its CreateRoom.
func (roomCreation) contribute(b *store.Batch, env *room.Envelope, _ []room.Event, _ time.Time) error {
	if c, ok := env.Command.(*room.CreateRoom); ok {
		b.Meta = &store.RoomMeta{RoomID: env.RoomID, OwnerUserID: c.OwnerUserID, HostUserID: c.HostUserID, SeatCount: c.SeatCount, Mode: c.Mode}
	}
	return nil
}
