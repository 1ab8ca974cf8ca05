import Foundation
import PostgresNIO
import StratusCore
@testable import StratusPostgres
import StratusRuntime
import StratusTesting
import StratusWorkers
import XCTest

/// A worker's keeper of planner statistics (real PostgreSQL): a table is analysed once the rows
/// written reach the threshold, again only once it has grown by the policy's share, never while
/// something else holds it, and a burst of writes is followed by an analysis with no further call.
final class PlannerStatisticsTests: XCTestCase {
    static let logger = TestSupport.logger

    /// The table's row count as PostgreSQL's planner knows it; -1 before its first analysis.
    static func plannedRows(_ table: String, _ store: PostgresStore) async throws -> Double {
        try await store.withConnection { connection in
            let rows = try await connection.query("SELECT reltuples::float8 FROM pg_class WHERE oid = to_regclass(\(table))", logger: logger)
            var count = -2.0
            for try await value in rows.decode(Double.self) { count = value }
            return count
        }
    }

    /// Waits (bounded) until `table` was analysed by a statement, not by autovacuum (whose
    /// analyses are counted apart), with at least `rows` rows.
    static func waitForAnAnalysis(of table: String, withRows rows: Double, _ store: PostgresStore) async throws {
        try await TestSupport.eventually(timeout: .seconds(60), "a worker to analyse \(table)") {
            try await store.withConnection { connection in
                let found = try await connection.query(
                    "SELECT analyze_count, (SELECT reltuples::float8 FROM pg_class WHERE oid = relid) FROM pg_stat_user_tables WHERE relid = to_regclass(\(table))",
                    logger: logger)
                for try await (count, planned) in found.decode((Int64, Double).self) where count >= 1 && planned >= rows { return true }
                return false
            }
        }
    }

    static func insert(_ count: Int, into table: String, _ store: PostgresStore) async throws {
        try await store.withConnection { connection in
            _ = try await connection.query(PostgresQuery(unsafeSQL: "INSERT INTO \(table) SELECT generate_series(1, \(count))"), logger: logger)
        }
    }

    /// A new table that only the keeper analyses (autovacuum never runs on it), and its keeper.
    static func keeper(of table: String, _ store: PostgresStore, minimumChanges: Int, _ adjust: (inout PlannerStatistics.Policy) -> Void = { _ in }) async throws -> PlannerStatistics {
        try await store.withConnection { connection in
            _ = try await connection.query(PostgresQuery(unsafeSQL: "CREATE TABLE \(table) (n integer)"), logger: logger)
            _ = try await connection.query(PostgresQuery(unsafeSQL: "ALTER TABLE \(table) SET (autovacuum_enabled = false)"), logger: logger)
        }
        var policy = PlannerStatistics.Policy()
        policy.minimumChanges = minimumChanges
        adjust(&policy)
        return PlannerStatistics(table: table, policy: policy)
    }

    func testATableIsAnalysedAtTheThresholdAndAgainOnlyOnceItHasGrown() async throws {
        try await TestSupport.withMigratedStore { store, _ in
            let keeper = try await Self.keeper(of: "burst", store, minimumChanges: 100) { $0.growth = 1.0 }

            /// Writes `rows` rows and tells the keeper; whether it then analysed, and the rows planned.
            func write(_ rows: Int) async throws -> (analysed: Bool, planned: Double) {
                try await Self.insert(rows, into: "burst", store)
                keeper.wrote(rows)
                let analysed = await keeper.analyseIfDue(store: store, logger: Self.logger)
                return (analysed, try await Self.plannedRows("burst", store))
            }
            var step = try await write(50)
            XCTAssertFalse(step.analysed, "50 rows are below the threshold")
            XCTAssertEqual(step.planned, -1, "never analysed")

            step = try await write(100)
            XCTAssertTrue(step.analysed)
            XCTAssertEqual(step.planned, 150, "analysed with every row written")

            // The next analysis waits for 100 + 1.0 × 150 rows.
            step = try await write(200)
            XCTAssertFalse(step.analysed, "200 rows are below 250")
            XCTAssertEqual(step.planned, 150)
            step = try await write(50)
            XCTAssertTrue(step.analysed, "250 rows reach it")
            XCTAssertEqual(step.planned, 400)
            XCTAssertEqual(keeper.analysesRun, 2)

            // A table that is gone is no error.
            let gone = PlannerStatistics(table: "no_such_table")
            gone.wrote(1_000)
            let analysedGone = await gone.analyseIfDue(store: store, logger: Self.logger)
            XCTAssertFalse(analysedGone)
        }
    }

