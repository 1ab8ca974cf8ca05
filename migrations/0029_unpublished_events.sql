-- The relay's queue: the id of every event not yet published, inserted by the transaction that
-- appends the event and deleted once the broker has acknowledged it. It replaces the events'
-- `published_at` and its partial index: marking an event published rewrote the whole event row
-- (its payload included) and added entries to the log's other indexes, since a column in an index
-- predicate rules out a heap-only update, and left a dead row version for vacuum to find in a
-- table that grows for ever. The event log is now written once and never changed (but for the
-- rare `publish_error` of an event the broker refused for good).
--
-- Stop every stratus-api of the previous release first: its writes would append events without
-- queueing them (the relay would never send them), and its relay reads the column dropped here.
CREATE TABLE unpublished_events (
    id  bigint PRIMARY KEY
);

INSERT INTO unpublished_events (id) SELECT id FROM events WHERE published_at IS NULL;

DROP INDEX events_unpublished;
ALTER TABLE events DROP COLUMN published_at;
