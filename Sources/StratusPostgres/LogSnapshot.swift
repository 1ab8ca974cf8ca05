import Foundation
import Logging
import PostgresNIO
import StratusCore

/// The current tables as of one position of the event log: a read-only REPEATABLE READ transaction
/// whose snapshot sees every event up to `position` and none after it. A rebuild after the log was
/// pruned loads its state from these tables and then applies the log's tail after `position`.
///
/// The position is exact because the snapshot is exported by a transaction that first locks the
/// log against writers (`SHARE`: readers go on): no transaction that appends events is in progress
/// at that moment, so every id drawn so far is committed (or rolled back) and visible. Writers wait
/// only for the export, a few milliseconds.
public struct LogSnapshot: Sendable {
    /// The last event id drawn when the snapshot was taken: it sees every event up to it.
    public let position: Int64
    let connection: PostgresConnection
    let logger: Logger

    /// Runs `body` with a snapshot, on a connection of its own held until `body` returns.
    public static func with<T: Sendable>(
        store: PostgresStore, logger: Logger, _ body: @escaping @Sendable (LogSnapshot) async throws -> T
    ) async throws -> T {
        try await store.withConnection { reader in
            try await reader.query("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY", logger: logger)
            do {
                let position = try await store.withConnection { exporter -> Int64 in
                    try await exporter.query("BEGIN ISOLATION LEVEL REPEATABLE READ", logger: logger)
                    do {
                        // Writers queue behind a lock being waited for: wait briefly.
                        try await exporter.query(
                            PostgresQuery(unsafeSQL: "SET LOCAL lock_timeout = \(EventLogRetention.lockWaitMilliseconds)"), logger: logger)
                        try await exporter.query("LOCK TABLE events IN SHARE MODE", logger: logger)
                        let rows = try await exporter.query("""
                            SELECT pg_export_snapshot(), (SELECT CASE WHEN is_called THEN last_value ELSE last_value - 1 END FROM events_id_seq)
                            """, logger: logger)
                        var exported = "", position: Int64 = 0
                        for try await (snapshot, last) in rows.decode((String, Int64).self) { (exported, position) = (snapshot, last) }
                        guard !exported.isEmpty, exported.allSatisfy({ $0.isHexDigit || $0 == "-" }) else {
                            throw StratusError(.internalError, "PostgreSQL exported no usable snapshot")
                        }
                        try await reader.query(PostgresQuery(unsafeSQL: "SET TRANSACTION SNAPSHOT '\(exported)'"), logger: logger)
                        try await exporter.query("COMMIT", logger: logger)
                        return position
                    } catch {
                        _ = try? await exporter.query("ROLLBACK", logger: logger)
                        throw error
                    }
                }
                let result = try await body(LogSnapshot(position: position, connection: reader, logger: logger))
                try await reader.query("COMMIT", logger: logger)
                return result
            } catch {
                _ = try? await reader.query("ROLLBACK", logger: logger)
                throw error
            }
        }
    }

    /// A zone as the snapshot holds it.
    public struct Zone: Sendable {
        public var zoneKey: ZoneKey
        public var database: DatabaseID
        public var zoneName: String
        public var incarnation: UUID
        /// Its change counter: the sequence of its last event the snapshot sees.
        public var changeCounter: Int64
        /// Whether it is deleted.
        public var deleted: Bool
        /// The id of the event that created its incarnation, when the log still holds it; else 0.
        public var createdEventID: Int64
    }

