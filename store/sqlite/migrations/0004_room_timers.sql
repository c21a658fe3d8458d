-- Durable timers: a row is set in the transaction of the command that set
-- it, so a wakeup survives a crash; a scanner reads the due rows by fire
-- time. The index's implicit primary key suffix gives (fire_at_ms, room_id,
-- timer_id) order without a sort.
CREATE TABLE room_timers (
    room_id    TEXT    NOT NULL,
    timer_id   TEXT    NOT NULL,
    kind       TEXT    NOT NULL,
    fire_at_ms INTEGER NOT NULL,
    payload    BLOB,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (room_id, timer_id)
) WITHOUT ROWID;

CREATE INDEX room_timers_fire_at ON room_timers (fire_at_ms);
