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
// come from Quote's reads, from the room commits that charged gifts
// (LedgerHooks.Committed) and from the ledger's own transactions (a
// top-up, a refund), and may be stale: another node's charge or
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
// A stale hint refused in a merged group commit refuses its batch alone:
// inCommit names the charge (sqlstore.StaleCharge) and the store runs the
// transaction again, merged, without that batch.
//
// A commit's charge moves a hint only from the balance it was decided
// on: a hint that holds anything else is forgotten, not guessed at. A read
// that began before a hint was moved or forgotten does not overwrite it:
// the commit that moved it is newer than what the read may have seen.
type hints struct {
	mu    sync.Mutex
	m     map[int64]hint
	clock uint64 // counts the moves and forgets
}

// hint is one user's balance as last seen, or a forgotten one.
type hint struct {
	balance int64
	known   bool   // false: forgotten, kept so that an older read does not bring it back
	at      uint64 // the clock when a move or forget set it, or when the read that set it began
}

func newHints() *hints { return &hints{m: map[int64]hint{}} }

// get returns the hinted balances of users, and false unless it knows
// every one of them.
func (h *hints) get(users []int64) (map[int64]int64, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make(map[int64]int64, len(users))
	for _, u := range users {
		v := h.m[u]
		if !v.known {
			return nil, false
		}
		out[u] = v.balance
	}
	return out, true
}

// begin is what a read passes to read when it is done.
func (h *hints) begin() uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.clock
}

// read records balances a read found that began at began (begin), except
// where a commit or a forget changed the hint since.
func (h *hints) read(balances map[int64]int64, began uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for u, b := range balances {
		if v, ok := h.m[u]; ok && v.at > began {
			continue
		}
		h.setLocked(u, hint{balance: b, known: true, at: began})
	}
}

// committed moves the hints of the charges' senders along the charges, in
// order: a charge decided on the hinted balance leaves its balance after;
// any other hint of its sender is forgotten.
func (h *hints) committed(charges []store.GiftCharge) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, c := range charges {
		h.clock++
		before := c.BalanceAfter + c.Amount - c.Reward
		if v := h.m[c.UserID]; v.known && v.balance == before {
			h.setLocked(c.UserID, hint{balance: c.BalanceAfter, known: true, at: h.clock})
		} else {
			h.setLocked(c.UserID, hint{at: h.clock})
		}
	}
}

// wrote records the balances a ledger transaction that began at began
// (begin) left on its accounts, read under their locks. A hint that a room
// commit moved or forgot meanwhile is forgotten: which of the two
// committed last is not known here.
func (h *hints) wrote(balances map[int64]int64, began uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.clock++
	for u, b := range balances {
		if v, ok := h.m[u]; ok && v.at > began {
			h.setLocked(u, hint{at: h.clock})
			continue
		}
		h.setLocked(u, hint{balance: b, known: true, at: h.clock})
	}
}

// forget drops the hints of users.
func (h *hints) forget(users ...int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.clock++
	for _, u := range users {
		h.setLocked(u, hint{at: h.clock})
	}
}

func (h *hints) setLocked(u int64, v hint) {
	if _, ok := h.m[u]; !ok && len(h.m) >= maxHints {
		clear(h.m)
	}
	h.m[u] = v
}
