-- Email sign-up, verification and password reset.

-- Who may sign up by email: anyone ('open'), only the addresses the operator invited
-- ('invite-only'), or nobody ('off', the default: the operator adds users).
ALTER TABLE containers ADD COLUMN sign_up text NOT NULL DEFAULT 'off'
    CHECK (sign_up IN ('open', 'invite-only', 'off'));

-- The addresses an invite-only container lets sign up, whatever their capitals.
CREATE TABLE sign_up_invitations (
    container   text NOT NULL REFERENCES containers (container) ON DELETE CASCADE,
    email       text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (container, email)
);

-- Tokens sent by email, stored only as their SHA-256 digest: a sign-up's verification (with the
-- password hash the user chose, so the user exists only once the address is confirmed) or a
-- password reset (naming its user). Each is used at most once, before it expires.
CREATE TABLE email_tokens (
    token_digest      bytea PRIMARY KEY,
    container         text NOT NULL REFERENCES containers (container) ON DELETE CASCADE,
    purpose           text NOT NULL CHECK (purpose IN ('verify', 'reset')),
    email             text NOT NULL,
    password_hash     text,
    user_record_name  text REFERENCES users (user_record_name) ON DELETE CASCADE,
    created_at        timestamptz NOT NULL DEFAULT now(),
    expires_at        timestamptz NOT NULL,
    used_at           timestamptz,
    CHECK ((purpose = 'verify') = (password_hash IS NOT NULL)),
    CHECK ((purpose = 'reset') = (user_record_name IS NOT NULL))
);
CREATE INDEX email_tokens_expiry ON email_tokens (expires_at);
