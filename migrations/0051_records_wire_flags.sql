-- What a sync page written by PostgreSQL asks of each record's wire form (`SyncStore`,
-- `appendInterpolation(pageOf:)` and `(wireOf:)`), answered once when the row is written instead of
-- by a search of `wire_head` for every record of every page: two stored generated columns of
-- `records`, which PostgreSQL keeps in step with every insert and update of `fields`.
--
-- * `holds_asset`: a field holds an asset (`"type": "ASSETID` in the fields as stored). Such a
--   record's download links are signed per answer by the API, so the general page answers it.
-- * `holds_reference`: a field holds a reference (`{"action": ` in the fields as stored: the
--   reference dictionary, whose shortest member `action` jsonb writes first). Only then does a
--   page give each reference its zone (`StoredReferenceZone`); other records are copied as stored.
--
-- The two searches took about a sixth of a 200-record page's statement (docs/benchmarks.md, "Sync
-- pages: the record's flags written with it, the entries joined without sorting"). Either text
-- stands only in the fields' own members: in any string value its quotes are escaped.
--
-- Adding them rewrites `records` in this migration's transaction (as 0031 did; about 25 s a million
-- records on two cores): reads and writes of records wait for it.
ALTER TABLE records
    ADD COLUMN holds_asset boolean GENERATED ALWAYS AS (strpos(fields::text, '"type": "ASSETID') > 0) STORED,
    ADD COLUMN holds_reference boolean GENERATED ALWAYS AS (strpos(fields::text, '{"action": ') > 0) STORED;
