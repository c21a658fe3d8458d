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

// known returns the balances h knows.
func known(h *hints) map[int64]int64 {
	out := map[int64]int64{}
	for u, v := range h.m {
		if v.known {
			out[u] = v.balance
		}
	}
	return out
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
			h.read(tt.read, h.begin())
			h.committed(tt.charges)
			if got := known(h); !maps.Equal(got, tt.want) {
				t.Fatalf("hints %v, want %v", got, tt.want)
			}
		})
	}
}

func TestHintsAnswerOnlyWhenTheyKnowEveryUser(t *testing.T) {
	h := newHints()
	h.read(map[int64]int64{1: 10, 2: 0}, h.begin())
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
		h.read(map[int64]int64{u: u}, h.begin())
	}
	if len(h.m) != maxHints {
		t.Fatalf("%d hints, want %d", len(h.m), maxHints)
	}
	h.read(map[int64]int64{maxHints: 1}, h.begin())
	if len(h.m) != 1 {
		t.Fatalf("%d hints after one past the bound, want 1 (started over)", len(h.m))
	}
	h.read(map[int64]int64{maxHints: 2}, h.begin()) // a known user is not a new one
	if got := known(h); len(h.m) != 1 || got[maxHints] != 2 {
		t.Fatalf("hints %v, want only the updated one", got)
	}
}

// TestAReadDoesNotOverwriteANewerHint: a read that began before a commit
// moved a hint, or before a hint was forgotten, found a balance that may
// predate that change, and leaves the hint as it is; a read that began
// after sets it; of two reads, the one that began later wins.
func TestAReadDoesNotOverwriteANewerHint(t *testing.T) {
	h := newHints()
	h.read(map[int64]int64{1: 100, 2: 50}, h.begin())
	early := h.begin()
	h.committed([]store.GiftCharge{charge(1, 30, 0, 70)})
	h.forget(2)
	h.read(map[int64]int64{1: 100, 2: 50, 3: 7}, early) // began before both
	if got, want := known(h), map[int64]int64{1: 70, 3: 7}; !maps.Equal(got, want) {
		t.Fatalf("after an early read: %v, want %v", got, want)
	}
	late := h.begin()
	h.read(map[int64]int64{1: 65, 2: 40}, late) // began after both: another node moved them
	if got, want := known(h), map[int64]int64{1: 65, 2: 40, 3: 7}; !maps.Equal(got, want) {
		t.Fatalf("after a late read: %v, want %v", got, want)
	}
	first, second := h.begin(), h.begin()
	h.committed([]store.GiftCharge{charge(3, 2, 0, 5)})
	h.read(map[int64]int64{3: 1}, h.begin())
	h.read(map[int64]int64{3: 5}, second) // began before the read that set 1
	h.read(map[int64]int64{3: 9}, first)
	if got := known(h)[3]; got != 1 {
		t.Fatalf("user 3's hint %d, want 1: the read that began last", got)
	}
}

// TestALedgerWriteSetsTheBalancesItLeft: a ledger transaction's balances
// become the hints, except where a room commit moved or forgot a hint
// while it ran: which committed last is not known, so that one is
// forgotten. A read that began before the write does not overwrite it.
func TestALedgerWriteSetsTheBalancesItLeft(t *testing.T) {
	h := newHints()
	h.read(map[int64]int64{1: 100, 2: 50, 3: 20}, h.begin())
	began := h.begin()
	h.committed([]store.GiftCharge{charge(2, 10, 0, 40)}) // a room commit while the write ran
	reading := h.begin()
	h.wrote(map[int64]int64{1: 600, 2: 540, 4: 9}, began)
	if got, want := known(h), map[int64]int64{1: 600, 3: 20, 4: 9}; !maps.Equal(got, want) {
		t.Fatalf("after the write: %v, want %v", got, want)
	}
	h.read(map[int64]int64{1: 100, 4: 0}, reading) // began before the write ended
	if got, want := known(h), map[int64]int64{1: 600, 3: 20, 4: 9}; !maps.Equal(got, want) {
		t.Fatalf("after an older read: %v, want %v", got, want)
	}
}
