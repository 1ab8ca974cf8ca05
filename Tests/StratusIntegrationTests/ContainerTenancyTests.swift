import Crypto
import Foundation
import Hummingbird
import HummingbirdTesting
import PostgresNIO
import StratusAPI
import StratusCore
import StratusPostgres
import StratusTesting
import XCTest

/// Containers as tenants: a suspension reaches every API process at once (whatever each had
/// cached), refuses every kind of credential, and a resumption serves again; the listing counts
/// what each container holds.
final class ContainerTenancyTests: XCTestCase {
    typealias Body = AuthTests.Body
    static let container = AuthTests.container

    /// Two API processes over one database, each caching access answers for 60 s: only the change
    /// notification can end a cached answer within the second.
    func testASuspensionIsHeardByEveryAPIProcessWithinASecondAndRefusesEveryCredentialUntilResumed() async throws {
        try await TestSupport.withMigratedStore { store, url in
            let apiToken = try await ContainerStore(store: store).create(container: Self.container, label: "test", logger: TestSupport.logger)
            let signingKey = P256.Signing.PrivateKey()
            let rawKey = signingKey.rawRepresentation
            let key = try await ServerKeyStore(store: store).register(
                container: Self.container, publicKey: try ServerPublicKey(text: signingKey.publicKey.pemRepresentation), label: "server",
                logger: TestSupport.logger)
            _ = try await UserStore(store: store, rounds: 1000).create(
                container: Self.container, login: "bob@example.com", password: "a password", logger: TestSupport.logger)
            // One token-signing key for both processes, as a deployment has.
            let secretKey = SecretKey.generate()
            let query = AuthTests.path("records/query") + "?ckAPIToken=\(apiToken)"
            let queryBody = try AuthTests.json(["query": ["recordType": "Note"]])
            @Sendable func read(_ client: any TestClientProtocol) async throws -> (Int, Body) {
                try await AuthTests.send(client, query, body: queryBody)
            }
            @Sendable func signed(_ client: any TestClientProtocol) async throws -> (Int, Body) {
                try await AuthTests.send(
                    client, AuthTests.path("records/query"),
                    headers: try AuthTests.signedHeaders(keyID: key.keyID, key: try P256.Signing.PrivateKey(rawRepresentation: rawKey), body: queryBody, subpath: AuthTests.path("records/query")),
                    body: queryBody)
            }
            @Sendable func signIn(_ client: any TestClientProtocol) async throws -> (Int, Body) {
                try await AuthTests.send(
                    client, "/auth/1/\(Self.container)/signin?ckAPIToken=\(apiToken)",
                    body: try AuthTests.json(["login": "bob@example.com", "password": "a password"]))
            }
            // The hosted sign-in page's request, which stands for the app instead of its API token.
            let pageRequest = SignInPageRequest(container: Self.container, origin: nil, expiresAt: Int64(Date().timeIntervalSince1970) + 600)
                .signed(with: secretKey)
            @Sendable func pageSignIn(_ client: any TestClientProtocol) async throws -> (Int, Body) {
                try await AuthTests.send(
                    client, "/auth/1/\(Self.container)/signin?ckSignInRequest=\(pageRequest)",
                    body: try AuthTests.json(["login": "bob@example.com", "password": "a password"]))
            }
            try await Self.withTwoCachingAPIs(store: store, url: url, secretKey: secretKey) { other, first, second in
                for client in [first, second] {
                    let (status, answer) = try await read(client)
                    XCTAssertEqual(status, 200, "served (and cached) before the suspension: \(answer)")
                }

                // Suspended by another process (as `stratus container suspend` does).
                let suspending = try await ContainerStore(store: other).setSuspended(container: Self.container, true, logger: TestSupport.logger)
                XCTAssertTrue(suspending)
                let suspended = ContinuousClock.now
                for (name, client) in [("first", first), ("second", second)] {
                    try await TestSupport.eventually(timeout: .seconds(1), "the \(name) API process to refuse the suspended container") {
                        try await read(client).0 != 200
                    }
                }
                XCTAssertLessThan(ContinuousClock.now - suspended, .seconds(1))
                for client in [first, second] {
                    let answers = [("API token", try await read(client)), ("server-to-server key", try await signed(client)),
                                   ("sign-in", try await signIn(client)), ("the hosted page's sign-in", try await pageSignIn(client))]
                    for (what, (status, answer)) in answers {
                        XCTAssertEqual(status, 403, "\(what): \(answer)")
                        XCTAssertEqual(answer["serverErrorCode"] as? String, "ACCESS_DENIED", what)
                        XCTAssertTrue((answer["reason"] as? String ?? "").contains("suspended"), "\(what): \(answer)")
                    }
                }
                let unknown = try await ContainerStore(store: other).setSuspended(container: "iCloud.no.such", true, logger: TestSupport.logger)
                XCTAssertFalse(unknown, "no such container")

                let resuming = try await ContainerStore(store: other).setSuspended(container: Self.container, false, logger: TestSupport.logger)
                XCTAssertTrue(resuming)
                for (name, client) in [("first", first), ("second", second)] {
                    try await TestSupport.eventually(timeout: .seconds(1), "the \(name) API process to serve the resumed container") {
                        try await read(client).0 == 200
                    }
                    let (signedStatus, signedAnswer) = try await signed(client)
                    XCTAssertEqual(signedStatus, 200, "\(signedAnswer)")
                    let (signInStatus, signInAnswer) = try await signIn(client)
                    XCTAssertEqual(signInStatus, 200, "\(signInAnswer)")
                    let (pageStatus, pageAnswer) = try await pageSignIn(client)
                    XCTAssertEqual(pageStatus, 200, "\(pageAnswer)")
                }
            }
        }
    }

