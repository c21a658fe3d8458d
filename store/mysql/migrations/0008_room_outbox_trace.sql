-- The trace context (W3C traceparent) of the command that wrote the row,
-- NULL when the command was not traced: the relay publishes the row within
-- that trace and passes it on in the message headers. Run again after a
-- crash that left it unrecorded, it fails with a duplicate column name,
-- which migrate takes as applied.
ALTER TABLE room_outbox ADD COLUMN trace_context VARBINARY(64) NULL
