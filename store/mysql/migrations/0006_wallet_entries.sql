-- The ledger's journal, append-only: nothing updates or deletes an entry.
-- amount is signed (+credit, -debit) and balance_after is the user's
-- balance after the entry, so a user's entries in entry_id order replay the
-- balance. (idem_key, kind) is unique: a credit's key credits once, and a
-- charge's key debits, rewards, refunds and takes the reward back at most
-- once each. Keys are VARBINARY: they compare byte for byte.
CREATE TABLE IF NOT EXISTS wallet_entries (
    entry_id      BIGINT         NOT NULL AUTO_INCREMENT,
    user_id       BIGINT         NOT NULL,
    kind          VARCHAR(16)    CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    amount        BIGINT         NOT NULL,
    balance_after BIGINT         NOT NULL,
    idem_key      VARBINARY(257) NOT NULL,
    created_at    BIGINT         NOT NULL,
    PRIMARY KEY (entry_id),
    UNIQUE KEY wallet_entries_key (idem_key, kind),
    KEY wallet_entries_user (user_id, entry_id),
    CONSTRAINT wallet_entries_kind CHECK (kind IN ('credit', 'gift_debit', 'lucky_reward', 'refund', 'refund_reward')),
    CONSTRAINT wallet_entries_balance CHECK (balance_after >= 0)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin
