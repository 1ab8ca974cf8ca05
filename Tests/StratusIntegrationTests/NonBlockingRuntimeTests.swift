import Foundation
import Hummingbird
import HummingbirdTesting
import PostgresNIO
import StratusAPI
import StratusCore
import StratusKafka
import StratusConnections
@testable import StratusPostgres
import StratusTesting
import XCTest

/// Work that takes long — hashing passwords, closing a Kafka producer that still holds messages —
/// never holds Swift's cooperative threads, so other requests go on meanwhile. On a two-core
/// machine there are two such threads: two sign-ins or two producer shutdowns done inline would
/// stall every request until they finish.
final class NonBlockingRuntimeTests: XCTestCase {
    static let container = "iCloud.com.example.notes"

    /// Runs `load` while sending cheap requests one after another until it finishes; returns the
    /// requests' latencies and how long the load took.
    static func latencies(
        _ client: any TestClientProtocol, ping: String, during load: @escaping @Sendable () async throws -> Void
    ) async throws -> (pings: [Duration], load: Duration) {
        let clock = ContinuousClock()
        let loadStart = clock.now
        let loadTask = Task { try await load(); return clock.now - loadStart }
        var pings: [Duration] = []
        // Stop pinging once the load is done (a bounded number of pings in any case).
        let done = Flag()
        Task {
            _ = try? await loadTask.value
            done.set()
        }
        while !done.isSet, pings.count < 2_000 {
            let start = clock.now
            let status = try await client.execute(uri: ping, method: .get) { Int($0.status.code) }
            XCTAssertEqual(status, 200)
            pings.append(clock.now - start)
        }
        return (pings, try await loadTask.value)
    }

    func testRequestsGoOnWhileSignInsHashPasswords() async throws {
        try await TestSupport.withMigratedStore { store, _ in
            let token = try await ContainerStore(store: store).create(container: Self.container, label: "test", logger: TestSupport.logger)
            let users = UserStore(store: store)
            _ = try await users.create(container: Self.container, login: "alice@example.com", password: "correct horse", logger: TestSupport.logger)
            // The shortest of three hashes: the load below takes at least eight of them.
            let clock = ContinuousClock()
            var fastest = Duration.seconds(3600)
            let stored = try PasswordHash.make("correct horse")
            for _ in 0..<3 {
                let before = clock.now
                _ = PasswordHash.verify("correct horse", against: stored)
                fastest = min(fastest, clock.now - before)
            }
            let oneHash = fastest
            let configuration = APIConfiguration(secretKey: SecretKey.generate())
            let router = buildRouter(APIDependencies(store: store, readiness: [], metrics: { "" }), configuration: configuration)
            try await Application(router: router, logger: TestSupport.logger).test(.router) { client in
                let signIn = "/auth/1/\(Self.container)/signin?ckAPIToken=\(token)"
                let body = try JSONSerialization.data(withJSONObject: ["login": "alice@example.com", "password": "correct horse"])
                let (pings, load) = try await Self.latencies(client, ping: "/database/1/\(Self.container)/development/public/zones/list?ckAPIToken=\(token)") {
                    try await withThrowingTaskGroup(of: Int.self) { group in
                        for _ in 0..<8 {
                            group.addTask {
                                try await client.execute(uri: signIn, method: .post, body: ByteBuffer(data: body)) { Int($0.status.code) }
                            }
                        }
                        for try await status in group { XCTAssertEqual(status, 200, "every sign-in succeeds") }
                    }
                }
                // Eight hashes, one after another on their own queue: the burst lasts about eight
                // hashes, and meanwhile requests are answered in a small part of one hash's time.
                XCTAssertGreaterThanOrEqual(load, oneHash * 4, "the sign-ins hashed (one hash: \(oneHash))")
                XCTAssertGreaterThanOrEqual(pings.count, 10, "requests were answered during the sign-ins (\(pings.count) in \(load))")
                // (Hashed inline, on the cooperative threads, the slowest request here waited several
                // hashes' time — about seven.)
                XCTAssertLessThan(pings.max()!, oneHash * 2, "no request waits for the hashes (one hash: \(oneHash), slowest request \(pings.max()!))")
            }
        }
    }

    func testRequestsGoOnWhileProducersHoldingMessagesClose() async throws {
        try await TestSupport.withMigratedStore { store, _ in
            let token = try await ContainerStore(store: store).create(container: Self.container, label: "test", logger: TestSupport.logger)
            let configuration = APIConfiguration(secretKey: SecretKey.generate())
            let router = buildRouter(APIDependencies(store: store, readiness: [], metrics: { "" }), configuration: configuration)
            // No broker listens here: each producer keeps its message queued, so closing flushes
            // for its full budget (2 s), as a relay's producer does when it restarts after the
            // broker went away.
            let kafka = KafkaClientConfiguration(brokers: "127.0.0.1:9")
            let producers = try (0..<4).map { _ in try KafkaProducer(configuration: kafka, logger: TestSupport.logger) }
            let sends = producers.map { producer in
                Task { try await producer.send([KafkaOutgoingMessage(topic: "t", key: [1], value: [2])], timeout: .seconds(60)) }
            }
            try await Application(router: router, logger: TestSupport.logger).test(.router) { client in
                let (pings, load) = try await Self.latencies(client, ping: "/database/1/\(Self.container)/development/public/zones/list?ckAPIToken=\(token)") {
                    await withTaskGroup(of: Void.self) { group in
                        for producer in producers { group.addTask { await producer.close() } }
                    }
                }
                XCTAssertGreaterThanOrEqual(load, .seconds(1), "the producers flushed before closing")
                XCTAssertGreaterThanOrEqual(pings.count, 10, "requests were answered while the producers closed (\(pings.count) in \(load))")
                XCTAssertLessThan(pings.max()!, .milliseconds(500), "no request waits for the producers (slowest request \(pings.max()!))")
            }
            // Closing failed what was still queued: every send returns (or throws, if it began after
            // its producer was gone).
            for send in sends {
                guard let results = try? await send.value else { continue }
                XCTAssertEqual(results.count, 1)
                if case .success = results[0] { XCTFail("a message reached a broker that does not exist") }
            }
        }
    }
}

extension NonBlockingRuntimeTests {
    /// Runs `body` with a running store on `group`'s loops whose requests wait at most `lease` for a
    /// connection.
    static func withStore(
        url: String, maxConnections: Int, lease: Duration, group: any EventLoopGroup = PostgresConnection.defaultEventLoopGroup,
        _ body: @Sendable (PostgresStore) async throws -> Void
    ) async throws {
        var timeouts = PostgresStore.Timeouts()
        timeouts.lease = lease
        let store = try PostgresStore(url: url, maxConnections: maxConnections, timeouts: timeouts, eventLoopGroup: group, logger: TestSupport.logger)
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await store.run() }
            defer { group.cancelAll() }
            try await body(store)
        }
    }

    /// How many `SELECT pg_sleep(3)` statements the database at `url` is running, seen from a
    /// store of its own.
    static func sleepingStatements(url: String) async throws -> Int64 {
        try await TestSupport.count(url: url, "SELECT count(*) FROM pg_stat_activity WHERE query = 'SELECT pg_sleep(3)' AND state = 'active'")
    }

    /// Runs `body`, expecting TRY_AGAIN_LATER with retryAfter; returns how long it took.
    static func expectTryAgainLater(_ what: String, _ body: () async throws -> Void) async -> Duration {
        let clock = ContinuousClock()
        let start = clock.now
        do {
            try await body()
            XCTFail("\(what) succeeded")
        } catch let error as StratusError {
            XCTAssertEqual(error.code, .tryAgainLater, "\(what): \(error)")
            XCTAssertNotNil(error.retryAfter, what)
        } catch {
            XCTFail("\(what) is no retryable error: \(String(reflecting: error))")
        }
        return clock.now - start
    }

    /// A request's wait for a connection is bounded by a timer on an event loop, which a cancelled
    /// wait takes off the loop at once (docs/benchmarks.md: "A lease's deadline on the event loop, and no
    /// keep-alive").
    func testALoopTimerRunsOutOnTimeAndACancelledOneEndsAtOnce() async throws {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let loop = group.next()
        let clock = ContinuousClock()
        do {
            let start = clock.now
            try await LoopTimer.sleep(for: .milliseconds(100), on: loop)
            XCTAssertGreaterThanOrEqual(clock.now - start, .milliseconds(100), "it waited its time")

            // Cancelled before it began, and while it waits: a 20-second timer ends at once, cancelled
            // (were the cancellation lost, it would run out, and the assertions below would fail).
            for cancelWhileWaiting in [false, true] {
                let started = clock.now
                let waiting = Flag()
                let sleeper = Task {
                    if cancelWhileWaiting { waiting.set() }
                    try await LoopTimer.sleep(for: .seconds(20), on: loop)
                }
                if cancelWhileWaiting {
                    try await TestSupport.eventually(timeout: .seconds(10), "the sleeper to start") { waiting.isSet }
                }
                sleeper.cancel()
                do {
                    try await sleeper.value
                    XCTFail("a cancelled timer ran out")
                } catch is CancellationError {
                } catch {
                    XCTFail("a cancelled timer threw \(String(reflecting: error)), not CancellationError")
                }
                XCTAssertLessThan(clock.now - started, .seconds(5), "the cancelled timer did not wait its 20 seconds")
            }
        } catch {
            try await group.shutdownGracefully()
            throw error
        }
        try await group.shutdownGracefully()
        // Durations a TimeAmount cannot hold are clamped, never trapped on.
        XCTAssertEqual(LoopTimer.nanoseconds(.milliseconds(1500)), 1_500_000_000)
        XCTAssertEqual(LoopTimer.nanoseconds(.seconds(-1)), 0)
        XCTAssertEqual(LoopTimer.nanoseconds(.seconds(Int64.max)), Int64.max)
    }

    /// A released connection arms no timer (docs/benchmarks-history.md: "A lease's deadline on the
    /// event loop, and no keep-alive"); the pools' sizes and the server-side limits are as configured.
    func testThePoolRunsNoKeepAliveAndOpensConnectionsOnDemandUnderTheConfiguredLimits() throws {
        var timeouts = PostgresStore.Timeouts()
        timeouts.statement = .seconds(7)
        let configuration = try PostgresStore.connectionConfiguration(url: "postgres://stratus:secret@127.0.0.1:5432/stratus", timeouts: timeouts)
        let parameters = Dictionary(configuration.options.additionalStartupParameters, uniquingKeysWith: { $1 })
        XCTAssertEqual(parameters["statement_timeout"], "7000")
        XCTAssertEqual(parameters["lock_timeout"], "10000")
        XCTAssertEqual(parameters["idle_in_transaction_session_timeout"], "60000")
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 2)
        defer { try? group.syncShutdownGracefully() }
        let store = try PostgresStore(
            url: "postgres://stratus:secret@127.0.0.1:5432/stratus", maxConnections: 13, minConnections: 3, timeouts: timeouts, eventLoopGroup: group,
            logger: TestSupport.logger)
        XCTAssertEqual(store.poolSettings.map(\.maxConnections), [7, 6])
        XCTAssertEqual(store.poolSettings.map(\.minConnections), [2, 1], "the kept connections shared out; the rest opened on demand")
    }

    func testAFullPoolOrAnUnreachableDatabaseAnswersTryAgainLaterInsteadOfHanging() async throws {
        // Every connection busy: the next request waits its lease time, then is told to retry.
        try await TestSupport.withMigratedStore { _, url in
            try await Self.withStore(url: url, maxConnections: 1, lease: .milliseconds(500)) { store in
                let holding = Task {
                    try await store.withConnection { connection in
                        _ = try await connection.query("SELECT pg_sleep(3)", logger: TestSupport.logger).collect()
                    }
                }
                // The holder has the only connection once the database shows its statement running.
                try await TestSupport.eventually(timeout: .seconds(10), "the only connection to be busy") {
                    try await Self.sleepingStatements(url: url) == 1
                }
                let waited = await Self.expectTryAgainLater("a request with the pool full") {
                    try await store.withConnection { connection in _ = try await connection.query("SELECT 1", logger: TestSupport.logger).collect() }
                }
                XCTAssertGreaterThanOrEqual(waited, .milliseconds(400), "it waited for a connection first")
                XCTAssertLessThan(waited, .seconds(2.5), "it did not wait for the busy connection to come free")
                try await holding.value
                // Once the connection is free again, requests go through.
                try await store.withConnection { connection in _ = try await connection.query("SELECT 1", logger: TestSupport.logger).collect() }
            }
        }
        // No database at all: the same answer, not a request that waits for ever.
        var unreachable = URLComponents(string: try TestSupport.adminDatabaseURL())!
        unreachable.port = 9
        try await Self.withStore(url: unreachable.string!, maxConnections: 2, lease: .seconds(1)) { store in
            let waited = await Self.expectTryAgainLater("a request with the database unreachable") {
                try await store.withConnection { connection in _ = try await connection.query("SELECT 1", logger: TestSupport.logger).collect() }
            }
            XCTAssertLessThan(waited, .seconds(15))
        }
    }
}

extension NonBlockingRuntimeTests {
    /// Ends this connection's session from another one and waits until the client has seen it close.
    static func terminate(_ connection: PostgresConnection, url: String) async throws {
        var backend: Int32 = 0
        for try await value in try await connection.query("SELECT pg_backend_pid()", logger: TestSupport.logger).decode(Int32.self) { backend = value }
        let pid = backend
        try await TestSupport.withStore(url: url) { other in
            try await other.withConnection { admin in
                _ = try await admin.query("SELECT pg_terminate_backend(\(pid))", logger: TestSupport.logger).collect()
            }
        }
        try await connection.closeFuture.get()
    }

    func testAStatementOnAConnectionThatClosedAnswersTryAgainLaterInsteadOfHanging() async throws {
        // The database client never answers a statement sent on a connection it has seen close: the
        // request must still end, retryable, and the store go on serving with new connections.
        try await TestSupport.withMigratedStore { _, url in
            try await Self.withStore(url: url, maxConnections: 2, lease: .seconds(5)) { store in
                let waited = await Self.expectTryAgainLater("a statement after the connection closed") {
                    try await store.withConnection { connection in
                        try await Self.terminate(connection, url: url)
                        _ = try await connection.query("SELECT 1", logger: TestSupport.logger).collect()
                    }
                }
                XCTAssertLessThan(waited, .seconds(5), "answered within the grace after the close")
                // The same inside a transaction, where the failed statement is followed by a ROLLBACK.
                _ = await Self.expectTryAgainLater("a transaction whose connection closed") {
                    try await store.serializable(logger: TestSupport.logger) { transaction in
                        try await Self.terminate(transaction.connection, url: url)
                        _ = try await transaction.connection.query("SELECT 1", logger: TestSupport.logger).collect()
                    }
                }
                for _ in 0..<4 {
                    let one = try await store.withConnection { connection in
                        var value: Int32 = 0
                        for try await row in try await connection.query("SELECT 1", logger: TestSupport.logger).decode(Int32.self) { value = row }
                        return value
                    }
                    XCTAssertEqual(one, 1, "the store serves again")
                }
            }
        }
    }
}

/// A flag set once, read from any task.
private final class Flag: @unchecked Sendable {
    private let lock = NSLock()
    private var value = false
    var isSet: Bool { lock.withLock { value } }
    func set() { lock.withLock { value = true } }
}
