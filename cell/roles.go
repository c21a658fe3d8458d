package cell

import (
	"time"

	"hyapp/room-service/room"
	"hyapp/room-service/store"
)

// roomRoles is the feature that keeps the room's row naming its owner and
// host as its state does: a batch that transfers ownership or sets the
// host writes both roles with it, so listings (and a rebuild without a
// snapshot) see them.
type roomRoles struct{}

func (roomRoles) feature() Feature { return Feature{Contribute: roomRoles{}.contribute} }

func (roomRoles) contribute(b *store.Batch, _ *room.Envelope, events []room.Event, _ time.Time) error {
	for _, ev := range events {
		switch d := ev.Data.(type) {
		case *room.RoomOwnerChangedEvent:
			b.Roles = &store.RoomRoles{OwnerUserID: d.OwnerUserID, HostUserID: d.HostUserID}
		case *room.RoomHostChangedEvent:
			b.Roles = &store.RoomRoles{OwnerUserID: d.OwnerUserID, HostUserID: d.HostUserID}
		}
	}
	return nil
}
