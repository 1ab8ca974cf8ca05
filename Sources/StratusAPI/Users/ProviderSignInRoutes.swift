import Foundation
import Hummingbird
import StratusCore
import StratusIdentity
import StratusPostgres

/// The hosted sign-in page's sign-in through a trusted issuer (OpenID Connect, Sign in with Apple):
///
/// - `GET /auth/1/{container}/signin/provider?ckSignInRequest=…&issuer=…`: the page's button. It
///   sends the user's window to the issuer's authorization endpoint (configured, or from the
///   issuer's discovery document) for the issuer's web client id, with a `state` signed for the
///   waiting sign-in request (`ProviderSignInState`) and a fresh nonce: an ID-token request
///   (`response_type=id_token`, `response_mode=form_post`), or, for an issuer with a token
///   endpoint, the authorization-code flow with PKCE (`response_type=code`, `code_challenge` of a
///   verifier derived from the state, S256).
/// - `POST` or `GET /auth/1/{container}/signin/provider/callback`: where the issuer sends its
///   answer (a form, or the query). The state must be one this server issued for the container and
///   not expired; a code is exchanged at the token endpoint with the state's `code_verifier` (and
///   the client secret, when set); the ID token is checked as `signin/idtoken` checks one (key set,
///   signature, `iss`, `aud` — the web client id —, times, the state's nonce, used once), the user
///   found or created by the account, and the answer is a page that posts `{ckWebAuthToken}` to the
///   app's window at the request's origin, as the password sign-in's page does.
struct ProviderSignInRoutes<Context: StratusRequestContext>: Sendable {
    let identities: IdentityStore
    let containers: ContainerStore
    let authenticator: Authenticator
    let issuerKeys: IssuerKeys
    let signInLimiter: SignInLimiter
    /// Seconds a web auth token from sign-in stays valid.
    let tokenLifetime: Int64
    /// `STRATUS_PUBLIC_URL`; nil: `http://` and the request's Host.
    let publicURL: String?

    func register(on router: Router<Context>) {
        router.get("/auth/1/:container/signin/provider") { request, context in try await start(request, context) }
        router.post("/auth/1/:container/signin/provider/callback") { request, context in
            let body = try await RequestBody.read(request, limit: ProviderCallback.maxBytes)
            return try await callback(request, context, answer: try ProviderCallback.parse(Array(body)))
        }
        // The authorization-code flow's answer comes in the query (OAuth's default response mode).
        router.get("/auth/1/:container/signin/provider/callback") { request, context in
            try await callback(request, context, answer: try ProviderCallback.parse(Array((request.uri.query ?? "").utf8)))
        }
    }

    /// Where the issuer sends the browser back: the configured redirect URL, or the callback under
    /// the public URL (the request's Host without one).
    func redirectURL(of issuer: TrustedIssuer, container: String, request: Request) -> String {
        ProviderSignIn.redirectURL(of: issuer, publicURL: publicURL ?? Authenticator.publicURL(of: request) ?? "http://localhost", container: container)
    }

    func start(_ request: Request, _ context: Context) async throws -> Response {
        let container = try AuthRoutes<Context>.containerParameter(context)
        guard let text = request.uri.queryParameters["ckSignInRequest"].map(String.init), !text.isEmpty else {
            throw StratusError(.authenticationFailed, "Missing ckSignInRequest: start from the hosted sign-in page the app opened")
        }
        let now = Int64(Date().timeIntervalSince1970)
        let waiting = try SignInPageRequest.verify(text, key: authenticator.secretKey, container: container, now: now)
        try ContainerSuspension.check(try await containers.isSuspended(container: container, logger: context.logger), container: container)
        guard let name = request.uri.queryParameters["issuer"].map(String.init), !name.isEmpty, name.utf8.count <= IDToken.maxIssuerBytes else {
            throw StratusError(.badRequest, "issuer must name one of the issuers the container trusts (1 to \(IDToken.maxIssuerBytes) bytes)")
        }
        try ClientText.check(name, "issuer")
        guard let issuer = try await identities.trustedIssuer(container: container, issuer: name, logger: context.logger) else {
            throw StratusError(.notFound, "this container does not trust the issuer '\(ClientText.excerpt(name))'")
        }
        guard let clientID = issuer.webClientID else {
            throw StratusError(.badRequest, "the issuer '\(ClientText.excerpt(name))' has no web client id: sign in with it from the app")
        }
        let endpoint = try await issuerKeys.authorizationEndpoint(of: issuer)
        let nonce = APIToken.generate()
        let state = ProviderSignInState(request: waiting, issuer: issuer.issuer, nonce: nonce, now: now, codeFlow: issuer.usesCodeFlow)
        let challenge = issuer.usesCodeFlow ? ProviderSignIn.codeChallenge(of: state.codeVerifier(key: authenticator.secretKey)) : nil
        let location = try ProviderSignIn.authorizationURL(
            endpoint: endpoint, issuer: issuer, clientID: clientID, redirectURL: redirectURL(of: issuer, container: container, request: request),
            state: state.signed(with: authenticator.secretKey), nonce: nonce, codeChallenge: challenge)
        var headers = HTTPFields()
        headers[.location] = location
        headers[.cacheControl] = "no-store"
        headers[.init("Referrer-Policy")!] = "no-referrer"
        return Response(status: .found, headers: headers)
    }

    func callback(_ request: Request, _ context: Context, answer: ProviderCallback) async throws -> Response {
        let container = try AuthRoutes<Context>.containerParameter(context)
        let now = Int64(Date().timeIntervalSince1970)
        let state = try ProviderSignInState.verify(answer.state, key: authenticator.secretKey, container: container, now: now)
        try ContainerSuspension.check(try await containers.isSuspended(container: container, logger: context.logger), container: container)
        // Throttled as every sign-in is; a refused answer counts as a failed sign-in.
        let attempt = try signInLimiter.begin(container: container, login: nil, address: context.clientAddress)
        guard var trusted = try await identities.trustedIssuer(container: container, issuer: state.issuer, logger: context.logger),
              let clientID = trusted.webClientID
        else {
            throw StratusError(.authenticationFailed, "this container no longer signs in with '\(ClientText.excerpt(state.issuer))' from the page")
        }
        let idToken: String
        if state.codeFlow == true {
            let code = try answer.requireCode()
            guard let tokenURL = trusted.tokenURL else {
                throw StratusError(.authenticationFailed, "this container no longer signs in with '\(ClientText.excerpt(state.issuer))' through a token endpoint")
            }
            let clientSecret: String?
            do {
                clientSecret = try trusted.openClientSecret(container: container, key: authenticator.secretKey)
            } catch {
                // The operator's to fix (the secret was stored under another key): said in the log, never the secret.
                context.logger.error("a trusted issuer's client secret does not open with this server's key", metadata: ["issuer": "\(trusted.issuer)"])
                throw error
            }
            idToken = try await issuerKeys.exchange(
                ProviderTokenRequest(
                    code: code, codeVerifier: state.codeVerifier(key: authenticator.secretKey), clientID: clientID,
                    redirectURL: redirectURL(of: trusted, container: container, request: request), clientSecret: clientSecret),
                at: tokenURL)
        } else {
            idToken = try answer.requireIDToken()
        }
        let token = try IDToken.parse(idToken)
        guard token.claims.issuer == state.issuer else {
            throw StratusError(.authenticationFailed, "idToken was issued by '\(ClientText.excerpt(token.claims.issuer))', not by the issuer this sign-in went to")
        }
        // The page asked for a token for its web client id: a token for another client is refused.
        trusted.audiences = [clientID]
        let account = try await IdentityRoutes<Context>.verifiedAccount(
            token, trusted: trusted, nonce: state.nonce, givenName: answer.givenName, familyName: answer.familyName, issuerKeys: issuerKeys)
        let expiresAt = now + tokenLifetime
        let signedIn = try await identities.signIn(container: container, account: account, expiresAt: expiresAt, logger: context.logger)
        attempt.succeeded()
        context.logger.info(
            "signed in through the hosted page's provider",
            metadata: [
                "user": "\(signedIn.userRecordName)", "issuer": "\(account.issuer)", "created": "\(signedIn.created)",
                "flow": "\(state.codeFlow == true ? "code" : "id_token")",
            ])
        let webAuthToken = WebAuthToken(
            userRecordName: signedIn.userRecordName, container: container, expiresAt: expiresAt, credentialEpoch: signedIn.credentialEpoch,
            sessionID: signedIn.sessionID
        ).signed(with: authenticator.secretKey)
        return try HostedPage.response(
            template: ProviderCallbackTemplate.html, settings: HandBack(container: container, origin: state.origin, ckWebAuthToken: webAuthToken))
    }

    struct HandBack: Encodable {
        var container: String
        /// The origin the token goes to; nil: this page's own.
        var origin: String?
        var ckWebAuthToken: String
    }
}

/// The page the callback answers with: it posts the web auth token to the app's window, as the
/// hosted sign-in page does after a password sign-in, and closes.
enum ProviderCallbackTemplate {
    static let html = """
        <!doctype html>
        <html lang="en"><head><meta charset="utf-8"><title>Signed in</title>
        <style>body{font-family:system-ui,sans-serif;max-width:26rem;margin:2rem auto;padding:0 1rem;color:#222}</style></head><body>
        <p id="done">You are signed in. You can close this window.</p>
        <script type="application/json" id="settings">{{settings}}</script>
        <script nonce="{{nonce}}">
        (function () {
          const s = JSON.parse(document.getElementById('settings').textContent);
          if (window.opener) {
            window.opener.postMessage({ ckWebAuthToken: s.ckWebAuthToken, ckSession: s.ckWebAuthToken }, s.origin || window.location.origin);
            window.close();
          }
        })();
        </script></body></html>
        """
}

/// A page of the hosted sign-in flow: its settings as a JSON block whose `<`, `>` and `&` are
/// escaped, its one script under a nonce of the answer's Content-Security-Policy, never cached.
enum HostedPage {
    static func response(template: String, settings: some Encodable) throws -> Response {
        let nonce = APIToken.generate().prefix(32)
        let json = String(decoding: try JSONEncoder().encode(settings), as: UTF8.self)
            .replacingOccurrences(of: "<", with: "\\u003c").replacingOccurrences(of: ">", with: "\\u003e").replacingOccurrences(of: "&", with: "\\u0026")
        let html = template.replacingOccurrences(of: "{{settings}}", with: json).replacingOccurrences(of: "{{nonce}}", with: String(nonce))
        var headers = HTTPFields()
        headers[.contentType] = "text/html; charset=utf-8"
        headers[.cacheControl] = "no-store"
        headers[.init("Content-Security-Policy")!] =
            "default-src 'none'; script-src 'nonce-\(nonce)'; style-src 'unsafe-inline'; connect-src 'self'; form-action 'none'; frame-ancestors 'none'; base-uri 'none'"
        headers[.init("Referrer-Policy")!] = "no-referrer"
        headers[.init("X-Content-Type-Options")!] = "nosniff"
        return Response(status: .ok, headers: headers, body: .init(byteBuffer: .init(string: html)))
    }
}
