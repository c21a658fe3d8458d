-- room_outbox_room (room_id, room_version, seq) served no query: the relay
-- reads a room's pending rows through room_outbox_room_pending and marks
-- them by event id. Every outbox row paid for it with one more index page
-- on the one writer, in its room's part of the index.
DROP INDEX IF EXISTS room_outbox_room;
