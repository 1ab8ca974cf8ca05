-- Per-container limits (`stratus container set`, the console), shared by every API process:
-- NULL: the process's setting (STRATUS_RATE_*, STRATUS_USER_QUOTA_BYTES, the subscription limit);
-- 0: no limit for this container; more: the container's own. Requests per second are counted by
-- `request_buckets` below; the quotas by the tables that already count them (`storage_usage`,
-- `subscriptions`) in the writes' own transactions.
ALTER TABLE containers
    ADD COLUMN request_rate double precision CHECK (request_rate >= 0),
    ADD COLUMN request_burst double precision CHECK (request_burst >= 0),
    ADD COLUMN user_request_rate double precision CHECK (user_request_rate >= 0),
    ADD COLUMN user_request_burst double precision CHECK (user_request_burst >= 0),
    ADD COLUMN user_quota_bytes bigint CHECK (user_quota_bytes >= 0),
    ADD COLUMN max_subscriptions_per_user integer CHECK (max_subscriptions_per_user >= 0);

-- Each API process keeps a container's limits with the access it caches (migration 0026): a change
-- notifies `stratus_access`, so every process reads the new limits with its next request.
CREATE TRIGGER containers_limits_change
    AFTER UPDATE OF request_rate, request_burst, user_request_rate, user_request_burst, user_quota_bytes, max_subscriptions_per_user
    ON containers
    FOR EACH ROW WHEN ((OLD.request_rate, OLD.request_burst, OLD.user_request_rate, OLD.user_request_burst, OLD.user_quota_bytes,
                        OLD.max_subscriptions_per_user)
                       IS DISTINCT FROM
                       (NEW.request_rate, NEW.request_burst, NEW.user_request_rate, NEW.user_request_burst, NEW.user_quota_bytes,
                        NEW.max_subscriptions_per_user))
    EXECUTE FUNCTION notify_access_change();

-- One token bucket per container (`user_record_name` empty) and per user of a container, shared by
-- every API process. A process leases a slice of tokens at a time (`lease_request_tokens`, one
-- statement) and admits that many requests without asking again (docs/decisions.md, 12).
-- UNLOGGED: a bucket is worth nothing after a crash (it starts full again), and its updates write
-- no WAL.
CREATE UNLOGGED TABLE request_buckets (
    container         text NOT NULL,
    user_record_name  text NOT NULL,
    tokens            double precision NOT NULL,
    updated_at        timestamptz NOT NULL,
    PRIMARY KEY (container, user_record_name)
);

-- Takes up to `wanted` whole tokens from a bucket of `rate` tokens a second holding at most `burst`
-- (a missing bucket starts full). `granted`: how many were taken (0 when less than one was there);
-- `wait`: seconds until `wanted` tokens will have flowed in, when fewer were granted.
CREATE FUNCTION lease_request_tokens(
    p_container text, p_user text, p_rate double precision, p_burst double precision, p_wanted double precision,
    OUT granted double precision, OUT wait double precision
) LANGUAGE plpgsql AS $$
DECLARE
    held double precision;
    since timestamptz;
    at timestamptz;
BEGIN
    INSERT INTO request_buckets (container, user_record_name, tokens, updated_at)
    VALUES (p_container, p_user, p_burst, clock_timestamp())
    ON CONFLICT (container, user_record_name) DO NOTHING;
    SELECT b.tokens, b.updated_at INTO held, since FROM request_buckets AS b
    WHERE b.container = p_container AND b.user_record_name = p_user FOR UPDATE;
    -- Read after the row's lock: time that passed while waiting for it is not counted twice.
    at := greatest(clock_timestamp(), since);
    held := least(p_burst, held + p_rate * extract(epoch FROM at - since));
    granted := CASE WHEN held >= 1 THEN least(p_wanted, floor(held)) ELSE 0 END;
    wait := CASE WHEN granted >= p_wanted OR p_rate <= 0 THEN 0 ELSE (p_wanted - held + granted) / p_rate END;
    UPDATE request_buckets SET tokens = held - granted, updated_at = at
    WHERE container = p_container AND user_record_name = p_user;
END
$$;
