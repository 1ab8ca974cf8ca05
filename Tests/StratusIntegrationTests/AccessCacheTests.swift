import Foundation
import Hummingbird
import HummingbirdTesting
import PostgresNIO
import StratusAPI
import StratusCore
import StratusPostgres
import StratusTesting
import Synchronization
import XCTest

/// The cache of what API tokens give access to: its rules with a clock moved by hand, then the
/// API (`buildApplication`, with the listener among its services) against the real PostgreSQL, where
/// a change committed by another process ends a cached answer as soon as its notification arrives.
final class AccessCacheTests: XCTestCase {
    typealias Body = AuthTests.Body
    static let container = AuthTests.container

    /// A monotonic clock that moves only when told to.
    final class ManualClock: Sendable {
        private let instant = Mutex(ContinuousClock.now)
        var now: ContinuousClock.Instant { instant.withLock { $0 } }
        func advance(by duration: Duration) { instant.withLock { $0 += duration } }
    }

    static let access = ContainerStore.Access(container: container, allowsAnonymousPublic: true, credentialEpoch: nil)

    static func key(_ n: Int, user: String? = nil) -> AccessCache.Key {
        AccessCache.Key(digest: Data(APIToken.digest("token \(n)")), user: user)
    }

    /// Looks `key` up, answering `answer` when the cache reads; returns the answer and whether it read.
    static func lookup(_ cache: AccessCache, _ key: AccessCache.Key, answer: ContainerStore.Access? = access) async throws -> (ContainerStore.Access?, read: Bool) {
        var read = false
        let found = try await cache.access(for: key) {
            read = true
            return answer
        }
        return (found, read)
    }

    // MARK: The rules

    func testAnAnswerIsServedWhileYoungerThanTheTTLThenReadAgain() async throws {
        let clock = ManualClock()
        let cache = AccessCache(ttl: .seconds(1), now: { clock.now })
        cache.startServing()
        let first = try await Self.lookup(cache, Self.key(1))
        XCTAssertTrue(first.read)
        XCTAssertEqual(first.0, Self.access)
        clock.advance(by: .milliseconds(999))
        let hit = try await Self.lookup(cache, Self.key(1), answer: nil)
        XCTAssertFalse(hit.read, "younger than the TTL: served")
        XCTAssertEqual(hit.0, Self.access)
        clock.advance(by: .milliseconds(1))
        let expired = try await Self.lookup(cache, Self.key(1), answer: nil)
        XCTAssertTrue(expired.read, "as old as the TTL: read again")
        XCTAssertNil(expired.0, "the token is gone now")
        XCTAssertEqual(cache.count, 0)
    }

    func testTheUserIsPartOfTheQuestion() async throws {
        let cache = AccessCache(ttl: .seconds(1))
        cache.startServing()
        _ = try await Self.lookup(cache, Self.key(1))
        let withUser = try await Self.lookup(cache, Self.key(1, user: "_bob"))
        XCTAssertTrue(withUser.read, "another user's epoch is another question")
        let again = try await Self.lookup(cache, Self.key(1, user: "_bob"))
        XCTAssertFalse(again.read)
        XCTAssertEqual(cache.count, 2)
    }

    func testAnUnknownTokenIsNeverCached() async throws {
        let cache = AccessCache(ttl: .seconds(60))
        cache.startServing()
        for _ in 0..<3 {
            let (found, read) = try await Self.lookup(cache, Self.key(7), answer: nil)
            XCTAssertNil(found)
            XCTAssertTrue(read)
        }
        XCTAssertEqual(cache.count, 0)
    }

    func testNothingIsServedOrKeptWhileChangesAreNotHeard() async throws {
        let cache = AccessCache(ttl: .seconds(60))
        XCTAssertFalse(cache.isServing)
        for _ in 0..<2 {
            let (_, read) = try await Self.lookup(cache, Self.key(1))
            XCTAssertTrue(read, "before the listener listens")
        }
        XCTAssertEqual(cache.count, 0)
        cache.startServing()
        _ = try await Self.lookup(cache, Self.key(1))
        XCTAssertEqual(cache.count, 1)
        // A heard change forgets everything.
        cache.removeAll()
        XCTAssertEqual(cache.count, 0)
        let afterChange = try await Self.lookup(cache, Self.key(1))
        XCTAssertTrue(afterChange.read)
        // A lost listener forgets everything and keeps nothing until it listens again, which
        // forgets everything once more (a change may have gone by unheard).
        XCTAssertTrue(cache.stopServing())
        XCTAssertEqual(cache.count, 0)
        let whileDeaf = try await Self.lookup(cache, Self.key(1))
        XCTAssertTrue(whileDeaf.read)
        XCTAssertEqual(cache.count, 0)
        XCTAssertFalse(cache.stopServing(), "it was not serving")
        cache.startServing()
        _ = try await Self.lookup(cache, Self.key(2))
        XCTAssertEqual(cache.count, 1)
        cache.startServing()
        XCTAssertEqual(cache.count, 0, "listening again forgets everything")
    }

