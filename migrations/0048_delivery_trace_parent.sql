-- The trace of the write that caused a notification (a W3C traceparent, or NULL when the write was
-- not traced): the dispatcher's delivery spans join that trace, however long after the apply the
-- notification is sent. Nullable, no default: adding it rewrites nothing.
ALTER TABLE notifications ADD COLUMN trace_parent text;
