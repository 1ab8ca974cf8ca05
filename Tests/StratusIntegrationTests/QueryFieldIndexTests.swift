import Foundation
import PostgresNIO
import StratusCore
@testable import StratusPostgres
import StratusTesting
import XCTest

/// The field indexes of the query index (`QueryFieldIndexes`): a QUERYABLE or SORTABLE field's
/// range and sort become an index range read in order, the answers stay exactly what the index
/// without them gives, and the indexes follow the schema as it changes.
final class QueryFieldIndexTests: XCTestCase {
    static let container = "iCloud.fields"
    static let database = DatabaseID(container: container, environment: .development, scope: .private, owner: "_u")
    static let count = 6_000

    static let flagged = """
        DEFINE SCHEMA
            RECORD TYPE Item (
                score   INT64 QUERYABLE SORTABLE,
                title   STRING QUERYABLE SEARCHABLE SORTABLE,
                tags    LIST<STRING> QUERYABLE,
                payload BYTES
            );
        """

    static let unflagged = """
        DEFINE SCHEMA
            RECORD TYPE Item (
                score   INT64,
                title   STRING QUERYABLE SEARCHABLE SORTABLE,
                tags    LIST<STRING> QUERYABLE,
                payload BYTES
            );
        """

    func testARangeAndASortOnAFlaggedFieldReadTheFieldIndexAndAnswerAsBefore() async throws {
        try await TestSupport.withMigratedStore { store, _ in
            try await Self.load(store)
            let indexes = QueryFieldIndexes(store: store)
            let queries = QueryStore(store: store)
            let shapes: [(String, String)] = [
                ("range, ascending", #"{"recordType":"Item","filterBy":[{"comparator":"GREATER_THAN_OR_EQUALS","fieldName":"score","fieldValue":{"value":400}},{"comparator":"LESS_THAN","fieldName":"score","fieldValue":{"value":600}}],"sortBy":[{"fieldName":"score","ascending":true}]}"#),
                ("range, descending", #"{"recordType":"Item","filterBy":[{"comparator":"GREATER_THAN","fieldName":"score","fieldValue":{"value":990.5}}],"sortBy":[{"fieldName":"score","ascending":false}]}"#),
                ("at most", #"{"recordType":"Item","filterBy":[{"comparator":"LESS_THAN_OR_EQUALS","fieldName":"score","fieldValue":{"value":3}}],"sortBy":[{"fieldName":"score","ascending":true}]}"#),
                ("equality, sorted", #"{"recordType":"Item","filterBy":[{"comparator":"EQUALS","fieldName":"score","fieldValue":{"value":7}}],"sortBy":[{"fieldName":"score","ascending":true}]}"#),
                ("sort only: numbers, text and missing values", #"{"recordType":"Item","sortBy":[{"fieldName":"score","ascending":true}]}"#),
                ("text equality", #"{"recordType":"Item","filterBy":[{"comparator":"EQUALS","fieldName":"title","fieldValue":{"value":"item 123"}}]}"#),
                ("number equality, a double", #"{"recordType":"Item","filterBy":[{"comparator":"EQUALS","fieldName":"score","fieldValue":{"value":7.5}}]}"#),
                ("number equality, a whole double", #"{"recordType":"Item","filterBy":[{"comparator":"EQUALS","fieldName":"score","fieldValue":{"value":12.0}}]}"#),
                ("text equality, many matches, unsorted", #"{"recordType":"Item","filterBy":[{"comparator":"EQUALS","fieldName":"score","fieldValue":{"value":"n3"}}]}"#),
                ("text equality on a number field", #"{"recordType":"Item","filterBy":[{"comparator":"EQUALS","fieldName":"score","fieldValue":{"value":"n3"}}]}"#),
                ("a text sort", #"{"recordType":"Item","filterBy":[{"comparator":"BEGINS_WITH","fieldName":"title","fieldValue":{"value":"item 1"}}],"sortBy":[{"fieldName":"title","ascending":false}]}"#),
            ]
            var before: [String: [String]] = [:]
            for (name, text) in shapes {
                before[name] = try await Self.all(try Self.query(text), queries)
                XCTAssertFalse(before[name]!.isEmpty, name)
            }

            let changes = try await indexes.ensure(container: Self.container, environment: .development, logger: TestSupport.logger)
            XCTAssertEqual(changes.built.map(\.fieldName), ["score", "title"], "lists and bytes get no B-tree")
            XCTAssertEqual(changes.dropped, [])
            try await store.withConnection { connection in _ = try await connection.query("ANALYZE query_index.records", logger: TestSupport.logger) }

            let scoreIndex = changes.built[0].indexName
            let range = try Self.query(shapes[0].1)
            let plan = try await queries.explain(range, in: Self.database, scope: .zone("Z"), limit: 100, logger: TestSupport.logger)
            print("plan of a range with a sort on a field index:\n\(plan)")
            XCTAssertTrue(plan.contains("Index Scan using \(scoreIndex)"), "the range reads the field index:\n\(plan)")
            XCTAssertTrue(plan.contains("Index Cond") && plan.contains("'400'::numeric"), "the range bounds the index read:\n\(plan)")
            XCTAssertFalse(plan.contains("Sort"), "the index gives the order; nothing is sorted:\n\(plan)")
            let descending = try await queries.explain(try Self.query(shapes[1].1), in: Self.database, scope: .zone("Z"), limit: 100, logger: TestSupport.logger)
            XCTAssertTrue(descending.contains("Index Scan Backward using \(scoreIndex)"), descending)

            let textEquality = try await queries.explain(try Self.query(shapes.first { $0.0 == "text equality" }!.1), in: Self.database, scope: .zone("Z"), limit: 100, logger: TestSupport.logger)
            XCTAssertTrue(textEquality.contains("Index Scan using \(changes.built[1].indexName)"), "text equality reads title's field index:\n\(textEquality)")
            // An equality with many matches reads the first page of them in index order: stated on
            // the index key alone, its estimate is the index's, not "about one row".
            let numberEquality = try await queries.explain(try Self.query(shapes.first { $0.0 == "number equality, a whole double" }!.1), in: Self.database, scope: .zone("Z"), limit: 5, logger: TestSupport.logger)
            XCTAssertTrue(numberEquality.contains("Index Scan using \(scoreIndex)"), numberEquality)
            XCTAssertFalse(numberEquality.contains("Sort"), "the equality's matches come in index order:\n\(numberEquality)")
            XCTAssertFalse(numberEquality.contains("@>"), "stated on the index key alone:\n\(numberEquality)")
            for (name, text) in shapes {
                let after = try await Self.all(try Self.query(text), queries)
                XCTAssertEqual(after, before[name], "\(name): the field index changes no answer")
            }

            let again = try await indexes.ensure(container: Self.container, environment: .development, logger: TestSupport.logger)
            XCTAssertEqual(again.built, [])
            XCTAssertEqual(again.kept.count, 2)

            // The schema no longer flags score: its index goes, title's stays.
            guard case .applied = try await SchemaStore(store: store).importSchema(
                try SchemaLanguage.parse(Self.unflagged), container: Self.container, causation: Causation(requestID: "t"), logger: TestSupport.logger)
            else { return XCTFail("the import was refused") }
            let narrowed = try await indexes.ensure(container: Self.container, environment: .development, logger: TestSupport.logger)
            XCTAssertEqual(narrowed.dropped.map(\.fieldName), ["score"])
            XCTAssertEqual(narrowed.kept.map(\.fieldName), ["title"])
            let scoreIndexExists = try await Self.exists(scoreIndex, store)
            XCTAssertFalse(scoreIndexExists)
            let listed = try await indexes.list(container: Self.container, environment: .development, logger: TestSupport.logger)
            XCTAssertEqual(listed.map(\.fieldName), ["title"])
            let unindexed = try await queries.explain(range, in: Self.database, scope: .zone("Z"), limit: 100, logger: TestSupport.logger)
            XCTAssertFalse(unindexed.contains(scoreIndex), unindexed)
            let unindexedAnswer = try await Self.all(range, queries)
            XCTAssertEqual(unindexedAnswer, before[shapes[0].0])
        }
    }

    /// A query that reads a field index runs prepared, and PostgreSQL settles on a generic plan
    /// that still reads the index, for it is made from a text that holds the names the index's
    /// predicate and key hold (`QueryStore.statement`). A query with a token filter is not prepared.
    func testAQueryOnAFieldIndexRunsPreparedOnAGenericPlanThatReadsTheIndex() async throws {
        let logger = TestSupport.logger
        let store = try PostgresStore(url: try await TestSupport.createDatabase(), maxConnections: 1, logger: logger)
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await store.run() }
            defer { group.cancelAll() }
            try await Migrator(store: store, migrations: try TestSupport.migrations()).migrate(logger: logger)
            try await Self.load(store)
            let built = try await QueryFieldIndexes(store: store).ensure(container: Self.container, environment: .development, logger: logger).built
            let scoreIndex = try XCTUnwrap(built.first { $0.fieldName == "score" }).indexName
            try await store.withConnection { connection in _ = try await connection.query("ANALYZE query_index.records", logger: logger) }
            let queries = QueryStore(store: store)
            for low in stride(from: 100, to: 900, by: 100) {
                let range = try Self.query(#"{"recordType":"Item","filterBy":[{"comparator":"GREATER_THAN_OR_EQUALS","fieldName":"score","fieldValue":{"value":\#(low)}},{"comparator":"LESS_THAN","fieldName":"score","fieldValue":{"value":\#(low + 50)}}],"sortBy":[{"fieldName":"score","ascending":true}]}"#)
                let page = try await queries.run(range, in: Self.database, scope: .zone("Z"), limit: 20, after: nil, logger: logger)
                let scores = try page.records.map { record -> Double in
                    switch record.record.fields["score"] {
                    case .int64(let value)?: Double(value)
                    case .double(let value)?: value
                    default: -1
                    }
                }
                XCTAssertEqual(scores.count, 20, "from \(low)")
                XCTAssertEqual(scores, scores.sorted(), "from \(low): in score order")
                XCTAssertTrue(scores.allSatisfy { $0 >= Double(low) && $0 < Double(low + 50) }, "from \(low): \(scores)")
                let tokens = try Self.query(#"{"recordType":"Item","filterBy":[{"comparator":"CONTAINS_ALL_TOKENS","fieldName":"title","fieldValue":{"value":"item"}},{"comparator":"EQUALS","fieldName":"score","fieldValue":{"value":\#(low)}}]}"#)
                _ = try await queries.run(tokens, in: Self.database, scope: .zone("Z"), limit: 20, after: nil, logger: logger)
            }
            let prepared = try await store.withConnection { connection in
                var rows: [(name: String, statement: String, generic: Int64, custom: Int64, parameters: Int)] = []
                for try await row in try await connection.query("""
                    SELECT name, statement, generic_plans, custom_plans, cardinality(parameter_types) FROM pg_prepared_statements
                    WHERE statement LIKE '%FROM query_index.records%'
                    """, logger: logger).decode((String, String, Int64, Int64, Int).self) {
                    rows.append(row)
                }
                return rows
            }
            XCTAssertFalse(prepared.contains { $0.statement.contains("search @@") }, "a token filter's query is planned at every call")
            XCTAssertEqual(prepared.count, 1, "one prepared text for the eight ranges: \(prepared.map(\.statement))")
            guard let range = prepared.first else { return }
            XCTAssertTrue(range.statement.contains("container = 'iCloud.fields'") && range.statement.contains("record_type = 'Item'"), range.statement)
            XCTAssertTrue(range.statement.contains("(record->'fields'->'score')"), range.statement)
            XCTAssertGreaterThan(range.generic, 0, "PostgreSQL settled on the generic plan")
            XCTAssertLessThanOrEqual(range.custom, 5, "the query is not planned at every call")
            // The generic plan (any values: NULLs) reads the field index in order.
            let plan: String = try await store.withConnection { connection in
                try await connection.query("SET plan_cache_mode = force_generic_plan", logger: logger)
                var lines: [String] = []
                let values = Array(repeating: "NULL", count: range.parameters).joined(separator: ", ")
                for try await line in try await connection.query(PostgresQuery(unsafeSQL: "EXPLAIN EXECUTE \(range.name)(\(values))"), logger: logger).decode(String.self) {
                    lines.append(line)
                }
                try await connection.query("RESET plan_cache_mode", logger: logger)
                return lines.joined(separator: "\n")
            }
            XCTAssertTrue(plan.contains("Index Scan using \(scoreIndex)"), plan)
            XCTAssertFalse(plan.contains("Sort"), plan)
        }
    }

    /// A name is written into a prepared query's text only when nothing in it can end or change
    /// the literal; any other name is bound (and its query planned at every call).
    func testOnlyPlainNamesAreWrittenAsLiterals() {
        XCTAssertEqual(SQLBuilder.literal("iCloud.fields"), "'iCloud.fields'")
        XCTAssertEqual(SQLBuilder.literal("é 漢字 %_;--"), "'é 漢字 %_;--'")
        for name in ["it's", "a\\b", "nul\u{0}", "'; DROP TABLE records; --"] {
            XCTAssertNil(SQLBuilder.literal(name), name)
        }
    }

    func testAnIndexAnInterruptedBuildLeftInvalidIsBuiltAgain() async throws {
        try await TestSupport.withMigratedStore { store, _ in
            try await Self.load(store, count: 500)
            let indexes = QueryFieldIndexes(store: store)
            let built = try await indexes.ensure(container: Self.container, environment: .development, logger: TestSupport.logger).built
            XCTAssertEqual(built.count, 2)
            // What a build cut short leaves: the catalog row and an index PostgreSQL marks invalid.
            try await store.withConnection { connection in
                _ = try await connection.query(PostgresQuery(unsafeSQL: """
                    UPDATE pg_index SET indisvalid = false
                    WHERE indexrelid = 'query_index.\(built[0].indexName)'::regclass
                    """), logger: TestSupport.logger)
            }
            let repaired = try await indexes.ensure(container: Self.container, environment: .development, logger: TestSupport.logger)
            XCTAssertEqual(repaired.built, [built[0]])
            XCTAssertEqual(repaired.kept, [built[1]])
            let validity = try await Self.valid(built[0].indexName, store)
            XCTAssertEqual(validity, true)
        }
    }

    /// The sort keys (`query_index.key`, migration 0022) give exactly the jsonb `to_jsonb` gives, for
    /// the extremes of a bigint and text that JSON must escape, and PostgreSQL inlines them: a plan
    /// shows the built-ins, never a call of the SQL function per row.
    func testSortKeysEqualToJSONBAndAreInlined() async throws {
        try await TestSupport.withMigratedStore { store, _ in
            try await store.withConnection { connection in
                let numbers: [Int64] = [.min, -1, 0, 1, 1_700_000_000_000, .max]
                let texts = ["", "plain", "quote \" and backslash \\", "tab\tnew line\ncontrol \u{01}", "é composed, e\u{301} decomposed", "emoji 🧭"]
                let rows = try await connection.query("""
                    SELECT bool_and(query_index.key(n) = to_jsonb(n) AND query_index.key(n)::text = to_jsonb(n)::text)
                        FROM unnest(\(numbers)::int8[]) AS n
                    UNION ALL
                    SELECT bool_and(query_index.key(t) = to_jsonb(t) AND query_index.key(t)::text = to_jsonb(t)::text)
                        FROM unnest(\(texts)::text[]) AS t
                    """, logger: TestSupport.logger)
                var results: [Bool] = []
                for try await same in rows.decode(Bool.self) { results.append(same) }
                XCTAssertEqual(results, [true, true])
                let plan = try await connection.query(
                    "EXPLAIN (VERBOSE) SELECT query_index.key(modified_at), query_index.key(record_name) FROM query_index.records",
                    logger: TestSupport.logger)
                var lines: [String] = []
                for try await line in plan.decode(String.self) { lines.append(line) }
                let text = lines.joined(separator: "\n")
                XCTAssertFalse(text.contains("key("), "the sort keys are inlined:\n\(text)")
                XCTAssertTrue(text.contains("jsonb_object"), text)
            }
        }
    }

    /// Development's schema with the flags, and `count` records of type Item in zone Z: scores as
    /// INT64 and DOUBLE, some as text, some missing; the same field in another type and another
    /// container, which the partial index must leave out.
    static func load(_ store: PostgresStore, count: Int = count) async throws {
        guard case .applied = try await SchemaStore(store: store).importSchema(
            try SchemaLanguage.parse(flagged), container: container, causation: Causation(requestID: "t"), logger: TestSupport.logger)
        else { throw TestSupport.MissingServer(description: "the schema import was refused") }
        try await store.withConnection { connection in
            try await connection.query("""
                INSERT INTO query_index.records (generation, container, environment, scope, owner, zone_name, record_name, record_type, version, created_at, modified_at, record)
                SELECT 1, CASE WHEN i % 10 = 9 THEN 'iCloud.other' ELSE \(container) END, 'development', 'private', '_u', 'Z', 'r' || i,
                    CASE WHEN i % 10 = 8 THEN 'Other' ELSE 'Item' END, i, 1700000000000 + i, 1700000000000 + i,
                    jsonb_build_object(
                        'recordName', 'r' || i, 'recordType', CASE WHEN i % 10 = 8 THEN 'Other' ELSE 'Item' END,
                        'changeTag', 't' || i, 'version', i, 'createdVersion', i,
                        'created', jsonb_build_object('timestamp', 1700000000000 + i, 'userRecordName', '_u'),
                        'modified', jsonb_build_object('timestamp', 1700000000000 + i, 'userRecordName', '_u'),
                        'fields', jsonb_build_object('title', jsonb_build_object('type', 'STRING', 'value', 'item ' || i))
                            || CASE
                                WHEN i % 50 = 0 THEN '{}'::jsonb
                                WHEN i % 50 = 1 THEN jsonb_build_object('score', jsonb_build_object('type', 'STRING', 'value', 'n' || (i % 7)))
                                WHEN i % 7 = 0 THEN jsonb_build_object('score', jsonb_build_object('type', 'DOUBLE', 'value', (i % 1000) + 0.5))
                                ELSE jsonb_build_object('score', jsonb_build_object('type', 'INT64', 'value', i % 1000))
                            END)
                FROM generate_series(1, \(count)) AS i
                """, logger: TestSupport.logger)
        }
    }

    static func query(_ text: String) throws -> RecordQuery {
        try RecordQuery.parse(try JSONDecoder().decode(JSONValue.self, from: Data(text.utf8)))
    }

    /// Every record a query answers, page after page of 100, by name.
    static func all(_ query: RecordQuery, _ queries: QueryStore) async throws -> [String] {
        var names: [String] = []
        var after: [JSONValue]?
        repeat {
            let page = try await queries.run(query, in: database, scope: .zone("Z"), limit: 100, after: after, logger: TestSupport.logger)
            names += page.rows.map(\.recordName)
            after = page.continuation
        } while after != nil
        return names
    }

    static func exists(_ index: String, _ store: PostgresStore) async throws -> Bool {
        try await valid(index, store) != nil
    }

    static func valid(_ index: String, _ store: PostgresStore) async throws -> Bool? {
        try await store.withConnection { connection in
            let rows = try await connection.query("""
                SELECT i.indisvalid FROM pg_class c JOIN pg_index i ON i.indexrelid = c.oid
                JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'query_index' AND c.relname = \(index)
                """, logger: TestSupport.logger)
            for try await valid in rows.decode(Bool.self) { return valid }
            return nil
        }
    }
}
