-- Each API process keeps what an API token gives access to for a moment (STRATUS_AUTH_CACHE_MS):
-- the token's container, the container's anonymous public reads, and a user's credential epoch.
-- Every commit that changes one of those notifies `stratus_access`, and every API process that
-- hears it forgets all it kept. The payload is empty: such changes are rare, and forgetting
-- everything needs no knowledge of which answers a change touched. A transaction that changes many
-- rows sends one notification (PostgreSQL folds equal notifications of one transaction).
CREATE FUNCTION notify_access_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('stratus_access', '');
    RETURN NULL;
END
$$;

-- A revoked token (a container's deletion removes its tokens too, each through this trigger).
CREATE TRIGGER api_tokens_access_change AFTER UPDATE OR DELETE ON api_tokens
    FOR EACH ROW EXECUTE FUNCTION notify_access_change();

-- Anonymous public reads withdrawn (or granted).
CREATE TRIGGER containers_access_change AFTER UPDATE OF allow_anonymous_public ON containers
    FOR EACH ROW WHEN (OLD.allow_anonymous_public IS DISTINCT FROM NEW.allow_anonymous_public)
    EXECUTE FUNCTION notify_access_change();

-- A password change (the epoch rises), a user's removal, and a user's creation: a token minted
-- without an epoch for a user outside the directory is refused once the directory holds the user.
CREATE TRIGGER users_access_change AFTER INSERT OR DELETE ON users
    FOR EACH ROW EXECUTE FUNCTION notify_access_change();
CREATE TRIGGER users_credential_change AFTER UPDATE OF credential_epoch, user_record_name, container ON users
    FOR EACH ROW WHEN (OLD.credential_epoch IS DISTINCT FROM NEW.credential_epoch
                       OR OLD.user_record_name IS DISTINCT FROM NEW.user_record_name
                       OR OLD.container IS DISTINCT FROM NEW.container)
    EXECUTE FUNCTION notify_access_change();
