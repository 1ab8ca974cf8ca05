import Foundation
import HummingbirdTesting
import PostgresNIO
import StratusCore
import StratusKafka
@testable import StratusPostgres
import StratusTesting
import StratusWorkers
import XCTest

/// Records that expire (the Stratus extension `expirationDate` / `timeToLive`): checked on save,
/// echoed, gone from lookup, query and sync the moment they expire, and deleted by stratus-gc's
/// collector through the write path, so a device's sync and a zone subscription hear of it.
final class RecordExpirationTests: XCTestCase {
    typealias Body = [String: Any]
    typealias Fixture = RecordAPITests.Fixture

    static var nowMilliseconds: Int64 { Int64(Date().timeIntervalSince1970 * 1000) }

    func testBadExpirationsAreRefusedWithAReasonAndGoodOnesAreEchoed() async throws {
        try await RecordAPITests.withAPI { fixture, client in
            try await RecordAPITests.createZone(client, fixture, "Notes")
            let now = Self.nowMilliseconds
            let bad: [(Body, String)] = [
                (["expirationDate": "tomorrow"], "whole number of milliseconds"),
                (["expirationDate": 1.5], "whole number of milliseconds"),
                (["expirationDate": now - 3_600_000], "in the past"),
                (["expirationDate": now + 11 * 365 * 86_400_000], "ten years"),
                (["expirationDate": now + 60_000, "timeToLive": 60], "not both"),
                (["timeToLive": 0], "from 1 to"),
                (["timeToLive": -5], "from 1 to"),
                (["timeToLive": 2.5], "from 1 to"),
                (["timeToLive": "60"], "from 1 to"),
                (["timeToLive": 400_000_000], "from 1 to"),
                (["timeToLive": ["seconds": 60]], "from 1 to"),
            ]
            for (extra, reason) in bad {
                var record = RecordAPITests.note("n", ["title": ["value": "x"]])
                record.merge(extra) { _, new in new }
                let (status, records) = try await RecordAPITests.modify(client, fixture, [["operationType": "create", "record": record]])
                XCTAssertEqual(status, 400, "\(extra): \(records)")
                XCTAssertEqual(records.first?["serverErrorCode"] as? String, "BAD_REQUEST", "\(extra)")
                XCTAssertTrue((records.first?["reason"] as? String ?? "").contains(reason), "\(extra): \(records)")
            }
            let stored = try await RecordAPITests.lookup(client, fixture, ["n"])
            XCTAssertEqual(stored.first?["serverErrorCode"] as? String, "NOT_FOUND", "nothing of a refused save is stored")

            // timeToLive becomes an absolute expirationDate, echoed by the save and by lookup.
            var (status, records) = try await RecordAPITests.modify(client, fixture, [
                ["operationType": "create", "record": RecordAPITests.note("ttl", ["title": ["value": "x"]]).merging(["timeToLive": 3600]) { $1 }],
                ["operationType": "create", "record": RecordAPITests.note("date", ["title": ["value": "x"]]).merging(["expirationDate": now + 7_200_000]) { $1 }],
                ["operationType": "create", "record": RecordAPITests.note("plain", ["title": ["value": "x"]])],
            ])
            XCTAssertEqual(status, 200, "\(records)")
            let echoed = try XCTUnwrap(records.first?["expirationDate"] as? Int64)
            XCTAssertTrue((now + 3_600_000...Self.nowMilliseconds + 3_600_000).contains(echoed), "\(echoed)")
            XCTAssertEqual(records[1]["expirationDate"] as? Int64, now + 7_200_000)
            XCTAssertNil(records[2]["expirationDate"], "a record without an expiration shows none")
            let looked = try await RecordAPITests.lookup(client, fixture, ["ttl", "date", "plain"])
            XCTAssertEqual(looked.map { $0["expirationDate"] as? Int64 }, [echoed, now + 7_200_000, nil])

            // An update without the keys keeps the expiration; null clears it.
            let tag = try XCTUnwrap(looked[0]["recordChangeTag"] as? String)
            (status, records) = try await RecordAPITests.modify(client, fixture, [
                ["operationType": "update", "record": RecordAPITests.note("ttl", ["title": ["value": "y"]], tag: tag)],
                ["operationType": "forceUpdate", "record": RecordAPITests.note("date", ["title": ["value": "y"]]).merging(["expirationDate": NSNull()]) { $1 }],
            ])
            XCTAssertEqual(status, 200, "\(records)")
            XCTAssertEqual(records.first?["expirationDate"] as? Int64, echoed, "kept")
            XCTAssertNil(records.last?["expirationDate"], "cleared")
        }
    }

    func testAnExpiredRecordDisappearsAtOnceAndItsDeleteReachesSyncAndAZoneSubscription() async throws {
        try await APIPipelineFixture.withStack(projection: IndexerProjection(), relay: true, worker: true) { fixture, client, _, location in
            try await RecordAPITests.createZone(client, fixture, "Q")
            let (status, subscriptions) = try await SubscriptionTests.modify(client, fixture, [
                SubscriptionTests.create(["subscriptionID": "zone", "subscriptionType": "zone", "zoneID": ["zoneName": "Q"]]),
            ])
            XCTAssertEqual(status, 200, "\(subscriptions)")
            try await Self.withCollector(fixture.store, location) {
                // A device that has the zone from the start.
                var device = SyncTests.Device()
                try await device.sync(client, fixture, zone: "Q", limit: 200)
                let (saveStatus, saved) = try await RecordAPITests.modify(client, fixture, zone: "Q", [
                    ["operationType": "create", "record": RecordAPITests.note("eph", ["v": ["value": "e"]], type: "Item").merging(["timeToLive": 2]) { $1 }],
                    ["operationType": "create", "record": RecordAPITests.note("keep", ["v": ["value": "k"]], type: "Item")],
                    // Saved to expire, then saved again without an expiration, or with a later one: never deleted.
                    ["operationType": "create", "record": RecordAPITests.note("revived", ["v": ["value": "r"]], type: "Item").merging(["timeToLive": 2]) { $1 }],
                    ["operationType": "create", "record": RecordAPITests.note("later", ["v": ["value": "l"]], type: "Item").merging(["timeToLive": 2]) { $1 }],
                ])
                XCTAssertEqual(saveStatus, 200, "\(saved)")
                let expiresAt = try XCTUnwrap(saved.first?["expirationDate"] as? Int64)
                let (againStatus, again) = try await RecordAPITests.modify(client, fixture, zone: "Q", [
                    ["operationType": "forceUpdate", "record": ["recordName": "revived", "expirationDate": NSNull()]],
                    ["operationType": "forceUpdate", "record": ["recordName": "later", "timeToLive": 3600]],
                ])
                XCTAssertEqual(againStatus, 200, "\(again)")
                try await device.sync(client, fixture, zone: "Q", limit: 200)
                XCTAssertEqual(device.records, ["eph": "e", "keep": "k", "revived": "r", "later": "l"])
                // A second device that syncs only after the expiry: it never hears of eph at all.
                var late = SyncTests.Device()

                // The query index holds the records (eph too, unless it has expired meanwhile).
                try await TestSupport.eventually(timeout: .seconds(30), "the query index to hold the records") {
                    let names = try await Self.query(client, fixture)
                    return names.isSuperset(of: ["keep", "revived", "later"]) && (names.contains("eph") || Self.nowMilliseconds >= expiresAt)
                }
                // From the moment it expires, lookup, query and sync say it is gone, collected or not.
                try await TestSupport.eventually(timeout: .seconds(30), "eph to expire") {
                    try await RecordAPITests.lookup(client, fixture, zone: "Q", ["eph"]).first?["serverErrorCode"] as? String == "NOT_FOUND"
                }
                let queried = try await Self.query(client, fixture)
                XCTAssertEqual(queried, ["keep", "revived", "later"], "an expired record is not queried")
                try await late.sync(client, fixture, zone: "Q", limit: 200)
                XCTAssertEqual(late.records, ["keep": "k", "revived": "r", "later": "l"])

                // stratus-gc deletes it through the write path: the first device's sync gets the delete.
                try await TestSupport.eventually(timeout: .seconds(60), "the first device to receive eph's delete") {
                    var probe = device
                    try await probe.sync(client, fixture, zone: "Q", limit: 200)
                    return probe.records["eph"] == nil
                }
                let deletes = try await Self.deleteEvents(fixture.store)
                XCTAssertEqual(deletes.map(\.recordName), ["eph"], "only the expired record is deleted")
                XCTAssertTrue(deletes.allSatisfy { $0.requestID.hasPrefix("stratus-gc/expire/") }, "\(deletes)")
                try await device.sync(client, fixture, zone: "Q", limit: 200)
                XCTAssertEqual(device.records, ["keep": "k", "revived": "r", "later": "l"])

                // The zone subscription fires for the save, the second save and the collector's delete.
                let notifications = try await SubscriptionTests.waitForNotifications(client, fixture, count: 3)
                XCTAssertEqual(notifications.filter { $0["subscriptionID"] as? String == "zone" }.count, 3, "\(notifications)")

                // Once the index has nothing due, nothing more is deleted: the re-saved records live.
                try await TestSupport.eventually(timeout: .seconds(30), "the expiry index to hold nothing due") {
                    try await RecordExpirationIndex(store: fixture.store).due(limit: 10, logger: TestSupport.logger).entries.isEmpty
                }
                let alive = try await RecordAPITests.lookup(client, fixture, zone: "Q", ["keep", "revived", "later"])
                XCTAssertEqual(alive.compactMap { $0["recordName"] as? String }, ["keep", "revived", "later"])
                XCTAssertEqual(alive.compactMap { $0["serverErrorCode"] as? String }, [])
            }
        }
    }

