-- The relay reads one room's pending rows in (room_version, seq) order. A
-- partial index holds only the pending rows, so the read never walks the
-- room's published history, which is kept until retention deletes it.
CREATE INDEX room_outbox_room_pending ON room_outbox (room_id, room_version, seq) WHERE status = 'pending';

-- Operators count dead rows by event type and requeue them by type. Dead
-- rows are few, so the index costs little and spares a scan of the table.
CREATE INDEX room_outbox_dead ON room_outbox (event_type) WHERE status = 'dead';
