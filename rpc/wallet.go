package rpc

import (
	"context"
	"errors"
	"log/slog"

	"connectrpc.com/connect"

	roomv1 "hyapp/room-service/gen/room/v1"
	"hyapp/room-service/gen/room/v1/roomv1connect"
	"hyapp/room-service/room"
	"hyapp/room-service/wallet"
)

// MaxCredit bounds one CreditCoins call.
const MaxCredit = 1_000_000_000_000

// WalletHandler implements room.v1.WalletService over the wallet port.
type WalletHandler struct {
	wallet wallet.Wallet
	log    *slog.Logger
}

var _ roomv1connect.WalletServiceHandler = (*WalletHandler)(nil)

// NewWalletHandler returns the WalletService handler. ListWalletEntries is
// served when w also reads its journal (Journal), as the embedded ledger does.
func NewWalletHandler(w wallet.Wallet, log *slog.Logger) *WalletHandler {
	return &WalletHandler{wallet: w, log: log}
}

// CreditCoins implements WalletService. A retry with the same
// idempotency_key answers the balance right after the original credit;
// the key reused for another user or amount is idempotency_key_conflict.
func (h *WalletHandler) CreditCoins(ctx context.Context, r *connect.Request[roomv1.CreditCoinsRequest]) (*connect.Response[roomv1.CreditCoinsResponse], error) {
	m := r.Msg
	switch {
	case m.GetUserId() <= 0:
		return nil, toConnect(ctx, h.log, room.Errorf(room.ErrInvalidArgument, "user_id must be positive"))
	case m.GetAmount() <= 0 || m.GetAmount() > MaxCredit:
		return nil, toConnect(ctx, h.log, room.Errorf(room.ErrInvalidArgument, "amount must be 1..%d", int64(MaxCredit)))
	case m.GetIdempotencyKey() == "" || len(m.GetIdempotencyKey()) > wallet.MaxKeyLen:
		return nil, toConnect(ctx, h.log, room.Errorf(room.ErrInvalidArgument, "idempotency_key must be 1..%d bytes", wallet.MaxKeyLen))
	}
	balance, dup, err := h.wallet.Credit(ctx, m.GetUserId(), m.GetAmount(), m.GetIdempotencyKey())
	if errors.Is(err, wallet.ErrKeyConflict) {
		err = room.Errorf(room.ErrIdempotencyKeyConflict, "idempotency_key %q credited another user or amount", m.GetIdempotencyKey())
	}
	if err != nil {
		return nil, toConnect(ctx, h.log, err)
	}
	return connect.NewResponse(&roomv1.CreditCoinsResponse{Balance: balance, Duplicate: dup}), nil
}

// GetBalance implements WalletService.
func (h *WalletHandler) GetBalance(ctx context.Context, r *connect.Request[roomv1.GetBalanceRequest]) (*connect.Response[roomv1.GetBalanceResponse], error) {
	if r.Msg.GetUserId() <= 0 {
		return nil, toConnect(ctx, h.log, room.Errorf(room.ErrInvalidArgument, "user_id must be positive"))
	}
	balance, err := h.wallet.Balance(ctx, r.Msg.GetUserId())
	if err != nil {
		return nil, toConnect(ctx, h.log, err)
	}
	return connect.NewResponse(&roomv1.GetBalanceResponse{Balance: balance}), nil
}