    func testWritingOverAnExpiredRecordDeletesItFirstAndAStaleIndexEntryDeletesNothing() async throws {
        try await RecordAPITests.withAPI { fixture, client in
            try await RecordAPITests.createZone(client, fixture, "Notes")
            let database = DatabaseID(container: fixture.container, environment: .development, scope: .private, owner: "_alice")
            var (status, records) = try await RecordAPITests.modify(client, fixture, [
                ["operationType": "create", "record": RecordAPITests.note("a", ["v": ["value": "1"]]).merging(["timeToLive": 1]) { $1 }],
                ["operationType": "create", "record": RecordAPITests.note("b", ["v": ["value": "1"]])],
            ])
            XCTAssertEqual(status, 200, "\(records)")
            try await TestSupport.eventually(timeout: .seconds(10), "a to expire") {
                try await RecordAPITests.lookup(client, fixture, ["a"]).first?["serverErrorCode"] as? String == "NOT_FOUND"
            }
            // An update of the expired record finds none; a create makes a new one, after its delete.
            (status, records) = try await RecordAPITests.modify(client, fixture, [
                ["operationType": "update", "record": RecordAPITests.note("a", ["v": ["value": "2"]], tag: "x")]])
            XCTAssertEqual(records.first?["serverErrorCode"] as? String, "NOT_FOUND", "\(records)")
            (status, records) = try await RecordAPITests.modify(client, fixture, [
                ["operationType": "create", "record": RecordAPITests.note("a", ["v": ["value": "3"]])]])
            XCTAssertEqual(status, 200, "\(records)")
            XCTAssertNil(records.first?["expirationDate"])
            let types = try await Self.eventTypes(fixture.store, record: "a")
            XCTAssertEqual(types, ["record.saved", "record.deleted", "record.saved"])
            // The zone had no tombstone when that write began: the delete buried the record, and the
            // create in the same transaction took the tombstone away again.
            let tombstones = try await TestSupport.count(fixture.store, """
                SELECT count(*) FROM record_tombstones WHERE owner = '_alice' AND zone_name = 'Notes' AND record_name = 'a'
                """)
            XCTAssertEqual(tombstones, 0)

            // An index entry that says a live record is due (stale, or replayed) deletes nothing.
            _ = try await fixture.store.withConnection { connection in
                try await connection.query("""
                    INSERT INTO record_expirations (container, environment, scope, owner, zone_name, record_name, expires_at)
                    VALUES (\(fixture.container), 'development', 'private', '_alice', 'Notes', 'a', 1), (\(fixture.container), 'development', 'private', '_alice', 'Notes', 'b', 2)
                    """, logger: TestSupport.logger)
            }
            let collector = ExpiredRecordCollector(store: fixture.store, logger: TestSupport.logger)
            let handled = try await collector.collectDue()
            XCTAssertEqual(handled, 2)
            let again = try await collector.collectDue()
            XCTAssertEqual(again, 0, "the stale entries are gone")
            let alive = try await RecordStore(store: fixture.store).lookup(["a", "b"], zone: ZoneID(zoneName: "Notes", ownerRecordName: "_alice"),
                                                                           in: database, logger: TestSupport.logger)
            XCTAssertEqual(alive.count, 2)
            let typesOfB = try await Self.eventTypes(fixture.store, record: "b")
            XCTAssertEqual(typesOfB, ["record.saved"])
        }
    }

