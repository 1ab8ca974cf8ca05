-- Web auth tokens carry their user's credential epoch; changing the password raises it, so every
-- token issued before the change is refused from then on. Authentication reads it by user record
-- name (unique, so indexed) in the statement that checks the API token.
ALTER TABLE users ADD COLUMN credential_epoch bigint NOT NULL DEFAULT 1;
