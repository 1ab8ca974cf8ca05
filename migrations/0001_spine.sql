-- The spine: tenancy, custom zones, the event log (outbox) and worker bookkeeping.
-- Every table leads with the owning database's columns so it can later be partitioned by them.

CREATE TABLE containers (
    container               text PRIMARY KEY,
    allow_anonymous_public  boolean NOT NULL DEFAULT false,
    created_at              timestamptz NOT NULL DEFAULT now()
);

-- API tokens identify a container's web app; only their SHA-256 digest is stored.
CREATE TABLE api_tokens (
    token_digest  bytea PRIMARY KEY,
    container     text NOT NULL REFERENCES containers (container) ON DELETE CASCADE,
    label         text NOT NULL DEFAULT '',
    created_at    timestamptz NOT NULL DEFAULT now()
);

-- One row per zone name for ever: a deleted zone keeps its row (deleted = true) so its change
-- counter keeps counting across incarnations and its events stay consecutive per zone key.
CREATE TABLE zones (
    container       text NOT NULL,
    environment     text NOT NULL,
    scope           text NOT NULL,
    owner           text NOT NULL,
    zone_name       text NOT NULL,
    incarnation     uuid NOT NULL,
    change_counter  bigint NOT NULL,
    deleted         boolean NOT NULL DEFAULT false,
    created_at      timestamptz NOT NULL DEFAULT now(),
    modified_at     timestamptz NOT NULL DEFAULT now(),
    zone_key        text GENERATED ALWAYS AS (container || '/' || environment || '/' || scope || '/' || owner || '/' || zone_name) STORED,
    PRIMARY KEY (container, environment, scope, owner, zone_name)
);
CREATE UNIQUE INDEX zones_zone_key ON zones (zone_key);

-- The event log and outbox: immutable events appended in the same transaction as the state they
-- describe. The relay publishes rows whose published_at is null, in id order.
CREATE TABLE events (
    id              bigserial PRIMARY KEY,
    zone_key        text NOT NULL,
    zone_sequence   bigint,
    type            text NOT NULL,
    schema_version  integer NOT NULL,
    payload         jsonb NOT NULL,
    causation       jsonb NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    published_at    timestamptz
);
CREATE INDEX events_unpublished ON events (id) WHERE published_at IS NULL;
CREATE UNIQUE INDEX events_zone_sequence ON events (zone_key, zone_sequence) WHERE zone_sequence IS NOT NULL;

-- The high watermark of each partition of the topics the relay owns, as last seen: a partition
-- whose watermark goes down means the broker came back empty, and the relay publishes the event
-- log again.
CREATE TABLE relay_topics (
    topic       text PRIMARY KEY,
    watermarks  jsonb NOT NULL DEFAULT '{}',
    updated_at  timestamptz NOT NULL DEFAULT now()
);

-- Per worker and zone, the last applied zone sequence, written in the same transaction as the
-- worker's effects: redelivered events are recognised and skipped.
CREATE TABLE worker_checkpoints (
    worker         text NOT NULL,
    zone_key       text NOT NULL,
    last_sequence  bigint NOT NULL,
    last_event_id  bigint NOT NULL,
    updated_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (worker, zone_key)
);

-- The indexer's view of the zones that exist (the query index's zone directory). Rebuilt by replay.
CREATE TABLE index_zones (
    zone_key       text PRIMARY KEY,
    container      text NOT NULL,
    environment    text NOT NULL,
    scope          text NOT NULL,
    owner          text NOT NULL,
    zone_name      text NOT NULL,
    incarnation    uuid NOT NULL,
    last_event_id  bigint NOT NULL
);

-- Messages a worker could not decode or apply, set aside so the stream keeps moving.
CREATE TABLE worker_dead_letters (
    id           bigserial PRIMARY KEY,
    worker       text NOT NULL,
    topic        text NOT NULL,
    partition    integer NOT NULL,
    "offset"     bigint NOT NULL,
    value        bytea NOT NULL,
    reason       text NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now()
);
