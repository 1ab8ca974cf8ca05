import Foundation
import ServiceLifecycle
import StratusConnections
@testable import StratusPostgres
import StratusTesting
import StratusWorkers
import XCTest

/// The dispatcher ends cleanly on graceful shutdown (SIGTERM): a service that throws then makes its
/// whole process exit with a failure, so a stopped stratus-subscriptions would look like a crash.
final class DeliveryDispatcherShutdownTests: XCTestCase {
    func testGracefulShutdownWhileIdleEndsTheDispatcherWithoutAnError() async throws {
        try await TestSupport.withMigratedStore { store, _ in
            for round in 1...5 {
                let since = try await Self.clock(store)
                let dispatcher = DeliveryDispatcher(store: store, channels: [], logger: TestSupport.logger)
                let group = ServiceGroup(configuration: .init(services: [dispatcher], logger: TestSupport.logger))
                try await withThrowingTaskGroup(of: Void.self) { tasks in
                    tasks.addTask { try await group.run() }
                    // Idle: waiting for a commit that adds deliveries, as it is most of its life. Each
                    // wait listens on a connection of its own; on a loaded machine the one a wait that
                    // ran out closed may still be listed beside the next, so at least one, not exactly.
                    try await TestSupport.eventually(timeout: .seconds(30), "the dispatcher to wait for deliveries (round \(round))") {
                        try await Self.waiting(store, since: since) >= 1
                    }
                    await group.triggerGracefulShutdown()
                    do {
                        try await tasks.waitForAll()
                    } catch {
                        XCTFail("round \(round): the dispatcher threw on graceful shutdown: \(error)")
                    }
                }
            }
        }
    }

    /// The store itself ends on graceful shutdown and closes its connections: a process stopped with
    /// SIGTERM exits instead of waiting for ever for its pools.
    func testGracefulShutdownEndsTheStoreAndClosesItsConnections() async throws {
        let url = try await TestSupport.createDatabase()
        let store = try PostgresStore(url: url, maxConnections: 3, minConnections: 2, applicationName: "stratus-shutdown-test", logger: TestSupport.logger)
        let group = ServiceGroup(configuration: .init(services: [store], logger: TestSupport.logger))
        let ended = OneShot<Bool>()
        Task {
            do { try await group.run() } catch { XCTFail("the store threw on graceful shutdown: \(error)") }
            ended.resume(with: .success(true))
        }
        try await TestSupport.eventually(timeout: .seconds(10), "the kept connections to open") {
            try await LoopPoolsTests.otherConnections(url: url, named: "stratus-shutdown-test") == 2
        }
        await group.triggerGracefulShutdown()
        let limit = LoopTimer.schedule(after: .seconds(20)) { ended.resume(with: .success(false)) }
        let stopped = try await withCheckedThrowingContinuation { ended.start($0) }
        limit.cancel()
        XCTAssertTrue(stopped, "the store ended within 20 s of a graceful shutdown")
        try await TestSupport.eventually(timeout: .seconds(10), "the store's connections to close") {
            try await LoopPoolsTests.otherConnections(url: url, named: "stratus-shutdown-test") == 0
        }
    }

    /// The database's clock, in microseconds since 1970.
    static func clock(_ store: PostgresStore) async throws -> Int64 {
        try await store.withConnection { connection in
            let rows = try await connection.query("SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::int8", logger: TestSupport.logger)
            for try await now in rows.decode(Int64.self) { return now }
            return 0
        }
    }

    /// Connections of this database that went idle after `since` having run the dispatcher's last
    /// statement before it waits (it listens first, then asks when the next delivery is due).
    static func waiting(_ store: PostgresStore, since: Int64) async throws -> Int64 {
        try await store.withConnection { connection in
            let rows = try await connection.query("""
                SELECT count(*) FROM pg_stat_activity
                WHERE datname = current_database() AND pid <> pg_backend_pid() AND state = 'idle' AND query LIKE '%min(next_attempt_at)%'
                  AND state_change > to_timestamp(\(since)::float8 / 1000000)
                """, logger: TestSupport.logger)
            for try await count in rows.decode(Int64.self) { return count }
            return 0
        }
    }
}
