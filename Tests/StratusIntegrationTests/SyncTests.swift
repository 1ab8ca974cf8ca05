import Foundation
import Hummingbird
import HummingbirdTesting
import PostgresNIO
import StratusAPI
import StratusCore
import StratusPostgres
import StratusTesting
import StratusWorkers
import Synchronization
import XCTest

/// records/changes, changes/zone, zones/changes and changes/database against the real PostgreSQL.
final class SyncTests: XCTestCase {
    typealias Fixture = RecordAPITests.Fixture
    typealias Body = [String: Any]

    func withFixture(maxResults: Int = 200, _ body: @Sendable (Fixture, any TestClientProtocol) async throws -> Void) async throws {
        try await TestSupport.withMigratedStore { store, _ in
            let token = try await ContainerStore(store: store).create(container: "iCloud.com.example.notes", label: "test", logger: TestSupport.logger)
            var configuration = APIConfiguration(secretKey: SecretKey.generate())
            configuration.limits.maxResults = maxResults
            let fixture = Fixture(store: store, configuration: configuration, apiToken: token)
            let router = buildRouter(APIDependencies(store: store, readiness: [], metrics: { "" }), configuration: configuration)
            try await Application(router: router, logger: TestSupport.logger).test(.router) { client in try await body(fixture, client) }
        }
    }

    /// A device's local copy of a zone, kept current with records/changes.
    struct Device {
        var records: [String: String] = [:]  // recordName → value of field "v"
        var token: String?
        var resets = 0

        /// Pulls until moreComing is false. On CHANGE_TOKEN_EXPIRED it drops everything and starts over.
        mutating func sync(
            _ client: any TestClientProtocol, _ fixture: Fixture, zone: String, limit: Int, extra: Body = [:],
            afterPage: ([String: String], [Body]) -> Void = { _, _ in }
        ) async throws {
            while true {
                var body: Body = ["zoneID": ["zoneName": zone], "resultsLimit": limit]
                body.merge(extra) { _, new in new }
                if let token { body["syncToken"] = token }
                let (status, reply) = try await RecordAPITests.post(client, fixture.path("records/changes"), body)
                if reply["serverErrorCode"] as? String == "CHANGE_TOKEN_EXPIRED" {
                    records = [:]
                    token = nil
                    resets += 1
                    continue
                }
                if reply["serverErrorCode"] as? String == "ZONE_NOT_FOUND" { return }  // deleted right now; try later
                XCTAssertEqual(status, 200, "\(reply)")
                for record in reply["records"] as? [Body] ?? [] {
                    let name = record["recordName"] as? String ?? ""
                    if record["deleted"] as? Bool == true {
                        records[name] = nil
                    } else {
                        records[name] = RecordAPITests.fields(record)["v"]?["value"] as? String
                    }
                }
                token = reply["syncToken"] as? String
                afterPage(records, reply["records"] as? [Body] ?? [])
                if reply["moreComing"] as? Bool != true { return }
            }
        }
    }

    /// The zone's records as the server holds them.
    /// The zone's records as the records table holds them: the oracle reads the current state
    /// directly, not through the sync index the test is checking.
    static func serverState(_ fixture: Fixture, zone: String) async throws -> [String: String] {
        try await fixture.store.withConnection { connection in
            let rows = try await connection.query("""
                SELECT record_name, fields->'v'->>'value' FROM records
                WHERE container = \(fixture.container) AND environment = 'development' AND scope = 'private' AND owner = '_alice'
                  AND zone_name = \(zone)
                """, logger: TestSupport.logger)
            var state: [String: String] = [:]
            for try await (name, value) in rows.decode((String, String?).self) {
                if let value { state[name] = value }
            }
            return state
        }
    }

    /// Writers create, update and delete records (and once delete and re-create the zone) while a
    /// device pulls with a small resultsLimit; after the writers stop and the device drains, its copy
    /// equals the server's exactly: nothing missing, nothing stale, no delete resurrected.
    /// Twelve seeds in three tests, which a parallel run runs at once.
    func testSyncingDeviceConvergesUnderConcurrentWritesForSeeds1To4() async throws {
        try await convergesUnderConcurrentWrites(seeds: 1...4)
    }

    func testSyncingDeviceConvergesUnderConcurrentWritesForSeeds5To8() async throws {
        try await convergesUnderConcurrentWrites(seeds: 5...8)
    }

    func testSyncingDeviceConvergesUnderConcurrentWritesForSeeds9To12() async throws {
        try await convergesUnderConcurrentWrites(seeds: 9...12)
    }

    private func convergesUnderConcurrentWrites(seeds: ClosedRange<UInt64>) async throws {
        for seed in seeds {
            try await withFixture { fixture, client in
                try await RecordAPITests.createZone(client, fixture, "Sync")
                let progress = WriteProgress()
                let recreateAt = seed % 2 == 0 ? 40 : -1
                async let writes: Void = withThrowingTaskGroup(of: Void.self) { group in
                    defer { progress.finish() }
                    for writer in 0..<3 {
                        group.addTask {
                            var random = SplitMix64(seed: seed &* 31 &+ UInt64(writer))
                            for step in 0..<70 {
                                if writer == 0, step == recreateAt {
                                    let (deleted, _) = try await RecordAPITests.post(client, fixture.path("zones/modify"), ["operations": [["operationType": "delete", "zone": ["zoneID": ["zoneName": "Sync"]]]]])
                                    XCTAssertEqual(deleted, 200, "a zone delete waits for the zone's writers instead of failing")
                                    try await RecordAPITests.createZone(client, fixture, "Sync")
                                    continue
                                }
                                let name = "r\(random.next() % 25)"
                                let value = "s\(seed)w\(writer)n\(step)"
                                let operation: Body = switch random.next() % 4 {
                                case 0: ["operationType": "forceDelete", "record": ["recordName": name]]
                                case 1: ["operationType": "forceReplace", "record": RecordAPITests.note(name, ["v": ["value": value], "w": ["value": writer]])]
                                default: ["operationType": "forceUpdate", "record": RecordAPITests.note(name, ["v": ["value": value]])]
                                }
                                _ = try await RecordAPITests.modify(client, fixture, zone: "Sync", [operation])
                                progress.wrote()
                            }
                        }
                    }
                    try await group.waitForAll()
                }
                var device = Device()
                var random = SplitMix64(seed: seed)
                var rounds = 0
                // A round after each write that completed since the last (writers never wait for
                // the device, so other writes are in flight while it pages): a round with no new
                // write could only be answered what the device already holds.
                var seen = 0
                while case let (count, done) = await progress.next(after: seen), !done {
                    seen = count
                    try await device.sync(client, fixture, zone: "Sync", limit: Int(1 + random.next() % 4))
                    rounds += 1
                }
                print("seed \(seed): \(rounds) sync rounds during the writes, \(device.resets) resets")
                try await writes
                try await device.sync(client, fixture, zone: "Sync", limit: 3)
                let server = try await Self.serverState(fixture, zone: "Sync")
                XCTAssertEqual(device.records, server, "seed \(seed): the device's copy equals the server's")
                XCTAssertFalse(server.isEmpty, "seed \(seed): the workload leaves records behind")
                if recreateAt >= 0 { XCTAssertGreaterThanOrEqual(device.resets, 1, "seed \(seed): the re-created zone made the device reset") }
                // A fresh device agrees too.
                var fresh = Device()
                try await fresh.sync(client, fixture, zone: "Sync", limit: 7)
                XCTAssertEqual(fresh.records, server, "seed \(seed): a fresh sync equals the server")
            }
        }
    }

    /// A record the device holds, deleted, created again and deleted again before the device syncs:
    /// the device must still learn that it is gone (the second tombstone must not look newer than
    /// the device's token), and a record re-created and still alive comes back as a record.
    func testADeleteAfterARecreateIsReportedToDevicesThatHoldTheFirstIncarnation() async throws {
        try await withFixture { fixture, client in
            try await RecordAPITests.createZone(client, fixture, "Z")
            for name in ["twice", "back", "single"] {
                _ = try await RecordAPITests.modify(client, fixture, zone: "Z", [["operationType": "create", "record": RecordAPITests.note(name, ["v": ["value": "1"]])]])
            }
            var device = Device()
            try await device.sync(client, fixture, zone: "Z", limit: 10)
            XCTAssertEqual(device.records, ["twice": "1", "back": "1", "single": "1"])
            let token = try XCTUnwrap(device.token)
            for (type, name, value) in [("forceDelete", "twice", ""), ("create", "twice", "2"), ("forceDelete", "twice", ""),
                                        ("forceDelete", "back", ""), ("create", "back", "3"),
                                        ("forceDelete", "single", "")] {
                let record: Body = type == "create" ? RecordAPITests.note(name, ["v": ["value": value]]) : ["recordName": name]
                let (_, results) = try await RecordAPITests.modify(client, fixture, zone: "Z", [["operationType": type, "record": record]])
                XCTAssertNil(results.first?["serverErrorCode"], "\(type) \(name)")
            }
            let (_, reply) = try await RecordAPITests.post(client, fixture.path("records/changes"), ["zoneID": ["zoneName": "Z"], "syncToken": token])
            let records = reply["records"] as? [Body] ?? []
            let deleted = Set(records.filter { $0["deleted"] as? Bool == true }.compactMap { $0["recordName"] as? String })
            let saved = records.filter { $0["deleted"] as? Bool != true }.compactMap { $0["recordName"] as? String }
            XCTAssertEqual(deleted, ["twice", "single"], "every record the device holds and that is gone is reported deleted")
            XCTAssertEqual(saved, ["back"])
            try await device.sync(client, fixture, zone: "Z", limit: 2)
            XCTAssertEqual(device.records, ["back": "3"])
        }
    }

    func testDeletesOfRecordsTheDeviceNeverSawAreNotReportedAndTokensResetWhenTheyMust() async throws {
        try await withFixture { fixture, client in
            try await RecordAPITests.createZone(client, fixture, "Z")
            try await RecordAPITests.createZone(client, fixture, "Other")
            _ = try await RecordAPITests.modify(client, fixture, zone: "Z", [["operationType": "create", "record": RecordAPITests.note("seen", ["v": ["value": "1"]])]])
            var device = Device()
            try await device.sync(client, fixture, zone: "Z", limit: 10)
            XCTAssertEqual(device.records, ["seen": "1"])
            let token = try XCTUnwrap(device.token)
            // Created and deleted after the token: never reported. Seen and deleted: reported.
            _ = try await RecordAPITests.modify(client, fixture, zone: "Z", [["operationType": "create", "record": RecordAPITests.note("brief", ["v": ["value": "x"]])]])
            _ = try await RecordAPITests.modify(client, fixture, zone: "Z", [
                ["operationType": "forceDelete", "record": ["recordName": "brief"]], ["operationType": "forceDelete", "record": ["recordName": "seen"]],
            ])
            let (_, reply) = try await RecordAPITests.post(client, fixture.path("records/changes"), ["zoneID": ["zoneName": "Z"], "syncToken": token])
            let records = reply["records"] as? [Body] ?? []
            XCTAssertEqual(records.map { $0["recordName"] as? String }, ["seen"])
            XCTAssertEqual(records.first?["deleted"] as? Bool, true)

            func expectError(_ body: Body, user: String = "_alice", _ code: String, _ status: Int, _ what: String) async throws {
                let (actualStatus, reply) = try await RecordAPITests.post(client, fixture.path("records/changes", user: user), body)
                XCTAssertEqual(reply["serverErrorCode"] as? String, code, what)
                XCTAssertEqual(actualStatus, status, what)
                XCTAssertNotNil(reply["reason"] as? String)
            }
            // Tampered token.
            var tampered = Array(token)
            tampered[5] = tampered[5] == "A" ? "B" : "A"
            try await expectError(["zoneID": ["zoneName": "Z"], "syncToken": String(tampered)], "BAD_REQUEST", 400, "tampered")
            try await expectError(["zoneID": ["zoneName": "Z"], "syncToken": "garbage"], "BAD_REQUEST", 400, "garbage")
            // Token of another zone, and of another user's database.
            try await expectError(["zoneID": ["zoneName": "Other"], "syncToken": token], "CHANGE_TOKEN_EXPIRED", 410, "other zone")
            try await RecordAPITests.createZone(client, fixture, "Z", user: "_bob")
            try await expectError(["zoneID": ["zoneName": "Z"], "syncToken": token], user: "_bob", "CHANGE_TOKEN_EXPIRED", 410, "other database")
            // Tombstones collected past the token.
            let database = DatabaseID(container: fixture.container, environment: .development, scope: .private, owner: "_alice")
            let collected = try await SyncStore(store: fixture.store).collectTombstones(
                zone: ZoneID(zoneName: "Z", ownerRecordName: "_alice"), in: database, olderThan: Date().addingTimeInterval(60), logger: TestSupport.logger)
            XCTAssertEqual(collected, 2)
            try await expectError(["zoneID": ["zoneName": "Z"], "syncToken": token], "CHANGE_TOKEN_EXPIRED", 410, "older than the horizon")
            // A token taken after the horizon still works.
            var current = Device()
            try await current.sync(client, fixture, zone: "Z", limit: 10)
            let (okStatus, _) = try await RecordAPITests.post(client, fixture.path("records/changes"), ["zoneID": ["zoneName": "Z"], "syncToken": current.token!])
            XCTAssertEqual(okStatus, 200)
            // The zone deleted and created again.
            _ = try await RecordAPITests.post(client, fixture.path("zones/modify"), ["operations": [["operationType": "delete", "zone": ["zoneID": ["zoneName": "Z"]]]]])
            try await RecordAPITests.createZone(client, fixture, "Z")
            try await expectError(["zoneID": ["zoneName": "Z"], "syncToken": current.token!], "CHANGE_TOKEN_EXPIRED", 410, "re-created zone")
            // The default zone has no change tracking.
            try await expectError(["zoneID": ["zoneName": "_defaultZone"]], "BAD_REQUEST", 400, "default zone")
        }
    }

    /// A sync that starts after tombstones were collected passes through tokens below the
    /// horizon: it finishes (its tokens carry the horizon they were issued at), while a token
    /// issued before a later collection still resets.
    func testAFreshSyncOfAZoneWhoseTombstonesWereCollectedFinishes() async throws {
        try await withFixture { fixture, client in
            try await RecordAPITests.createZone(client, fixture, "Z")
            _ = try await RecordAPITests.modify(client, fixture, zone: "Z", (0..<6).map {
                ["operationType": "create", "record": RecordAPITests.note("r\($0)", ["v": ["value": "\($0)"]])]
            })
            _ = try await RecordAPITests.modify(client, fixture, zone: "Z", [["operationType": "forceDelete", "record": ["recordName": "r5"]]])
            let sync = SyncStore(store: fixture.store)
            let zone = ZoneID(zoneName: "Z", ownerRecordName: "_alice")
            let database = DatabaseID(container: fixture.container, environment: .development, scope: .private, owner: "_alice")
            let collected = try await sync.collectTombstones(zone: zone, in: database, olderThan: Date().addingTimeInterval(60), logger: TestSupport.logger)
            XCTAssertEqual(collected, 1)
            // Pages of one record: every token but the last is below the horizon (r5's deletion).
            var token: String?
            var names: [String] = []
            for _ in 0..<20 {
                var body: Body = ["zoneID": ["zoneName": "Z"], "resultsLimit": 1]
                if let token { body["syncToken"] = token }
                let (status, reply) = try await RecordAPITests.post(client, fixture.path("records/changes"), body)
                XCTAssertEqual(status, 200, "\(reply)")
                guard status == 200 else { return }
                names += (reply["records"] as? [Body] ?? []).compactMap { $0["recordName"] as? String }
                token = reply["syncToken"] as? String
                if reply["moreComing"] as? Bool != true { break }
            }
            XCTAssertEqual(names, ["r0", "r1", "r2", "r3", "r4"], "the sync finished with every live record")
            // A sync under way when tombstones are collected past its token resets.
            let (_, first) = try await RecordAPITests.post(client, fixture.path("records/changes"), ["zoneID": ["zoneName": "Z"], "resultsLimit": 1])
            let midway = try XCTUnwrap(first["syncToken"] as? String)
            _ = try await RecordAPITests.modify(client, fixture, zone: "Z", [["operationType": "forceDelete", "record": ["recordName": "r3"]]])
            let again = try await sync.collectTombstones(zone: zone, in: database, olderThan: Date().addingTimeInterval(60), logger: TestSupport.logger)
            XCTAssertEqual(again, 1)
            let (status, reply) = try await RecordAPITests.post(client, fixture.path("records/changes"), ["zoneID": ["zoneName": "Z"], "syncToken": midway, "resultsLimit": 1])
            XCTAssertEqual(status, 410, "\(reply)")
            XCTAssertEqual(reply["serverErrorCode"] as? String, "CHANGE_TOKEN_EXPIRED")
        }
    }

    func testChangesZoneAndDatabaseChanges() async throws {
        try await withFixture { fixture, client in
            for zone in ["A", "B", "C"] { try await RecordAPITests.createZone(client, fixture, zone) }
            var (_, reply) = try await RecordAPITests.post(client, fixture.path("changes/database"), [String: Any]())
            XCTAssertEqual((reply["zones"] as? [Body])?.compactMap { ($0["zoneID"] as? Body)?["zoneName"] as? String }, ["A", "B", "C"])
            let token = try XCTUnwrap(reply["syncToken"] as? String)
            // Nothing changed: nothing reported.
            (_, reply) = try await RecordAPITests.post(client, fixture.path("zones/changes"), ["syncToken": token])
            XCTAssertEqual((reply["zones"] as? [Body])?.count, 0)
            // A record change in A, B deleted, D created; pages of one zone.
            _ = try await RecordAPITests.modify(client, fixture, zone: "A", [["operationType": "create", "record": RecordAPITests.note("a1", ["v": ["value": "1"]])]])
            _ = try await RecordAPITests.post(client, fixture.path("zones/modify"), ["operations": [["operationType": "delete", "zone": ["zoneID": ["zoneName": "B"]]]]])
            try await RecordAPITests.createZone(client, fixture, "D")
            var next: String? = token
            var seen: [String: Bool] = [:]
            var pages = 0
            repeat {
                (_, reply) = try await RecordAPITests.post(client, fixture.path("changes/database"), ["metaSyncToken": next!, "resultsLimit": 1])
                for zone in reply["zones"] as? [Body] ?? [] { seen[(zone["zoneID"] as? Body)?["zoneName"] as? String ?? "?"] = zone["deleted"] as? Bool ?? false }
                next = reply["syncToken"] as? String
                pages += 1
            } while reply["moreComing"] as? Bool == true && pages < 10
            XCTAssertEqual(seen, ["A": false, "B": true, "D": false])
            XCTAssertEqual(pages, 3)
            // changes/zone: several zones at once, with desiredRecordTypes.
            _ = try await RecordAPITests.modify(client, fixture, zone: "A", [["operationType": "create", "record": RecordAPITests.note("t1", ["v": ["value": "x"]], type: "Task")]])
            (_, reply) = try await RecordAPITests.post(client, fixture.path("changes/zone"), ["zones": [
                ["zoneID": ["zoneName": "A"], "desiredRecordTypes": ["Task"]], ["zoneID": ["zoneName": "D"]], ["zoneID": ["zoneName": "B"]],
            ]])
            let zones = reply["zones"] as? [Body] ?? []
            XCTAssertEqual(zones.count, 3)
            XCTAssertEqual((zones[0]["records"] as? [Body])?.compactMap { $0["recordName"] as? String }, ["t1"])
            XCTAssertEqual((zones[1]["records"] as? [Body])?.count, 0)
            XCTAssertNotNil(zones[1]["syncToken"] as? String)
            XCTAssertEqual(zones[2]["serverErrorCode"] as? String, "ZONE_NOT_FOUND")
            // Bad database tokens.
            (_, reply) = try await RecordAPITests.post(client, fixture.path("changes/database", user: "_bob"), ["syncToken": token])
            XCTAssertEqual(reply["serverErrorCode"] as? String, "CHANGE_TOKEN_EXPIRED")
            (_, reply) = try await RecordAPITests.post(client, fixture.path("changes/database"), ["syncToken": "x" + token])
            XCTAssertEqual(reply["serverErrorCode"] as? String, "BAD_REQUEST")
        }
    }

