import Foundation
import Logging
import PostgresNIO
import StratusCore

/// The bytes each user stores, per container and environment (`storage_usage`, migration 0012),
/// kept by the writes themselves in their own transactions.
///
/// A record counts the length of its fields as stored (`octet_length(fields::text)`, the
/// `recordBytes` expression) against its owner, in the public database against its creator
/// (`usageOwner`). Each transaction adds what it changed to one of `shards` rows of the user,
/// picked at random, so concurrent writers of one user seldom update the same row (under
/// REPEATABLE READ two that do, one retries); the total is the sum of the rows.
///
/// Assets count too (`assets.usage_owner`, migration 0024): the transaction that completes an
/// upload adds its bytes (`AssetStore.finishUpload`), the one that forgets the last asset holding
/// them takes them off (`AssetStore.forget`), so the quota check (`total`) covers them.
public enum StorageUsage {
    /// Rows per user.
    static let shards: Int16 = 16

    /// The SQL expression of a record row's counted bytes.
    static let recordBytes = "octet_length(fields::text)::int8"

    /// The SQL expression of whom a record row counts against: its creator in the public database,
    /// the database's owner elsewhere.
    static let usageOwner = "CASE WHEN scope = 'public' THEN created_by ELSE owner END"

    /// A shard for one transaction.
    static func randomShard() -> Int16 { Int16.random(in: 0..<shards) }

    /// Adds `bytes` (negative: frees them) to `owner`'s total in the transaction of `connection`.
    public static func add(
        _ bytes: Int64, container: String, environment: String, owner: String, on connection: PostgresConnection, logger: Logger
    ) async throws {
        guard bytes != 0 else { return }
        try await connection.query("""
            INSERT INTO storage_usage (container, environment, owner, shard, bytes)
            VALUES (\(container), \(environment), \(owner), \(randomShard()), \(bytes))
            ON CONFLICT (container, environment, owner, shard) DO UPDATE SET bytes = storage_usage.bytes + EXCLUDED.bytes
            """, logger: logger)
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

    /// Deletes a zone's records and frees their bytes, in one statement.
    static func deleteRecords(of database: DatabaseID, zoneName: String, on connection: PostgresConnection, logger: Logger) async throws {
        try await connection.query("""
            WITH gone AS (
                DELETE FROM records WHERE container = \(database.container) AND environment = \(database.environment.rawValue)
                  AND scope = \(database.scope.rawValue) AND owner = \(database.owner) AND zone_name = \(zoneName)
                RETURNING \(unescaped: usageOwner) AS usage_owner, \(unescaped: recordBytes) AS bytes)
            INSERT INTO storage_usage (container, environment, owner, shard, bytes)
            SELECT \(database.container), \(database.environment.rawValue), usage_owner, \(randomShard()), -sum(bytes) FROM gone
            GROUP BY usage_owner HAVING sum(bytes) <> 0
            ON CONFLICT (container, environment, owner, shard) DO UPDATE SET bytes = storage_usage.bytes + EXCLUDED.bytes
            """, logger: logger)
    }
}
