-- The zones' version indexes (migration 0004) become partial to rows with a version. Every statement
-- that reads by version bounds it (`version > …`, `deleted_version > …`), which proves the predicate,
-- so sync reads them as before. A statement that names one record by its primary key can then read
-- nothing but the primary key: before, a generic plan of `… AND record_name = $6` made on a table
-- too young to have statistics costed the zone's version index (five of its columns matched, the
-- name filtered) the same as the primary key and took it, which would read the whole zone for one
-- record. With that choice gone, a one-record write or lookup runs prepared (docs/benchmarks.md,
-- "One record's statements prepared"). The indexes are rebuilt inside this migration's transaction:
-- writes to the two tables wait for the build.
CREATE INDEX records_zone_version_partial ON records (container, environment, scope, owner, zone_name, version)
    WHERE version IS NOT NULL;
DROP INDEX records_zone_version;
ALTER INDEX records_zone_version_partial RENAME TO records_zone_version;
CREATE INDEX record_tombstones_zone_version_partial ON record_tombstones (container, environment, scope, owner, zone_name, deleted_version)
    WHERE deleted_version IS NOT NULL;
DROP INDEX record_tombstones_zone_version;
ALTER INDEX record_tombstones_zone_version_partial RENAME TO record_tombstones_zone_version;
