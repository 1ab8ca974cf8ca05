import Foundation
import Logging
import PostgresNIO
import StratusCore

/// The field indexes of the query index (migration 0019, docs/query-index.md "Field indexes"): per
/// container and environment, one partial B-tree on `query_index.records` for every QUERYABLE or
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
            let lock = "query-field-indexes/\(container)/\(environment.rawValue)"
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
        var changes = Changes()
        for index in existing where !wanted.contains(index) {
            try await connection.query(PostgresQuery(unsafeSQL: "DROP INDEX CONCURRENTLY IF EXISTS query_index.\(quoted(index.indexName))"), logger: logger)
            try await connection.query("""
                DELETE FROM query_index.field_indexes
                WHERE container = \(container) AND environment = \(environment.rawValue) AND record_type = \(index.recordType) AND field_name = \(index.fieldName)
                """, logger: logger)
            changes.dropped.append(index)
        }
        for index in wanted {
            switch try await validity(of: index.indexName, on: connection, logger: logger) {
            case true?:
                changes.kept.append(index)
                continue
            case false?:
                // An interrupted CONCURRENTLY build leaves an invalid index behind: it costs writes and
                // serves no query. Build it again.
                try await connection.query(PostgresQuery(unsafeSQL: "DROP INDEX CONCURRENTLY IF EXISTS query_index.\(quoted(index.indexName))"), logger: logger)
            case nil:
                break
            }
            // The catalog row first: an interrupted build is then found and finished by the next run.
            try await connection.query("""
                INSERT INTO query_index.field_indexes (container, environment, record_type, field_name, index_name)
                VALUES (\(container), \(environment.rawValue), \(index.recordType), \(index.fieldName), \(index.indexName))
                ON CONFLICT DO NOTHING
                """, logger: logger)
            let definition = try await self.definition(index, container: container, environment: environment, on: connection, logger: logger)
            logger.info("building a field index", metadata: ["container": "\(container)", "environment": "\(environment.rawValue)", "index": "\(index)"])
            try await connection.query(PostgresQuery(unsafeSQL: definition), logger: logger)
            // Its sort key's statistics would be computed at every analysis and never read: the
            // planner takes an expression's statistics only from an index without a predicate
            // (migration 0052, which did the same to the indexes built before it).
            let withoutStatistics = sortKeyColumns.map { "ALTER COLUMN \($0) SET STATISTICS 0" }.joined(separator: ", ")
            try await connection.query(
                PostgresQuery(unsafeSQL: "ALTER INDEX query_index.\(quoted(index.indexName)) \(withoutStatistics)"), logger: logger)
            changes.built.append(index)
        }
        return changes
    }

    /// The columns of a field index that `definition` makes its sort key: the field's value and the
    /// two tie breakers, after the four a zone's query fixes.
    static let sortKeyColumns = 5...7

    /// The statement that builds a field index. The key is the expression `records/query` sorts by
    /// (`QueryStore.sortExpression`), after the columns a zone's query fixes, then the tie breakers
    /// in the order the query adds them: a zone's range and sort become one index range read in
    /// order. Names are quoted by PostgreSQL itself (`format` with `%L`), never spliced.
    private static func definition(
        _ index: FieldIndex, container: String, environment: Environment, on connection: PostgresConnection, logger: Logger
    ) async throws -> String {
        let rows = try await connection.query("""
            SELECT format('CREATE INDEX CONCURRENTLY IF NOT EXISTS %I ON query_index.records '
                || '(generation, scope, owner, zone_name, coalesce(record -> ''fields'' -> %L -> ''value'', ''null''::jsonb), '
                || 'query_index.key(zone_name), query_index.key(record_name)) '
                || 'WHERE NOT deleted AND container = %L AND environment = %L AND record_type = %L',
                \(index.indexName)::text, \(index.fieldName)::text, \(container)::text, \(environment.rawValue)::text, \(index.recordType)::text)
            """, logger: logger)
        for try await text in rows.decode(String.self) { return text }
        throw StratusError(.internalError, "the field index statement for \(index) could not be formed")
    }

    /// Whether the index exists and is valid; nil when it does not exist.
    private static func validity(of name: String, on connection: PostgresConnection, logger: Logger) async throws -> Bool? {
        let rows = try await connection.query("""
            SELECT i.indisvalid AND i.indisready FROM pg_class c
            JOIN pg_namespace n ON n.oid = c.relnamespace
            JOIN pg_index i ON i.indexrelid = c.oid
            WHERE n.nspname = 'query_index' AND c.relname = \(name)
            """, logger: logger)
        for try await valid in rows.decode(Bool.self) { return valid }
        return nil
    }

    private static func catalog(container: String, environment: Environment, on connection: PostgresConnection, logger: Logger) async throws -> [FieldIndex] {
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
    private static func quoted(_ name: String) -> String {
        "\"" + name.replacingOccurrences(of: "\"", with: "\"\"") + "\""
    }
}
