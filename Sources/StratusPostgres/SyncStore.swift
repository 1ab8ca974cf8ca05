import Foundation
import Logging
import PostgresNIO
import StratusCore

/// Change tracking: what changed in a zone since a version, and which zones of a database changed.
public struct SyncStore: Sendable {
    let store: PostgresStore

    /// Creates the sync store.
    public init(store: PostgresStore) { self.store = store }

    /// One change: a record as it is now, or a deleted record's name.
    public enum Change: Sendable, Hashable {
        case saved(Record)
        case deleted(recordName: String, recordType: String)

        /// The record name either way.
        public var recordName: String {
            switch self {
            case .saved(let record): record.recordName
            case .deleted(let name, _): name
            }
        }
    }

    /// A page of a zone's changes.
    public struct ZoneChanges: Sendable {
        /// The changes, oldest first.
        public var changes: [Change]
        /// The zone incarnation the page belongs to.
        public var incarnation: UUID
        /// Everything up to this version has been delivered once the client applied this page.
        public var version: Int64
        /// More changes wait beyond `version`.
        public var moreComing: Bool
    }

    /// The changes of a custom zone after `version` (0 = from the start), at most `limit`, in version
    /// order. A delete is reported only when the record existed at `version` (a record created and
    /// deleted since then was never seen by the client). Fails with CHANGE_TOKEN_EXPIRED when the
    /// zone is another incarnation or its tombstones were collected past `version`.
    public func changes(
        zone: ZoneID, in database: DatabaseID, incarnation expected: UUID?, since version: Int64, limit: Int,
        recordTypes: Set<String>? = nil, logger: Logger
    ) async throws -> ZoneChanges {
        guard !zone.isDefaultZone else {
            throw StratusError(.badRequest, "Change tracking is available in custom zones only, not in \(ZoneID.defaultZoneName)")
        }
        return try await store.snapshot(logger: logger) { transaction in
            let connection = transaction.connection
            let zoneRows = try await connection.query("""
                SELECT incarnation, change_counter, tombstone_horizon FROM zones
                WHERE container = \(database.container) AND environment = \(database.environment.rawValue) AND scope = \(database.scope.rawValue)
                  AND owner = \(database.owner) AND zone_name = \(zone.zoneName) AND NOT deleted
                """, logger: logger)
            var state: (UUID, Int64, Int64)?
            for try await row in zoneRows.decode((UUID, Int64, Int64).self) { state = row }
            guard let (incarnation, counter, horizon) = state else {
                throw StratusError(.zoneNotFound, "Zone '\(zone.zoneName.prefix(255))' does not exist")
            }
            if let expected, expected != incarnation {
                throw StratusError(.changeTokenExpired, "The zone was deleted and created again since this sync token; discard the local copy and sync from the start")
            }
            if version > 0, version < horizon {
                throw StratusError(.changeTokenExpired, "This sync token is older than the zone's retained history; discard the local copy and sync from the start")
            }
            guard version <= counter else {
                throw StratusError(.changeTokenExpired, "This sync token is ahead of the zone; discard the local copy and sync from the start")
            }
            let types = recordTypes.map { Array($0) }
            let rows = try await connection.query("""
                SELECT version, record_name, record_type, false FROM records
                WHERE container = \(database.container) AND environment = \(database.environment.rawValue) AND scope = \(database.scope.rawValue)
                  AND owner = \(database.owner) AND zone_name = \(zone.zoneName) AND version > \(version)
                  AND (\(types)::text[] IS NULL OR record_type = ANY(\(types)::text[]))
                UNION ALL
                SELECT deleted_version, record_name, record_type, true FROM record_tombstones
                WHERE container = \(database.container) AND environment = \(database.environment.rawValue) AND scope = \(database.scope.rawValue)
                  AND owner = \(database.owner) AND zone_name = \(zone.zoneName) AND deleted_version > \(version)
                  AND created_version <= \(version)
                  AND (\(types)::text[] IS NULL OR record_type = ANY(\(types)::text[]))
                ORDER BY 1
                LIMIT \(limit + 1)
                """, logger: logger)
            var entries: [(version: Int64, name: String, type: String, deleted: Bool)] = []
            for try await row in rows.decode((Int64, String, String, Bool).self) { entries.append(row) }
            let moreComing = entries.count > limit
            if moreComing { entries.removeLast(entries.count - limit) }
            let savedNames = entries.filter { !$0.deleted }.map(\.name)
            var records: [String: Record] = [:]
            if !savedNames.isEmpty {
                let recordRows = try await connection.query("""
                    SELECT \(unescaped: RecordRow.columns) FROM records
                    WHERE container = \(database.container) AND environment = \(database.environment.rawValue) AND scope = \(database.scope.rawValue)
                      AND owner = \(database.owner) AND zone_name = \(zone.zoneName) AND record_name = ANY(\(savedNames))
                    """, logger: logger)
                for record in try await RecordRow.decode(recordRows) { records[record.recordName] = record }
            }
            let changes: [Change] = entries.compactMap { entry in
                entry.deleted ? .deleted(recordName: entry.name, recordType: entry.type) : records[entry.name].map { .saved($0) }
            }
            return ZoneChanges(changes: changes, incarnation: incarnation, version: moreComing ? entries.last!.version : counter, moreComing: moreComing)
        }
    }

