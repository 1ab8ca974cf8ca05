import Foundation
import Logging
import PostgresNIO
import StratusCore

/// The field indexes of the query index (migration 0019, docs/query-index.md "Field indexes"): per
/// container and environment, one partial B-tree on each generation's partition of
/// `query_index.records` (migration 0052) for every QUERYABLE or
/// SORTABLE scalar field the schema declares, over the very expression `records/query` sorts by, so
/// a field range with a sort by that field reads one page of the index.
///
/// They are built outside any transaction (`CREATE INDEX CONCURRENTLY`: saves, the indexer and
/// queries go on meanwhile), by the operator's schema commands rather than by saves, so a save that
/// grows development's schema never waits for an index to be built.
public struct QueryFieldIndexes: Sendable {
    let store: PostgresStore

    /// Creates the field index manager.
    public init(store: PostgresStore) { self.store = store }

    /// One field index, as the catalog names it.
    public struct FieldIndex: Sendable, Hashable, CustomStringConvertible {
        /// The record type.
        public var recordType: String
        /// The field.
        public var fieldName: String
        /// The PostgreSQL index, in the `query_index` schema.
        public var indexName: String

        public var description: String { "\(recordType).\(fieldName) (\(indexName))" }
    }

    /// What `ensure` changed.
    public struct Changes: Sendable, Hashable {
        /// Indexes built (or rebuilt, when an earlier build was interrupted).
        public var built: [FieldIndex] = []
        /// Indexes dropped because the schema no longer asks for them.
        public var dropped: [FieldIndex] = []
        /// Indexes that were already there.
        public var kept: [FieldIndex] = []
    }

    /// The field types a B-tree on the sort expression serves: single values that order (strings,
    /// numbers, times). Lists are answered by the GIN index on the fields, locations by distance,
    /// references by containment.
    static let indexedTypes = ["STRING", "INT64", "DOUBLE", "TIMESTAMP", "NUMBER PREFERRED AS INT64", "NUMBER PREFERRED AS DOUBLE"]

    /// Makes the environment's field indexes what its schema asks for: builds the missing ones (and
    /// any an interrupted build left invalid), drops those of fields no longer QUERYABLE or SORTABLE.
    /// One container's indexes are changed by one caller at a time.
    public func ensure(container: String, environment: Environment, logger: Logger) async throws -> Changes {
        try await store.withConnection { connection in
            let lock = Self.lockName(container: container, environment: environment)
            // An index build may take minutes on a large container: no statement or lock timeout
            // for this session's statements (CREATE INDEX CONCURRENTLY waits for older transactions).
            try await connection.query("SET statement_timeout = 0", logger: logger)
            try await connection.query("SET lock_timeout = 0", logger: logger)
            try await connection.query("SELECT pg_advisory_lock(hashtextextended(\(lock), 0))", logger: logger)
            do {
                let changes = try await Self.ensure(container: container, environment: environment, on: connection, logger: logger)
                try await Self.release(lock, on: connection, logger: logger)
                return changes
            } catch {
                try? await Self.release(lock, on: connection, logger: logger)
                throw error
            }
        }
    }

    /// The environment's field indexes, as the catalog lists them.
    public func list(container: String, environment: Environment, logger: Logger) async throws -> [FieldIndex] {
        try await store.withConnection { connection in
            try await Self.catalog(container: container, environment: environment, on: connection, logger: logger)
        }
    }

    private static func release(_ lock: String, on connection: PostgresConnection, logger: Logger) async throws {
        try await connection.query("SELECT pg_advisory_unlock(hashtextextended(\(lock), 0))", logger: logger)
        try await connection.query("RESET statement_timeout", logger: logger)
        try await connection.query("RESET lock_timeout", logger: logger)
    }

    private static func ensure(container: String, environment: Environment, on connection: PostgresConnection, logger: Logger) async throws -> Changes {
        // What the schema asks for, each with its index's name: a digest of the four names, so it
        // fits PostgreSQL's 63-byte identifiers whatever the names are.
        let rows = try await connection.query("""
            SELECT record_type, field_name, 'query_field_' || left(md5(container || chr(1) || environment || chr(1) || record_type || chr(1) || field_name), 24)
            FROM schema_fields
            WHERE container = \(container) AND environment = \(environment.rawValue)
              AND (queryable OR sortable) AND field_type = ANY(\(indexedTypes)) AND field_name NOT LIKE '\\_\\_\\_%'
            ORDER BY record_type, field_name
            """, logger: logger)
        var wanted: [FieldIndex] = []
        for try await (type, field, name) in rows.decode((String, String, String).self) {
            wanted.append(FieldIndex(recordType: type, fieldName: field, indexName: name))
        }
        let existing = try await catalog(container: container, environment: environment, on: connection, logger: logger)
        // Every generation's partition has each field index of its own (migration 0052).
        let partitions = try await partitions(on: connection, logger: logger)
        var changes = Changes()
        for index in existing where !wanted.contains(index) {
            for partition in partitions {
                let name = Self.name(of: index, on: partition)
                try await connection.query(PostgresQuery(unsafeSQL: "DROP INDEX CONCURRENTLY IF EXISTS query_index.\(quoted(name))"), logger: logger)
            }
            try await connection.query("""
                DELETE FROM query_index.field_indexes
                WHERE container = \(container) AND environment = \(environment.rawValue) AND record_type = \(index.recordType) AND field_name = \(index.fieldName)
                """, logger: logger)
            changes.dropped.append(index)
        }
        for index in wanted {
            // The catalog row first: an interrupted build is then found and finished by the next run.
            try await connection.query("""
                INSERT INTO query_index.field_indexes (container, environment, record_type, field_name, index_name)
                VALUES (\(container), \(environment.rawValue), \(index.recordType), \(index.fieldName), \(index.indexName))
                ON CONFLICT DO NOTHING
                """, logger: logger)
            var built = false
            for partition in partitions {
                let definition = try await self.definition(index, container: container, environment: environment, on: partition, connection: connection, logger: logger)
                if try await build(definition, named: name(of: index, on: partition), on: connection, logger: logger) {
                    logger.info("built a field index", metadata: [
                        "container": "\(container)", "environment": "\(environment.rawValue)", "index": "\(index)", "partition": "\(partition)"])
                    built = true
                }
            }
            if built { changes.built.append(index) } else { changes.kept.append(index) }
        }
        return changes
    }

    /// Builds the index `definition` (a `CREATE INDEX CONCURRENTLY IF NOT EXISTS` of the index
    /// `name`) unless it is there and valid; an index an interrupted concurrent build left invalid
    /// costs writes and serves no query, so it is dropped and built again. True when it built.
    @discardableResult
    static func build(_ definition: String, named name: String, on connection: PostgresConnection, logger: Logger) async throws -> Bool {
        switch try await validity(of: name, on: connection, logger: logger) {
        case true?:
            return false
        case false?:
            try await connection.query(PostgresQuery(unsafeSQL: "DROP INDEX CONCURRENTLY IF EXISTS query_index.\(quoted(name))"), logger: logger)
        case nil:
            break
        }
        try await connection.query(PostgresQuery(unsafeSQL: definition), logger: logger)
        return true
    }

    /// Builds every field index the catalog names on one generation's partition (a rebuild's, once
    /// its load is done), each container and environment under the lock `ensure` takes, so a
    /// schema change meanwhile neither misses the new partition nor leaves an index behind on it.
    static func buildCatalogued(on partition: String, connection: PostgresConnection, logger: Logger) async throws {
        let rows = try await connection.query(
            "SELECT DISTINCT container, environment FROM query_index.field_indexes ORDER BY container, environment", logger: logger)
        var environments: [(String, String)] = []
        for try await pair in rows.decode((String, String).self) { environments.append(pair) }
        for (container, environmentName) in environments {
            guard let environment = Environment(rawValue: environmentName) else { continue }
            let lock = lockName(container: container, environment: environment)
            try await connection.query("SELECT pg_advisory_lock(hashtextextended(\(lock), 0))", logger: logger)
            do {
                for index in try await catalog(container: container, environment: environment, on: connection, logger: logger) {
                    let definition = try await self.definition(index, container: container, environment: environment, on: partition, connection: connection, logger: logger)
                    try await build(definition, named: name(of: index, on: partition), on: connection, logger: logger)
                }
                try await connection.query("SELECT pg_advisory_unlock(hashtextextended(\(lock), 0))", logger: logger)
            } catch {
                try? await connection.query("SELECT pg_advisory_unlock(hashtextextended(\(lock), 0))", logger: logger)
                throw error
            }
        }
    }