    /// Two API processes over one database, each caching access answers for 60 s and listening for
    /// changes (waited for): only a change's notification can end a cached answer within the second.
    /// `body` gets a store of the test's own and a client of each process.
    static func withTwoCachingAPIs(
        store: PostgresStore, url: String, secretKey: SecretKey,
        _ body: @Sendable (PostgresStore, any TestClientProtocol, any TestClientProtocol) async throws -> Void
    ) async throws {
        @Sendable func api() -> some ApplicationProtocol {
            var configuration = APIConfiguration(secretKey: secretKey)
            configuration.port = 0
            configuration.authCacheTTL = .seconds(60)
            return buildApplication(APIDependencies(store: store, readiness: [], metrics: { "" }), configuration: configuration, services: [], logger: TestSupport.logger)
        }
        try await TestSupport.withStore(url: url) { other in
            try await api().test(.live) { first in
                try await api().test(.live) { second in
                    try await TestSupport.eventually(timeout: .seconds(30), "both API processes to listen for access changes") {
                        try await AccessCacheTests.listeningConnections(other, terminate: false) >= 2
                    }
                    try await body(other, first, second)
                }
            }
        }
    }

    func testTheListingCountsWhatEachContainerHoldsAndShowsItsState() async throws {
        try await RecordAPITests.withAPI { fixture, client in
            try await RecordAPITests.createZone(client, fixture, "Notes")
            for name in ["a", "b", "c"] {
                _ = try await RecordAPITests.modify(client, fixture, zone: "Notes", [["operationType": "create", "record": RecordAPITests.note(name, ["v": ["value": name]])]])
            }
            let other = "iCloud.com.example.other"
            _ = try await ContainerStore(store: fixture.store).create(container: other, label: "other", logger: TestSupport.logger)
            let suspended = try await ContainerStore(store: fixture.store).setSuspended(container: other, true, logger: TestSupport.logger)
            XCTAssertTrue(suspended)
            let listed = try await ContainerStore(store: fixture.store).usage(logger: TestSupport.logger)
            let mine = try XCTUnwrap(listed.first { $0.container == fixture.container })
            XCTAssertEqual(mine.records, 3)
            XCTAssertEqual(mine.zones, 1, "the custom zone")
            XCTAssertGreaterThan(mine.recordBytes, 0)
            XCTAssertNil(mine.suspendedAt)
            let theirs = try XCTUnwrap(listed.first { $0.container == other })
            XCTAssertEqual([theirs.records, theirs.zones, theirs.users, theirs.assets], [0, 0, 0, 0])
            XCTAssertNotNil(theirs.suspendedAt)
            // Paged by identifier, and one container alone.
            let page = try await ContainerStore(store: fixture.store).usage(after: listed[0].container, limit: 1, logger: TestSupport.logger)
            XCTAssertEqual(page.map(\.container), [listed[1].container])
            let alone = try await ContainerStore(store: fixture.store).usage(of: other, logger: TestSupport.logger)
            XCTAssertEqual(alone.map(\.container), [other])

            // The CLI prints the same, one line a container.
            let result = try await StratusExecutable.run("stratus", ["container", "list"], settings: ["STRATUS_DATABASE_URL": fixture.databaseURL])
            XCTAssertEqual(result.status, 0, result.output)
            let line = try XCTUnwrap(result.output.split(separator: "\n").first { $0.hasPrefix(fixture.container + "\t") })
            let columns = line.split(separator: "\t").map(String.init)
            XCTAssertEqual(columns[1], "serving")
            XCTAssertEqual(columns[4], "3", "records: \(line)")
            XCTAssertTrue(result.output.contains("\(other)\tsuspended since "), result.output)
        }
    }
}

