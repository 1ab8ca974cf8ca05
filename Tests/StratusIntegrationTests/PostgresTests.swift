import Foundation
import PostgresNIO
import StratusCore
@testable import StratusPostgres
import StratusTesting
import Synchronization
import XCTest

final class MigrationTests: XCTestCase {
    func testMigrateTwiceIsANoOpAndServicesRefuseUnmigratedDatabases() async throws {
        let url = try await TestSupport.createDatabase()
        let migrations = try TestSupport.migrations()
        XCTAssertFalse(migrations.isEmpty)
        try await TestSupport.withStore(url: url) { store in
            let migrator = Migrator(store: store, migrations: migrations)
            do {
                try await migrator.verify(logger: TestSupport.logger)
                XCTFail("an unmigrated database must be refused")
            } catch let error as MigrationError {
                XCTAssertTrue(error.description.contains("stratus migrate"), error.description)
            }
            let first = try await migrator.migrate(logger: TestSupport.logger)
            XCTAssertEqual(first, migrations.map(\.name))
            let second = try await migrator.migrate(logger: TestSupport.logger)
            XCTAssertEqual(second, [])
            try await migrator.verify(logger: TestSupport.logger)
        }
    }

    func testAChangedAppliedMigrationIsAnError() async throws {
        let url = try await TestSupport.createDatabase()
        var migrations = try TestSupport.migrations()
        try await TestSupport.withStore(url: url) { [migrations] store in
            try await Migrator(store: store, migrations: migrations).migrate(logger: TestSupport.logger)
        }
        migrations[0].sql += "\n-- edited\n"
        try await TestSupport.withStore(url: url) { [migrations] store in
            do {
                try await Migrator(store: store, migrations: migrations).migrate(logger: TestSupport.logger)
                XCTFail("a changed migration must be refused")
            } catch let error as MigrationError {
                XCTAssertTrue(error.description.contains("changed after it was applied"), error.description)
            }
        }
    }

    func testMigrationsLoadInNumberOrderAndRejectDuplicates() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent(UUID().uuidString)
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        try "SELECT 2".write(to: directory.appendingPathComponent("0010_b.sql"), atomically: true, encoding: .utf8)
        try "SELECT 1".write(to: directory.appendingPathComponent("0002_a.sql"), atomically: true, encoding: .utf8)
        XCTAssertEqual(try Migration.load(from: directory).map(\.version), [2, 10])
        try "SELECT 3".write(to: directory.appendingPathComponent("0010_c.sql"), atomically: true, encoding: .utf8)
        XCTAssertThrowsError(try Migration.load(from: directory))
    }
}

final class SerializableTransactionTests: XCTestCase {
    /// Concurrent read-modify-write transactions on one row: PostgreSQL aborts the losers with 40001,
    /// the helper retries them, and no increment is lost.
    func testConflictingTransactionsAreRetriedAndNoUpdateIsLost() async throws {
        try await TestSupport.withMigratedStore(maxAttempts: 50) { store, _ in
            try await store.withConnection { connection in
                try await connection.query("CREATE TABLE counter (id int PRIMARY KEY, value int NOT NULL)", logger: TestSupport.logger)
                try await connection.query("INSERT INTO counter VALUES (1, 0)", logger: TestSupport.logger)
            }
            let attempts = AttemptCounter()
            let writers = 12
            try await withThrowingTaskGroup(of: Void.self) { group in
                for _ in 0..<writers {
                    group.addTask {
                        try await store.serializable(logger: TestSupport.logger) { transaction in
                            attempts.increment()
                            var value = 0
                            for try await v in try await transaction.connection.query("SELECT value FROM counter WHERE id = 1", logger: TestSupport.logger).decode(Int.self) { value = v }
                            try await Task.sleep(for: .milliseconds(20))
                            try await transaction.connection.query("UPDATE counter SET value = \(value + 1) WHERE id = 1", logger: TestSupport.logger)
                        }
                    }
                }
                try await group.waitForAll()
            }
            let final = try await store.withConnection { connection in
                var final = 0
                for try await v in try await connection.query("SELECT value FROM counter", logger: TestSupport.logger).decode(Int.self) { final = v }
                return final
            }
            XCTAssertEqual(final, writers, "every committed increment must be there")
            XCTAssertGreaterThan(attempts.value, writers, "the conflict must have caused retries")
        }
    }

    /// When attempts run out the caller gets TRY_AGAIN_LATER with retryAfter, never a raw database error.
    /// A statement that failed without its error reaching the code (here swallowed on purpose) leaves
    /// the transaction aborted, and PostgreSQL answers COMMIT with ROLLBACK: the helper must not
    /// report that as committed. It runs the transaction again and, when that keeps happening,
    /// gives up with TRY_AGAIN_LATER; nothing is stored.
    func testATransactionRolledBackAtCommitIsNeverReportedCommitted() async throws {
        try await TestSupport.withMigratedStore(maxAttempts: 3) { store, _ in
            try await store.withConnection { connection in
                try await connection.query("CREATE TABLE notes (id int PRIMARY KEY)", logger: TestSupport.logger)
            }
            let attempts = Mutex(0)
            do {
                try await store.serializable(logger: TestSupport.logger) { transaction in
                    attempts.withLock { $0 += 1 }
                    try await transaction.connection.query("INSERT INTO notes (id) VALUES (1)", logger: TestSupport.logger)
                    _ = try? await transaction.connection.execute("SELECT 1 / 0", logger: TestSupport.logger)
                }
                XCTFail("a transaction rolled back at commit was reported committed")
            } catch let error as StratusError {
                XCTAssertEqual(error.code, .tryAgainLater)
            }
            XCTAssertEqual(attempts.withLock { $0 }, 3, "it was run again up to the attempt limit")
            let stored = try await store.withConnection { connection in
                var count = -1
                for try await value in try await connection.query("SELECT count(*)::int FROM notes", logger: TestSupport.logger).decode(Int.self) { count = value }
                return count
            }
            XCTAssertEqual(stored, 0)
        }
    }

    /// Every worker applies each event of a zone in a SERIALIZABLE transaction that reads and writes
    /// its checkpoint row of the zone. Two workers applying the same zone's event at once, both
    /// having read their rows before either writes, both commit at the first attempt: each worker's
    /// rows are in a partition of their own, so neither read the index page the other wrote.
    func testTwoWorkersCheckpointingOneZoneAtOnceDoNotAbortEachOther() async throws {
        try await TestSupport.withMigratedStore { store, _ in
            let zoneKey = ZoneKey(rawValue: "iCloud.com.example.notes/development/private/_alice/Notes")
            let workers = ["stratus-indexer", "stratus-subscriptions", "stratus-gc", "stratus-shares"]
            let attempts = AttemptCounter()
            let start = StartLine(runners: workers.count)
            try await withThrowingTaskGroup(of: Void.self) { group in
                for (index, worker) in workers.enumerated() {
                    group.addTask {
                        try await store.serializable(logger: TestSupport.logger) { transaction in
                            attempts.increment()
                            let last = try await CheckpointStore.lastSequence(worker: worker, zoneKey: zoneKey, in: transaction)
                            // Each worker's first attempt writes only once all have read.
                            await start.arrive(index)
                            _ = try await CheckpointStore.advance(worker: worker, zoneKey: zoneKey, to: last + 1, eventID: last + 1, in: transaction)
                        }
                    }
                }
                try await group.waitForAll()
            }
            XCTAssertEqual(attempts.value, workers.count, "a worker's checkpoint transaction was aborted by another worker's")
            for worker in workers {
                let last = try await store.serializable(logger: TestSupport.logger) { transaction in
                    try await CheckpointStore.lastSequence(worker: worker, zoneKey: zoneKey, in: transaction)
                }
                XCTAssertEqual(last, 1, worker)
            }
        }
    }

