import Crypto
import Foundation
import Logging
import PostgresNIO
import StratusPostgres
import Synchronization

/// The servers scripts/test.sh starts, and a fresh migrated database per test.
public enum TestSupport {
    public static let logger: Logger = {
        var logger = Logger(label: "stratus-test")
        logger.logLevel = ProcessInfo.processInfo.environment["STRATUS_TEST_LOG_LEVEL"].flatMap(Logger.Level.init(rawValue:)) ?? .warning
        return logger
    }()

    public struct MissingServer: Error, CustomStringConvertible {
        public var description: String
        public init(description: String) { self.description = description }
    }

    /// A condition a test waited for did not come about in time.
    public struct TimedOut: Error, CustomStringConvertible {
        public var description: String
    }

    /// Whether the scale tests run at full size (`STRATUS_TEST_SCALE=full`) rather than as the
    /// smoke runs of the suite; scripts/bench.sh measures at scale.
    public static var isFullScale: Bool { ProcessInfo.processInfo.environment["STRATUS_TEST_SCALE"] == "full" }

    /// The admin database URL; integration tests fail (never skip) without it.
    public static func adminDatabaseURL() throws -> String {
        guard let url = ProcessInfo.processInfo.environment["STRATUS_TEST_DATABASE_URL"] else {
            throw MissingServer(description: "STRATUS_TEST_DATABASE_URL is not set: run the tests with scripts/test.sh")
        }
        return url
    }

    /// The broker address; integration tests fail (never skip) without it.
    public static func kafkaBrokers() throws -> String {
        guard let brokers = ProcessInfo.processInfo.environment["STRATUS_TEST_KAFKA_BROKERS"] else {
            throw MissingServer(description: "STRATUS_TEST_KAFKA_BROKERS is not set: run the tests with scripts/test.sh")
        }
        return brokers
    }

    /// A new empty database; returns its URL.
    public static func createDatabase() async throws -> String {
        try await createDatabase(template: nil, adminURL: try adminDatabaseURL())
    }

    /// Runs `body` with a running store on `url`.
    public static func withStore<T: Sendable>(url: String, maxAttempts: Int = 8, _ body: @Sendable (PostgresStore) async throws -> T) async throws -> T {
        let store = try PostgresStore(url: url, maxConnections: 24, maxAttempts: maxAttempts, applicationName: observerApplicationName, logger: logger)
        return try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await store.run() }
            defer { group.cancelAll() }
            return try await body(store)
        }
    }

    /// The `application_name` of the stores the tests open to set up and to look: tests that count
    /// a server's sessions leave these out (one closed a moment ago may still be listed).
    public static let observerApplicationName = "stratus-test-observer"

    /// The one number `query` answers on the database at `url`, asked from a store of its own.
    public static func count(url: String, _ query: PostgresQuery) async throws -> Int64 {
        try await withStore(url: url) { store in try await count(store, query) }
    }

    /// The one number `query` answers, asked through `store`.
    public static func count(_ store: PostgresStore, _ query: PostgresQuery) async throws -> Int64 {
        try await store.withConnection { connection in
            var count: Int64 = 0
            for try await value in try await connection.query(query, logger: logger).decode(Int64.self) { count = value }
            return count
        }
    }

    /// The repository's migrations.
    public static func migrations() throws -> [Migration] {
        try Migration.load(from: repositoryRoot.appendingPathComponent("migrations"))
    }

    /// Runs `body` with a store on a fresh, migrated database (a copy of the run's template).
    public static func withMigratedStore<T: Sendable>(maxAttempts: Int = 8, _ body: @Sendable (PostgresStore, String) async throws -> T) async throws -> T {
        let url = try await createMigratedDatabase()
        return try await withStore(url: url, maxAttempts: maxAttempts) { store in
            try await body(store, url)
        }
    }

    /// A new database with every migration applied; returns its URL. It is a copy of the run's
    /// template database, which the first test of the run to ask migrates from empty (the
    /// migration tests still migrate empty databases of their own): copying takes a fraction of
    /// the time migrating does, and the test processes of a parallel run share the template.
    public static func createMigratedDatabase() async throws -> String {
        let adminURL = try adminDatabaseURL()
        let template = try await MigratedTemplate.shared.name(adminURL: adminURL)
        return try await createDatabase(template: template, adminURL: adminURL)
    }

    /// A new database copied from `template` (or empty); returns its URL.
    private static func createDatabase(template: String?, adminURL: String) async throws -> String {
        let name = "t_" + UUID().uuidString.lowercased().replacingOccurrences(of: "-", with: "").prefix(20)
        let copy = template.map { " TEMPLATE \($0)" } ?? ""
        try await withStore(url: adminURL) { store in
            try await store.withConnection { connection in
                try await connection.query(PostgresQuery(unsafeSQL: "CREATE DATABASE \(name)\(copy)"), logger: logger)
            }
        }
        return databaseURL(adminURL: adminURL, name: name)
    }

    /// The URL of database `name` on the server of `adminURL`.
    public static func databaseURL(adminURL: String, name: some StringProtocol) -> String {
        var components = URLComponents(string: adminURL)!
        components.path = "/\(name)"
        return components.string!
    }

    public static var repositoryRoot: URL {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    }

    /// Polls `condition` until it holds or `timeout` passes.
    public static func eventually(timeout: Duration = .seconds(60), _ what: String, _ condition: () async throws -> Bool) async throws {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            if try await condition() { return }
            try await Task.sleep(for: .milliseconds(200))
        }
        throw TimedOut(description: "timed out after \(timeout) waiting for \(what)")
    }
}

