package wallet

import "time"

// EntryKind is what moved a balance. The kinds are stored as these strings.
type EntryKind string

// Entry kinds. A charge writes gift_debit and, when it has a reward,
// lucky_reward; its refund writes refund and, when it had a reward,
// refund_reward. Each pair shares the charge's key.
const (
	EntryCredit       EntryKind = "credit"
	EntryGiftDebit    EntryKind = "gift_debit"
	EntryLuckyReward  EntryKind = "lucky_reward"
	EntryRefund       EntryKind = "refund"
	EntryRefundReward EntryKind = "refund_reward"
)

// Entry is one line of a ledger's journal. The journal is append-only:
// an entry is never changed or removed, so a user's entries, in EntryID
// order, add up to the balance, and each one's BalanceAfter is the
// previous one's plus its Amount.
type Entry struct {
	// EntryID orders the journal; a user's later entries have larger ids.
	EntryID int64
	UserID  int64
	Kind    EntryKind
	// Amount is signed: positive for credit, lucky_reward and refund.
	Amount int64
	// BalanceAfter is the user's balance right after this entry.
	BalanceAfter int64
	// Key is the idempotency key of the credit or of the charge.
	Key       string
	CreatedAt time.Time
}

// ChargeTotals sums the charges of one status.
type ChargeTotals struct {
	Charges int64
	Amount  int64
	Reward  int64
}

// Totals sums a whole ledger, read from one snapshot: what operators and
// crash checks compare with the gifts the rooms committed (settled and
// pending charges are the gifts that are or may still be committed).
type Totals struct {
	Pending  ChargeTotals
	Settled  ChargeTotals
	Refunded ChargeTotals
	// Credits counts the credits and Credited sums them.
	Credits  int64
	Credited int64
	// Accounts counts the users with a balance row and Balances sums them.
	Accounts int64
	Balances int64
}

// Imbalance is how far the balances are from what the journal says they
// should be: credits, less the amounts of charges not refunded, plus their
// rewards. It is zero in a consistent ledger (a refund gives back the
// amount and takes back the reward).
func (t Totals) Imbalance() int64 {
	want := t.Credited - t.Pending.Amount - t.Settled.Amount + t.Pending.Reward + t.Settled.Reward
	return t.Balances - want
}
