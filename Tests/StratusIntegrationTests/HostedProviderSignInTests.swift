import Foundation
import Hummingbird
import HummingbirdTesting
import Logging
import StratusAPI
import StratusCore
import StratusPostgres
import StratusPushTestSupport
import StratusRuntime
import StratusTesting
import Synchronization
import XCTest

/// The hosted sign-in page's provider sign-in over HTTP against the real PostgreSQL, with a small
/// OpenID provider of the test's own on a loopback port (its keys, its discovery document), and
/// CORS for web apps on other origins.
final class HostedProviderSignInTests: XCTestCase {
    typealias Body = [String: Any]
    static let container = IdentityTests.container
    static let webClient = "web.example"

    struct Answer {
        var status: Int
        var headers: HTTPFields
        var text: String
        var json: Body { (try? JSONSerialization.jsonObject(with: Data(text.utf8)) as? Body) ?? [:] }
    }

    static func call(
        _ client: any TestClientProtocol, _ uri: String, method: HTTPRequest.Method = .get, headers: HTTPFields = [:], body: String = ""
    ) async throws -> Answer {
        try await client.execute(uri: uri, method: method, headers: headers, body: ByteBuffer(string: body)) { response in
            Answer(status: Int(response.status.code), headers: response.headers, text: String(buffer: response.body))
        }
    }

    static func form(_ fields: [(String, String)]) -> String {
        var allowed = CharacterSet.alphanumerics
        allowed.insert(charactersIn: "-._~")
        return fields.map { "\($0)=\($1.addingPercentEncoding(withAllowedCharacters: allowed) ?? $1)" }.joined(separator: "&")
    }

