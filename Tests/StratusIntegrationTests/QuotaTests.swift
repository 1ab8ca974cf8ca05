import Foundation
import Hummingbird
import HummingbirdTesting
import Logging
import PostgresNIO
import StratusAPI
import StratusCore
@testable import StratusPostgres
import StratusTesting
import XCTest

/// The per-user storage quota: bytes of records counted in `storage_usage` by the writes
/// themselves, refused past `STRATUS_USER_QUOTA_BYTES`, given back by deletes.
final class QuotaTests: XCTestCase {
    typealias Body = [String: Any]
    typealias Fixture = RateLimitTests.Fixture

    static func withAPI(quota: Int64, _ body: @Sendable (Fixture, any TestClientProtocol) async throws -> Void) async throws {
        try await RateLimitTests.withAPI({ $0.limits.userQuotaBytes = quota }, body)
    }

    /// The counted total of a user, and what it should be: the records' fields as stored.
    static func usage(_ store: PostgresStore, owner: String, container: String = "iCloud.com.example.notes") async throws -> (counted: Int64, actual: Int64) {
        try await store.withConnection { connection in
            let rows = try await connection.query("""
                SELECT (SELECT coalesce(sum(bytes), 0)::int8 FROM storage_usage WHERE container = \(container) AND environment = 'development' AND owner = \(owner)),
                       (SELECT coalesce(sum(octet_length(fields::text)), 0)::int8 FROM records WHERE container = \(container) AND environment = 'development'
                          AND CASE WHEN scope = 'public' THEN created_by ELSE owner END = \(owner))
                """, logger: TestSupport.logger)
            for try await row in rows.decode((Int64, Int64).self) { return row }
            return (0, 0)
        }
    }

    static func modify(
        _ client: any TestClientProtocol, _ fixture: Fixture, zone: String? = nil, database: String = "private", user: String = "_alice",
        atomic: Bool? = nil, _ operations: [Body]
    ) async throws -> (Int, [Body]) {
        var body: Body = ["operations": operations]
        if let zone { body["zoneID"] = ["zoneName": zone] }
        if let atomic { body["atomic"] = atomic }
        let (status, _, json) = try await RateLimitTests.send(client, fixture.path("records/modify", database: database, user: user), body)
        return (status, json["records"] as? [Body] ?? [json])
    }

    static func createZone(_ client: any TestClientProtocol, _ fixture: Fixture, _ name: String) async throws {
        let (status, _, _) = try await RateLimitTests.send(client, fixture.path("zones/modify"), ["operations": [["operationType": "create", "zone": ["zoneID": ["zoneName": name]]]]])
        XCTAssertEqual(status, 200)
    }

    static func save(_ name: String, bytes: Int, type: String = "create") -> Body {
        ["operationType": type, "record": ["recordName": name, "recordType": "Note", "fields": ["text": ["value": String(repeating: "x", count: bytes)]]]]
    }

