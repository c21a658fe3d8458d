// Package app holds the use cases that more than one caller runs: the RPC
// handlers and the benchmarks send gifts through it, so a gift is
// prepared, submitted and answered one way. It sits between its callers
// and the engine: it imports the domain, the catalogue and the engine's
// result, and nothing imports it but callers.
package app

import (
	"context"

	"hyapp/room-service/cell"
	"hyapp/room-service/gift"
	"hyapp/room-service/room"
)

// Engine is what the use cases need from the room engine (a *cell.Registry).
type Engine interface {
	Submit(ctx context.Context, env *room.Envelope) (cell.Result, error)
}

// Gifts sends gifts from a catalogue through the engine. It is safe for
// concurrent use.
type Gifts struct {
	catalogue *gift.Catalogue
	engine    Engine
}

// NewGifts returns the gift use case over catalogue and engine; both are required.
func NewGifts(catalogue *gift.Catalogue, engine Engine) *Gifts {
	return &Gifts{catalogue: catalogue, engine: engine}
}

// Catalogue returns the catalogue gifts are sent from.
func (g *Gifts) Catalogue() *gift.Catalogue { return g.catalogue }

// GiftSend is one request to send a gift.
type GiftSend struct {
	RoomID    string
	CommandID string
	// Sender is the operator who pays.
	Sender int64
	// Platform marks platform staff, who may act as the room's owner.
	Platform  bool
	Receivers []int64
	GiftID    string
	// Count is the pieces each receiver gets.
	Count   int32
	ComboID string
}

// GiftReceipt is the answer to a committed gift: what it cost the sender.
// A retry of a committed gift answers what the first attempt paid.
type GiftReceipt struct {
	RoomVersion int64
	// Duplicate is true when the command_id had already committed.
	Duplicate bool
	// BalanceAfter is the sender's COIN balance after the debit and any lucky reward.
	BalanceAfter int64
	Cost         int64
	MultiplierBP int64
	Reward       int64
}

// Send checks the gift against the catalogue and draws a lucky gift's
// multiplier (unknown gifts and counts the gift does not allow are refused
// before anything is charged), then submits it: the room checks sender and
// receivers, charges the wallet and commits. Errors are *room.Error values,
// as Submit returns them.
func (g *Gifts) Send(ctx context.Context, s GiftSend) (GiftReceipt, error) {
	cmd := &room.SendGift{ReceiverUserIDs: s.Receivers, GiftID: s.GiftID, Count: s.Count, ComboID: s.ComboID}
	if err := g.catalogue.Prepare(cmd); err != nil {
		return GiftReceipt{}, err
	}
	res, err := g.engine.Submit(ctx, &room.Envelope{
		RoomID: s.RoomID, CommandID: s.CommandID, Operator: s.Sender, Platform: s.Platform, Command: cmd,
	})
	if err != nil {
		return GiftReceipt{}, err
	}
	o := cmd.Outcome // filled in by the engine: the charge, or the first attempt's
	if o.ChargedAt == 0 {
		return GiftReceipt{}, room.Errorf(room.ErrInternal, "gift %s committed without its charge", s.CommandID)
	}
	return GiftReceipt{
		RoomVersion: res.RoomVersion, Duplicate: res.Duplicate, BalanceAfter: o.BalanceAfter,
		Cost: cmd.Cost(), MultiplierBP: o.MultiplierBP, Reward: o.Reward,
	}, nil
}
