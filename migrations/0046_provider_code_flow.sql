-- The hosted sign-in page's authorization-code flow with PKCE, for issuers that do not hand the
-- browser an ID token: the issuer's token endpoint (set: the page asks for a code and exchanges it
-- here for the ID token; NULL: it asks for the ID token itself), and the web client's secret sent
-- to that endpoint (NULL: none, a public client). The secret is never logged nor shown.
ALTER TABLE trusted_issuers
    ADD COLUMN token_url      text,
    ADD COLUMN client_secret  text;
