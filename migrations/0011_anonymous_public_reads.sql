-- As on Apple's service, a caller with only the container's API token may read the public
-- database: new containers allow it unless the operator opts out. Containers that exist keep the
-- setting they have, so an upgrade never opens a public database its operator kept closed.
ALTER TABLE containers ALTER COLUMN allow_anonymous_public SET DEFAULT true;
