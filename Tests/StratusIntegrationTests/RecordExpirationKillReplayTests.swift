import Foundation
import HummingbirdTesting
import PostgresNIO
import StratusCore
@testable import StratusPostgres
import StratusTesting
import StratusWorkers
import XCTest

/// The built `stratus-gc` SIGKILLed in the middle of collecting many expired records, restarted,
/// then replayed with `stratus replay stratus-gc`: every expired record is deleted exactly once,
/// and no live record — not one saved to expire and saved again without, not one the expiry index
/// wrongly says is due — is ever deleted.
final class RecordExpirationKillReplayTests: XCTestCase {
    typealias Body = [String: Any]

    static let zones = ["Q", "R"]
    /// Per zone: records saved to expire in 2 s (in requests of 200), records without an
    /// expiration, and records saved to expire in a minute and then saved again without.
    static let expiring = 600
    static let live = 100
    static let revived = 100

    func testKillingStratusGCMidCollectionThenRestartingAndReplayingLosesNothingLiveAndLeavesNothingExpired() async throws {
        try await APIPipelineFixture.withStack(projection: IndexerProjection(), relay: true, worker: false) { fixture, client, _, location in
            for zone in Self.zones { try await RecordAPITests.createZone(client, fixture, zone) }
            // Slow enough (500 records/s, 50 per transaction) that the kill lands mid-collection.
            let settings = location.settings.merging([
                "STRATUS_KAFKA_BACKGROUND_FETCH_WAIT_MS": "100", "STRATUS_GC_EXPIRE_BATCH": "50", "STRATUS_GC_EXPIRE_RATE": "500",
            ]) { $1 }
            let total = Self.zones.count * Self.expiring

            let deletedAtKill = try await StratusExecutable.with("stratus-gc", settings: settings) { gc in
                for zone in Self.zones { try await Self.write(zone, client, fixture) }
                try await TestSupport.eventually(timeout: .seconds(90), "stratus-gc to delete its first expired records") {
                    try gc.requireRunning()
                    return try await Self.count(fixture.store, "SELECT count(*) FROM events WHERE type = 'record.deleted'") >= 100
                }
                let status = await gc.stop(signal: SIGKILL)
                XCTAssertEqual(status, SIGKILL, "stratus-gc was killed, not stopped")
                return try await Self.count(fixture.store, "SELECT count(*) FROM events WHERE type = 'record.deleted'")
            }
            XCTAssertLessThan(deletedAtKill, Int64(total), "the kill came before stratus-gc had collected everything")
            print("stratus-gc was killed with \(deletedAtKill) of \(total) expired records deleted")

            // Entries that say every live record is due, as a stale or replayed index could.
            _ = try await fixture.store.withConnection { connection in
                try await connection.query("""
                    INSERT INTO record_expirations (container, environment, scope, owner, zone_name, record_name, expires_at)
                    SELECT container, environment, scope, owner, zone_name, record_name, 1 FROM records WHERE expires_at IS NULL
                    ON CONFLICT DO NOTHING
                    """, logger: TestSupport.logger)
            }

            // Restarted, it finishes: nothing expired is left, nothing live is gone.
            try await StratusExecutable.with("stratus-gc", settings: settings) { gc in
                try await TestSupport.eventually(timeout: .seconds(120), "the restarted stratus-gc to collect every expired record") {
                    try gc.requireRunning()
                    let left = try await Self.count(fixture.store, "SELECT count(*) FROM records WHERE expires_at IS NOT NULL")
                    let indexed = try await Self.count(fixture.store, "SELECT count(*) FROM record_expirations")
                    return left == 0 && indexed == 0
                }
                let status = await gc.stop(signal: SIGTERM)
                XCTAssertEqual(status, 0, "a stopped stratus-gc exits cleanly:\n\(gc.output().suffix(3000))")
            }
            try await Self.assertOutcome(fixture.store, total: total)

            // Replayed from the beginning: the index is rebuilt from the log, and nothing is due.
            let replay = try await StratusExecutable.run("stratus", ["replay", "stratus-gc"], settings: settings)
            XCTAssertEqual(replay.status, 0, replay.output)
            let indexed = try await Self.count(fixture.store, "SELECT count(*) FROM record_expirations")
            XCTAssertEqual(indexed, 0, "every expiring record's last event is its delete, every revived one's a save without expiry")
            let handled = try await ExpiredRecordCollector(store: fixture.store, logger: TestSupport.logger).collectDue()
            XCTAssertEqual(handled, 0)
            try await Self.assertOutcome(fixture.store, total: total)
        }
    }

    /// One zone's load through the API.
    static func write(_ zone: String, _ client: any TestClientProtocol, _ fixture: RecordAPITests.Fixture) async throws {
        func save(_ operations: [Body]) async throws {
            let (status, records) = try await RecordAPITests.modify(client, fixture, zone: zone, operations)
            XCTAssertEqual(status, 200, "\(records.prefix(1))")
        }
        func record(_ name: String, _ extra: Body = [:]) -> Body {
            ["operationType": "forceUpdate", "record": RecordAPITests.note(name, ["v": ["value": name]], type: "Item").merging(extra) { $1 }]
        }
        // A minute, not two seconds: on a loaded machine the next request may come more than two
        // seconds later, and a record expired by then is deleted before it is saved again (a delete
        // of its own). The entries that say every live record is due come later, by hand.
        try await save((0..<revived).map { record("revived-\($0)", ["timeToLive": 60]) })
        try await save((0..<revived).map { record("revived-\($0)", ["expirationDate": NSNull()]) })
        try await save((0..<live).map { record("live-\($0)") })
        for start in stride(from: 0, to: expiring, by: 200) {
            try await save((start..<min(start + 200, expiring)).map { record("gone-\($0)", ["timeToLive": 2]) })
        }
    }

    /// Every live and revived record is there; every expiring one was deleted, exactly once.
    static func assertOutcome(_ store: PostgresStore, total: Int, file: StaticString = #filePath, line: UInt = #line) async throws {
        let names = try await store.withConnection { connection in
            let rows = try await connection.query("SELECT zone_name || '/' || record_name FROM records", logger: TestSupport.logger)
            var names: Set<String> = []
            for try await name in rows.decode(String.self) { names.insert(name) }
            return names
        }
        let expected = Set(zones.flatMap { zone in (0..<live).map { "\(zone)/live-\($0)" } + (0..<revived).map { "\(zone)/revived-\($0)" } })
        XCTAssertEqual(names, expected, "exactly the live records are left", file: file, line: line)
        let deletes = try await count(store, "SELECT count(*) FROM events WHERE type = 'record.deleted'")
        let distinct = try await count(store, """
            SELECT count(DISTINCT zone_key || '/' || (payload ->> 'recordName')) FROM events
            WHERE type = 'record.deleted' AND payload ->> 'recordName' LIKE 'gone-%'
            """)
        XCTAssertEqual(deletes, Int64(total), "one delete per expired record", file: file, line: line)
        XCTAssertEqual(distinct, Int64(total), "each expired record deleted once", file: file, line: line)
    }

    static func count(_ store: PostgresStore, _ sql: String) async throws -> Int64 {
        try await store.withConnection { connection in
            let rows = try await connection.query(PostgresQuery(unsafeSQL: sql), logger: TestSupport.logger)
            for try await value in rows.decode(Int64.self) { return value }
            return 0
        }
    }
}
