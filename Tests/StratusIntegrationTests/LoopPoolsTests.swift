import Foundation
import NIOCore
import NIOPosix
import PostgresNIO
import StratusCore
import StratusConnections
@testable import StratusPostgres
import StratusTesting
import XCTest

/// The store's connections are one pool per event loop: a task on a loop runs its statements on a
/// connection of that loop, and the connection limit is shared out between the loops' pools.
final class LoopPoolsTests: XCTestCase {
    func testTheConnectionLimitIsSharedOutBetweenTheLoops() {
        XCTAssertEqual(PoolShares.limits(maxConnections: 20, loops: 2), [10, 10])
        XCTAssertEqual(PoolShares.limits(maxConnections: 5, loops: 2), [3, 2])
        XCTAssertEqual(PoolShares.limits(maxConnections: 20, loops: 1), [20])
        XCTAssertEqual(PoolShares.limits(maxConnections: 3, loops: 8), [1, 1, 1], "no pool without a connection")
        XCTAssertEqual(PoolShares.limits(maxConnections: 1, loops: 2), [1])
        XCTAssertEqual(PoolShares.limits(maxConnections: 0, loops: 2), [1])
        XCTAssertEqual(PoolShares.limits(maxConnections: 7, loops: 0), [7])
        for total in 1...40 {
            for loops in 1...12 {
                let limits = PoolShares.limits(maxConnections: total, loops: loops)
                XCTAssertEqual(limits.reduce(0, +), total, "\(total) connections over \(loops) loops")
                XCTAssertLessThanOrEqual(limits.max()! - limits.min()!, 1)
                for kept in 0...total {
                    let shares = PoolShares.shares(of: kept, pools: limits.count)
                    XCTAssertEqual(shares.reduce(0, +), kept)
                    XCTAssertTrue(zip(shares, limits).allSatisfy { $0 <= $1 }, "\(kept) kept of \(total) over \(loops) loops: \(shares) within \(limits)")
                }
            }
        }
    }

    /// The connections to keep open are opened at the store's start, shared out between the loops,
    /// and no more are opened while they suffice.
    func testTheConnectionsToKeepOpenAreOpenedAtTheStartOnEveryLoop() async throws {
        try await Self.withLoops(2) { group, loops in
            let url = try await TestSupport.createDatabase()
            let store = try PostgresStore(url: url, maxConnections: 6, minConnections: 4, eventLoopGroup: group, logger: TestSupport.logger)
            try await withThrowingTaskGroup(of: Void.self) { services in
                services.addTask { try await store.run() }
                defer { services.cancelAll() }
                try await TestSupport.eventually(timeout: .seconds(10), "the four connections to be open") {
                    try await Self.otherConnections(url: url) == 4
                }
                for loop in loops {
                    let connectionLoop = try await Self.connectionLoop(of: store, on: LoopTaskExecutor(loop))
                    XCTAssertEqual(connectionLoop, ObjectIdentifier(loop), "each loop keeps connections of its own")
                }
                let open = try await Self.otherConnections(url: url)
                XCTAssertEqual(open, 4, "one request at a time needs no connection beyond those kept open")
            }
        }
    }

    /// How many sessions the database at `url` has, not counting the tests' own (the one asking, and
    /// those of an earlier look, which may still be ending).
    static func otherConnections(url: String) async throws -> Int64 {
        try await TestSupport.count(url: url, """
            SELECT count(*) FROM pg_stat_activity
            WHERE datname = current_database() AND pid <> pg_backend_pid() AND application_name <> \(TestSupport.observerApplicationName)
            """)
    }

    /// How many of them carry `application_name` `name`.
    static func otherConnections(url: String, named name: String) async throws -> Int64 {
        try await TestSupport.count(url: url, "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid() AND application_name = \(name)")
    }

    func testATaskOnAnEventLoopLeasesAConnectionOfThatLoop() async throws {
        try await Self.withLoops(3) { group, loops in
            try await TestSupport.withMigratedStore { _, url in
                try await NonBlockingRuntimeTests.withStore(url: url, maxConnections: 6, lease: .seconds(10), group: group) { store in
                    for loop in loops {
                        for _ in 0..<3 {
                            let connectionLoop = try await Self.connectionLoop(of: store, on: LoopTaskExecutor(loop))
                            XCTAssertEqual(connectionLoop, ObjectIdentifier(loop), "the connection is the task's loop's")
                        }
                    }
                    // A task on no event loop takes the pools in turn.
                    var seen = Set<ObjectIdentifier>()
                    for _ in 0..<loops.count {
                        seen.insert(try await store.withConnection { ObjectIdentifier($0.eventLoop) })
                    }
                    XCTAssertEqual(seen, Set(loops.map { ObjectIdentifier($0) }))
                }
            }
        }
    }

