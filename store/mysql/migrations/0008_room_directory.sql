-- The room directory: one row per room, what a lobby shows of it, written
-- by the room's owner from its committed state (coalesced, about once a
-- second) and fenced by (owner_epoch, room_version). Each listing order has
-- an index led by status, and one led by status and region, the lobby's
-- partitions; room_id ends each, so a page is an index range read
-- backwards, without a sort.
CREATE TABLE IF NOT EXISTS room_directory (
    room_id        VARBINARY(128) NOT NULL,
    owner_epoch    BIGINT         NOT NULL,
    room_version   BIGINT         NOT NULL,
    owner_node     VARCHAR(255)   NOT NULL DEFAULT '',
    status         VARCHAR(16)    CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    owner_user_id  BIGINT         NOT NULL,
    host_user_id   BIGINT         NOT NULL,
    seat_count     INT            NOT NULL,
    mode           VARCHAR(64)    NOT NULL DEFAULT '',
    region         VARCHAR(64)    NOT NULL DEFAULT '',
    title          VARCHAR(128)   NOT NULL DEFAULT '',
    cover_url      VARCHAR(1024)  NOT NULL DEFAULT '',
    online_count   INT            NOT NULL,
    seats_taken    INT            NOT NULL,
    heat           BIGINT         NOT NULL,
    created_at     BIGINT         NOT NULL,
    last_active_at BIGINT         NOT NULL,
    PRIMARY KEY (room_id),
    KEY room_directory_heat (status, heat, room_id),
    KEY room_directory_online (status, online_count, room_id),
    KEY room_directory_newest (status, created_at, room_id),
    KEY room_directory_region_heat (status, region, heat, room_id),
    KEY room_directory_region_online (status, region, online_count, room_id),
    KEY room_directory_region_newest (status, region, created_at, room_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin
