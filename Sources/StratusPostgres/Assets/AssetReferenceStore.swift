import Foundation
import Logging
import PostgresNIO
import StratusCore

/// stratus-gc's asset reference counts (`asset_references`), kept from record and zone events: for
/// each asset, whether its record still holds it and since when. Each apply runs in the worker's
/// checkpoint transaction; times are the events' own, so a replay reaches the same decisions.
public enum AssetReferenceStore {
    /// A saved record holds exactly the assets its fields name now: those it held before and no
    /// longer does are released at the event's time.
    public static func apply(_ saved: RecordSaved, event: EventEnvelope, in transaction: Transaction) async throws {
        let ids = Array(saved.record.assetIDs)
        let at = Date(timeIntervalSince1970: Double(event.createdAt) / 1000)
        let zoneKey = event.zoneKey.rawValue
        let recordName = saved.record.recordName
        // A record this save created releases nothing (an earlier record of its name released its
        // assets when it was deleted); without assets it needs no statement at all.
        if saved.previousChangeTag == nil && ids.isEmpty { return }
        try await transaction.connection.query("""
            UPDATE asset_references SET referenced = false, changed_at = \(at)
            WHERE zone_key = \(zoneKey) AND record_name = \(recordName) AND referenced AND NOT (asset_id = ANY(\(ids)))
            """, logger: transaction.logger)
        guard !ids.isEmpty else { return }
        try await transaction.connection.query("""
            INSERT INTO asset_references (asset_id, zone_key, record_name, referenced, changed_at)
            SELECT id, \(zoneKey), \(recordName), true, \(at) FROM unnest(\(ids)::uuid[]) AS id
            ON CONFLICT (asset_id) DO UPDATE SET referenced = true, zone_key = EXCLUDED.zone_key, record_name = EXCLUDED.record_name,
                changed_at = EXCLUDED.changed_at
            """, logger: transaction.logger)
        try await transaction.connection.query(
            "UPDATE assets SET bound = true WHERE asset_id = ANY(\(ids)) AND NOT bound", logger: transaction.logger)
    }

    /// A deleted record releases every asset it held.
    public static func apply(_ deleted: RecordDeleted, event: EventEnvelope, in transaction: Transaction) async throws {
        let at = Date(timeIntervalSince1970: Double(event.createdAt) / 1000)
        try await transaction.connection.query("""
            UPDATE asset_references SET referenced = false, changed_at = \(at)
            WHERE zone_key = \(event.zoneKey.rawValue) AND record_name = \(deleted.recordName) AND referenced
            """, logger: transaction.logger)
    }

    /// A run of deleted records releases every asset they held, in one statement.
    public static func apply(deletions: [(deleted: RecordDeleted, event: EventEnvelope)], in transaction: Transaction) async throws {
        guard deletions.count > 1 else {
            if let only = deletions.first { try await apply(only.deleted, event: only.event, in: transaction) }
            return
        }
        try await releaseAll(of: deletions.map { ($0.event, $0.deleted.recordName) }, in: transaction)
    }

    /// A run of saves, in order: each consecutive stretch of updated records without assets
    /// releases everything they held with one statement (as `apply(saved)` releases what a save no
    /// longer names); a save that holds assets is applied on its own, after the stretch before it.
    public static func apply(saves: [(saved: RecordSaved, event: EventEnvelope)], in transaction: Transaction) async throws {
        struct Key: Hashable { var zoneKey: String; var recordName: String }
        var stretch: [(event: EventEnvelope, recordName: String)] = []
        var inStretch: Set<Key> = []
        func flush() async throws {
            if !stretch.isEmpty { try await releaseAll(of: stretch, in: transaction) }
            stretch.removeAll()
            inStretch.removeAll()
        }
        for (saved, event) in saves {
            if saved.record.assetIDs.isEmpty {
                // A record this save created, without assets, releases and binds nothing. A record
                // saved again in the stretch released everything at its first save, and at that time.
                if saved.previousChangeTag != nil, inStretch.insert(Key(zoneKey: event.zoneKey.rawValue, recordName: saved.record.recordName)).inserted {
                    stretch.append((event, saved.record.recordName))
                }
            } else {
                try await flush()
                try await apply(saved, event: event, in: transaction)
            }
        }
        try await flush()
    }

