import Foundation
import PostgresNIO
import StratusCore
@testable import StratusPostgres
import StratusTesting
import StratusWorkers
import XCTest

/// The query index partitioned by generation (migration 0052, `QueryIndexPartitions`): a rebuild's
/// generation is loaded into a partition holding only its key, gets its indexes (field indexes
/// too) once loaded, and the retired generation's partition is dropped; a row written for a
/// generation whose partition has gone lands in the default partition and is cleared later.
final class QueryIndexPartitionTests: XCTestCase {
    static let database = QueryFieldIndexTests.database
    static let logger = TestSupport.logger

    func testARebuildLoadsItsPartitionWithTheKeyAloneIndexesItAfterwardsAndDropsTheRetiredOne() async throws {
        try await TestSupport.withMigratedStore { store, _ in
            let events = try await Self.saveRecords(store, count: 60)
            let applier = Applier(projection: IndexerProjection(), store: store)
            _ = try await applier.apply(batch: events, logger: Self.logger)
            let fieldIndexes = try await QueryFieldIndexes(store: store).ensure(
                container: QueryFieldIndexTests.container, environment: .development, logger: Self.logger)
            XCTAssertEqual(fieldIndexes.built.map(\.fieldName), ["score", "title"])
            let score = try XCTUnwrap(fieldIndexes.built.first { $0.fieldName == "score" })
            // Before any rebuild the live generation (1) is the default partition's, its field
            // indexes under the catalog's names.
            let partitionsAtFirst = try await Self.partitions(store)
            XCTAssertEqual(partitionsAtFirst, ["records_default"])
            let defaultIndexes = try await Self.indexes(on: "records_default", store)
            XCTAssertTrue(defaultIndexes.contains(score.indexName), "\(defaultIndexes)")
            let range = try QueryFieldIndexTests.query(
                #"{"recordType":"Item","filterBy":[{"comparator":"GREATER_THAN_OR_EQUALS","fieldName":"score","fieldValue":{"value":10}}],"sortBy":[{"fieldName":"score","ascending":true}]}"#)
            let queries = QueryStore(store: store)
            let answerBefore = try await QueryFieldIndexTests.all(range, queries)
            XCTAssertEqual(answerBefore.count, 50)

            // Begun: a partition of its own, with its key alone, which the load fills.
            let generations = QueryIndexGenerations(store: store)
            let generation = try await generations.begin(logger: Self.logger)
            let partition = "records_g\(generation)"
            let partitionsWhileBuilding = try await Self.partitions(store)
            XCTAssertEqual(partitionsWhileBuilding, ["records_default", partition])
            try await generations.apply(QueryIndexGenerations.Page(events), to: generation, logger: Self.logger)
            let whileLoading = try await Self.indexes(on: partition, store)
            XCTAssertEqual(whileLoading, ["\(partition)_pkey"], "the load keeps only the key up to date")
            let loaded = try await TestSupport.count(store, "SELECT count(*) FROM query_index.\(unescaped: partition) WHERE NOT deleted")
            XCTAssertEqual(loaded, 60)

            // Another zone's 6,000 rows, so reading zone Z through an index beats reading the table.
            try await store.withConnection { connection in
                try await connection.query("""
                    INSERT INTO query_index.records (generation, container, environment, scope, owner, zone_name, record_name, record_type, version, record)
                    SELECT \(generation), 'iCloud.fields', 'development', 'private', '_u', 'Big', 'b' || i, 'Item', 1,
                           jsonb_build_object('fields', jsonb_build_object('score', jsonb_build_object('type', 'INT64', 'value', i)))
                    FROM generate_series(1, 6000) AS i
                    """, logger: Self.logger)
            }
            // Finished: the common indexes and the catalog's field indexes, valid, and statistics.
            try await generations.finish(generation, logger: Self.logger)
            let finished = try await Self.indexes(on: partition, store)
            let scoreOnPartition = "\(score.indexName)_g\(generation)"
            XCTAssertEqual(Set(finished), Set([
                "\(partition)_pkey", "\(partition)_search", "\(partition)_fields", "\(partition)_modified", "\(partition)_created",
                scoreOnPartition, "\(try XCTUnwrap(fieldIndexes.built.last).indexName)_g\(generation)",
            ]))
            let invalid = try await TestSupport.count(store, """
                SELECT count(*) FROM pg_index WHERE indrelid = 'query_index.\(unescaped: partition)'::regclass AND NOT (indisvalid AND indisready)
                """)
            XCTAssertEqual(invalid, 0)
            let analysed = try await TestSupport.count(store, """
                SELECT analyze_count FROM pg_stat_user_tables WHERE relid = 'query_index.\(unescaped: partition)'::regclass
                """)
            XCTAssertGreaterThanOrEqual(analysed, 1, "the generation has statistics before it serves")

            // Swapped: the old generation's rows are gone from the default partition, and a query
            // reads the new partition's field index alone, with the same answer.
            try await generations.swap(to: generation, logger: Self.logger)
            let leftInDefault = try await TestSupport.count(store, "SELECT count(*) FROM query_index.records_default")
            XCTAssertEqual(leftInDefault, 0)
            let plan = try await queries.explain(range, in: Self.database, scope: .zone("Z"), limit: 100, logger: Self.logger)
            XCTAssertTrue(plan.contains(scoreOnPartition), "the range reads the generation's field index:\n\(plan)")
            XCTAssertFalse(plan.contains("records_default"), "only the live generation's partition is read:\n\(plan)")
            let answerAfter = try await QueryFieldIndexTests.all(range, queries)
            XCTAssertEqual(answerAfter, answerBefore)

            // A second rebuild, end to end: the first rebuild's partition is dropped.
            let (next, _) = try await Reindex(store: store).run(logger: Self.logger)
            let partitionsAfter = try await Self.partitions(store)
            XCTAssertEqual(partitionsAfter, ["records_default", "records_g\(next)"])
            let answerAgain = try await QueryFieldIndexTests.all(range, queries)
            XCTAssertEqual(answerAgain, answerBefore)

            // A field the schema no longer flags loses its index on the live generation's partition.
            guard case .applied = try await SchemaStore(store: store).importSchema(
                try SchemaLanguage.parse(QueryFieldIndexTests.unflagged), container: QueryFieldIndexTests.container,
                causation: Causation(requestID: "u"), logger: Self.logger)
            else { return XCTFail("the schema import was refused") }
            let changes = try await QueryFieldIndexes(store: store).ensure(
                container: QueryFieldIndexTests.container, environment: .development, logger: Self.logger)
            XCTAssertEqual(changes.dropped.map(\.fieldName), ["score"])
            let afterDrop = try await Self.indexes(on: "records_g\(next)", store)
            XCTAssertFalse(afterDrop.contains("\(score.indexName)_g\(next)"), "\(afterDrop)")
            XCTAssertTrue(afterDrop.contains("\(try XCTUnwrap(fieldIndexes.built.last).indexName)_g\(next)"), "\(afterDrop)")
        }
    }

    /// A row written for a generation whose partition was dropped (a writer whose snapshot
    /// predates the swap) lands in the default partition instead of failing, and the next drop of
    /// retired generations clears it; an abandoned generation's partition goes, and its number is
    /// not given again while its partition is still there.
    func testAStrayRowOfADroppedGenerationLandsInTheDefaultPartitionAndIsCleared() async throws {
        try await TestSupport.withMigratedStore { store, _ in
            let generations = QueryIndexGenerations(store: store)
            let (rebuilt, _) = try await Reindex(store: store).run(logger: Self.logger)
            XCTAssertEqual(rebuilt, 2)
            // Generation 1 was retired: a late write for it goes to the default partition.
            let landed: String = try await store.withConnection { connection in
                let rows = try await connection.query("""
                    INSERT INTO query_index.records (generation, container, environment, scope, owner, zone_name, record_name, record_type, version)
                    VALUES (1, 'iCloud.fields', 'development', 'private', '_u', 'Z', 'late', 'Item', 1)
                    RETURNING tableoid::regclass::text
                    """, logger: Self.logger)
                for try await name in rows.decode(String.self) { return name }
                return ""
            }
            XCTAssertEqual(landed, "query_index.records_default")

            // A generation begun then abandoned: its partition goes, and the stray with it.
            let abandoned = try await generations.begin(logger: Self.logger)
            XCTAssertEqual(abandoned, 3)
            try await generations.abandon(abandoned, logger: Self.logger)
            let partitions = try await Self.partitions(store)
            XCTAssertEqual(partitions, ["records_default", "records_g2"])
            let strays = try await TestSupport.count(store, "SELECT count(*) FROM query_index.records_default")
            XCTAssertEqual(strays, 0)

            // A partition left behind (its generation's row gone, as a replay's reset leaves it)
            // keeps its number from being given again.
            let leftBehind = try await generations.begin(logger: Self.logger)
            XCTAssertEqual(leftBehind, 3, "an abandoned generation's number comes again once its partition is gone")
            try await store.withConnection { connection in
                _ = try await connection.query("DELETE FROM query_index.generations WHERE state = 'building'", logger: Self.logger)
            }
            let numbered = try await generations.begin(logger: Self.logger)
            XCTAssertEqual(numbered, 4, "generation 3's partition was still there")
            try await generations.abandon(numbered, logger: Self.logger)
            let cleared = try await Self.partitions(store)
            XCTAssertEqual(cleared, ["records_default", "records_g2"], "the left-behind partition went with the next drop")
        }
    }

    /// Saves `count` records of `QueryFieldIndexTests`'s flagged schema in zone Z; returns the log.
    static func saveRecords(_ store: PostgresStore, count: Int) async throws -> [EventEnvelope] {
        guard case .applied = try await SchemaStore(store: store).importSchema(
            try SchemaLanguage.parse(QueryFieldIndexTests.flagged), container: QueryFieldIndexTests.container,
            causation: Causation(requestID: "s"), logger: logger)
        else { throw TestSupport.MissingServer(description: "the schema import was refused") }
        let zone = ZoneID(zoneName: "Z", ownerRecordName: database.owner)
        _ = try await ZoneStore(store: store).modify([.create(zone)], in: database, causation: Causation(requestID: "z"), logger: logger)
        let commands = (0..<count).map { index in
            RecordStore.Command(type: .create, input: RecordInput(
                recordName: "r\(index)", recordType: "Item", fields: ["score": .int64(Int64(index)), "title": .string("item \(index)")]))
        }
        _ = try await RecordStore(store: store).modify(
            commands, zone: zone, in: database, atomic: true, causation: Causation(requestID: "r"), deviceID: nil, logger: logger)
        return try await EventLog(store: store).events(after: 0, limit: 10_000, logger: logger)
    }

    /// The query index's partitions, by name.
    static func partitions(_ store: PostgresStore) async throws -> [String] {
        try await Self.strings(store, """
            SELECT c.relname::text FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
            WHERE i.inhparent = 'query_index.records'::regclass ORDER BY c.relname
            """)
    }

    /// The indexes of one partition, by name.
    static func indexes(on partition: String, _ store: PostgresStore) async throws -> [String] {
        try await Self.strings(store, """
            SELECT indexrelid::regclass::text FROM pg_index WHERE indrelid = ('query_index.' || \(partition))::regclass ORDER BY 1
            """).map { $0.replacingOccurrences(of: "query_index.", with: "") }
    }

    static func strings(_ store: PostgresStore, _ query: PostgresQuery) async throws -> [String] {
        try await store.withConnection { connection in
            var values: [String] = []
            for try await value in try await connection.query(query, logger: logger).decode(String.self) { values.append(value) }
            return values
        }
    }
}
