-- ID-token sign-in (Sign in with Apple, any OpenID Connect provider) and sessions.

-- The issuers a container trusts: the `iss` of their ID tokens, where their key sets are, and the
-- client ids (audiences) the container's apps have there. `stratus container auth …` keeps them.
CREATE TABLE trusted_issuers (
    container   text NOT NULL REFERENCES containers (container) ON DELETE CASCADE,
    issuer      text NOT NULL,
    jwks_url    text NOT NULL,
    audiences   text[] NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (container, issuer)
);

-- Accounts at issuers, each linked to one user of the container's directory: the sign-in that
-- created the user, or the user's explicit request, linked it. A user may have several.
CREATE TABLE linked_accounts (
    container         text NOT NULL,
    issuer            text NOT NULL,
    subject           text NOT NULL,
    user_record_name  text NOT NULL REFERENCES users (user_record_name) ON DELETE CASCADE,
    email             text,
    created_at        timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (container, issuer, subject)
);
CREATE INDEX linked_accounts_user ON linked_accounts (user_record_name);

-- The nonces of ID tokens already exchanged, by digest, until their token expires: a replayed
-- token (or another token with a used nonce) is refused.
CREATE TABLE used_nonces (
    issuer        text NOT NULL,
    nonce_digest  bytea NOT NULL,
    expires_at    timestamptz NOT NULL,
    PRIMARY KEY (issuer, nonce_digest)
);
CREATE INDEX used_nonces_expiry ON used_nonces (expires_at);

-- Sessions: one per sign-in, named by the web auth tokens it issued. A revoked session's tokens
-- are refused. Kept after they expire or are revoked, for the record, until their user goes.
CREATE TABLE sessions (
    session_id        text PRIMARY KEY,
    container         text NOT NULL REFERENCES containers (container) ON DELETE CASCADE,
    user_record_name  text NOT NULL REFERENCES users (user_record_name) ON DELETE CASCADE,
    method            text NOT NULL CHECK (method IN ('password', 'idtoken')),
    issuer            text,
    created_at        timestamptz NOT NULL DEFAULT now(),
    expires_at        timestamptz NOT NULL,
    revoked_at        timestamptz
);
CREATE INDEX sessions_user ON sessions (container, user_record_name, created_at DESC);

-- A revoked (or removed) session ends the cached answers of every API process at once, as a
-- password change does (0026). A new session needs no notification: no answer about it can be
-- cached before its token exists.
CREATE TRIGGER sessions_access_change AFTER UPDATE OF revoked_at OR DELETE ON sessions
    FOR EACH ROW EXECUTE FUNCTION notify_access_change();