    /// A worker's apply begins by moving its checkpoint of the zone, in the statement that says
    /// where the checkpoint was: it never moves back, and says so.
    func testAdvancingACheckpointSaysWhereItWasAndNeverMovesItBack() async throws {
        try await TestSupport.withMigratedStore { store, _ in
            let zoneKey = ZoneKey(rawValue: "iCloud.com.example.notes/development/private/_alice/Notes")
            func advance(_ worker: String, to sequence: Int64) async throws -> Int64 {
                try await store.serializable(logger: TestSupport.logger) { transaction in
                    try await CheckpointStore.advance(worker: worker, zoneKey: zoneKey, to: sequence, eventID: sequence * 10, in: transaction)
                }
            }
            func position(_ worker: String) async throws -> Int64 {
                try await store.serializable(logger: TestSupport.logger) { transaction in
                    try await CheckpointStore.lastSequence(worker: worker, zoneKey: zoneKey, in: transaction)
                }
            }
            let first = try await advance("stratus-indexer", to: 3)
            XCTAssertEqual(first, 0)
            let back = try await advance("stratus-indexer", to: 2)
            XCTAssertEqual(back, 3)
            let stayed = try await position("stratus-indexer")
            XCTAssertEqual(stayed, 3, "a checkpoint never moves back")
            let again = try await advance("stratus-indexer", to: 3)
            XCTAssertEqual(again, 3)
            let on = try await advance("stratus-indexer", to: 5)
            XCTAssertEqual(on, 3)
            let moved = try await position("stratus-indexer")
            XCTAssertEqual(moved, 5)
            let other = try await advance("stratus-gc", to: 1)
            XCTAssertEqual(other, 0, "each worker has its own checkpoint")
            let lastEventID = try await store.withConnection { connection in
                var id: Int64 = 0
                for try await value in try await connection.query(
                    "SELECT last_event_id FROM worker_checkpoints WHERE worker = 'stratus-indexer' AND zone_key = \(zoneKey.rawValue)",
                    logger: TestSupport.logger
                ).decode(Int64.self) { id = value }
                return id
            }
            XCTAssertEqual(lastEventID, 50)
        }
    }

    /// Two applies of one zone's event at once (two instances of a worker, a redelivery during a
    /// rebalance): the second waits for the first's checkpoint row, is retried once the first
    /// commits, and then sees the checkpoint already there: the event takes effect once.
    func testTwoAppliesOfOneZonesEventAtOnceTakeEffectOnce() async throws {
        try await TestSupport.withMigratedStore { store, _ in
            let zoneKey = ZoneKey(rawValue: "iCloud.com.example.notes/development/private/_alice/Notes")
            let (advanced, advancedContinuation) = AsyncStream<Void>.makeStream()
            let release = StartLine(runners: 2)
            let attempts = AttemptCounter()
            let first = Task {
                try await store.serializable(logger: TestSupport.logger) { transaction in
                    let previous = try await CheckpointStore.advance(worker: "stratus-indexer", zoneKey: zoneKey, to: 1, eventID: 1, in: transaction)
                    advancedContinuation.yield()
                    await release.arrive(0)
                    return previous
                }
            }
            for await _ in advanced { break }
            let second = Task {
                try await store.serializable(logger: TestSupport.logger) { transaction in
                    attempts.increment()
                    return try await CheckpointStore.advance(worker: "stratus-indexer", zoneKey: zoneKey, to: 1, eventID: 1, in: transaction)
                }
            }
            try await TestSupport.eventually("the second apply waits for the first's checkpoint row") {
                try await store.withConnection { connection in
                    var waiting: Int64 = 0
                    for try await count in try await connection.query(
                        "SELECT count(*)::bigint FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()",
                        logger: TestSupport.logger
                    ).decode(Int64.self) { waiting = count }
                    return waiting > 0
                }
            }
            await release.arrive(1)
            let firstSaw = try await first.value
            let secondSaw = try await second.value
            XCTAssertEqual(firstSaw, 0)
            XCTAssertEqual(secondSaw, 1, "the second apply must find the event applied")
            XCTAssertEqual(attempts.value, 2, "the second apply runs again after the first commits")
        }
    }

    func testExhaustedRetriesSurfaceAsTryAgainLater() async throws {
        try await TestSupport.withMigratedStore(maxAttempts: 1) { store, _ in
            try await store.withConnection { connection in
                try await connection.query("CREATE TABLE counter (id int PRIMARY KEY, value int NOT NULL)", logger: TestSupport.logger)
                try await connection.query("INSERT INTO counter VALUES (1, 0)", logger: TestSupport.logger)
            }
            let outcomes = try await withThrowingTaskGroup(of: StratusError?.self) { group in
                for _ in 0..<6 {
                    group.addTask {
                        do {
                            try await store.serializable(logger: TestSupport.logger) { transaction in
                                var value = 0
                                for try await v in try await transaction.connection.query("SELECT value FROM counter WHERE id = 1", logger: TestSupport.logger).decode(Int.self) { value = v }
                                try await Task.sleep(for: .milliseconds(50))
                                try await transaction.connection.query("UPDATE counter SET value = \(value + 1) WHERE id = 1", logger: TestSupport.logger)
                            }
                            return nil
                        } catch let error as StratusError {
                            return error
                        }
                    }
                }
                var errors: [StratusError?] = []
                for try await outcome in group { errors.append(outcome) }
                return errors
            }
            let failures = outcomes.compactMap { $0 }
            XCTAssertFalse(failures.isEmpty, "six concurrent writers with one attempt each must conflict")
            for failure in failures {
                XCTAssertEqual(failure.code, .tryAgainLater)
                XCTAssertNotNil(failure.retryAfter)
            }
        }
    }
}

