import _CryptoExtras
import Crypto
import Foundation
import Hummingbird
import HummingbirdTesting
import StratusAPI
import StratusCore
import StratusPostgres
import StratusPushTestSupport
import StratusTesting
import Synchronization
import XCTest

/// ID-token sign-in and sessions over HTTP against the real PostgreSQL, with a real key set (JWKS)
/// endpoint on a loopback port serving keys this test makes (RS256 and ES256).
final class IdentityTests: XCTestCase {
    typealias Body = [String: Any]
    static let container = "iCloud.com.example.identity"
    static let issuer = "https://issuer.example"
    static let audience = "com.example.app"

    /// An issuer of this test's: its signing keys by key id, and the key set it serves.
    final class TestIssuer: Sendable {
        enum SigningKey: Sendable {
            case rsa(_RSA.Signing.PrivateKey)
            /// A P-256 key's raw representation (the key type itself is not Sendable).
            case p256(Data)

            static func newP256() -> SigningKey { .p256(P256.Signing.PrivateKey().rawRepresentation) }
        }

        private let keys = Mutex<[String: SigningKey]>([:])
        /// What the key set URL answers instead of the keys, when set.
        let reply = Mutex<ReceiverReply?>(nil)

        init() {
            add("r1", .rsa(try! _RSA.Signing.PrivateKey(keySize: .bits2048)))
            add("e1", .newP256())
        }

        func add(_ kid: String, _ key: SigningKey) { keys.withLock { $0[kid] = key } }

        /// The key set document.
        var keySet: String {
            let entries: [[String: String]] = keys.withLock { keys in
                keys.map { kid, key in
                    switch key {
                    case .rsa(let key):
                        let primitives = try! key.publicKey.getKeyPrimitives()
                        return ["kty": "RSA", "kid": kid, "alg": "RS256", "use": "sig",
                                "n": Base64URL.encode(primitives.modulus), "e": Base64URL.encode(primitives.publicExponent)]
                    case .p256(let raw):
                        let point = try! P256.Signing.PrivateKey(rawRepresentation: raw).publicKey.rawRepresentation
                        return ["kty": "EC", "kid": kid, "crv": "P-256", "x": Base64URL.encode(point.prefix(32)), "y": Base64URL.encode(point.suffix(32))]
                    }
                }
            }
            return String(decoding: try! JSONSerialization.data(withJSONObject: ["keys": entries]), as: UTF8.self)
        }

        /// A token: `claims` over the defaults, signed by `signer` (default: the key `kid` names).
        func token(kid: String = "r1", alg: String? = nil, signer: SigningKey? = nil, _ claims: Body = [:]) -> String {
            let now = Int(Date().timeIntervalSince1970)
            var payload: Body = [
                "iss": IdentityTests.issuer, "sub": "subject-1", "aud": IdentityTests.audience, "iat": now, "exp": now + 600,
                "nonce": IDTokenRules.hashedNonce("nonce-1"), "email": "ada@privaterelay.appleid.com", "email_verified": "true",
                "is_private_email": "true",
            ]
            for (name, value) in claims { payload[name] = value is NSNull ? nil : value }
            guard let key = signer ?? keys.withLock({ $0[kid] }) else { fatalError("no key \(kid)") }
            let algorithm: String = if case .rsa = key { "RS256" } else { "ES256" }
            let header = ["alg": alg ?? algorithm, "kid": kid]
            let input = [header as Body, payload].map { Base64URL.encode(try! JSONSerialization.data(withJSONObject: $0)) }.joined(separator: ".")
            switch key {
            case .rsa(let key):
                let signature = try! key.signature(for: SHA256.hash(data: Data(input.utf8)), padding: .insecurePKCS1v1_5)
                return input + "." + Base64URL.encode(signature.rawRepresentation)
            case .p256(let raw):
                let key = try! P256.Signing.PrivateKey(rawRepresentation: raw)
                return input + "." + Base64URL.encode(try! key.signature(for: Data(input.utf8)).rawRepresentation)
            }
        }
    }

    struct Fixture: Sendable {
        let store: PostgresStore
        let url: String
        let apiToken: String
        let issuer: TestIssuer
        let keys: WebhookReceiver
        let client: any TestClientProtocol

        func send(_ uri: String, method: HTTPRequest.Method = .post, _ body: Body? = nil) async throws -> (Int, Body) {
            try await AuthTests.send(client, uri, method: method, body: body.map { try AuthTests.json($0) } ?? Data())
        }

