import Foundation
import Logging
import PostgresNIO
import StratusConnections
import StratusCore

/// Runs `records/query` against the live generation of the query index.
public struct QueryStore: Sendable {
    let store: PostgresStore

    /// Creates the query store.
    public init(store: PostgresStore) { self.store = store }

    /// Where to look: one zone, or every zone of the database.
    public enum Scope: Sendable, Hashable {
        case zone(String)
        case allZones
    }

    /// A page of results.
    public struct Page: Sendable {
        /// Matching records as stored (their JSON text: `StoredRecordText`, `EventCoding.decodeRecord`),
        /// in query order.
        public var rows: [(zoneName: String, recordName: String, text: String)]
        /// The sort values of the last row, to continue after it; nil when there is nothing more.
        public var continuation: [JSONValue]?
        /// How many index-relevant events of the queried zone the indexer had yet to apply, read by
        /// the page's own statement (one custom zone, a page with rows); nil: ask `behind`.
        public var behind: Int64?

        /// The matching records, read.
        public var records: [(zoneName: String, record: Record)] {
            get throws { try rows.map { ($0.zoneName, try EventCoding.decodeRecord($0.text)) } }
        }
    }

    /// Runs a query. `after` continues after a previous page's last row (keyset paging: stable under
    /// concurrent writes). In the public database the record type's READ grants decide for `reader`
    /// (a user record name; nil for a caller with only the API token): a type no role of the reader's
    /// may read is refused with ACCESS_DENIED, and one it reads only as `_creator` yields only the
    /// reader's own records.
    ///
    /// `sharedWith`: the query runs for a participant in the shared database (`database` is the
    /// owner's): their access to the zone is read in the query's own snapshot, and records outside
    /// their hierarchies are left out of the page (which may then hold fewer than `limit`).
    public func run(
        _ query: RecordQuery, in database: DatabaseID, scope: Scope, limit: Int, after: [JSONValue]?, reader: String? = nil,
        sharedWith user: String? = nil, logger: Logger
    ) async throws -> Page {
        guard let user else {
            let statements = store.statements
            return try await store.withConnection { connection in
                var createdBy: String?
                if database.scope == .public {
                    let grants = try await SchemaStore.readGrants(
                        recordTypes: [query.recordType], reader: reader, database: database, on: connection, logger: logger)
                    switch grants.scope(of: query.recordType) {
                    case .all: break
                    case .own: createdBy = reader
                    case .none:
                        throw StratusError(.accessDenied,
                            "Record type '\(ClientText.excerpt(query.recordType))' cannot be queried: in the public database no security role this user holds has READ on it")
                    }
                }
                let statement = try await Self.statement(
                    query, in: database, scope: scope, limit: limit, after: after, createdBy: createdBy, on: connection, preparedIn: statements, logger: logger)
                return try await Self.page(statement, limit: limit, on: connection, preparedIn: statements, logger: logger)
            }
        }
        guard case .zone(let zoneName) = scope else {
            throw StratusError(.badRequest, "zoneWide queries are not available in the shared database: query one shared zone")
        }
        let statements = store.statements
        let statement = try await store.withConnection { connection in
            try await Self.statement(query, in: database, scope: scope, limit: limit, after: after, on: connection, preparedIn: statements, logger: logger)
        }
        return try await store.snapshot(logger: logger) { transaction in
            let shared = try await ShareStore.sharedZone(
                zoneName, owner: database.owner, user: user, container: database.container, environment: database.environment, on: transaction)
            var page = try await Self.page(statement, limit: limit, on: transaction.connection, preparedIn: statements, logger: transaction.logger)
            let reached = try await ShareStore.reachable(page.rows.map(\.recordName), in: shared, on: transaction)
            page.rows.removeAll { !reached.contains(ExactName($0.recordName)) }
            return page
        }
    }

    /// One page of a query's statement, prepared in `statements` when the statement says so
    /// (`Statement.prepared`).
    private static func page(
        _ statement: Statement, limit: Int, on connection: PostgresConnection, preparedIn statements: PreparedStatements, logger: Logger
    ) async throws -> Page {
        let rows = statement.prepared
            ? try await connection.query(statement.query, preparedIn: statements, logger: logger)
            : try await connection.query(statement.query, logger: logger).map { $0 }
        var results: [(zoneName: String, recordName: String, text: String)] = []
        var keys: [String] = []
        var behind: Int64?
        for try await row in rows {
            var cells = row.makeIterator()
            results.append((try cells.decodeNext(String.self), try cells.decodeNext(String.self), try cells.decodeNext(String.self)))
            keys.append(try cells.decodeNext(String.self))
            behind = try cells.decodeNext(Int64?.self)
        }
        let more = results.count > limit
        if more { results.removeLast(results.count - limit) }
        var continuation: [JSONValue]?
        if more, case .array(let values) = try EventCoding.decoder.decode(JSONValue.self, from: Data(keys[limit - 1].utf8)) {
            continuation = values
        }
        return Page(rows: results, continuation: continuation, behind: behind)
    }

    /// The plan PostgreSQL chooses for a query (`EXPLAIN`), for operators and the docs.
    public func explain(_ query: RecordQuery, in database: DatabaseID, scope: Scope, limit: Int, logger: Logger) async throws -> String {
        let statements = store.statements
        return try await store.withConnection { connection in
            let statement = try await Self.statement(
                query, in: database, scope: scope, limit: limit, after: nil, on: connection, preparedIn: statements, logger: logger)
            let rows = try await connection.query(PostgresQuery(unsafeSQL: "EXPLAIN " + statement.query.sql, binds: statement.query.binds), logger: logger)
            var lines: [String] = []
            for try await line in rows.decode(String.self) { lines.append(line) }
            return lines.joined(separator: "\n")
        }
    }

    /// A query's statement, and whether it runs prepared.
    struct Statement {
        var query: PostgresQuery
        /// A statement that reads a field index runs prepared (`statement`); every other one is
        /// parsed and planned at every call, as the plan made for its values is the good one.
        var prepared: Bool
    }

    /// The query's statement; with `createdBy`, only the records that user created.
    ///
    /// A query with a filter or a sort on a field that has a field index, and no token filter,
    /// runs prepared: PostgreSQL then parses it once per connection and, once its generic plan is
    /// as good as the ones made for the values, stops planning it (about 1 ms of its CPU a query).
    /// A field index is a partial index whose predicate names the container, environment and
    /// record type, and whose key names the field: a generic plan (made without the values) cannot
    /// match it unless the text itself holds them, so such a statement writes those names as
    /// literals (`SQLBuilder.literal`) and binds every other value. Prepared with the names bound,
    /// PostgreSQL chose a generic plan without the index after five calls — 156 and 236 ms instead
    /// of 17 for `query.equality` and `query.range-sort` (docs/benchmarks-history.md). The names
    /// are the field-index registry's, so the texts a process prepares stay as many as the indexes
    /// and the shapes of the queries on them (and `PreparedStatements` prepares a bounded number).
    private static func statement(
        _ query: RecordQuery, in database: DatabaseID, scope: Scope, limit: Int, after: [JSONValue]?, createdBy: String? = nil,
        on connection: PostgresConnection, preparedIn statements: PreparedStatements, logger: Logger
    ) async throws -> Statement {
        var sql = SQLBuilder()
        let serving = try await context(recordType: query.recordType, in: database, scope: scope, on: connection, preparedIn: statements, logger: logger)
        let indexed = Set(query.filters.map(\.fieldName) + query.sorts.map(\.fieldName)).intersection(serving.indexedFields)
        let tokens = query.filters.contains { $0.fieldName == "___all" || $0.comparator == .containsAllTokens || $0.comparator == .containsAnyTokens }
        let prepared = !indexed.isEmpty && !tokens
            && ([database.container, database.environment.rawValue, query.recordType] + Array(indexed)).allSatisfy { SQLBuilder.literal($0) != nil }
        if prepared { sql.literalFields = indexed }
        func name(_ value: String) -> String { prepared ? SQLBuilder.literal(value) ?? sql.bind(value) : sql.bind(value) }
        let generation = sql.bind(serving.generation)
        var conditions = [
            "generation = \(generation)", "NOT deleted",
            "container = \(name(database.container))", "environment = \(name(database.environment.rawValue))",
            "scope = \(sql.bind(database.scope.rawValue))", "owner = \(sql.bind(database.owner))",
            "record_type = \(name(query.recordType))",
            // An expired record is gone from the moment it expires, before stratus-gc deletes it.
            "((record ->> 'expirationDate') IS NULL OR (record ->> 'expirationDate')::bigint > \(RecordExpirySQL.now))",
        ]
        if case .zone(let name) = scope { conditions.append("zone_name = \(sql.bind(name))") }
        if let createdBy { conditions.append("(record -> 'created' ->> 'userRecordName') = \(sql.bind(createdBy))") }
        // A field's token filter is tested on the candidates in order, after the sort: `late`.
        var late: [String] = []
        for filter in query.filters {
            conditions.append(try Self.condition(
                filter, language: serving.language, indexed: serving.indexedFields.contains(filter.fieldName), late: &late, &sql))
        }
        // Sort keys, all as jsonb so one comparison rule serves every key; then zone and name break ties.
        var keys: [SortKey] = query.sorts.map { sort in
            SortKey(expression: Self.sortExpression(sort, &sql), ascending: sort.ascending, form: .jsonb)
        }
        // An equality on a field with a field index fixes the index's key: the index then reads
        // its matches in the order of the tie breakers it ends with.
        let fieldIndexOrders = query.filters.contains { $0.comparator == .equals && serving.indexedFields.contains($0.fieldName) }
        if keys.isEmpty, !fieldIndexOrders {
            // No sort: the names alone, as the plain columns. Text compares by the database's
            // collation, as jsonb strings do, so the order is the one the jsonb keys give and a
            // marker holds the same strings either way; no two jsonb values are built per
            // candidate row to sort it.
            keys = [SortKey(expression: "zone_name", ascending: true, form: .text), SortKey(expression: "record_name", ascending: true, form: .text)]
        } else {
            // Ties break in the first key's direction, so one index can serve the whole order either
            // way (the field and time indexes end with these jsonb keys).
            let tieAscending = keys.first?.ascending ?? true
            keys.append(SortKey(expression: "query_index.key(zone_name)", ascending: tieAscending, form: .jsonb))
            keys.append(SortKey(expression: "query_index.key(record_name)", ascending: tieAscending, form: .jsonb))
        }
        if let after {
            guard after.count == keys.count else { throw StratusError(.badRequest, "continuationMarker does not belong to this query") }
            var bound: [String] = []
            for (key, value) in zip(keys, after) {
                switch key.form {
                case .jsonb:
                    bound.append("\(sql.bind(Self.jsonText(value)))::jsonb")
                case .text:
                    guard case .string(let text) = value else { throw StratusError(.badRequest, "continuationMarker does not belong to this query") }
                    bound.append(sql.bind(text))
                }
            }
            var alternatives: [String] = []
            for index in keys.indices {
                var parts: [String] = []
                for earlier in 0..<index {
                    parts.append("\(keys[earlier].expression) = \(bound[earlier])")
                }
                parts.append("\(keys[index].expression) \(keys[index].ascending ? ">" : "<") \(bound[index])")
                alternatives.append("(" + parts.joined(separator: " AND ") + ")")
            }
            conditions.append("(" + alternatives.joined(separator: " OR ") + ")")
        }
        let order = keys.map { "\($0.expression) \($0.ascending ? "ASC" : "DESC")" }.joined(separator: ", ")
        // One custom zone's behind count rides along (`Page.behind`): evaluated once, with the
        // checkpoint bound as a value (see `behind(customZone:…)`).
        var behind = "NULL::bigint"
        if let checkpoint = serving.checkpoint {
            behind = "(SELECT count(*)::bigint FROM (\(Self.pendingEvents(zoneKey: sql.bind(checkpoint.zoneKey), above: sql.bind(checkpoint.lastSequence), limit: sql.bind(Self.maxBehindCount)))) AS pending)"
        }
        // The page is chosen and ordered inside; only its rows are written as text (the record, the
        // marker's keys) outside, not every candidate the sort looked at. The outer scan only
        // projects the subquery's rows, in the order they come (re-sorting them by the keys cost a
        // second sort wherever PostgreSQL could not see the inner order, e.g. a zone's fixed name).
        let columns = keys.indices.map { "\(keys[$0].expression) AS k\($0)" }.joined(separator: ", ")
        let output = "zone_name, record_name, record::text, jsonb_build_array(\(keys.indices.map { "k\($0)" }.joined(separator: ", ")))::text, \(behind)"
        // Owner key: `conditions` begins with the database's key columns, owner included.
        let candidates = """
            SELECT zone_name, record_name, record, \(columns)
                FROM query_index.records
                WHERE \(conditions.joined(separator: " AND "))
                ORDER BY \(order)
            """
        let text: String
        if late.isEmpty {
            text = """
                SELECT \(output)
                FROM (
                    \(candidates)
                    LIMIT \(sql.bind(limit + 1))
                ) AS page
                """
        } else {
            // Tokenising a field costs microseconds a row: it runs on the candidates in their order
            // (`OFFSET 0` keeps PostgreSQL from moving it into the scan) until the page is full,
            // not on every candidate before the sort.
            text = """
                SELECT \(output)
                FROM (
                    \(candidates)
                    OFFSET 0
                ) AS candidates
                WHERE \(late.joined(separator: " AND "))
                LIMIT \(sql.bind(limit + 1))
                """
        }
        return Statement(query: PostgresQuery(unsafeSQL: text, binds: sql.bindings), prepared: prepared)
    }

    /// One key of a query's order: the expression sorted by, its direction, and what a marker's
    /// value is compared as.
    struct SortKey {
        enum Form {
            /// A jsonb value (a sort field's, a time's, and the tie breakers after them).
            case jsonb
            /// A text column (the names of an unsorted query): the marker holds the JSON string.
            case text
        }

        var expression: String
        var ascending: Bool
        var form: Form
    }

    /// What a query's statement depends on besides the query itself.
    struct Context {
        /// The live generation of the index.
        var generation: Int32
        /// Its text search configuration, which built its documents, as its object id: bound as a
        /// number and cast (`$n::oid::regconfig`), the planner folds it and every `to_tsquery` of it
        /// into constants. Bound as a name, the cast reads the catalog and is not folded, so the
        /// query was made again for every candidate row: 4.5 instead of 2.7 ms for `query.fulltext`'s
        /// statement (docs/benchmarks.md).
        var language: Int64
        /// The record type's fields that have a field index (`QueryFieldIndexes`).
        var indexedFields: Set<String>
        /// For one custom zone: the indexer's position in it, the zone sequence of the last event
        /// it applied there (0 before its first).
        var checkpoint: (zoneKey: String, lastSequence: Int64)?
    }

    /// The live generation, its language and the record type's field indexes, in one round trip.
    /// The indexer's name is in the text, as in `CheckpointStore.advance`: bound, the generic plan
    /// read every worker's checkpoint partition and PostgreSQL planned the statement at every query.
    private static func context(
        recordType: String, in database: DatabaseID, scope: Scope, on connection: PostgresConnection, preparedIn statements: PreparedStatements,
        logger: Logger
    ) async throws -> Context {
        let zoneKey: String
        if case .zone(let name) = scope, name != ZoneID.defaultZoneName { zoneKey = ZoneKey(database: database, zoneName: name).rawValue } else { zoneKey = "" }
        let rows = try await connection.query("""
            SELECT g.generation, g.language::oid::bigint,
                   coalesce((SELECT array_agg(f.field_name) FROM query_index.field_indexes f
                             WHERE f.container = \(database.container) AND f.environment = \(database.environment.rawValue)
                               AND f.record_type = \(recordType)), '{}'),
                   coalesce((SELECT c.last_sequence FROM worker_checkpoints c WHERE c.worker = \(literal: Self.indexerWorker) AND c.zone_key = \(zoneKey)), 0)
            FROM query_index.generations g WHERE g.state = 'live'
            """, preparedIn: statements, logger: logger)
        for try await (generation, language, indexed, checkpoint) in rows.decode((Int, Int64, [String], Int64).self) {
            guard let live = Int32(exactly: generation) else { throw StratusError(.internalError, "the live query index generation is out of range") }
            return Context(
                generation: live, language: language, indexedFields: Set(indexed), checkpoint: zoneKey.isEmpty ? nil : (zoneKey, checkpoint))
        }
        throw StratusError(.internalError, "the query index has no live generation")
    }

    /// The most a one-custom-zone behind count counts: beyond it the header says this many, so a
    /// query's cost stays bounded however far the indexer is behind.
    public static let maxBehindCount: Int64 = 100_000

    /// The indexer's worker name, under which it keeps its checkpoints (`IndexerProjection.name`).
    public static let indexerWorker = "stratus-indexer"

    /// How many index-relevant events of the queried zones (`scope` in `database`) the indexer has
    /// not applied yet: an estimate of how stale this query's answer may be. Other zones' and other
    /// tenants' backlogs do not count.
    public func behind(in database: DatabaseID, scope: Scope, logger: Logger) async throws -> Int64 {
        try await store.withConnection { connection in
            if case .zone(let name) = scope, name != ZoneID.defaultZoneName {
                return try await Self.behind(customZone: ZoneKey(database: database, zoneName: name).rawValue, on: connection, logger: logger)
            }
            let rows = try await connection.query(Self.behindQuery(in: database, scope: scope), logger: logger)
            for try await count in rows.decode(Int64.self) { return count }
            return 0
        }
    }

    /// One custom zone, the common case: the events above the indexer's checkpoint, an index range
    /// read in order up to `maxBehindCount`. The checkpoint is read first and bound as a value, so
    /// the planner estimates the range from the column's statistics (in one statement, unable to
    /// know it, it guesses a third of the zone's events and reads the whole log instead); the
    /// general statement below would take about 2 ms to plan, longer than these two run.
    static func behind(customZone key: String, on connection: PostgresConnection, logger: Logger) async throws -> Int64 {
        var checkpoint: Int64 = 0
        let rows = try await connection.query(
            "SELECT last_sequence FROM worker_checkpoints WHERE worker = \(indexerWorker) AND zone_key = \(key)", logger: logger)
        for try await sequence in rows.decode(Int64?.self) { checkpoint = sequence ?? 0 }
        var sql = SQLBuilder()
        let text = "SELECT count(*)::bigint FROM (\(pendingEvents(zoneKey: sql.bind(key), above: sql.bind(checkpoint), limit: sql.bind(maxBehindCount)))) AS pending"
        let counted = try await connection.query(PostgresQuery(unsafeSQL: text, binds: sql.bindings), logger: logger)
        for try await count in counted.decode(Int64.self) { return count }
        return 0
    }

    /// A custom zone's index-relevant events above a checkpoint's zone sequence, in the zone's
    /// order, at most `limit` (each argument a bind placeholder): a range of `events_zone_sequence`,
    /// which only a zone's own events are in. Counted by event id instead, the planner could read
    /// the log's primary key from the checkpoint on and test each event's zone: for a zone holding
    /// much of the log that looked cheap, and cost every query of it a walk over all the other
    /// zones' events since (docs/benchmarks.md, "A query's behind count read other zones' events").
    static func pendingEvents(zoneKey: String, above checkpoint: String, limit: String) -> String {
        """
        SELECT 1 FROM events e
        WHERE e.zone_key = \(zoneKey) AND e.zone_sequence > \(checkpoint) AND e.type IN ('record.saved', 'record.deleted', 'zone.deleted')
        ORDER BY e.zone_sequence LIMIT \(limit)
        """
    }

    /// The statement behind `behind(in:scope:logger:)` for the default zone and zone-wide queries;
    /// the tests EXPLAIN it.
    ///
    /// Per zone, the indexer's position is its checkpoint's `last_event_id`, and the count is a range
    /// scan of `events_zone_id` above it. Default-zone events carry no zone sequence, so the indexer
    /// keeps no checkpoint for them; there the position is the newest event whose effect the live
    /// index already holds (a row of its record at that event's version or later), found by walking
    /// the zone's events newest first — as far as the backlog, not the zone, is long. The row check is
    /// a scalar subquery, not EXISTS, so the planner cannot turn it into a join that reads the whole
    /// zone's rows.
    static func behindQuery(in database: DatabaseID, scope: Scope) -> PostgresQuery {
        let defaultKey = ZoneKey(database: database, zoneName: ZoneID.defaultZoneName).rawValue
        let keys: [String]
        let zoneWide: Bool
        switch scope {
        case .zone(let name):
            keys = [ZoneKey(database: database, zoneName: name).rawValue]
            zoneWide = false
        case .allZones:
            // Custom zones come from `zones` (deleted ones too: their zone.deleted may be pending).
            keys = [defaultKey]
            zoneWide = true
        }
        return """
            WITH scope_zones AS (
                SELECT unnest(\(keys)::text[]) AS zone_key
                UNION
                SELECT zone_key FROM zones
                WHERE \(zoneWide) AND container = \(database.container) AND environment = \(database.environment.rawValue)
                  AND scope = \(database.scope.rawValue) AND owner = \(database.owner)
            )
            SELECT coalesce(sum(pending.n), 0)::bigint
            FROM scope_zones z
            LEFT JOIN worker_checkpoints c ON c.worker = \(Self.indexerWorker) AND c.zone_key = z.zone_key
            LEFT JOIN LATERAL (
                SELECT e.id FROM events e
                WHERE z.zone_key = \(defaultKey) AND e.zone_key = z.zone_key AND e.type IN ('record.saved', 'record.deleted')
                  AND (SELECT r.version FROM query_index.records r
                       WHERE r.generation = (SELECT generation FROM query_index.generations WHERE state = 'live')
                         AND r.container = \(database.container) AND r.environment = \(database.environment.rawValue)
                         AND r.scope = \(database.scope.rawValue) AND r.owner = \(database.owner) AND r.zone_name = \(ZoneID.defaultZoneName)
                         AND r.record_name = coalesce(e.payload->'record'->>'recordName', e.payload->>'recordName')) >= e.id
                ORDER BY e.id DESC LIMIT 1
            ) AS applied ON true
            CROSS JOIN LATERAL (
                SELECT count(*) AS n FROM events e
                WHERE e.zone_key = z.zone_key AND e.id > greatest(c.last_event_id, applied.id, 0)
                  AND e.type IN ('record.saved', 'record.deleted', 'zone.deleted')
            ) AS pending
            """
    }

    private static func jsonText(_ value: JSONValue) -> String {
        String(decoding: EventCoding.encode(value), as: UTF8.self)
    }

    /// A field's stored value: the name written as a literal when the statement reads the field's
    /// index (`SQLBuilder.literalFields`), else bound.
    private static func field(_ name: String, _ sql: inout SQLBuilder) -> String {
        if sql.literalFields.contains(name), let literal = SQLBuilder.literal(name) { return "(record->'fields'->\(literal))" }
        return "(record->'fields'->\(sql.bind(name)))"
    }

    private static func sortExpression(_ sort: QuerySort, _ sql: inout SQLBuilder) -> String {
        switch sort.fieldName {
        case "___createTime": return "query_index.key(created_at)"
        case "___modTime": return "query_index.key(modified_at)"
        case "___recordID": return "query_index.key(record_name)"
        default:
            if let location = sort.relativeLocation {
                return "coalesce(to_jsonb(\(locationDistance(sort.fieldName, location, &sql))), 'null'::jsonb)"
            }
            return fieldSortKey(sort.fieldName, &sql)
        }
    }