    func testABatchOfDeletionsLeavesTheExpiryIndexAndAssetReferencesAsOneEventAtATimeWould() async throws {
        try await RecordAPITests.withAPI { fixture, client in
            try await RecordAPITests.createZone(client, fixture, "Notes")
            let zoneKey = ZoneKey(database: DatabaseID(container: fixture.container, environment: .development, scope: .private, owner: "_alice"),
                                  zoneName: "Notes")
            var (status, reply) = try await RecordAPITests.modify(client, fixture, (1...4).map { index in
                ["operationType": "create", "record": RecordAPITests.note("r\(index)", ["v": ["value": "\(index)"]]).merging(["timeToLive": 3600]) { $1 }]
            })
            XCTAssertEqual(status, 200, "\(reply)")
            (status, reply) = try await RecordAPITests.modify(client, fixture, ["r2", "r3"].map { ["operationType": "forceDelete", "record": ["recordName": $0]] })
            XCTAssertEqual(status, 200, "\(reply)")
            // r3 again, with an expiration: its save follows its deletion in the batch, and must keep its entry.
            (status, reply) = try await RecordAPITests.modify(client, fixture, [
                ["operationType": "create", "record": RecordAPITests.note("r3", ["v": ["value": "again"]]).merging(["timeToLive": 3600]) { $1 }]])
            XCTAssertEqual(status, 200, "\(reply)")
            // r1 and r2 hold an asset each, r4 one it has already let go of.
            let assets = (UUID(), UUID(), UUID())
            _ = try await fixture.store.withConnection { connection in
                try await connection.query("""
                    INSERT INTO asset_references (asset_id, zone_key, record_name, referenced, changed_at)
                    VALUES (\(assets.0), \(zoneKey.rawValue), 'r1', true, now()), (\(assets.1), \(zoneKey.rawValue), 'r2', true, now()),
                           (\(assets.2), \(zoneKey.rawValue), 'r4', false, '2000-01-01')
                    """, logger: TestSupport.logger)
            }
            let events = try await EventLog(store: fixture.store).events(after: 0, limit: 10_000, logger: TestSupport.logger)
            XCTAssertEqual(events.map(\.type.rawValue).suffix(3), ["record.deleted", "record.deleted", "record.saved"])
            let projection = CompositeProjection(name: "stratus-gc", parts: [ExpiryProjection(), AssetReferenceProjection()])
            let applied = try await Applier(projection: projection, store: fixture.store).apply(batch: events, logger: TestSupport.logger)
            XCTAssertEqual(applied, events.count)

            let indexed = try await fixture.store.withConnection { connection in
                var names: [String] = []
                for try await name in try await connection.query(
                    "SELECT record_name FROM record_expirations WHERE zone_name = 'Notes' ORDER BY record_name", logger: TestSupport.logger
                ).decode(String.self) { names.append(name) }
                return names
            }
            XCTAssertEqual(indexed, ["r1", "r3", "r4"], "r2's entry went with its deletion; r3's re-creation indexed it again")
            let references = try await fixture.store.withConnection { connection in
                var rows: [String: (Bool, Bool)] = [:]
                for try await (name, referenced, old) in try await connection.query(
                    "SELECT record_name, referenced, changed_at < '2001-01-01' FROM asset_references", logger: TestSupport.logger
                ).decode((String, Bool, Bool).self) { rows[name] = (referenced, old) }
                return rows
            }
            XCTAssertEqual(references["r1"]?.0, true, "a record that was not deleted keeps its asset")
            XCTAssertEqual(references["r2"]?.0, false, "a deleted record releases its asset")
            XCTAssertEqual(references["r2"]?.1, false, "released at its deletion, not before")
            XCTAssertEqual(references["r4"]?.1, true, "an asset released earlier keeps the time it was released")
        }
    }

