// Package wallet is the port through which rooms are paid: the COIN ledger a
// gift debits. The embedded implementation is a ledger in the service's own
// database (wallet/ledger, handed out by the store); a remote wallet service
// plugs in behind the same interface.
//
// A gift's payment is a try/confirm/cancel: Charge debits the sender (and
// credits a lucky reward) once per key and leaves the charge pending; Settle
// confirms the charges whose gifts committed; Refund cancels a pending charge
// whose gift never will. No coin is created or lost: every pending charge
// ends settled or refunded (the reconciler finishes what a crash left).
package wallet

import (
	"context"
	"strconv"
	"strings"
	"time"

	"hyapp/room-service/room"
)

// Status of a charge.
type Status string

// Charge statuses. A charge is pending until it is settled (its gift
// committed) or refunded (its gift will never commit); both are final.
const (
	StatusPending  Status = "pending"
	StatusSettled  Status = "settled"
	StatusRefunded Status = "refunded"
)

// Errors a Wallet reports (wrapped with ids). Anything else means the
// outcome is unknown: the charge may or may not exist.
var (
	// ErrInsufficientFunds: the balance does not cover the amount; nothing changed.
	ErrInsufficientFunds = room.ErrInsufficientBalance
	// ErrKeyConflict: the key was used before for a different user or amount.
	ErrKeyConflict = room.ErrCommandIDConflict
	// ErrNotFound: no charge has the key.
	ErrNotFound = &room.Error{Code: room.CodeNotFound, Reason: "charge_not_found", Message: "no charge has this key"}
	// ErrFinal: the charge was already settled or refunded the other way.
	ErrFinal = &room.Error{Code: room.CodeConflict, Reason: "charge_final", Message: "the charge is already settled or refunded"}
	// ErrBadRequest: a malformed charge or credit (non-positive amount, empty key, ...); nothing changed.
	ErrBadRequest = room.ErrInvalidArgument
)

// InsufficientFunds is ErrInsufficientFunds for a balance that does not
// cover needed: its metadata carry both (keys "balance" and "needed"), so
// the client can tell the user how much is missing.
func InsufficientFunds(balance, needed int64) *room.Error {
	e := room.Errorf(ErrInsufficientFunds, "the balance %d does not cover %d", balance, needed)
	e.Metadata = map[string]string{"balance": strconv.FormatInt(balance, 10), "needed": strconv.FormatInt(needed, 10)}
	return e
}

// Charge is one gift's payment, applied in one ledger transaction: UserID
// pays Amount and is credited Reward.
type Charge struct {
	// Key is the idempotency key, ChargeKey(room_id, command_id).
	Key    string
	UserID int64
	// Amount is the coins debited, > 0. The balance must cover it before any reward.
	Amount int64
	// Reward is the coins credited back in the same transaction (a lucky win), >= 0.
	Reward int64
	// MultiplierBP is the lucky multiplier drawn, in basis points (10000 = 1x), kept with the charge.
	MultiplierBP int64
	// At is when the charge was made (the caller's clock); the reconciler ages charges by it.
	At time.Time
}

// Receipt is what the ledger holds for a key.
type Receipt struct {
	// Charge is the charge as first recorded: a replay returns the first
	// charge's Reward, MultiplierBP and At, whatever the repeated call carried.
	Charge
	// BalanceAfter is the user's balance right after this charge (debit and reward).
	BalanceAfter int64
	Status       Status
	// Replayed is true when the key had been charged before: this call changed nothing.
	Replayed bool
}

// Result answers one charge of a batch.
type Result struct {
	Receipt Receipt
	// Err is nil, ErrInsufficientFunds, ErrKeyConflict or ErrBadRequest for this charge alone.
	Err error
}

