import Foundation
import Logging
import PostgresNIO
import StratusCore

/// `stratus-gc`'s expiry index (`record_expirations`): each record that carries an expiration, by
/// zone and name, kept from the zone events, so the collector finds what is due in the order it
/// falls due without reading `records`. It is a hint, never the authority: the collector deletes a
/// record only once the record itself, locked, has expired (`RecordStore.expire`), so an entry that
/// is stale, replayed or redelivered can never cost a live record.
public struct RecordExpirationIndex: Sendable {
    let store: PostgresStore

    /// The channel a commit that indexes an expiration notifies: the collector listens on it while
    /// it sleeps until the next expiry.
    public static let channel = "stratus_record_expirations"

    /// Creates the index over a store.
    public init(store: PostgresStore) { self.store = store }

    /// One indexed expiration.
    public struct Entry: Sendable, Hashable {
        public var database: DatabaseID
        public var zone: ZoneID
        public var recordName: String
        /// Milliseconds since 1970.
        public var expiresAt: Int64
    }

    /// Applies `record.saved`: the record's expiration is indexed, or its entry goes when it has none.
    public static func apply(_ saved: RecordSaved, in transaction: Transaction) async throws {
        let database = saved.database
        let zoneName = saved.zoneID.zoneName
        let recordName = saved.record.recordName
        guard let expiresAt = saved.record.expirationDate else {
            // A record this save created has no entry to remove: an earlier record of its name left
            // the index with its deletion (or its zone's), which its zone applied first.
            guard saved.previousChangeTag != nil else { return }
            try await remove(recordName, zone: zoneName, of: database, in: transaction)
            return
        }
        // The notification is delivered at commit, when the entry is visible to the collector.
        try await transaction.connection.execute("""
            WITH indexed AS (
                INSERT INTO record_expirations (container, environment, scope, owner, zone_name, record_name, expires_at)
                VALUES (\(database.container), \(database.environment.rawValue), \(database.scope.rawValue), \(database.owner), \(zoneName),
                        \(recordName), \(expiresAt))
                ON CONFLICT (container, environment, scope, owner, zone_name, record_name) DO UPDATE SET expires_at = EXCLUDED.expires_at
                RETURNING 1)
            SELECT pg_notify(\(channel), '') FROM indexed
            """, logger: transaction.logger)
    }

    /// Applies a run of `record.saved` events, in order: within a run each record exists throughout
    /// (a deletion ends a run), so its last save in the run decides its entry. The entries of
    /// records last saved without an expiration go with one statement per zone (as `apply(saved)`,
    /// not for a record the run created), and the rest are indexed with one statement.
    public static func apply(saves: [RecordSaved], in transaction: Transaction) async throws {
        guard saves.count > 1 else {
            if let only = saves.first { try await apply(only, in: transaction) }
            return
        }
        struct Key: Hashable { var zone: ZoneKey; var recordName: String }
        var last: [Key: Int] = [:]
        for (index, saved) in saves.enumerated() {
            last[Key(zone: ZoneKey(database: saved.database, zoneName: saved.zoneID.zoneName), recordName: saved.record.recordName)] = index
        }
        let final = last.values.sorted().map { saves[$0] }
        let removed = final.filter { $0.record.expirationDate == nil && $0.previousChangeTag != nil }
        for zone in removed.groupedByZone({ ZoneKey(database: $0.database, zoneName: $0.zoneID.zoneName) }) {
            guard let first = zone.first else { continue }
            try await transaction.connection.execute("""
                DELETE FROM record_expirations
                WHERE \(zone: first.zoneID.zoneName, of: first.database) AND record_name = ANY(\(zone.map(\.record.recordName)))
                """, logger: transaction.logger)
        }
        let indexed = final.filter { $0.record.expirationDate != nil }
        guard !indexed.isEmpty else { return }
        try await transaction.connection.execute("""
            WITH indexed AS (
                INSERT INTO record_expirations (container, environment, scope, owner, zone_name, record_name, expires_at)
                SELECT * FROM unnest(\(indexed.map(\.database.container))::text[], \(indexed.map(\.database.environment.rawValue))::text[],
                                     \(indexed.map(\.database.scope.rawValue))::text[], \(indexed.map(\.database.owner))::text[],
                                     \(indexed.map(\.zoneID.zoneName))::text[], \(indexed.map(\.record.recordName))::text[],
                                     \(indexed.map { $0.record.expirationDate ?? 0 })::int8[])
                ON CONFLICT (container, environment, scope, owner, zone_name, record_name) DO UPDATE SET expires_at = EXCLUDED.expires_at
                RETURNING 1)
            SELECT pg_notify(\(channel), '') FROM (SELECT 1 FROM indexed LIMIT 1) AS once
            """, logger: transaction.logger)
    }

