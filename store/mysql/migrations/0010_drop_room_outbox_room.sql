-- room_outbox_room (room_id, room_version, seq) served no query: the relay
-- reads a room's pending rows through room_outbox_room_pending and marks
-- them by event id; every outbox row paid for it with one more index entry.
-- Dropping an index is in place and takes no table lock. Run again after a
-- crash that left it unrecorded, it fails because the index is gone, which
-- migrate takes as applied.
ALTER TABLE room_outbox DROP INDEX room_outbox_room, ALGORITHM=INPLACE, LOCK=NONE