// Wallet is the payment port. Implementations are safe for concurrent use.
type Wallet interface {
	// Charge applies each charge once per key, in order (a later charge sees
	// the balance an earlier one left). results[i] answers charges[i]. A
	// repeated key returns its first receipt with Replayed set, whatever its
	// status, unless user or amount differ (ErrKeyConflict). A non-nil err
	// means the outcome of every charge is unknown.
	Charge(ctx context.Context, charges []Charge) ([]Result, error)
	// Settle confirms pending charges. Settled keys are ignored; unknown and
	// refunded keys too (Settle never fails on a key's state).
	Settle(ctx context.Context, keys []string) error
	// Refund cancels a pending charge: the amount comes back and the reward
	// goes, in one transaction. Refunding a refunded charge returns its
	// receipt (Replayed); a settled charge is ErrFinal; an unknown key is
	// ErrNotFound. ErrInsufficientFunds when the balance no longer covers the
	// reward to take back: the charge stays pending for a later try.
	Refund(ctx context.Context, key string) (Receipt, error)
	// Receipt reads a charge; found is false for an unknown key.
	Receipt(ctx context.Context, key string) (r Receipt, found bool, err error)
	// Pending lists up to limit pending charges made before before and
	// after the cursor, in (At, Key) order: oldest first. The zero Cursor
	// starts at the oldest; the next page starts after the last receipt
	// (CursorOf).
	Pending(ctx context.Context, before time.Time, after Cursor, limit int) ([]Receipt, error)
	// Credit adds amount (> 0) to the user's balance once per key and
	// returns the balance right after it. A repeated key changes nothing
	// and returns duplicate with the balance right after the first credit
	// (not today's), so a retry answers exactly as the original did; a
	// repeated key with another user or amount is ErrKeyConflict.
	Credit(ctx context.Context, userID, amount int64, key string) (balance int64, duplicate bool, err error)
	// Balance returns the user's balance (0 for an unknown user).
	Balance(ctx context.Context, userID int64) (int64, error)
}

// Quoter is a wallet whose gift charges the room's own commit transaction
// makes (the embedded ledger, in the room store's database): a room
// decides each gift on the balance Quote reads, and the commit that logs
// the gift writes its charge, settled, in the same transaction
// (store.Batch.Charges), refusing the batch if the balance has moved
// since. One transaction per run of gifts, and no pending charge to settle
// or refund.
//
// A room may decide gifts on Hint instead, without a read: the commit's
// check makes a hint that is too high cost a second decision on Quote,
// never a wrong charge. A hint may also be too low (a top-up elsewhere),
// so a room never refuses a gift for its funds on a hint alone. Nor does
// a hint say whether a key was charged before: a retried gift decided on
// one is refused by the commit (the key is the charge row's primary key)
// and decided again on Quote.
type Quoter interface {
	// Quote reads the balances of users (0 for a user never seen) and the
	// receipts of those of keys that were charged before.
	Quote(ctx context.Context, users []int64, keys []string) (Quote, error)
	// Hint returns the balances of users as this process last saw them
	// committed, without a read, and false unless it knows every one.
	Hint(users []int64) (map[int64]int64, bool)
}

// Quote is what Quoter.Quote read.
type Quote struct {
	Balances map[int64]int64
	Receipts map[string]Receipt
}

// Cursor is a position in the (At, Key) order of pending charges.
type Cursor struct {
	At  time.Time
	Key string
}

// CursorOf is the position right after r.
func CursorOf(r Receipt) Cursor { return Cursor{At: r.At, Key: r.Key} }

// MaxKeyLen bounds idempotency keys: a room id, a slash and a command id.
const MaxKeyLen = 2*room.MaxIDLen + 1

// ChargeKey is the idempotency key of a gift's charge: the room id and the
// command id joined by a space, which neither may contain.
func ChargeKey(roomID, commandID string) string { return roomID + " " + commandID }

// SplitChargeKey returns the room id and command id of a gift's charge key.
func SplitChargeKey(key string) (roomID, commandID string, ok bool) {
	roomID, commandID, ok = strings.Cut(key, " ")
	return roomID, commandID, ok && roomID != "" && commandID != ""
}

// Check validates a charge before it reaches a ledger.
func (c *Charge) Check() error {
	switch {
	case c.Key == "" || len(c.Key) > MaxKeyLen:
		return room.Errorf(ErrBadRequest, "charge key must be 1..%d bytes", MaxKeyLen)
	case c.UserID <= 0:
		return room.Errorf(ErrBadRequest, "charge user_id must be positive")
	case c.Amount <= 0 || c.Reward < 0 || c.MultiplierBP < 0:
		return room.Errorf(ErrBadRequest, "charge amount must be positive, reward and multiplier not negative")
	}
	return nil
}
