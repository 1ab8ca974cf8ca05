-- A record's wire form is written once, when the row is written, instead of at every sync page
-- that reads it (docs/benchmarks.md, "Sync pages copy the wire form written with the row"). Two
-- stored generated columns of `records`, which PostgreSQL keeps in step with every insert and
-- update:
--
-- * `fields_bytes`: the length of the fields as stored (`octet_length(fields::text)`), the size a
--   page's byte budget and the storage totals count;
-- * `wire_head`: the record as CloudKit's record dictionary (members in sorted order, a stamp
--   without a device naming the Web Services' one, `_stratus`, as `RecordStamp.webServiceDeviceID`
--   does) up to and including `recordType`. What follows it — `share` and `zoneID`, which hold the
--   zone id dictionary of the answer, and `shortGUID` between them — a page appends
--   (`SyncStore`, `appendInterpolation(wireOf:)`). A page copies it only for a record without an
--   asset field (no `"type": "ASSETID` in it), whose download link is signed per answer by the API.
--
-- Adding them rewrites `records` in this migration's transaction (about 25 s a million records on
-- two cores): reads and writes of records wait for it.

-- The JSON string of a text, as to_json writes it. to_json is STABLE for any type; for text it only
-- escapes, which never changes. PL/pgSQL: a SQL function whose body is less immutable than its
-- declaration is not inlined, and ran the executor at every call (twice the time of to_json).
CREATE FUNCTION json_string(value text) RETURNS text
    LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
    AS $$ BEGIN RETURN to_json(value)::text; END $$;

ALTER TABLE records
    ADD COLUMN fields_bytes int8 GENERATED ALWAYS AS (octet_length(fields::text)) STORED,
    ADD COLUMN wire_head text GENERATED ALWAYS AS (
        '{"created":{"deviceID":' || coalesce(json_string(created_device), '"_stratus"')
        || ',"timestamp":' || created_at::text || ',"userRecordName":' || json_string(created_by)
        || '},"deleted":false,' || coalesce('"expirationDate":' || expires_at::text || ',', '')
        || '"fields":' || fields::text
        || ',"modified":{"deviceID":' || coalesce(json_string(modified_device), '"_stratus"')
        || ',"timestamp":' || modified_at::text || ',"userRecordName":' || json_string(modified_by) || '},'
        || coalesce('"parent":{"recordName":' || json_string(parent) || '},', '')
        || '"recordChangeTag":' || json_string(change_tag) || ',"recordName":' || json_string(record_name)
        || ',"recordType":' || json_string(record_type) || ','
    ) STORED;
