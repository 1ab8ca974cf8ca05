import Foundation
import Logging
import Metrics
import PostgresNIO
import ServiceLifecycle
import StratusCore

/// The one connection pool of a process, and the serializable transaction helper every write goes through.
///
/// It is a `Service`: run it in the process's service group before anything that queries.
public final class PostgresStore: Service, Sendable {
    /// The underlying pool. Other adapter types borrow it; nothing above the adapter layer sees it.
    let client: PostgresClient
    /// How often a transaction that lost a serialization race is tried in all.
    public let maxAttempts: Int
    /// The retryAfter (seconds) a client is told when attempts run out.
    public let retryAfterSeconds: Int

    /// Creates the store from a `postgres://user:password@host:port/database` URL.
    public init(url: String, maxConnections: Int = 20, maxAttempts: Int = 8, retryAfterSeconds: Int = 1, logger: Logger) throws {
        var configuration = try PostgresURL.parse(url)
        configuration.options.maximumConnections = maxConnections
        configuration.options.minimumConnections = 0
        self.client = PostgresClient(configuration: configuration, backgroundLogger: logger)
        self.maxAttempts = max(1, maxAttempts)
        self.retryAfterSeconds = retryAfterSeconds
    }

    /// Runs the pool until the service group shuts down.
    public func run() async throws {
        await client.run()
    }

    /// Runs `body` on one connection outside of any explicit transaction.
    public func withConnection<T: Sendable>(_ body: (PostgresConnection) async throws -> T) async throws -> T {
        try await client.withConnection(body)
    }

    /// Runs `body` in `BEGIN ISOLATION LEVEL SERIALIZABLE` … `COMMIT`, retrying the whole closure when
    /// PostgreSQL reports a serialization failure (40001) or deadlock (40P01), with jittered exponential
    /// backoff. When attempts run out it throws `StratusError(.tryAgainLater)` with `retryAfter`.
    ///
    /// The closure must be safe to run more than once: it may not have effects outside the transaction.
    ///
    /// With `lock`, the transaction first takes a session advisory lock on that key and keeps it until
    /// after COMMIT: writers of one zone (or one record) then queue instead of aborting each other, and
    /// the transaction's snapshot is taken only once the lock is held.
    public func serializable<T: Sendable>(
        logger: Logger,
        lock: String? = nil,
        _ body: @Sendable (Transaction) async throws -> T
    ) async throws -> T {
        try await serializable(logger: logger, locks: lock.map { [$0] } ?? [], body)
    }

    /// `serializable(logger:lock:_:)` with several lock keys, taken in sorted order so two
    /// transactions never wait for each other in a cycle.
    public func serializable<T: Sendable>(
        logger: Logger,
        locks: [String],
        _ body: @Sendable (Transaction) async throws -> T
    ) async throws -> T {
        try await transaction(isolation: "SERIALIZABLE", logger: logger, locks: locks, body)
    }

    /// Runs `body` in a READ COMMITTED transaction with the same retries (deadlocks, a rollback at
    /// commit) as `serializable`. Only for writes that are correct under concurrency statement by
    /// statement — the query index rebuild, whose upserts keep the newer version row by row — where
    /// one large serializable transaction would abort on every write the live indexer makes nearby.
    public func readCommitted<T: Sendable>(logger: Logger, _ body: @Sendable (Transaction) async throws -> T) async throws -> T {
        try await transaction(isolation: "READ COMMITTED", logger: logger, locks: [], body)
    }

    private func transaction<T: Sendable>(
        isolation: StaticString, logger: Logger, locks: [String], _ body: @Sendable (Transaction) async throws -> T
    ) async throws -> T {
        let locks = Array(Set(locks)).sorted()
        var attempt = 0
        while true {
            attempt += 1
            do {
                return try await client.withConnection { connection in
                    for lock in locks {
                        try await connection.execute("SELECT pg_advisory_lock(hashtextextended(\(lock), 0))", logger: logger)
                    }
                    do {
                        let value = try await Self.inTransaction(connection, isolation: isolation, logger: logger, body)
                        for lock in locks.reversed() {
                            try await connection.execute("SELECT pg_advisory_unlock(hashtextextended(\(lock), 0))", logger: logger)
                        }
                        return value
                    } catch {
                        for lock in locks.reversed() {
                            try? await connection.execute("SELECT pg_advisory_unlock(hashtextextended(\(lock), 0))", logger: logger)
                        }
                        throw error
                    }
                }
            } catch let error where PostgresErrors.isSerializationFailure(error) || error is TransactionRolledBack {
                StoreMetrics.serializationRetries.increment()
                guard attempt < maxAttempts else {
                    logger.warning("serializable transaction gave up", metadata: ["attempts": "\(attempt)"])
                    throw StratusError(.tryAgainLater, "The zone is busy; retry the request", retryAfter: retryAfterSeconds)
                }
                let cap = min(200.0, 2.0 * pow(2.0, Double(attempt)))
                try await Task.sleep(for: .milliseconds(Int.random(in: 1...Int(cap))))
            }
        }
    }

    private static func inTransaction<T>(
        _ connection: PostgresConnection, isolation: StaticString, logger: Logger, _ body: @Sendable (Transaction) async throws -> T
    ) async throws -> T {
        try await connection.query(PostgresQuery(unsafeSQL: "BEGIN ISOLATION LEVEL \(isolation)"), logger: logger)
        let value: T
        do {
            value = try await body(Transaction(connection: connection, logger: logger))
        } catch {
            // A failed ROLLBACK leaves nothing to undo: the connection is closed by the pool.
            _ = try? await connection.query("ROLLBACK", logger: logger)
            throw error
        }
        do {
            try await connection.commit()
        } catch {
            _ = try? await connection.query("ROLLBACK", logger: logger)
            throw error
        }
        return value
    }
}

/// Recognises PostgreSQL errors by SQLSTATE without leaking their text upwards.
enum PostgresErrors {
    static func sqlState(_ error: any Error) -> String? {
        if let error = error as? PSQLError { return error.serverInfo?[.sqlState] }
        // COMMIT goes through the API that reports the command tag, which wraps errors the older way.
        if case .server(let message)? = error as? PostgresError { return message.fields[.sqlState] }
        return nil
    }

    static func isSerializationFailure(_ error: any Error) -> Bool {
        switch sqlState(error) {
        case "40001", "40P01": true
        default: false
        }
    }
}

enum StoreMetrics {
    static let serializationRetries = Counter(label: "stratus_serialization_retries_total")
}

/// An open serializable transaction. Layers above the adapter hand it back to adapter functions;
/// they never see the connection.
public struct Transaction: Sendable {
    let connection: PostgresConnection
    let logger: Logger
}

extension PostgresStore {
    /// Throws unless the database answers: the readiness check.
    public func ping(logger: Logger) async throws {
        _ = try await client.withConnection { connection in
            try await connection.execute("SELECT 1", logger: logger)
        }
    }
}

extension PostgresStore {
    /// Runs `body` in one read-only REPEATABLE READ transaction: every query sees the same snapshot,
    /// so a sync page and the token it returns describe one moment.
    public func snapshot<T: Sendable>(logger: Logger, _ body: @Sendable (Transaction) async throws -> T) async throws -> T {
        try await client.withConnection { connection in
            try await connection.query("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY", logger: logger)
            do {
                let value = try await body(Transaction(connection: connection, logger: logger))
                try await connection.query("COMMIT", logger: logger)
                return value
            } catch {
                _ = try? await connection.query("ROLLBACK", logger: logger)
                throw error
            }
        }
    }
}