        /// Signs in with an ID token and nonce.
        func signIn(_ token: String, nonce: String? = "nonce-1", extra: Body = [:]) async throws -> (Int, Body) {
            var body: Body = ["idToken": token]
            if let nonce { body["nonce"] = nonce }
            for (name, value) in extra { body[name] = value }
            return try await send("/auth/1/\(IdentityTests.container)/signin/idtoken?ckAPIToken=\(apiToken)", body)
        }

        /// A call with the app's API token and a user's web auth token.
        func asUser(_ webToken: String, _ path: String, method: HTTPRequest.Method = .post, _ body: Body? = nil) async throws -> (Int, Body) {
            try await send("/auth/1/\(IdentityTests.container)/\(path)?ckAPIToken=\(apiToken)&ckWebAuthToken=\(webToken)", method: method, body)
        }

        /// `users/caller` in the private database with a web auth token.
        func caller(_ webToken: String) async throws -> (Int, Body) {
            try await send(AuthTests.path("users/caller", database: "private", container: IdentityTests.container) + "?ckAPIToken=\(apiToken)&ckWebAuthToken=\(webToken)", method: .get)
        }

        /// Rows of each table a sign-in writes.
        func stored() async throws -> [Int64] {
            var counts: [Int64] = []
            for table in ["users", "linked_accounts", "sessions", "used_nonces"] {
                counts.append(try await TestSupport.count(store, "SELECT count(*)::bigint FROM \(unescaped: table)"))
            }
            return counts
        }

        var fetches: Int { keys.requests.count }
    }

    /// A router over a fresh database with one container trusting the test's issuer, whose key set
    /// a loopback server serves (`allowPrivate`: the setting that lets Stratus fetch from it).
    func withFixture(
        allowPrivate: Bool = true, keySetURL: (@Sendable (Int) -> String)? = nil, configure: @Sendable (inout APIConfiguration) -> Void = { _ in },
        _ body: @Sendable (Fixture) async throws -> Void
    ) async throws {
        let issuer = TestIssuer()
        try await WebhookReceiver.with(reply: { _ in issuer.reply.withLock { $0 } ?? .answer(status: 200, headers: [("Content-Type", "application/json")], body: issuer.keySet) }) { keys in
            try await TestSupport.withMigratedStore { store, url in
                let token = try await ContainerStore(store: store).create(container: Self.container, label: "test", logger: TestSupport.logger)
                try await IdentityStore(store: store).trust(
                    container: Self.container,
                    TrustedIssuer(issuer: Self.issuer, keySetURL: keySetURL?(keys.port) ?? keys.url("/keys"), audiences: [Self.audience, "web.example"]),
                    logger: TestSupport.logger)
                var configuration = APIConfiguration(secretKey: SecretKey.generate())
                configuration.keySets.allowPrivateAddresses = allowPrivate
                configure(&configuration)
                let router = buildRouter(APIDependencies(store: store, readiness: [], metrics: { "" }), configuration: configuration)
                try await Application(router: router, logger: TestSupport.logger).test(.router) { client in
                    try await body(Fixture(store: store, url: url, apiToken: token, issuer: issuer, keys: keys, client: client))
                }
            }
        }
    }

    static func assertRefused(_ answer: (Int, Body), status: Int = 401, code: String = "AUTHENTICATION_FAILED", _ reason: String, _ what: String) {
        XCTAssertEqual(answer.0, status, "\(what): \(answer.1)")
        XCTAssertEqual(answer.1["serverErrorCode"] as? String, code, what)
        XCTAssertTrue((answer.1["reason"] as? String ?? "").contains(reason), "\(what): \(answer.1)")
    }

