import Foundation
import Logging
import PostgresNIO
import StratusCore
import StratusConnections
@testable import StratusPostgres
import StratusTesting
import XCTest

/// The hot read statements run prepared (`PreparedStatements`), against the real PostgreSQL.
final class PreparedStatementTests: XCTestCase {
    /// Runs `body` with a one-connection store on a fresh database, so every call meets the same
    /// connection and what it prepared.
    private func withOneConnection<T: Sendable>(
        capacity: Int = 256, timeouts: PostgresStore.Timeouts = .init(), _ body: @Sendable (PostgresStore, String) async throws -> T
    ) async throws -> T {
        let url = try await TestSupport.createDatabase()
        let store = try PostgresStore(url: url, maxConnections: 1, timeouts: timeouts, preparedStatements: capacity, logger: TestSupport.logger)
        return try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await store.run() }
            defer { group.cancelAll() }
            return try await body(store, url)
        }
    }

    /// Migrates the store's database and creates `_alice`'s zone Notes; with a write of Note records
    /// there (one atomic request; a failed write fails the test).
    private static func notesZone(
        _ store: PostgresStore
    ) async throws -> (DatabaseID, ZoneID, @Sendable (RecordOperationType, [String]) async throws -> Void) {
        let logger = TestSupport.logger
        try await Migrator(store: store, migrations: try TestSupport.migrations()).migrate(logger: logger)
        let database = DatabaseID(container: "iCloud.test", environment: .development, scope: .private, owner: "_alice")
        let zone = ZoneID(zoneName: "Notes", ownerRecordName: "_alice")
        _ = try await ZoneStore(store: store).modify([.create(zone)], in: database, causation: Causation(requestID: "z"), logger: logger)
        let records = RecordStore(store: store)
        return (database, zone, { type, names in
            let outcomes = try await records.modify(
                names.map { RecordStore.Command(type: type, input: RecordInput(recordName: $0, recordType: "Note", fields: ["n": .int64(1)])) },
                zone: zone, in: database, atomic: true, causation: Causation(requestID: "w"), deviceID: nil, logger: logger)
            for outcome in outcomes { guard case .success = outcome else { return XCTFail("the write failed: \(outcomes)") } }
        })
    }

    /// The statements the store's one connection has prepared, by name: each one's text and how
    /// many generic and custom plans PostgreSQL made for it.
    private static func prepared(_ store: PostgresStore) async throws -> [(name: String, statement: String, generic: Int64, custom: Int64)] {
        try await store.withConnection { connection in
            var rows: [(String, String, Int64, Int64)] = []
            for try await row in try await connection.query(
                "SELECT name, statement, generic_plans, custom_plans FROM pg_prepared_statements ORDER BY name", logger: TestSupport.logger
            ).decode((String, String, Int64, Int64).self) {
                rows.append(row)
            }
            return rows
        }
    }

    /// The names of the statements the store's one connection has prepared.
    private static func preparedNames(_ store: PostgresStore) async throws -> [String] {
        try await prepared(store).map(\.name)
    }

    func testAStatementIsPreparedOnceAndAnswersAsUnprepared() async throws {
        try await withOneConnection { store, _ in
            let statements = store.statements
            // A sum is numeric: the bound int8 must be sent as int8 (PostgreSQL told so when the
            // statement is prepared), not read as a numeric's bytes.
            func run(_ limit: Int64, _ label: String?) async throws -> [String] {
                try await store.withConnection { connection in
                    var answers: [String] = []
                    let rows = try await connection.query("""
                        SELECT n::text || coalesce(\(label), '-') FROM generate_series(1, 5) AS n
                        WHERE (SELECT sum(m::numeric) FROM generate_series(1, n) AS m) <= \(limit)
                        ORDER BY n
                        """, preparedIn: statements, logger: TestSupport.logger)
                    for try await answer in rows.decode(String.self) { answers.append(answer) }
                    return answers
                }
            }
            // The first call binds a null: PostgreSQL infers its type from where it is used.
            let first = try await run(6, nil)
            XCTAssertEqual(first, ["1-", "2-", "3-"])
            let names = try await Self.preparedNames(store)
            XCTAssertEqual(names.count, 1, "the statement is prepared on the connection")
            for _ in 0..<7 {
                let later = try await run(10, "x")
                XCTAssertEqual(later, ["1x", "2x", "3x", "4x"])
            }
            let namesAfter = try await Self.preparedNames(store)
            XCTAssertEqual(namesAfter, names, "later calls reuse the statement: no new one is prepared")
            XCTAssertEqual(statements.count, 1)
        }
    }

    func testTextsPastTheCapacityRunUnprepared() async throws {
        try await withOneConnection(capacity: 1) { store, _ in
            let statements = store.statements
            for value in [1, 2, 3] {
                let answer = try await store.withConnection { connection in
                    let text = "SELECT \(value) + $1::int8"
                    let rows = try await connection.query(
                        PostgresQuery(unsafeSQL: text, binds: { var b = PostgresBindings(); b.append(Int64(10)); return b }()),
                        preparedIn: statements, logger: TestSupport.logger)
                    var result: Int64?
                    for try await sum in rows.decode(Int64.self) { result = sum }
                    return result
                }
                XCTAssertEqual(answer, Int64(10 + value))
            }
            let names = try await Self.preparedNames(store)
            XCTAssertEqual(names.count, 1, "only the first text is prepared")
            XCTAssertEqual(statements.count, 1)
        }
    }

    func testAPreparationThatFailedIsTriedAgainUnderANewName() async throws {
        var timeouts = PostgresStore.Timeouts()
        timeouts.lock = .milliseconds(200)
        try await withOneConnection(timeouts: timeouts) { store, url in
            try await store.withConnection { connection in
                try await connection.query("CREATE TABLE items (id int8 PRIMARY KEY)", logger: TestSupport.logger)
                try await connection.query("INSERT INTO items VALUES (1), (2)", logger: TestSupport.logger)
            }
            let statements = store.statements
            @Sendable func count() async throws -> Int64? {
                try await store.withConnection { connection in
                    let rows = try await connection.query(
                        "SELECT count(*) FROM items WHERE id >= \(Int64(1))", preparedIn: statements, logger: TestSupport.logger)
                    var result: Int64?
                    for try await value in rows.decode(Int64.self) { result = value }
                    return result
                }
            }
            // Another session holds the table while the statement is first prepared: its parse
            // waits for the lock and gives up.
            try await TestSupport.withStore(url: url) { other in
                try await other.withConnection { holder in
                    try await holder.query("BEGIN", logger: TestSupport.logger)
                    try await holder.query("LOCK TABLE items IN ACCESS EXCLUSIVE MODE", logger: TestSupport.logger)
                    do {
                        _ = try await count()
                        XCTFail("the statement cannot be prepared while the table is locked")
                    } catch {
                        // The lock timeout, as a client sees it.
                        XCTAssertEqual((error as? StratusError)?.code, .tryAgainLater, "\(error)")
                    }
                    try await holder.query("ROLLBACK", logger: TestSupport.logger)
                }
            }
            // The client library keeps the failed preparation's error for its name on this
            // connection; under a new name the same text prepares and answers.
            let answer = try await count()
            XCTAssertEqual(answer, 2)
            let again = try await count()
            XCTAssertEqual(again, 2)
        }
    }

    func testTheConfigurationTurnsPreparationOff() async throws {
        try await withOneConnection(capacity: 0) { store, _ in
            let statements = store.statements
            let answer = try await store.withConnection { connection in
                var result: Int64?
                for try await value in try await connection.query("SELECT \(Int64(41)) + 1", preparedIn: statements, logger: TestSupport.logger)
                    .decode(Int64.self) {
                    result = value
                }
                return result
            }
            XCTAssertEqual(answer, 42)
            let names = try await Self.preparedNames(store)
            XCTAssertEqual(names, [])
        }
    }

    /// Writes and workers prepare their statements inside their transactions. One first prepared
    /// after an earlier statement of its transaction failed is refused for that reason alone
    /// (25P02); the client library would keep that refusal for the name on the connection, so the
    /// name moves and the next transaction prepares the text afresh.
    func testAStatementFirstPreparedInAFailedTransactionIsPreparedAgainInTheNext() async throws {
        try await withOneConnection { store, _ in
            @Sendable func answer(afterAFailure: Bool) async throws -> Int64 {
                try await store.serializable(logger: TestSupport.logger) { transaction in
                    if afterAFailure { _ = try? await transaction.connection.query("SELECT 1 / \(Int64(0))", logger: TestSupport.logger) }
                    var result: Int64 = 0
                    for try await value in try await transaction.prepared("SELECT \(Int64(41)) + 1").decode(Int64.self) { result = value }
                    return result
                }
            }
            do {
                _ = try await answer(afterAFailure: true)
                XCTFail("a statement after a failed one in its transaction is refused")
            } catch {
                XCTAssertEqual(PostgresErrors.sqlState(error), "25P02", "\(error)")
            }
            let first = try await answer(afterAFailure: false)
            XCTAssertEqual(first, 42)
            let second = try await answer(afterAFailure: false)
            XCTAssertEqual(second, 42)
        }
    }

    /// The per-call statements of a write (the zone's row read and written, the schema's read, the
    /// events appended) and of a worker's apply (its checkpoint moved) run prepared.
    func testAWritesAndAWorkersPerCallStatementsArePrepared() async throws {
        try await TestSupport.withMigratedStore { store, _ in
            let database = DatabaseID(container: "iCloud.test", environment: .development, scope: .private, owner: "_alice")
            let zone = ZoneID(zoneName: "Notes", ownerRecordName: "_alice")
            _ = try await ZoneStore(store: store).modify([.create(zone)], in: database, causation: Causation(requestID: "z"), logger: TestSupport.logger)
            let beforeSaves = store.statements.texts
            for name in ["a", "b"] {
                let outcomes = try await RecordStore(store: store).modify(
                    [RecordStore.Command(type: .create, input: RecordInput(recordName: name, recordType: "Note", fields: ["n": .int64(1)]))],
                    zone: zone, in: database, atomic: true, causation: Causation(requestID: name), deviceID: nil, logger: TestSupport.logger)
                guard case .success = outcomes.first else { return XCTFail("the write failed: \(outcomes)") }
            }
            let events = try await EventLog(store: store).events(after: 0, limit: 10, logger: TestSupport.logger)
            guard let last = events.last, let sequence = last.zoneSequence else { return XCTFail("no zone event") }
            let previous = try await store.serializable(logger: TestSupport.logger) { transaction in
                try await CheckpointStore.advance(worker: "stratus-indexer", zoneKey: last.zoneKey, to: sequence, eventID: last.id, in: transaction)
            }
            XCTAssertEqual(previous, 0)
            let texts = store.statements.texts
            for fragment in [
                "SELECT incarnation, change_counter", "UPDATE zones SET change_counter", "INSERT INTO events",
                "FROM schema_fields AS f", "WITH previous AS",
            ] {
                XCTAssertTrue(texts.contains { $0.contains(fragment) }, "not prepared: \(fragment)")
            }
            // The zone's row, the record's and the schema are read in one round trip.
            XCTAssertTrue(texts.contains { $0.contains("FROM zones") && $0.contains("FROM records") && $0.contains("FROM schema_fields AS f") })
            XCTAssertFalse(texts.contains { $0.hasPrefix("SELECT EXISTS (SELECT 1 FROM schema_environments") }, "the schema was read in a statement of its own")
            // The zone's counter moves in the statement that appends its events: one round trip.
            XCTAssertTrue(texts.contains { $0.contains("INSERT INTO events") && $0.contains("UPDATE zones SET change_counter") })
            XCTAssertFalse(texts.contains { $0.hasPrefix("UPDATE zones SET change_counter") }, "the counter moved in a statement of its own")
            // And a save's rows, its events and the counter are written in one: the transaction's
            // statements are the opening read and that write.
            XCTAssertTrue(texts.contains { $0.contains("INSERT INTO records") && $0.contains("INSERT INTO events") && $0.contains("UPDATE zones SET change_counter") })
            XCTAssertFalse(texts.subtracting(beforeSaves).contains { $0.hasPrefix("WITH appended AS") }, "a save's events were appended in a statement of their own")
            let counter: Int64? = try await store.withConnection { connection in
                for try await value in try await connection.query(
                    "SELECT change_counter FROM zones WHERE owner = '_alice' AND zone_name = 'Notes'", logger: TestSupport.logger).decode(Int64.self) {
                    return value
                }
                return nil
            }
            XCTAssertEqual(counter, sequence)
        }
    }

    /// A write or a lookup of one record names one row by its primary key (`record_name = $n`): its
    /// statements run prepared, PostgreSQL settles on their generic plans, and the generic plan
    /// reads the primary key on a table too young to have statistics. Several records' statements
    /// (`record_name = ANY($n)`, whose generic plan guesses the list's length) are not prepared.
    func testOneRecordsWriteAndLookupRunPreparedOnGenericPlansThatReadThePrimaryKey() async throws {
        try await withOneConnection { store, _ in
            let logger = TestSupport.logger
            let (database, zone, write) = try await Self.notesZone(store)
            let records = RecordStore(store: store)
            for index in 0..<8 {
                try await write(.create, ["r\(index)"])
                try await write(.forceUpdate, ["r\(index)"])
                let found = try await records.lookupStored(["r\(index)"], zone: zone, in: database, logger: logger)
                XCTAssertEqual(found?.count, 1)
            }
            try await write(.create, ["several-a", "several-b"])
            try await write(.forceUpdate, ["several-a", "several-b"])

            let prepared = try await Self.prepared(store)
            for fragments in [["WITH buried AS"], ["FROM records", "FOR UPDATE"], ["zone.present"]] {
                let fragment = fragments.joined(separator: " … ")
                let matching = prepared.filter { row in fragments.allSatisfy { row.statement.contains($0) } }
                XCTAssertEqual(matching.count, 1, "one prepared text for \(fragment): the one-record form")
                guard let statement = matching.first else { continue }
                XCTAssertFalse(statement.statement.contains("record_name = ANY("), "\(fragment): \(statement.statement)")
                XCTAssertGreaterThan(statement.generic, 0, "PostgreSQL settled on the generic plan of \(fragment)")
            }
            guard let lock = prepared.first(where: { $0.statement.contains("FROM records") && $0.statement.contains("FOR UPDATE") }) else { return }
            // The writer's opening statement (`ZoneWriter.open`): the zone's key for its tombstones
            // and its row, the record's key, then the schema's container, environment and types.
            let zoneKey = "'iCloud.test', 'development', 'private', '_alice', 'Notes'"
            let plan: String = try await store.withConnection { connection in
                try await connection.query("SET plan_cache_mode = force_generic_plan", logger: logger)
                var lines: [String] = []
                for try await line in try await connection.query(PostgresQuery(unsafeSQL: """
                    EXPLAIN EXECUTE \(lock.name)(\(zoneKey), \(zoneKey), \(zoneKey), 'r1', 'iCloud.test', 'development', 'iCloud.test', 'development', '{Note}')
                    """), logger: logger).decode(String.self) {
                    lines.append(line)
                }
                try await connection.query("RESET plan_cache_mode", logger: logger)
                return lines.joined(separator: "\n")
            }
            XCTAssertTrue(plan.contains("records_pkey"), plan)
            // Reads bounded by version still read the (now partial) version indexes.
            for (table, column, index) in [("records", "version", "records_zone_version"), ("record_tombstones", "deleted_version", "record_tombstones_zone_version")] {
                let bounded = try await TestSupport.plan(of: PostgresQuery(unsafeSQL: """
                    SELECT record_name FROM \(table) WHERE container = 'iCloud.test' AND environment = 'development' AND scope = 'private'
                      AND owner = '_alice' AND zone_name = 'Notes' AND \(column) > 3 ORDER BY \(column) LIMIT 200
                    """), in: store)
                XCTAssertTrue(bounded.contains(index), bounded)
            }
        }
    }

    /// A worker's checkpoint move, the relay's read of its queue, a query's context and the
    /// indexer's saves (one record's, and a run's in one statement) run prepared, and PostgreSQL
    /// settles on their generic plans instead of planning them at every call: the statements that
    /// read a worker's checkpoint name the worker in their text, so the generic plan reads the
    /// worker's partition alone (with the name bound it read all five and was planned at every
    /// call). A name with a quote in it is kept as it is.
    func testWorkerRelayAndIndexerStatementsSettleOnGenericPlans() async throws {
        try await withOneConnection { store, _ in
            let logger = TestSupport.logger
            let (database, _, write) = try await Self.notesZone(store)
            for index in 0..<8 {
                try await write(.create, ["r\(index)"])
            }
            // A query's context (the live generation, the field indexes, the indexer's position in the zone).
            let query = try RecordQuery.parse(.object(["recordType": .string("Note")]))
            for _ in 0..<8 {
                _ = try await QueryStore(store: store).run(query, in: database, scope: .zone("Notes"), limit: 10, after: nil, logger: logger)
            }
            let log = EventLog(store: store)
            var queued: [EventEnvelope] = []
            for _ in 0..<8 {
                queued = try await log.unpublished(limit: 100, logger: logger)
            }
            let zoneEvents = queued.filter { $0.type == RecordSaved.eventType }
            XCTAssertEqual(zoneEvents.count, 8, "the relay's read finds the eight saves in the queue")
            for worker in ["stratus-indexer", "a test's worker"] {
                var expected: Int64 = 0
                for event in zoneEvents {
                    let previous = try await store.serializable(logger: logger) { transaction in
                        try await CheckpointStore.advance(worker: worker, zoneKey: event.zoneKey, to: event.zoneSequence!, eventID: event.id, in: transaction)
                    }
                    XCTAssertEqual(previous, expected, "\(worker): where the checkpoint was")
                    expected = event.zoneSequence!
                }
                let last = try await store.serializable(logger: logger) { transaction in
                    try await CheckpointStore.lastSequence(worker: worker, zoneKey: zoneEvents[0].zoneKey, in: transaction)
                }
                XCTAssertEqual(last, expected, "\(worker): the checkpoint reads back")
            }
            // The indexer's save of one record, as a batch of one event applies it: each save in a
            // transaction of its own, and each again (an event delivered twice changes nothing).
            let saves = try zoneEvents.map { (saved: try $0.decode(RecordSaved.self), event: $0) }
            let indexed = try zoneEvents.map { (saved: try RecordSaved.indexed($0), version: $0.id) }
            for save in indexed + indexed {
                try await store.serializable(logger: logger) { transaction in
                    try await QueryIndexStore.apply(indexed: [save], in: transaction)
                }
            }
            // And a run of saves in one statement, as a batch of events applies them: again, so the
            // run changes nothing (each row already holds its save).
            for _ in 0..<7 {
                try await store.serializable(logger: logger) { transaction in
                    try await QueryIndexStore.apply(indexed: indexed, in: transaction)
                }
            }

            let prepared = try await Self.prepared(store)
            for (fragment, what) in [
                ("FROM worker_checkpoints WHERE worker = 'stratus-indexer'", "the indexer's checkpoint move"), ("FROM worker_checkpoints WHERE worker = 'a test''s worker'", "a quoted worker's checkpoint move"),
                ("FROM unpublished_events ORDER BY id LIMIT", "the relay's read"),
                ("c.worker = 'stratus-indexer'", "a query's context"),
                ("to_tsvector(g.language, $", "the indexer's save of one record"),
                ("to_tsvector(g.language, s.document)", "the indexer's run of saves"),
            ] {
                let matching = prepared.filter { $0.statement.contains(fragment) }
                XCTAssertEqual(matching.count, 1, "one prepared text for \(what)")
                guard let statement = matching.first else { continue }
                XCTAssertGreaterThan(statement.generic, 0, "PostgreSQL settled on the generic plan of \(what)")
                XCTAssertLessThanOrEqual(statement.custom, 5, "\(what) is not planned at every call")
            }

            // The same statements naming the generations they write, as a rebuild names its own,
            // after calls that named none (a NULL, whose type PostgreSQL took from the statement):
            // the later calls bind that same type. A rebuild's event applied alone (a page that
            // failed) writes its save through the same one-record statement.
            for (saved, event) in saves {
                try await store.serializable(logger: logger) { transaction in
                    try await QueryIndexStore.apply(saved, event: event, generations: [1], in: transaction)
                }
            }
            try await store.serializable(logger: logger) { transaction in
                try await QueryIndexStore.apply(indexed: indexed, generations: [1], in: transaction)
            }
            let rows = try await store.withConnection { connection in
                var versions: [String: Int64] = [:]
                for try await (name, version) in try await connection.query(
                    "SELECT record_name, version FROM query_index.records WHERE zone_name = 'Notes' AND NOT deleted", logger: logger
                ).decode((String, Int64).self) { versions[name] = version }
                return versions
            }
            var expectedVersions: [String: Int64] = [:]
            for (saved, event) in saves { expectedVersions[saved.record.recordName] = event.id }
            XCTAssertEqual(expectedVersions.count, 8)
            XCTAssertEqual(rows, expectedVersions, "the index holds each record at its save's event")
        }
    }
}
