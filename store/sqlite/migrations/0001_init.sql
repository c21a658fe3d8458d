-- Room metadata and the durable head. room_version is the version of the
-- last committed command; owner_epoch fences every commit (see CommitBatches).
CREATE TABLE rooms (
    room_id       TEXT    NOT NULL PRIMARY KEY,
    owner_user_id INTEGER NOT NULL,
    host_user_id  INTEGER NOT NULL,
    seat_count    INTEGER NOT NULL,
    mode          TEXT    NOT NULL DEFAULT '',
    status        TEXT    NOT NULL DEFAULT '',
    room_version  INTEGER NOT NULL DEFAULT 0,
    owner_epoch   INTEGER NOT NULL DEFAULT 0,
    owner_node    TEXT    NOT NULL DEFAULT '',
    created_at    INTEGER NOT NULL,
    updated_at    INTEGER NOT NULL
) WITHOUT ROWID;

-- The command log. The primary key keeps one room's log contiguous, so
-- replay is a range scan; the unique key is the idempotency key.
CREATE TABLE room_command_log (
    room_id      TEXT    NOT NULL,
    room_version INTEGER NOT NULL,
    command_id   TEXT    NOT NULL,
    command_type TEXT    NOT NULL,
    payload      BLOB,
    replayable   INTEGER NOT NULL,
    created_at   INTEGER NOT NULL,
    PRIMARY KEY (room_id, room_version),
    UNIQUE (room_id, command_id)
);

CREATE TABLE room_snapshots (
    room_id      TEXT    NOT NULL PRIMARY KEY,
    room_version INTEGER NOT NULL,
    payload      BLOB,
    created_at   INTEGER NOT NULL
);

CREATE TABLE room_outbox (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    event_id        TEXT    NOT NULL UNIQUE,
    room_id         TEXT    NOT NULL,
    room_version    INTEGER NOT NULL,
    seq             INTEGER NOT NULL,
    event_type      TEXT    NOT NULL,
    payload         BLOB,
    owner_epoch     INTEGER NOT NULL,
    status          TEXT    NOT NULL,
    attempts        INTEGER NOT NULL DEFAULT 0,
    last_error      TEXT    NOT NULL DEFAULT '',
    next_attempt_at INTEGER NOT NULL,
    created_at      INTEGER NOT NULL,
    published_at    INTEGER
);

-- The relay scans pending rows in id order. A partial index holds only the
-- pending rows, so the scan stays small however much history is kept.
CREATE INDEX room_outbox_pending ON room_outbox (id, next_attempt_at) WHERE status = 'pending';

CREATE INDEX room_outbox_room ON room_outbox (room_id, room_version, seq);