    /// A field's sort key: its value as `jsonb` (one rule orders every type), null when absent. A
    /// field index (`QueryFieldIndexes`) holds exactly this expression.
    private static func fieldSortKey(_ name: String, _ sql: inout SQLBuilder) -> String {
        "coalesce(\(field(name, &sql))->'value', 'null'::jsonb)"
    }

    /// The distance in metres from a point to a field whose stored type is LOCATION; NULL for any
    /// other type. The type decides, not the value's shape: another field (an asset, say) may hold a
    /// `latitude` that is no number. CASE guarantees the cast never sees such a value, which an AND
    /// would not (PostgreSQL may evaluate its operands in any order).
    private static func locationDistance(_ name: String, _ location: Location, _ sql: inout SQLBuilder) -> String {
        let stored = field(name, &sql)
        return "(CASE WHEN \(stored)->>'type' = 'LOCATION' THEN \(distance("\(stored)->'value'", location, &sql)) END)"
    }

    /// Great-circle distance in metres between a stored LOCATION value and a point.
    private static func distance(_ value: String, _ location: Location, _ sql: inout SQLBuilder) -> String {
        let lat = "((\(value)->>'latitude')::float8)", lon = "((\(value)->>'longitude')::float8)"
        let lat0 = sql.bind(location.latitude), lon0 = sql.bind(location.longitude)
        return """
            (2 * 6371008.8 * asin(sqrt(power(sin(radians(\(lat) - \(lat0)::float8) / 2), 2)
              + cos(radians(\(lat0)::float8)) * cos(radians(\(lat))) * power(sin(radians(\(lon) - \(lon0)::float8) / 2), 2))))
            """
    }

    /// The `{field: {value: …}}` document an EQUALS filter's records contain, when there is one.
    private static func containment(_ filter: QueryFilter) -> JSONValue? {
        switch filter.value {
        case .string, .int64, .double, .timestamp:
            return .object([filter.fieldName: .object(["value": FieldCoding.encode(filter.value)["value"] ?? .null])])
        case .reference(let reference):
            return .object([filter.fieldName: .object(["value": .object(["recordName": .string(reference.recordName)])])])
        default:
            return nil
        }
    }