    func testWritesPastTheQuotaAreRefusedAndDeletesGiveSpaceBack() async throws {
        try await Self.withAPI(quota: 10_000) { fixture, client in
            // Four records of ~2.35 KB fit; the fifth does not, alone, and nothing of it is stored.
            var (status, records) = try await Self.modify(client, fixture, (0..<5).map { Self.save("n\($0)", bytes: 2_300) })
            XCTAssertEqual(status, 200)
            XCTAssertEqual(records.prefix(4).compactMap { $0["serverErrorCode"] }.count, 0, "\(records)")
            XCTAssertEqual(records[4]["serverErrorCode"] as? String, "QUOTA_EXCEEDED")
            XCTAssertEqual(records[4]["recordName"] as? String, "n4")
            XCTAssertTrue((records[4]["reason"] as? String ?? "").contains("10000 bytes"), "\(records[4])")
            XCTAssertNil(records[4]["retryAfter"], "not retryable")
            var usage = try await Self.usage(fixture.store, owner: "_alice")
            XCTAssertEqual(usage.counted, usage.actual)
            XCTAssertLessThanOrEqual(usage.counted, 10_000)

            // A smaller version of a record passes even at the quota; a larger one that crosses it does not.
            (_, records) = try await Self.modify(client, fixture, [["operationType": "forceReplace", "record": ["recordName": "n0", "recordType": "Note", "fields": ["text": ["value": "small"]]]]])
            XCTAssertNil(records[0]["serverErrorCode"], "\(records)")
            (_, records) = try await Self.modify(client, fixture, [Self.save("n0", bytes: 4_000, type: "forceReplace")])
            XCTAssertEqual(records[0]["serverErrorCode"] as? String, "QUOTA_EXCEEDED")

            // Deleting gives the bytes back: the fifth record fits now.
            (_, records) = try await Self.modify(client, fixture, [["operationType": "forceDelete", "record": ["recordName": "n1"]]])
            XCTAssertNil(records[0]["serverErrorCode"], "\(records)")
            (_, records) = try await Self.modify(client, fixture, [Self.save("n4", bytes: 2_300)])
            XCTAssertNil(records[0]["serverErrorCode"], "\(records)")
            usage = try await Self.usage(fixture.store, owner: "_alice")
            XCTAssertEqual(usage.counted, usage.actual)

            // Another user has a quota of its own.
            (_, records) = try await Self.modify(client, fixture, user: "_bob", [Self.save("b0", bytes: 8_000)])
            XCTAssertNil(records[0]["serverErrorCode"], "\(records)")

        }
    }

    func testAnAtomicBatchPastTheQuotaStoresNothingAndDeletingAZoneFreesItsRecords() async throws {
        try await Self.withAPI(quota: 10_000) { fixture, client in
            try await Self.createZone(client, fixture, "Notes")
            var (status, records) = try await Self.modify(client, fixture, zone: "Notes", atomic: true, (0..<5).map { Self.save("a\($0)", bytes: 2_300) })
            XCTAssertEqual(status, 200)
            XCTAssertEqual(records[4]["serverErrorCode"] as? String, "QUOTA_EXCEEDED", "\(records)")
            XCTAssertEqual(records.prefix(4).compactMap { $0["serverErrorCode"] as? String }, Array(repeating: "ATOMIC_ERROR", count: 4))
            var usage = try await Self.usage(fixture.store, owner: "_alice")
            XCTAssertEqual(usage.counted, 0)
            XCTAssertEqual(usage.actual, 0)

            (status, records) = try await Self.modify(client, fixture, zone: "Notes", atomic: true, (0..<3).map { Self.save("a\($0)", bytes: 2_300) })
            XCTAssertEqual(records.compactMap { $0["serverErrorCode"] }.count, 0, "\(records)")
            usage = try await Self.usage(fixture.store, owner: "_alice")
            XCTAssertGreaterThan(usage.counted, 7_000)
            XCTAssertEqual(usage.counted, usage.actual)
            // Deleting the zone frees every byte of its records.
            let (deleted, _, _) = try await RateLimitTests.send(client, fixture.path("zones/modify"), ["operations": [["operationType": "delete", "zone": ["zoneID": ["zoneName": "Notes"]]]]])
            XCTAssertEqual(deleted, 200)
            usage = try await Self.usage(fixture.store, owner: "_alice")
            XCTAssertEqual(usage.counted, 0)
        }
    }

