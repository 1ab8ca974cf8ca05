import Foundation
import Logging
import PostgresNIO
import StratusCore

/// Workers' per-zone positions, read and written inside the transaction that applies their effects.
public enum CheckpointStore {
    /// The last applied sequence of a zone for a worker (0 when none), locking the row for the transaction.
    public static func lastSequence(worker: String, zoneKey: ZoneKey, in transaction: Transaction) async throws -> Int64 {
        let rows = try await transaction.prepared("""
            SELECT last_sequence FROM worker_checkpoints WHERE worker = \(worker) AND zone_key = \(zoneKey.rawValue) FOR UPDATE
            """)
        for try await sequence in rows.decode(Int64.self) { return sequence }
        return 0
    }

    /// Moves a worker's checkpoint of a zone to `sequence` (its event `eventID`) unless it is there
    /// or past it already, and returns where it was (0 when none); the row stays locked for the
    /// transaction. A worker's apply begins with it: one statement where a read and, after the
    /// effects, a write were two. The effects follow in the same transaction, so a failure takes the
    /// move back with them.
    ///
    /// The worker's name is in the statement's text, not bound: the table has a partition per
    /// worker (migration 0028), and only a name the planner sees picks the partition when the plan
    /// is made. Bound, the generic plan read every partition and cost four times a plan made for
    /// the values, so PostgreSQL planned the statement at every call (0.11 ms, more than it took to
    /// run; docs/benchmarks.md, "Worker checkpoints planned once"). One text per worker.
    public static func advance(worker: String, zoneKey: ZoneKey, to sequence: Int64, eventID: Int64, in transaction: Transaction) async throws -> Int64 {
        let rows = try await transaction.prepared("""
            WITH previous AS (
                SELECT last_sequence FROM worker_checkpoints WHERE worker = \(literal: worker) AND zone_key = \(zoneKey.rawValue)),
            moved AS (
                INSERT INTO worker_checkpoints (worker, zone_key, last_sequence, last_event_id) VALUES
                    (\(literal: worker), \(zoneKey.rawValue), \(sequence), \(eventID))
                ON CONFLICT (worker, zone_key) DO UPDATE SET last_sequence = EXCLUDED.last_sequence,
                    last_event_id = EXCLUDED.last_event_id, updated_at = now()
                WHERE worker_checkpoints.last_sequence < EXCLUDED.last_sequence)
            SELECT coalesce((SELECT last_sequence FROM previous), 0)::bigint
            """)
        for try await previous in rows.decode(Int64.self) { return previous }
        return 0
    }

    /// Sets a worker's positions to a snapshot's (`LogSnapshot`): each zone at its change counter,
    /// with the snapshot's position as the last event id, after `reset`.
    public static func seed(worker: String, zones: [(zoneKey: ZoneKey, sequence: Int64)], eventID: Int64, in transaction: Transaction) async throws {
        let started = zones.filter { $0.sequence > 0 }
        guard !started.isEmpty else { return }
        try await transaction.connection.query("""
            INSERT INTO worker_checkpoints (worker, zone_key, last_sequence, last_event_id)
            SELECT \(worker), z.zone_key, z.sequence, \(eventID) FROM unnest(\(started.map(\.zoneKey.rawValue))::text[], \(started.map(\.sequence))::int8[]) AS z(zone_key, sequence)
            """, logger: transaction.logger)
    }

    /// Forgets all of a worker's positions (the first step of a replay).
    public static func reset(worker: String, in transaction: Transaction) async throws {
        // Crosses owners: a replay empties the worker's whole projection (each node's, when sharded).
        try await transaction.connection.query("DELETE FROM worker_checkpoints WHERE worker = \(worker)", logger: transaction.logger)
    }
}

/// Events a worker could not read or apply for good, kept for an operator instead of blocking the stream.
public enum DeadLetterStore {
    /// Records an event that a worker set aside, in the transaction that moves the worker past it:
    /// with the message it came in (as it came) when it came from the broker, else as the event log holds it.
    public static func record(
        worker: String, event: EventEnvelope, message: DeadLetterMessage? = nil, reason: String, in transaction: Transaction
    ) async throws {
        let value = message.map { Data($0.value) } ?? EventCoding.encodeEnvelope(event)
        try await transaction.connection.execute("""
            INSERT INTO worker_dead_letters (worker, topic, partition, "offset", event_id, zone_key, value, reason)
            VALUES (\(worker), \(message?.topic), \(message.map { Int($0.partition) }), \(message?.offset), \(event.id),
                    \(event.zoneKey.rawValue), \(value), \(String(reason.prefix(2000))))
            """, logger: transaction.logger)
    }

    /// A worker's dead letters: how many, for tests and operators.
    public static func count(worker: String, store: PostgresStore, logger: Logger) async throws -> Int {
        try await store.withConnection { connection in
            let rows = try await connection.query("SELECT count(*)::bigint FROM worker_dead_letters WHERE worker = \(worker)", logger: logger)
            for try await count in rows.decode(Int64.self) { return Int(count) }
            return 0
        }
    }

    /// Records a poison message.
    public static func record(worker: String, topic: String, partition: Int32, offset: Int64, value: [UInt8], reason: String, store: PostgresStore, logger: Logger) async throws {
        _ = try await store.withConnection { connection in
            try await connection.query("""
                INSERT INTO worker_dead_letters (worker, topic, partition, "offset", value, reason)
                VALUES (\(worker), \(topic), \(Int(partition)), \(offset), \(Data(value)), \(String(reason.prefix(2000))))
                """, logger: logger)
        }
    }
}

extension CheckpointStore {
    /// Custom zones whose change counter is ahead of a worker's checkpoint and were last written more
    /// than `grace` ago: events the worker should have received and did not (a broker that lost
    /// them). Returns each zone's key and latest sequence.
    public static func zonesBehind(worker: String, grace: Duration, limit: Int, store: PostgresStore, logger: Logger) async throws -> [(zoneKey: ZoneKey, sequence: Int64)] {
        let seconds = grace / .seconds(1)
        return try await store.withConnection { connection in
            // Crosses owners: a worker's check for zones it missed reads every zone's counter (each node's, when sharded).
            let rows = try await connection.query("""
                SELECT z.zone_key, z.change_counter FROM zones z
                LEFT JOIN worker_checkpoints c ON c.worker = \(worker) AND c.zone_key = z.zone_key
                WHERE z.change_counter > coalesce(c.last_sequence, 0)
                  AND z.modified_at < now() - make_interval(secs => \(seconds))
                LIMIT \(limit)
                """, logger: logger)
            var behind: [(ZoneKey, Int64)] = []
            for try await (key, sequence) in rows.decode((String, Int64).self) { behind.append((ZoneKey(rawValue: key), sequence)) }
            return behind
        }
    }
}

/// Where a dead letter came from on the broker, and its bytes as they came.
public struct DeadLetterMessage: Sendable {
    public var topic: String
    public var partition: Int32
    public var offset: Int64
    public var value: [UInt8]

    /// Creates the description of a message.
    public init(topic: String, partition: Int32, offset: Int64, value: [UInt8]) {
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.value = value
    }
}
