import Foundation
import Logging
import PostgresNIO
import StratusCore
import Synchronization

/// The bytes each user stores, per container and environment (`storage_usage`, migration 0012),
/// kept by the writes themselves in their own transactions.
///
/// A record counts the length of its fields as stored (`octet_length(fields::text)`, which the
/// row keeps in `fields_bytes`, migration 0031: the `recordBytes` expression) against its owner,
/// in the public database against its creator (`usageOwner`). Each transaction adds what it
/// changed to one of `shards` rows of the user: the shard its process leased it for its whole run
/// (`UsageShards`), so no two transactions of one process in flight together update the same row
/// (under REPEATABLE READ two that did, one would retry). The total is the sum of the rows.
///
/// Assets count too (`assets.usage_owner`, migration 0024): the transaction that completes an
/// upload adds its bytes (`AssetStore.finishUpload`), the one that forgets the last asset holding
/// them takes them off (`AssetStore.forget`), so the quota check (`total`) covers them.
public enum StorageUsage {
    /// Rows per user: more than a process has transactions in flight (`STRATUS_DATABASE_MAX_CONNECTIONS`,
    /// 20 by default), so each can have its own.
    static let shards: Int16 = 64

    /// The SQL expression of a record row's counted bytes: the size written with the row, so a
    /// write no longer prints the fields of the row it replaces, and of its own, to count them.
    static let recordBytes = "fields_bytes"

    /// The SQL expression of whom a record row counts against: its creator in the public database,
    /// the database's owner elsewhere.
    static let usageOwner = "CASE WHEN scope = 'public' THEN created_by ELSE owner END"

    /// Adds `bytes` (negative: frees them) to `owner`'s total in `transaction`.
    static func add(_ bytes: Int64, container: String, environment: String, owner: String, in transaction: Transaction) async throws {
        guard bytes != 0 else { return }
        try await transaction.connection.query("""
            INSERT INTO storage_usage (container, environment, owner, shard, bytes)
            VALUES (\(container), \(environment), \(owner), \(transaction.usageShard), \(bytes))
            ON CONFLICT (container, environment, owner, shard) DO UPDATE SET bytes = storage_usage.bytes + EXCLUDED.bytes
            """, logger: transaction.logger)
    }

    /// Adds an asset's `bytes` (negative: frees them) to `owner`'s total and to the container's
    /// stored and asset bytes (`ContainerCounts`) in `transaction`.
    static func addAsset(_ bytes: Int64, container: String, environment: String, owner: String, in transaction: Transaction) async throws {
        try await add(bytes, container: container, environment: environment, owner: owner, in: transaction)
        try await ContainerCounts.add(ContainerTotals(bytes: bytes, assetBytes: bytes), container: container, in: transaction)
    }

    /// `owner`'s total bytes, as the transaction of `connection` sees them.
    public static func total(container: String, environment: String, owner: String, on connection: PostgresConnection, logger: Logger) async throws -> Int64 {
        let rows = try await connection.query("""
            SELECT coalesce(sum(bytes), 0)::int8 FROM storage_usage
            WHERE container = \(container) AND environment = \(environment) AND owner = \(owner)
            """, logger: logger)
        for try await total in rows.decode(Int64.self) { return total }
        return 0
    }

    /// Deletes a zone's records and frees their bytes, in one statement, and takes them and the
    /// zone off the container's counts (`ContainerCounts`).
    static func deleteZone(of database: DatabaseID, zoneName: String, in transaction: Transaction) async throws {
        try await transaction.connection.query("""
            WITH gone AS (
                DELETE FROM records WHERE container = \(database.container) AND environment = \(database.environment.rawValue)
                  AND scope = \(database.scope.rawValue) AND owner = \(database.owner) AND zone_name = \(zoneName)
                RETURNING \(unescaped: usageOwner) AS usage_owner, \(unescaped: recordBytes) AS bytes),
            tallied AS (
                INSERT INTO container_usage (container, shard, records, zones, bytes)
                SELECT \(database.container), \(transaction.containerShard), -count(*), -1, -coalesce(sum(bytes), 0) FROM gone
                ON CONFLICT (container, shard) DO UPDATE SET records = container_usage.records + EXCLUDED.records,
                    zones = container_usage.zones + EXCLUDED.zones, bytes = container_usage.bytes + EXCLUDED.bytes)
            INSERT INTO storage_usage (container, environment, owner, shard, bytes)
            SELECT \(database.container), \(database.environment.rawValue), usage_owner, \(transaction.usageShard), -sum(bytes) FROM gone
            GROUP BY usage_owner HAVING sum(bytes) <> 0
            ON CONFLICT (container, environment, owner, shard) DO UPDATE SET bytes = storage_usage.bytes + EXCLUDED.bytes
            """, logger: transaction.logger)
    }
}

/// The `storage_usage` shards of one process, each leased to one transaction at a time.
///
/// A transaction takes a free shard when it starts and gives it back when it ends, so while no more
/// than `StorageUsage.shards` run at once (a process runs at most as many as its pool has
/// connections) no two of them add to the same row of a user, and none waits on another's row or
/// fails for it. Each process starts from its own random order of the shards and reuses the one
/// given back last, so the processes of a deployment (several `stratus-api`, `stratus-gc`) seldom
/// pick the same shard at the same moment; when they do, the later one retries as before. Past
/// `shards` transactions at once, a transaction gets a random shard.
final class UsageShards: Sendable {
    private let free: Mutex<[Int16]>
    /// This process's slot among `ContainerCounts.slots`: the container's rows it adds to.
    let slot = Int16.random(in: 0..<ContainerCounts.slots)

    /// The `container_usage` row of a transaction holding `shard`: the shard within this process's
    /// slot, so transactions of one process never share a container's row while they hold distinct
    /// shards, and two processes share one only when they drew the same slot.
    func containerShard(_ shard: Int16) -> Int16 { slot * StorageUsage.shards + shard }

    init() {
        free = Mutex(Array(0..<StorageUsage.shards).shuffled())
    }

    /// Runs `body` with a shard no other transaction of this process holds (while one is free).
    func withShard<T>(_ body: (Int16) async throws -> T) async throws -> T {
        let leased = free.withLock { $0.popLast() }
        defer { if let leased { free.withLock { $0.append(leased) } } }
        return try await body(leased ?? Int16.random(in: 0..<StorageUsage.shards))
    }
}
