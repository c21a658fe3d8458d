-- Room metadata and the durable head. room_version is the version of the
-- last committed command; owner_epoch fences every commit (see CommitBatches).
-- Ids are VARBINARY: they compare byte for byte, without case folding or the
-- trailing-space padding of the _bin collations.
CREATE TABLE IF NOT EXISTS rooms (
    room_id       VARBINARY(128) NOT NULL,
    owner_user_id BIGINT         NOT NULL,
    host_user_id  BIGINT         NOT NULL,
    seat_count    INT            NOT NULL,
    mode          VARCHAR(64)    NOT NULL DEFAULT '',
    status        VARCHAR(64)    NOT NULL DEFAULT '',
    room_version  BIGINT         NOT NULL DEFAULT 0,
    owner_epoch   BIGINT         NOT NULL DEFAULT 0,
    owner_node    VARCHAR(128)   NOT NULL DEFAULT '',
    created_at    BIGINT         NOT NULL,
    updated_at    BIGINT         NOT NULL,
    PRIMARY KEY (room_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin
