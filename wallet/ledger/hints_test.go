package ledger

import (
	"maps"
	"testing"

	"hyapp/room-service/store"
)

// charge is a committed gift charge of amount (and reward) that left
// after.
func charge(user, amount, reward, after int64) store.GiftCharge {
	return store.GiftCharge{UserID: user, Amount: amount, Reward: reward, BalanceAfter: after}
}

func TestHintsMoveOnlyFromTheBalanceAChargeWasDecidedOn(t *testing.T) {
	tests := []struct {
		name    string
		read    map[int64]int64
		charges []store.GiftCharge
		want    map[int64]int64
	}{
		{"a charge moves its sender's hint", map[int64]int64{1: 100}, []store.GiftCharge{charge(1, 30, 0, 70)}, map[int64]int64{1: 70}},
		{"charges in order", map[int64]int64{1: 100}, []store.GiftCharge{charge(1, 30, 0, 70), charge(1, 20, 5, 55)}, map[int64]int64{1: 55}},
		{"a reward counts", map[int64]int64{1: 100}, []store.GiftCharge{charge(1, 10, 50, 140)}, map[int64]int64{1: 140}},
		{"told out of order: forgotten", map[int64]int64{1: 100}, []store.GiftCharge{charge(1, 20, 0, 50), charge(1, 30, 0, 70)}, map[int64]int64{}},
		{"decided on another balance: forgotten", map[int64]int64{1: 100, 2: 5}, []store.GiftCharge{charge(1, 30, 0, 170)}, map[int64]int64{2: 5}},
		{"no hint: none made", map[int64]int64{}, []store.GiftCharge{charge(1, 30, 0, 70)}, map[int64]int64{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHints()
			h.read(tt.read)
			h.committed(tt.charges)
			if !maps.Equal(h.m, tt.want) {
				t.Fatalf("hints %v, want %v", h.m, tt.want)
			}
		})
	}
}

func TestHintsAnswerOnlyWhenTheyKnowEveryUser(t *testing.T) {
	h := newHints()
	h.read(map[int64]int64{1: 10, 2: 0})
	if b, ok := h.get([]int64{1, 2}); !ok || b[1] != 10 || b[2] != 0 {
		t.Fatalf("get(1, 2) = %v, %v; want 10 and 0", b, ok)
	}
	if b, ok := h.get([]int64{1, 3}); ok {
		t.Fatalf("get(1, 3) = %v, true; want false: 3 is unknown", b)
	}
	h.forget(1)
	if _, ok := h.get([]int64{1}); ok {
		t.Fatal("a forgotten hint answered")
	}
}

func TestHintsAreBounded(t *testing.T) {
	h := newHints()
	for u := range int64(maxHints) {
		h.read(map[int64]int64{u: u})
	}
	if len(h.m) != maxHints {
		t.Fatalf("%d hints, want %d", len(h.m), maxHints)
	}
	h.read(map[int64]int64{maxHints: 1})
	if len(h.m) != 1 {
		t.Fatalf("%d hints after one past the bound, want 1 (started over)", len(h.m))
	}
	h.read(map[int64]int64{maxHints: 2}) // a known user is not a new one
	if len(h.m) != 1 || h.m[maxHints] != 2 {
		t.Fatalf("hints %v, want only the updated one", h.m)
	}
}
