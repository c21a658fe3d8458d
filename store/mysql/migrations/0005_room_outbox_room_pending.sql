-- The relay reads one room's pending rows in (room_version, seq) order. With
-- status right after room_id the read never walks the room's published
-- history, which is kept until retention deletes it. The index is built in
-- place while writes go on. Run again after a crash that left it unrecorded,
-- it fails with a duplicate key name, which migrate takes as applied.
ALTER TABLE room_outbox
    ADD KEY room_outbox_room_pending (room_id, status, room_version, seq),
    ALGORITHM=INPLACE, LOCK=NONE
