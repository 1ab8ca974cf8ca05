-- A zone's default time to live (a Stratus extension, docs/ttl.md): seconds a record created in
-- the zone without its own expiration is given to live; NULL: records created there never expire
-- unless they say so. Set through zones/modify, changed with a zone.updated event.
ALTER TABLE zones ADD COLUMN default_time_to_live bigint
    CHECK (default_time_to_live IS NULL OR default_time_to_live > 0);

-- assets/rereference (docs/assets.md): an asset made from another shares its bytes; blob_id names
-- the asset under whose id the bytes are stored (NULL: its own). Such an asset starts assigned to
-- no record field (zone_name, record_name and field_name empty) until a write binds it.
ALTER TABLE assets ADD COLUMN blob_id uuid;
-- The collector asks, for the asset it collects, whether another asset still holds its bytes.
CREATE INDEX assets_blob ON assets (blob_id) WHERE blob_id IS NOT NULL;

-- Asset bytes count toward the per-user storage quota (README, Configuration): usage_owner is the
-- user an asset's bytes count against — the private database's owner, in the public database the
-- uploader — from the moment the upload is stored until the last asset holding the bytes is
-- collected. An asset made by assets/rereference carries its source's (the bytes are counted once).
ALTER TABLE assets ADD COLUMN usage_owner text;
-- Assets stored before this migration count from now on, against their database's owner.
UPDATE assets SET usage_owner = owner WHERE state IN ('uploaded', 'collecting') AND size IS NOT NULL;
INSERT INTO storage_usage (container, environment, owner, shard, bytes)
SELECT container, environment, usage_owner, 0, sum(size) FROM assets WHERE usage_owner IS NOT NULL
GROUP BY 1, 2, 3
ON CONFLICT (container, environment, owner, shard) DO UPDATE SET bytes = storage_usage.bytes + EXCLUDED.bytes;
