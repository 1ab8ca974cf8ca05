-- Assets (docs/assets.md). `assets` is written by stratus-api: a row when an upload starts
-- (state uploading), completed when the bytes are stored (uploaded), marked collecting by stratus-gc
-- just before it deletes the bytes. `bound` is set by stratus-gc's projection once any record event
-- referenced the asset (reset on replay).
CREATE TABLE assets (
    asset_id       uuid PRIMARY KEY,
    container      text NOT NULL,
    environment    text NOT NULL,
    scope          text NOT NULL,
    owner          text NOT NULL,
    zone_name      text NOT NULL,
    record_name    text NOT NULL,
    record_type    text NOT NULL,
    field_name     text NOT NULL,
    state          text NOT NULL CHECK (state IN ('uploading', 'uploaded', 'collecting')),
    size           bigint,
    file_checksum  text,
    created_at     timestamptz NOT NULL DEFAULT now(),
    bound          boolean NOT NULL DEFAULT false
);
-- The uploads never bound: the only assets the collector looks at by age.
CREATE INDEX assets_unbound ON assets (created_at) WHERE NOT bound;

-- stratus-gc's projection: for each asset a record event named, whether the record (as of the
-- latest event) still holds it and since when that is so. An asset belongs to one record field,
-- so a count is 0 or 1.
CREATE TABLE asset_references (
    asset_id     uuid PRIMARY KEY,
    zone_key     text NOT NULL,
    record_name  text NOT NULL,
    referenced   boolean NOT NULL,
    changed_at   timestamptz NOT NULL
);
CREATE INDEX asset_references_record ON asset_references (zone_key, record_name) WHERE referenced;
CREATE INDEX asset_references_released ON asset_references (changed_at) WHERE NOT referenced;