    /// Autovacuum (or an index build) holding the table: the analysis gives up within its lock
    /// wait instead of queueing behind it, and runs once the table is free.
    func testAnAnalysisGivesWayToWhateverHoldsTheTable() async throws {
        try await TestSupport.withMigratedStore { store, _ in
            let keeper = try await Self.keeper(of: "held", store, minimumChanges: 10) { $0.lockWait = .milliseconds(50) }
            try await Self.insert(20, into: "held", store)
            keeper.wrote(20)

            let started = ContinuousClock.now
            let whileHeld = try await store.readCommitted(logger: Self.logger) { transaction in
                // What an analysis (autovacuum's too) or CREATE INDEX CONCURRENTLY takes.
                try await transaction.connection.query("LOCK TABLE held IN SHARE UPDATE EXCLUSIVE MODE", logger: Self.logger)
                return await keeper.analyseIfDue(store: store, logger: Self.logger)
            }
            XCTAssertFalse(whileHeld, "the table was held")
            XCTAssertLessThan(ContinuousClock.now - started, .seconds(5), "it gave up instead of waiting")
            var planned = try await Self.plannedRows("held", store)
            XCTAssertEqual(planned, -1)

            let afterwards = await keeper.analyseIfDue(store: store, logger: Self.logger)
            XCTAssertTrue(afterwards, "the rows still count once the table is free")
            planned = try await Self.plannedRows("held", store)
            XCTAssertEqual(planned, 20)
        }
    }

    /// `keep` analyses after a burst with nobody asking, and ends when stopped.
    func testABurstIsFollowedByAnAnalysisWithNoFurtherCall() async throws {
        try await TestSupport.withMigratedStore { store, _ in
            let keeper = try await Self.keeper(of: "kept", store, minimumChanges: 100) { $0.settle = .milliseconds(20) }
            let keeping = Task { await keeper.keep(store: store, logger: Self.logger) }
            for _ in 0..<3 {
                try await Self.insert(40, into: "kept", store)
                keeper.wrote(40)
            }
            // The keeper counts its analysis once the analysis has committed, a moment after the
            // table's statistics show it: wait for both, then hold the count to exactly one.
            try await TestSupport.eventually(timeout: .seconds(30), "the burst's table analysed") {
                try await Self.plannedRows("kept", store) == 120 && keeper.analysesRun >= 1
            }
            XCTAssertEqual(keeper.analysesRun, 1)
            keeper.stop()
            await keeping.value
        }
    }

    /// What no statement is planned with carries no statistics (migration 0052): an analysis of
    /// `records` and of the query index skips the record's fields, its wire head and the index's copy
    /// of the record, and the sort keys of the index's partial indexes (field indexes built later
    /// too), and keeps every other column's and the fields' GIN expression's, which plans containment.
    func testAnAnalysisLeavesOutWhatNoStatementIsPlannedWith() async throws {
        try await TestSupport.withMigratedStore { store, _ in
            let database = DatabaseID(container: "iCloud.test", environment: .development, scope: .private, owner: "_alice")
            guard case .applied = try await SchemaStore(store: store).importSchema(
                try SchemaLanguage.parse("DEFINE SCHEMA RECORD TYPE Note (title STRING QUERYABLE, n INT64 QUERYABLE SORTABLE);"),
                container: database.container, causation: Causation(requestID: "s"), logger: Self.logger)
            else { return XCTFail("the schema import was refused") }
            let fieldIndexes = try await QueryFieldIndexes(store: store).ensure(
                container: database.container, environment: .development, logger: Self.logger)
            XCTAssertEqual(fieldIndexes.built.map(\.fieldName), ["n", "title"])
            let zone = ZoneID(zoneName: "Analysed", ownerRecordName: "_alice")
            _ = try await ZoneStore(store: store).modify([.create(zone)], in: database, causation: Causation(requestID: "z"), logger: Self.logger)
            let commands = (0..<50).map { index in
                RecordStore.Command(type: .create, input: RecordInput(
                    recordName: "r\(index)", recordType: "Note", fields: ["title": .string("note \(index)"), "n": .int64(Int64(index))]))
            }
            _ = try await RecordStore(store: store).modify(
                commands, zone: zone, in: database, atomic: true, causation: Causation(requestID: "r"), deviceID: nil, logger: Self.logger)
            let events = try await EventLog(store: store).events(after: 0, limit: 1_000, logger: Self.logger)
            _ = try await Applier(projection: IndexerProjection(), store: store).apply(batch: events, logger: Self.logger)
            try await store.withConnection { connection in
                _ = try await connection.query("ANALYZE records", logger: Self.logger)
                _ = try await connection.query("ANALYZE query_index.records", logger: Self.logger)
            }
            func analysed(_ schema: String, _ table: String) async throws -> Set<String> {
                try await store.withConnection { connection in
                    var columns: Set<String> = []
                    let rows = try await connection.query(
                        "SELECT attname::text FROM pg_stats WHERE schemaname = \(schema) AND tablename = \(table)", logger: Self.logger)
                    for try await column in rows.decode(String.self) { columns.insert(column) }
                    return columns
                }
            }
            let records = try await analysed("public", "records")
            XCTAssertTrue(records.isSuperset(of: ["owner", "zone_name", "record_name", "version", "expires_at"]), "\(records.sorted())")
            XCTAssertTrue(records.isDisjoint(with: ["fields", "wire_head"]), "\(records.sorted())")
            let index = try await analysed("query_index", "records")
            XCTAssertTrue(index.isSuperset(of: ["owner", "zone_name", "record_name", "record_type", "search"]), "\(index.sorted())")
            XCTAssertFalse(index.contains("record"), "\(index.sorted())")
            // The partial indexes' sort keys: none; the fields' GIN expression (no predicate): kept.
            for partial in ["query_index_records_modified", "query_index_records_created"] + fieldIndexes.built.map(\.indexName) {
                let keys = try await analysed("query_index", partial)
                XCTAssertEqual(keys, [], "\(partial): \(keys.sorted())")
            }
            let containment = try await analysed("query_index", "query_index_records_fields")
            XCTAssertFalse(containment.isEmpty, "the fields' GIN expression keeps its statistics")
        }
    }

