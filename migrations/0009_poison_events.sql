-- Poison events get a terminal, visible state instead of blocking the pipeline.
--
-- An event the broker refuses for good (a message it will never take) is marked published with the
-- broker's reason: the relay moves on, and workers still read it from this log when they fill the
-- gap it leaves in its zone.
ALTER TABLE events ADD COLUMN publish_error text;
CREATE INDEX events_publish_errors ON events (id) WHERE publish_error IS NOT NULL;

-- A worker's dead letter may come from the broker (topic, partition, offset) or from the event log
-- (a gap fill, a replay, a reindex): then it names the event and its zone instead. Either way the
-- worker's checkpoint moves past it, so the zone's later events are not held behind it.
ALTER TABLE worker_dead_letters
    ALTER COLUMN topic DROP NOT NULL,
    ALTER COLUMN partition DROP NOT NULL,
    ALTER COLUMN "offset" DROP NOT NULL,
    ADD COLUMN event_id bigint,
    ADD COLUMN zone_key text;
