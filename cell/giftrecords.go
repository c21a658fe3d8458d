package cell

import (
	"time"

	"hyapp/room-service/room"
	"hyapp/room-service/store"
)

// giftRecords is the feature that records every committed gift, one row
// per receiver, in the transaction that commits it (store.Batch.Gifts):
// the durable history ListGiftRecords pages through.
type giftRecords struct{}

func (giftRecords) feature() Feature { return Feature{Contribute: giftRecords{}.contribute} }

// contribute adds the records of a gift. The cell appends a command's log
// row to b before it asks the features, so the last one is the gift's.
func (giftRecords) contribute(b *store.Batch, env *room.Envelope, _ []room.Event, _ time.Time) error {
	g, ok := env.Command.(*room.SendGift)
	if !ok || len(b.Commands) == 0 {
		return nil
	}
	version := b.Commands[len(b.Commands)-1].RoomVersion
	value := g.Outcome.Price * int64(g.Count)
	for _, to := range g.ReceiverUserIDs {
		b.Gifts = append(b.Gifts, store.GiftRecord{
			RoomID: env.RoomID, RoomVersion: version, CommandID: env.CommandID, SenderUserID: env.Operator,
			ReceiverID: to, GiftID: g.GiftID, Count: g.Count, Value: value, MultiplierBP: g.Outcome.MultiplierBP, SentAt: env.At,
		})
	}
	return nil
}
