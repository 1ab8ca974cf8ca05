-- User identities: what the user directory tells other users about a user. A user may give an
-- email address and the components of a name (CloudKit's nameComponents: givenName, familyName),
-- and chooses whether to be discoverable. Only discoverable users are found by users/discover and
-- users/lookup/*, and only a discoverable user's email and name ever leave the server.
ALTER TABLE users
    ADD COLUMN email        text,
    ADD COLUMN given_name   text,
    ADD COLUMN family_name  text,
    ADD COLUMN discoverable boolean NOT NULL DEFAULT false;

-- An email address names one user of a container, whatever its capitals; lookups by email read
-- this index.
CREATE UNIQUE INDEX users_email ON users (container, lower(email)) WHERE email IS NOT NULL;

-- users/discover without lookup infos lists a container's discoverable users, a bounded page in
-- user record name order.
CREATE INDEX users_discoverable ON users (container, user_record_name) WHERE discoverable;

-- The sign-up option: whether a user the directory gains starts discoverable. Off, as on Apple's
-- service, where a user grants discoverability; the operator may turn it on per container.
ALTER TABLE containers ADD COLUMN users_discoverable_by_default boolean NOT NULL DEFAULT false;
