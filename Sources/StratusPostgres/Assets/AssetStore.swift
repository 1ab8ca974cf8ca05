import Foundation
import Logging
import PostgresNIO
import StratusCore

/// The `assets` table: what stratus-api knows of each upload, and the checks stratus-gc makes
/// before it deletes an asset's bytes.
public struct AssetStore: Sendable {
    let store: PostgresStore

    /// Creates the store.
    public init(store: PostgresStore) { self.store = store }

    /// An asset as the table holds it.
    public struct Asset: Sendable, Hashable {
        public var id: UUID
        public var database: DatabaseID
        public var zoneName: String
        public var recordName: String
        public var recordType: String
        public var fieldName: String
        /// `uploading`, `uploaded` or `collecting`.
        public var state: String
        public var size: Int64?
        public var fileChecksum: String?
        /// When the upload started.
        public var createdAt: Date
        /// Whether stratus-gc saw a record event referencing it.
        public var bound: Bool
        /// The asset whose bytes it holds in the blob store: its own id, or — an asset made by
        /// `assets/rereference` — the id under which the bytes were uploaded.
        public var blobID: UUID
        /// Made by `assets/rereference` and not bound to a record field yet: the first `records/modify`
        /// that binds it assigns it to that field (`assign`).
        public var isUnassigned: Bool { recordName.isEmpty }

        /// The value an ASSETID field holds, once uploaded.
        public var value: AssetValue? {
            guard state == "uploaded", let size, let fileChecksum else { return nil }
            return AssetValue(receipt: AssetValue.receipt(id), size: size, fileChecksum: fileChecksum)
        }
    }

    /// Starts an upload: false when the grant's asset exists already (its URL was used).
    public func beginUpload(_ grant: AssetUploadGrant, logger: Logger) async throws -> Bool {
        let database = grant.database
        return try await store.withConnection { connection in
            let rows = try await connection.query("""
                INSERT INTO assets (asset_id, container, environment, scope, owner, zone_name, record_name, record_type, field_name, state)
                VALUES (\(grant.assetID), \(database.container), \(database.environment.rawValue), \(database.scope.rawValue), \(database.owner),
                        \(grant.zoneName), \(grant.recordName), \(grant.recordType), \(grant.fieldName), 'uploading')
                ON CONFLICT (asset_id) DO NOTHING RETURNING asset_id
                """, logger: logger)
            for try await _ in rows.decode(UUID.self) { return true }
            return false
        }
    }

    /// Completes an upload with its size and checksum, counting its bytes against `usageOwner`
    /// (`StorageUsage`) in the same transaction; with a `quota` (bytes, > 0) an upload that takes the
    /// user past it is refused (`QUOTA_EXCEEDED`) and nothing of it is kept in the table.
    /// With a `containerQuota`, an upload that takes the container past its stored or asset bytes is
    /// refused the same way (`ContainerQuota.assetRefusal`).
    public func finishUpload(
        _ id: UUID, size: Int64, fileChecksum: String, usageOwner: String, quota: Int64, containerQuota: ContainerQuota = ContainerQuota(),
        logger: Logger
    ) async throws {
        try await store.readCommitted(logger: logger) { transaction in
            let rows = try await transaction.connection.query("""
                UPDATE assets SET state = 'uploaded', size = \(size), file_checksum = \(fileChecksum), usage_owner = \(usageOwner)
                WHERE asset_id = \(id) AND state = 'uploading'
                RETURNING container, environment
                """, logger: transaction.logger)
            var tenancy: (String, String)?
            for try await row in rows.decode((String, String).self) { tenancy = row }
            guard case let (container, environment)? = tenancy else { return }
            try await StorageUsage.addAsset(size, container: container, environment: environment, owner: usageOwner, in: transaction)
            if containerQuota.needsCheck(ContainerTotals(bytes: size, assetBytes: size)) {
                let total = try await ContainerCounts.totals(container: container, on: transaction.connection, logger: transaction.logger)
                if let refusal = containerQuota.assetRefusal(container: container, total: total, size: size) { throw refusal }
            }
            guard quota > 0 else { return }
            let total = try await StorageUsage.total(container: container, environment: environment, owner: usageOwner, on: transaction.connection, logger: transaction.logger)
            if total > quota {
                throw StratusError(.quotaExceeded, Self.quotaReason(size: size, total: total, quota: quota))
            }
        }
    }

    /// The reason of an upload refused for the quota.
    public static func quotaReason(size: Int64, total: Int64, quota: Int64) -> String {
        "The asset of \(size) bytes would bring the user's stored bytes to \(total); the storage quota is \(quota) bytes per user (records and assets); nothing was stored"
    }

    /// The bytes `owner` stores (records and assets), as `StorageUsage` counts them.
    public func usage(container: String, environment: Environment, owner: String, logger: Logger) async throws -> Int64 {
        try await store.withConnection { connection in
            try await StorageUsage.total(container: container, environment: environment.rawValue, owner: owner, on: connection, logger: logger)
        }
    }

    /// Forgets an upload that failed (its bytes were never made visible).
    public func abandonUpload(_ id: UUID, logger: Logger) async throws {
        _ = try await store.withConnection { connection in
            try await connection.query("DELETE FROM assets WHERE asset_id = \(id) AND state = 'uploading'", logger: logger)
        }
    }

    /// Marks assets bound as soon as a write that holds them has committed, so a receipt replaced
    /// right after is known as used before stratus-gc applies the events (which marks them too).
    public func markBound(_ ids: [UUID], logger: Logger) async throws {
        guard !ids.isEmpty else { return }
        _ = try await store.withConnection { connection in
            try await connection.query("UPDATE assets SET bound = true WHERE asset_id = ANY(\(ids)) AND NOT bound", logger: logger)
        }
    }

    /// The assets of `ids` that exist.
    public func find(_ ids: [UUID], logger: Logger) async throws -> [UUID: Asset] {
        guard !ids.isEmpty else { return [:] }
        return try await store.withConnection { connection in
            let rows = try await connection.query("""
                SELECT asset_id, container, environment, scope, owner, zone_name, record_name, record_type, field_name, state, size,
                       file_checksum, created_at, bound, coalesce(blob_id, asset_id)
                FROM assets WHERE asset_id = ANY(\(ids))
                """, logger: logger)
            var found: [UUID: Asset] = [:]
            for try await row in rows.decode((UUID, String, String, String, String, String, String, String, String, String, Int64?, String?, Date, Bool, UUID).self) {
                guard let environment = Environment(rawValue: row.2), let scope = DatabaseScope(rawValue: row.3) else { continue }
                found[row.0] = Asset(
                    id: row.0, database: DatabaseID(container: row.1, environment: environment, scope: scope, owner: row.4), zoneName: row.5,
                    recordName: row.6, recordType: row.7, fieldName: row.8, state: row.9, size: row.10, fileChecksum: row.11, createdAt: row.12,
                    bound: row.13, blobID: row.14)
            }
            return found
        }
    }

    /// `assets/rereference`: for each uploaded asset of `sources`, a new asset of `database` that
    /// shares its bytes (no copy) and is assigned to no record field yet; the first write that binds
    /// its receipt assigns it (`assign`). Each source row is read under a share lock, so the
    /// collector — which locks the row it collects and then counts the rows sharing its bytes — either
    /// sees the new row or has already marked the source `collecting` (then it is not re-referenced).
    /// Returns the new assets' values by source id; a source that is missing or being collected is absent.
    public func rereference(_ sources: [UUID], database: DatabaseID, logger: Logger) async throws -> [UUID: AssetValue] {
        guard !sources.isEmpty else { return [:] }
        return try await store.readCommitted(logger: logger) { transaction in
            let rows = try await transaction.connection.query("""
                SELECT asset_id, coalesce(blob_id, asset_id), record_type, size, file_checksum, usage_owner FROM assets
                WHERE asset_id = ANY(\(sources)) AND state = 'uploaded' AND size IS NOT NULL AND file_checksum IS NOT NULL
                ORDER BY asset_id FOR SHARE
                """, logger: transaction.logger)
            var found: [(id: UUID, blob: UUID, recordType: String, size: Int64, checksum: String, usageOwner: String?)] = []
            for try await row in rows.decode((UUID, UUID, String, Int64, String, String?).self) { found.append(row) }
            var made: [UUID: AssetValue] = [:]
            for source in found {
                let id = UUID()
                try await transaction.connection.query("""
                    INSERT INTO assets (asset_id, container, environment, scope, owner, zone_name, record_name, record_type, field_name, state,
                                        size, file_checksum, blob_id, usage_owner)
                    VALUES (\(id), \(database.container), \(database.environment.rawValue), \(database.scope.rawValue), \(database.owner),
                            '', '', \(source.recordType), '', 'uploaded', \(source.size), \(source.checksum), \(source.blob), \(source.usageOwner))
                    """, logger: transaction.logger)
                made[source.id] = AssetValue(receipt: AssetValue.receipt(id), size: source.size, fileChecksum: source.checksum)
            }
            return made
        }
    }

    /// Assigns an unassigned asset (made by `assets/rereference`) to the record field that binds it
    /// first; true when it is assigned to that field now (also when it was already), false when
    /// another field took it.
    public func assign(_ id: UUID, zoneName: String, recordName: String, fieldName: String, logger: Logger) async throws -> Bool {
        try await store.withConnection { connection in
            let rows = try await connection.query("""
                UPDATE assets SET zone_name = \(zoneName), record_name = \(recordName), field_name = \(fieldName)
                WHERE asset_id = \(id) AND state = 'uploaded'
                  AND (record_name = '' OR (zone_name = \(zoneName) AND record_name = \(recordName) AND field_name = \(fieldName)))
                RETURNING asset_id
                """, logger: logger)
            for try await _ in rows.decode(UUID.self) { return true }
            return false
        }
    }

    /// Assets that may be orphans: uploads never bound that started before `cutoff`, and assets
    /// every record released before `cutoff`. Both come from partial indexes that hold only such
    /// assets, so finding them costs nothing for the assets in use.
    public func collectionCandidates(before cutoff: Date, limit: Int, logger: Logger) async throws -> [UUID] {
        try await store.withConnection { connection in
            // Crosses owners: the collector's sweep of every owner's due rows (each node sweeps its own, when sharded).
            let rows = try await connection.query("""
                (SELECT asset_id FROM assets WHERE NOT bound AND created_at < \(cutoff) ORDER BY created_at LIMIT \(limit))
                UNION
                (SELECT asset_id FROM asset_references WHERE NOT referenced AND changed_at < \(cutoff) ORDER BY changed_at LIMIT \(limit))
                """, logger: logger)
            var ids: [UUID] = []
            for try await id in rows.decode(UUID.self) { ids.append(id) }
            return ids
        }
    }

    /// What the collector may do with a candidate.
    public enum Claim: Sendable, Equatable {
        /// Delete its bytes (stored under `blob`), then `forget` it.
        case collect(blob: UUID)
        /// Forget it but keep its bytes: another asset (`assets/rereference`) shares them.
        case release
        /// Its row is gone already (only its reference entry was left): nothing to delete.
        case forgotten
        /// Keep it: a record holds it, or it is not old or released long enough.
        case keep
    }