    /// A save counts what it changed from the row it replaces, as the transaction read it before
    /// the save (no second read): an atomic batch that creates, grows, shrinks and deletes records
    /// of a zone leaves the counted total equal to the records' bytes.
    func testABatchOfCreatesReplacementsAndDeletesCountsExactlyWhatItChanged() async throws {
        try await Self.withAPI(quota: 1_000_000) { fixture, client in
            try await Self.createZone(client, fixture, "Notes")
            // Each step: every operation stored, and the counted total is the records' bytes.
            let steps: [(atomic: Bool, operations: [Body], atLeast: Int64)] = [
                (true, (0..<4).map { Self.save("r\($0)", bytes: 1_000) }, 4_000),
                (true, [Self.save("r0", bytes: 3_000, type: "forceReplace"), Self.save("r1", bytes: 10, type: "forceReplace"),
                        Self.save("r4", bytes: 500), ["operationType": "forceDelete", "record": ["recordName": "r2"]],
                        Self.save("r3", bytes: 1_000, type: "forceReplace")], 4_500),
                // Not atomic: each operation its own transaction.
                (false, [Self.save("r0", bytes: 20, type: "forceReplace"), Self.save("r2", bytes: 2_000),
                         Self.save("r4", bytes: 700, type: "forceReplace")], 3_700),
            ]
            for (index, step) in steps.enumerated() {
                let (status, records) = try await Self.modify(client, fixture, zone: "Notes", atomic: step.atomic, step.operations)
                XCTAssertEqual(status, 200)
                XCTAssertEqual(records.compactMap { $0["serverErrorCode"] }.count, 0, "step \(index): \(records)")
                let usage = try await Self.usage(fixture.store, owner: "_alice")
                XCTAssertEqual(usage.counted, usage.actual, "step \(index)")
                XCTAssertGreaterThan(usage.counted, step.atLeast, "step \(index)")
            }
        }
    }

    func testPublicRecordsCountAgainstTheirCreator() async throws {
        try await Self.withAPI(quota: 5_000) { fixture, client in
            var (_, records) = try await Self.modify(client, fixture, database: "public", [Self.save("p0", bytes: 3_000)])
            XCTAssertNil(records[0]["serverErrorCode"], "\(records)")
            (_, records) = try await Self.modify(client, fixture, database: "public", [Self.save("p1", bytes: 3_000)])
            XCTAssertEqual(records[0]["serverErrorCode"] as? String, "QUOTA_EXCEEDED")
            // Bob's public records are his: alice's usage does not stop him.
            (_, records) = try await Self.modify(client, fixture, database: "public", user: "_bob", [Self.save("p1", bytes: 3_000)])
            XCTAssertNil(records[0]["serverErrorCode"], "\(records)")
            let alice = try await Self.usage(fixture.store, owner: "_alice")
            let bob = try await Self.usage(fixture.store, owner: "_bob")
            XCTAssertEqual(alice.counted, alice.actual)
            XCTAssertEqual(bob.counted, bob.actual)
            XCTAssertGreaterThan(bob.counted, 3_000)
            // A replacement takes the replaced row's bytes off its creator's total.
            (_, records) = try await Self.modify(client, fixture, database: "public", [Self.save("p0", bytes: 100, type: "forceReplace")])
            XCTAssertNil(records[0]["serverErrorCode"], "\(records)")
            let smaller = try await Self.usage(fixture.store, owner: "_alice")
            XCTAssertEqual(smaller.counted, smaller.actual)
            XCTAssertLessThan(smaller.counted, 1_000)
        }
    }

    func testConcurrentWritersOfOneUserPassTheQuotaByAtMostWhatIsInFlight() async throws {
        let quota: Int64 = 40_000
        let writers = 8
        try await Self.withAPI(quota: quota) { fixture, client in
            // Each writer saves records of ~2 KB one at a time, each its own transaction, until refused.
            let refused = try await withThrowingTaskGroup(of: Int.self) { group in
                for writer in 0..<writers {
                    group.addTask {
                        var refusals = 0
                        for index in 0..<20 {
                            let (_, records) = try await Self.modify(client, fixture, [Self.save("w\(writer)-\(index)", bytes: 2_000)])
                            if records[0]["serverErrorCode"] as? String == "QUOTA_EXCEEDED" { refusals += 1 }
                            else { XCTAssertNil(records[0]["serverErrorCode"], "\(records)") }
                        }
                        return refusals
                    }
                }
                return try await group.reduce(0, +)
            }
            XCTAssertGreaterThan(refused, 0)
            let usage = try await Self.usage(fixture.store, owner: "_alice")
            // The running total never drifts from the records, however the writes interleaved.
            XCTAssertEqual(usage.counted, usage.actual)
            // Past the quota by at most one record per other writer in flight.
            let record = Int64(2_000 + 100)
            XCTAssertLessThanOrEqual(usage.counted, quota + Int64(writers - 1) * record, "\(usage)")
            XCTAssertGreaterThan(usage.counted, quota - record)
        }
    }