    /// Every custom zone (deleted ones too), by key.
    public func zones() async throws -> [Zone] {
        // Crosses owners: a rebuild's snapshot of every zone (each node's, when sharded).
        let rows = try await connection.query("""
            SELECT z.zone_key, z.container, z.environment, z.scope, z.owner, z.zone_name, z.incarnation, z.change_counter, z.deleted,
                   coalesce((SELECT max(e.id) FROM events e WHERE e.zone_key = z.zone_key AND e.type = \(EventType.zoneCreated.rawValue)), 0)
            FROM zones z WHERE z.zone_name <> \(ZoneID.defaultZoneName) ORDER BY z.zone_key
            """, logger: logger)
        var zones: [Zone] = []
        for try await (key, container, environment, scope, owner, name, incarnation, counter, deleted, created) in rows.decode(
            (String, String, String, String, String, String, UUID, Int64, Bool, Int64).self
        ) {
            guard let environment = Environment(rawValue: environment), let scope = DatabaseScope(rawValue: scope) else { continue }
            zones.append(Zone(
                zoneKey: ZoneKey(rawValue: key), database: DatabaseID(container: container, environment: environment, scope: scope, owner: owner),
                zoneName: name, incarnation: incarnation, changeCounter: counter, deleted: deleted, createdEventID: created))
        }
        return zones
    }

    /// Where a walk over the records stands: the zone it is in and the last record name read there.
    public struct RecordCursor: Sendable {
        var zone: (container: String, environment: String, scope: String, owner: String, zoneName: String)?
        var lastName: String?

        /// The start of the table.
        public init() {}
    }

    /// The next records in primary-key order, at most `limit`, all of one zone (share records with
    /// their state, as a save's event carries them), and where to go on; an empty answer is the end.
    public func records(from cursor: RecordCursor, limit: Int) async throws -> (database: DatabaseID?, zoneName: String, records: [Record], next: RecordCursor) {
        var cursor = cursor
        while true {
            if cursor.zone == nil {
                guard let zone = try await self.zone(after: nil) else { return (nil, "", [], cursor) }
                cursor.zone = zone
                cursor.lastName = nil
            }
            guard let zone = cursor.zone, let environment = Environment(rawValue: zone.environment),
                  let scope = DatabaseScope(rawValue: zone.scope) else { return (nil, "", [], cursor) }
            let database = DatabaseID(container: zone.container, environment: environment, scope: scope, owner: zone.owner)
            let rows = try await connection.query("""
                SELECT \(unescaped: RecordRow.columns) FROM records
                WHERE container = \(zone.container) AND environment = \(zone.environment) AND scope = \(zone.scope) AND owner = \(zone.owner)
                  AND zone_name = \(zone.zoneName) AND record_name > \(cursor.lastName ?? "")
                ORDER BY record_name LIMIT \(limit)
                """, logger: logger)
            let records = try await ShareTables.attachStates(
                try await RecordRow.decode(rows), zone: zone.zoneName, of: database, on: connection, logger: logger)
            if let last = records.last {
                cursor.lastName = last.recordName
                return (database, zone.zoneName, records, cursor)
            }
            guard let following = try await self.zone(after: zone) else { return (nil, "", [], cursor) }
            cursor.zone = following
            cursor.lastName = nil
        }
    }

    /// Walks every record the snapshot holds, a page of one zone at a time (`records(from:limit:)`).
    public func forEachRecordPage(
        limit: Int = 1000, _ body: (_ database: DatabaseID, _ zoneName: String, _ records: [Record]) async throws -> Void
    ) async throws {
        var cursor = RecordCursor()
        while true {
            let page = try await records(from: cursor, limit: limit)
            guard let database = page.database, !page.records.isEmpty else { return }
            try await body(database, page.zoneName, page.records)
            cursor = page.next
        }
    }

    /// The first zone holding records after `zone` in the table's order (the first of all when nil).
    private func zone(after zone: (container: String, environment: String, scope: String, owner: String, zoneName: String)?)
        async throws -> (container: String, environment: String, scope: String, owner: String, zoneName: String)? {
        let after = zone ?? ("", "", "", "", "")
        // Crosses owners: a rebuild's walk over every zone holding records (each node's, when sharded).
        let rows = try await connection.query("""
            SELECT container, environment, scope, owner, zone_name FROM records
            WHERE (container, environment, scope, owner, zone_name) > (\(after.container), \(after.environment), \(after.scope), \(after.owner), \(after.zoneName))
            ORDER BY container, environment, scope, owner, zone_name LIMIT 1
            """, logger: logger)
        for try await found in rows.decode((String, String, String, String, String).self) {
            return (found.0, found.1, found.2, found.3, found.4)
        }
        return nil
    }
}