    /// stratus-gc takes a run of saves with a few statements (the expiry index: each record's last
    /// save; asset counts: one release per stretch of updates without assets). Applied as a batch,
    /// a log of saves that add, move and drop expirations, save a record several times and release
    /// assets must leave both tables exactly as applying its events one at a time does.
    func testABatchOfSavesLeavesTheExpiryIndexAndAssetReferencesAsOneEventAtATimeWould() async throws {
        try await RecordAPITests.withAPI { fixture, client in
            try await RecordAPITests.createZone(client, fixture, "Notes")
            let zoneKey = ZoneKey(database: DatabaseID(container: fixture.container, environment: .development, scope: .private, owner: "_alice"),
                                  zoneName: "Notes")
            func save(_ operations: [(String, Int?)]) async throws {
                let (status, reply) = try await RecordAPITests.modify(client, fixture, operations.map { name, ttl in
                    var record = RecordAPITests.note(name, ["v": ["value": "\(name) \(ttl ?? 0)"]])
                    // No time to live: none (a save that names no expiration keeps the one it had).
                    if let ttl { record["timeToLive"] = ttl } else { record["expirationDate"] = NSNull() }
                    return ["operationType": "forceReplace", "record": record]
                })
                XCTAssertEqual(status, 200, "\(reply)")
            }
            try await save([("r1", 3600), ("r2", 3600), ("r3", 3600), ("r4", 3600), ("r5", nil)])
            try await save([("r1", nil), ("r2", 7200), ("r5", 600)])    // dropped, moved, added
            try await save([("r3", nil)])
            try await save([("r3", 900), ("r2", nil), ("r6", nil)])     // back again, dropped after a move, created without
            try await save([("r2", nil), ("r1", nil)])                  // saved again without
            let events = try await EventLog(store: fixture.store).events(after: 0, limit: 10_000, logger: TestSupport.logger)
            XCTAssertGreaterThanOrEqual(events.filter { $0.type == RecordSaved.eventType }.count, 14)
            let projection = CompositeProjection(name: "stratus-gc", parts: [ExpiryProjection(), AssetReferenceProjection()])

            // r1, r2 and r4 hold an asset each from the start; r5 one released long ago.
            func seedAssets() async throws {
                _ = try await fixture.store.withConnection { connection in
                    try await connection.query("DELETE FROM asset_references", logger: TestSupport.logger)
                    try await connection.query("DELETE FROM record_expirations", logger: TestSupport.logger)
                }
                _ = try await fixture.store.withConnection { connection in
                    try await connection.query("""
                        INSERT INTO asset_references (asset_id, zone_key, record_name, referenced, changed_at)
                        VALUES ('00000000-0000-4000-8000-000000000001', \(zoneKey.rawValue), 'r1', true, '2000-01-01'),
                               ('00000000-0000-4000-8000-000000000002', \(zoneKey.rawValue), 'r2', true, '2000-01-01'),
                               ('00000000-0000-4000-8000-000000000004', \(zoneKey.rawValue), 'r4', true, '2000-01-01'),
                               ('00000000-0000-4000-8000-000000000005', \(zoneKey.rawValue), 'r5', false, '2000-01-01')
                        """, logger: TestSupport.logger)
                }
            }
            func state() async throws -> [String] {
                try await fixture.store.withConnection { connection in
                    var rows: [String] = []
                    for try await (name, at) in try await connection.query(
                        "SELECT record_name, expires_at FROM record_expirations ORDER BY record_name", logger: TestSupport.logger
                    ).decode((String, Int64).self) { rows.append("expires \(name) \(at)") }
                    for try await (name, referenced, at) in try await connection.query(
                        "SELECT record_name, referenced, (extract(epoch FROM changed_at) * 1000)::int8 FROM asset_references ORDER BY record_name",
                        logger: TestSupport.logger
                    ).decode((String, Bool, Int64).self) { rows.append("asset \(name) \(referenced) \(at)") }
                    return rows
                }
            }

            try await seedAssets()
            for event in events {
                try await fixture.store.readCommitted(logger: TestSupport.logger) { transaction in
                    try await projection.apply(event, in: transaction, logger: TestSupport.logger)
                }
            }
            let oneAtATime = try await state()
            try await seedAssets()
            try await fixture.store.readCommitted(logger: TestSupport.logger) { transaction in
                try await projection.apply(events, in: transaction, logger: TestSupport.logger)
            }
            let batched = try await state()
            XCTAssertEqual(batched, oneAtATime)
            // What both must be: r2, r3 and r5 expire; r1's, r2's and r4's assets are released, r4's
            // (never saved after the start) not; each release at the record's first update.
            XCTAssertEqual(oneAtATime.filter { $0.hasPrefix("expires") }.map { $0.split(separator: " ")[1] }, ["r3", "r4", "r5"])
            let released = oneAtATime.filter { $0.hasPrefix("asset") && $0.contains(" false ") }.map { $0.split(separator: " ")[1] }
            XCTAssertEqual(released, ["r1", "r2", "r5"])
            let firstUpdate = try XCTUnwrap(events.first { $0.type == RecordSaved.eventType && (try? RecordSaved.withoutPrevious($0))?.record.recordName == "r1"
                && $0.payloadMentions(Data("previousChangeTag".utf8)) })
            XCTAssertTrue(oneAtATime.contains("asset r1 false \(firstUpdate.createdAt)"), "\(oneAtATime)")
        }
    }

