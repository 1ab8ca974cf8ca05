import Foundation
import StratusCore
import XCTest

/// The hosted sign-in page's provider sign-in and CORS, without a server: the signed state, the
/// authorization request, the issuer's form answer, discovery documents, issuers' web settings and
/// allowed origins.
final class ProviderSignInTests: XCTestCase {
    static let now: Int64 = 1_800_000_000
    let key = SecretKey.generate()
    static let waiting = SignInPageRequest(container: "iCloud.a", origin: "https://app.example", expiresAt: now + 3000)

    func testTheStateIsBoundToTheWaitingRequestAndRefusedOtherwise() throws {
        let state = ProviderSignInState(request: Self.waiting, issuer: "https://issuer.example", nonce: "n1", now: Self.now)
        XCTAssertEqual(state.expiresAt, Self.now + ProviderSignInState.lifetime, "ten minutes, within the request's hour")
        XCTAssertEqual(ProviderSignInState(request: SignInPageRequest(container: "iCloud.a", origin: nil, expiresAt: Self.now + 60), issuer: "i", nonce: "n", now: Self.now).expiresAt,
                       Self.now + 60, "never past the waiting request")
        let text = state.signed(with: key)
        XCTAssertEqual(try ProviderSignInState.verify(text, key: key, container: "iCloud.a", now: Self.now), state)
        XCTAssertEqual(state.origin, "https://app.example")
        // A sign-in page request is not a state, nor the reverse: each kind has its own key.
        let pageRequest = Self.waiting.signed(with: key)
        let refusals: [(String, () throws -> Void, String)] = [
            ("no state", { _ = try ProviderSignInState.verify(nil, key: self.key, container: "iCloud.a", now: Self.now) }, "no state"),
            ("empty", { _ = try ProviderSignInState.verify("", key: self.key, container: "iCloud.a", now: Self.now) }, "no state"),
            ("made up", { _ = try ProviderSignInState.verify("2.e30.AAAA", key: self.key, container: "iCloud.a", now: Self.now) }, "did not issue"),
            ("a page request", { _ = try ProviderSignInState.verify(pageRequest, key: self.key, container: "iCloud.a", now: Self.now) }, "did not issue"),
            ("another server", { _ = try ProviderSignInState.verify(text, key: SecretKey.generate(), container: "iCloud.a", now: Self.now) }, "did not issue"),
            ("other container", { _ = try ProviderSignInState.verify(text, key: self.key, container: "iCloud.b", now: Self.now) }, "another container"),
            ("expired", { _ = try ProviderSignInState.verify(text, key: self.key, container: "iCloud.a", now: Self.now + 601) }, "expired"),
            ("too long", { _ = try ProviderSignInState.verify(String(repeating: "a", count: 5000), key: self.key, container: "iCloud.a", now: Self.now) }, "did not issue"),
        ]
        for (what, run, reason) in refusals {
            XCTAssertThrowsError(try run(), what) { error in
                XCTAssertEqual((error as? StratusError)?.code, .authenticationFailed, what)
                XCTAssertTrue((error as? StratusError)?.reason.contains(reason) == true, "\(what): \(error)")
            }
        }
        XCTAssertThrowsError(try SignInPageRequest.verify(text, key: key, container: "iCloud.a", now: Self.now), "a state is not a page request")
    }

