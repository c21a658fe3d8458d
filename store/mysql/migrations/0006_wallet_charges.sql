-- One row per gift charge, keyed by its idempotency key: the receipt a
-- retry gets back. status goes pending -> settled or pending -> refunded,
-- never back; the reconciler finds old pending charges through
-- wallet_charges_status (which holds the key too, so ties need no sort).
CREATE TABLE IF NOT EXISTS wallet_charges (
    charge_key    VARBINARY(257) NOT NULL,
    user_id       BIGINT         NOT NULL,
    amount        BIGINT         NOT NULL,
    reward        BIGINT         NOT NULL,
    multiplier_bp BIGINT         NOT NULL,
    balance_after BIGINT         NOT NULL,
    status        VARCHAR(16)    CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    charged_at_ms BIGINT         NOT NULL,
    updated_at    BIGINT         NOT NULL,
    PRIMARY KEY (charge_key),
    KEY wallet_charges_status (status, charged_at_ms),
    CONSTRAINT wallet_charges_amount CHECK (amount > 0 AND reward >= 0),
    CONSTRAINT wallet_charges_state CHECK (status IN ('pending', 'settled', 'refunded'))
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin
