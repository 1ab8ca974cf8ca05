import Foundation
import Logging
import Metrics
import NIOCore
import PostgresNIO
import ServiceLifecycle
import StratusConnections
import StratusCore
import Synchronization
import Tracing

/// The connection pools of a process (one per event loop, `LoopPools`), and the serializable
/// transaction helper every write goes through.
///
/// It is a `Service`: run it in the process's service group before anything that queries.
public final class PostgresStore: Service, Sendable {
    /// The underlying pools, one per event loop. Nothing above the adapter layer sees them.
    let pools: LoopPools
    /// How often a transaction that lost a serialization race is tried in all.
    public let maxAttempts: Int
    /// The retryAfter (seconds) a client is told when attempts run out.
    public let retryAfterSeconds: Int
    /// This process's queue per lock key: writers of one zone wait here, not on a pooled connection.
    let locks = KeyedLock()
    /// How long a request waits for a pooled connection.
    let leaseTimeout: Duration
    /// Every connection's settings, for the dedicated ones.
    let configuration: PostgresConnection.Configuration
    /// Where dedicated connections live.
    let eventLoopGroup: any EventLoopGroup
    let logger: Logger
    /// The work running on each connection, ended when the connection closes.
    let watches: ConnectionWatches
    /// The hot read statements, prepared once per connection.
    let statements: PreparedStatements
    /// The `storage_usage` shard each running transaction adds to.
    let usageShards = UsageShards()

    /// Server-side limits every connection of the pool runs under, so no statement, lock wait or
    /// forgotten transaction holds a connection (and what it locked) for ever.
    public struct Timeouts: Sendable {
        /// `statement_timeout`: the longest one statement may run.
        public var statement: Duration = .seconds(30)
        /// `lock_timeout`: the longest a statement waits for a lock (advisory locks included).
        public var lock: Duration = .seconds(10)
        /// `idle_in_transaction_session_timeout`: the longest a transaction may sit idle.
        public var idleInTransaction: Duration = .seconds(60)
        /// The longest a request waits for a pooled connection (every one busy, or the database
        /// unreachable) before it is answered `TRY_AGAIN_LATER`: a full pool never makes a request hang.
        public var lease: Duration = .seconds(10)
        /// How long work on a connection that closed may still take to end (a statement in flight
        /// fails at once) before it is abandoned and the request answered `TRY_AGAIN_LATER`.
        public var closeGrace: Duration = .seconds(1)

        /// The defaults.
        public init() {}

        var startupParameters: [(String, String)] {
            [("statement_timeout", Self.milliseconds(statement)), ("lock_timeout", Self.milliseconds(lock)),
             ("idle_in_transaction_session_timeout", Self.milliseconds(idleInTransaction))]
        }

        private static func milliseconds(_ duration: Duration) -> String {
            String(max(0, TimeAmount(duration).nanoseconds / 1_000_000))
        }
    }

    /// Creates the store from a `postgres://user:password@host:port/database` URL, with at most
    /// `maxConnections` connections, of which `minConnections` are kept open, shared out between the
    /// pools of `eventLoopGroup`'s loops.
    public init(
        url: String, maxConnections: Int = 20, minConnections: Int = 0, maxAttempts: Int = 8, retryAfterSeconds: Int = 1,
        timeouts: Timeouts = Timeouts(), preparedStatements: Int = 256, eventLoopGroup: any EventLoopGroup = PostgresConnection.defaultEventLoopGroup,
        applicationName: String = "stratus", logger: Logger
    ) throws {
        let configuration = try Self.connectionConfiguration(url: url, timeouts: timeouts, applicationName: applicationName)
        self.applicationName = applicationName
        self.pools = LoopPools(
            configuration: configuration, maxConnections: maxConnections, minConnections: minConnections, group: eventLoopGroup,
            retryAfterSeconds: retryAfterSeconds, logger: logger)
        self.configuration = configuration
        self.eventLoopGroup = eventLoopGroup
        self.logger = logger
        self.maxAttempts = max(1, maxAttempts)
        self.retryAfterSeconds = retryAfterSeconds
        self.leaseTimeout = timeouts.lease
        self.watches = ConnectionWatches(grace: timeouts.closeGrace)
        self.statements = PreparedStatements(capacity: preparedStatements)
    }

    /// Every connection's settings: the URL's server and credentials, under `timeouts`. No
    /// keep-alive statement runs on idle connections: a connection that closed is seen by its close
    /// (`ConnectionWatches`, `ConnectionPool`), and a statement on one that went silent waits for TCP
    /// either way.
    static func connectionConfiguration(url: String, timeouts: Timeouts, applicationName: String = "stratus") throws -> PostgresConnection.Configuration {
        var configuration = try PostgresURL.parse(url)
        configuration.options.additionalStartupParameters += timeouts.startupParameters + [("application_name", applicationName)]
        return configuration
    }

    /// The `application_name` of the pooled connections (the process's name: `pg_stat_activity`
    /// tells the processes apart); dedicated connections carry it with `-dedicated` appended.
    let applicationName: String
    var dedicatedApplicationName: String { applicationName + "-dedicated" }

    /// Runs the pools until the service group shuts down (gracefully or by cancellation); then
    /// closes every connection. In a service group the store comes first, so it stops last.
    public func run() async throws {
        await cancelWhenGracefulShutdown { [pools] in await pools.run() }
    }

    /// The pools' settings, for tests and the configuration check.
    var poolSettings: [PoolState.Settings] { pools.pools.map(\.settings) }

    /// Runs `body` on one connection outside of any explicit transaction.
    public func withConnection<T: Sendable>(_ body: @escaping @Sendable (PostgresConnection) async throws -> T) async throws -> T {
        do {
            return try await leased(body)
        } catch {
            throw PostgresErrors.limit(error, retryAfter: retryAfterSeconds) ?? error
        }
    }

    /// Runs `body` on a connection of its own, opened for it outside the pools and closed after it:
    /// for work that holds a connection for as long as it runs (a LISTEN, the relay's lock), which
    /// must never take a connection requests need. Fails with `TRY_AGAIN_LATER` when the database
    /// cannot be reached; ends when the connection closes (`ConnectionWatches`).
    public func withDedicatedConnection<T: Sendable>(_ body: @escaping @Sendable (PostgresConnection) async throws -> T) async throws -> T {
        var configuration = configuration
        configuration.options.additionalStartupParameters = configuration.options.additionalStartupParameters.map { name, value in
            (name, name == "application_name" ? dedicatedApplicationName : value)
        }
        do {
            let connection = try await PostgresConnection.connect(
                on: eventLoopGroup.next(), configuration: configuration, id: ConnectionPool.nextConnectionID(), logger: logger)
            do {
                let value = try await watches.run(on: connection, retryAfter: retryAfterSeconds, body)
                try? await connection.close()
                return value
            } catch {
                try? await connection.close()
                throw error
            }
        } catch {
            throw PostgresErrors.limit(error, retryAfter: retryAfterSeconds) ?? error
        }
    }

    /// Runs `work` on a pooled connection, waiting at most `leaseTimeout` for one; then
    /// `TRY_AGAIN_LATER`. Once `work` has its connection it runs to its end, however long, unless the
    /// connection closes under it (`ConnectionWatches`).
    func leased<T: Sendable>(_ work: @escaping @Sendable (PostgresConnection) async throws -> T) async throws -> T {
        let timeout = leaseTimeout
        let watches = watches
        let retryAfter = retryAfterSeconds
        return try await pools.withPool { pool in
            try await pool.withConnection(timeout: timeout) { connection in
                try await watches.run(on: connection, retryAfter: retryAfter, work)
            }
        }
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
        file: StaticString = #fileID, function: StaticString = #function,
        _ body: @escaping @Sendable (Transaction) async throws -> T
    ) async throws -> T {
        try await serializable(logger: logger, locks: lock.map { [$0] } ?? [], file: file, function: function, body)
    }