    func testTheAuthorizationRequestAsksForAnIDTokenPostedBack() throws {
        let issuer = TrustedIssuer(issuer: "https://issuer.example", keySetURL: "https://issuer.example/keys", audiences: ["web.example"], webClientID: "web.example")
        let url = try ProviderSignIn.authorizationURL(
            endpoint: "https://issuer.example/authorize?prompt=login&state=old", issuer: issuer, clientID: "web.example",
            redirectURL: "https://cloud.example/auth/1/iCloud.a/signin/provider/callback", state: "2.a+b.c", nonce: "n 1")
        let items = try XCTUnwrap(URLComponents(string: url)?.queryItems)
        let query = Dictionary(items.map { ($0.name, $0.value ?? "") }, uniquingKeysWith: { $1 })
        XCTAssertEqual(items.filter { $0.name == "state" }.count, 1, "the endpoint's own state is replaced")
        XCTAssertEqual(query["prompt"], "login", "the endpoint's own query is kept")
        XCTAssertEqual(query["response_type"], "id_token")
        XCTAssertEqual(query["response_mode"], "form_post")
        XCTAssertEqual(query["client_id"], "web.example")
        XCTAssertEqual(query["redirect_uri"], "https://cloud.example/auth/1/iCloud.a/signin/provider/callback")
        XCTAssertEqual(query["scope"], "openid email profile")
        XCTAssertEqual(query["state"], "2.a+b.c", "a + survives as a +")
        XCTAssertTrue(url.contains("state=2.a%2Bb.c"), url)
        XCTAssertEqual(query["nonce"], "n 1")
        XCTAssertEqual(ProviderSignIn.scope(of: ProviderSignIn.appleIssuer), "name email")
        XCTAssertEqual(ProviderSignIn.label(of: ProviderSignIn.appleIssuer), "Sign in with Apple")
        XCTAssertEqual(ProviderSignIn.label(of: "https://accounts.example.com"), "Sign in with accounts.example.com")
        XCTAssertEqual(ProviderSignIn.redirectURL(of: issuer, publicURL: "https://cloud.example", container: "iCloud.a"),
                       "https://cloud.example/auth/1/iCloud.a/signin/provider/callback")
        var registered = issuer
        registered.redirectURL = "https://proxy.example/cb"
        XCTAssertEqual(ProviderSignIn.redirectURL(of: registered, publicURL: "https://cloud.example", container: "iCloud.a"), "https://proxy.example/cb")
        XCTAssertThrowsError(try ProviderSignIn.authorizationURL(endpoint: "/relative", issuer: issuer, clientID: "c", redirectURL: "r", state: "s", nonce: "n"))
    }

    func testTheIssuersAnswerIsReadAsABoundedForm() throws {
        let body = "id_token=a.b.c&state=2.x%2By.z&user=%7B%22name%22%3A%7B%22firstName%22%3A%22Ada%22%2C%22lastName%22%3A%22Lovelace%22%7D%7D"
        let answer = try ProviderCallback.parse(Array(body.utf8))
        XCTAssertEqual(answer, ProviderCallback(idToken: "a.b.c", state: "2.x+y.z", givenName: "Ada", familyName: "Lovelace"))
        XCTAssertEqual(try answer.requireIDToken(), "a.b.c")
        let refused = try ProviderCallback.parse(Array("error=access_denied&state=s".utf8))
        XCTAssertThrowsError(try refused.requireIDToken()) { XCTAssertTrue(($0 as? StratusError)?.reason.contains("access_denied") == true) }
        XCTAssertThrowsError(try ProviderCallback.parse(Array("state=s".utf8)).requireIDToken()) {
            XCTAssertEqual(($0 as? StratusError)?.code, .authenticationFailed)
        }
        XCTAssertEqual(try ProviderCallback.parse(Array("user=not-json&id_token=t".utf8)).givenName, nil, "a user field that is not JSON is ignored")
        let hostile: [(String, [UInt8])] = [
            ("too many fields", Array((0..<17).map { "f\($0)=1" }.joined(separator: "&").utf8)),
            ("not UTF-8", [0x69, 0x64, 0x3d, 0xff]),
            ("a NUL", Array("id_token=a%00b".utf8)),
            ("bad escape", Array("id_token=%zz".utf8)),
            ("too large", [UInt8](repeating: 0x61, count: ProviderCallback.maxBytes + 1)),
        ]
        for (what, body) in hostile {
            XCTAssertThrowsError(try ProviderCallback.parse(body), what) { XCTAssertEqual(($0 as? StratusError)?.code, .badRequest, what) }
        }
    }