/// Holds each runner's first arrival until all `runners` have arrived; later arrivals pass.
public final class StartLine: Sendable {
    private let runners: Int
    private let state = Mutex<(arrived: Set<Int>, waiting: [CheckedContinuation<Void, Never>])>(([], []))

    public init(runners: Int) { self.runners = runners }

    public func arrive(_ runner: Int) async {
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
    public static func plan(of statement: PostgresQuery, in store: PostgresStore) async throws -> String {
        try await store.withConnection { connection in
            let rows = try await connection.query(PostgresQuery(unsafeSQL: "EXPLAIN " + statement.sql, binds: statement.binds), logger: logger)
            var lines: [String] = []
            for try await line in rows.decode(String.self) { lines.append(line) }
            return lines.joined(separator: "\n")
        }
    }
}

/// The run's migrated template database: made once per server (whichever test process asks first,
/// under an advisory lock, so parallel test processes make it once), named after the migrations'
/// checksums so a changed migration gets a template of its own, and made visible only once complete
/// (migrated under a temporary name, then renamed).
public actor MigratedTemplate {
    public static let shared = MigratedTemplate()
    private var made: String?

    public func name(adminURL: String) async throws -> String {
        if let made { return made }
        let migrations = try TestSupport.migrations()
        let digest = SHA256.hash(data: Data(migrations.map(\.checksum).joined().utf8)).prefix(6).map { String(format: "%02x", $0) }.joined()
        let name = "template_\(digest)"
        try await TestSupport.withStore(url: adminURL) { store in
            try await store.withConnection { connection in
                // A session lock: held across the statements below, released when they are done.
                try await connection.query("SELECT pg_advisory_lock(4242)", logger: TestSupport.logger)
                do {
                    var exists = false
                    for try await _ in try await connection.query("SELECT 1 FROM pg_database WHERE datname = \(name)", logger: TestSupport.logger) {
                        exists = true
                    }
                    if !exists {
                        let building = name + "_building"
                        try await connection.query(PostgresQuery(unsafeSQL: "DROP DATABASE IF EXISTS \(building)"), logger: TestSupport.logger)
                        try await connection.query(PostgresQuery(unsafeSQL: "CREATE DATABASE \(building)"), logger: TestSupport.logger)
                        try await TestSupport.withStore(url: TestSupport.databaseURL(adminURL: adminURL, name: building)) { store in
                            try await Migrator(store: store, migrations: migrations).migrate(logger: TestSupport.logger)
                        }
                        try await connection.query(PostgresQuery(unsafeSQL: "ALTER DATABASE \(building) RENAME TO \(name)"), logger: TestSupport.logger)
                    }
                } catch {
                    _ = try? await connection.query("SELECT pg_advisory_unlock(4242)", logger: TestSupport.logger)
                    throw error
                }
                try await connection.query("SELECT pg_advisory_unlock(4242)", logger: TestSupport.logger)
            }
        }
        made = name
        return name
    }
}