    /// Reverse sync (an extension): newest first, and writes made during it arrive with the next forward sync.
    func testReverseSyncDeliversNewestFirstAndMissesNothing() async throws {
        try await withFixture { fixture, client in
            try await RecordAPITests.createZone(client, fixture, "R")
            for index in 0..<10 {
                _ = try await RecordAPITests.modify(client, fixture, zone: "R", [["operationType": "create", "record": RecordAPITests.note("r\(index)", ["v": ["value": "\(index)"]])]])
            }
            // The first reverse page, then writes while the reverse sync is under way, then the rest.
            var device = Device()
            var order: [String] = []
            let (_, reply) = try await RecordAPITests.post(client, fixture.path("records/changes"), ["zoneID": ["zoneName": "R"], "resultsLimit": 3, "reverse": true])
            order += (reply["records"] as? [Body] ?? []).compactMap { $0["recordName"] as? String }
            for record in reply["records"] as? [Body] ?? [] { device.records[record["recordName"] as! String] = RecordAPITests.fields(record)["v"]?["value"] as? String }
            device.token = reply["syncToken"] as? String
            XCTAssertEqual(reply["moreComing"] as? Bool, true)
            _ = try await RecordAPITests.modify(client, fixture, zone: "R", [
                ["operationType": "forceUpdate", "record": RecordAPITests.note("r0", ["v": ["value": "changed"]])],
                ["operationType": "create", "record": RecordAPITests.note("r10", ["v": ["value": "10"]])],
            ])
            try await device.sync(client, fixture, zone: "R", limit: 3, extra: ["reverse": true]) { _, page in
                order += page.compactMap { $0["recordName"] as? String }
            }
            // r0 changed meanwhile: it left the reverse range and comes with the next forward sync instead.
            XCTAssertEqual(order, (1..<10).reversed().map { "r\($0)" }, "newest first, within the range fixed when the reverse sync began")
            var forwardOrder: [String] = []
            try await device.sync(client, fixture, zone: "R", limit: 50) { _, page in forwardOrder += page.compactMap { $0["recordName"] as? String } }
            XCTAssertEqual(forwardOrder, ["r0", "r10"], "the forward sync after a reverse one brings exactly the later changes")
            let server = try await Self.serverState(fixture, zone: "R")
            XCTAssertEqual(device.records, server)
            // A reverse continuation token is refused for a forward request.
            let (_, start) = try await RecordAPITests.post(client, fixture.path("records/changes"), ["zoneID": ["zoneName": "R"], "resultsLimit": 2, "reverse": true])
            let (status, refused) = try await RecordAPITests.post(client, fixture.path("records/changes"), ["zoneID": ["zoneName": "R"], "syncToken": start["syncToken"] as! String])
            XCTAssertEqual(status, 400, "\(refused)")
        }
    }

    /// Snapshot sync (an extension): every prefix the device has applied is a state the zone had.
    func testSnapshotSyncPrefixesAreRealStates() async throws {
        try await withFixture { fixture, client in
            try await RecordAPITests.createZone(client, fixture, "S")
            var states: [[String: String]] = [[:]]
            var state: [String: String] = [:]
            let steps: [(String, String, String?)] = [
                ("create", "a", "1"), ("create", "b", "1"), ("forceUpdate", "a", "2"), ("forceDelete", "b", nil),
                ("create", "c", "1"), ("forceUpdate", "a", "3"), ("forceUpdate", "c", "2"), ("forceDelete", "a", nil),
            ]
            for (operation, name, value) in steps {
                var record: Body = ["recordName": name]
                if let value { record = RecordAPITests.note(name, ["v": ["value": value]]) }
                let (status, _) = try await RecordAPITests.modify(client, fixture, zone: "S", [["operationType": operation, "record": record]])
                XCTAssertEqual(status, 200)
                state[name] = value
                states.append(state)
            }
            for limit in [1, 2, 3] {
                var device = Device()
                var prefixes = 0
                try await device.sync(client, fixture, zone: "S", limit: limit, extra: ["snapshot": true]) { copy, _ in
                    prefixes += 1
                    XCTAssertTrue(states.contains(copy), "limit \(limit): \(copy) is not a state the zone had")
                }
                XCTAssertEqual(device.records, state)
                XCTAssertGreaterThan(prefixes, 1)
            }
        }
    }

