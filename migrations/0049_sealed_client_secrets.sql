-- A trusted issuer's web client secret is kept sealed (AES-256-GCM under a key derived from the
-- server's secret key, bound to its container and issuer: `SealedSecret`), so a dump of the
-- database alone does not reveal it. `client_secret` held it in plain text: the SQL of a migration
-- cannot seal (it has no key), so `stratus migrate` seals the values left there right after this
-- migration and empties the column; until then a sign-in still uses them. Nothing writes it again.
ALTER TABLE trusted_issuers
    ADD COLUMN client_secret_sealed bytea,
    ADD CONSTRAINT trusted_issuers_one_client_secret CHECK (client_secret IS NULL OR client_secret_sealed IS NULL);