    func testRemovingDealtWithEntriesPassesOverOnesAnotherTransactionHoldsAndOnesWithANewExpiration() async throws {
        try await RecordAPITests.withAPI { fixture, _ in
            let database = DatabaseID(container: fixture.container, environment: .development, scope: .private, owner: "_alice")
            let zone = ZoneID(zoneName: "Notes", ownerRecordName: "_alice")
            _ = try await fixture.store.withConnection { connection in
                try await connection.query("""
                    INSERT INTO record_expirations (container, environment, scope, owner, zone_name, record_name, expires_at)
                    SELECT \(fixture.container), 'development', 'private', '_alice', 'Notes', name, 5
                    FROM unnest(ARRAY['held', 'done', 'changed', 'other']) AS name
                    """, logger: TestSupport.logger)
            }
            let index = RecordExpirationIndex(store: fixture.store)
            let dealtWith = [("held", 5), ("done", 5), ("changed", 4)].map { name, expiresAt in
                RecordExpirationIndex.Entry(database: database, zone: zone, recordName: name, expiresAt: Int64(expiresAt))
            }
            try await fixture.store.withConnection { holder in
                // A projection's transaction is writing 'held'.
                try await holder.query("BEGIN", logger: TestSupport.logger)
                try await holder.query("SELECT 1 FROM record_expirations WHERE record_name = 'held' FOR UPDATE", logger: TestSupport.logger)
                // The removal must not wait for it: if it did, it would wait forever (the holder commits only after it).
                let removal = Task { try await index.remove(dealtWith, logger: TestSupport.logger) }
                do {
                    try await TestSupport.eventually(timeout: .seconds(30), "the removal to finish while the entry is held") {
                        let remaining = try await fixture.store.withConnection { connection in
                            try await Self.scalarNames(connection, "SELECT record_name FROM record_expirations WHERE record_name <> 'held' ORDER BY record_name")
                        }
                        return remaining == ["changed", "other"]
                    }
                    try await removal.value
                } catch {
                    // Let a removal that waits go, so the test ends with its failure instead of hanging.
                    _ = try? await holder.query("ROLLBACK", logger: TestSupport.logger)
                    throw error
                }
                try await holder.query("ROLLBACK", logger: TestSupport.logger)
            }
            let remaining = try await fixture.store.withConnection { connection in
                try await Self.scalarNames(connection, "SELECT record_name FROM record_expirations ORDER BY record_name")
            }
            XCTAssertEqual(remaining, ["changed", "held", "other"], "only the entry dealt with, unchanged and free, went")
        }
    }

    static func scalarNames(_ connection: PostgresConnection, _ sql: String) async throws -> [String] {
        var names: [String] = []
        for try await name in try await connection.query(PostgresQuery(unsafeSQL: sql), logger: TestSupport.logger).decode(String.self) { names.append(name) }
        return names
    }

