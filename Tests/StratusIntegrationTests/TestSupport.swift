import Foundation
import Logging
import PostgresNIO
@testable import StratusPostgres
import Synchronization
import XCTest

/// The servers scripts/test.sh starts, and a fresh migrated database per test.
enum TestSupport {
    static let logger: Logger = {
        var logger = Logger(label: "stratus-test")
        logger.logLevel = ProcessInfo.processInfo.environment["STRATUS_TEST_LOG_LEVEL"].flatMap(Logger.Level.init(rawValue:)) ?? .warning
        return logger
    }()

    struct MissingServer: Error, CustomStringConvertible {
        var description: String
    }

    /// The admin database URL; integration tests fail (never skip) without it.
    static func adminDatabaseURL() throws -> String {
        guard let url = ProcessInfo.processInfo.environment["STRATUS_TEST_DATABASE_URL"] else {
            throw MissingServer(description: "STRATUS_TEST_DATABASE_URL is not set: run the tests with scripts/test.sh")
        }
        return url
    }

    /// The broker address; integration tests fail (never skip) without it.
    static func kafkaBrokers() throws -> String {
        guard let brokers = ProcessInfo.processInfo.environment["STRATUS_TEST_KAFKA_BROKERS"] else {
            throw MissingServer(description: "STRATUS_TEST_KAFKA_BROKERS is not set: run the tests with scripts/test.sh")
        }
        return brokers
    }

    /// A new empty database; returns its URL.
    static func createDatabase() async throws -> String {
        let adminURL = try adminDatabaseURL()
        let name = "t_" + UUID().uuidString.lowercased().replacingOccurrences(of: "-", with: "").prefix(20)
        try await withStore(url: adminURL) { store in
            try await store.withConnection { connection in
                try await connection.query(PostgresQuery(unsafeSQL: "CREATE DATABASE \(name)"), logger: logger)
            }
        }
        var components = URLComponents(string: adminURL)!
        components.path = "/\(name)"
        return components.string!
    }

    /// Runs `body` with a running store on `url`.
    static func withStore<T: Sendable>(url: String, maxAttempts: Int = 8, _ body: @Sendable (PostgresStore) async throws -> T) async throws -> T {
        let store = try PostgresStore(url: url, maxConnections: 24, maxAttempts: maxAttempts, logger: logger)
        return try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await store.run() }
            defer { group.cancelAll() }
            return try await body(store)
        }
    }

    /// The one number `query` answers on the database at `url`, asked from a store of its own.
    static func count(url: String, _ query: PostgresQuery) async throws -> Int64 {
        try await withStore(url: url) { store in try await count(store, query) }
    }

    /// The one number `query` answers, asked through `store`.
    static func count(_ store: PostgresStore, _ query: PostgresQuery) async throws -> Int64 {
        try await store.withConnection { connection in
            var count: Int64 = 0
            for try await value in try await connection.query(query, logger: logger).decode(Int64.self) { count = value }
            return count
        }
    }

    /// The repository's migrations.
    static func migrations() throws -> [Migration] {
        try Migration.load(from: repositoryRoot.appendingPathComponent("migrations"))
    }

    /// Runs `body` with a store on a fresh, migrated database.
    static func withMigratedStore<T: Sendable>(maxAttempts: Int = 8, _ body: @Sendable (PostgresStore, String) async throws -> T) async throws -> T {
        let url = try await createDatabase()
        let migrations = try migrations()
        return try await withStore(url: url, maxAttempts: maxAttempts) { store in
            try await Migrator(store: store, migrations: migrations).migrate(logger: logger)
            return try await body(store, url)
        }
    }

    static var repositoryRoot: URL {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    }

    /// Polls `condition` until it holds or `timeout` passes.
    static func eventually(timeout: Duration = .seconds(60), _ what: String, _ condition: () async throws -> Bool) async throws {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            if try await condition() { return }
            try await Task.sleep(for: .milliseconds(200))
        }
        XCTFail("timed out after \(timeout) waiting for \(what)")
        throw MissingServer(description: "timed out waiting for \(what)")
    }
}

/// Holds each runner's first arrival until all `runners` have arrived; later arrivals pass.
final class StartLine: Sendable {
    private let runners: Int
    private let state = Mutex<(arrived: Set<Int>, waiting: [CheckedContinuation<Void, Never>])>(([], []))

    init(runners: Int) { self.runners = runners }

    func arrive(_ runner: Int) async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let released = state.withLock { state -> [CheckedContinuation<Void, Never>] in
                guard state.arrived.insert(runner).inserted else { return [continuation] }
                state.waiting.append(continuation)
                guard state.arrived.count == runners else { return [] }
                defer { state.waiting = [] }
                return state.waiting
            }
            released.forEach { $0.resume() }
        }
    }
}

extension TestSupport {
    /// PostgreSQL's plan of `statement` (`EXPLAIN`), one line per plan node, for tests that hold a
    /// statement to an index.
    static func plan(of statement: PostgresQuery, in store: PostgresStore) async throws -> String {
        try await store.withConnection { connection in
            let rows = try await connection.query(PostgresQuery(unsafeSQL: "EXPLAIN " + statement.sql, binds: statement.binds), logger: logger)
            var lines: [String] = []
            for try await line in rows.decode(String.self) { lines.append(line) }
            return lines.joined(separator: "\n")
        }
    }
}
