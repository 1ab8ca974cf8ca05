-- The query index, maintained by stratus-indexer from record events (eventually consistent, like
-- CloudKit's). It lives in its own schema so it can move to its own database. Rows belong to a
-- generation: queries read the live one; a rebuild fills a new one from the event log and swaps.

CREATE SCHEMA query_index;

CREATE TABLE query_index.generations (
    generation  integer PRIMARY KEY,
    state       text NOT NULL CHECK (state IN ('live', 'building', 'retired')),
    created_at  timestamptz NOT NULL DEFAULT now()
);
INSERT INTO query_index.generations (generation, state) VALUES (1, 'live');

-- One row per record (deleted ones stay as markers, so a late, older event cannot resurrect them).
CREATE TABLE query_index.records (
    generation   integer NOT NULL,
    container    text NOT NULL,
    environment  text NOT NULL,
    scope        text NOT NULL,
    owner        text NOT NULL,
    zone_name    text NOT NULL,
    record_name  text NOT NULL,
    record_type  text NOT NULL,
    version      bigint NOT NULL,          -- the id of the event that wrote this row
    deleted      boolean NOT NULL DEFAULT false,
    created_at   bigint NOT NULL DEFAULT 0,
    modified_at  bigint NOT NULL DEFAULT 0,
    record       jsonb,                    -- the stored record (fields and system fields)
    search       tsvector,                 -- every STRING field, for the token comparators
    PRIMARY KEY (generation, container, environment, scope, owner, zone_name, record_name)
);
CREATE INDEX query_index_records_type ON query_index.records (generation, container, environment, scope, owner, record_type, zone_name) WHERE NOT deleted;
CREATE INDEX query_index_records_fields ON query_index.records USING gin ((record -> 'fields') jsonb_path_ops);
CREATE INDEX query_index_records_search ON query_index.records USING gin (search);
-- Sort keys are compared as jsonb (one rule for every kind of key); these wrappers let indexes hold them.
CREATE FUNCTION query_index.key(bigint) RETURNS jsonb LANGUAGE sql IMMUTABLE PARALLEL SAFE AS 'SELECT to_jsonb($1)';
CREATE FUNCTION query_index.key(text) RETURNS jsonb LANGUAGE sql IMMUTABLE PARALLEL SAFE AS 'SELECT to_jsonb($1)';

-- The common orders within a zone, in the exact form the query planner sees them (sort key, then
-- zone and record name breaking ties), so "newest first" and "oldest first" read the index in order.
CREATE INDEX query_index_records_modified ON query_index.records
    (generation, container, environment, scope, owner, record_type, zone_name, query_index.key(modified_at), query_index.key(zone_name), query_index.key(record_name))
    WHERE NOT deleted;
CREATE INDEX query_index_records_created ON query_index.records
    (generation, container, environment, scope, owner, record_type, zone_name, query_index.key(created_at), query_index.key(zone_name), query_index.key(record_name))
    WHERE NOT deleted;