    /// A loop's pool opens at most its share of the connections, and a request waits only when
    /// every connection of the process is taken: with four over two loops, a request on a loop whose
    /// two connections are busy borrows one of the other loop's; with all four busy, it waits its
    /// lease time and is told to try again.
    func testARequestBorrowsFromAnotherLoopAndWaitsOnlyWhenEveryConnectionIsTaken() async throws {
        try await Self.withLoops(2) { group, loops in
            try await TestSupport.withMigratedStore { _, url in
                try await NonBlockingRuntimeTests.withStore(url: url, maxConnections: 4, lease: .milliseconds(500), group: group) { store in
                    let onLoop = loops.map { LoopTaskExecutor($0) }
                    func hold(_ count: Int, on executor: LoopTaskExecutor) -> [Task<Void, any Error>] {
                        (0..<count).map { _ in
                            Task(executorPreference: executor) {
                                try await store.withConnection { connection in
                                    _ = try await connection.query("SELECT pg_sleep(3)", logger: TestSupport.logger).collect()
                                }
                            }
                        }
                    }
                    func sleeping(_ expected: Int64) async throws {
                        try await TestSupport.eventually(timeout: .seconds(10), "\(expected) connections to be busy") {
                            try await NonBlockingRuntimeTests.sleepingStatements(url: url) == expected
                        }
                    }
                    func lease(on executor: LoopTaskExecutor) async throws -> ObjectIdentifier {
                        try await Self.connectionLoop(of: store, on: executor)
                    }
                    var holders = hold(2, on: onLoop[0])
                    try await sleeping(2)
                    let started = ContinuousClock.now
                    let borrowed = try await lease(on: onLoop[0])
                    XCTAssertEqual(borrowed, ObjectIdentifier(loops[1]), "the busy loop's request borrowed the other loop's connection")
                    XCTAssertLessThan(ContinuousClock.now - started, .seconds(1), "it did not wait for its own loop's")
                    holders += hold(2, on: onLoop[1])
                    try await sleeping(4)
                    for executor in onLoop {
                        let waited = await NonBlockingRuntimeTests.expectTryAgainLater("a request with every connection busy") {
                            _ = try await lease(on: executor)
                        }
                        XCTAssertGreaterThanOrEqual(waited, .milliseconds(400), "it waited for a connection first")
                    }
                    for holder in holders { try await holder.value }
                    let own = try await lease(on: onLoop[0])
                    XCTAssertEqual(own, ObjectIdentifier(loops[0]), "once free, a loop's own connections serve it again")
                }
            }
        }
    }

    /// Runs `body` with an event loop group of `count` loops, shut down afterwards, also on failure.
    static func withLoops(_ count: Int, _ body: (MultiThreadedEventLoopGroup, [any EventLoop]) async throws -> Void) async throws {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: count)
        do {
            try await body(group, Array(group.makeIterator()))
        } catch {
            try await group.shutdownGracefully()
            throw error
        }
        try await group.shutdownGracefully()
    }

    /// Runs one statement on `store` from a task on `executor`'s loop; the loop of the connection it ran on.
    static func connectionLoop(of store: PostgresStore, on executor: LoopTaskExecutor) async throws -> ObjectIdentifier {
        try await withTaskExecutorPreference(executor) {
            XCTAssertTrue(MultiThreadedEventLoopGroup.currentEventLoop === executor.loop, "the task runs on its loop")
            return try await store.withConnection { connection in
                _ = try await connection.query("SELECT 1", logger: TestSupport.logger).collect()
                return ObjectIdentifier(connection.eventLoop)
            }
        }
    }
}

/// Runs a task's jobs on one event loop, as `stratus-api` runs its tasks on the loops.
final class LoopTaskExecutor: TaskExecutor {
    let loop: any EventLoop

    init(_ loop: any EventLoop) {
        self.loop = loop
    }

    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        loop.execute { job.runSynchronously(on: self.asUnownedTaskExecutor()) }
    }
}