    func testGoodTokensSignInAndFindTheSameUserAndBadOnesStoreNothing() async throws {
        try await withFixture { fixture in
            let issuer = fixture.issuer
            let now = Int(Date().timeIntervalSince1970)
            let stranger = TestIssuer.SigningKey.rsa(try _RSA.Signing.PrivateKey(keySize: .bits2048))
            let unsigned = issuer.token().split(separator: ".").prefix(2).joined(separator: ".")
            let noneHeader = Base64URL.encode(Data(#"{"alg":"none","kid":"r1"}"#.utf8))
            let cases: [(String, String, String?, Int, String, String)] = [
                ("expired", issuer.token(["exp": now - 120, "iat": now - 720]), "nonce-1", 401, "AUTHENTICATION_FAILED", "expired"),
                ("not yet valid", issuer.token(["nbf": now + 600]), "nonce-1", 401, "AUTHENTICATION_FAILED", "not valid yet"),
                ("wrong audience", issuer.token(["aud": "com.other.app"]), "nonce-1", 401, "AUTHENTICATION_FAILED", "not to a client id"),
                ("wrong issuer", issuer.token(["iss": "https://other.example"]), "nonce-1", 401, "AUTHENTICATION_FAILED", "is not trusted by this container"),
                ("bad signature", issuer.token(kid: "r1", signer: stranger), "nonce-1", 401, "AUTHENTICATION_FAILED", "signature is not valid"),
                ("alg none", noneHeader + "." + unsigned.split(separator: ".")[1] + ".", "nonce-1", 401, "AUTHENTICATION_FAILED", "'none'"),
                ("ES256 token claiming RS256", issuer.token(kid: "e1", alg: "RS256"), "nonce-1", 401, "AUTHENTICATION_FAILED", "not a key for RS256"),
                ("other nonce", issuer.token(), "nonce-2", 401, "AUTHENTICATION_FAILED", "does not match"),
                ("no nonce", issuer.token(), nil, 400, "BAD_REQUEST", "nonce is required"),
                ("garbage", "a.b", "nonce-1", 401, "AUTHENTICATION_FAILED", "three"),
            ]
            for (what, token, nonce, status, code, reason) in cases {
                Self.assertRefused(try await fixture.signIn(token, nonce: nonce), status: status, code: code, reason, what)
            }
            XCTAssertEqual(fixture.fetches, 1, "the key set is fetched once and kept")

            // An unknown key id fetches the set again once, then is refused; within the refetch
            // interval it (or any other unknown key id) is refused without another fetch.
            let unknown = issuer.token(kid: "x1", signer: .newP256())
            Self.assertRefused(try await fixture.signIn(unknown), "not in the issuer's key set", "unknown kid")
            XCTAssertEqual(fixture.fetches, 2, "fetched again once for the unknown key id")
            Self.assertRefused(try await fixture.signIn(unknown), "not in the issuer's key set", "unknown kid again")
            Self.assertRefused(try await fixture.signIn(issuer.token(kid: "x2", signer: .newP256())), "not in the issuer's key set", "another unknown kid")
            XCTAssertEqual(fixture.fetches, 2, "no further fetch within the refetch interval")
            let observed1 = try await fixture.stored()
            XCTAssertEqual(observed1, [0, 0, 0, 0], "refused sign-ins store nothing")

            // RS256: a good token signs in and creates the user, with the claims' email.
            let first = issuer.token()
            let (status, answer) = try await fixture.signIn(first, extra: ["givenName": "Ada", "familyName": "Lovelace"])
            XCTAssertEqual(status, 200, "\(answer)")
            XCTAssertEqual(answer["created"] as? Bool, true)
            let user = try XCTUnwrap(answer["userRecordName"] as? String)
            let webToken = try XCTUnwrap(answer["ckWebAuthToken"] as? String)
            let (callerStatus, caller) = try await fixture.caller(webToken)
            XCTAssertEqual(callerStatus, 200, "\(caller)")
            XCTAssertEqual(caller["userRecordName"] as? String, user)
            let identity = try await UserDirectory(store: fixture.store).identity(container: Self.container, userRecordName: user, logger: TestSupport.logger)
            XCTAssertEqual(identity?.emailAddress, "ada@privaterelay.appleid.com")
            XCTAssertEqual(identity?.nameComponents, NameComponents(givenName: "Ada", familyName: "Lovelace"))

            // The same token again: its nonce is used; nothing more is stored.
            Self.assertRefused(try await fixture.signIn(first), "used before", "replayed nonce")
            let observed2 = try await fixture.stored()
            XCTAssertEqual(observed2, [1, 1, 1, 1])

            // A second sign-in (a new token, a new nonce) finds the same user.
            let (againStatus, again) = try await fixture.signIn(issuer.token(["nonce": "nonce-3"]), nonce: "nonce-3")
            XCTAssertEqual(againStatus, 200, "\(again)")
            XCTAssertEqual(again["userRecordName"] as? String, user)
            XCTAssertEqual(again["created"] as? Bool, false)

            // ES256, another account: another user.
            let (esStatus, es) = try await fixture.signIn(issuer.token(kid: "e1", ["sub": "subject-2", "nonce": "nonce-4"]), nonce: "nonce-4")
            XCTAssertEqual(esStatus, 200, "\(es)")
            XCTAssertEqual(es["created"] as? Bool, true)
            XCTAssertNotEqual(es["userRecordName"] as? String, user)
            let observed3 = try await fixture.stored()
            XCTAssertEqual(observed3, [2, 2, 3, 3])
            XCTAssertEqual(fixture.fetches, 2, "known keys are served from the kept set")
        }
    }

    func testIDTokenSignInIsThrottledByTheSignInLimiter() async throws {
        try await withFixture(configure: { $0.signInLimits.perAddress = 3 }) { fixture in
            let issuer = fixture.issuer
            let now = Int(Date().timeIntervalSince1970)
            // Three refused tokens use up the client's attempts ...
            let refused: [(Body, String)] = [
                (["exp": now - 120, "iat": now - 720], "expired"), (["aud": "com.other.app"], "not to a client id"),
                (["iss": "https://other.example"], "is not trusted by this container"),
            ]
            for (claims, reason) in refused {
                Self.assertRefused(try await fixture.signIn(issuer.token(claims)), reason, reason)
            }
            // ... so a good one is throttled before it is checked, and stores nothing.
            let (status, answer) = try await fixture.signIn(issuer.token())
            XCTAssertEqual(status, 429, "\(answer)")
            XCTAssertEqual(answer["serverErrorCode"] as? String, "THROTTLED")
            XCTAssertGreaterThan(answer["retryAfter"] as? Int ?? 0, 0)
            let stored = try await fixture.stored()
            XCTAssertEqual(stored, [0, 0, 0, 0])
        }
        // A successful sign-in gives its attempt back: signing in again and again is never throttled.
        try await withFixture(configure: { $0.signInLimits.perAddress = 2 }) { fixture in
            for index in 0..<4 {
                let nonce = "nonce-ok-\(index)"
                let (status, answer) = try await fixture.signIn(fixture.issuer.token(["nonce": nonce]), nonce: nonce)
                XCTAssertEqual(status, 200, "sign-in \(index): \(answer)")
            }
        }
    }

    func testLinkingASecondAccountIsExplicit() async throws {
        try await withFixture { fixture in
            let users = UserStore(store: fixture.store, rounds: 1000)
            let bob = try await users.create(container: Self.container, login: "bob", password: "bob's password", logger: TestSupport.logger)
            _ = try await users.create(container: Self.container, login: "eve", password: "eve's password", logger: TestSupport.logger)
            func passwordToken(_ login: String, _ password: String) async throws -> String {
                let (_, answer) = try await fixture.send("/auth/1/\(Self.container)/signin?ckAPIToken=\(fixture.apiToken)", ["login": login, "password": password])
                return try XCTUnwrap(answer["ckWebAuthToken"] as? String, "\(answer)")
            }
            let bobToken = try await passwordToken("bob", "bob's password")

            // Linking needs a signed-in user.
            let unsigned = try await fixture.send(
                "/auth/1/\(Self.container)/link/idtoken?ckAPIToken=\(fixture.apiToken)", ["idToken": fixture.issuer.token(), "nonce": "nonce-1"])
            Self.assertRefused(unsigned, "ckWebAuthToken", "link without a user")
            // Signed in: the account is linked to Bob.
            let (linkStatus, linked) = try await fixture.asUser(bobToken, "link/idtoken", ["idToken": fixture.issuer.token(), "nonce": "nonce-1"])
            XCTAssertEqual(linkStatus, 200, "\(linked)")
            XCTAssertEqual(linked["linked"] as? Bool, true)
            // Signing in with the account now finds Bob; the issuer has rotated in a new key, which
            // fetching the set again finds.
            XCTAssertEqual(fixture.fetches, 1)
            fixture.issuer.add("r2", .rsa(try _RSA.Signing.PrivateKey(keySize: .bits2048)))
            let (status, signedIn) = try await fixture.signIn(fixture.issuer.token(kid: "r2", ["nonce": "nonce-2"]), nonce: "nonce-2")
            XCTAssertEqual(fixture.fetches, 2)
            XCTAssertEqual(status, 200, "\(signedIn)")
            XCTAssertEqual(signedIn["userRecordName"] as? String, bob)
            XCTAssertEqual(signedIn["created"] as? Bool, false)
            // Linking it again changes nothing; Eve cannot take it.
            let (againStatus, again) = try await fixture.asUser(bobToken, "link/idtoken", ["idToken": fixture.issuer.token(["nonce": "nonce-3"]), "nonce": "nonce-3"])
            XCTAssertEqual(againStatus, 200, "\(again)")
            XCTAssertEqual(again["linked"] as? Bool, false)
            let eveToken = try await passwordToken("eve", "eve's password")
            let taken = try await fixture.asUser(eveToken, "link/idtoken", ["idToken": fixture.issuer.token(["nonce": "nonce-4"]), "nonce": "nonce-4"])
            Self.assertRefused(taken, status: 409, code: "EXISTS", "already linked to another user", "Eve takes Bob's account")
            let observed4 = try await TestSupport.count(fixture.store, "SELECT count(*)::bigint FROM linked_accounts")
            XCTAssertEqual(observed4, 1)
            let observed5 = try await TestSupport.count(fixture.store, "SELECT count(*)::bigint FROM used_nonces")
            XCTAssertEqual(observed5, 3, "a refused link uses no nonce")
        }
    }

    func testKeySetsAreFetchedOnlyFromAllowedAddressesAndNeverThroughARedirect() async throws {
        // Not allowed to reach private addresses: a loopback key set is refused before any request.
        try await withFixture(allowPrivate: false, keySetURL: { "https://127.0.0.1:\($0)/keys" }) { fixture in
            Self.assertRefused(try await fixture.signIn(fixture.issuer.token()), "private or loopback address", "loopback JWKS")
            XCTAssertEqual(fixture.fetches, 0)
            let observed6 = try await fixture.stored()
            XCTAssertEqual(observed6, [0, 0, 0, 0])
        }
        try await withFixture(allowPrivate: false) { fixture in
            Self.assertRefused(try await fixture.signIn(fixture.issuer.token()), "must use https", "plain http JWKS")
            XCTAssertEqual(fixture.fetches, 0)
        }
        // A redirect is not followed; an oversized key set is refused.
        try await withFixture { fixture in
            fixture.issuer.reply.withLock { $0 = .answer(status: 302, headers: [("Location", fixture.keys.url("/elsewhere"))]) }
            Self.assertRefused(try await fixture.signIn(fixture.issuer.token()), status: 503, code: "TRY_AGAIN_LATER", "HTTP 302", "redirect")
            XCTAssertEqual(fixture.keys.requests.map(\.uri), ["/keys"])
            fixture.issuer.reply.withLock { $0 = .answer(status: 200, body: String(repeating: " ", count: KeySet.maxBytes + 1)) }
            Self.assertRefused(try await fixture.signIn(fixture.issuer.token()), "larger than", "oversized key set")
            let observed7 = try await fixture.stored()
            XCTAssertEqual(observed7, [0, 0, 0, 0])
        }
    }

    // MARK: Sessions across API processes

    func testSessionsAreListedAndRevokedAtOnceOnEveryAPIProcess() async throws {
        try await TestSupport.withMigratedStore { store, url in
            let apiToken = try await ContainerStore(store: store).create(container: Self.container, label: "test", logger: TestSupport.logger)
            let users = UserStore(store: store, rounds: 1000)
            let ada = try await users.create(container: Self.container, login: "ada", password: "ada's password", logger: TestSupport.logger)
            var configuration = APIConfiguration(secretKey: SecretKey.generate())
            configuration.port = 0
            // Cached answers live a minute: only the revocation's notification can end them in time.
            configuration.authCacheTTL = .seconds(60)
            let secretKey = configuration.secretKey
            let settings = configuration
            let first = buildApplication(APIDependencies(store: store, readiness: [], metrics: { "" }), configuration: configuration, services: [], logger: TestSupport.logger)
            try await TestSupport.withStore(url: url) { otherStore in
                let second = buildApplication(
                    APIDependencies(store: otherStore, readiness: [], metrics: { "" }), configuration: settings, services: [], logger: TestSupport.logger)
                try await first.test(.live) { a in
                    try await second.test(.live) { b in
                        let base = "/auth/1/\(Self.container)"
                        func call(_ client: any TestClientProtocol, _ path: String, _ token: String, method: HTTPRequest.Method = .post, _ body: Body? = nil) async throws -> (Int, Body) {
                            try await AuthTests.send(client, "\(base)/\(path)?ckAPIToken=\(apiToken)&ckWebAuthToken=\(token)", method: method, body: body.map { try AuthTests.json($0) } ?? Data())
                        }
                        func caller(_ client: any TestClientProtocol, _ token: String) async throws -> (Int, Body) {
                            try await AuthTests.send(
                                client, AuthTests.path("users/caller", database: "private", container: Self.container) + "?ckAPIToken=\(apiToken)&ckWebAuthToken=\(token)",
                                method: .get, body: Data())
                        }
                        var tokens: [String] = []
                        var sessionIDs: [String] = []
                        for _ in 0..<3 {
                            let (status, answer) = try await AuthTests.send(
                                a, "\(base)/signin?ckAPIToken=\(apiToken)", body: try AuthTests.json(["login": "ada", "password": "ada's password"]))
                            XCTAssertEqual(status, 200, "\(answer)")
                            tokens.append(try XCTUnwrap(answer["ckWebAuthToken"] as? String))
                            sessionIDs.append(try XCTUnwrap(answer["sessionID"] as? String))
                        }
                        // Every token works on the second process, which now keeps the answers.
                        for token in tokens {
                            let status = try await caller(b, token).0
                            XCTAssertEqual(status, 200)
                        }

                        // The user lists the sessions, newest first, the current one marked.
                        let (listStatus, list) = try await call(a, "sessions", tokens[0], method: .get)
                        XCTAssertEqual(listStatus, 200, "\(list)")
                        let listed = try XCTUnwrap(list["sessions"] as? [Body])
                        XCTAssertEqual(Set(listed.compactMap { $0["sessionID"] as? String }), Set(sessionIDs))
                        XCTAssertEqual(listed.filter { $0["current"] as? Bool == true }.compactMap { $0["sessionID"] as? String }, [sessionIDs[0]])
                        XCTAssertTrue(listed.allSatisfy { $0["active"] as? Bool == true && $0["method"] as? String == "password" })

                        // Revoking one on the first process ends its token on the second at once.
                        let (revokeStatus, revoked) = try await call(a, "sessions/revoke", tokens[0], ["sessionID": sessionIDs[1]])
                        XCTAssertEqual(revokeStatus, 200, "\(revoked)")
                        try await TestSupport.eventually(timeout: .seconds(20), "the revoked session's token to be refused on the other process") {
                            let (status, answer) = try await caller(b, tokens[1])
                            guard status != 200 else { return false }
                            Self.assertRefused((status, answer), "session was signed out", "revoked session")
                            return true
                        }
                        let observed8 = try await caller(b, tokens[0]).0
                        XCTAssertEqual(observed8, 200, "the other sessions go on")
                        Self.assertRefused(try await call(a, "sessions/revoke", tokens[0], ["sessionID": String(repeating: "0", count: 32)]), status: 404, code: "NOT_FOUND", "no session", "unknown")
                        Self.assertRefused(try await call(a, "sessions/revoke", tokens[0], ["sessionID": "x'; --"]), status: 400, code: "BAD_REQUEST", "32 lowercase hex", "malformed")

                        // Signing out on the second process ends that token on the first.
                        let observed9 = try await caller(a, tokens[2]).0
                        XCTAssertEqual(observed9, 200)
                        let observed10 = try await call(b, "signout", tokens[2]).0
                        XCTAssertEqual(observed10, 200)
                        try await TestSupport.eventually(timeout: .seconds(20), "the signed-out token to be refused on the first process") {
                            try await caller(a, tokens[2]).0 == 401
                        }

                        // Signing out everywhere ends the rest, a token minted without a session too.
                        let minted = WebAuthToken(
                            userRecordName: ada, container: Self.container, expiresAt: Int64(Date().timeIntervalSince1970) + 3600,
                            credentialEpoch: try await users.credentialEpoch(container: Self.container, userRecordName: ada, logger: TestSupport.logger)
                        ).signed(with: secretKey)
                        let observed11 = try await caller(b, minted).0
                        XCTAssertEqual(observed11, 200)
                        let (everywhereStatus, everywhere) = try await call(a, "signout/everywhere", tokens[0])
                        XCTAssertEqual(everywhereStatus, 200, "\(everywhere)")
                        XCTAssertEqual(everywhere["revokedSessions"] as? Int, 1)
                        try await TestSupport.eventually(timeout: .seconds(20), "every token to be refused on the second process") {
                            let codes = [try await caller(b, tokens[0]).0, try await caller(b, minted).0]
                            return codes == [401, 401]
                        }
                        let sessions = try await SessionStore(store: store).list(container: Self.container, userRecordName: ada, logger: TestSupport.logger)
                        XCTAssertEqual(sessions.count, 3)
                        XCTAssertTrue(sessions.allSatisfy { $0.revokedAt != nil })
                    }
                }
            }
        }
    }
}
