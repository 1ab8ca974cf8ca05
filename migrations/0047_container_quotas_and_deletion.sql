-- Containers as tenants, part two: container-wide quotas and deleting a container.
--
-- A container's own quotas over all its users, databases and environments (`stratus container set`,
-- the console): records, custom zones, stored bytes (records and assets, as the per-user quota counts
-- them) and asset bytes. NULL (or 0): no container-wide limit. A change notifies `stratus_access`,
-- so every API process applies it from its next request, as with migration 0040's limits.
ALTER TABLE containers
    ADD COLUMN max_records bigint CHECK (max_records >= 0),
    ADD COLUMN max_zones bigint CHECK (max_zones >= 0),
    ADD COLUMN quota_bytes bigint CHECK (quota_bytes >= 0),
    ADD COLUMN asset_quota_bytes bigint CHECK (asset_quota_bytes >= 0);

CREATE TRIGGER containers_quotas_change
    AFTER UPDATE OF max_records, max_zones, quota_bytes, asset_quota_bytes ON containers
    FOR EACH ROW WHEN ((OLD.max_records, OLD.max_zones, OLD.quota_bytes, OLD.asset_quota_bytes)
                       IS DISTINCT FROM (NEW.max_records, NEW.max_zones, NEW.quota_bytes, NEW.asset_quota_bytes))
    EXECUTE FUNCTION notify_access_change();

-- What a container holds, kept by the writes themselves in their own transactions (docs/decisions.md,
-- "Container-wide usage"): each transaction adds what it changed to the row of its usage shard (the
-- one its `storage_usage` rows use, offset by its process's slot), so writers in flight together
-- seldom touch one row. The totals are the sums of the container's rows (at most 512); a row alone
-- may be negative. `container show`, the console and the quota checks read the same sums.
CREATE TABLE container_usage (
    container    text NOT NULL,
    shard        smallint NOT NULL,
    records      bigint NOT NULL DEFAULT 0,
    zones        bigint NOT NULL DEFAULT 0,
    bytes        bigint NOT NULL DEFAULT 0,
    asset_bytes  bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (container, shard)
);

-- What containers held before this migration, in shard 0. Stop every stratus-api of the previous
-- release first: its writes would not be counted.
INSERT INTO container_usage (container, shard, records, zones, bytes, asset_bytes)
SELECT c.container, 0,
       (SELECT count(*) FROM records AS r WHERE r.container = c.container),
       (SELECT count(*) FROM zones AS z WHERE z.container = c.container AND NOT z.deleted),
       (SELECT coalesce(sum(s.bytes), 0) FROM storage_usage AS s WHERE s.container = c.container),
       -- Bytes shared by re-referenced assets count once, as storage_usage counts them.
       (SELECT coalesce(sum(b.size), 0) FROM (
            SELECT DISTINCT ON (coalesce(a.blob_id, a.asset_id)) a.size FROM assets AS a
            WHERE a.container = c.container AND a.usage_owner IS NOT NULL AND a.size IS NOT NULL) AS b)
FROM containers AS c;

-- A container's deletion is a job (docs/operations.md, "Deleting a container"): from the moment it
-- starts (`deleting_at`, noticed by every API process through `stratus_access`) every request for
-- the container is refused; the job deletes each user through the user-deletion machinery, then
-- the rows no user owns, and last the container's row, so its name may be created again. The job's
-- row outlives the container (it says the deletion finished) until the name is created again.
ALTER TABLE containers ADD COLUMN deleting_at timestamptz;

CREATE TRIGGER containers_deletion_change AFTER UPDATE OF deleting_at ON containers
    FOR EACH ROW WHEN (OLD.deleting_at IS DISTINCT FROM NEW.deleting_at)
    EXECUTE FUNCTION notify_access_change();

CREATE TABLE container_deletions (
    container      text PRIMARY KEY,
    step           text NOT NULL,
    users_deleted  bigint NOT NULL DEFAULT 0,
    rows_deleted   bigint NOT NULL DEFAULT 0,
    assets_deleted bigint NOT NULL DEFAULT 0,
    requested_by   text NOT NULL,
    requested_at   timestamptz NOT NULL DEFAULT now(),
    updated_at     timestamptz NOT NULL DEFAULT now(),
    finished_at    timestamptz
);
