-- The outbox. The relay scans pending rows in id order: room_outbox_pending
-- yields them in that order without a sort (and lets the prune scan walk the
-- published rows oldest first), carrying next_attempt_at so rows that are not
-- due are skipped inside the index. Auto-increment ids commit out of order,
-- which a scan of pending rows tolerates (a late commit is still pending).
CREATE TABLE IF NOT EXISTS room_outbox (
    id              BIGINT         NOT NULL AUTO_INCREMENT,
    event_id        VARBINARY(255) NOT NULL,
    room_id         VARBINARY(128) NOT NULL,
    room_version    BIGINT         NOT NULL,
    seq             INT            NOT NULL,
    event_type      VARCHAR(128)   NOT NULL,
    payload         MEDIUMBLOB,
    owner_epoch     BIGINT         NOT NULL,
    status          VARCHAR(16)    CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    attempts        INT            NOT NULL DEFAULT 0,
    last_error      TEXT           NOT NULL,
    next_attempt_at BIGINT         NOT NULL,
    created_at      BIGINT         NOT NULL,
    published_at    BIGINT         NULL,
    PRIMARY KEY (id),
    UNIQUE KEY room_outbox_event (event_id),
    KEY room_outbox_pending (status, id, next_attempt_at),
    KEY room_outbox_room (room_id, room_version, seq)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin
