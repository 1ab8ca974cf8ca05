import Foundation
import Logging
import PostgresNIO
import StratusCore

/// What the console's operations page reads from PostgreSQL: each worker's progress through the
/// event log as its checkpoints record it, and the workers' dead letters, which it can retry or
/// discard. (The relay backlog is `EventLog.backlog`.)
public struct ConsoleOperations: Sendable {
    let store: PostgresStore

    /// Creates the reader.
    public init(store: PostgresStore) { self.store = store }

    /// A worker's progress, from its checkpoints.
    public struct WorkerProgress: Sendable, Equatable {
        /// The worker, e.g. `stratus-indexer`.
        public var worker: String
        /// Events of custom zones the worker has not applied yet (each zone's change counter past its checkpoint).
        public var lagEvents: Int64
        /// Custom zones the worker is behind in.
        public var zonesBehind: Int64
        /// Events of custom zones the worker has applied (the sum of its checkpoints): the applied
        /// rate is how fast this grows.
        public var appliedEvents: Int64
        /// The worker's dead letters.
        public var deadLetters: Int64
    }

    /// The progress of each named worker, read in one statement so the numbers agree.
    public func progress(workers: [String], logger: Logger) async throws -> [WorkerProgress] {
        try await store.withConnection { connection in
            // Crosses owners: an operator's figures over a whole container or all of them (asked of every node, when sharded).
            let rows = try await connection.query(
                """
                SELECT w.worker,
                       coalesce((SELECT sum(greatest(z.change_counter - coalesce(c.last_sequence, 0), 0)) FROM zones z
                                 LEFT JOIN worker_checkpoints c ON c.worker = w.worker AND c.zone_key = z.zone_key), 0)::bigint,
                       (SELECT count(*) FROM zones z LEFT JOIN worker_checkpoints c ON c.worker = w.worker AND c.zone_key = z.zone_key
                         WHERE z.change_counter > coalesce(c.last_sequence, 0))::bigint,
                       coalesce((SELECT sum(last_sequence) FROM worker_checkpoints c WHERE c.worker = w.worker), 0)::bigint,
                       (SELECT count(*) FROM worker_dead_letters d WHERE d.worker = w.worker)::bigint
                FROM unnest(\(workers)::text[]) AS w(worker)
                """, logger: logger)
            var progress: [WorkerProgress] = []
            for try await (worker, lag, behind, applied, dead) in rows.decode((String, Int64, Int64, Int64, Int64).self) {
                progress.append(WorkerProgress(worker: worker, lagEvents: lag, zonesBehind: behind, appliedEvents: applied, deadLetters: dead))
            }
            return progress
        }
    }

    /// A dead letter as the page lists it (without its bytes).
    public struct DeadLetter: Sendable, Equatable {
        public var id: Int64
        public var worker: String
        /// The event it holds, when it names one (a message the worker could not read names none).
        public var eventID: Int64?
        public var zoneKey: String?
        public var reason: String
        public var createdAt: Date
    }

    /// The newest dead letters, at most `limit`, before `before` (an id; nil: from the newest).
    public func deadLetters(limit: Int, before: Int64?, logger: Logger) async throws -> [DeadLetter] {
        try await store.withConnection { connection in
            let rows = try await connection.query(
                """
                SELECT id, worker, event_id, zone_key, left(reason, 2000), created_at FROM worker_dead_letters
                WHERE id < \(before ?? Int64.max) ORDER BY id DESC LIMIT \(limit)
                """, logger: logger)
            var letters: [DeadLetter] = []
            for try await (id, worker, event, zone, reason, created) in rows.decode((Int64, String, Int64?, String?, String, Date).self) {
                letters.append(DeadLetter(id: id, worker: worker, eventID: event, zoneKey: zone, reason: reason, createdAt: created))
            }
            return letters
        }
    }

    /// Retries a dead letter: its worker's checkpoint for the event's zone goes back to just before
    /// the event, and the dead letter is removed, in one transaction. The running worker's next
    /// reconciliation finds the zone behind and applies its events again from the event log, this
    /// one first (later events of the zone are applied again too, in order); if it fails again it
    /// becomes a new dead letter. Refused for a dead letter that names no event of a custom zone
    /// (only those have a position to go back to).
    public func retry(deadLetter id: Int64, logger: Logger) async throws {
        try await store.readCommitted(logger: logger) { transaction in
            let connection = transaction.connection
            let rows = try await connection.query(
                """
                SELECT d.worker, d.zone_key, e.zone_sequence FROM worker_dead_letters d
                LEFT JOIN events e ON e.id = d.event_id WHERE d.id = \(id) FOR UPDATE OF d
                """, logger: logger)
            var found: (String, String?, Int64?)?
            for try await row in rows.decode((String, String?, Int64?).self) { found = row }
            guard let (worker, zoneKey, sequence) = found else { throw StratusError(.notFound, "No dead letter \(id)") }
            guard let zoneKey, let sequence else {
                throw StratusError(.badRequest, "Dead letter \(id) names no event of a custom zone, so there is no position to retry it from; discard it")
            }
            try await connection.query(
                """
                UPDATE worker_checkpoints SET last_sequence = \(sequence - 1), updated_at = now()
                WHERE worker = \(worker) AND zone_key = \(zoneKey) AND last_sequence >= \(sequence)
                """, logger: logger)
            try await connection.query("DELETE FROM worker_dead_letters WHERE id = \(id)", logger: logger)
        }
    }

    /// Discards a dead letter for good; false when there is none of that id.
    public func discard(deadLetter id: Int64, logger: Logger) async throws -> Bool {
        try await store.withConnection { connection in
            let rows = try await connection.query("DELETE FROM worker_dead_letters WHERE id = \(id) RETURNING 1", logger: logger)
            for try await _ in rows { return true }
            return false
        }
    }
}
