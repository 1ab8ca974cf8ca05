import Crypto
import Foundation
import HummingbirdTesting
import PostgresNIO
import StratusAPI
import StratusCore
import StratusPostgres
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
