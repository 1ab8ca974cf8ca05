import Foundation
import Logging
import PostgresNIO
import StratusCore

/// The event log's retention pass (migration 0042, `EventRetention`): reads the log's partitions and
/// how far its readers have come with the log locked against writers, and drops, empties and
/// creates partitions as Core's plan says, in one short transaction.
public struct EventLogRetention: Sendable {
    let store: PostgresStore

    /// Creates the pass over a store.
    public init(store: PostgresStore) { self.store = store }

    /// Runs one pass: `workers` are the workers whose checkpoints must have passed an event before
    /// it goes. It reads the log and its readers first without a lock: most passes find nothing to
    /// drop or create, and end there, never stopping a writer. When there is, the log is locked
    /// (`ACCESS EXCLUSIVE`) while the pass reads again and drops: writers wait that long. While the
    /// pass waits for the lock, writers queue behind it, so it waits at most `passLockWait`; a pass
    /// that does not get the lock fails and runs again later. Returns what it did.
    @discardableResult
    public func pass(settings: EventRetention.Settings, workers: [String], logger: Logger) async throws -> EventRetention.Plan {
        let unlocked = try await store.readCommitted(logger: logger) { transaction in
            EventRetention.plan(try await Self.read(workers: workers, on: transaction.connection, logger: logger), settings: settings)
        }
        guard !unlocked.drop.isEmpty || unlocked.truncateDefault || !unlocked.create.isEmpty else { return unlocked }
        let plan = try await store.readCommitted(logger: logger) { transaction in
            let connection = transaction.connection
            try await connection.query(PostgresQuery(unsafeSQL: "SET LOCAL lock_timeout = \(Self.passLockWaitMilliseconds)"), logger: logger)
            try await connection.query("LOCK TABLE events IN ACCESS EXCLUSIVE MODE", logger: logger)
            let reading = try await Self.read(workers: workers, on: connection, logger: logger)
            let plan = EventRetention.plan(reading, settings: settings)
            for name in plan.drop {
                try await connection.query(PostgresQuery(unsafeSQL: "DROP TABLE \(Self.identifier(name))"), logger: logger)
            }
            if plan.truncateDefault {
                try await connection.query("TRUNCATE events_default", logger: logger)
            }
            for partition in plan.create {
                try await connection.query("SELECT event_log_partition(\(partition.lower), \(partition.upper))", logger: logger)
            }
            // The log still holds its beginning until a pass removes an event (dropping the empty
            // partitions of a new database removes none).
            if let below = plan.prunedBelow, plan.removesEvents {
                try await connection.query("""
                    UPDATE event_log_retention SET pruned_below = \(below), pruned_at = now() WHERE pruned_below < \(below)
                    """, logger: logger)
            }
            return plan
        }
        if !plan.drop.isEmpty || plan.truncateDefault || !plan.create.isEmpty {
            logger.info("event log retention pass", metadata: [
                "dropped": "\(plan.drop.joined(separator: ","))", "emptiedDefault": "\(plan.truncateDefault)",
                "created": "\(plan.create.map(\.name).joined(separator: ","))", "prunedBelow": "\(plan.prunedBelow.map(String.init) ?? "-")",
            ])
        }
        return plan
    }

    /// The longest a snapshot's export (`LogSnapshot`) waits for the log's lock while writers queue
    /// behind it: 2 s.
    static let lockWaitMilliseconds = 2_000

    /// The longest a pass waits for the log's lock while writers queue behind it: 250 ms (it runs
    /// again at its next interval when it does not get it).
    static let passLockWaitMilliseconds = 250

    /// Every event below this id has been removed by retention (0: none has).
    public func prunedBelow(logger: Logger) async throws -> Int64 {
        try await store.withConnection { connection in
            let rows = try await connection.query("SELECT pruned_below FROM event_log_retention", logger: logger)
            for try await below in rows.decode(Int64.self) { return below }
            return 0
        }
    }