    /// Applies `record.deleted`: the record's entry goes.
    public static func apply(_ deleted: RecordDeleted, in transaction: Transaction) async throws {
        try await remove(deleted.recordName, zone: deleted.zoneID.zoneName, of: deleted.database, in: transaction)
    }

    /// Applies a run of `record.deleted` events: their entries go, one statement per zone (the
    /// primary key finds each entry; the zone's other entries are not read).
    public static func apply(deletions: [RecordDeleted], in transaction: Transaction) async throws {
        for zone in deletions.groupedByZone({ ZoneKey(database: $0.database, zoneName: $0.zoneID.zoneName) }) {
            guard let first = zone.first else { continue }
            try await transaction.connection.execute("""
                DELETE FROM record_expirations WHERE \(zone: first.zoneID.zoneName, of: first.database) AND record_name = ANY(\(zone.map(\.recordName)))
                """, logger: transaction.logger)
        }
    }

    /// Applies `zone.deleted`: the zone's entries go with its records.
    public static func apply(_ deleted: ZoneDeleted, in transaction: Transaction) async throws {
        try await transaction.connection.execute("""
            DELETE FROM record_expirations WHERE \(zone: deleted.zoneID.zoneName, of: deleted.database)
            """, logger: transaction.logger)
    }

    /// Seeds the index with a page of one zone's records as a snapshot of the tables holds them (a
    /// rebuild after the log was pruned): each record with an expiration is indexed, as the save
    /// that gave it one left it.
    public static func seed(_ records: [Record], zone zoneName: String, of database: DatabaseID, in transaction: Transaction) async throws {
        let expiring = records.filter { $0.expirationDate != nil }
        guard !expiring.isEmpty else { return }
        try await transaction.connection.execute("""
            INSERT INTO record_expirations (container, environment, scope, owner, zone_name, record_name, expires_at)
            SELECT \(database.container), \(database.environment.rawValue), \(database.scope.rawValue), \(database.owner), \(zoneName), name, at
            FROM unnest(\(expiring.map(\.recordName))::text[], \(expiring.map { $0.expirationDate ?? 0 })::int8[]) AS r(name, at)
            ON CONFLICT (container, environment, scope, owner, zone_name, record_name) DO UPDATE SET expires_at = EXCLUDED.expires_at
            """, logger: transaction.logger)
    }

    /// Empties the index (a replay rebuilds it from the event log).
    public static func reset(in transaction: Transaction) async throws {
        // Crosses owners: a replay empties the worker's whole projection (each node's, when sharded).
        try await transaction.connection.execute("DELETE FROM record_expirations", logger: transaction.logger)
    }

    private static func remove(_ recordName: String, zone zoneName: String, of database: DatabaseID, in transaction: Transaction) async throws {
        try await transaction.connection.execute("""
            DELETE FROM record_expirations WHERE \(zone: zoneName, of: database) AND record_name = \(recordName)
            """, logger: transaction.logger)
    }

    /// The entries due by the database's clock, earliest first, at most `limit`, and that clock (ms).
    public func due(limit: Int, logger: Logger) async throws -> (entries: [Entry], now: Int64) {
        try await store.withConnection { connection in
            // Crosses owners: the collector's sweep of every owner's due rows (each node sweeps its own, when sharded).
            let rows = try await connection.query("""
                WITH clock AS (SELECT \(unescaped: RecordExpirySQL.now) AS now)
                SELECT clock.now, e.container, e.environment, e.scope, e.owner, e.zone_name, e.record_name, e.expires_at
                FROM clock LEFT JOIN LATERAL (
                    SELECT * FROM record_expirations WHERE expires_at <= clock.now ORDER BY expires_at LIMIT \(limit)) AS e ON true
                """, logger: logger)
            var now: Int64 = 0
            var entries: [Entry] = []
            for try await row in rows.decode((Int64, String?, String?, String?, String?, String?, String?, Int64?).self) {
                now = row.0
                guard let container = row.1, let environment = row.2.flatMap(Environment.init(rawValue:)),
                      let scope = row.3.flatMap(DatabaseScope.init(rawValue:)), let owner = row.4, let zoneName = row.5,
                      let recordName = row.6, let expiresAt = row.7 else { continue }
                entries.append(Entry(
                    database: DatabaseID(container: container, environment: environment, scope: scope, owner: owner),
                    zone: ZoneID(zoneName: zoneName, ownerRecordName: owner), recordName: recordName, expiresAt: expiresAt))
            }
            return (entries, now)
        }
    }

