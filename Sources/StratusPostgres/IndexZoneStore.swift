import Foundation
import Logging
import PostgresNIO
import StratusCore

/// The query index's zone directory, maintained by the indexer from zone events.
public enum IndexZoneStore {
    /// A zone as the index knows it.
    public struct Entry: Sendable, Hashable {
        /// The zone key.
        public var zoneKey: String
        /// The incarnation the index holds.
        public var incarnation: UUID
        /// The id of the event that last changed the entry.
        public var lastEventID: Int64
    }

    /// Records a created zone (replacing an older incarnation).
    public static func upsert(_ created: ZoneCreated, event: EventEnvelope, in transaction: Transaction) async throws {
        let database = created.database
        try await transaction.connection.query("""
            INSERT INTO index_zones (zone_key, container, environment, scope, owner, zone_name, incarnation, last_event_id)
            VALUES (\(event.zoneKey.rawValue), \(database.container), \(database.environment.rawValue), \(database.scope.rawValue),
                    \(database.owner), \(created.zoneID.zoneName), \(created.incarnation), \(event.id))
            ON CONFLICT (zone_key) DO UPDATE SET incarnation = EXCLUDED.incarnation, last_event_id = EXCLUDED.last_event_id
            """, logger: transaction.logger)
    }

    /// Removes a deleted zone incarnation.
    public static func remove(_ deleted: ZoneDeleted, event: EventEnvelope, in transaction: Transaction) async throws {
        try await transaction.connection.query("""
            DELETE FROM index_zones WHERE zone_key = \(event.zoneKey.rawValue) AND incarnation = \(deleted.incarnation)
            """, logger: transaction.logger)
    }

    /// Fills the directory with a snapshot's live zones (`LogSnapshot`), after `reset`.
    public static func seed(_ zones: [LogSnapshot.Zone], in transaction: Transaction) async throws {
        let live = zones.filter { !$0.deleted }
        guard !live.isEmpty else { return }
        try await transaction.connection.query("""
            INSERT INTO index_zones (zone_key, container, environment, scope, owner, zone_name, incarnation, last_event_id)
            SELECT * FROM unnest(\(live.map(\.zoneKey.rawValue))::text[], \(live.map(\.database.container))::text[],
                                 \(live.map(\.database.environment.rawValue))::text[], \(live.map(\.database.scope.rawValue))::text[],
                                 \(live.map(\.database.owner))::text[], \(live.map(\.zoneName))::text[], \(live.map(\.incarnation))::uuid[],
                                 \(live.map(\.createdEventID))::int8[])
            """, logger: transaction.logger)
    }

    /// Empties the directory (replay).
    public static func reset(in transaction: Transaction) async throws {
        // Crosses owners: a replay empties the worker's whole projection (each node's, when sharded).
        try await transaction.connection.query("DELETE FROM index_zones", logger: transaction.logger)
    }

    /// Every entry, ordered by key: used to compare a live index with a rebuilt one.
    public static func all(store: PostgresStore, logger: Logger) async throws -> [Entry] {
        try await store.withConnection { connection in
            // Crosses owners: the whole directory, to compare a live index with a rebuilt one.
            let rows = try await connection.query(
                "SELECT zone_key, incarnation, last_event_id FROM index_zones ORDER BY zone_key", logger: logger)
            var entries: [Entry] = []
            for try await (key, incarnation, id) in rows.decode((String, UUID, Int64).self) {
                entries.append(Entry(zoneKey: key, incarnation: incarnation, lastEventID: id))
            }
            return entries
        }
    }
}
