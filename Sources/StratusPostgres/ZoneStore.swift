import Foundation
import Logging
import PostgresNIO
import StratusCore

/// Custom zones: the serializable write path for `zones/modify` and the reads for `zones/list` and `zones/lookup`.
public struct ZoneStore: Sendable {
    let store: PostgresStore

    /// Creates the zone store.
    public init(store: PostgresStore) { self.store = store }

    /// The outcome of one zone command.
    public enum Result: Sendable, Hashable {
        /// The zone exists after the command (created or already there).
        case saved(Zone)
        /// The zone was deleted.
        case deleted(ZoneID)
    }

    /// Applies zone commands in one transaction under their zones' locks, appending their events.
    /// Each command's outcome is returned in order; a command that fails fails the whole call.
    /// With a container `quota` on zones, a command that would create a zone past it fails
    /// (`QUOTA_EXCEEDED`, `ContainerQuota.zoneRefusal`); deleting zones always passes.
    public func modify(
        _ commands: [ZoneCommand], in database: DatabaseID, causation: Causation, quota: ContainerQuota = ContainerQuota(), logger: Logger
    ) async throws -> [Swift.Result<Result, StratusError>] {
        // The same per-zone locks record writers take: a zone change queues behind them instead of aborting.
        let locks = commands.map { ZoneKey(database: database, zoneName: $0.zoneID.zoneName).rawValue }
        return try await store.locked(logger: logger, locks: locks) { transaction in
            let connection = transaction.connection
            var outcomes: [Swift.Result<Result, StratusError>] = []
            // The container's live zones, read once when a quota asks, counted on as zones are created.
            var containerZones: Int64?
            for command in commands {
                let zoneID = command.zoneID
                let row = try await Self.row(database: database, zoneName: zoneID.zoneName, on: connection, logger: logger)
                let current = row.flatMap { $0.deleted ? nil : $0.zone }
                let outcome: ZoneDecision.Outcome
                do {
                    outcome = try ZoneDecision.decide(
                        command, database: database, current: current, lastSequence: row?.zone.changeCounter ?? 0, newIncarnation: UUID())
                } catch let error as StratusError {
                    outcomes.append(.failure(error))
                    continue
                }
                switch outcome {
                case .unchanged(let zone):
                    outcomes.append(.success(.saved(zone)))
                case .changed(let payloads, let after):
                    let creates = current == nil && after != nil
                    if creates, quota.maxZones > 0 {
                        var zones = containerZones ?? 0
                        if containerZones == nil {
                            zones = try await ContainerCounts.totals(container: database.container, on: connection, logger: logger).zones
                        }
                        if let refusal = quota.zoneRefusal(container: database.container, zones: zones, zoneName: zoneID.zoneName) {
                            containerZones = zones
                            outcomes.append(.failure(refusal))
                            continue
                        }
                        containerZones = zones + 1
                    }
                    let key = ZoneKey(database: database, zoneName: zoneID.zoneName)
                    var sequence = row?.zone.changeCounter ?? 0
                    var events: [NewEvent] = []
                    for payload in payloads {
                        sequence += 1
                        switch payload {
                        case .created(let created):
                            events.append(NewEvent(zoneKey: key, zoneSequence: sequence, payload: created, causation: causation))
                        case .updated(let updated):
                            events.append(NewEvent(zoneKey: key, zoneSequence: sequence, payload: updated, causation: causation))
                        case .deleted(let deleted):
                            events.append(NewEvent(zoneKey: key, zoneSequence: sequence, payload: deleted, causation: causation))
                        }
                    }
                    let incarnation = after?.incarnation ?? row!.zone.incarnation
                    // A created zone adds one to the container's count (`ContainerCounts`) in the same statement.
                    try await connection.query("""
                        WITH tallied AS (
                            INSERT INTO container_usage (container, shard, zones) SELECT \(database.container), \(transaction.containerShard), 1 WHERE \(creates)
                            ON CONFLICT (container, shard) DO UPDATE SET zones = container_usage.zones + EXCLUDED.zones)
                        INSERT INTO zones (container, environment, scope, owner, zone_name, incarnation, change_counter, deleted, default_time_to_live)
                        VALUES (\(database.container), \(database.environment.rawValue), \(database.scope.rawValue), \(database.owner),
                                \(zoneID.zoneName), \(incarnation), \(sequence), \(after == nil), \(after?.defaultTimeToLive))
                        ON CONFLICT (container, environment, scope, owner, zone_name) DO UPDATE
                        SET incarnation = EXCLUDED.incarnation, change_counter = EXCLUDED.change_counter,
                            deleted = EXCLUDED.deleted, modified_at = now(), changed_xid = pg_current_xact_id(),
                            tombstone_horizon = CASE WHEN zones.incarnation = EXCLUDED.incarnation AND NOT EXCLUDED.deleted THEN zones.tombstone_horizon ELSE 0 END,
                            default_time_to_live = EXCLUDED.default_time_to_live
                        """, logger: logger)
                    if after == nil {
                        // A deleted zone takes its records with it (their bytes are freed); its zone.deleted
                        // event speaks for them all.
                        try await StorageUsage.deleteZone(of: database, zoneName: zoneID.zoneName, in: transaction)
                        for table in ["record_references", "record_tombstones", "shares"] {
                            try await connection.query(PostgresQuery(unsafeSQL: """
                                DELETE FROM \(table) WHERE container = $1 AND environment = $2 AND scope = $3 AND owner = $4 AND zone_name = $5
                                """, binds: Self.zoneBinds(database, zoneID.zoneName)), logger: logger)
                        }
                    }
                    if after == nil, let zones = containerZones { containerZones = zones - 1 }
                    try await EventLog.append(events, in: transaction)
                    if var after {
                        after.changeCounter = sequence
                        outcomes.append(.success(.saved(after)))
                    } else {
                        outcomes.append(.success(.deleted(zoneID)))
                    }
                }
            }
            return outcomes
        }
    }

    /// The database's live custom zones, by name.
    public func list(in database: DatabaseID, logger: Logger) async throws -> [Zone] {
        try await store.withConnection { connection in
            let rows = try await connection.query("""
                SELECT zone_name, incarnation, change_counter, default_time_to_live FROM zones
                WHERE container = \(database.container) AND environment = \(database.environment.rawValue)
                  AND scope = \(database.scope.rawValue) AND owner = \(database.owner) AND NOT deleted
                ORDER BY zone_name
                """, logger: logger)
            var zones: [Zone] = []
            for try await (name, incarnation, counter, ttl) in rows.decode((String, UUID, Int64, Int64?).self) {
                zones.append(Zone(database: database, zoneID: ZoneID(zoneName: name, ownerRecordName: database.owner),
                                  incarnation: incarnation, changeCounter: counter, defaultTimeToLive: ttl))
            }
            return zones
        }
    }

    /// One live custom zone, or nil.
    public func lookup(_ zoneName: String, in database: DatabaseID, logger: Logger) async throws -> Zone? {
        try await store.withConnection { connection in
            try await Self.row(database: database, zoneName: zoneName, on: connection, logger: logger)
                .flatMap { $0.deleted ? nil : $0.zone }
        }
    }

    private static func zoneBinds(_ database: DatabaseID, _ zoneName: String) -> PostgresBindings {
        var binds = PostgresBindings()
        binds.append(database.container)
        binds.append(database.environment.rawValue)
        binds.append(database.scope.rawValue)
        binds.append(database.owner)
        binds.append(zoneName)
        return binds
    }

    static func row(
        database: DatabaseID, zoneName: String, on connection: PostgresConnection, logger: Logger
    ) async throws -> (zone: Zone, deleted: Bool)? {
        let rows = try await connection.query("""
            SELECT incarnation, change_counter, deleted, default_time_to_live FROM zones
            WHERE container = \(database.container) AND environment = \(database.environment.rawValue)
              AND scope = \(database.scope.rawValue) AND owner = \(database.owner) AND zone_name = \(zoneName)
            """, logger: logger)
        for try await (incarnation, counter, deleted, ttl) in rows.decode((UUID, Int64, Bool, Int64?).self) {
            let zone = Zone(database: database, zoneID: ZoneID(zoneName: zoneName, ownerRecordName: database.owner),
                            incarnation: incarnation, changeCounter: counter, defaultTimeToLive: ttl)
            return (zone, deleted)
        }
        return nil
    }
}