    func testSyncReportsAnExpiredRecordAsDeletedOnlyToADeviceThatMayHoldIt() async throws {
        try await RecordAPITests.withAPI { fixture, client in
            try await RecordAPITests.createZone(client, fixture, "Notes")
            var (status, records) = try await RecordAPITests.modify(client, fixture, [
                ["operationType": "create", "record": RecordAPITests.note("a", ["v": ["value": "1"]]).merging(["timeToLive": 2]) { $1 }],
                ["operationType": "create", "record": RecordAPITests.note("b", ["v": ["value": "1"]])],
            ])
            XCTAssertEqual(status, 200, "\(records)")
            var holder = SyncTests.Device()
            try await holder.sync(client, fixture, zone: "Notes", limit: 200)
            XCTAssertEqual(holder.records, ["a": "1", "b": "1"])
            // A later change the holder has not seen, keeping the expiration.
            (status, records) = try await RecordAPITests.modify(client, fixture, [
                ["operationType": "forceUpdate", "record": RecordAPITests.note("a", ["v": ["value": "2"]])]])
            XCTAssertEqual(status, 200, "\(records)")
            XCTAssertNotNil(records.first?["expirationDate"], "kept")
            try await TestSupport.eventually(timeout: .seconds(10), "a to expire") {
                try await RecordAPITests.lookup(client, fixture, ["a"]).first?["serverErrorCode"] as? String == "NOT_FOUND"
            }
            // No collector runs here: sync hides the record by itself.
            var deletes: [String] = []
            try await holder.sync(client, fixture, zone: "Notes", limit: 200) { _, page in
                deletes += page.filter { $0["deleted"] as? Bool == true }.compactMap { $0["recordName"] as? String }
            }
            XCTAssertEqual(holder.records, ["b": "1"])
            XCTAssertEqual(deletes, ["a"], "the device that may hold a learns it is gone")
            var newcomer = SyncTests.Device()
            var mentioned: [String] = []
            try await newcomer.sync(client, fixture, zone: "Notes", limit: 200) { _, page in mentioned += page.compactMap { $0["recordName"] as? String } }
            XCTAssertEqual(mentioned, ["b"], "a device that never saw a hears nothing of it")
            var snapshot = SyncTests.Device()
            var seen: [String] = []
            try await snapshot.sync(client, fixture, zone: "Notes", limit: 200, extra: ["snapshot": true]) { _, page in
                seen += page.map { "\($0["recordName"] as? String ?? ""):\($0["deleted"] as? Bool == true ? "deleted" : "saved")" }
            }
            XCTAssertFalse(seen.contains("a:saved"), "a snapshot sync shows no version of an expired record: \(seen)")
            XCTAssertEqual(snapshot.records, ["b": "1"])
        }
    }

    // MARK: helpers

    /// Runs stratus-gc's projection and collector, and the subscriptions worker, beside the stack.
    static func withCollector(_ store: PostgresStore, _ location: APIPipelineFixture.Location, _ body: () async throws -> Void) async throws {
        let (_, configuration) = PipelineFixture().configurations(topic: location.topic, partitions: location.partitions)
        let kafka = KafkaClientConfiguration(brokers: location.brokers)
        let gc = Worker(projection: ExpiryProjection(), store: store, kafka: kafka, configuration: configuration, logger: TestSupport.logger)
        let subscriptions = Worker(projection: SubscriptionsProjection(), store: store, kafka: kafka, configuration: configuration, logger: TestSupport.logger)
        let collector = ExpiredRecordCollector(store: store, logger: TestSupport.logger)
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await gc.run() }
            group.addTask { try await subscriptions.run() }
            group.addTask { try await collector.run() }
            defer { group.cancelAll() }
            try await body()
        }
    }

    /// The names records/query answers for Items in Q.
    static func query(_ client: any TestClientProtocol, _ fixture: Fixture) async throws -> Set<String> {
        let (status, json) = try await RecordAPITests.post(client, fixture.path("records/query"), [
            "zoneID": ["zoneName": "Q"], "query": ["recordType": "Item"]])
        XCTAssertEqual(status, 200, "\(json)")
        return Set((json["records"] as? [Body] ?? []).compactMap { $0["recordName"] as? String })
    }

    /// The record.deleted events in the log: record name and causing request.
    static func deleteEvents(_ store: PostgresStore) async throws -> [(recordName: String, requestID: String)] {
        let events = try await EventLog(store: store).events(after: 0, limit: 100_000, logger: TestSupport.logger)
        return try events.filter { $0.type == RecordDeleted.eventType }.map { (try $0.decode(RecordDeleted.self).recordName, $0.causation.requestID) }
    }

    /// The types of the events of one record, in order.
    static func eventTypes(_ store: PostgresStore, record: String) async throws -> [String] {
        let events = try await EventLog(store: store).events(after: 0, limit: 100_000, logger: TestSupport.logger)
        var types: [String] = []
        for event in events {
            let name: String
            switch event.type {
            case RecordSaved.eventType: name = try event.decode(RecordSaved.self).record.recordName
            case RecordDeleted.eventType: name = try event.decode(RecordDeleted.self).recordName
            default: continue
            }
            if name == record { types.append(event.type.rawValue) }
        }
        return types
    }
}
