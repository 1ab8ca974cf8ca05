import Foundation
import Logging
import PostgresNIO
import StratusCore

/// `stratus schema reset`, as CloudKit's reset of the development environment: development's schema
/// becomes production's and development's data goes — every custom zone of every database (with its
/// records) and every record of the default zones — through the write paths of `zones/modify` and
/// `records/modify`, so each deletion is an event (`zone.deleted`, `record.deleted`) that the query
/// index, sync, subscriptions and the other workers apply as they apply a client's. Production is
/// never touched. Subscriptions, users and their custom roles stay (docs/read-grants-and-reset.md).
public struct DevelopmentReset: Sendable {
    let store: PostgresStore

    /// Creates the reset.
    public init(store: PostgresStore) { self.store = store }

    /// What a reset did.
    public struct Report: Sendable, Hashable {
        /// The schema change (a reset copies production's schema: never refused).
        public var schema: SchemaStore.Outcome
        /// Custom zones deleted, by database scope.
        public var zones: [DatabaseScope: Int] = [:]
        /// Records deleted with those zones, by database scope.
        public var zoneRecords: [DatabaseScope: Int] = [:]
        /// Records deleted from default zones, by database scope.
        public var records: [DatabaseScope: Int] = [:]
        /// The databases (scope and owner) that lost something.
        public var databases: Int = 0

        /// What was deleted, for an operator: one line per kind, counts by database scope.
        public var summary: [String] {
            func counts(_ counts: [DatabaseScope: Int]) -> String {
                let total = counts.values.reduce(0, +)
                let parts = DatabaseScope.allCases.compactMap { scope in counts[scope].flatMap { $0 > 0 ? "\(scope.rawValue): \($0)" : nil } }
                return parts.isEmpty ? "\(total)" : "\(total) (\(parts.joined(separator: ", ")))"
            }
            return [
                "deleted \(counts(zones)) custom zones of development, with their \(counts(zoneRecords)) records",
                "deleted \(counts(records)) records of development's default zones",
                "\(databases) databases of development changed; production untouched",
            ]
        }
    }

    /// Resets development: the schema first, then the zones, then the default zones' records, each
    /// `batch` at a time (one transaction per database and batch), walking each table once in key
    /// order until the walk finds nothing more. What is written behind the walk while it runs stays.
    public func run(container: String, causation: Causation, batch: Int = 200, logger: Logger) async throws -> Report {
        let batch = min(max(batch, 1), 1000)
        var report = Report(schema: try await SchemaStore(store: store).reset(container: container, causation: causation, logger: logger))
        var touched = Set<DatabaseID>()
        let zoneStore = ZoneStore(store: store)
        // Each batch continues after the last one read (in primary key order), so a big
        // environment is walked once rather than rescanned from its start for every batch.
        var after = Position()
        while true {
            let zones = try await liveZones(container: container, after: after, limit: batch, logger: logger)
            guard let last = zones.last else { break }
            after = Position(scope: last.0.scope.rawValue, owner: last.0.owner, name: last.1)
            for (database, names) in Self.byDatabase(zones) {
                let counted = try await recordCount(in: database, zones: names, logger: logger)
                let outcomes = try await zoneStore.modify(
                    names.map { .delete(ZoneID(zoneName: $0, ownerRecordName: database.owner)) }, in: database, causation: causation, logger: logger)
                var deleted = 0
                for outcome in outcomes {
                    switch outcome {
                    case .success: deleted += 1
                    // Deleted meanwhile by its owner: gone either way.
                    case .failure(let error) where error.code == .zoneNotFound: continue
                    case .failure(let error): throw error
                    }
                }
                report.zones[database.scope, default: 0] += deleted
                report.zoneRecords[database.scope, default: 0] += counted
                touched.insert(database)
            }
        }
        let records = RecordStore(store: store)
        after = Position()
        while true {
            let found = try await defaultZoneRecords(container: container, after: after, limit: batch, logger: logger)
            guard let last = found.last else { break }
            after = Position(scope: last.0.scope.rawValue, owner: last.0.owner, name: last.1)
            for (database, names) in Self.byDatabase(found) {
                let deleted = try await records.purge(names, zone: ZoneID(zoneName: ZoneID.defaultZoneName, ownerRecordName: database.owner),
                                                      in: database, causation: causation, logger: logger)
                report.records[database.scope, default: 0] += deleted
                touched.insert(database)
            }
        }
        report.databases = touched.count
        return report
    }

