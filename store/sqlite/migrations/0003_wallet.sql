-- The embedded COIN ledger (package wallet; its SQL is wallet/ledger's).
-- Money is whole coins in INTEGER columns, never floating point.

-- One row per user the ledger has seen. The ledger never writes a negative
-- balance; the CHECK makes a bug that would fail the write instead.
CREATE TABLE wallet_accounts (
    user_id    INTEGER NOT NULL PRIMARY KEY,
    balance    INTEGER NOT NULL CHECK (balance >= 0),
    updated_at INTEGER NOT NULL
);

-- The journal, append-only: nothing updates or deletes an entry. amount is
-- signed (+credit, -debit) and balance_after is the user's balance after
-- the entry, so a user's entries in entry_id order replay the balance.
-- (idem_key, kind) is unique: a credit's key credits once, and a charge's
-- key debits, rewards, refunds and takes the reward back at most once each.
CREATE TABLE wallet_entries (
    entry_id      INTEGER PRIMARY KEY AUTOINCREMENT,
    user_id       INTEGER NOT NULL,
    kind          TEXT    NOT NULL CHECK (kind IN ('credit', 'gift_debit', 'lucky_reward', 'refund', 'refund_reward')),
    amount        INTEGER NOT NULL,
    balance_after INTEGER NOT NULL CHECK (balance_after >= 0),
    idem_key      TEXT    NOT NULL,
    created_at    INTEGER NOT NULL,
    UNIQUE (idem_key, kind)
);
CREATE INDEX wallet_entries_user ON wallet_entries (user_id, entry_id);

-- One row per gift charge, keyed by its idempotency key: the receipt a
-- retry gets back. status goes pending -> settled or pending -> refunded,
-- never back; the reconciler finds old pending charges through the index.
CREATE TABLE wallet_charges (
    charge_key    TEXT    NOT NULL PRIMARY KEY,
    user_id       INTEGER NOT NULL,
    amount        INTEGER NOT NULL CHECK (amount > 0),
    reward        INTEGER NOT NULL CHECK (reward >= 0),
    multiplier_bp INTEGER NOT NULL,
    balance_after INTEGER NOT NULL,
    status        TEXT    NOT NULL CHECK (status IN ('pending', 'settled', 'refunded')),
    charged_at_ms INTEGER NOT NULL,
    updated_at    INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX wallet_charges_status ON wallet_charges (status, charged_at_ms);