    /// One filter as a SQL condition. A token filter on a named field picks its candidates only;
    /// the test of the field's own tokens, which decides among them, goes to `late`, to run on the
    /// candidates after the sort.
    /// `language` is the generation's text search configuration, which built its documents (its
    /// object id, `Context.language`).
    ///
    /// `indexed`: the field has a field index. An EQUALS on a scalar is then stated on the index's
    /// key alone, which decides it exactly (`sortKeyBound`): stated also as a containment and as a
    /// typed comparison, three estimates of one test multiply into "about one row", and the planner
    /// then reads every match and sorts it rather than reading the first matches in index order.
    static func condition(
        _ filter: QueryFilter, language: Int64, indexed: Bool = false, skipContainment: Bool = false, late: inout [String],
        _ sql: inout SQLBuilder
    ) throws(StratusError) -> String {
        let name = filter.fieldName
        if indexed, filter.comparator == .equals, let exact = exactSortKeyEquality(filter, &sql) { return exact }
        // System fields compare their columns.
        if name == "___recordID" || name == "___createTime" || name == "___modTime" {
            let column = name == "___recordID" ? "record_name" : name == "___createTime" ? "created_at" : "modified_at"
            return try compare(column, filter, numeric: name != "___recordID", &sql)
        }
        if name == "___all" || filter.comparator == .containsAllTokens || filter.comparator == .containsAnyTokens {
            guard case .string(let text) = filter.value else { throw StratusError(.badRequest, "token comparators need a STRING") }
            let tokens = RecordQuery.tokens(text)
            guard !tokens.isEmpty else { throw StratusError(.badRequest, "fieldValue has no tokens to search for") }
            let query = "to_tsquery(\(sql.bind(language))::oid::regconfig, \(sql.bind(tokens.joined(separator: filter.comparator == .containsAllTokens ? " & " : " | "))))"
            // `search` holds the tokens of every searchable STRING field, so a field's match is also a
            // match of `search`: the GIN index on it picks the candidates, instead of tokenising the
            // field of every record of the type; the field's own test follows on them in order.
            if name != "___all" {
                late.append("to_tsvector(\(sql.bind(language))::oid::regconfig, coalesce(\(field(name, &sql))->>'value', '')) @@ \(query)")
            }
            return "search @@ \(query)"
        }
        let value = "\(field(name, &sql))->'value'"
        switch filter.comparator {
        case .near:
            guard case .location(let location) = filter.value, let metres = filter.distance else { throw StratusError(.badRequest, "NEAR needs a LOCATION and a distance") }
            return "coalesce(\(locationDistance(name, location, &sql)) <= \(sql.bind(metres)), false)"
        case .listContains, .notListContains:
            let contains = "(\(value) @> \(sql.bind(jsonText(.array([elementJSON(filter.value)]))))::jsonb)"
            return filter.comparator == .listContains ? contains : "(\(value) IS NULL OR NOT \(contains))"
        case .listContainsAll, .notListContainsAll, .listContainsAny, .notListContainsAny:
            guard case .list(_, let elements) = filter.value else { throw StratusError(.badRequest, "\(filter.comparator.rawValue) needs a list") }
            let wanted = sql.bind(jsonText(.array(elements.map(elementJSON))))
            let all = "(\(value) @> \(wanted)::jsonb)"
            let any = "EXISTS (SELECT 1 FROM jsonb_array_elements(\(wanted)::jsonb) AS w(e) WHERE \(value) @> jsonb_build_array(w.e))"
            switch filter.comparator {
            case .listContainsAll: return all
            case .notListContainsAll: return "(\(value) IS NULL OR NOT \(all))"
            case .listContainsAny: return "(jsonb_typeof(\(value)) = 'array' AND \(any))"
            default: return "(\(value) IS NULL OR jsonb_typeof(\(value)) <> 'array' OR NOT \(any))"
            }
        case .listMemberBeginsWith, .notListMemberBeginsWith:
            guard case .string(let prefix) = filter.value else { throw StratusError(.badRequest, "\(filter.comparator.rawValue) needs a STRING") }
            // CASE, not AND: the elements are read only from an array.
            let any = "(CASE WHEN jsonb_typeof(\(value)) = 'array' THEN EXISTS (SELECT 1 FROM jsonb_array_elements_text(\(value)) AS m(e) WHERE starts_with(m.e, \(sql.bind(prefix)))) ELSE false END)"
            return filter.comparator == .listMemberBeginsWith ? any : "NOT \(any)"
        default:
            if filter.comparator == .equals, !skipContainment, let exact = containment(filter) {
                // The same test as a containment the GIN index on fields can answer.
                let probe = "(record->'fields' @> \(sql.bind(jsonText(exact)))::jsonb)"
                return "(\(probe) AND \(try condition(QueryFilter(fieldName: name, comparator: .equals, value: filter.value, distance: nil), language: language, skipContainment: true, late: &late, &sql)))"
            }
            switch filter.value {
            case .reference:
                return try compare("(\(value)->>'recordName')", filter, numeric: false, &sql)
            case .list(let base, _) where base == .reference:
                return try compare("(\(value)->>'recordName')", filter, numeric: false, &sql)
            case .int64, .double, .timestamp, .list(.int64, _), .list(.double, _), .list(.timestamp, _):
                let typed = "(CASE WHEN \(field(name, &sql))->>'type' IN ('INT64', 'DOUBLE', 'TIMESTAMP') THEN (\(value)#>>'{}')::numeric END)"
                let exact = try compare(typed, filter, numeric: true, &sql)
                guard let bound = sortKeyBound(filter, &sql) else { return exact }
                return "(\(exact) AND \(bound))"
            default:
                let typed = "(CASE WHEN jsonb_typeof(\(value)) = 'string' THEN \(value)#>>'{}' END)"
                let exact = try compare(typed, filter, numeric: false, &sql)
                guard let bound = sortKeyBound(filter, &sql) else { return exact }
                return "(\(exact) AND \(bound))"
            }
        }
    }

    /// A comparison restated on the field's sort key (`sortExpression`), which a field index
    /// (`QueryFieldIndexes`) holds: the index can then read the range instead of the whole type.
    /// It only ever narrows what the exact comparison already decides, which still runs: numbers
    /// are the only stored values that are `jsonb` numbers (INT64, DOUBLE, TIMESTAMP), and `jsonb`
    /// orders numbers by their exact numeric value, as the comparison does (every other value sorts
    /// below or above all numbers). Text only for EQUALS: `jsonb` orders strings by the database's
    /// collation where the comparison uses byte order, but two strings are equal in both only when
    /// their bytes are.
    private static func sortKeyBound(_ filter: QueryFilter, _ sql: inout SQLBuilder) -> String? {
        let bound: String
        switch filter.value {
        case .int64(let value), .timestamp(let value): bound = "to_jsonb(\(sql.bind(String(value)))::numeric)"
        case .double(let value) where value.isFinite: bound = "to_jsonb(\(sql.bind(String(value)))::numeric)"
        case .string(let text) where filter.comparator == .equals: bound = "to_jsonb(\(sql.bind(text))::text)"
        default: return nil
        }
        let operation: String
        switch filter.comparator {
        case .equals: operation = "="
        case .lessThan: operation = "<"
        case .lessThanOrEquals: operation = "<="
        case .greaterThan: operation = ">"
        case .greaterThanOrEquals: operation = ">="
        default: return nil
        }
        return "\(fieldSortKey(filter.fieldName, &sql)) \(operation) \(bound)"
    }