    func testTheHostedPageSignsInThroughAnIssuerAndRefusesForeignAnswers() async throws {
        let issuer = IdentityTests.TestIssuer()
        let provider = Mutex<String>("")
        try await WebhookReceiver.with(reply: { request in
            if request.uri.hasPrefix("/.well-known/openid-configuration") {
                let document = ["issuer": provider.withLock { $0 }, "authorization_endpoint": provider.withLock { $0 } + "/authorize"]
                return .answer(status: 200, headers: [("Content-Type", "application/json")], body: String(decoding: try! JSONSerialization.data(withJSONObject: document), as: UTF8.self))
            }
            return .answer(status: 200, headers: [("Content-Type", "application/json")], body: issuer.keySet)
        }) { keys in
            provider.withLock { $0 = keys.url("") }
            try await TestSupport.withMigratedStore { store, _ in
                let apiToken = try await ContainerStore(store: store).create(container: Self.container, label: "test", logger: TestSupport.logger)
                let identities = IdentityStore(store: store)
                // One issuer with a configured authorization endpoint, one found by discovery, one
                // the page only names.
                try await identities.trust(container: Self.container, TrustedIssuer(
                    issuer: IdentityTests.issuer, keySetURL: keys.url("/keys"), audiences: [IdentityTests.audience, Self.webClient],
                    webClientID: Self.webClient, authorizationURL: "https://login.issuer.example/authorize?prompt=login"), logger: TestSupport.logger)
                try await identities.trust(container: Self.container, TrustedIssuer(
                    issuer: keys.url(""), keySetURL: keys.url("/keys"), audiences: [Self.webClient], webClientID: Self.webClient), logger: TestSupport.logger)
                try await identities.trust(container: Self.container, TrustedIssuer(
                    issuer: "https://app-only.example", keySetURL: keys.url("/keys"), audiences: ["x"]), logger: TestSupport.logger)
                var configuration = APIConfiguration(secretKey: SecretKey.generate())
                configuration.keySets.allowPrivateAddresses = true
                configuration.publicURL = "https://cloud.example"
                let router = buildRouter(APIDependencies(store: store, readiness: [], metrics: { "" }), configuration: configuration)
                try await Application(router: router, logger: TestSupport.logger).test(.router) { client in
                    func stored() async throws -> [Int64] {
                        var counts: [Int64] = []
                        for table in ["users", "linked_accounts", "sessions", "used_nonces"] {
                            counts.append(try await TestSupport.count(store, "SELECT count(*)::bigint FROM \(unescaped: table)"))
                        }
                        return counts
                    }
                    func refused(_ answer: Answer, status: Int = 401, code: String = "AUTHENTICATION_FAILED", _ reason: String, _ what: String) {
                        XCTAssertEqual(answer.status, status, "\(what): \(answer.text)")
                        XCTAssertEqual(answer.json["serverErrorCode"] as? String, code, what)
                        XCTAssertTrue((answer.json["reason"] as? String ?? "").contains(reason), "\(what): \(answer.text)")
                    }
                    // The app's call without a user: 421 with the hosted page's request.
                    var origin = HTTPFields()
                    origin[.origin] = "https://app.example"
                    let needed = try await Self.call(
                        client, AuthTests.path("users/caller", database: "private", container: Self.container) + "?ckAPIToken=\(apiToken)", headers: origin)
                    XCTAssertEqual(needed.status, 421, needed.text)
                    let redirect = try XCTUnwrap(URLComponents(string: needed.json["redirectURL"] as? String ?? ""))
                    let request = try XCTUnwrap(redirect.queryItems?.first { $0.name == "request" }?.value)
                    let page = try await Self.call(client, redirect.path + "?request=" + request.addingPercentEncoding(withAllowedCharacters: .alphanumerics)!)
                    XCTAssertTrue(page.text.contains("\"signsIn\":true") && page.text.contains("\"signsIn\":false"), "the page lists buttons and names: \(page.text)")
                    let base = "/auth/1/\(Self.container)/signin/provider"
                    func start(_ issuerName: String) async throws -> (state: String, nonce: String, location: URLComponents) {
                        let answer = try await Self.call(client, base + "?" + Self.form([("ckSignInRequest", request), ("issuer", issuerName)]))
                        XCTAssertEqual(answer.status, 302, answer.text)
                        let location = try XCTUnwrap(URLComponents(string: answer.headers[.location] ?? ""))
                        let query = Dictionary((location.queryItems ?? []).map { ($0.name, $0.value ?? "") }, uniquingKeysWith: { $1 })
                        XCTAssertEqual(query["client_id"], Self.webClient)
                        XCTAssertEqual(query["redirect_uri"], "https://cloud.example/auth/1/\(Self.container)/signin/provider/callback")
                        XCTAssertEqual(query["response_type"], "id_token")
                        XCTAssertEqual(query["response_mode"], "form_post")
                        return (try XCTUnwrap(query["state"]), try XCTUnwrap(query["nonce"]), location)
                    }
                    let first = try await start(IdentityTests.issuer)
                    XCTAssertEqual(first.location.host, "login.issuer.example", "the configured endpoint")
                    XCTAssertTrue(first.location.queryItems?.contains(URLQueryItem(name: "prompt", value: "login")) == true)
                    let discovered = try await start(keys.url(""))
                    XCTAssertEqual(discovered.location.path, "/authorize", "the endpoint from the discovery document")
                    XCTAssertEqual(discovered.location.port, keys.port)

                    // Hostile starts: no request, an issuer the container does not trust, one without a web client id.
                    refused(try await Self.call(client, base + "?issuer=x"), "Missing ckSignInRequest", "no request")
                    refused(try await Self.call(client, base + "?" + Self.form([("ckSignInRequest", request), ("issuer", "https://evil.example")])),
                            status: 404, code: "NOT_FOUND", "does not trust", "an untrusted issuer")
                    refused(try await Self.call(client, base + "?" + Self.form([("ckSignInRequest", request), ("issuer", "https://app-only.example")])),
                            status: 400, code: "BAD_REQUEST", "no web client id", "an issuer without a web client id")

                    // Hostile answers: each refused, nothing stored.
                    let callback = base + "/callback"
                    let before = try await stored()
                    func post(_ fields: [(String, String)]) async throws -> Answer {
                        var headers = HTTPFields()
                        headers[.contentType] = "application/x-www-form-urlencoded"
                        return try await Self.call(client, callback, method: .post, headers: headers, body: Self.form(fields))
                    }
                    let good = issuer.token(["aud": Self.webClient, "nonce": first.nonce, "sub": "web-subject"])
                    refused(try await post([("id_token", good)]), "no state", "an answer without a pending request")
                    refused(try await post([("id_token", good), ("state", request)]), "did not issue", "a page request as the state")
                    refused(try await post([("id_token", good), ("state", discovered.state)]), "not by the issuer this sign-in went to", "another sign-in's state")
                    refused(try await post([("id_token", issuer.token(["aud": IdentityTests.audience, "nonce": first.nonce])), ("state", first.state)]),
                            "not to a client id", "a token for another audience (the app's)")
                    refused(try await post([("id_token", issuer.token(["aud": Self.webClient, "nonce": "another nonce"])), ("state", first.state)]),
                            "nonce does not match", "a token with another nonce")
                    refused(try await post([("error", "access_denied"), ("state", first.state)]), "access_denied", "the provider's refusal")
                    let stillBefore = try await stored()
                    XCTAssertEqual(stillBefore, before, "refused answers store nothing")

                    // The good answer: a page that hands the token to the app's origin.
                    let signedIn = try await post([("id_token", good), ("state", first.state)])
                    XCTAssertEqual(signedIn.status, 200, signedIn.text)
                    XCTAssertTrue(signedIn.text.contains("\"origin\":\"https:\\/\\/app.example\"") || signedIn.text.contains("\"origin\":\"https://app.example\""), signedIn.text)
                    XCTAssertEqual(signedIn.headers[.cacheControl], "no-store")
                    let webToken = try XCTUnwrap(signedIn.text.firstMatch(of: /"ckWebAuthToken":"([^"]+)"/).map { String($0.1) })
                    let caller = try await Self.call(
                        client, AuthTests.path("users/caller", database: "private", container: Self.container) + "?ckAPIToken=\(apiToken)&ckWebAuthToken=\(webToken)")
                    XCTAssertEqual(caller.status, 200, caller.text)
                    let sessions = try await TestSupport.count(store, "SELECT count(*)::bigint FROM sessions WHERE method = 'idtoken' AND issuer = \(IdentityTests.issuer)")
                    XCTAssertEqual(sessions, 1)
                    // The same answer again: its nonce is used.
                    let after = try await stored()
                    refused(try await post([("id_token", good), ("state", first.state)]), "nonce", "a replayed answer")
                    let afterReplay = try await stored()
                    XCTAssertEqual(afterReplay, after, "a replay stores nothing")
                }
            }
        }
    }

