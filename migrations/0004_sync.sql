-- Sync: the records table is the sync index (each record's latest version); deletes leave
-- tombstones that remember when the record was created, and each zone records the horizon below
-- which its tombstones have been collected (tokens older than it must reset).

CREATE INDEX records_zone_version ON records (container, environment, scope, owner, zone_name, version);

CREATE TABLE record_tombstones (
    container        text NOT NULL,
    environment      text NOT NULL,
    scope            text NOT NULL,
    owner            text NOT NULL,
    zone_name        text NOT NULL,
    record_name      text NOT NULL,
    record_type      text NOT NULL,
    created_version  bigint,
    deleted_version  bigint NOT NULL,
    deleted_at       timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (container, environment, scope, owner, zone_name, record_name)
);
CREATE INDEX record_tombstones_zone_version ON record_tombstones (container, environment, scope, owner, zone_name, deleted_version);

ALTER TABLE zones ADD COLUMN tombstone_horizon bigint NOT NULL DEFAULT 0;
