import Logging
import PostgresNIO
import StratusConnections
import StratusCore
import Synchronization

/// Keeps PostgreSQL's planner statistics of a table a worker writes fresh after a burst of writes,
/// instead of waiting for autovacuum.
///
/// A table PostgreSQL has never analysed is planned blind: right after the benchmark's load of
/// 100,000 records, a one-word full-text query on the query index took 290 ms where it takes 13
/// once the table is analysed, and autovacuum looks at a database only once a minute
/// (`autovacuum_naptime`). A keeper counts the rows its worker wrote (one per applied event) and,
/// once they reach `minimumChanges` plus `growth` times the rows the table had at its last analysis,
/// runs `ANALYZE` on it — a young table is analysed at 1,000 rows, then each time it has doubled,
/// and a large table is left to autovacuum. The keeper looks `settle` after a batch made it due
/// (the batches in between are counted in), one look at a time; its analysis runs beside the
/// worker's applies, never between them (it samples up to 30,000 rows: about 0.8 s on the query
/// index of 100,000 records), and waits at most `lockWait` for its lock: autovacuum (or a field
/// index being built) holding the table means statistics are on their way, so the keeper tries
/// again after the next writes.
public final class PlannerStatistics: Sendable {
    /// When a table is analysed.
    public struct Policy: Sendable {
        /// Rows written before a table is first analysed (and the least between two analyses).
        public var minimumChanges: Int = 1_000
        /// With it, the share of the table's rows at its last analysis that must be written again.
        public var growth: Double = 1.0
        /// How long after a batch the keeper looks (batches within it are looked at together).
        public var settle: Duration = .seconds(1)
        /// The longest an analysis waits for its lock.
        public var lockWait: Duration = .milliseconds(100)

        /// The defaults.
        public init() {}
    }

    /// The table kept: a schema-qualified name the code chose (never a client's).
    public let table: String
    let policy: Policy
    let pending = Mutex<Int>(0)
    let analyses = Atomic<Int>(0)
    let wakes: AsyncStream<Void>
    let wake: AsyncStream<Void>.Continuation

    /// A keeper of `table`.
    public init(table: String, policy: Policy = .init()) {
        self.table = table
        self.policy = policy
        (wakes, wake) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
    }

    /// How many analyses the keeper has run.
    public var analysesRun: Int { analyses.load(ordering: .relaxed) }

    /// The worker wrote about `rows` rows to the table.
    public func wrote(_ rows: Int) {
        guard rows > 0 else { return }
        let due = pending.withLock { pending in
            pending += rows
            return pending >= policy.minimumChanges
        }
        if due { wake.yield() }
    }

    /// Analyses the table when it is due, until cancelled or `stop()`; costs nothing while no
    /// writes come.
    public func keep(store: PostgresStore, logger: Logger) async {
        for await _ in wakes {
            // Let the burst's next batches land first: they are counted in this look.
            do { try await Task.sleep(for: policy.settle) } catch { return }
            await analyseIfDue(store: store, logger: logger)
        }
    }

    /// Ends `keep`.
    public func stop() { wake.finish() }

    /// Analyses the table when the rows written since its last analysis reach the policy's
    /// threshold; true when it did.
    @discardableResult
    public func analyseIfDue(store: PostgresStore, logger: Logger) async -> Bool {
        let written = pending.withLock { $0 }
        guard written >= policy.minimumChanges else { return false }
        let table = table, policy = policy
        do {
            let lockWait = max(1, Int(policy.lockWait / .milliseconds(1)))
            let analysed = try await store.readCommitted(logger: logger) { transaction in
                // -1 (or 0) until PostgreSQL has analysed or vacuumed the table; none if it is gone.
                let rows = try await transaction.connection.query(
                    "SELECT c.reltuples::float8 FROM pg_class c WHERE c.oid = to_regclass(\(table))", logger: transaction.logger)
                var known: Double?
                for try await count in rows.decode(Double.self) { known = count }
                guard let known, Double(written) >= Double(policy.minimumChanges) + policy.growth * max(0, known) else { return false }
                try await transaction.connection.query(PostgresQuery(unsafeSQL: "SET LOCAL lock_timeout = \(lockWait)"), logger: transaction.logger)
                try await transaction.connection.query(PostgresQuery(unsafeSQL: "ANALYZE \(table)"), logger: transaction.logger)
                return true
            }
            guard analysed else { return false }
            // Rows written while it ran count toward the next one.
            pending.withLock { $0 = max(0, $0 - written) }
            analyses.add(1, ordering: .relaxed)
            logger.debug("analysed a table after a burst of writes", metadata: ["table": "\(table)", "rowsWritten": "\(written)"])
            return true
        } catch let error as StratusError where error.code == .tryAgainLater {
            // The lock wait ran out: autovacuum or an index build holds the table. Later.
            logger.debug("a table's analysis waited too long for its lock; trying again after more writes", metadata: ["table": "\(table)"])
            return false
        } catch {
            logger.warning("a table's analysis failed", metadata: ["table": "\(table)", "error": "\(PostgresStore.describe(error))"])
            return false
        }
    }
}