    /// The log's size on disk, its indexes included, in bytes.
    public func bytes(logger: Logger) async throws -> Int64 {
        try await store.withConnection { connection in
            let rows = try await connection.query("""
                SELECT coalesce(sum(pg_total_relation_size(inhrelid)), 0)::bigint FROM pg_inherits WHERE inhparent = 'events'::regclass
                """, logger: logger)
            for try await bytes in rows.decode(Int64.self) { return bytes }
            return 0
        }
    }

    /// What a pass decides from, read on the locked log.
    static func read(workers: [String], on connection: PostgresConnection, logger: Logger) async throws -> EventRetention.Reading {
        var partitions: [EventRetention.Partition] = []
        let rows = try await connection.query("""
            SELECT c.relname::text, pg_get_expr(c.relpartbound, c.oid) FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
            WHERE i.inhparent = 'events'::regclass
            """, logger: logger)
        var bounds: [(String, String)] = []
        for try await (name, bound) in rows.decode((String, String).self) { bounds.append((name, bound)) }
        for (name, bound) in bounds {
            let (lower, upper) = Self.range(bound)
            let newest = try await connection.query(PostgresQuery(unsafeSQL: """
                SELECT id, (extract(epoch FROM created_at) * 1000)::bigint FROM \(Self.identifier(name)) ORDER BY id DESC LIMIT 1
                """), logger: logger)
            var id: Int64?, createdAt: Int64?
            for try await (newestID, time) in newest.decode((Int64, Int64).self) { (id, createdAt) = (newestID, time) }
            partitions.append(.init(name: name, lower: lower, upper: bound == "DEFAULT" ? nil : upper ?? Int64.max, newestID: id, newestCreatedAt: createdAt))
        }
        // The first event some worker has not passed, zone by zone: the event after its checkpoint
        // in each zone whose change counter is past it (by the zone's sequence index); and the
        // relay's first unpublished event.
        // Crosses owners: the first event any worker still needs, over every zone (each node's own log, when sharded).
        let frontierRows = try await connection.query("""
            SELECT least(
                (SELECT min(id) FROM unpublished_events),
                (SELECT min(e.id) FROM zones z CROSS JOIN unnest(\(workers)::text[]) AS w(worker)
                 LEFT JOIN worker_checkpoints c ON c.worker = w.worker AND c.zone_key = z.zone_key
                 CROSS JOIN LATERAL (SELECT id FROM events
                                     WHERE zone_key = z.zone_key AND zone_sequence = coalesce(c.last_sequence, 0) + 1) AS e
                 WHERE z.change_counter > coalesce(c.last_sequence, 0))),
                (SELECT CASE WHEN is_called THEN last_value + 1 ELSE last_value END FROM events_id_seq),
                (extract(epoch FROM now()) * 1000)::bigint
            """, logger: logger)
        var frontier: Int64?, nextID: Int64 = 1, now: Int64 = 0
        for try await (first, next, time) in frontierRows.decode((Int64?, Int64, Int64).self) { (frontier, nextID, now) = (first, next, time) }
        return EventRetention.Reading(partitions: partitions, frontier: frontier, nextID: nextID, now: now)
    }

    /// The ids a range partition's bound names (`FOR VALUES FROM ('1') TO ('1000')`; MINVALUE is nil).
    static func range(_ bound: String) -> (lower: Int64?, upper: Int64?) {
        func number(after marker: String) -> Int64? {
            guard let start = bound.range(of: marker) else { return nil }
            let digits = bound[start.upperBound...].drop { $0 == "'" || $0 == "(" }.prefix { $0.isNumber || $0 == "-" }
            return Int64(digits)
        }
        return (number(after: "FROM ("), number(after: "TO ("))
    }

    /// A table name as a quoted identifier.
    static func identifier(_ name: String) -> String {
        "\"" + name.replacingOccurrences(of: "\"", with: "\"\"") + "\""
    }
}
