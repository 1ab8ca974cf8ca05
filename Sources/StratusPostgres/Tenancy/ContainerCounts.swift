import Foundation
import Logging
import PostgresNIO
import StratusCore

/// What each container holds (`container_usage`, migration 0047): its records, custom zones, stored
/// bytes and asset bytes, kept by the writes themselves in their own transactions, for the
/// container-wide quotas (`ContainerQuota`) and the usage figures (`ContainerStore.usage`).
///
/// A transaction adds what it changed to the container's row of its `containerShard`: its usage
/// shard (`UsageShards`) within its process's slot. A process's transactions in flight together hold
/// distinct shards, so they never add to one row; two processes add to one only when they drew the
/// same slot and hold the same shard at once (then the later one retries, as with `storage_usage`).
/// Record writes add theirs inside the statements that already write the rows and `storage_usage`;
/// the totals are read only when a quota asks (docs/decisions.md, "Container-wide usage").
public enum ContainerCounts {
    /// Slots a process draws from: a container has at most `slots` × `StorageUsage.shards` rows.
    static let slots: Int16 = 8

    /// Adds `change` to the container's totals in `transaction`.
    static func add(_ change: ContainerTotals, container: String, in transaction: Transaction) async throws {
        guard !change.isZero else { return }
        try await transaction.connection.query("""
            INSERT INTO container_usage (container, shard, records, zones, bytes, asset_bytes)
            VALUES (\(container), \(transaction.containerShard), \(change.records), \(change.zones), \(change.bytes), \(change.assetBytes))
            ON CONFLICT (container, shard) DO UPDATE SET records = container_usage.records + EXCLUDED.records,
                zones = container_usage.zones + EXCLUDED.zones, bytes = container_usage.bytes + EXCLUDED.bytes,
                asset_bytes = container_usage.asset_bytes + EXCLUDED.asset_bytes
            """, logger: transaction.logger)
    }

    /// The conflict clause of an insert into `container_usage` that adds records and bytes (the
    /// writable CTE of a record write's statement).
    static let addRecordsAndBytes = """
        ON CONFLICT (container, shard) DO UPDATE SET records = container_usage.records + EXCLUDED.records, bytes = container_usage.bytes + EXCLUDED.bytes
        """

    /// The container's totals, as the transaction of `connection` sees them.
    public static func totals(container: String, on connection: PostgresConnection, logger: Logger) async throws -> ContainerTotals {
        let rows = try await connection.query("""
            SELECT coalesce(sum(records), 0)::int8, coalesce(sum(zones), 0)::int8, coalesce(sum(bytes), 0)::int8, coalesce(sum(asset_bytes), 0)::int8
            FROM container_usage WHERE container = \(container)
            """, logger: logger)
        for try await (records, zones, bytes, assetBytes) in rows.decode((Int64, Int64, Int64, Int64).self) {
            return ContainerTotals(records: records, zones: zones, bytes: bytes, assetBytes: assetBytes)
        }
        return ContainerTotals()
    }
}
