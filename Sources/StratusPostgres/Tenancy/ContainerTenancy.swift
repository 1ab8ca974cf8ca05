import Foundation
import Logging
import PostgresNIO
import StratusCore

/// A container as a tenant: its state and what it holds (`stratus container list`, the console).
public struct ContainerUsage: Sendable, Equatable {
    /// The container identifier.
    public var container: String
    /// When it was created.
    public var createdAt: Date
    /// When an operator suspended it; nil while it serves.
    public var suspendedAt: Date?
    /// When its deletion started (`ContainerDeletion`); nil unless it is being deleted.
    public var deletingAt: Date? = nil
    /// Users in its directory.
    public var users: Int64
    /// Live custom zones, every database and environment (`container_usage`, as its quota counts them).
    public var zones: Int64
    /// Records, every database and environment (`container_usage`).
    public var records: Int64
    /// Bytes its records and assets count against the users' and the container's quotas (`container_usage`).
    public var recordBytes: Int64
    /// Asset uploads, and the bytes of those stored (`container_usage`).
    public var assets: Int64
    public var assetBytes: Int64
    /// Subscriptions, every database and environment.
    public var subscriptions: Int64
}

extension ContainerStore {
    /// Suspends (`true`) or resumes (`false`) a container; returns false when there is no such
    /// container. A suspension is noticed by every API process at once (migration 0039's trigger
    /// notifies `stratus_access`); suspending a suspended container keeps its first time.
    @discardableResult
    public func setSuspended(container: String, _ suspended: Bool, logger: Logger) async throws -> Bool {
        try await store.withConnection { connection in
            let rows = try await connection.query("""
                UPDATE containers SET suspended_at = CASE WHEN \(suspended) THEN coalesce(suspended_at, now()) END
                WHERE container = \(container) RETURNING 1
                """, logger: logger)
            for try await _ in rows { return true }
            return false
        }
    }

    /// Whether an operator suspended the container, or is deleting it (false for one that does not exist).
    public func isSuspended(container: String, logger: Logger) async throws -> Bool {
        try await store.withConnection { connection in
            let rows = try await connection.query(
                "SELECT suspended_at IS NOT NULL OR deleting_at IS NOT NULL FROM containers WHERE container = \(container)", logger: logger)
            for try await suspended in rows.decode(Bool.self) { return suspended }
            return false
        }
    }

    /// The containers (at most `limit`, by identifier from after `after`) with what each holds.
    /// Zones, records and bytes are `container_usage`'s sums (what the quotas check); users, assets and
    /// subscriptions are counted when asked, for an operator's listing.
    public func usage(of only: String? = nil, after: String? = nil, limit: Int = 100, logger: Logger) async throws -> [ContainerUsage] {
        try await store.withConnection { connection in
            // Indexed counts per container of the page; the assets (kept by id) in one pass for the page.
            // Crosses owners: an operator's figures over a whole container or all of them (asked of every node, when sharded).
            let rows = try await connection.query("""
                WITH page AS (
                    SELECT container, created_at, suspended_at, deleting_at FROM containers
                    WHERE (\(only)::text IS NULL OR container = \(only)) AND (\(after)::text IS NULL OR container > \(after))
                    ORDER BY container
                    LIMIT \(Int64(max(1, min(limit, 1000))))),
                held AS (
                    SELECT a.container, count(*) AS assets FROM assets AS a JOIN page USING (container) GROUP BY a.container),
                counted AS (
                    SELECT u.container, sum(u.records)::bigint AS records, sum(u.zones)::bigint AS zones, sum(u.bytes)::bigint AS bytes,
                           sum(u.asset_bytes)::bigint AS asset_bytes
                    FROM container_usage AS u JOIN page USING (container) GROUP BY u.container)
                SELECT c.container, c.created_at, c.suspended_at, c.deleting_at,
                       (SELECT count(*) FROM users AS u WHERE u.container = c.container),
                       coalesce(counted.zones, 0), coalesce(counted.records, 0), coalesce(counted.bytes, 0),
                       coalesce(held.assets, 0), coalesce(counted.asset_bytes, 0),
                       (SELECT count(*) FROM subscriptions AS s WHERE s.container = c.container)
                FROM page AS c LEFT JOIN held USING (container) LEFT JOIN counted USING (container)
                ORDER BY c.container
                """, logger: logger)
            var found: [ContainerUsage] = []
            for try await (container, created, suspended, deleting, users, zones, records, recordBytes, assets, assetBytes, subscriptions)
                in rows.decode((String, Date, Date?, Date?, Int64, Int64, Int64, Int64, Int64, Int64, Int64).self) {
                found.append(ContainerUsage(
                    container: container, createdAt: created, suspendedAt: suspended, deletingAt: deleting, users: users, zones: zones, records: records,
                    recordBytes: recordBytes, assets: assets, assetBytes: assetBytes, subscriptions: subscriptions))
            }
            return found
        }
    }
}

