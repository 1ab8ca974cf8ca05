-- The console's operators: people who run a deployment, signing in to /console with a password.
-- They are not app users (no container, no user record name). `containers` NULL lets an operator
-- reach every container; otherwise only those named.
CREATE TABLE operators (
    login          text PRIMARY KEY,
    password_hash  text NOT NULL,
    containers     text[],
    created_at     timestamptz NOT NULL DEFAULT now(),
    updated_at     timestamptz NOT NULL DEFAULT now()
);

-- Signed-in console sessions. Only the SHA-256 digest of the session cookie is stored, so a copy of
-- the table signs nobody in. Each session has its own CSRF token, which every form posts back.
CREATE TABLE operator_sessions (
    session_digest  bytea PRIMARY KEY,
    login           text NOT NULL REFERENCES operators (login) ON DELETE CASCADE,
    csrf_token      text NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    expires_at      timestamptz NOT NULL
);
CREATE INDEX operator_sessions_expiry ON operator_sessions (expires_at);
