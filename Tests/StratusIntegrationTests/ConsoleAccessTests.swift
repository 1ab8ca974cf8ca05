import Crypto
import Foundation
import Hummingbird
import HummingbirdTesting
import Logging
import PostgresNIO
import StratusAPI
import StratusCore
import StratusPostgres
import StratusRuntime
import StratusTesting
import XCTest

/// The console's access page over HTTP against the real PostgreSQL: API tokens made (shown once)
/// and revoked, server-to-server keys registered and revoked, directory users listed and added —
/// each change seen by the API at once.
final class ConsoleAccessTests: XCTestCase {
    typealias Browser = ConsoleAuthTests.Browser
    static let container = ConsoleDataTests.container

    static func form(_ csrf: String, _ fields: [String: String] = [:]) -> [String: String] {
        fields.merging(["csrf": csrf, "container": container]) { $1 }
    }

    func testTokensKeysAndUsersAreMadeAndRevokedFromTheAccessPage() async throws {
        try await RecordAPITests.withAPI { fixture, client in
            let browser = Browser(client)
            let csrf = try await ConsoleDataTests.signIn(browser, store: fixture.store)
            let chooser = try await browser.request("/console/containers/\(Self.container)")
            XCTAssertTrue(chooser.html.contains("href=\"/console/access?container=\(Self.container)\""), chooser.html)
            let page = try await browser.request("/console/access?container=\(Self.container)")
            XCTAssertEqual(page.status, 200, page.html)
            XCTAssertEqual(page.html.components(separatedBy: "/console/access/tokens/revoke").count - 1, 1, "the fixture's token is listed")
            XCTAssertFalse(page.html.contains(fixture.apiToken), "a token is never listed, only its digest")

            // A new API token: shown once, works at once.
            let forged = try await browser.request("/console/access/tokens/create", method: .post, form: ["container": Self.container, "label": "x"])
            XCTAssertEqual(forged.status, 403)
            let created = try await browser.request("/console/access/tokens/create", method: .post, form: Self.form(csrf, ["label": "web <app>"]))
            XCTAssertEqual(created.status, 201, created.html)
            let token = try XCTUnwrap(created.html.range(of: "<code id=\"new-token\">[0-9a-f]{64}</code>", options: .regularExpression).map {
                String(created.html[$0].dropFirst("<code id=\"new-token\">".count).prefix(64))
            })
            XCTAssertTrue(created.html.contains("web &lt;app&gt;"))
            let again = try await browser.request("/console/access?container=\(Self.container)")
            XCTAssertFalse(again.html.contains(token), "the token is not shown again")
            let path = "/database/1/\(Self.container)/development/public/records/query?ckAPIToken=\(token)"
            let body: [String: Any] = ["query": ["recordType": "Note"]]
            let (works, _) = try await RecordAPITests.post(client, path, body)
            XCTAssertEqual(works, 200)

            // Revoked: the API refuses it from now on.
            let digest = SHA256.hash(data: Data(token.utf8)).map { String(format: "%02x", $0) }.joined()
            let revoked = try await browser.request("/console/access/tokens/revoke", method: .post, form: Self.form(csrf, ["digest": digest]))
            XCTAssertEqual(revoked.status, 303, revoked.html)
            let (refused, _) = try await RecordAPITests.post(client, path, body)
            XCTAssertEqual(refused, 401)
            let unknown = try await browser.request("/console/access/tokens/revoke", method: .post, form: Self.form(csrf, ["digest": digest]))
            XCTAssertEqual(unknown.status, 404)
            let garbage = try await browser.request("/console/access/tokens/revoke", method: .post, form: Self.form(csrf, ["digest": "'; DROP TABLE x"]))
            XCTAssertEqual(garbage.status, 404)

            // A server-to-server key, registered from its PEM and revoked.
            let key = P256.Signing.PrivateKey()
            let registered = try await browser.request("/console/access/keys/create", method: .post, form: Self.form(csrf, [
                "label": "cron", "publicKey": key.publicKey.pemRepresentation,
            ]))
            XCTAssertEqual(registered.status, 303, registered.html)
            let keyID = try ServerPublicKey(der: key.publicKey.derRepresentation).keyID
            let stored = try await ServerKeyStore(store: fixture.store).key(id: keyID, logger: TestSupport.logger)
            XCTAssertEqual(stored?.container, Self.container)
            let listed = try await browser.request(try XCTUnwrap(registered.location))
            XCTAssertTrue(listed.html.contains("The key was registered.") && listed.html.contains(keyID), listed.html)
            let badKey = try await browser.request("/console/access/keys/create", method: .post, form: Self.form(csrf, ["publicKey": "not a key"]))
            XCTAssertEqual(badKey.status, 400)
            let keyRevoked = try await browser.request("/console/access/keys/revoke", method: .post, form: Self.form(csrf, ["keyID": keyID]))
            XCTAssertEqual(keyRevoked.status, 303)
            let gone = try await ServerKeyStore(store: fixture.store).key(id: keyID, logger: TestSupport.logger)
            XCTAssertNil(gone)
            let afterRevoke = try await browser.request(try XCTUnwrap(keyRevoked.location))
            XCTAssertTrue(afterRevoke.html.contains("revoked 20"), afterRevoke.html)

            // A user, who can then sign in at the API's endpoint.
            let user = try await browser.request("/console/access/users/create", method: .post, form: Self.form(csrf, [
                "login": "carol@example.com", "password": "a user password",
            ]))
            XCTAssertEqual(user.status, 303, user.html)
            let users = try await browser.request(try XCTUnwrap(user.location))
            XCTAssertTrue(users.html.contains("carol@example.com"))
            XCTAssertFalse(users.html.contains("pbkdf2"), "no password hash is shown")
            let (signedIn, answer) = try await RecordAPITests.post(
                client, "/auth/1/\(Self.container)/signin?ckAPIToken=\(fixture.apiToken)", ["login": "carol@example.com", "password": "a user password"])
            XCTAssertEqual(signedIn, 200, "\(answer)")
            let short = try await browser.request("/console/access/users/create", method: .post, form: Self.form(csrf, ["login": "dave@example.com", "password": "short"]))
            XCTAssertEqual(short.status, 400)
            let taken = try await browser.request("/console/access/users/create", method: .post, form: Self.form(csrf, [
                "login": "carol@example.com", "password": "a user password",
            ]))
            XCTAssertEqual(taken.status, 409)
        }
    }