    /// An EQUALS of a string or a number stated on the field's sort key, which is exact on its own:
    /// `jsonb` equality of two strings holds only for the same bytes (as the typed comparison's
    /// byte order), of two numbers for the same numeric value (as the typed comparison), and a
    /// string or number never equals a value of another kind. Nil for every other filter.
    private static func exactSortKeyEquality(_ filter: QueryFilter, _ sql: inout SQLBuilder) -> String? {
        guard filter.comparator == .equals, !filter.fieldName.hasPrefix("___") else { return nil }
        switch filter.value {
        case .string, .int64, .timestamp: return sortKeyBound(filter, &sql)
        case .double(let value) where value.isFinite: return sortKeyBound(filter, &sql)
        default: return nil
        }
    }

    /// Scalar comparisons (and IN / NOT_IN) on an expression.
    private static func compare(_ expression: String, _ filter: QueryFilter, numeric: Bool, _ sql: inout SQLBuilder) throws(StratusError) -> String {
        func scalar(_ value: FieldValue) throws(StratusError) -> String {
            switch value {
            case .string(let text): return "\(sql.bind(text))::text"
            case .int64(let number), .timestamp(let number): return "\(sql.bind(String(number)))::numeric"
            case .double(let number): return "\(sql.bind(String(number)))::numeric"
            case .reference(let reference): return "\(sql.bind(reference.recordName))::text"
            default: throw StratusError(.badRequest, "\(filter.comparator.rawValue) cannot compare a \(value.type.rawValue)")
            }
        }
        let collated = numeric ? expression : "(\(expression) COLLATE \"C\")"
        switch filter.comparator {
        case .equals: return "\(collated) = \(try scalar(filter.value))"
        case .notEquals: return "\(collated) <> \(try scalar(filter.value))"
        case .lessThan: return "\(collated) < \(try scalar(filter.value))"
        case .lessThanOrEquals: return "\(collated) <= \(try scalar(filter.value))"
        case .greaterThan: return "\(collated) > \(try scalar(filter.value))"
        case .greaterThanOrEquals: return "\(collated) >= \(try scalar(filter.value))"
        case .beginsWith, .notBeginsWith:
            guard case .string(let prefix) = filter.value, !numeric else { throw StratusError(.badRequest, "BEGINS_WITH needs a STRING field and value") }
            let test = "starts_with(\(expression), \(sql.bind(prefix)))"
            return filter.comparator == .beginsWith ? "coalesce(\(test), false)" : "NOT coalesce(\(test), false)"
        case .in, .notIn:
            guard case .list(_, let values) = filter.value else { throw StratusError(.badRequest, "\(filter.comparator.rawValue) needs a list") }
            var options: [String] = []
            for value in values { options.append(try scalar(value)) }
            guard !options.isEmpty else { return filter.comparator == .in ? "false" : "true" }
            let list = "(\(options.joined(separator: ", ")))"
            return filter.comparator == .in ? "\(collated) IN \(list)" : "(\(expression) IS NULL OR \(collated) NOT IN \(list))"
        default:
            throw StratusError(.badRequest, "\(filter.comparator.rawValue) does not apply to field '\(filter.fieldName)'")
        }
    }

    /// A list element as it is stored in a record's JSON.
    private static func elementJSON(_ value: FieldValue) -> JSONValue {
        switch value {
        case .reference(let reference): .object(["recordName": .string(reference.recordName)])
        default: FieldCoding.encode(value)["value"] ?? .null
        }
    }
}

/// Collects bind parameters while a statement is assembled; every value is a bind, never spliced,
/// but the names a prepared query's generic plan must see (`QueryStore.statement`).
struct SQLBuilder {
    var bindings = PostgresBindings()
    private var count = 0
    /// The fields whose names are written as literals (`literal`): those whose field index the
    /// statement reads.
    var literalFields: Set<String> = []

    /// `text` as a string literal in the statement's text, or nil (bind it instead) when it holds a
    /// quote, a backslash or a NUL: a plain name reads the same whatever
    /// `standard_conforming_strings` says, and nothing in it can end the literal.
    static func literal(_ text: String) -> String? {
        guard !text.utf8.contains(where: { $0 == UInt8(ascii: "'") || $0 == UInt8(ascii: "\\") || $0 == 0 }) else { return nil }
        return "'" + text + "'"
    }

    mutating func bind(_ value: some PostgresNonThrowingEncodable & Sendable) -> String {
        bindings.append(value)
        count += 1
        return "$\(count)"
    }
}
