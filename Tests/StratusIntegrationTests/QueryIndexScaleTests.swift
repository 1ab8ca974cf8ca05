import Foundation
import PostgresNIO
import StratusCore
import StratusKafka
@testable import StratusPostgres
import StratusRelay
import StratusTesting
import StratusWorkers
import XCTest

/// The indexer under a burst of events (2,500 in the suite's smoke run, 50,000 with
/// `STRATUS_TEST_SCALE=full`), and the plans of the main query shapes on an index of 50,000 records
/// either way.
final class QueryIndexScaleTests: XCTestCase {
    /// The records the query plans are checked on.
    static let planned = 50_000

    func testIndexerAbsorbsABurstAndMainQueriesUseIndexes() async throws {
        let brokers = try TestSupport.kafkaBrokers()
        try await TestSupport.withMigratedStore { store, _ in
            let database = DatabaseID(container: "iCloud.scale", environment: .development, scope: .private, owner: "_u")
            let zoneID = ZoneID(zoneName: "Big", ownerRecordName: "_u")
            _ = try await ZoneStore(store: store).modify([.create(zoneID)], in: database, causation: Causation(requestID: "scale"), logger: TestSupport.logger)
            let zone = try await ZoneStore(store: store).lookup("Big", in: database, logger: TestSupport.logger)!
            let count = TestSupport.isFullScale ? Self.planned : 2_500
            // The burst: record.saved events written straight into the event log, as that many commits would have.
            try await store.withConnection { connection in
                try await connection.query("""
                    INSERT INTO events (zone_key, zone_sequence, type, schema_version, payload, causation)
                    SELECT \(zone.key.rawValue), 1 + i, 'record.saved', 1,
                        jsonb_build_object(
                            'database', jsonb_build_object('container', 'iCloud.scale', 'environment', 'development', 'scope', 'private', 'owner', '_u'),
                            'zoneID', jsonb_build_object('zoneName', 'Big', 'ownerRecordName', '_u'),
                            'zoneIncarnation', \(zone.incarnation.uuidString),
                            'record', jsonb_build_object(
                                'recordName', 'r' || i, 'recordType', CASE WHEN i % 2500 = 0 THEN 'Rare' ELSE 'Item' END, 'changeTag', 't' || i, 'version', 1 + i, 'createdVersion', 1 + i,
                                'created', jsonb_build_object('timestamp', 1700000000000 + i, 'userRecordName', '_u'),
                                'modified', jsonb_build_object('timestamp', 1700000000000 + i, 'userRecordName', '_u'),
                                'fields', jsonb_build_object(
                                    'n', jsonb_build_object('type', 'INT64', 'value', i % 1000),
                                    'title', jsonb_build_object('type', 'STRING', 'value', 'item ' || i || CASE WHEN i % 100 = 0 THEN ' rare' ELSE ' common' END))),
                            'changedFields', '[]'::jsonb),
                        '{"requestID": "scale"}'::jsonb
                    FROM generate_series(1, \(count)) AS i
                    """, logger: TestSupport.logger)
                try await connection.query("UPDATE zones SET change_counter = \(Int64(count + 1)) WHERE zone_name = 'Big'", logger: TestSupport.logger)
            }
            let topic = "scale-" + UUID().uuidString.prefix(8).lowercased()
            var relayConfiguration = RelayConfiguration()
            relayConfiguration.topic = topic
            relayConfiguration.partitions = 2
            relayConfiguration.batchSize = 2000
            var workerConfiguration = WorkerConfiguration()
            workerConfiguration.topic = topic
            workerConfiguration.consumerGroupSuffix = topic
            workerConfiguration.batchSize = 2000
            let kafka = KafkaClientConfiguration(brokers: brokers)
            let relay = Relay(store: store, kafka: kafka, configuration: relayConfiguration, logger: TestSupport.logger)
            let worker = Worker(projection: IndexerProjection(), store: store, kafka: kafka, configuration: workerConfiguration, logger: TestSupport.logger)
            let started = ContinuousClock.now
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { try await relay.run() }
                group.addTask { try await worker.run() }
                defer { group.cancelAll() }
                try await TestSupport.eventually(timeout: .seconds(400), "the indexer to absorb \(count) events") {
                    try await Self.indexed(store) == count
                }
            }
            let elapsed = ContinuousClock.now - started
            print("indexer burst: \(count) events published and indexed in \(elapsed) (\(Int(Double(count) / (elapsed / .seconds(1)))) events/s)")

            // A smoke run's index is copied up to the planned size (the copies differ only in name,
            // so every share of types and words stays as indexed) before the plans are read: they
            // depend on the table's size and statistics, not on how its rows came.
            let copies = Self.planned / count
            try await store.withConnection { connection in
                // One statement writes the whole copy and its index entries, and ANALYZE reads it:
                // longer, on a loaded machine, than the store's statement limit allows.
                try await connection.query("SET statement_timeout = 0", logger: TestSupport.logger)
                if copies > 1 {
                    // Every column as indexed but the name, listed from the catalog (so a column
                    // added later is copied too); a row rebuilt through JSON costs five times more.
                    var columns: [String] = []
                    for try await column in try await connection.query("""
                        SELECT attname::text FROM pg_attribute
                        WHERE attrelid = 'query_index.records'::regclass AND attnum > 0 AND NOT attisdropped ORDER BY attnum
                        """, logger: TestSupport.logger).decode(String.self) {
                        columns.append(column)
                    }
                    XCTAssertTrue(columns.contains("record_name"))
                    let quoted = columns.map { "\"\($0)\"" }
                    let values = columns.map { $0 == "record_name" ? "indexed.record_name || '-copy' || copy" : "indexed.\"\($0)\"" }
                    try await connection.query(PostgresQuery(unsafeSQL: """
                        INSERT INTO query_index.records (\(quoted.joined(separator: ", ")))
                        SELECT \(values.joined(separator: ", "))
                        FROM query_index.records AS indexed, generate_series(1, \(copies - 1)) AS copy
                        """), logger: TestSupport.logger)
                }
                _ = try await connection.query("ANALYZE query_index.records", logger: TestSupport.logger)
                try await connection.query("RESET statement_timeout", logger: TestSupport.logger)
            }
            let indexed = try await Self.indexed(store)
            XCTAssertEqual(indexed, Self.planned)
            let queries = QueryStore(store: store)
            let shapes: [(String, RecordQuery)] = [
                ("equality", try RecordQuery.parse(Self.json(#"{"recordType":"Item","filterBy":[{"comparator":"EQUALS","fieldName":"n","fieldValue":{"value":7}}]}"#))),
                ("full text", try RecordQuery.parse(Self.json(#"{"recordType":"Item","filterBy":[{"comparator":"CONTAINS_ALL_TOKENS","fieldName":"___all","fieldValue":{"value":"rare"}}]}"#))),
                ("field tokens", try RecordQuery.parse(Self.json(#"{"recordType":"Item","filterBy":[{"comparator":"CONTAINS_ALL_TOKENS","fieldName":"title","fieldValue":{"value":"rare"}}]}"#))),
                ("recent first", try RecordQuery.parse(Self.json(#"{"recordType":"Item","sortBy":[{"fieldName":"___modTime","ascending":false}]}"#))),
                // 20 records of a type among 50,000 of another in the zone: an index finds the type,
                // not a walk of the zone's names.
                ("a rare type, unsorted", try RecordQuery.parse(Self.json(#"{"recordType":"Rare"}"#))),
            ]
            for (name, query) in shapes {
                let plan = try await queries.explain(query, in: database, scope: .zone("Big"), limit: 50, logger: TestSupport.logger)
                print("plan for \(name):\n\(plan)\n")
                XCTAssertFalse(plan.contains("Seq Scan on records"), "\(name) must not scan the whole index:\n\(plan)")
                let page = try await queries.run(query, in: database, scope: .zone("Big"), limit: 50, after: nil, logger: TestSupport.logger)
                XCTAssertFalse(page.rows.isEmpty, name)
                if name == "a rare type, unsorted" {
                    XCTAssertEqual(page.rows.count, 20, name)
                    let condition = plan.split(separator: "\n").first { $0.contains("Index Cond") && $0.contains("record_type") }
                    XCTAssertNotNil(condition, "the rare type must be found through an index's condition on the type:\n\(plan)")
                }
            }
        }
    }

    static func json(_ text: String) throws -> JSONValue {
        try JSONDecoder().decode(JSONValue.self, from: Data(text.utf8))
    }

    static func indexedAny(_ store: PostgresStore) async throws -> Int {
        try await store.withConnection { connection in
            let rows = try await connection.query("SELECT count(*)::bigint FROM query_index.records", logger: TestSupport.logger)
            for try await count in rows.decode(Int64.self) { return Int(count) }
            return 0
        }
    }

    static func strings(_ store: PostgresStore, _ sql: String) async throws -> Set<String> {
        try await store.withConnection { connection in
            let rows = try await connection.query(PostgresQuery(unsafeSQL: sql), logger: TestSupport.logger)
            var values = Set<String>()
            for try await value in rows.decode(String.self) { values.insert(value) }
            return values
        }
    }

    static func indexed(_ store: PostgresStore) async throws -> Int {
        try await store.withConnection { connection in
            let rows = try await connection.query("SELECT count(*)::bigint FROM query_index.records WHERE NOT deleted", logger: TestSupport.logger)
            for try await count in rows.decode(Int64.self) { return Int(count) }
            return 0
        }
    }
}
