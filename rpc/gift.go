package rpc

import (
	"context"

	"connectrpc.com/connect"

	roomv1 "hyapp/room-service/gen/room/v1"
	"hyapp/room-service/gift"
	"hyapp/room-service/room"
)

// SetCatalogue connects SendGift and ListGifts to the gift catalogue.
func (h *RoomHandler) SetCatalogue(c *gift.Catalogue) { h.gifts = c }

// SendGift implements RoomService. The catalogue check (unknown gift, count
// not allowed) and the lucky draw happen here; the room checks sender and
// receivers, the wallet charge and the commit happen in the room's cell.
func (h *RoomHandler) SendGift(ctx context.Context, r *connect.Request[roomv1.SendGiftRequest]) (*connect.Response[roomv1.SendGiftResponse], error) {
	m := r.Msg
	if h.gifts == nil {
		return nil, toConnect(ctx, h.log, room.Errorf(room.ErrUnavailable, "this node has no gift catalogue"))
	}
	g := &room.SendGift{ReceiverUserIDs: m.GetReceiverUserIds(), GiftID: m.GetGiftId(), Count: m.GetCount(), ComboID: m.GetComboId()}
	if err := h.gifts.Prepare(g); err != nil {
		return nil, toConnect(ctx, h.log, err)
	}
	res, err := h.engine.Submit(ctx, &room.Envelope{
		RoomID: m.GetRoomId(), CommandID: m.GetCommandId(), Operator: m.GetOperatorUserId(),
		Platform: h.platform(m.GetOperatorUserId()), Command: g,
	})
	if err != nil {
		return nil, toConnect(ctx, h.log, err)
	}
	if res.Gift == nil {
		return nil, toConnect(ctx, h.log, room.Errorf(room.ErrInternal, "gift %s committed without its charge", m.GetCommandId()))
	}
	return connect.NewResponse(&roomv1.SendGiftResponse{
		RoomVersion: res.RoomVersion, CoinBalanceAfter: res.Gift.BalanceAfter, Cost: res.Gift.Cost,
		LuckyMultiplierBp: res.Gift.MultiplierBP, LuckyReward: res.Gift.Reward,
	}), nil
}

// ListGifts implements RoomService.
func (h *RoomHandler) ListGifts(ctx context.Context, _ *connect.Request[roomv1.ListGiftsRequest]) (*connect.Response[roomv1.ListGiftsResponse], error) {
	if h.gifts == nil {
		return nil, toConnect(ctx, h.log, room.Errorf(room.ErrUnavailable, "this node has no gift catalogue"))
	}
	out := &roomv1.ListGiftsResponse{LuckyExpectedPayoutBp: h.gifts.ExpectedPayoutBP()}
	for _, g := range h.gifts.Gifts() {
		kind := roomv1.GiftKind_GIFT_KIND_NORMAL
		if g.Kind == room.GiftLucky {
			kind = roomv1.GiftKind_GIFT_KIND_LUCKY
		}
		out.Gifts = append(out.Gifts, &roomv1.Gift{
			GiftId: g.ID, Name: g.Name, Price: g.Price, Kind: kind, AllowedCounts: g.Counts,
			ReceiversOnMic: !g.AnyReceiver, RegionalThreshold: g.RegionalThreshold,
		})
	}
	return connect.NewResponse(out), nil
}
