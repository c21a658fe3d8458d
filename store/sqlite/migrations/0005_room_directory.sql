-- The room directory: one row per room, what a lobby shows of it, written
-- by the room's owner from its committed state (coalesced, about once a
-- second) and fenced by (owner_epoch, room_version). Each listing order has
-- an index led by status, and one led by status and region, the lobby's
-- partitions; room_id ends each, so a page is an index range read
-- backwards, without a sort.
CREATE TABLE room_directory (
    room_id        TEXT    NOT NULL PRIMARY KEY,
    owner_epoch    INTEGER NOT NULL,
    room_version   INTEGER NOT NULL,
    owner_node     TEXT    NOT NULL DEFAULT '',
    status         TEXT    NOT NULL,
    owner_user_id  INTEGER NOT NULL,
    host_user_id   INTEGER NOT NULL,
    seat_count     INTEGER NOT NULL,
    mode           TEXT    NOT NULL DEFAULT '',
    region         TEXT    NOT NULL DEFAULT '',
    title          TEXT    NOT NULL DEFAULT '',
    cover_url      TEXT    NOT NULL DEFAULT '',
    online_count   INTEGER NOT NULL,
    seats_taken    INTEGER NOT NULL,
    heat           INTEGER NOT NULL,
    created_at     INTEGER NOT NULL,
    last_active_at INTEGER NOT NULL
) WITHOUT ROWID;

CREATE INDEX room_directory_heat ON room_directory (status, heat, room_id);
CREATE INDEX room_directory_online ON room_directory (status, online_count, room_id);
CREATE INDEX room_directory_newest ON room_directory (status, created_at, room_id);
CREATE INDEX room_directory_region_heat ON room_directory (status, region, heat, room_id);
CREATE INDEX room_directory_region_online ON room_directory (status, region, online_count, room_id);
CREATE INDEX room_directory_region_newest ON room_directory (status, region, created_at, room_id);

-- Gift records: one row per committed gift and receiver, inserted in the
-- transaction that commits the gift. Listed newest first by room, by
-- sender and by receiver, each through its own index.
CREATE TABLE room_gift_records (
    record_id        INTEGER PRIMARY KEY AUTOINCREMENT,
    room_id          TEXT    NOT NULL,
    room_version     INTEGER NOT NULL,
    command_id       TEXT    NOT NULL,
    sender_user_id   INTEGER NOT NULL,
    receiver_user_id INTEGER NOT NULL,
    gift_id          TEXT    NOT NULL,
    count            INTEGER NOT NULL,
    value            INTEGER NOT NULL,
    multiplier_bp    INTEGER NOT NULL,
    sent_at_ms       INTEGER NOT NULL
);
CREATE INDEX room_gift_records_room ON room_gift_records (room_id, record_id);
CREATE INDEX room_gift_records_sender ON room_gift_records (sender_user_id, record_id);
CREATE INDEX room_gift_records_receiver ON room_gift_records (receiver_user_id, record_id);