    func testAnAnswerReadWhileAChangeIsHeardIsNotKept() async throws {
        let cache = AccessCache(ttl: .seconds(60))
        cache.startServing()
        // The notification of a change arrives while the statement that read the old state runs.
        let (found, _) = try await Self.lookup(cache, Self.key(1)) {
            cache.removeAll()
        }
        XCTAssertEqual(found, Self.access, "the caller gets the answer it read")
        XCTAssertEqual(cache.count, 0, "but it is not kept")
        let (_, reconnected) = try await Self.lookup(cache, Self.key(1)) {
            cache.stopServing()
            cache.startServing()
        }
        XCTAssertTrue(reconnected)
        XCTAssertEqual(cache.count, 0, "nor across a lost and regained listener")
        let (_, read) = try await Self.lookup(cache, Self.key(1))
        XCTAssertTrue(read)
        XCTAssertEqual(cache.count, 1)
    }

    func testTheCacheIsBounded() async throws {
        let clock = ManualClock()
        let cache = AccessCache(ttl: .seconds(1), capacity: 3, now: { clock.now })
        cache.startServing()
        _ = try await Self.lookup(cache, Self.key(1))
        _ = try await Self.lookup(cache, Self.key(2))
        clock.advance(by: .milliseconds(600))
        _ = try await Self.lookup(cache, Self.key(3))
        XCTAssertEqual(cache.count, 3)
        // Full: the expired answers make room.
        clock.advance(by: .milliseconds(500))
        _ = try await Self.lookup(cache, Self.key(4))
        XCTAssertEqual(cache.count, 2, "1 and 2 had expired; 3 and 4 are kept")
        let kept = try await Self.lookup(cache, Self.key(3), answer: nil)
        XCTAssertFalse(kept.read)
        _ = try await Self.lookup(cache, Self.key(5))
        XCTAssertEqual(cache.count, 3)
        // Full of fresh answers: everything goes.
        _ = try await Self.lookup(cache, Self.key(6))
        XCTAssertEqual(cache.count, 1)
        let gone = try await Self.lookup(cache, Self.key(3), answer: nil)
        XCTAssertTrue(gone.read)
        // A key already kept is answered again without making room.
        clock.advance(by: .seconds(2))
        _ = try await Self.lookup(cache, Self.key(6))
        XCTAssertEqual(cache.count, 1)
    }

    /// Looks up with `during` run while the answer is read.
    static func lookup(_ cache: AccessCache, _ key: AccessCache.Key, during: () -> Void) async throws -> (ContainerStore.Access?, read: Bool) {
        var read = false
        let found = try await cache.access(for: key) {
            read = true
            during()
            return access
        }
        return (found, read)
    }

    // MARK: The API against PostgreSQL

    struct Fixture: Sendable {
        let store: PostgresStore
        /// Another pool on the same database: changes made as another process would.
        let other: PostgresStore
        let apiToken: String
        let client: any TestClientProtocol

        func status(_ uri: String, method: HTTPRequest.Method = .post, body: Body = ["query": ["recordType": "Note"]]) async throws -> (Int, Body) {
            try await AuthTests.send(client, uri, method: method, body: method == .get ? Data() : try AuthTests.json(body))
        }

        /// An anonymous read of the public database with `token`.
        func publicQuery(_ token: String) async throws -> (Int, Body) {
            try await status(AuthTests.path("records/query") + "?ckAPIToken=\(token)")
        }

        /// Runs `sql` on the other pool with triggers off, so that no notification is sent: a change
        /// whose notification this process misses.
        func unheard(_ sql: PostgresQuery) async throws {
            try await other.withConnection { connection in
                try await connection.query("BEGIN", logger: TestSupport.logger)
                try await connection.query("SET LOCAL session_replication_role = replica", logger: TestSupport.logger)
                try await connection.query(sql, logger: TestSupport.logger)
                try await connection.query("COMMIT", logger: TestSupport.logger)
            }
        }

        /// Waits until the API serves answers from its cache: a fresh token, read once, still works
        /// after it was deleted unheard.
        func waitUntilTheCacheServes() async throws {
            try await TestSupport.eventually(timeout: .seconds(30), "the API to serve API tokens from its cache") {
                let token = try await ContainerStore(store: store).create(container: AccessCacheTests.container, label: "probe", logger: TestSupport.logger)
                guard try await publicQuery(token).0 == 200 else { return false }
                try await unheard("DELETE FROM api_tokens WHERE token_digest = \(Data(APIToken.digest(token)))")
                return try await publicQuery(token).0 == 200
            }
        }

        /// The connections of this database that listen for access changes (the listener's LISTEN is
        /// the last statement they ran); `terminate`: cut them.
        func listeningConnections(terminate: Bool) async throws -> Int64 {
            try await AccessCacheTests.listeningConnections(other, terminate: terminate)
        }

        /// Asserts that `request`, answered once, is answered the same from the cache after `change`
        /// is made unheard; undoes that unheard, makes the change another process would (`heard`),
        /// and waits until `request` is refused with `status` and `code` (the TTL is 60 s: only the
        /// notification can end the cached answer in time).
        func assertOnlyAHeardChangeEnds(
            _ what: String, unheard change: PostgresQuery, undo: PostgresQuery, heard: () async throws -> Void,
            refused status: Int, code: String, reason: String? = nil, _ request: () async throws -> (Int, Body)
        ) async throws {
            let (served, answer) = try await request()
            XCTAssertEqual(served, 200, "\(answer)")
            try await unheard(change)
            let (cached, cachedAnswer) = try await request()
            XCTAssertEqual(cached, 200, "served from the cache: \(cachedAnswer)")
            try await unheard(undo)
            try await heard()
            try await TestSupport.eventually(timeout: .seconds(20), "\(what) to be refused") {
                let (refused, answer) = try await request()
                guard refused != 200 else { return false }
                XCTAssertEqual(refused, status, "\(answer)")
                XCTAssertEqual(answer["serverErrorCode"] as? String, code)
                if let reason { XCTAssertTrue((answer["reason"] as? String ?? "").contains(reason), "\(answer)") }
                return true
            }
        }
    }

    /// The connections of `store`'s database (other than the asking one) that listen for access
    /// changes (the listener's LISTEN is the last statement they ran); `terminate`: cut them.
    static func listeningConnections(_ store: PostgresStore, terminate: Bool) async throws -> Int64 {
        let listen = "LISTEN \"\(AccessChangeListener.channel)\";"
        return try await store.withConnection { connection in
            let rows = try await connection.query(
                """
                WITH listening AS MATERIALIZED (
                    SELECT pid FROM pg_stat_activity
                    WHERE datname = current_database() AND pid <> pg_backend_pid() AND query = \(listen))
                SELECT count(*)::bigint FROM listening WHERE NOT \(terminate) OR pg_terminate_backend(pid)
                """, logger: TestSupport.logger)
            var count: Int64 = 0
            for try await n in rows.decode(Int64.self) { count = n }
            return count
        }
    }

    /// A live API over a fresh database with one container, answers cached for `ttl`.
    func withAPI(ttl: Duration, _ body: @Sendable (Fixture) async throws -> Void) async throws {
        try await TestSupport.withMigratedStore { store, url in
            let token = try await ContainerStore(store: store).create(container: Self.container, label: "test", logger: TestSupport.logger)
            var configuration = APIConfiguration(secretKey: SecretKey.generate())
            configuration.port = 0
            configuration.authCacheTTL = ttl
            let app = buildApplication(APIDependencies(store: store, readiness: [], metrics: { "" }), configuration: configuration, services: [], logger: TestSupport.logger)
            try await TestSupport.withStore(url: url) { other in
                try await app.test(.live) { client in
                    try await body(Fixture(store: store, other: other, apiToken: token, client: client))
                }
            }
        }
    }

    func testARevokedAPITokenIsRefusedAsSoonAsTheChangeIsHeard() async throws {
        try await withAPI(ttl: .seconds(60)) { fixture in
            try await fixture.waitUntilTheCacheServes()
            let digest = Data(APIToken.digest(fixture.apiToken))
            try await fixture.assertOnlyAHeardChangeEnds(
                "the revoked token",
                unheard: "DELETE FROM api_tokens WHERE token_digest = \(digest)",
                undo: "INSERT INTO api_tokens (token_digest, container, label) VALUES (\(digest), \(Self.container), 'test')",
                heard: {
                    // Revoked by another process (the console's store on another pool).
                    let hex = digest.map { String(format: "%02x", $0) }.joined()
                    let revoked = try await ConsoleAccess(store: fixture.other).revokeAPIToken(container: Self.container, digest: hex, logger: TestSupport.logger)
                    XCTAssertTrue(revoked)
                },
                refused: 401, code: "AUTHENTICATION_FAILED"
            ) { try await fixture.publicQuery(fixture.apiToken) }
        }
    }

    func testAPasswordChangeEndsACachedWebAuthTokenAsSoonAsItIsHeard() async throws {
        try await withAPI(ttl: .seconds(60)) { fixture in
            let users = UserStore(store: fixture.store, rounds: 1000)
            let bob = try await users.create(container: Self.container, login: "bob@example.com", password: "first password", logger: TestSupport.logger)
            let (signedIn, signInAnswer) = try await fixture.status(
                "/auth/1/\(Self.container)/signin?ckAPIToken=\(fixture.apiToken)", body: ["login": "bob@example.com", "password": "first password"])
            XCTAssertEqual(signedIn, 200, "\(signInAnswer)")
            let webToken = try XCTUnwrap(signInAnswer["ckWebAuthToken"] as? String)
            let caller = AuthTests.path("users/caller", database: "private") + "?ckAPIToken=\(fixture.apiToken)&ckWebAuthToken=\(webToken)"
            try await fixture.waitUntilTheCacheServes()
            try await fixture.assertOnlyAHeardChangeEnds(
                "the earlier web auth token",
                unheard: "UPDATE users SET credential_epoch = credential_epoch + 1 WHERE user_record_name = \(bob)",
                undo: "UPDATE users SET credential_epoch = credential_epoch - 1 WHERE user_record_name = \(bob)",
                heard: {
                    try await UserStore(store: fixture.other, rounds: 1000).setPassword(
                        container: Self.container, login: "bob@example.com", password: "second password", logger: TestSupport.logger)
                },
                refused: 401, code: "AUTHENTICATION_FAILED", reason: "password changed"
            ) { try await fixture.status(caller, method: .get) }
        }
    }

    func testWithdrawnAnonymousReadsEndACachedAnswerAsSoonAsItIsHeard() async throws {
        try await withAPI(ttl: .seconds(60)) { fixture in
            try await fixture.waitUntilTheCacheServes()
            try await fixture.assertOnlyAHeardChangeEnds(
                "anonymous reads",
                unheard: "UPDATE containers SET allow_anonymous_public = false WHERE container = \(Self.container)",
                undo: "UPDATE containers SET allow_anonymous_public = true WHERE container = \(Self.container)",
                heard: {
                    let closed = try await ContainerStore(store: fixture.other).setAnonymousPublicReads(
                        container: Self.container, allowed: false, logger: TestSupport.logger)
                    XCTAssertTrue(closed)
                },
                refused: 421, code: "AUTHENTICATION_REQUIRED"
            ) { try await fixture.publicQuery(fixture.apiToken) }
        }
    }

    func testALostListenerEndsCachedAnswersAndListensAgain() async throws {
        try await withAPI(ttl: .seconds(60)) { fixture in
            try await fixture.waitUntilTheCacheServes()
            let token = fixture.apiToken
            let (status, _) = try await fixture.publicQuery(token)
            XCTAssertEqual(status, 200)
            // Deleted unheard, still served: then the listener's connection is cut.
            try await fixture.unheard("DELETE FROM api_tokens WHERE token_digest = \(Data(APIToken.digest(token)))")
            let (cached, _) = try await fixture.publicQuery(token)
            XCTAssertEqual(cached, 200)
            let terminated = try await fixture.listeningConnections(terminate: true)
            XCTAssertEqual(terminated, 1, "one listening connection")
            try await TestSupport.eventually(timeout: .seconds(20), "the deleted token to be refused once the listener is lost") {
                try await fixture.publicQuery(token).0 == 401
            }
            // It listens again, and serves from the cache again.
            try await fixture.waitUntilTheCacheServes()
        }
    }

    func testWithoutACacheEveryCallReadsTheDatabase() async throws {
        try await withAPI(ttl: .zero) { fixture in
            let token = try await ContainerStore(store: fixture.store).create(container: Self.container, label: "second", logger: TestSupport.logger)
            for token in [fixture.apiToken, token] {
                let (status, answer) = try await fixture.publicQuery(token)
                XCTAssertEqual(status, 200, "\(answer)")
            }
            // A change nobody hears is seen by the very next call.
            try await fixture.unheard("DELETE FROM api_tokens WHERE token_digest = \(Data(APIToken.digest(token)))")
            let (refused, answer) = try await fixture.publicQuery(token)
            XCTAssertEqual(refused, 401)
            XCTAssertEqual(answer["serverErrorCode"] as? String, "AUTHENTICATION_FAILED")
            try await fixture.unheard("UPDATE containers SET allow_anonymous_public = false WHERE container = \(Self.container)")
            let (closed, _) = try await fixture.publicQuery(fixture.apiToken)
            XCTAssertEqual(closed, 421)
            let listeners = try await fixture.listeningConnections(terminate: false)
            XCTAssertEqual(listeners, 0, "no listener holds a connection")
        }
    }
}