    /// Measured, not asserted: how long pulling 1,000 and 10,000 changes takes here.
    func testMeasurePullingThousandsOfChanges() async throws {
        try await withFixture { fixture, client in
            try await RecordAPITests.createZone(client, fixture, "Big")
            // A smoke run pulls 2,000 changes; STRATUS_TEST_SCALE=full pulls 10,000 (scripts/bench.sh
            // measures sync at scale).
            let total = TestSupport.isFullScale ? 10_000 : 2_000
            for batch in 0..<(total / 200) {
                let operations: [Body] = (0..<200).map { index in
                    ["operationType": "create", "record": RecordAPITests.note("r\(batch * 200 + index)", ["v": ["value": "value \(index)"], "n": ["value": index]])]
                }
                let (status, _) = try await RecordAPITests.modify(client, fixture, zone: "Big", operations)
                XCTAssertEqual(status, 200)
            }
            for count in [1_000, total] {
                var device = Device()
                let started = ContinuousClock.now
                var pulled = 0
                while pulled < count {
                    var body: Body = ["zoneID": ["zoneName": "Big"], "resultsLimit": 200]
                    if let token = device.token { body["syncToken"] = token }
                    let (_, reply) = try await RecordAPITests.post(client, fixture.path("records/changes"), body)
                    pulled += (reply["records"] as? [Body])?.count ?? 0
                    device.token = reply["syncToken"] as? String
                    if reply["moreComing"] as? Bool != true { break }
                }
                let elapsed = ContinuousClock.now - started
                XCTAssertEqual(pulled >= count, true)
                print("sync measurement: pulled \(pulled) changes in pages of 200 in \(elapsed) (\(Int(Double(pulled) / (elapsed / .seconds(1)))) changes/s)")
            }
        }
    }
}

/// A small seeded generator so every run of a seed makes the same choices.
struct SplitMix64: RandomNumberGenerator {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

/// A flag one task sets and another polls.
/// The writers' progress as a syncing device follows it: how many writes completed, and whether
/// the writers are done (also when one failed). One device waits on it at a time.
final class WriteProgress: Sendable {
    private let state = Mutex<(count: Int, done: Bool, waiter: CheckedContinuation<(count: Int, done: Bool), Never>?)>((0, false, nil))

    /// A write completed.
    func wrote() { update { $0.count += 1 } }

    /// The writers are done.
    func finish() { update { $0.done = true } }

    /// Waits until a write completes after the first `seen`, or the writers are done.
    func next(after seen: Int) async -> (count: Int, done: Bool) {
        await withCheckedContinuation { continuation in
            let ready = state.withLock { state -> (count: Int, done: Bool)? in
                guard state.count <= seen, !state.done else { return (state.count, state.done) }
                state.waiter = continuation
                return nil
            }
            if let ready { continuation.resume(returning: ready) }
        }
    }

    private func update(_ change: (inout (count: Int, done: Bool, waiter: CheckedContinuation<(count: Int, done: Bool), Never>?)) -> Void) {
        let (waiter, value) = state.withLock { state in
            change(&state)
            defer { state.waiter = nil }
            return (state.waiter, (state.count, state.done))
        }
        waiter?.resume(returning: value)
    }
}

extension SyncTests {
    /// The GC's collector removes only expired tombstones and raises the horizon of their zones.
    func testTombstoneCollectorHonoursRetention() async throws {
        try await withFixture { fixture, client in
            try await RecordAPITests.createZone(client, fixture, "T")
            _ = try await RecordAPITests.modify(client, fixture, zone: "T", [["operationType": "create", "record": RecordAPITests.note("gone", ["v": ["value": "1"]])]])
            var device = Device()
            try await device.sync(client, fixture, zone: "T", limit: 10)
            _ = try await RecordAPITests.modify(client, fixture, zone: "T", [["operationType": "forceDelete", "record": ["recordName": "gone"]]])
            let keep = TombstoneCollector(store: fixture.store, retention: .seconds(3600), logger: TestSupport.logger)
            let kept = try await keep.collectOnce()
            XCTAssertEqual(kept, 0, "a fresh tombstone is within the retention period")
            let (okStatus, ok) = try await RecordAPITests.post(client, fixture.path("records/changes"), ["zoneID": ["zoneName": "T"], "syncToken": device.token!])
            XCTAssertEqual(okStatus, 200)
            XCTAssertEqual((ok["records"] as? [Body])?.first?["deleted"] as? Bool, true)
            try await fixture.store.withConnection { connection in
                _ = try await connection.query("UPDATE record_tombstones SET deleted_at = now() - interval '2 hours'", logger: TestSupport.logger)
            }
            let collected = try await keep.collectOnce()
            XCTAssertEqual(collected, 1)
            let (_, expired) = try await RecordAPITests.post(client, fixture.path("records/changes"), ["zoneID": ["zoneName": "T"], "syncToken": device.token!])
            XCTAssertEqual(expired["serverErrorCode"] as? String, "CHANGE_TOKEN_EXPIRED")
        }
    }
}