    /// Migration 0052 on a database that already has field indexes: theirs and the order indexes'
    /// sort keys, and the documents, are left out of the statistics from then on.
    func testTheMigrationLeavesOutTheSortKeysOfFieldIndexesBuiltBeforeIt() async throws {
        let url = try await TestSupport.createDatabase()
        let migrations = try TestSupport.migrations()
        try await TestSupport.withStore(url: url) { store in
            try await Migrator(store: store, migrations: migrations.filter { $0.version < 52 }).migrate(logger: Self.logger)
            guard case .applied = try await SchemaStore(store: store).importSchema(
                try SchemaLanguage.parse("DEFINE SCHEMA RECORD TYPE Note (n INT64 QUERYABLE SORTABLE);"),
                container: "iCloud.test", causation: Causation(requestID: "s"), logger: Self.logger)
            else { return XCTFail("the schema import was refused") }
            let built = try await QueryFieldIndexes(store: store).ensure(container: "iCloud.test", environment: .development, logger: Self.logger).built
            let fieldIndex = try XCTUnwrap(built.first).indexName
            func targets(_ relation: String) async throws -> [Int: Int] {
                try await store.withConnection { connection in
                    var targets: [Int: Int] = [:]
                    let rows = try await connection.query(
                        "SELECT attnum::int, attstattarget::int FROM pg_attribute WHERE attrelid = \(relation)::regclass AND attnum > 0",
                        logger: Self.logger)
                    for try await (column, target) in rows.decode((Int, Int).self) { targets[column] = target }
                    return targets
                }
            }
            // As an index built before the migration has them.
            try await store.withConnection { connection in
                _ = try await connection.query(PostgresQuery(unsafeSQL: """
                    ALTER INDEX query_index.\(fieldIndex) ALTER COLUMN 5 SET STATISTICS -1, ALTER COLUMN 6 SET STATISTICS -1, ALTER COLUMN 7 SET STATISTICS -1
                    """), logger: Self.logger)
            }
            let before = try await targets("query_index.\(fieldIndex)")
            XCTAssertEqual(before[5], -1)

            try await Migrator(store: store, migrations: migrations).migrate(logger: Self.logger)
            let field = try await targets("query_index.\(fieldIndex)")
            XCTAssertEqual([field[5], field[6], field[7]], [0, 0, 0], "\(field)")
            XCTAssertEqual(field[1], -1, "a key column keeps the default")
            let modified = try await targets("query_index.query_index_records_modified")
            XCTAssertEqual([modified[8], modified[9], modified[10]], [0, 0, 0], "\(modified)")
            let created = try await targets("query_index.query_index_records_created")
            XCTAssertEqual([created[8], created[9], created[10]], [0, 0, 0], "\(created)")
            let documents = try await TestSupport.count(store, """
                SELECT count(*) FROM pg_attribute WHERE attstattarget = 0 AND ((attrelid = 'records'::regclass AND attname IN ('fields', 'wire_head'))
                    OR (attrelid = 'query_index.records'::regclass AND attname = 'record'))
                """)
            XCTAssertEqual(documents, 3)
        }
    }

    /// stratus-gc, which sees every record write, analyses the records table after a load (its
    /// projection names the table): end to end, counting manual analyses only.
    func testALoadOfRecordsLeavesTheRecordsTableAnalysedByStratusGC() async throws {
        let gc = try XCTUnwrap(StratusProcess.projection(named: "stratus-gc"))
        XCTAssertEqual(gc.statisticsTable, "records")
        XCTAssertEqual(StratusProcess.projection(named: "stratus-indexer")?.statisticsTable, "query_index.records")
        try await APIPipelineFixture.withStack(projection: gc, pipeline: true) { fixture, client, _ in
            // Only the keeper analyses the table here: autovacuum, when a loaded machine lets it come
            // first, would leave the keeper rightly nothing to do (its statistics would be fresh).
            try await fixture.store.withConnection { connection in
                _ = try await connection.query("ALTER TABLE records SET (autovacuum_enabled = false)", logger: Self.logger)
            }
            try await RecordAPITests.createZone(client, fixture, "Load")
            for batch in 0..<6 {
                let (status, reply) = try await RecordAPITests.modify(client, fixture, zone: "Load", (0..<200).map {
                    ["operationType": "create", "record": RecordAPITests.note("r\(batch)-\($0)", ["n": ["value": $0]], type: "Item")]
                })
                XCTAssertEqual(status, 200, "\(reply)")
            }
            try await Self.waitForAnAnalysis(of: "records", withRows: 1_000, fixture.store)
        }
    }
}