    /// Decides, under the asset row's lock, whether a candidate is an orphan: its upload began
    /// before `cutoff`; no record event references it, or the last released it before `cutoff`; and
    /// — checked against the records themselves, so a projection that is behind or being replayed
    /// cannot make a referenced asset look orphaned — its record does not hold its receipt. Marks
    /// it `collecting` (no write binds it after that).
    public func claim(_ id: UUID, before cutoff: Date, logger: Logger) async throws -> Claim {
        try await store.readCommitted(logger: logger) { transaction in
            // Crosses owners: an asset's reference entry found by the asset's id (the entry's zone is the
            // asset's, on the same node).
            let rows = try await transaction.connection.query("""
                SELECT a.container, a.environment, a.scope, a.owner, a.zone_name, a.record_name, a.created_at, a.bound,
                       r.referenced, r.changed_at
                FROM assets a LEFT JOIN asset_references r ON r.asset_id = a.asset_id
                WHERE a.asset_id = \(id) FOR UPDATE OF a
                """, logger: transaction.logger)
            var found: (String, String, String, String, String, String, Date, Bool, Bool?, Date?)?
            for try await row in rows.decode((String, String, String, String, String, String, Date, Bool, Bool?, Date?).self) { found = row }
            guard let row = found else {
                // Crosses owners: an asset's reference entry found by the asset's id (the entry's zone is the
                // asset's, on the same node).
                try await transaction.connection.query("DELETE FROM asset_references WHERE asset_id = \(id)", logger: transaction.logger)
                return .forgotten
            }
            guard row.6 < cutoff else { return .keep }
            if let referenced = row.8 {
                guard !referenced, let changed = row.9, changed < cutoff else { return .keep }
            } else if row.7 {
                // Bound, yet the projection has no entry: it is being rebuilt. Wait for it.
                return .keep
            }
            let receipt = AssetValue.receipt(id)
            let held = try await transaction.connection.query("""
                SELECT 1 FROM records
                WHERE container = \(row.0) AND environment = \(row.1) AND scope = \(row.2) AND owner = \(row.3) AND zone_name = \(row.4)
                  AND record_name = \(row.5) AND strpos(fields::text, \(receipt)) > 0
                """, logger: transaction.logger)
            for try await _ in held.decode(Int.self) { return .keep }
            try await transaction.connection.query("UPDATE assets SET state = 'collecting' WHERE asset_id = \(id)", logger: transaction.logger)
            // The bytes go with the last asset that holds them. A new sharer is made only from a row
            // that holds them under a share lock, and this row is now `collecting`: none can appear.
            var blob = id
            for try await shared in try await transaction.connection.query(
                "SELECT coalesce(blob_id, asset_id) FROM assets WHERE asset_id = \(id)", logger: transaction.logger
            ).decode(UUID.self) { blob = shared }
            let sharers = try await transaction.connection.query("""
                SELECT 1 FROM assets WHERE (asset_id = \(blob) OR blob_id = \(blob)) AND asset_id <> \(id) LIMIT 1
                """, logger: transaction.logger)
            for try await _ in sharers.decode(Int.self) { return .release }
            return .collect(blob: blob)
        }
    }

    /// Forgets a collected asset, once its bytes are deleted; `freeingBytes` (the bytes went with it,
    /// `Claim.collect`) gives them back to the user they counted against, in the same transaction as
    /// the row's removal, so a collector that forgets twice frees once.
    public func forget(_ id: UUID, freeingBytes: Bool, logger: Logger) async throws {
        try await store.readCommitted(logger: logger) { transaction in
            let rows = try await transaction.connection.query(
                "DELETE FROM assets WHERE asset_id = \(id) RETURNING container, environment, usage_owner, size", logger: transaction.logger)
            var gone: (String, String, String?, Int64?)?
            for try await row in rows.decode((String, String, String?, Int64?).self) { gone = row }
            // Crosses owners: an asset's reference entry found by the asset's id (the entry's zone is the
            // asset's, on the same node).
            try await transaction.connection.query("DELETE FROM asset_references WHERE asset_id = \(id)", logger: transaction.logger)
            if freeingBytes, case let (container, environment, owner?, size?)? = gone {
                try await StorageUsage.addAsset(-size, container: container, environment: environment, owner: owner, in: transaction)
            }
        }
    }
}
