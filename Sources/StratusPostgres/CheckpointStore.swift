import Foundation
import Logging
import PostgresNIO
import StratusCore

/// Workers' per-zone positions, read and written inside the transaction that applies their effects.
public enum CheckpointStore {
    /// The last applied sequence of a zone for a worker (0 when none), locking the row for the transaction.
    public static func lastSequence(worker: String, zoneKey: ZoneKey, in transaction: Transaction) async throws -> Int64 {
        let rows = try await transaction.connection.query("""
            SELECT last_sequence FROM worker_checkpoints WHERE worker = \(worker) AND zone_key = \(zoneKey.rawValue) FOR UPDATE
            """, logger: transaction.logger)
        for try await sequence in rows.decode(Int64.self) { return sequence }
        return 0
    }

    /// Records that a worker applied a zone's event.
    public static func advance(worker: String, event: EventEnvelope, sequence: Int64, in transaction: Transaction) async throws {
        try await transaction.connection.query("""
            INSERT INTO worker_checkpoints (worker, zone_key, last_sequence, last_event_id) VALUES
                (\(worker), \(event.zoneKey.rawValue), \(sequence), \(event.id))
            ON CONFLICT (worker, zone_key) DO UPDATE SET last_sequence = EXCLUDED.last_sequence,
                last_event_id = EXCLUDED.last_event_id, updated_at = now()
            """, logger: transaction.logger)
    }

    /// Forgets all of a worker's positions (the first step of a replay).
    public static func reset(worker: String, in transaction: Transaction) async throws {
        try await transaction.connection.query("DELETE FROM worker_checkpoints WHERE worker = \(worker)", logger: transaction.logger)
    }
}

/// Events a worker could not read or apply for good, kept for an operator instead of blocking the stream.
public enum DeadLetterStore {
    /// Records a poison message.
    public static func record(worker: String, topic: String, partition: Int32, offset: Int64, value: [UInt8], reason: String, store: PostgresStore, logger: Logger) async throws {
        _ = try await store.withConnection { connection in
            try await connection.query("""
                INSERT INTO worker_dead_letters (worker, topic, partition, "offset", value, reason)
                VALUES (\(worker), \(topic), \(Int(partition)), \(offset), \(Data(value)), \(reason))
                """, logger: logger)
        }
    }
}

extension CheckpointStore {
    /// Custom zones whose change counter is ahead of a worker's checkpoint and were last written more
    /// than `grace` ago: events the worker should have received and did not (a broker that lost
    /// them). Returns each zone's key and latest sequence.
    public static func zonesBehind(worker: String, grace: Duration, limit: Int, store: PostgresStore, logger: Logger) async throws -> [(zoneKey: ZoneKey, sequence: Int64)] {
        let seconds = Double(grace.components.seconds) + Double(grace.components.attoseconds) / 1e18
        return try await store.withConnection { connection in
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
