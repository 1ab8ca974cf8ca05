-- Subscriptions and notifications (docs/subscriptions.md).
--
-- A subscription belongs to a database (the four leading columns) and to the user who made it
-- (`subscriber`: the owner in a private database, any signed-in user in the public one). The API
-- writes them; stratus-subscriptions reads the candidates of each event's database by record type
-- and zone, and deletes a `firesOnce` subscription in the transaction that logs its notification.
CREATE TABLE subscriptions (
    container          text NOT NULL,
    environment        text NOT NULL,
    scope              text NOT NULL,
    owner              text NOT NULL,
    subscriber         text NOT NULL,
    subscription_id    text NOT NULL,
    subscription_type  text NOT NULL,
    -- The watched zone; null: every zone of the database (zoneWide query and database subscriptions).
    zone_name          text,
    -- The record type of a query subscription; null for the others.
    record_type        text,
    -- The subscription dictionary as stored (what subscriptions/lookup answers).
    definition         jsonb NOT NULL,
    -- Milliseconds since 1970 of the save (transaction time): events appended before it never fire it.
    created_at         bigint NOT NULL,
    PRIMARY KEY (container, environment, scope, owner, subscriber, subscription_id)
);
CREATE INDEX subscriptions_by_target ON subscriptions (container, environment, scope, owner, record_type, zone_name);

-- The per-user notification log. `position` counts each subscriber's notifications without gaps and
-- in commit order (the worker takes the subscriber's row in notification_positions to append), so a
-- reader that has seen position p has seen everything before it. The unique key makes logging
-- idempotent: redelivery and replay find the notification already there.
CREATE TABLE notifications (
    container          text NOT NULL,
    environment        text NOT NULL,
    subscriber          text NOT NULL,
    position           bigint NOT NULL,
    notification_id    uuid NOT NULL,
    scope              text NOT NULL,
    owner              text NOT NULL,
    subscription_id    text NOT NULL,
    dedupe_key         text NOT NULL,
    event_id           bigint NOT NULL,
    notification_type  text NOT NULL,
    reason             text,
    zone_name          text NOT NULL,
    zone_owner         text NOT NULL,
    record_name        text,
    collapse_id        text,
    payload            jsonb NOT NULL,
    is_read            boolean NOT NULL DEFAULT false,
    created_at         timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (container, environment, subscriber, position),
    UNIQUE (container, environment, subscriber, scope, owner, subscription_id, dedupe_key)
);
CREATE UNIQUE INDEX notifications_id ON notifications (notification_id);

CREATE TABLE notification_positions (
    container      text NOT NULL,
    environment    text NOT NULL,
    subscriber      text NOT NULL,
    last_position  bigint NOT NULL,
    unread         bigint NOT NULL,
    PRIMARY KEY (container, environment, subscriber)
);

-- Web courier tokens (tokens/create): the token is a capability to read its user's notifications,
-- so only its SHA-256 digest is kept. `delivered` is the last position handed to the courier.
CREATE TABLE courier_tokens (
    token_digest      bytea PRIMARY KEY,
    container         text NOT NULL,
    environment       text NOT NULL,
    subscriber         text NOT NULL,
    apns_environment  text NOT NULL,
    delivered         bigint NOT NULL,
    created_at        timestamptz NOT NULL DEFAULT now(),
    last_seen_at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX courier_tokens_subscriber ON courier_tokens (container, environment, subscriber);

-- Device tokens registered for APNs (tokens/register): a device belongs to the user who registered it last.
CREATE TABLE device_tokens (
    container         text NOT NULL,
    environment       text NOT NULL,
    apns_environment  text NOT NULL,
    device_token      text NOT NULL,
    subscriber         text NOT NULL,
    created_at        timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (container, environment, apns_environment, device_token)
);
CREATE INDEX device_tokens_subscriber ON device_tokens (container, environment, subscriber);

-- Webhook endpoints an operator registered for a container (`stratus webhook create`).
CREATE TABLE webhooks (
    webhook_id  uuid PRIMARY KEY,
    container   text NOT NULL,
    url         text NOT NULL,
    secret      bytea NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX webhooks_container ON webhooks (container);

-- A container's APNs provider key (`stratus apns set`): token-based authentication.
CREATE TABLE apns_credentials (
    container    text PRIMARY KEY,
    team_id      text NOT NULL,
    key_id       text NOT NULL,
    private_key  text NOT NULL,
    topic        text NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now()
);

-- One row per notification and push target, written with the notification; the dispatcher of
-- stratus-subscriptions sends the due ones, retries with backoff and gives up after a number of
-- attempts (`dead`). `target` is the webhook id or the device token.
CREATE TABLE notification_deliveries (
    delivery_id      bigserial PRIMARY KEY,
    notification_id  uuid NOT NULL,
    channel          text NOT NULL,
    target           text NOT NULL,
    state            text NOT NULL DEFAULT 'pending',
    attempts         integer NOT NULL DEFAULT 0,
    next_attempt_at  timestamptz NOT NULL DEFAULT now(),
    last_error       text,
    delivered_at     timestamptz,
    UNIQUE (notification_id, channel, target)
);
CREATE INDEX notification_deliveries_due ON notification_deliveries (next_attempt_at) WHERE state = 'pending';
