package rpc

import (
	"context"

	"connectrpc.com/connect"

	"hyapp/room-service/app"
	roomv1 "hyapp/room-service/gen/room/v1"
	"hyapp/room-service/room"
)

// SendGift implements RoomService through the gift use case (app.Gifts).
func (h *RoomHandler) SendGift(ctx context.Context, r *connect.Request[roomv1.SendGiftRequest]) (*connect.Response[roomv1.SendGiftResponse], error) {
	m := r.Msg
	send := app.GiftSend{
		RoomID: m.GetRoomId(), CommandID: m.GetCommandId(), Sender: m.GetOperatorUserId(),
		Platform: h.asPlatform(ctx, m.GetOperatorUserId()), Receivers: m.GetReceiverUserIds(), GiftID: m.GetGiftId(),
		Count: m.GetCount(), ComboID: m.GetComboId(),
	}
	res, err := h.gifts.Send(ctx, send)
	if send.Platform {
		h.auditPlatform(ctx, &room.Envelope{RoomID: send.RoomID, CommandID: send.CommandID, Operator: send.Sender, Command: &room.SendGift{}}, err)
	}
	if err != nil {
		return nil, toConnect(ctx, h.log, err)
	}
	return connect.NewResponse(&roomv1.SendGiftResponse{
		RoomVersion: res.RoomVersion, CoinBalanceAfter: res.BalanceAfter, Cost: res.Cost,
		LuckyMultiplierBp: res.MultiplierBP, LuckyReward: res.Reward,
	}), nil
}

// ListGifts implements RoomService.
func (h *RoomHandler) ListGifts(_ context.Context, _ *connect.Request[roomv1.ListGiftsRequest]) (*connect.Response[roomv1.ListGiftsResponse], error) {
	catalogue := h.gifts.Catalogue()
	out := &roomv1.ListGiftsResponse{LuckyExpectedPayoutBp: catalogue.ExpectedPayoutBP()}
	for _, g := range catalogue.Gifts() {
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
