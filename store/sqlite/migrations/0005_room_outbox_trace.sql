-- The trace context (W3C traceparent) of the command that wrote the row,
-- NULL when the command was not traced: the relay publishes the row within
-- that trace and passes it on in the message headers.
ALTER TABLE room_outbox ADD COLUMN trace_context TEXT;