    func testTheMigrationCountsTheRecordsAlreadyStored() async throws {
        let url = try await TestSupport.createDatabase()
        let migrations = try TestSupport.migrations()
        try await TestSupport.withStore(url: url) { store in
            try await Migrator(store: store, migrations: migrations.filter { $0.version < 12 }).migrate(logger: TestSupport.logger)
            try await store.withConnection { connection in
                for (scope, owner, createdBy, name, text) in [
                    ("private", "_alice", "_alice", "r1", "hello"), ("private", "_alice", "_alice", "r2", String(repeating: "y", count: 500)),
                    ("public", "_", "_alice", "r3", "public text"), ("public", "_", "_bob", "r4", "bob's"), ("private", "_bob", "_bob", "r5", "b"),
                ] {
                    let fields = "{\"text\": {\"type\": \"STRING\", \"value\": \"\(text)\"}}"
                    try await connection.query("""
                        INSERT INTO records (container, environment, scope, owner, zone_name, record_name, record_type, fields, change_tag,
                            created_at, created_by, modified_at, modified_by)
                        VALUES ('c', 'development', \(scope), \(owner), '_defaultZone', \(name), 'Note', \(fields)::jsonb, 't', 0, \(createdBy), 0, \(createdBy))
                        """, logger: TestSupport.logger)
                }
            }
            try await Migrator(store: store, migrations: migrations).migrate(logger: TestSupport.logger)
            for owner in ["_alice", "_bob"] {
                let usage = try await Self.usage(store, owner: owner, container: "c")
                XCTAssertEqual(usage.counted, usage.actual, owner)
                XCTAssertGreaterThan(usage.counted, 0, owner)
            }
        }
    }

    /// Writers of one user in different zones share only the user's storage total. Each running
    /// transaction of a process adds to a `storage_usage` row no other one holds, so twenty of them
    /// (a pool's worth), all with their snapshots taken before any adds, all commit at the first
    /// attempt. With a shard picked at random two would share a row and one of them would retry.
    func testTransactionsOfOneProcessInFlightTogetherNeverShareAUsageRow() async throws {
        try await TestSupport.withMigratedStore { store, _ in
            let writers = 20
            let attempts = AttemptCounter()
            let start = StartLine(runners: writers)
            try await withThrowingTaskGroup(of: Void.self) { group in
                for writer in 0..<writers {
                    group.addTask {
                        try await store.locked(logger: TestSupport.logger, locks: ["zone-\(writer)"]) { transaction in
                            attempts.increment()
                            // The snapshot is taken here; every writer's first attempt then waits
                            // until all have theirs.
                            try await transaction.connection.query("SELECT 1", logger: TestSupport.logger)
                            await start.arrive(writer)
                            try await StorageUsage.add(100, container: "iCloud.com.example.notes", environment: "development", owner: "_alice", in: transaction)
                        }
                    }
                }
                try await group.waitForAll()
            }
            XCTAssertEqual(attempts.value, writers, "a writer retried: two transactions added to the same row")
            let rows = try await store.withConnection { connection in
                var rows: [(Int16, Int64)] = []
                for try await row in try await connection.query(
                    "SELECT shard, bytes FROM storage_usage WHERE owner = '_alice' ORDER BY shard", logger: TestSupport.logger
                ).decode((Int16, Int64).self) { rows.append(row) }
                return rows
            }
            XCTAssertEqual(rows.count, writers, "one row per transaction in flight: \(rows)")
            XCTAssertEqual(rows.reduce(0) { $0 + $1.1 }, Int64(writers * 100))
            XCTAssertTrue(rows.allSatisfy { $0.0 >= 0 && $0.0 < StorageUsage.shards }, "\(rows)")
        }
    }
}
