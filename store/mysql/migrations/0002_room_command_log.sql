-- The command log. The primary key keeps one room's log contiguous in the
-- clustered index, so replay is a range scan; the unique key is the
-- idempotency key. payload is a BLOB, not JSON: a JSON column normalises the
-- text, and idempotent retries compare the stored bytes with the request's.
CREATE TABLE IF NOT EXISTS room_command_log (
    room_id      VARBINARY(128) NOT NULL,
    room_version BIGINT         NOT NULL,
    command_id   VARBINARY(128) NOT NULL,
    command_type VARCHAR(64)    NOT NULL,
    payload      MEDIUMBLOB,
    replayable   BOOLEAN        NOT NULL,
    created_at   BIGINT         NOT NULL,
    PRIMARY KEY (room_id, room_version),
    UNIQUE KEY room_command_log_command (room_id, command_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin
