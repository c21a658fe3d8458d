-- Durable timers: a row is set in the transaction of the command that set
-- it, so a wakeup survives a crash; a scanner reads the due rows by fire
-- time. InnoDB appends the primary key to the secondary index, so the scan
-- reads (fire_at_ms, room_id, timer_id) in order without a sort.
CREATE TABLE IF NOT EXISTS room_timers (
    room_id    VARBINARY(128) NOT NULL,
    timer_id   VARBINARY(128) NOT NULL,
    kind       VARCHAR(64)    NOT NULL,
    fire_at_ms BIGINT         NOT NULL,
    payload    BLOB,
    created_at BIGINT         NOT NULL,
    PRIMARY KEY (room_id, timer_id),
    KEY room_timers_fire_at (fire_at_ms)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin
