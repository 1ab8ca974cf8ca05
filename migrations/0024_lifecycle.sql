-- A zone's default time to live (a Stratus extension, docs/ttl.md): seconds a record created in
-- the zone without its own expiration is given to live; NULL: records created there never expire
-- unless they say so. Set through zones/modify, changed with a zone.updated event.
ALTER TABLE zones ADD COLUMN default_time_to_live bigint
    CHECK (default_time_to_live IS NULL OR default_time_to_live > 0);