    func testDiscoveryDocumentsMustBeTheIssuersOwn() throws {
        let good = #"{"issuer":"https://issuer.example","authorization_endpoint":"https://issuer.example/auth"}"#
        XCTAssertEqual(try ProviderSignIn.authorizationEndpoint(discovery: Array(good.utf8), issuer: "https://issuer.example"), "https://issuer.example/auth")
        XCTAssertEqual(ProviderSignIn.discoveryURL(of: "https://issuer.example/"), "https://issuer.example/.well-known/openid-configuration")
        for (what, document) in [
            ("another issuer", #"{"issuer":"https://evil.example","authorization_endpoint":"https://issuer.example/auth"}"#),
            ("no endpoint", #"{"issuer":"https://issuer.example"}"#),
            ("relative endpoint", #"{"issuer":"https://issuer.example","authorization_endpoint":"/auth"}"#),
            ("not JSON", "<html>"),
        ] {
            XCTAssertThrowsError(try ProviderSignIn.authorizationEndpoint(discovery: Array(document.utf8), issuer: "https://issuer.example"), what) {
                XCTAssertEqual(($0 as? StratusError)?.code, .tryAgainLater, what)
            }
        }
    }

    func testAnIssuersWebSettingsAreChecked() throws {
        func issuer(_ client: String?, _ authorization: String? = nil, _ redirect: String? = nil) -> TrustedIssuer {
            TrustedIssuer(issuer: "https://i.example", keySetURL: "https://i.example/keys", audiences: ["app", "web"], webClientID: client,
                          authorizationURL: authorization, redirectURL: redirect)
        }
        XCTAssertEqual(try issuer(" web ", "https://i.example/auth").validated().webClientID, "web")
        XCTAssertNil(try issuer("", "").validated().authorizationURL, "empty is none")
        for (what, candidate, reason) in [
            ("client id not an audience", issuer("other"), "one of the issuer's audiences"),
            ("relative authorization URL", issuer("web", "/auth"), "absolute"),
            ("credentials in the redirect URL", issuer("web", nil, "https://u:p@x.example/cb"), "absolute"),
            ("an authorization URL without a web client id", issuer(nil, "https://i.example/auth"), "needs a web client id"),
        ] {
            XCTAssertThrowsError(try candidate.validated(), what) { XCTAssertTrue(($0 as? StratusError)?.reason.contains(reason) == true, "\(what): \($0)") }
        }
    }

    /// The authorization-code flow with PKCE: the verifier is the state's own (RFC 7636 S256),
    /// the request asks for a code, the exchange posts the verifier and authenticates the client,
    /// and the token endpoint's answers are read as ID tokens or refusals.
    func testTheCodeFlowDerivesTheVerifierFromTheStateAndReadsTheTokenAnswer() throws {
        // RFC 7636, appendix B.
        XCTAssertEqual(ProviderSignIn.codeChallenge(of: "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk"), "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM")
        let state = ProviderSignInState(request: Self.waiting, issuer: "https://issuer.example", nonce: "n1", now: Self.now, codeFlow: true)
        let verifier = state.codeVerifier(key: key)
        XCTAssertNotNil(verifier.wholeMatch(of: /[A-Za-z0-9_-]{43}/), "43 characters of base64url: \(verifier)")
        XCTAssertEqual(state.codeVerifier(key: key), verifier, "the callback derives the same verifier")
        var other = state
        other.nonce = "n2"
        XCTAssertNotEqual(other.codeVerifier(key: key), verifier, "each request has its own")
        XCTAssertNotEqual(state.codeVerifier(key: SecretKey.generate()), verifier, "only this server's key makes it")
        let opened = try ProviderSignInState.verify(state.signed(with: key), key: key, container: "iCloud.a", now: Self.now)
        XCTAssertEqual(opened.codeFlow, true)
        XCTAssertFalse(state.signed(with: key).contains(verifier), "the verifier is not in the state")
        XCTAssertNil(ProviderSignInState(request: Self.waiting, issuer: "i", nonce: "n", now: Self.now).codeFlow, "an ID-token request")

        let issuer = TrustedIssuer(issuer: "https://issuer.example", keySetURL: "https://issuer.example/keys", audiences: ["web.example"], webClientID: "web.example",
                                   tokenURL: "https://issuer.example/token")
        let challenge = ProviderSignIn.codeChallenge(of: verifier)
        let url = try ProviderSignIn.authorizationURL(
            endpoint: "https://issuer.example/authorize?response_mode=form_post&code_challenge=old", issuer: issuer, clientID: "web.example",
            redirectURL: "https://cloud.example/cb", state: "s", nonce: "n1", codeChallenge: challenge)
        let items = try XCTUnwrap(URLComponents(string: url)?.queryItems)
        let query = Dictionary(items.map { ($0.name, $0.value ?? "") }, uniquingKeysWith: { $1 })
        XCTAssertEqual(query["response_type"], "code")
        XCTAssertEqual(query["code_challenge"], challenge)
        XCTAssertEqual(items.filter { $0.name == "code_challenge" }.count, 1, "the endpoint's own is replaced")
        XCTAssertEqual(query["code_challenge_method"], "S256")
        XCTAssertNil(query["response_mode"], "the code comes back in the query, OAuth's default")
        XCTAssertEqual(query["nonce"], "n1")

        let exchange = ProviderTokenRequest(code: "c/1+", codeVerifier: verifier, clientID: "web.example", redirectURL: "https://cloud.example/cb", clientSecret: "s3cr:t")
        XCTAssertEqual(exchange.body, "grant_type=authorization_code&code=c%2F1%2B&redirect_uri=https%3A%2F%2Fcloud.example%2Fcb&client_id=web.example&code_verifier=\(verifier)")
        XCTAssertEqual(exchange.authorization, "Basic " + Data("web.example:s3cr%3At".utf8).base64EncodedString(), "client_secret_basic, form-encoded first")
        XCTAssertNil(ProviderTokenRequest(code: "c", codeVerifier: verifier, clientID: "w", redirectURL: "r", clientSecret: nil).authorization, "a public client")

        XCTAssertEqual(try ProviderTokenRequest.idToken(status: 200, answer: Array(#"{"id_token":"a.b.c","access_token":"x"}"#.utf8)), "a.b.c")
        for (what, status, answer, code, reason) in [
            ("a used code", 400, #"{"error":"invalid_grant"}"#, ServerErrorCode.authenticationFailed, "'invalid_grant'"),
            ("no id_token", 200, #"{"access_token":"x"}"#, .authenticationFailed, "without an id_token"),
            ("not JSON", 200, "<html>", .authenticationFailed, "without an id_token"),
            ("a failing endpoint", 502, "", .tryAgainLater, "HTTP 502"),
            ("a refusal without JSON", 401, "no", .authenticationFailed, "refused the authorization code"),
        ] {
            XCTAssertThrowsError(try ProviderTokenRequest.idToken(status: status, answer: Array(answer.utf8)), what) {
                XCTAssertEqual(($0 as? StratusError)?.code, code, what)
                XCTAssertTrue(($0 as? StratusError)?.reason.contains(reason) == true, "\(what): \($0)")
            }
        }
        let answered = try ProviderCallback.parse(Array("code=abc&state=s".utf8))
        XCTAssertEqual(try answered.requireCode(), "abc")
        for (what, body, reason) in [
            ("an ID token instead", "id_token=a.b.c&state=s", "no authorization code"), ("a refusal", "error=access_denied&state=s", "access_denied"),
            ("a long code", "code=" + String(repeating: "a", count: ProviderCallback.maxCodeBytes + 1), "longer than"),
        ] {
            XCTAssertThrowsError(try ProviderCallback.parse(Array(body.utf8)).requireCode(), what) {
                XCTAssertTrue(($0 as? StratusError)?.reason.contains(reason) == true, "\(what): \($0)")
            }
        }
    }

    func testAnIssuersTokenURLAndClientSecretAreCheckedAndTheSecretNeverDescribed() throws {
        func issuer(_ client: String?, token: String?, secret: String?) -> TrustedIssuer {
            TrustedIssuer(issuer: "https://i.example", keySetURL: "https://i.example/keys", audiences: ["web"], webClientID: client, tokenURL: token, clientSecret: secret)
        }
        let good = try issuer("web", token: "https://i.example/token", secret: "the secret").validated()
        XCTAssertTrue(good.usesCodeFlow)
        XCTAssertEqual(good.clientSecret, "the secret")
        XCTAssertFalse(good.description.contains("the secret"), good.description)
        XCTAssertFalse("\(good)".contains("the secret"))
        XCTAssertFalse(try issuer("web", token: "", secret: "").validated().usesCodeFlow, "empty is none")
        for (what, candidate, reason) in [
            ("a relative token URL", issuer("web", token: "/token", secret: nil), "absolute"),
            ("a token URL without a web client id", issuer(nil, token: "https://i.example/token", secret: nil), "needs a web client id"),
            ("a secret without a token URL", issuer("web", token: nil, secret: "s"), "needs a token URL"),
            ("a long secret", issuer("web", token: "https://i.example/token", secret: String(repeating: "s", count: 1025)), "1 to 1024 bytes"),
            ("a secret with a line break", issuer("web", token: "https://i.example/token", secret: "a\nb"), "control characters"),
        ] {
            XCTAssertThrowsError(try candidate.validated(), what) {
                XCTAssertTrue(($0 as? StratusError)?.reason.contains(reason) == true, "\(what): \($0)")
                XCTAssertFalse("\($0)".contains("a\nb"), "the secret is not quoted")
            }
        }
    }

    /// The client secret as the database keeps it: sealed under a key derived from the server's,
    /// bound to its container and issuer; it opens only with that key and for that row, and a value
    /// that does not open is a clear AUTHENTICATION_FAILED that names no secret.
    func testAClientSecretIsSealedForItsRowAndOpensOnlyWithTheServersKey() throws {
        let secret = "a client secret/+="
        let issuer = try TrustedIssuer(
            issuer: "https://i.example", keySetURL: "https://i.example/keys", audiences: ["web"], webClientID: "web", tokenURL: "https://i.example/token",
            clientSecret: secret
        ).validated()
        let sealed = try XCTUnwrap(issuer.sealClientSecret(container: "iCloud.a", key: key))
        XCTAssertNil(Data(sealed.bytes).range(of: Data(secret.utf8)), "the sealed bytes do not hold the secret")
        XCTAssertEqual(sealed.bytes.first, SealedSecret.version)
        XCTAssertNotEqual(issuer.sealClientSecret(container: "iCloud.a", key: key), sealed, "a fresh nonce each time")
        var stored = issuer
        stored.clientSecret = nil
        stored.sealedClientSecret = sealed
        XCTAssertTrue(stored.hasClientSecret)
        XCTAssertEqual(try stored.openClientSecret(container: "iCloud.a", key: key), secret)
        XCTAssertFalse(stored.description.contains(secret))
        func refused(_ candidate: TrustedIssuer, container: String = "iCloud.a", key: SecretKey, _ what: String) {
            XCTAssertThrowsError(try candidate.openClientSecret(container: container, key: key), what) {
                let error = $0 as? StratusError
                XCTAssertEqual(error?.code, .authenticationFailed, what)
                XCTAssertTrue(error?.reason.contains("does not open with this server's key") == true, "\(what): \(String(describing: error))")
                XCTAssertFalse("\($0)".contains(secret), what)
            }
        }
        refused(stored, key: SecretKey.generate(), "another server key")
        refused(stored, container: "iCloud.b", key: key, "another container's row")
        var moved = stored
        moved.issuer = "https://other.example"
        refused(moved, key: key, "another issuer's row")
        let damages: [[UInt8]] = [
            [], [SealedSecret.version], Array(sealed.bytes.dropLast()), [2] + Array(sealed.bytes.dropFirst()),
            [UInt8](repeating: 1, count: SealedSecret.maxBytes + 1),
        ]
        for bytes in damages {
            var damaged = stored
            damaged.sealedClientSecret = SealedSecret(bytes: bytes)
            refused(damaged, key: key, "damaged bytes (\(bytes.count))")
        }
        // A row stored before secrets were sealed still signs in until `stratus migrate` seals it.
        XCTAssertEqual(try issuer.openClientSecret(container: "iCloud.a", key: key), secret)
        let publicClient = TrustedIssuer(issuer: "https://i.example", keySetURL: "https://i.example/keys", audiences: ["web"])
        XCTAssertNil(publicClient.sealClientSecret(container: "iCloud.a", key: key))
        XCTAssertNil(try publicClient.openClientSecret(container: "iCloud.a", key: key))
        XCTAssertFalse(publicClient.hasClientSecret)
    }

    func testAllowedOrigins() throws {
        XCTAssertNil(try AllowedOrigins.validated(["*"]), "'*' alone: any origin")
        XCTAssertEqual(try AllowedOrigins.validated(["HTTPS://App.Example", "https://app.example/", "http://localhost:8080"]),
                       ["https://app.example", "http://localhost:8080"])
        for bad in [["*", "https://a.example"], ["https://a.example/path"], ["ftp://a.example"], ["null"], Array(repeating: "https://a.example", count: 33)] {
            XCTAssertThrowsError(try AllowedOrigins.validated(bad), "\(bad.prefix(2))") { XCTAssertEqual(($0 as? StratusError)?.code, .badRequest) }
        }
        XCTAssertTrue(AllowedOrigins.allows("https://anything.example", nil))
        XCTAssertTrue(AllowedOrigins.allows("https://APP.example", ["https://app.example"]))
        XCTAssertFalse(AllowedOrigins.allows("https://evil.example", ["https://app.example"]))
        XCTAssertFalse(AllowedOrigins.allows("null", ["https://app.example"]))
    }
}
