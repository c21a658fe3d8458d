CREATE TABLE IF NOT EXISTS room_snapshots (
    room_id      VARBINARY(128) NOT NULL,
    room_version BIGINT         NOT NULL,
    payload      LONGBLOB,
    created_at   BIGINT         NOT NULL,
    PRIMARY KEY (room_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin
