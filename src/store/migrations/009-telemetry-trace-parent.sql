-- The W3C traceparent of the request that queued an operation (null when tracing is off):
-- the dispatcher's span continues the API's trace across the queue.
ALTER TABLE operations ADD COLUMN trace_parent text;
