package cell

import (
	"errors"
	"math"
	"testing"

	"hyapp/room-service/room"
	"hyapp/room-service/wallet"
)

// TestDecideChargesSaysWhichRefusalsDependOnTheBalance: a run decided on
// hints is decided again on a read when a refusal depends on the balance
// (too little, or a reward that would overflow it); other refusals and
// charges that pass do not ask for a read.
func TestDecideChargesSaysWhichRefusalsDependOnTheBalance(t *testing.T) {
	charge := func(key string, amount, reward int64) wallet.Charge {
		return wallet.Charge{Key: key, UserID: 1, Amount: amount, Reward: reward}
	}
	tests := []struct {
		name      string
		balance   int64
		charges   []wallet.Charge
		receipts  map[string]wallet.Receipt
		after     []int64 // balance after each charge; -1: refused with refusal
		refusal   error
		onBalance bool
	}{
		{"in order, each on what the last left", 100, []wallet.Charge{charge("a", 30, 0), charge("b", 20, 5)}, nil, []int64{70, 55}, nil, false},
		{"too little", 100, []wallet.Charge{charge("a", 80, 0), charge("b", 30, 0)}, nil, []int64{20, -1}, room.ErrInsufficientBalance, true},
		{"a reward that overflows", math.MaxInt64 - 5, []wallet.Charge{charge("a", 1, 10)}, nil, []int64{-1}, wallet.ErrBadRequest, true},
		{"a key charged for another amount", 100, []wallet.Charge{charge("a", 30, 0)},
			map[string]wallet.Receipt{"a": {Charge: wallet.Charge{Key: "a", UserID: 1, Amount: 40}}}, []int64{-1}, wallet.ErrKeyConflict, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			results, onBalance := decideCharges(tt.charges, wallet.Quote{Balances: map[int64]int64{1: tt.balance}, Receipts: tt.receipts})
			if onBalance != tt.onBalance {
				t.Fatalf("onBalance %v, want %v (%+v)", onBalance, tt.onBalance, results)
			}
			for k, r := range results {
				switch want := tt.after[k]; {
				case want < 0 && !errors.Is(r.Err, tt.refusal):
					t.Fatalf("charge %d: %+v, want refused: %v", k, r, tt.refusal)
				case want >= 0 && (r.Err != nil || r.Receipt.BalanceAfter != want):
					t.Fatalf("charge %d: %+v, want balance after %d", k, r, want)
				}
			}
		})
	}
}
