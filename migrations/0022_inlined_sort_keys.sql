-- The query index's sort keys (query_index.key, migration 0005) as expressions PostgreSQL inlines.
-- to_jsonb is only STABLE (it formats dates by the session's settings), so an IMMUTABLE SQL function
-- around it was never inlined: every row written to the index ran the function's SQL once per key of
-- every ordered index (the indexer's busiest statement in the benchmark's profile), and every
-- query's ORDER BY once per row. These bodies give the same jsonb values from IMMUTABLE built-ins, so
-- the planner now expands query_index.key(x) in index definitions and queries alike, and the
-- indexes built before stay valid.
CREATE OR REPLACE FUNCTION query_index.key(bigint) RETURNS jsonb LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS 'SELECT ($1::text)::jsonb';
CREATE OR REPLACE FUNCTION query_index.key(text) RETURNS jsonb LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS 'SELECT jsonb_object(ARRAY[''k'', $1]) -> ''k''';