    /// Releases every asset the records held, each at its event's time.
    private static func releaseAll(of records: [(event: EventEnvelope, recordName: String)], in transaction: Transaction) async throws {
        try await transaction.connection.query("""
            UPDATE asset_references AS a SET referenced = false, changed_at = to_timestamp(d.at / 1000.0)
            FROM unnest(\(records.map(\.event.zoneKey.rawValue))::text[], \(records.map(\.recordName))::text[],
                        \(records.map(\.event.createdAt))::int8[]) AS d(zone_key, record_name, at)
            WHERE a.zone_key = d.zone_key AND a.record_name = d.record_name AND a.referenced
            """, logger: transaction.logger)
    }

    /// A deleted zone releases every asset its records held.
    public static func apply(_ deleted: ZoneDeleted, event: EventEnvelope, in transaction: Transaction) async throws {
        let at = Date(timeIntervalSince1970: Double(event.createdAt) / 1000)
        try await transaction.connection.query("""
            UPDATE asset_references SET referenced = false, changed_at = \(at) WHERE zone_key = \(event.zoneKey.rawValue) AND referenced
            """, logger: transaction.logger)
    }

    /// Seeds the counts with a page of one zone's records as a snapshot of the tables holds them (a
    /// rebuild after the log was pruned): each asset a record's fields name is held by it since the
    /// record's last change, and bound.
    public static func seed(_ records: [Record], zone zoneKey: ZoneKey, in transaction: Transaction) async throws {
        var ids: [UUID] = [], names: [String] = [], times: [Int64] = []
        for record in records {
            for id in record.assetIDs.sorted(by: { $0.uuidString < $1.uuidString }) {
                ids.append(id)
                names.append(record.recordName)
                times.append(record.modified.timestamp)
            }
        }
        guard !ids.isEmpty else { return }
        try await transaction.connection.query("""
            INSERT INTO asset_references (asset_id, zone_key, record_name, referenced, changed_at)
            SELECT id, \(zoneKey.rawValue), name, true, to_timestamp(at / 1000.0)
            FROM unnest(\(ids)::uuid[], \(names)::text[], \(times)::int8[]) AS r(id, name, at)
            ON CONFLICT (asset_id) DO UPDATE SET referenced = true, zone_key = EXCLUDED.zone_key, record_name = EXCLUDED.record_name,
                changed_at = EXCLUDED.changed_at
            """, logger: transaction.logger)
        try await transaction.connection.query(
            "UPDATE assets SET bound = true WHERE asset_id = ANY(\(ids)) AND NOT bound", logger: transaction.logger)
    }

    /// Seeds the assets that were bound when the snapshot was taken and that no record of it holds
    /// (after `seed` has seen every record): released, by the record they were uploaded for, at the
    /// rebuild's time — the log that said when they were released is gone, so the collector keeps
    /// each at least the grace from now, never less than the worker that applied the release would.
    public static func seedReleased(from snapshot: LogSnapshot, in transaction: Transaction) async throws {
        var after = UUID(uuid: (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0))
        while true {
            // Crosses owners: a rebuild's walk over every bound asset (each node's, when sharded).
            let rows = try await snapshot.connection.query("""
                SELECT asset_id, container, environment, scope, owner, zone_name, record_name FROM assets
                WHERE bound AND asset_id > \(after) ORDER BY asset_id LIMIT 1000
                """, logger: transaction.logger)
            var ids: [UUID] = [], keys: [String] = [], names: [String] = []
            for try await (id, container, environment, scope, owner, zone, record) in rows.decode((UUID, String, String, String, String, String, String).self) {
                ids.append(id)
                keys.append([container, environment, scope, owner, zone].joined(separator: "/"))
                names.append(record)
            }
            guard let last = ids.last else { return }
            // Crosses owners: the page's assets by id, each entry under its own zone key.
            try await transaction.connection.query("""
                WITH released AS (
                    INSERT INTO asset_references (asset_id, zone_key, record_name, referenced, changed_at)
                    SELECT id, key, name, false, now() FROM unnest(\(ids)::uuid[], \(keys)::text[], \(names)::text[]) AS r(id, key, name)
                    ON CONFLICT (asset_id) DO NOTHING
                    RETURNING asset_id)
                UPDATE assets SET bound = true WHERE asset_id IN (SELECT asset_id FROM released)
                """, logger: transaction.logger)
            after = last
        }
    }

    /// Forgets every count (replay). Until the replay has caught up, the collector's check against
    /// the records keeps referenced assets safe.
    public static func reset(in transaction: Transaction) async throws {
        // Crosses owners: a replay empties the worker's whole projection (each node's, when sharded).
        try await transaction.connection.query("DELETE FROM asset_references", logger: transaction.logger)
        // Crosses owners: a replay empties the worker's whole projection (each node's, when sharded).
        try await transaction.connection.query("UPDATE assets SET bound = false WHERE bound", logger: transaction.logger)
    }
}
