-- Gift records: one row per committed gift and receiver, inserted in the
-- transaction that commits the gift. Listed newest first by room, by
-- sender and by receiver, each through its own index.
CREATE TABLE IF NOT EXISTS room_gift_records (
    record_id        BIGINT         NOT NULL AUTO_INCREMENT,
    room_id          VARBINARY(128) NOT NULL,
    room_version     BIGINT         NOT NULL,
    command_id       VARBINARY(128) NOT NULL,
    sender_user_id   BIGINT         NOT NULL,
    receiver_user_id BIGINT         NOT NULL,
    gift_id          VARCHAR(128)   NOT NULL,
    count            INT            NOT NULL,
    value            BIGINT         NOT NULL,
    multiplier_bp    BIGINT         NOT NULL,
    sent_at_ms       BIGINT         NOT NULL,
    PRIMARY KEY (record_id),
    KEY room_gift_records_room (room_id, record_id),
    KEY room_gift_records_sender (sender_user_id, record_id),
    KEY room_gift_records_receiver (receiver_user_id, record_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin
