import Foundation
import NIOCore
import NIOPosix
import PostgresNIO
import StratusCore
import StratusConnections
@testable import StratusPostgres
import StratusTesting
import Synchronization
import XCTest

/// The connection pool under every kind of setting Stratus allows survives what an operator's
/// PostgreSQL does: a restart under load, a server that refuses connections when the process starts,
/// and connections ended by `pg_terminate_backend`. A request in the meantime gets `TRY_AGAIN_LATER`
/// (never another error, never a hang), the pool opens its kept connections again, and requests
/// succeed once the server is back. (With the database client's own pool, which kept connections
/// open the same way, the restart stopped the process: docs/reliability.md.)
final class PostgresRestartTests: XCTestCase {
    /// (connections, kept open, event loops): one connection; all kept; a share kept over two loops.
    static let settings: [(max: Int, min: Int, loops: Int)] = [(1, 0, 1), (1, 1, 1), (4, 4, 2), (4, 0, 2), (3, 2, 2)]

    func testEveryPoolSettingSurvivesAPostgreSQLRestartUnderLoad() async throws {
        try await ThrowawayPostgres.with { server in
            try await server.start()
            for setting in Self.settings {
                let what = "max \(setting.max), kept \(setting.min), \(setting.loops) loops"
                try await Self.withStore(url: server.url, setting) { store in
                    try await Self.eventually("the kept connections to open, \(what)") { try await server.sessions() == setting.min }
                    let load = Load(store: store, clients: 6)
                    try await load.run {
                        try await load.waitForSuccesses(20, what)
                        try await server.restart()
                        let restarted = load.successes
                        try await load.waitForSuccesses(restarted + 20, "writes after the restart, \(what)", timeout: .seconds(20))
                    }
                    load.check(what)
                    XCTAssertGreaterThan(load.retryable, 0, "requests in flight at the restart were told to retry, \(what)")
                    try await Self.eventually("the kept connections to open again, \(what)") { try await server.sessions() >= setting.min }
                }
            }
        }
    }

    func testEveryPoolSettingStartsWhileTheServerRefusesAndServesOnceItAnswers() async throws {
        try await ThrowawayPostgres.with { server in
            for setting in Self.settings {
                let what = "max \(setting.max), kept \(setting.min), \(setting.loops) loops"
                try await Self.withStore(url: server.url, setting) { store in
                    // Nothing listens: a request is refused at once, not after its lease time.
                    let started = ContinuousClock.now
                    await Self.expectTryAgainLater(what) { try await Self.select(store) }
                    XCTAssertLessThan(ContinuousClock.now - started, .seconds(5), "refused without waiting the lease time, \(what)")
                    try await server.start()
                    try await Self.eventually("a request to succeed once the server answers, \(what)") {
                        (try? await Self.select(store)) != nil
                    }
                    try await Self.eventually("the kept connections to open, \(what)") { try await server.sessions() == setting.min || setting.min == 0 }
                    try await server.stop()
                }
            }
        }
    }

    func testEveryPoolSettingRecoversFromTerminatedConnections() async throws {
        let url = try await TestSupport.createDatabase()
        for setting in Self.settings {
            let what = "max \(setting.max), kept \(setting.min), \(setting.loops) loops"
            try await Self.withStore(url: url, setting) { store in
                let load = Load(store: store, clients: 4)
                try await load.run {
                    for round in 1...3 {
                        try await load.waitForSuccesses(load.successes + 10, "requests before termination \(round), \(what)")
                        _ = try await TestSupport.count(url: url, """
                            SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
                            WHERE datname = current_database() AND pid <> pg_backend_pid()
                            """)
                    }
                    try await load.waitForSuccesses(load.successes + 20, "requests after the terminations, \(what)")
                }
                load.check(what)
                // A statement running when its connection is ended fails with TRY_AGAIN_LATER too.
                let sleeping = Task { try await store.withConnection { _ = try await $0.query("SELECT pg_sleep(30)", logger: TestSupport.logger).collect() } }
                try await Self.eventually("the statement to run, \(what)") {
                    try await TestSupport.count(url: url, "SELECT count(*) FROM pg_stat_activity WHERE query = 'SELECT pg_sleep(30)' AND state = 'active'") == 1
                }
                _ = try await TestSupport.count(url: url, "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE query = 'SELECT pg_sleep(30)'")
                await Self.expectTryAgainLater("a statement whose connection was ended, \(what)") { try await sleeping.value }
                try await Self.select(store)
                try await Self.eventually("the kept connections to open again, \(what)") {
                    try await LoopPoolsTests.otherConnections(url: url) >= setting.min
                }
            }
        }
    }

    /// A connection held for as long as it runs (a LISTEN) is opened apart from the pool: with one
    /// pooled connection and two listeners, requests are still served at once.
    func testListenersNeverTakeTheRequestsConnections() async throws {
        let url = try await TestSupport.createDatabase()
        try await Self.withStore(url: url, (1, 1, 1)) { store in
            let listening = Tally()
            let listeners = (0..<2).map { index in
                Task {
                    try await store.withDedicatedConnection { connection in
                        try await connection.listen(on: "stratus_test_\(index)") { notifications in
                            listening.add()
                            for try await _ in notifications {}
                        }
                    }
                }
            }
            defer { for listener in listeners { listener.cancel() } }
            try await Self.eventually("both listeners to listen") { listening.count == 2 }
            let started = ContinuousClock.now
            for _ in 0..<5 { try await Self.select(store) }
            XCTAssertLessThan(ContinuousClock.now - started, .seconds(1), "the pool's one connection served at once")
            let sessions = try await LoopPoolsTests.otherConnections(url: url)
            XCTAssertEqual(sessions, 3, "two listeners apart and the pool's one")
        }
    }

    // MARK: Helpers

    final class Tally: Sendable {
        private let value = Atomic<Int>(0)
        func add() { value.add(1, ordering: .relaxed) }
        var count: Int { value.load(ordering: .relaxed) }
    }

    static func withStore(url: String, _ setting: (max: Int, min: Int, loops: Int), _ body: @Sendable (PostgresStore) async throws -> Void) async throws {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: setting.loops)
        do {
            var timeouts = PostgresStore.Timeouts()
            timeouts.lease = .seconds(3)
            let store = try PostgresStore(
                url: url, maxConnections: setting.max, minConnections: setting.min, timeouts: timeouts, eventLoopGroup: group, logger: TestSupport.logger)
            try await withThrowingTaskGroup(of: Void.self) { services in
                services.addTask { try await store.run() }
                defer { services.cancelAll() }
                try await body(store)
            }
        } catch {
            try? await group.shutdownGracefully()
            throw error
        }
        try await group.shutdownGracefully()
    }

    static func select(_ store: PostgresStore) async throws {
        _ = try await store.withConnection { try await $0.query("SELECT 1", logger: TestSupport.logger).collect() }
    }

    static func expectTryAgainLater(_ what: String, _ body: () async throws -> Void) async {
        _ = await NonBlockingRuntimeTests.expectTryAgainLater(what, body)
    }

    static func eventually(_ what: String, _ condition: () async throws -> Bool) async throws {
        try await TestSupport.eventually(timeout: .seconds(20), what, condition)
    }

    /// Clients running statements (a read and a short transaction) in a loop, counting outcomes;
    /// every request is bounded, so a hang is an outcome too.
    final class Load: Sendable {
        let store: PostgresStore
        let clients: Int
        private let counts = Mutex((successes: 0, retryable: 0, hung: 0, other: [String]()))

        init(store: PostgresStore, clients: Int) {
            self.store = store
            self.clients = clients
        }

        var successes: Int { counts.withLock { $0.successes } }
        var retryable: Int { counts.withLock { $0.retryable } }

        /// Runs the clients while `body` runs.
        func run(_ body: () async throws -> Void) async throws {
            try await withThrowingTaskGroup(of: Void.self) { group in
                for client in 0..<clients {
                    group.addTask { [self] in
                        while !Task.isCancelled { await request(client) }
                    }
                }
                defer { group.cancelAll() }
                try await body()
            }
        }

        private func request(_ client: Int) async {
            let store = store
            // The request runs apart from this task, so one that hangs is counted, not waited for.
            let done = OneShot<Result<Void, any Error>?>()
            Task {
                do {
                    if client.isMultiple(of: 2) {
                        try await PostgresRestartTests.select(store)
                    } else {
                        try await store.serializable(logger: TestSupport.logger, lock: "restart-test-\(client)") { transaction in
                            _ = try await transaction.connection.query("SELECT pg_sleep(0.005)", logger: TestSupport.logger).collect()
                        }
                    }
                    done.resume(with: .success(.success(())))
                } catch {
                    done.resume(with: .success(.failure(error)))
                }
            }
            let limit = LoopTimer.schedule(after: .seconds(15)) { done.resume(with: .success(nil)) }
            let outcome = (try? await withCheckedThrowingContinuation { done.start($0) }) ?? nil
            limit.cancel()
            if Task.isCancelled { return }
            counts.withLock { counts in
                switch outcome {
                case .success?: counts.successes += 1
                case .failure(let error as StratusError)? where error.code == .tryAgainLater && error.retryAfter != nil: counts.retryable += 1
                case .failure(let error)?: counts.other.append("\(error)")
                case nil: counts.hung += 1
                }
            }
            if case .failure? = outcome { try? await Task.sleep(for: .milliseconds(20)) }
        }

        func waitForSuccesses(_ count: Int, _ what: String, timeout: Duration = .seconds(20)) async throws {
            try await TestSupport.eventually(timeout: timeout, "\(count) successful requests: \(what)") { successes >= count }
        }

        /// Nothing but successes and retryable errors, and nothing hung.
        func check(_ what: String) {
            counts.withLock { counts in
                XCTAssertEqual(counts.hung, 0, "no request hung, \(what)")
                XCTAssertEqual(counts.other, [], "every failure was TRY_AGAIN_LATER with retryAfter, \(what)")
            }
        }
    }
}