    /// What the test's provider knows of a code it issued: the PKCE challenge and nonce of the
    /// authorization request, and whether it was exchanged already.
    struct Grant: Sendable {
        var challenge: String
        var nonce: String
        var redirectURL: String
        var used = false
    }

    /// The provider's token endpoint, as an OpenID provider's: a code it issued, not exchanged
    /// before, for the redirect URL it was issued for, with the client's secret (HTTP Basic) and a
    /// `code_verifier` whose S256 is the request's challenge; anything else is `invalid_grant`.
    static func tokenEndpoint(
        _ request: ReceivedRequest, grants: borrowing Mutex<[String: Grant]>, issuer: IdentityTests.TestIssuer, secret: String, client webClient: String = HostedProviderSignInTests.webClient,
        claims: Body = [:]
    ) -> ReceiverReply {
        let fields = Dictionary(
            String(decoding: request.body, as: UTF8.self).split(separator: "&").map { pair -> (String, String) in
                let parts = pair.split(separator: "=", maxSplits: 1).map { String($0).removingPercentEncoding ?? "" }
                return (parts[0], parts.count > 1 ? parts[1] : "")
            }, uniquingKeysWith: { $1 })
        let basic = "Basic " + Data("\(webClient):\(secret.addingPercentEncoding(withAllowedCharacters: .alphanumerics)!)".utf8).base64EncodedString()
        let refused = ReceiverReply.answer(status: 400, headers: [("Content-Type", "application/json")], body: #"{"error":"invalid_grant"}"#)
        guard request.method == .POST, request.headers.first(name: "Authorization") == basic, fields["grant_type"] == "authorization_code",
              fields["client_id"] == webClient, let code = fields["code"], let verifier = fields["code_verifier"]
        else { return refused }
        let grant: Grant? = grants.withLock { grants in
            guard let grant = grants[code], !grant.used, grant.redirectURL == fields["redirect_uri"],
                  ProviderSignIn.codeChallenge(of: verifier) == grant.challenge
            else { return nil }
            grants[code]?.used = true
            return grant
        }
        guard let grant else { return refused }
        let idToken = issuer.token((["aud": webClient, "nonce": grant.nonce, "sub": "code-subject"] as Body).merging(claims) { $1 })
        return .answer(status: 200, headers: [("Content-Type", "application/json")], body: #"{"token_type":"Bearer","access_token":"a","id_token":"\#(idToken)"}"#)
    }

    /// An issuer that hands the browser no ID token: the page signs in with the authorization-code
    /// flow and PKCE; the code is exchanged at the provider's token endpoint with the verifier and
    /// the client secret. A code for another sign-in's challenge (a wrong verifier), a code sent
    /// again, a forged state and an ID token in place of a code are each refused, storing nothing,
    /// and the secret and verifier are never logged.
    func testTheHostedPageSignsInThroughTheCodeFlowWithPKCE() async throws {
        let issuer = IdentityTests.TestIssuer()
        let grants = Mutex<[String: Grant]>([:])
        let secret = "a client secret/+="
        try await WebhookReceiver.with(reply: { request in
            if request.uri.hasPrefix("/token") { return Self.tokenEndpoint(request, grants: grants, issuer: issuer, secret: secret) }
            return .answer(status: 200, headers: [("Content-Type", "application/json")], body: issuer.keySet)
        }) { provider in
            try await TestSupport.withMigratedStore { store, _ in
                let apiToken = try await ContainerStore(store: store).create(container: Self.container, label: "test", logger: TestSupport.logger)
                let key = SecretKey.generate()
                try await IdentityStore(store: store).trust(container: Self.container, TrustedIssuer(
                    issuer: IdentityTests.issuer, keySetURL: provider.url("/keys"), audiences: [Self.webClient], webClientID: Self.webClient,
                    authorizationURL: "https://login.issuer.example/authorize?response_mode=form_post", tokenURL: provider.url("/token"), clientSecret: secret),
                    sealingWith: key, logger: TestSupport.logger)
                // The row holds the secret only sealed; the exchange below opens it with the server's key.
                let plain = try await TestSupport.count(store, """
                    SELECT count(*)::bigint FROM trusted_issuers WHERE client_secret IS NOT NULL OR client_secret_sealed IS NULL
                       OR position(convert_to(\(secret), 'UTF8') IN client_secret_sealed) > 0
                    """)
                XCTAssertEqual(plain, 0, "the stored value is not the secret")
                var configuration = APIConfiguration(secretKey: key)
                configuration.keySets.allowPrivateAddresses = true
                configuration.publicURL = "https://cloud.example"
                let logs = ObserverProjectionTests.CapturedLogs()
                let logger = Logger(label: "code-flow-test") { _ in ObserverProjectionTests.CapturingLogHandler(logs: logs) }
                let router = buildRouter(APIDependencies(store: store, readiness: [], metrics: { "" }), configuration: configuration)
                try await Application(router: router, logger: logger).test(.router) { client in
                    func stored() async throws -> [Int64] {
                        var counts: [Int64] = []
                        for table in ["users", "linked_accounts", "sessions", "used_nonces"] {
                            counts.append(try await TestSupport.count(store, "SELECT count(*)::bigint FROM \(unescaped: table)"))
                        }
                        return counts
                    }
                    var origin = HTTPFields()
                    origin[.origin] = "https://app.example"
                    let needed = try await Self.call(
                        client, AuthTests.path("users/caller", database: "private", container: Self.container) + "?ckAPIToken=\(apiToken)", headers: origin)
                    let redirect = try XCTUnwrap(URLComponents(string: needed.json["redirectURL"] as? String ?? ""), needed.text)
                    let request = try XCTUnwrap(redirect.queryItems?.first { $0.name == "request" }?.value)
                    let callbackURL = "https://cloud.example/auth/1/\(Self.container)/signin/provider/callback"
                    // The button: a code request with an S256 challenge; the provider issues a code for it.
                    func authorize(_ code: String) async throws -> (state: String, challenge: String) {
                        let answer = try await Self.call(
                            client, "/auth/1/\(Self.container)/signin/provider?" + Self.form([("ckSignInRequest", request), ("issuer", IdentityTests.issuer)]))
                        XCTAssertEqual(answer.status, 302, answer.text)
                        let query = Dictionary(
                            (URLComponents(string: answer.headers[.location] ?? "")?.queryItems ?? []).map { ($0.name, $0.value ?? "") }, uniquingKeysWith: { $1 })
                        XCTAssertEqual(query["response_type"], "code")
                        XCTAssertEqual(query["code_challenge_method"], "S256")
                        XCTAssertNil(query["response_mode"], "the code comes back in the callback's query")
                        XCTAssertNil(query["code_verifier"], "the verifier never goes to the browser")
                        XCTAssertEqual(query["redirect_uri"], callbackURL)
                        let challenge = try XCTUnwrap(query["code_challenge"])
                        XCTAssertEqual(challenge.count, 43)
                        grants.withLock { $0[code] = Grant(challenge: challenge, nonce: query["nonce"] ?? "", redirectURL: callbackURL) }
                        return (try XCTUnwrap(query["state"]), challenge)
                    }
                    func back(_ fields: [(String, String)]) async throws -> Answer {
                        try await Self.call(client, "/auth/1/\(Self.container)/signin/provider/callback?" + Self.form(fields))
                    }
                    func refused(_ answer: Answer, _ reason: String, _ what: String) {
                        XCTAssertEqual(answer.status, 401, "\(what): \(answer.text)")
                        XCTAssertEqual(answer.json["serverErrorCode"] as? String, "AUTHENTICATION_FAILED", what)
                        XCTAssertTrue((answer.json["reason"] as? String ?? "").contains(reason), "\(what): \(answer.text)")
                    }
                    let first = try await authorize("code-1")
                    let second = try await authorize("code-2")
                    XCTAssertNotEqual(first.challenge, second.challenge, "each sign-in has its own verifier")
                    let before = try await stored()
                    let exchangesBefore = provider.requests.filter { $0.uri.hasPrefix("/token") }.count

                    // Hostile answers: nothing stored.
                    refused(try await back([("code", "code-1"), ("state", "2.e30.AAAA")]), "did not issue", "a forged state")
                    XCTAssertEqual(provider.requests.filter { $0.uri.hasPrefix("/token") }.count, exchangesBefore, "a forged state exchanges nothing")
                    refused(try await back([("code", "code-1"), ("state", second.state)]), "refused the authorization code", "a code for another sign-in (a wrong verifier)")
                    refused(try await back([("id_token", issuer.token(["aud": Self.webClient])), ("state", second.state)]), "no authorization code",
                            "an ID token in place of a code")
                    refused(try await back([("error", "access_denied"), ("state", second.state)]), "access_denied", "the provider's refusal")
                    let afterRefusals = try await stored()
                    XCTAssertEqual(afterRefusals, before, "refused answers store nothing")

                    // The good answer: exchanged with the verifier and the secret; the app's window gets the token.
                    let signedIn = try await back([("code", "code-2"), ("state", second.state)])
                    XCTAssertEqual(signedIn.status, 200, signedIn.text)
                    XCTAssertEqual(signedIn.headers[.cacheControl], "no-store")
                    let webToken = try XCTUnwrap(signedIn.text.firstMatch(of: /"ckWebAuthToken":"([^"]+)"/).map { String($0.1) }, signedIn.text)
                    let caller = try await Self.call(
                        client, AuthTests.path("users/caller", database: "private", container: Self.container) + "?ckAPIToken=\(apiToken)&ckWebAuthToken=\(webToken)")
                    XCTAssertEqual(caller.status, 200, caller.text)
                    let linked = try await TestSupport.count(store, "SELECT count(*)::bigint FROM linked_accounts WHERE subject = 'code-subject'")
                    XCTAssertEqual(linked, 1)
                    let exchange = try XCTUnwrap(provider.requests.last { $0.uri.hasPrefix("/token") })
                    let verifier = try XCTUnwrap(String(decoding: exchange.body, as: UTF8.self).firstMatch(of: /code_verifier=([A-Za-z0-9_-]{43})/).map { String($0.1) })
                    XCTAssertEqual(ProviderSignIn.codeChallenge(of: verifier), second.challenge)

                    // The same code again: the provider refuses it, and nothing more is stored.
                    let after = try await stored()
                    refused(try await back([("code", "code-2"), ("state", second.state)]), "refused the authorization code", "a replayed code")
                    let afterReplay = try await stored()
                    XCTAssertEqual(afterReplay, after, "a replay stores nothing")

                    let logged = logs.lines.withLock { $0.map { "\($0.message) \($0.metadata)" }.joined(separator: "\n") }
                    XCTAssertFalse(logged.contains(secret) || logged.contains(verifier), "neither the client secret nor the verifier is logged: \(logged)")
                }
            }
        }
    }

    /// A client secret stored before secrets were sealed is sealed by `stratus migrate` (and works
    /// until then); a secret sealed under another server key is a clear AUTHENTICATION_FAILED at
    /// the callback, with nothing exchanged, stored or logged of the secret, and an error logged
    /// for the operator; a secret given to the store without a key is refused.
    func testStoredClientSecretsAreSealedByMigrateAndAnotherKeyIsAClearError() async throws {
        try await TestSupport.withMigratedStore { store, url in
            let apiToken = try await ContainerStore(store: store).create(container: Self.container, label: "test", logger: TestSupport.logger)
            let identities = IdentityStore(store: store)
            let key = SecretKey.generate()
            let trusted = TrustedIssuer(
                issuer: IdentityTests.issuer, keySetURL: "https://issuer.example/keys", audiences: [Self.webClient], webClientID: Self.webClient,
                authorizationURL: "https://issuer.example/authorize", tokenURL: "https://issuer.example/token", clientSecret: "an old plain secret")
            do {
                try await identities.trust(container: Self.container, trusted, logger: TestSupport.logger)
                XCTFail("a secret without a key to seal it is refused")
            } catch let error as StratusError {
                XCTAssertTrue(error.reason.contains("stored only sealed"), error.reason)
            }
            let nothing = try await identities.trustedIssuers(container: Self.container, logger: TestSupport.logger)
            XCTAssertEqual(nothing.count, 0, "nothing stored")

            // A row as it was before migration 0049: the secret in plain text.
            var publicClient = trusted
            publicClient.clientSecret = nil
            try await identities.trust(container: Self.container, publicClient, logger: TestSupport.logger)
            _ = try await TestSupport.count(store, "WITH u AS (UPDATE trusted_issuers SET client_secret = 'an old plain secret' RETURNING 1) SELECT count(*)::bigint FROM u")
            let foundLegacy = try await identities.trustedIssuer(container: Self.container, issuer: IdentityTests.issuer, logger: TestSupport.logger)
            let legacy = try XCTUnwrap(foundLegacy)
            XCTAssertEqual(try legacy.openClientSecret(container: Self.container, key: key), "an old plain secret", "used as it is until sealed")
            let configuration = try StratusConfiguration.fromEnvironment(["STRATUS_DATABASE_URL": url, "STRATUS_SECRET_KEY": key.hex])
            _ = try await Admin.migrate(configuration, logger: TestSupport.logger)
            let plain = try await TestSupport.count(store, """
                SELECT count(*)::bigint FROM trusted_issuers WHERE client_secret IS NOT NULL OR client_secret_sealed IS NULL
                   OR position(convert_to('an old plain secret', 'UTF8') IN client_secret_sealed) > 0
                """)
            XCTAssertEqual(plain, 0, "migrate sealed the plain-text secret and emptied its column")
            let foundSealed = try await identities.trustedIssuer(container: Self.container, issuer: IdentityTests.issuer, logger: TestSupport.logger)
            let sealed = try XCTUnwrap(foundSealed)
            XCTAssertNil(sealed.clientSecret)
            XCTAssertEqual(try sealed.openClientSecret(container: Self.container, key: key), "an old plain secret")
            let again = try await identities.sealPlainClientSecrets(key: key, logger: TestSupport.logger)
            XCTAssertEqual(again, 0, "nothing left to seal")

            // A server with another key: the callback refuses clearly before any exchange.
            var other = APIConfiguration(secretKey: SecretKey.generate())
            other.publicURL = "https://cloud.example"
            let logs = ObserverProjectionTests.CapturedLogs()
            let logger = Logger(label: "sealed-secret-test") { _ in ObserverProjectionTests.CapturingLogHandler(logs: logs) }
            let router = buildRouter(APIDependencies(store: store, readiness: [], metrics: { "" }), configuration: other)
            try await Application(router: router, logger: logger).test(.router) { client in
                let needed = try await Self.call(client, AuthTests.path("users/caller", database: "private", container: Self.container) + "?ckAPIToken=\(apiToken)")
                let redirect = try XCTUnwrap(URLComponents(string: needed.json["redirectURL"] as? String ?? ""), needed.text)
                let request = try XCTUnwrap(redirect.queryItems?.first { $0.name == "request" }?.value)
                let start = try await Self.call(
                    client, "/auth/1/\(Self.container)/signin/provider?" + Self.form([("ckSignInRequest", request), ("issuer", IdentityTests.issuer)]))
                XCTAssertEqual(start.status, 302, start.text)
                let state = try XCTUnwrap(URLComponents(string: start.headers[.location] ?? "")?.queryItems?.first { $0.name == "state" }?.value)
                let users = try await TestSupport.count(store, "SELECT count(*)::bigint FROM users")
                let answer = try await Self.call(client, "/auth/1/\(Self.container)/signin/provider/callback?" + Self.form([("code", "a-code"), ("state", state)]))
                XCTAssertEqual(answer.status, 401, answer.text)
                XCTAssertEqual(answer.json["serverErrorCode"] as? String, "AUTHENTICATION_FAILED", answer.text)
                XCTAssertTrue((answer.json["reason"] as? String ?? "").contains("does not open with this server's key"), answer.text)
                XCTAssertFalse(answer.text.contains("an old plain secret"))
                let usersAfter = try await TestSupport.count(store, "SELECT count(*)::bigint FROM users")
                XCTAssertEqual(usersAfter, users, "nothing stored")
                XCTAssertEqual(logs.count(.error, "a trusted issuer's client secret does not open with this server's key"), 1, "the operator is told")
                let logged = logs.lines.withLock { $0.map { "\($0.message) \($0.metadata)" }.joined(separator: "\n") }
                XCTAssertFalse(logged.contains("an old plain secret"), logged)
            }
        }
    }

    func testCrossOriginCallsAreAllowedPerContainer() async throws {
        try await TestSupport.withMigratedStore { store, _ in
            let containers = ContainerStore(store: store)
            let openToken = try await containers.create(container: "iCloud.com.example.open", label: "open", logger: TestSupport.logger)
            _ = try await containers.create(container: "iCloud.com.example.listed", label: "listed", logger: TestSupport.logger)
            try await containers.setAllowedOrigins(
                container: "iCloud.com.example.listed", origins: try AllowedOrigins.validated(["https://app.example"]), logger: TestSupport.logger)
            let router = buildRouter(APIDependencies(store: store, readiness: [], metrics: { "" }), configuration: APIConfiguration(secretKey: SecretKey.generate()))
            try await Application(router: router, logger: TestSupport.logger).test(.router) { client in
                func headers(_ origin: String?, preflight: Bool = false) -> HTTPFields {
                    var fields = HTTPFields()
                    if let origin { fields[.origin] = origin }
                    if preflight {
                        fields[.accessControlRequestMethod] = "POST"
                        fields[.accessControlRequestHeaders] = "content-type"
                    }
                    return fields
                }
                let caller = { (container: String) in AuthTests.path("users/caller", database: "private", container: container) }
                // Any origin, by default: the preflight, and the answer, an error included.
                let preflight = try await Self.call(client, caller("iCloud.com.example.open") + "?ckAPIToken=\(openToken)", method: .options,
                                                    headers: headers("https://anywhere.example", preflight: true))
                XCTAssertEqual(preflight.status, 204, preflight.text)
                XCTAssertEqual(preflight.headers[.accessControlAllowOrigin], "https://anywhere.example")
                XCTAssertTrue(preflight.headers[.accessControlAllowMethods]?.contains("POST") == true)
                XCTAssertTrue(preflight.headers[.accessControlAllowHeaders]?.contains("Content-Type") == true)
                XCTAssertEqual(preflight.headers[.vary], "Origin")
                let needed = try await Self.call(client, caller("iCloud.com.example.open") + "?ckAPIToken=\(openToken)", headers: headers("https://anywhere.example"))
                XCTAssertEqual(needed.status, 421, "an error answer carries the headers, so the page can read redirectURL")
                XCTAssertEqual(needed.headers[.accessControlAllowOrigin], "https://anywhere.example")
                XCTAssertTrue(needed.headers[.accessControlExposeHeaders]?.contains("X-Request-ID") == true)
                // A container that lists origins: those only.
                let listed = try await Self.call(client, caller("iCloud.com.example.listed"), method: .options, headers: headers("https://app.example", preflight: true))
                XCTAssertEqual(listed.status, 204)
                XCTAssertEqual(listed.headers[.accessControlAllowOrigin], "https://app.example")
                let other = try await Self.call(client, caller("iCloud.com.example.listed"), method: .options, headers: headers("https://evil.example", preflight: true))
                XCTAssertEqual(other.status, 403, other.text)
                XCTAssertEqual(other.json["serverErrorCode"] as? String, "ACCESS_DENIED")
                XCTAssertTrue((other.json["reason"] as? String ?? "").contains("https://evil.example"), other.text)
                XCTAssertNil(other.headers[.accessControlAllowOrigin])
                let simple = try await Self.call(client, caller("iCloud.com.example.listed"), headers: headers("https://evil.example"))
                XCTAssertNil(simple.headers[.accessControlAllowOrigin], "a simple request from another origin gets no CORS headers")
                // An unknown container allows no origin; no Origin, the console: no CORS headers.
                let unknown = try await Self.call(client, caller("iCloud.com.example.none"), method: .options, headers: headers("https://app.example", preflight: true))
                XCTAssertEqual(unknown.status, 403, unknown.text)
                let plain = try await Self.call(client, caller("iCloud.com.example.open") + "?ckAPIToken=\(openToken)")
                XCTAssertNil(plain.headers[.accessControlAllowOrigin])
                let console = try await Self.call(client, "/health", headers: headers("https://app.example"))
                XCTAssertNil(console.headers[.accessControlAllowOrigin])
                // Asset URLs carry their own grant: any origin.
                let asset = try await Self.call(client, "/assets/1/upload/x", method: .options, headers: headers("https://app.example", preflight: true))
                XCTAssertEqual(asset.status, 204)
            }
        }
    }
}