    /// The sign-in page's issuer form with a token URL and a client secret: the issuer is stored
    /// with the token URL and the secret sealed (the row does not hold it; it opens with the
    /// server's key); the secret is never shown back, never in the audit entry, never logged —
    /// nor when the form is refused.
    func testAnIssuersTokenURLAndClientSecretAreSetFromTheConsoleAndTheSecretIsNeverShownAuditedOrLogged() async throws {
        let secret = "a console client secret/+=&<x>"
        let key = SecretKey.generate()
        let logs = ObserverProjectionTests.CapturedLogs()
        let logger = Logger(label: "console-issuer-test") { _ in ObserverProjectionTests.CapturingLogHandler(logs: logs) }
        try await TestSupport.withMigratedStore { store, _ in
            _ = try await ContainerStore(store: store).create(container: Self.container, label: "test", logger: TestSupport.logger)
            var configuration = APIConfiguration(secretKey: key)
            configuration.console.workers = StratusProcess.workerNames
            let router = buildRouter(APIDependencies(store: store, readiness: [], metrics: { "" }), configuration: configuration)
            try await Application(router: router, logger: logger).test(.router) { client in
                let browser = Browser(client)
                let csrf = try await ConsoleDataTests.signIn(browser, store: store)
                let before = try await AuditLog(store: store).entries(AuditLog.Filter(), limit: 1, logger: TestSupport.logger).first?.sequence ?? 0
                let issuer = "https://accounts.example.com"
                let fields = [
                    "issuer": issuer, "jwksURL": "https://accounts.example.com/keys", "audiences": "com.example.app, web.example",
                    "webClientID": "web.example", "tokenURL": "https://accounts.example.com/oauth/token", "clientSecret": secret,
                ]
                // Refused (a secret with no token URL): nothing stored, the secret not echoed.
                var withoutTokenURL = fields
                withoutTokenURL["tokenURL"] = ""
                let refused = try await browser.request("/console/access/issuers/add", method: .post, form: Self.form(csrf, withoutTokenURL))
                XCTAssertEqual(refused.status, 400, refused.html)
                XCTAssertTrue(refused.html.contains("needs a token URL"), refused.html)
                XCTAssertFalse(refused.html.contains("console client secret"), "a refused form does not show the secret back")
                let none = try await IdentityStore(store: store).trustedIssuers(container: Self.container, logger: TestSupport.logger)
                XCTAssertEqual(none.map(\.issuer), [])

                let added = try await browser.request("/console/access/issuers/add", method: .post, form: Self.form(csrf, fields))
                XCTAssertEqual(added.status, 303, added.html)
                let page = try await browser.request(try XCTUnwrap(added.location))
                XCTAssertEqual(page.status, 200, page.html)
                XCTAssertTrue(page.html.contains("the code flow with PKCE through https://accounts.example.com/oauth/token (with a client secret)"), page.html)
                XCTAssertFalse(page.html.contains("console client secret"), "the page does not show the secret")
                XCTAssertTrue(page.html.contains("id=\"client-secret\" name=\"clientSecret\" type=\"password\""), "the field is a password field, empty")

                // Stored: the token URL, and the secret only sealed.
                let foundStored = try await IdentityStore(store: store).trustedIssuer(container: Self.container, issuer: issuer, logger: TestSupport.logger)
                let stored = try XCTUnwrap(foundStored)
                XCTAssertEqual(stored.tokenURL, "https://accounts.example.com/oauth/token")
                XCTAssertNil(stored.clientSecret, "no plain-text secret is stored")
                XCTAssertEqual(try stored.openClientSecret(container: Self.container, key: key), secret)
                let plain = try await TestSupport.count(store, """
                    SELECT count(*)::bigint FROM trusted_issuers
                    WHERE client_secret IS NOT NULL OR position(convert_to(\(secret), 'UTF8') IN client_secret_sealed) > 0
                       OR position(convert_to('console client secret', 'UTF8') IN client_secret_sealed) > 0
                    """)
                XCTAssertEqual(plain, 0, "the row holds the secret only sealed")

                // Audited as set, never the secret.
                let entries = try await AuditCoverageTests.entries(after: before, store)
                XCTAssertEqual(entries.map(\.action), [AuditAction.issuerTrust.rawValue])
                let entry = try XCTUnwrap(entries.first)
                XCTAssertEqual(entry.subject, issuer)
                XCTAssertTrue(entry.details.contains("clientSecret=set"), entry.details)
                XCTAssertTrue(entry.details.contains("tokenURL=https://accounts.example.com/oauth/token"), entry.details)
                XCTAssertFalse(entry.details.contains("console client secret"), entry.details)
                let audited = try await TestSupport.count(store, "SELECT count(*)::bigint FROM audit_log WHERE details::text LIKE '%console client secret%'")
                XCTAssertEqual(audited, 0, "the secret is not in the audit log")

                let logged = logs.lines.withLock { $0.map { "\($0.message) \($0.metadata)" }.joined(separator: "\n") }
                XCTAssertFalse(logged.isEmpty, "the requests were logged")
                XCTAssertFalse(logged.contains("console client secret") || logged.contains("console%20client%20secret"), "the secret is never logged: \(logged)")
            }
        }
    }

    func testOperatorsLimitedToContainersReachOnlyTheirAccessPages() async throws {
        try await RecordAPITests.withAPI { fixture, client in
            _ = try await ContainerStore(store: fixture.store).create(container: "iCloud.other", label: "test", logger: TestSupport.logger)
            let browser = Browser(client)
            let csrf = try await ConsoleDataTests.signIn(browser, store: fixture.store, containers: [Self.container])
            let other = try await browser.request("/console/access?container=iCloud.other")
            XCTAssertEqual(other.status, 403)
            let token = try await browser.request("/console/access/tokens/create", method: .post, form: ["csrf": csrf, "container": "iCloud.other"])
            XCTAssertEqual(token.status, 403)
            let tokens = try await ConsoleOperationsTests.scalar(fixture.store, "SELECT count(*)::bigint FROM api_tokens WHERE container = 'iCloud.other'")
            XCTAssertEqual(tokens, 1, "no token was made for a container the operator may not reach")
            let missing = try await browser.request("/console/access/tokens/create", method: .post, form: ["csrf": csrf, "container": "iCloud.missing"])
            XCTAssertEqual(missing.status, 403)
        }
    }
}