/// A container's own limits as its row of `containers` holds them (migration 0040).
enum ContainerLimitsRow {
    /// The columns, of `containers` as `c`, in the order `limits` takes them.
    static let columns =
        "c.request_rate, c.request_burst, c.user_request_rate, c.user_request_burst, c.user_quota_bytes, c.max_subscriptions_per_user, "
        + "c.max_records, c.max_zones, c.quota_bytes, c.asset_quota_bytes"

    /// The columns' types, in order.
    typealias Columns = (Double?, Double?, Double?, Double?, Int64?, Int32?, Int64?, Int64?, Int64?, Int64?)

    /// The limits from the columns' values.
    static func limits(_ row: Columns) -> ContainerLimits {
        ContainerLimits(
            requestRate: row.0, requestBurst: row.1, userRequestRate: row.2, userRequestBurst: row.3, userQuotaBytes: row.4,
            maxSubscriptionsPerUser: row.5.map(Int.init), maxRecords: row.6, maxZones: row.7, quotaBytes: row.8, assetQuotaBytes: row.9)
    }
}

extension ContainerStore {
    /// A container's own limits; nil when there is no such container.
    public func limits(of container: String, logger: Logger) async throws -> ContainerLimits? {
        try await store.withConnection { connection in
            let rows = try await connection.query(
                "SELECT \(unescaped: ContainerLimitsRow.columns) FROM containers AS c WHERE c.container = \(container)", logger: logger)
            for try await row in rows.decode(ContainerLimitsRow.Columns.self) { return ContainerLimitsRow.limits(row) }
            return nil
        }
    }

    /// Replaces a container's own limits; returns false when there is no such container. Every API
    /// process reads them with its next request (migration 0040's trigger notifies `stratus_access`).
    @discardableResult
    public func setLimits(of container: String, _ limits: ContainerLimits, logger: Logger) async throws -> Bool {
        try await store.withConnection { connection in
            let rows = try await connection.query("""
                UPDATE containers SET request_rate = \(limits.requestRate), request_burst = \(limits.requestBurst),
                    user_request_rate = \(limits.userRequestRate), user_request_burst = \(limits.userRequestBurst),
                    user_quota_bytes = \(limits.userQuotaBytes), max_subscriptions_per_user = \(limits.maxSubscriptionsPerUser.map { Int32(clamping: $0) }),
                    max_records = \(limits.maxRecords), max_zones = \(limits.maxZones), quota_bytes = \(limits.quotaBytes),
                    asset_quota_bytes = \(limits.assetQuotaBytes)
                WHERE container = \(container) RETURNING 1
                """, logger: logger)
            for try await _ in rows { return true }
            return false
        }
    }
}

/// The shared request buckets (`request_buckets`, migration 0040): a container's, and each of its
/// users', shared by every API process, which lease tokens from them a slice at a time.
public struct RequestBuckets: Sendable {
    let store: PostgresStore

    /// Creates the bucket store.
    public init(store: PostgresStore) { self.store = store }

    /// Takes up to `wanted` whole tokens from the bucket of `container` (and of `user` in it, when
    /// given) that `perSecond` tokens flow into, holding at most `burst`: one statement. Returns how
    /// many were granted and, when fewer than wanted, the seconds until `wanted` will be there.
    public func lease(
        container: String, user: String?, perSecond: Double, burst: Double, wanted: Int, logger: Logger
    ) async throws -> (granted: Int, wait: Double) {
        let statements = store.statements
        return try await store.withConnection { connection in
            let rows = try await connection.query("""
                SELECT granted, wait FROM lease_request_tokens(\(container), \(user ?? ""), \(perSecond), \(burst), \(Double(wanted)))
                """, preparedIn: statements, logger: logger)
            for try await (granted, wait) in rows.decode((Double, Double).self) {
                return (Int(max(0, min(granted, Double(wanted)))), wait)
            }
            return (0, 1)
        }
    }
}
