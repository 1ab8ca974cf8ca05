-- The hosted sign-in page's provider sign-in, and the web origins a container's apps call from.

-- An issuer the hosted sign-in page offers a button for: the client id the page signs in with at
-- the issuer (one of its audiences; nil: the page only names the issuer), where the issuer's
-- authorization endpoint is (nil: from its discovery document), and the redirect URL registered
-- at the issuer (nil: the callback under the server's public URL).
ALTER TABLE trusted_issuers
    ADD COLUMN web_client_id      text,
    ADD COLUMN authorization_url  text,
    ADD COLUMN redirect_url       text;

-- The web origins whose pages may call the container's API from a browser (CORS); NULL: any
-- origin, as Apple's API tokens allow by default.
ALTER TABLE containers ADD COLUMN allowed_origins text[];
