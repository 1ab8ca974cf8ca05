-- The shared database's change tracking, kept by stratus-shares from the zone events: one row per
-- participant (a user who accepted) and share. `change_sequence` is the owner's zone sequence of the
-- last change the participant is told of (a change inside the shared zone, or of the share itself);
-- `active` is false once the participant lost the share (removed, left, share or zone deleted).
-- changes/database in a participant's shared database reads the zone's greatest change_sequence as
-- the zone's position; a row that is no longer active tells zones/changes and records/changes that
-- the caller held the zone once, so an old zone token gets CHANGE_TOKEN_EXPIRED, not ZONE_NOT_FOUND.
-- The access itself is never read from here: it is decided from `shares`/`share_participants` in
-- the request's transaction.
CREATE TABLE shared_zone_tracking (
    container         text    NOT NULL,
    environment       text    NOT NULL,
    -- The participant.
    user_record_name  text    NOT NULL,
    -- The owner's zone, by the five zone columns.
    scope             text    NOT NULL,
    owner             text    NOT NULL,
    zone_name         text    NOT NULL,
    share_name        text    NOT NULL,
    active            boolean NOT NULL,
    change_sequence   bigint  NOT NULL,
    PRIMARY KEY (container, environment, user_record_name, scope, owner, zone_name, share_name)
);

-- The fan-out: every participant row of a zone, moved by one statement per zone and batch.
CREATE INDEX shared_zone_tracking_zone ON shared_zone_tracking (container, environment, scope, owner, zone_name) WHERE active;