    /// A zone as database change tracking sees it.
    public struct ZoneState: Sendable, Hashable {
        public var zoneName: String
        public var incarnation: UUID
        public var changeCounter: Int64
        public var deleted: Bool

        /// The compact form a database token remembers.
        public var fingerprint: String { deleted ? "deleted" : "\(incarnation.uuidString.prefix(8)):\(changeCounter)" }
    }

    /// Every custom zone of a database (deleted ones too: their rows are kept), by name, in one snapshot.
    public func zoneStates(in database: DatabaseID, logger: Logger) async throws -> [ZoneState] {
        try await store.snapshot(logger: logger) { transaction in
            let rows = try await transaction.connection.query("""
                SELECT zone_name, incarnation, change_counter, deleted FROM zones
                WHERE container = \(database.container) AND environment = \(database.environment.rawValue) AND scope = \(database.scope.rawValue)
                  AND owner = \(database.owner)
                ORDER BY zone_name
                """, logger: transaction.logger)
            var states: [ZoneState] = []
            for try await (name, incarnation, counter, deleted) in rows.decode((String, UUID, Int64, Bool).self) {
                states.append(ZoneState(zoneName: name, incarnation: incarnation, changeCounter: counter, deleted: deleted))
            }
            return states
        }
    }

    /// Collects a zone's tombstones deleted before `olderThan` and raises its horizon past them, so
    /// tokens from before the horizon must reset. Returns how many were collected. (The GC worker
    /// runs this on a schedule.)
    @discardableResult
    public func collectTombstones(zone: ZoneID, in database: DatabaseID, olderThan: Date, logger: Logger) async throws -> Int {
        try await store.serializable(logger: logger, lock: ZoneKey(database: database, zoneName: zone.zoneName).rawValue) { transaction in
            let rows = try await transaction.connection.query("""
                WITH collected AS (
                    DELETE FROM record_tombstones
                    WHERE container = \(database.container) AND environment = \(database.environment.rawValue) AND scope = \(database.scope.rawValue)
                      AND owner = \(database.owner) AND zone_name = \(zone.zoneName) AND deleted_at < \(olderThan)
                    RETURNING deleted_version)
                SELECT count(*)::bigint, coalesce(max(deleted_version), 0)::bigint FROM collected
                """, logger: transaction.logger)
            var result: (Int64, Int64) = (0, 0)
            for try await row in rows.decode((Int64, Int64).self) { result = row }
            if result.0 > 0 {
                try await transaction.connection.query("""
                    UPDATE zones SET tombstone_horizon = greatest(tombstone_horizon, \(result.1))
                    WHERE container = \(database.container) AND environment = \(database.environment.rawValue) AND scope = \(database.scope.rawValue)
                      AND owner = \(database.owner) AND zone_name = \(zone.zoneName)
                    """, logger: transaction.logger)
            }
            return Int(result.0)
        }
    }
}