    /// `serializable(logger:lock:_:)` with several lock keys, taken in sorted order so two
    /// transactions never wait for each other in a cycle.
    public func serializable<T: Sendable>(
        logger: Logger,
        locks: [String],
        file: StaticString = #fileID, function: StaticString = #function,
        _ body: @escaping @Sendable (Transaction) async throws -> T
    ) async throws -> T {
        try await transaction(isolation: "SERIALIZABLE", logger: logger, locks: locks, caller: (file, function), body)
    }

    /// Runs `body` in a REPEATABLE READ transaction after taking `locks`, with the same retries as
    /// `serializable`: for writers whose every possible conflict is with a holder of one of the same
    /// locks (all writers of a zone take the zone's lock). The locks put such writers in a serial
    /// order, each snapshot is taken once its locks are held, and a row changed under an older
    /// snapshot still fails the transaction (PostgreSQL's first-updater-wins), so the outcome is
    /// serializable. Unlike SERIALIZABLE it takes no predicate locks: those lie on whole index pages
    /// shared with other zones' rows and would make independent writers abort each other.
    public func locked<T: Sendable>(
        logger: Logger, locks: [String], file: StaticString = #fileID, function: StaticString = #function,
        _ body: @escaping @Sendable (Transaction) async throws -> T
    ) async throws -> T {
        // Without a lock nothing orders the writers: then only SERIALIZABLE is safe.
        try await transaction(
            isolation: locks.isEmpty ? "SERIALIZABLE" : "REPEATABLE READ", logger: logger, locks: locks, caller: (file, function), body)
    }

    /// Runs `body` in a READ COMMITTED transaction with the same retries (deadlocks, a rollback at
    /// commit) as `serializable`. Only for writes that are correct under concurrency statement by
    /// statement — the query index rebuild, whose upserts keep the newer version row by row — where
    /// one large serializable transaction would abort on every write the live indexer makes nearby.
    public func readCommitted<T: Sendable>(
        logger: Logger, file: StaticString = #fileID, function: StaticString = #function,
        _ body: @escaping @Sendable (Transaction) async throws -> T
    ) async throws -> T {
        try await transaction(isolation: "READ COMMITTED", logger: logger, locks: [], caller: (file, function), body)
    }

    /// The one transaction helper: within a traced request or apply, one span (`StoreTracing`)
    /// named after the caller covers the transaction with its lock waits and retries.
    private func transaction<T: Sendable>(
        isolation: StaticString, logger: Logger, locks: [String], caller: (file: StaticString, function: StaticString),
        _ body: @escaping @Sendable (Transaction) async throws -> T
    ) async throws -> T {
        try await StoreTracing.span(isolation: isolation, caller: caller) { span in
            try await self.transaction(isolation: isolation, logger: logger, locks: locks, span: span, body)
        }
    }

    private func transaction<T: Sendable>(
        isolation: StaticString, logger: Logger, locks: [String], span: (any Span)?, _ body: @escaping @Sendable (Transaction) async throws -> T
    ) async throws -> T {
        let locks = Array(Set(locks)).sorted()
        let usageShards = usageShards
        let statements = statements
        var attempt = 0
        while true {
            attempt += 1
            do {
                // Queue in this process first, holding nothing; then take a connection and the
                // advisory locks that order writers across processes.
                return try await self.locks.withLocks(locks) {
                    try await leased { connection in
                        try await Self.locked(locks, on: connection, logger: logger) {
                            try await usageShards.withShard { shard in
                                try await Self.inTransaction(
                                    connection, isolation: isolation, usageShard: shard, containerShard: usageShards.containerShard(shard),
                                    statements: statements, logger: logger, body)
                            }
                        }
                    }
                }
            } catch let error where PostgresErrors.isSerializationFailure(error) || error is TransactionRolledBack {
                StoreMetrics.serializationRetries.increment()
                span?.attributes["stratus.transaction.retries"] = attempt
                guard attempt < maxAttempts else {
                    logger.warning("serializable transaction gave up", metadata: ["attempts": "\(attempt)"])
                    throw StratusError(.tryAgainLater, "The zone is busy; retry the request", retryAfter: retryAfterSeconds)
                }
                let cap = min(200.0, 2.0 * pow(2.0, Double(attempt)))
                try await Task.sleep(for: .milliseconds(Int.random(in: 1...Int(cap))))
            } catch {
                throw PostgresErrors.limit(error, retryAfter: retryAfterSeconds) ?? error
            }
        }
    }

