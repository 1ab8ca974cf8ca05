-- Records that expire (a Stratus extension, CloudKit's TTL for ephemeral records): each record's
-- expiration, which every reader compares with the clock, and stratus-gc's expiry index, which it
-- keeps from the zone events to find what is due without reading the records.

ALTER TABLE records ADD COLUMN expires_at bigint;

CREATE TABLE record_expirations (
    container    text NOT NULL,
    environment  text NOT NULL,
    scope        text NOT NULL,
    owner        text NOT NULL,
    zone_name    text NOT NULL,
    record_name  text NOT NULL,
    expires_at   bigint NOT NULL,
    PRIMARY KEY (container, environment, scope, owner, zone_name, record_name)
);
CREATE INDEX record_expirations_due ON record_expirations (expires_at);
-- A zone's due records, earliest first: the collector deletes them a batch per transaction.
CREATE INDEX record_expirations_zone_due ON record_expirations (container, environment, scope, owner, zone_name, expires_at);
