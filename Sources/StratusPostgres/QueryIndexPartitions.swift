import Foundation
import Logging
import PostgresNIO
import StratusCore

/// The storage of the query index's generations (migration 0052): `query_index.records` is
/// partitioned by generation. A rebuild's generation gets a partition holding only the primary key
/// while it is loaded; its other indexes are built once the load is done, and a retired
/// generation's partition is dropped rather than emptied row by row. The default partition holds the
/// generations from before the migration, and any row written for a generation whose partition has
/// gone (a writer whose snapshot predates a swap); a swap deletes the retired generations' rows there.
enum QueryIndexPartitions {
    /// The partition that holds every generation without one of its own.
    static let defaultPartition = "records_default"

    /// The partition of `generation` (in the `query_index` schema).
    static func partition(of generation: Int) -> String { "records_g\(generation)" }

    /// The longest a partition's creation or drop waits for its locks before trying again: both
    /// take the whole index's strongest lock, which queries queue behind while it waits.
    static let lockWait = 200
    /// How often a drop is tried before it is left to the next swap.
    static let dropAttempts = 25

    /// Creates `generation`'s partition, holding only the primary key, in the transaction that
    /// begins the generation (so the live indexer's first write to it lands there). A row of the
    /// same generation number in the default partition (a stray of an abandoned generation) goes
    /// first: attaching checks that the default partition holds none.
    static func create(_ generation: Int, in transaction: Transaction) async throws {
        let name = partition(of: generation)
        try await transaction.connection.query(PostgresQuery(unsafeSQL: "SET LOCAL lock_timeout = \(lockWait)"), logger: transaction.logger)
        try await transaction.connection.query(
            "DELETE FROM query_index.records_default WHERE generation = \(generation)", logger: transaction.logger)
        try await transaction.connection.query(PostgresQuery(unsafeSQL: """
            CREATE TABLE query_index.\(name) (LIKE query_index.records INCLUDING DEFAULTS)
            """), logger: transaction.logger)
        try await transaction.connection.query(PostgresQuery(unsafeSQL: """
            ALTER TABLE query_index.records ATTACH PARTITION query_index.\(name) FOR VALUES IN (\(generation))
            """), logger: transaction.logger)
    }

    /// The indexes every generation's partition has besides its key (what migrations 0005, 0027
    /// and 0050 made on the table before it was partitioned): each one's name (after the partition)
    /// and the statement that builds it on the partition without holding writes back.
    static func indexes(of generation: Int) -> [(name: String, statement: String)] {
        let table = partition(of: generation)
        let zoneOrder = "(generation, container, environment, scope, owner, record_type, zone_name"
        let definitions = [
            // The two GIN indexes merge their pending list in small batches (migration 0050).
            ("search", "USING gin (search) WITH (gin_pending_list_limit = 256)"),
            ("fields", "USING gin ((record -> 'fields') jsonb_path_ops) WITH (gin_pending_list_limit = 256)"),
            ("modified", "\(zoneOrder), query_index.key(modified_at), query_index.key(zone_name), query_index.key(record_name)) WHERE NOT deleted"),
            ("created", "\(zoneOrder), query_index.key(created_at), query_index.key(zone_name), query_index.key(record_name)) WHERE NOT deleted"),
        ]
        return definitions.map { suffix, definition in
            let name = "\(table)_\(suffix)"
            return (name, "CREATE INDEX CONCURRENTLY IF NOT EXISTS \(name) ON query_index.\(table) \(definition)")
        }
    }

    /// Builds `generation`'s indexes once its load is done: the common ones, then every field index
    /// the catalog names (`QueryFieldIndexes`), each concurrently (the live indexer keeps writing
    /// the generation meanwhile), then its planner statistics, so its first query after the swap is
    /// planned on them. An index an interrupted build left invalid is built again.
    static func finish(_ generation: Int, store: PostgresStore, logger: Logger) async throws {
        try await store.withConnection { connection in
            // A build over a large index takes minutes: no statement or lock timeout for it. The
            // build sorts in memory up to `maintenance_work_mem`: more of it spills less.
            try await connection.query("SET statement_timeout = 0", logger: logger)
            try await connection.query("SET lock_timeout = 0", logger: logger)
            try await connection.query("SET maintenance_work_mem = '256MB'", logger: logger)
            do {
                for index in indexes(of: generation) {
                    try await QueryFieldIndexes.build(index.statement, named: index.name, on: connection, logger: logger)
                }
                let table = partition(of: generation)
                try await QueryFieldIndexes.buildCatalogued(on: table, connection: connection, logger: logger)
                try await connection.query(PostgresQuery(unsafeSQL: "ANALYZE query_index.\(table)"), logger: logger)
                try await reset(connection, logger: logger)
            } catch {
                try? await reset(connection, logger: logger)
                throw error
            }
        }
    }

    private static func reset(_ connection: PostgresConnection, logger: Logger) async throws {
        try await connection.query("RESET statement_timeout", logger: logger)
        try await connection.query("RESET lock_timeout", logger: logger)
        try await connection.query("RESET maintenance_work_mem", logger: logger)
    }

    /// Drops the partitions of the generations that are neither live nor being built, and deletes
    /// their rows from the default partition. A drop that cannot get its locks in time (a long query
    /// on the index) is tried again a while later, then left to the next swap or abandon.
    static func dropRetired(store: PostgresStore, logger: Logger) async throws {
        var attempt = 0
        while true {
            attempt += 1
            do {
                try await store.readCommitted(logger: logger) { transaction in
                    try await dropRetired(in: transaction)
                }
                return
            } catch let error as StratusError where error.code == .tryAgainLater && attempt < dropAttempts {
                logger.debug("a retired index generation's partition waits for its lock", metadata: ["attempt": "\(attempt)"])
                try await Task.sleep(for: .milliseconds(50 * min(attempt, 10)))
            }
        }
    }

    /// `dropRetired`'s work in one transaction (a replay's reset runs it in its own).
    static func dropRetired(in transaction: Transaction) async throws {
        // The default partition may hold a whole generation from before migration 0052: no
        // statement timeout for its deletion.
        try await transaction.connection.query(PostgresQuery(unsafeSQL: "SET LOCAL lock_timeout = \(lockWait)"), logger: transaction.logger)
        try await transaction.connection.query("SET LOCAL statement_timeout = 0", logger: transaction.logger)
        // The partitions of generations no longer served: retired ones and abandoned ones (whose
        // row is gone).
        let rows = try await transaction.connection.query("""
            SELECT c.relname::text FROM pg_inherits i
            JOIN pg_class c ON c.oid = i.inhrelid
            WHERE i.inhparent = 'query_index.records'::regclass AND c.relname ~ '^records_g[0-9]{1,9}$'
              AND substr(c.relname, 10)::int NOT IN (SELECT generation FROM query_index.generations WHERE state IN ('live', 'building'))
            ORDER BY c.relname
            """, logger: transaction.logger)
        var stale: [String] = []
        for try await name in rows.decode(String.self) { stale.append(name) }
        for name in stale {
            try await transaction.connection.query(PostgresQuery(unsafeSQL: "DROP TABLE query_index.\(name)"), logger: transaction.logger)
        }
        // Crosses owners: a rebuild's generation of the whole index (each node's, when sharded).
        try await transaction.connection.query("""
            DELETE FROM query_index.records_default
            WHERE generation NOT IN (SELECT generation FROM query_index.generations WHERE state IN ('live', 'building'))
            """, logger: transaction.logger)
    }
}
