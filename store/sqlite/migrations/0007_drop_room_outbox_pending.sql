-- room_outbox_pending (id, next_attempt_at) served the scan of due rows in
-- id order, which only tests used, and the pending rows' count: the relay
-- finds rooms with work and their rows through room_outbox_room_pending,
-- which holds the same rows. Every outbox row paid for it twice on the one
-- writer: an entry when it was inserted and its removal when it was marked
-- published, a page apart for each row of a room's chain.
DROP INDEX IF EXISTS room_outbox_pending;
