-- Records: the current state of every record, and the references between records that have an
-- action (DELETE_SELF cascades, VALIDATE guards), so deletes can find who points at a record.

CREATE TABLE records (
    container        text NOT NULL,
    environment      text NOT NULL,
    scope            text NOT NULL,
    owner            text NOT NULL,
    zone_name        text NOT NULL,
    record_name      text NOT NULL,
    record_type      text NOT NULL,
    fields           jsonb NOT NULL,
    change_tag       text NOT NULL,
    created_at       bigint NOT NULL,
    created_by       text NOT NULL,
    created_device   text,
    modified_at      bigint NOT NULL,
    modified_by      text NOT NULL,
    modified_device  text,
    parent           text,
    share            text,
    short_guid       text,
    version          bigint,
    created_version  bigint,
    PRIMARY KEY (container, environment, scope, owner, zone_name, record_name)
);
CREATE UNIQUE INDEX records_short_guid ON records (short_guid) WHERE short_guid IS NOT NULL;

CREATE TABLE record_references (
    container    text NOT NULL,
    environment  text NOT NULL,
    scope        text NOT NULL,
    owner        text NOT NULL,
    zone_name    text NOT NULL,
    record_name  text NOT NULL,
    target       text NOT NULL,
    action       text NOT NULL,
    PRIMARY KEY (container, environment, scope, owner, zone_name, record_name, target, action)
);
CREATE INDEX record_references_target ON record_references (container, environment, scope, owner, zone_name, target);