    /// The lock that lets one caller at a time change an environment's field indexes.
    static func lockName(container: String, environment: Environment) -> String {
        "query-field-indexes/\(container)/\(environment.rawValue)"
    }

    /// The partitions of the query index, the default one first.
    private static func partitions(on connection: PostgresConnection, logger: Logger) async throws -> [String] {
        let rows = try await connection.query("""
            SELECT c.relname::text FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
            WHERE i.inhparent = 'query_index.records'::regclass
            ORDER BY c.relname <> \(QueryIndexPartitions.defaultPartition), c.relname
            """, logger: logger)
        var names: [String] = []
        for try await name in rows.decode(String.self) { names.append(name) }
        return names
    }

    /// A field index's name on a partition: the catalog's name on the default partition (where the
    /// indexes built before migration 0052 are), with the partition's generation after it elsewhere.
    static func name(of index: FieldIndex, on partition: String) -> String {
        guard partition != QueryIndexPartitions.defaultPartition, partition.hasPrefix("records_") else { return index.indexName }
        return index.indexName + "_" + partition.dropFirst("records_".count)
    }

    /// The statement that builds a field index. The key is the expression `records/query` sorts by
    /// (`QueryStore.sortExpression`), after the columns a zone's query fixes, then the tie breakers
    /// in the order the query adds them: a zone's range and sort become one index range read in
    /// order. Names are quoted by PostgreSQL itself (`format` with `%L`), never spliced.
    private static func definition(
        _ index: FieldIndex, container: String, environment: Environment, on partition: String, connection: PostgresConnection, logger: Logger
    ) async throws -> String {
        let rows = try await connection.query("""
            SELECT format('CREATE INDEX CONCURRENTLY IF NOT EXISTS %I ON query_index.%I '
                || '(generation, scope, owner, zone_name, coalesce(record -> ''fields'' -> %L -> ''value'', ''null''::jsonb), '
                || 'query_index.key(zone_name), query_index.key(record_name)) '
                || 'WHERE NOT deleted AND container = %L AND environment = %L AND record_type = %L',
                \(name(of: index, on: partition))::text, \(partition)::text, \(index.fieldName)::text, \(container)::text,
                \(environment.rawValue)::text, \(index.recordType)::text)
            """, logger: logger)
        for try await text in rows.decode(String.self) { return text }
        throw StratusError(.internalError, "the field index statement for \(index) could not be formed")
    }

    /// Whether the index exists and is valid; nil when it does not exist.
    static func validity(of name: String, on connection: PostgresConnection, logger: Logger) async throws -> Bool? {
        let rows = try await connection.query("""
            SELECT i.indisvalid AND i.indisready FROM pg_class c
            JOIN pg_namespace n ON n.oid = c.relnamespace
            JOIN pg_index i ON i.indexrelid = c.oid
            WHERE n.nspname = 'query_index' AND c.relname = \(name)
            """, logger: logger)
        for try await valid in rows.decode(Bool.self) { return valid }
        return nil
    }

    static func catalog(container: String, environment: Environment, on connection: PostgresConnection, logger: Logger) async throws -> [FieldIndex] {
        let rows = try await connection.query("""
            SELECT record_type, field_name, index_name FROM query_index.field_indexes
            WHERE container = \(container) AND environment = \(environment.rawValue)
            ORDER BY record_type, field_name
            """, logger: logger)
        var indexes: [FieldIndex] = []
        for try await (type, field, name) in rows.decode((String, String, String).self) {
            indexes.append(FieldIndex(recordType: type, fieldName: field, indexName: name))
        }
        return indexes
    }

    /// An index name as an identifier. The names are ours (`query_field_` and hex digits), so quoting
    /// is only a second line of defence.
    static func quoted(_ name: String) -> String {
        "\"" + name.replacingOccurrences(of: "\"", with: "\"\"") + "\""
    }
}