final class ZoneStoreTests: XCTestCase {
    func testZoneEventsAreAppendedWithConsecutiveSequencesAcrossIncarnations() async throws {
        try await TestSupport.withMigratedStore { store, _ in
            let database = DatabaseID(container: "iCloud.test", environment: .development, scope: .private, owner: "_alice")
            let zones = ZoneStore(store: store)
            let zoneID = ZoneID(zoneName: "Notes", ownerRecordName: "_alice")
            let causation = Causation(requestID: "r1", userRecordName: "_alice")
            let created = try await zones.modify([.create(zoneID)], in: database, causation: causation, logger: TestSupport.logger)
            guard case .success(.saved(let first)) = created[0] else { return XCTFail("create failed: \(created)") }
            // Creating again returns the same zone and appends nothing.
            let again = try await zones.modify([.create(zoneID)], in: database, causation: causation, logger: TestSupport.logger)
            XCTAssertEqual(again, [.success(.saved(first))])
            _ = try await zones.modify([.delete(zoneID)], in: database, causation: causation, logger: TestSupport.logger)
            let recreated = try await zones.modify([.create(zoneID)], in: database, causation: causation, logger: TestSupport.logger)
            guard case .success(.saved(let second)) = recreated[0] else { return XCTFail("re-create failed") }
            XCTAssertNotEqual(first.incarnation, second.incarnation, "a re-created zone is a new incarnation")
            let missing = try await zones.modify([.delete(ZoneID(zoneName: "Nope", ownerRecordName: "_alice"))], in: database, causation: causation, logger: TestSupport.logger)
            guard case .failure(let missingError) = missing.first else { return XCTFail("deleting a missing zone must fail") }
            XCTAssertEqual(missingError.code, .zoneNotFound)

            let events = try await EventLog(store: store).events(after: 0, limit: 100, logger: TestSupport.logger)
            let listed = try await zones.list(in: database, logger: TestSupport.logger)
            XCTAssertEqual(listed.map(\.zoneID.zoneName), ["Notes"])
            XCTAssertEqual(events.map(\.type), [.zoneCreated, .zoneDeleted, .zoneCreated])
            XCTAssertEqual(events.map(\.zoneSequence), [1, 2, 3])
            XCTAssertEqual(Set(events.map(\.zoneKey)), [ZoneKey(database: database, zoneName: "Notes")])
            XCTAssertEqual(try events[2].decode(ZoneCreated.self).incarnation, second.incarnation)
            XCTAssertEqual(events[0].causation.requestID, "r1")
        }
    }
}

final class RelayLeadershipTests: XCTestCase {
    /// Exactly one relay publishes: while one holds the lock, another is turned away, and after it
    /// lets go the other takes over.
    func testOnlyOneRelayLeadsAtATime() async throws {
        try await TestSupport.withMigratedStore { store, url in
            try await TestSupport.withStore(url: url) { otherStore in
                let first = RelayStore(store: store)
                let second = RelayStore(store: otherStore)
                let (entered, enteredContinuation) = AsyncStream<Void>.makeStream()
                let (release, releaseContinuation) = AsyncStream<Void>.makeStream()
                let leader = Task {
                    try await first.whileLeader(logger: TestSupport.logger) {
                        enteredContinuation.yield()
                        for await _ in release { break }
                        return true
                    }
                }
                for await _ in entered { break }
                let refused = try await second.whileLeader(logger: TestSupport.logger) { true }
                XCTAssertNil(refused, "a second relay must not publish while the first leads")
                releaseContinuation.yield()
                let led = try await leader.value
                XCTAssertEqual(led, true)
                let takeover = try await second.whileLeader(logger: TestSupport.logger) { true }
                XCTAssertEqual(takeover, true, "once the leader lets go, a standby takes over")
            }
        }
    }
}

final class RelayQueueTests: XCTestCase {
    /// The relay's read and the backlog reach the log by primary key whatever the queue's
    /// statistics say: a queue analysed while it held a burst (400 rows), then drained to a few,
    /// made the old statements (a join of the queue with the log) hash the whole log on every poll.
    func testTheRelaysReadAndBacklogUseTheLogsPrimaryKeyAfterABurstWasAnalysed() async throws {
        try await TestSupport.withMigratedStore { store, _ in
            try await store.withConnection { connection in
                try await connection.query("""
                    INSERT INTO events (zone_key, zone_sequence, type, schema_version, payload, causation)
                    SELECT 'iCloud.relay/development/private/_u/Z' || (i % 50), i, 'record.saved', 1,
                           jsonb_build_object('record', jsonb_build_object('recordName', 'r' || i, 'fields', repeat('x', 400))), '{}'::jsonb
                    FROM generate_series(1, 6000) AS i
                    """, logger: TestSupport.logger)
                try await connection.query("DELETE FROM unpublished_events", logger: TestSupport.logger)
                try await connection.query("INSERT INTO unpublished_events (id) SELECT id FROM events ORDER BY id DESC LIMIT 400", logger: TestSupport.logger)
                try await connection.query("ANALYZE events", logger: TestSupport.logger)
                try await connection.query("ANALYZE unpublished_events", logger: TestSupport.logger)
                try await connection.query(
                    "DELETE FROM unpublished_events WHERE id NOT IN (SELECT id FROM unpublished_events ORDER BY id DESC LIMIT 3)",
                    logger: TestSupport.logger)
            }
            for (name, statement) in [("unpublished", EventLog.unpublishedQuery(limit: 500)), ("backlog", EventLog.backlogQuery)] {
                let plan = try await TestSupport.plan(of: statement, in: store)
                XCTAssertTrue(plan.contains("events_pkey"), "\(name):\n\(plan)")
                XCTAssertFalse(plan.contains("Seq Scan on events"), "\(name):\n\(plan)")
            }
            // And they answer what the queue holds: its three events, in id order, and their count.
            let log = EventLog(store: store)
            let queued = try await log.unpublished(limit: 500, logger: TestSupport.logger)
            let lastIDs = try await store.withConnection { connection in
                var ids: [Int64] = []
                for try await id in try await connection.query("SELECT id FROM events ORDER BY id DESC LIMIT 3", logger: TestSupport.logger).decode(Int64.self) {
                    ids.append(id)
                }
                return ids.reversed() as [Int64]
            }
            XCTAssertEqual(queued.map(\.id), lastIDs)
            let firstTwo = try await log.unpublished(limit: 2, logger: TestSupport.logger)
            XCTAssertEqual(firstTwo.map(\.id), Array(lastIDs.prefix(2)))
            let backlog = try await log.backlog(logger: TestSupport.logger)
            XCTAssertEqual(backlog.count, 3)
            XCTAssertGreaterThanOrEqual(backlog.oldestAgeSeconds, 0)
            try await log.markPublished(lastIDs, logger: TestSupport.logger)
            let drained = try await log.backlog(logger: TestSupport.logger)
            XCTAssertEqual(drained.count, 0)
            XCTAssertEqual(drained.oldestAgeSeconds, 0)
        }
    }
}

final class AttemptCounter: Sendable {
    private let count = Mutex(0)
    func increment() { count.withLock { $0 += 1 } }
    var value: Int { count.withLock { $0 } }
}

final class SQLScriptTests: XCTestCase {
    func testSplitsOnSemicolonsOutsideQuotesCommentsAndDollarBodies() {
        let sql = """
            -- a comment; not a statement
            CREATE TABLE a (x text DEFAULT 'semi;colon');
            /* block; comment */ INSERT INTO a VALUES ('it''s; fine');
            CREATE FUNCTION f() RETURNS int AS $body$ BEGIN RETURN 1; END; $body$ LANGUAGE plpgsql;
            SELECT "odd;name" FROM a
            """
        let statements = SQLScript.statements(sql)
        XCTAssertEqual(statements.count, 4, "\(statements)")
        XCTAssertTrue(statements[0].hasSuffix("DEFAULT 'semi;colon')"))
        XCTAssertTrue(statements[1].hasSuffix("('it''s; fine')"))
        XCTAssertTrue(statements[2].contains("RETURN 1; END;"))
        XCTAssertEqual(statements[3], #"SELECT "odd;name" FROM a"#)
    }
}
