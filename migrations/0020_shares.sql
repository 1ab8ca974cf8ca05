-- Sharing: every share record (`cloudkit.share`) of an owner's custom zone has a row here, written
-- in the same transaction as the record, and one row per participant. The API decides access to the
-- shared database from these rows in the request's own transaction, so a participant the owner
-- removes loses access with the owner's save.
CREATE TABLE shares (
    container         text   NOT NULL,
    environment       text   NOT NULL,
    scope             text   NOT NULL,
    owner             text   NOT NULL,
    zone_name         text   NOT NULL,
    -- The share record's name; `cloudkit.zoneshare` for a zone-wide share.
    record_name       text   NOT NULL,
    -- The root record of a hierarchy share (NULL for a zone-wide share): the root and every record
    -- whose `parent` chain reaches it are shared.
    root_record_name  text,
    -- Server-generated, the share URL's last segment; resolves and accepts the share.
    short_guid        text   NOT NULL,
    public_permission text   NOT NULL CHECK (public_permission IN ('NONE', 'READ_ONLY', 'READ_WRITE')),
    PRIMARY KEY (container, environment, scope, owner, zone_name, record_name)
);

-- records/resolve and records/accept find a share by its short GUID within a container's environment.
CREATE UNIQUE INDEX shares_short_guid ON shares (container, environment, short_guid);

CREATE TABLE share_participants (
    container         text   NOT NULL,
    environment       text   NOT NULL,
    scope             text   NOT NULL,
    owner             text   NOT NULL,
    zone_name         text   NOT NULL,
    share_name        text   NOT NULL,
    -- The participant's place in the share's list (the owner is 0).
    position          int    NOT NULL,
    -- How the owner named the participant: `u:<userRecordName>` or `e:<lowercased email>`.
    lookup_key        text   NOT NULL,
    email             text,
    -- The user: known for a participant named by user record name, or once someone accepted.
    user_record_name  text,
    permission        text   NOT NULL CHECK (permission IN ('NONE', 'READ_ONLY', 'READ_WRITE')),
    acceptance_status text   NOT NULL CHECK (acceptance_status IN ('PENDING', 'ACCEPTED', 'REMOVED')),
    type              text   NOT NULL CHECK (type IN ('OWNER', 'USER', 'PUBLIC_USER')),
    PRIMARY KEY (container, environment, scope, owner, zone_name, share_name, lookup_key),
    FOREIGN KEY (container, environment, scope, owner, zone_name, share_name)
        REFERENCES shares (container, environment, scope, owner, zone_name, record_name) ON DELETE CASCADE
);

-- The shared database of a user: the shares they accepted, by container and environment.
CREATE INDEX share_participants_user ON share_participants (container, environment, user_record_name)
    WHERE acceptance_status = 'ACCEPTED';
