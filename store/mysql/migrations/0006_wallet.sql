-- The embedded COIN ledger (package wallet; its SQL is wallet/ledger's):
-- balances. Money is whole coins in BIGINT columns, never floating point.
-- The ledger never writes a negative balance; the CHECK (enforced by
-- MariaDB, and by MySQL from 8.0.16) makes a bug that would fail the write
-- instead. Each migration file holds one statement: the journal and the
-- charges follow in 0006_wallet_entries and 0006_wallet_charges.
CREATE TABLE IF NOT EXISTS wallet_accounts (
    user_id    BIGINT NOT NULL,
    balance    BIGINT NOT NULL,
    updated_at BIGINT NOT NULL,
    PRIMARY KEY (user_id),
    CONSTRAINT wallet_accounts_balance CHECK (balance >= 0)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin
