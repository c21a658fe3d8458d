package ledger

import (
	"sync"

	"hyapp/room-service/store"
)

// maxHints bounds the balances a ledger remembers. Past it the hints start
// over: a forgotten balance costs one read.
const maxHints = 1 << 17

// hints are the balances this process last saw committed, so that a room
// can decide a run of gifts without a read (wallet.Quoter.Hint). They
// come from Quote's reads and from the room commits that charged gifts
// (LedgerHooks.Committed), and may be stale: another node's charge or
// top-up of the same account, or two commits of one account told out of
// order. Both directions are safe:
//   - a hint higher than the balance decides a gift the commit then
//     refuses (inCommit checks every balance it charges, under the
//     account's lock), which forgets the hint; the room decides again on
//     Quote;
//   - a hint lower than the balance could refuse a gift for its funds, so
//     the room asks Quote before refusing one for its funds; a low hint
//     that still covers the gift is refused by the commit, as above.
//
// A stale hint refused in a merged group commit makes the store commit
// that transaction's batches again one by one (sqlstore commitIsolated):
// a cost paid when another node moved the balance, not on one node.
//
// A commit's charge moves a hint only from the balance it was decided
// on: a hint that holds anything else is forgotten, not guessed at.
type hints struct {
	mu sync.Mutex
	m  map[int64]int64
}

func newHints() *hints { return &hints{m: map[int64]int64{}} }

// get returns the hinted balances of users, and false unless it knows
// every one of them.
func (h *hints) get(users []int64) (map[int64]int64, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make(map[int64]int64, len(users))
	for _, u := range users {
		b, ok := h.m[u]
		if !ok {
			return nil, false
		}
		out[u] = b
	}
	return out, true
}

// read records balances a read found.
func (h *hints) read(balances map[int64]int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for u, b := range balances {
		h.setLocked(u, b)
	}
}

// committed moves the hints of the charges' senders along the charges, in
// order: a charge decided on the hinted balance leaves its balance after;
// any other hint of its sender is forgotten.
func (h *hints) committed(charges []store.GiftCharge) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, c := range charges {
		before := c.BalanceAfter + c.Amount - c.Reward
		if b, ok := h.m[c.UserID]; ok && b == before {
			h.m[c.UserID] = c.BalanceAfter
		} else {
			delete(h.m, c.UserID)
		}
	}
}

// forget drops the hints of users.
func (h *hints) forget(users ...int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, u := range users {
		delete(h.m, u)
	}
}

func (h *hints) setLocked(u, b int64) {
	if _, ok := h.m[u]; !ok && len(h.m) >= maxHints {
		clear(h.m)
	}
	h.m[u] = b
}