    /// Runs `body` holding session advisory locks on `keys` (in the given order), released after it.
    private static func locked<T>(
        _ keys: [String], on connection: PostgresConnection, logger: Logger, _ body: () async throws -> T
    ) async throws -> T {
        var held: [String] = []
        do {
            for key in keys {
                try await connection.execute("SELECT pg_advisory_lock(hashtextextended(\(key), 0))", logger: logger)
                held.append(key)
            }
            let value = try await body()
            // A closed connection's locks went with its session (and a statement sent on it now would
            // never be answered): the work is done either way.
            for key in held.reversed() where !connection.isClosed {
                try await connection.execute("SELECT pg_advisory_unlock(hashtextextended(\(key), 0))", logger: logger)
            }
            return value
        } catch {
            for key in held.reversed() where !connection.isClosed {
                try? await connection.execute("SELECT pg_advisory_unlock(hashtextextended(\(key), 0))", logger: logger)
            }
            throw error
        }
    }

    private static func inTransaction<T>(
        _ connection: PostgresConnection, isolation: StaticString, usageShard: Int16, containerShard: Int16, statements: PreparedStatements, logger: Logger,
        _ body: @escaping @Sendable (Transaction) async throws -> T
    ) async throws -> T {
        try await connection.query(PostgresQuery(unsafeSQL: "BEGIN ISOLATION LEVEL \(isolation)"), logger: logger)
        let value: T
        do {
            value = try await body(Transaction(
                connection: connection, logger: logger, usageShard: usageShard, containerShard: containerShard, statements: statements))
        } catch {
            // A failed ROLLBACK leaves nothing to undo: the connection is closed by the pool. A closed
            // connection rolled the transaction back as it went.
            if !connection.isClosed { _ = try? await connection.query("ROLLBACK", logger: logger) }
            throw error
        }
        do {
            try await connection.commit()
        } catch {
            if !connection.isClosed { _ = try? await connection.query("ROLLBACK", logger: logger) }
            throw error
        }
        return value
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
    /// The `storage_usage` row this transaction adds to (`UsageShards`); read-only transactions,
    /// which add nothing, have shard 0.
    let usageShard: Int16
    /// The `container_usage` row this transaction adds to (`UsageShards.containerShard`).
    let containerShard: Int16
    /// The store's prepared statements (`prepared(_:)`); nil: every statement is planned at its call.
    let statements: PreparedStatements?

    init(connection: PostgresConnection, logger: Logger, usageShard: Int16 = 0, containerShard: Int16? = nil, statements: PreparedStatements? = nil) {
        self.connection = connection
        self.logger = logger
        self.usageShard = usageShard
        self.containerShard = containerShard ?? usageShard
        self.statements = statements
    }

    /// Runs a statement of a write or of a worker's apply as a prepared statement
    /// (`PreparedStatements`): only for one whose best plan does not depend on the values or on the
    /// tables' statistics, i.e. rows found by a primary key or a unique key, and rows inserted.
    /// PostgreSQL then stops planning it after five calls on a connection; planning was most of
    /// such statements' cost (docs/benchmarks.md, "Per-call statements of writes and workers
    /// prepared"). A statement whose plan could depend on them stays `connection.query`: a zone's
    /// records by `record_name = ANY(…)`, whose generic plan guesses the list's length and on a
    /// young table read the whole zone, or a partial index whose predicate names values. One
    /// record's statements (`\(recordNames:)` with one name) find it by its primary key and run
    /// prepared (`query(_:prepared:)`).
    func prepared(_ query: PostgresQuery) async throws -> PreparedRows {
        guard let statements else { return try await connection.query(query, logger: logger).map { $0 } }
        return try await connection.query(query, preparedIn: statements, logger: logger)
    }

    /// Runs a statement prepared (`prepared(_:)`) when `prepare` says its plan is safe to keep
    /// (`RecordKeys.single`), planned at its call otherwise.
    func query(_ query: PostgresQuery, prepared prepare: Bool) async throws -> PreparedRows {
        if prepare { return try await prepared(query) }
        return try await connection.query(query, logger: logger).map { $0 }
    }

    /// Sets the savepoint of one item of a request written in one transaction
    /// (`RecordStore.modifyTogether`); `rollbackToSavepoint` undoes what the transaction did since.
    /// Each call sets a new one under the same name, and the latest is the one rolled back to.
    func savepoint() async throws {
        try await connection.execute("SAVEPOINT item", logger: logger)
    }

    /// Undoes what the transaction did since its latest `savepoint()`.
    func rollbackToSavepoint() async throws {
        try await connection.execute("ROLLBACK TO SAVEPOINT item", logger: logger)
    }

    /// Runs `body` under a savepoint. When it fails for good (`PostgresStore.isPermanent`), only its
    /// own writes are undone and the error is returned: the transaction goes on without them. Any
    /// other failure (a serialization failure, a lost connection) is thrown, failing the transaction.
    public func isolating(_ body: () async throws -> Void) async throws -> (any Error)? {
        try await connection.execute("SAVEPOINT isolated", logger: logger)
        do {
            try await body()
            try await connection.execute("RELEASE SAVEPOINT isolated", logger: logger)
            return nil
        } catch where PostgresStore.isPermanent(error) {
            try await connection.execute("ROLLBACK TO SAVEPOINT isolated", logger: logger)
            try await connection.execute("RELEASE SAVEPOINT isolated", logger: logger)
            return error
        }
    }
}

extension PostgresStore {
    /// Whether an error will recur however often the same work is tried: an event that does not
    /// decode, or a statement PostgreSQL refuses for its data (SQLSTATE classes 22 data exception,
    /// 23 integrity, 42 syntax or access, 54 program limit, such as a text search document over its
    /// size limit). Serialization failures, timeouts and lost connections pass.
    public static func isPermanent(_ error: any Error) -> Bool {
        if error is EventDecodingError { return true }
        guard let state = PostgresErrors.sqlState(error) else { return false }
        return ["22", "23", "42", "54"].contains(String(state.prefix(2)))
    }

    /// A short description of an error for logs and dead letters: its SQLSTATE and message for a
    /// database error (never the statement or its values).
    public static func describe(_ error: any Error) -> String {
        PostgresErrors.describe(error)
    }
}

extension PostgresStore {
    /// Throws unless the database answers: the readiness check.
    public func ping(logger: Logger) async throws {
        _ = try await withConnection { connection in try await connection.execute("SELECT 1", logger: logger) }
    }
}

extension PostgresStore {
    /// Runs `body` in one read-only REPEATABLE READ transaction: every query sees the same snapshot,
    /// so a sync page and the token it returns describe one moment.
    public func snapshot<T: Sendable>(logger: Logger, _ body: @escaping @Sendable (Transaction) async throws -> T) async throws -> T {
        let statements = statements
        return try await withConnection { connection in
            try await connection.query("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY", logger: logger)
            do {
                let value = try await body(Transaction(connection: connection, logger: logger, statements: statements))
                try await connection.query("COMMIT", logger: logger)
                return value
            } catch {
                _ = try? await connection.query("ROLLBACK", logger: logger)
                throw error
            }
        }
    }
}
