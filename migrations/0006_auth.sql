-- Authentication: server-to-server keys and the built-in user directory.

-- Server-to-server keys: P-256 public keys registered per container. The key id is the hex SHA-256
-- of the DER form. Each key acts as its own user (an opaque record name) so what it writes to the
-- public database has a creator. Revoked keys stay for the record.
CREATE TABLE server_keys (
    key_id            text PRIMARY KEY,
    container         text NOT NULL REFERENCES containers (container) ON DELETE CASCADE,
    public_key        bytea NOT NULL,
    user_record_name  text NOT NULL UNIQUE,
    label             text NOT NULL DEFAULT '',
    created_at        timestamptz NOT NULL DEFAULT now(),
    revoked_at        timestamptz
);

-- The user directory of the sign-in endpoint: a login per container, a password hash, and the
-- container-scoped user record name the login maps to (the login itself is never exposed).
CREATE TABLE users (
    container         text NOT NULL REFERENCES containers (container) ON DELETE CASCADE,
    login             text NOT NULL,
    user_record_name  text NOT NULL UNIQUE,
    password_hash     text NOT NULL,
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (container, login)
);
