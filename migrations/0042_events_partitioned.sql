-- The event log bounded (docs/event-pipeline.md, "Retention"): `events` becomes a table partitioned
-- by ranges of its id, so that stratus-gc (and `stratus events prune`) removes the events every
-- reader has passed by dropping whole partitions, never row by row. The table keeps its name, its
-- columns and their meaning, its id sequence and its indexes.
--
-- On a database with data, the existing table becomes the first partition as it is (its rows are
-- not copied; attaching it reads it once to check its range), covering every id drawn so far (an
-- empty one is dropped instead); a default partition holds any id no range partition does. stratus-gc's first retention pass (at
-- its start, and `stratus events prune`) creates the partitions ahead, of the configured size
-- (`STRATUS_EVENT_PARTITION_EVENTS`), and keeps creating them as the log grows.
--
-- A zone's sequences stay unique in each partition (a unique index per partition: PostgreSQL
-- allows a unique index of a partitioned table only on columns that include the partition key).
-- Across partitions they are unique as before because each is the zone's change counter's next
-- value, drawn under the zone's lock by the transaction that appends the event.

ALTER TABLE events RENAME TO events_0;
-- A partition's indexes are named after the log's and the partition's first id (`events_pkey_0`).
ALTER INDEX events_pkey RENAME TO events_pkey_0;
ALTER INDEX events_zone_id RENAME TO events_zone_id_0;
ALTER INDEX events_publish_errors RENAME TO events_publish_errors_0;
ALTER INDEX events_zone_sequence RENAME TO events_zone_sequence_0;
ALTER SEQUENCE events_id_seq OWNED BY NONE;

-- The same columns, with their defaults (the id from the same sequence) and NOT NULLs.
CREATE TABLE events (LIKE events_0 INCLUDING DEFAULTS) PARTITION BY RANGE (id);
ALTER TABLE events ADD PRIMARY KEY (id);
ALTER SEQUENCE events_id_seq OWNED BY events.id;
CREATE INDEX events_zone_id ON events (zone_key, id);
CREATE INDEX events_publish_errors ON events (id) WHERE publish_error IS NOT NULL;

-- Creates the partition of the ids lower..<upper with its indexes, named as above, and attaches it.
-- stratus-gc's retention pass creates the partitions ahead with it.
CREATE FUNCTION event_log_partition(lower bigint, upper bigint) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    suffix text := lower::text;
BEGIN
    EXECUTE format('CREATE TABLE %I (LIKE events INCLUDING DEFAULTS, CONSTRAINT %I PRIMARY KEY (id))', 'events_' || suffix, 'events_pkey_' || suffix);
    EXECUTE format('CREATE INDEX %I ON %I (zone_key, id)', 'events_zone_id_' || suffix, 'events_' || suffix);
    EXECUTE format('CREATE INDEX %I ON %I (id) WHERE publish_error IS NOT NULL', 'events_publish_errors_' || suffix, 'events_' || suffix);
    EXECUTE format('CREATE UNIQUE INDEX %I ON %I (zone_key, zone_sequence) WHERE zone_sequence IS NOT NULL',
                   'events_zone_sequence_' || suffix, 'events_' || suffix);
    EXECUTE format('ALTER TABLE events ATTACH PARTITION %I FOR VALUES FROM (%s) TO (%s)', 'events_' || suffix, lower, upper);
END
$$;

-- The existing rows: every id drawn so far (the sequence's last value, or the highest id).
DO $$
DECLARE
    bound bigint;
BEGIN
    SELECT greatest(coalesce((SELECT max(id) FROM events_0), 0),
                    (SELECT CASE WHEN is_called THEN last_value ELSE last_value - 1 END FROM events_id_seq)) + 1
    INTO bound;
    IF EXISTS (SELECT 1 FROM events_0) THEN
        EXECUTE format('ALTER TABLE events ATTACH PARTITION events_0 FOR VALUES FROM (MINVALUE) TO (%s)', bound);
    ELSE
        -- A new database: no rows to keep, and no empty partition for every lookup to visit.
        DROP TABLE events_0;
    END IF;
END
$$;

CREATE TABLE events_default (LIKE events INCLUDING DEFAULTS, CONSTRAINT events_pkey_default PRIMARY KEY (id));
CREATE INDEX events_zone_id_default ON events_default (zone_key, id);
CREATE INDEX events_publish_errors_default ON events_default (id) WHERE publish_error IS NOT NULL;
CREATE UNIQUE INDEX events_zone_sequence_default ON events_default (zone_key, zone_sequence) WHERE zone_sequence IS NOT NULL;
ALTER TABLE events ATTACH PARTITION events_default DEFAULT;

-- How far the log has been pruned: every event with an id below `pruned_below` is gone (0: none).
-- A rebuild reads it to know whether the log still holds its beginning, or must start from a
-- snapshot of the current tables.
CREATE TABLE event_log_retention (
    singleton     boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    pruned_below  bigint NOT NULL DEFAULT 0,
    pruned_at     timestamptz
);
INSERT INTO event_log_retention DEFAULT VALUES;