    /// Groups (database, name) rows by database, in the order the databases first appear.
    static func byDatabase(_ rows: [(DatabaseID, String)]) -> [(DatabaseID, [String])] {
        var order: [DatabaseID] = []
        var names: [DatabaseID: [String]] = [:]
        for (database, name) in rows {
            if names[database] == nil { order.append(database) }
            names[database, default: []].append(name)
        }
        return order.map { ($0, names[$0] ?? []) }
    }

    /// Where a walk over zones or default-zone records stands: after this scope, owner and name
    /// (the empty strings sort first).
    struct Position {
        var scope = ""
        var owner = ""
        var name = ""
    }

    /// Development's live custom zones after `after`, at most `limit`, in primary key order.
    private func liveZones(container: String, after: Position, limit: Int, logger: Logger) async throws -> [(DatabaseID, String)] {
        // Crosses owners: a development reset walks every database of the container (each node's, when sharded).
        try await rows("""
            SELECT scope, owner, zone_name FROM zones
            WHERE container = \(container) AND environment = \(Environment.development.rawValue)
              AND (scope, owner, zone_name) > (\(after.scope), \(after.owner), \(after.name))
              AND NOT deleted AND zone_name <> \(ZoneID.defaultZoneName)
            ORDER BY scope, owner, zone_name LIMIT \(limit)
            """, container: container, logger: logger)
    }

    /// Records of development's default zones after `after`, at most `limit`, in primary key order
    /// (the zone's name is fixed, so the walk follows the key).
    private func defaultZoneRecords(container: String, after: Position, limit: Int, logger: Logger) async throws -> [(DatabaseID, String)] {
        // Crosses owners: a development reset walks every database of the container (each node's, when sharded).
        try await rows("""
            SELECT scope, owner, record_name FROM records
            WHERE container = \(container) AND environment = \(Environment.development.rawValue)
              AND (scope, owner, zone_name, record_name) > (\(after.scope), \(after.owner), \(ZoneID.defaultZoneName), \(after.name))
              AND zone_name = \(ZoneID.defaultZoneName)
            ORDER BY scope, owner, zone_name, record_name LIMIT \(limit)
            """, container: container, logger: logger)
    }

    private func rows(_ query: PostgresQuery, container: String, logger: Logger) async throws -> [(DatabaseID, String)] {
        try await store.withConnection { connection in
            var found: [(DatabaseID, String)] = []
            for try await (scope, owner, name) in try await connection.query(query, logger: logger).decode((String, String, String).self) {
                guard let scope = DatabaseScope(rawValue: scope) else { continue }
                found.append((DatabaseID(container: container, environment: .development, scope: scope, owner: owner), name))
            }
            return found
        }
    }

    /// How many records the named zones of a database hold (what deleting them deletes).
    private func recordCount(in database: DatabaseID, zones: [String], logger: Logger) async throws -> Int {
        try await store.withConnection { connection in
            let rows = try await connection.query("""
                SELECT count(*)::int8 FROM records
                WHERE container = \(database.container) AND environment = \(database.environment.rawValue) AND scope = \(database.scope.rawValue)
                  AND owner = \(database.owner) AND zone_name = ANY(\(zones))
                """, logger: logger)
            for try await count in rows.decode(Int64.self) { return Int(count) }
            return 0
        }
    }
}

extension RecordStore {
    /// Deletes the named records of a default zone whoever created them (those already gone are
    /// skipped), through the write path of `records/modify`'s deletes: each record's lock, one
    /// SERIALIZABLE transaction, a `record.deleted` event each. Returns how many it deleted (not
    /// counting cascades). For `stratus schema reset`, which empties development.
    func purge(_ recordNames: [String], zone: ZoneID, in database: DatabaseID, causation: Causation, logger: Logger) async throws -> Int {
        guard !recordNames.isEmpty else { return 0 }
        let context = WriteContext(database: database, zone: zone, causation: causation, deviceID: nil, limits: Limits())
        return try await store.serializable(logger: logger, locks: recordNames.map { context.zoneKey.rawValue + "/" + $0 }) { transaction in
            var writer = try await ZoneWriter.open(context, in: transaction)
            let unknown = recordNames.filter { writer.known[ExactName($0)] == nil }
            if !unknown.isEmpty { try await writer.lock(unknown, in: transaction) }
            let live = recordNames.compactMap { writer.known[ExactName($0)] ?? nil }
            try await writer.deleteAsCreators(live, in: transaction)
            try await writer.close(in: transaction)
            return live.count
        }
    }
}