    /// One zone's entries due by the database's clock, earliest first, at most `limit`: the collector
    /// deletes a zone's due records in transactions of up to a whole batch, however the zones'
    /// expirations interleave.
    public func due(zone: ZoneID, of database: DatabaseID, limit: Int, logger: Logger) async throws -> [Entry] {
        try await store.withConnection { connection in
            let rows = try await connection.query("""
                SELECT record_name, expires_at FROM record_expirations
                WHERE \(zone: zone.zoneName, of: database) AND expires_at <= \(unescaped: RecordExpirySQL.now)
                ORDER BY expires_at LIMIT \(limit)
                """, logger: logger)
            var entries: [Entry] = []
            for try await (recordName, expiresAt) in rows.decode((String, Int64).self) {
                entries.append(Entry(database: database, zone: zone, recordName: recordName, expiresAt: expiresAt))
            }
            return entries
        }
    }

    /// Removes entries the collector has dealt with — deleted, found alive or gone — unless the
    /// record's expiration changed since they were read (then the entry is the newer one's).
    ///
    /// One statement per zone, which reads only the zone's entries due by the latest of them (an
    /// index range, not the whole index), and passes over entries a projection transaction holds: it
    /// is writing them (a deletion's removal or a new expiration), so they are not the collector's to
    /// remove, and waiting for its commit would hold the collector up for nothing.
    public func remove(_ entries: [Entry], logger: Logger) async throws {
        guard !entries.isEmpty else { return }
        let zones = entries.groupedByZone { ZoneKey(database: $0.database, zoneName: $0.zone.zoneName) }
        try await store.withConnection { connection in
            for batch in zones {
                guard let first = batch.first, let latest = batch.map(\.expiresAt).max() else { continue }
                try await connection.execute("""
                    DELETE FROM record_expirations WHERE ctid = ANY(ARRAY(
                        SELECT x.ctid FROM record_expirations AS x
                        JOIN unnest(\(batch.map(\.recordName))::text[], \(batch.map(\.expiresAt))::int8[]) AS d(record_name, expires_at)
                          ON x.record_name = d.record_name AND x.expires_at = d.expires_at
                        WHERE \(zone: first.zone.zoneName, of: first.database) AND x.expires_at <= \(latest)
                        FOR UPDATE OF x SKIP LOCKED))
                    """, logger: logger)
            }
        }
    }

    /// The seconds from the earliest expiration to the database's clock (0 when none is due), and
    /// how many entries the index holds: for the collector's gauges.
    public func backlog(logger: Logger) async throws -> (lagSeconds: Double, entries: Int64) {
        try await store.withConnection { connection in
            // Crosses owners: the collector's gauges over every owner's entries (each node's, when sharded).
            let rows = try await connection.query("""
                SELECT greatest(0, \(unescaped: RecordExpirySQL.now) - coalesce(min(expires_at), \(unescaped: RecordExpirySQL.now)))::bigint, count(*)::bigint
                FROM record_expirations
                """, logger: logger)
            for try await (lag, count) in rows.decode((Int64, Int64).self) { return (Double(lag) / 1000, count) }
            return (0, 0)
        }
    }

    /// Returns when an entry is due: at once when one is, else when the earliest falls due, when a
    /// commit indexes a new expiration (it may be earlier), or after `maxWait` — sleeping, not
    /// polling. It listens before it reads the earliest expiration, so an expiration committed in
    /// between still wakes it.
    public func waitForWork(maxWait: Duration, logger: Logger) async throws {
        try await store.withDedicatedConnection { connection in
            try await connection.listen(on: Self.channel) { notifications in
                // Crosses owners: the collector's sweep of every owner's due rows (each node sweeps its own, when sharded).
                let rows = try await connection.query(
                    "SELECT (min(expires_at) - \(unescaped: RecordExpirySQL.now))::bigint FROM record_expirations", logger: logger)
                var untilDue: Int64?
                for try await value in rows.decode(Int64?.self) { untilDue = value }
                var wait = maxWait
                if let untilDue {
                    guard untilDue > 0 else { return }
                    wait = min(wait, .milliseconds(untilDue))
                }
                let sleep = wait
                await withTaskGroup(of: Void.self) { group in
                    group.addTask {
                        do {
                            for try await _ in notifications { return }
                        } catch {}
                    }
                    group.addTask { try? await Task.sleep(for: sleep) }
                    await group.next()
                    group.cancelAll()
                }
            }
        }
    }
}
