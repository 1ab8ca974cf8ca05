import Foundation
import HummingbirdTesting
import StratusCore
@testable import StratusPostgres
import StratusTesting
import StratusWorkers
import XCTest

/// A zone's default time to live (a Stratus extension, docs/ttl.md): set, changed and removed
/// through `zones/modify` (a `zone.created` / `zone.updated` event), answered in zone dictionaries,
/// given to records created in the zone without an expiration of their own, and never to records
/// already saved.
final class ZoneDefaultTimeToLiveTests: XCTestCase {
    typealias Body = [String: Any]
    typealias Fixture = RecordAPITests.Fixture

    static var now: Int64 { RecordExpirationTests.nowMilliseconds }

    /// Sends one zones/modify create of `zone` with the extra zone keys; answers the status and the zone dictionary.
    static func saveZone(_ client: any TestClientProtocol, _ fixture: Fixture, _ zone: String, _ extra: Body, operation: String = "create") async throws -> (Int, Body) {
        var dictionary: Body = ["zoneID": ["zoneName": zone]]
        dictionary.merge(extra) { _, new in new }
        let (status, json) = try await RecordAPITests.post(client, fixture.path("zones/modify"), ["operations": [["operationType": operation, "zone": dictionary]]])
        return (status, (json["zones"] as? [Body])?.first ?? json)
    }

    /// The zone dictionaries zones/list and zones/lookup answer for `zone`.
    static func listedAndLookedUp(_ client: any TestClientProtocol, _ fixture: Fixture, _ zone: String) async throws -> (Body?, Body?) {
        let (_, list) = try await RecordAPITests.post(client, fixture.path("zones/list"), [:] as Body)
        let listed = (list["zones"] as? [Body] ?? []).first { ($0["zoneID"] as? Body)?["zoneName"] as? String == zone }
        let (_, lookup) = try await RecordAPITests.post(client, fixture.path("zones/lookup"), ["zones": [["zoneName": zone]]])
        return (listed, (lookup["zones"] as? [Body])?.first)
    }

    static func zoneEvents(_ store: PostgresStore) async throws -> [EventEnvelope] {
        try await EventLog(store: store).events(after: 0, limit: 10_000, logger: TestSupport.logger).filter { $0.type.rawValue.hasPrefix("zone.") }
    }

    func testRecordsCreatedInAZoneGetItsDefaultAndChangingItTouchesNoSavedRecord() async throws {
        try await RecordAPITests.withAPI { fixture, client in
            // Created with a default: answered in every zone dictionary, carried by zone.created.
            var (status, zone) = try await Self.saveZone(client, fixture, "Notes", ["defaultTimeToLive": 3600])
            XCTAssertEqual(status, 200, "\(zone)")
            XCTAssertEqual(zone["defaultTimeToLive"] as? Int64, 3600, "\(zone)")
            var (listed, looked) = try await Self.listedAndLookedUp(client, fixture, "Notes")
            XCTAssertEqual(listed?["defaultTimeToLive"] as? Int64, 3600, "\(String(describing: listed))")
            XCTAssertEqual(looked?["defaultTimeToLive"] as? Int64, 3600, "\(String(describing: looked))")
            var events = try await Self.zoneEvents(fixture.store)
            XCTAssertEqual(events.map(\.type), [.zoneCreated])
            XCTAssertEqual(try events[0].decode(ZoneCreated.self).defaultTimeToLive, 3600)
            var device = SyncTests.Device()
            try await device.sync(client, fixture, zone: "Notes", limit: 200)

            // A new record without an expiration gets the default; an explicit one wins; null opts out.
            var before = Self.now
            var (saveStatus, records) = try await RecordAPITests.modify(client, fixture, [
                ["operationType": "create", "record": RecordAPITests.note("defaulted", ["v": ["value": "d"]])],
                ["operationType": "create", "record": RecordAPITests.note("explicit", ["v": ["value": "e"]]).merging(["timeToLive": 60]) { $1 }],
                ["operationType": "create", "record": RecordAPITests.note("dated", ["v": ["value": "t"]]).merging(["expirationDate": before + 86_400_000]) { $1 }],
                ["operationType": "create", "record": RecordAPITests.note("optout", ["v": ["value": "o"]]).merging(["timeToLive": NSNull()]) { $1 }],
                ["operationType": "forceReplace", "record": RecordAPITests.note("forced", ["v": ["value": "f"]])],
            ])
            XCTAssertEqual(saveStatus, 200, "\(records)")
            let defaulted = try XCTUnwrap(records[0]["expirationDate"] as? Int64, "\(records)")
            XCTAssertTrue((before + 3_600_000...Self.now + 3_600_000).contains(defaulted), "\(defaulted)")
            let explicit = try XCTUnwrap(records[1]["expirationDate"] as? Int64)
            XCTAssertTrue((before + 60_000...Self.now + 60_000).contains(explicit), "\(explicit)")
            XCTAssertEqual(records[2]["expirationDate"] as? Int64, before + 86_400_000)
            XCTAssertNil(records[3]["expirationDate"], "timeToLive null opts a record out of the zone's default")
            let forced = try XCTUnwrap(records[4]["expirationDate"] as? Int64, "a forced save that creates a record gets the default")
            XCTAssertTrue((before + 3_600_000...Self.now + 3_600_000).contains(forced), "\(forced)")

            // Saving an existing record without the keys keeps its expiration: the default is not applied again.
            (saveStatus, records) = try await RecordAPITests.modify(client, fixture, [
                ["operationType": "forceUpdate", "record": RecordAPITests.note("optout", ["v": ["value": "o2"]])],
                ["operationType": "forceUpdate", "record": RecordAPITests.note("defaulted", ["v": ["value": "d2"]])],
            ])
            XCTAssertEqual(saveStatus, 200, "\(records)")
            XCTAssertNil(records[0]["expirationDate"], "an opted-out record stays without an expiration")
            XCTAssertEqual(records[1]["expirationDate"] as? Int64, defaulted)

            // Changing the default: a zone.updated event, a new sync token, old records untouched.
            let tokenBefore = try XCTUnwrap(zone["syncToken"] as? String)
            (status, zone) = try await Self.saveZone(client, fixture, "Notes", ["defaultTimeToLive": 7200])
            XCTAssertEqual(status, 200, "\(zone)")
            XCTAssertEqual(zone["defaultTimeToLive"] as? Int64, 7200)
            XCTAssertNotEqual(zone["syncToken"] as? String, tokenBefore, "a zone change advances the zone")
            events = try await Self.zoneEvents(fixture.store)
            XCTAssertEqual(events.map(\.type), [.zoneCreated, .zoneUpdated])
            XCTAssertEqual(try events[1].decode(ZoneUpdated.self).defaultTimeToLive, 7200)
            var stored = try await RecordAPITests.lookup(client, fixture, ["defaulted", "optout", "explicit"])
            XCTAssertEqual(stored.map { $0["expirationDate"] as? Int64 }, [defaulted, nil, explicit], "records keep the expiration they were saved with")
            before = Self.now
            (saveStatus, records) = try await RecordAPITests.modify(client, fixture, [
                ["operationType": "create", "record": RecordAPITests.note("later", ["v": ["value": "l"]])]])
            XCTAssertEqual(saveStatus, 200, "\(records)")
            let later = try XCTUnwrap(records.first?["expirationDate"] as? Int64)
            XCTAssertTrue((before + 7_200_000...Self.now + 7_200_000).contains(later), "\(later)")

            // The same value again, or a create without the key: no change, no event, the default kept.
            (status, zone) = try await Self.saveZone(client, fixture, "Notes", ["defaultTimeToLive": 7200])
            XCTAssertEqual(zone["defaultTimeToLive"] as? Int64, 7200)
            (status, zone) = try await Self.saveZone(client, fixture, "Notes", [:])
            XCTAssertEqual(status, 200, "\(zone)")
            XCTAssertEqual(zone["defaultTimeToLive"] as? Int64, 7200)
            events = try await Self.zoneEvents(fixture.store)
            XCTAssertEqual(events.count, 2, "\(events.map(\.type))")

            // Removing it (null): records created afterwards never expire; saved ones keep theirs.
            (status, zone) = try await Self.saveZone(client, fixture, "Notes", ["defaultTimeToLive": NSNull()])
            XCTAssertEqual(status, 200, "\(zone)")
            XCTAssertNil(zone["defaultTimeToLive"], "\(zone)")
            (listed, looked) = try await Self.listedAndLookedUp(client, fixture, "Notes")
            XCTAssertNotNil(listed)
            XCTAssertNil(listed?["defaultTimeToLive"])
            XCTAssertNil(looked?["defaultTimeToLive"])
            (saveStatus, records) = try await RecordAPITests.modify(client, fixture, [
                ["operationType": "create", "record": RecordAPITests.note("plain", ["v": ["value": "p"]])]])
            XCTAssertEqual(saveStatus, 200, "\(records)")
            XCTAssertNil(records.first?["expirationDate"])
            stored = try await RecordAPITests.lookup(client, fixture, ["defaulted", "later"])
            XCTAssertEqual(stored.map { $0["expirationDate"] as? Int64 }, [defaulted, later])
            events = try await Self.zoneEvents(fixture.store)
            XCTAssertEqual(events.map(\.type), [.zoneCreated, .zoneUpdated, .zoneUpdated])

            // A device syncing across the zone changes sees every record once, nothing else.
            try await device.sync(client, fixture, zone: "Notes", limit: 200)
            XCTAssertEqual(device.records, ["defaulted": "d2", "explicit": "e", "dated": "t", "optout": "o2", "forced": "f", "later": "l", "plain": "p"])

            // Deleting and re-creating the zone forgets the default.
            (status, zone) = try await Self.saveZone(client, fixture, "Notes", ["defaultTimeToLive": 60])
            XCTAssertEqual(status, 200, "\(zone)")
            (status, zone) = try await Self.saveZone(client, fixture, "Notes", [:], operation: "delete")
            XCTAssertEqual(status, 200, "\(zone)")
            (status, zone) = try await Self.saveZone(client, fixture, "Notes", [:])
            XCTAssertEqual(status, 200, "\(zone)")
            XCTAssertNil(zone["defaultTimeToLive"], "a re-created zone starts without a default: \(zone)")
        }
    }

    func testBadDefaultsAreRefusedNamingTheKeyAndChangeNothing() async throws {
        try await RecordAPITests.withAPI { fixture, client in
            var (status, zone) = try await Self.saveZone(client, fixture, "Notes", ["defaultTimeToLive": 600])
            XCTAssertEqual(status, 200, "\(zone)")
            let bad: [Any] = [0, -5, 2.5, "60", 400_000_000, ["seconds": 60], true, [60]]
            for value in bad {
                (status, zone) = try await Self.saveZone(client, fixture, "Notes", ["defaultTimeToLive": value])
                XCTAssertEqual(status, 400, "\(value): \(zone)")
                XCTAssertEqual(zone["serverErrorCode"] as? String, "BAD_REQUEST", "\(value)")
                XCTAssertTrue((zone["reason"] as? String ?? "").contains("zone.defaultTimeToLive"), "\(value): \(zone)")
                (status, zone) = try await Self.saveZone(client, fixture, "Fresh", ["defaultTimeToLive": value])
                XCTAssertEqual(status, 400, "\(value): \(zone)")
            }
            // Only create sets it.
            (status, zone) = try await Self.saveZone(client, fixture, "Notes", ["defaultTimeToLive": 60], operation: "delete")
            XCTAssertEqual(status, 400, "\(zone)")
            XCTAssertTrue((zone["reason"] as? String ?? "").contains("zone.defaultTimeToLive"), "\(zone)")
            // Nothing changed: the zone keeps its default, no zone was created or deleted.
            let (listed, _) = try await Self.listedAndLookedUp(client, fixture, "Notes")
            XCTAssertEqual(listed?["defaultTimeToLive"] as? Int64, 600)
            let (fresh, _) = try await Self.listedAndLookedUp(client, fixture, "Fresh")
            XCTAssertNil(fresh)
            let events = try await Self.zoneEvents(fixture.store)
            XCTAssertEqual(events.map(\.type), [.zoneCreated])
            // The longest default is accepted.
            (status, zone) = try await Self.saveZone(client, fixture, "Notes", ["defaultTimeToLive": RecordExpiration.maxTimeToLive])
            XCTAssertEqual(status, 200, "\(zone)")
            XCTAssertEqual(zone["defaultTimeToLive"] as? Int64, RecordExpiration.maxTimeToLive)
        }
    }

    func testARecordGivenTheZonesDefaultDisappearsAndStratusGCCollectsIt() async throws {
        try await APIPipelineFixture.withStack(projection: IndexerProjection(), relay: true, worker: true) { fixture, client, _, location in
            var (status, zone) = try await Self.saveZone(client, fixture, "Q", ["defaultTimeToLive": 3600])
            XCTAssertEqual(status, 200, "\(zone)")
            // Changed to 2 s: a zone.updated event, which every worker passes over.
            (status, zone) = try await Self.saveZone(client, fixture, "Q", ["defaultTimeToLive": 2])
            XCTAssertEqual(status, 200, "\(zone)")
            try await RecordExpirationTests.withCollector(fixture.store, location) {
                let (saveStatus, saved) = try await RecordAPITests.modify(client, fixture, zone: "Q", [
                    ["operationType": "create", "record": RecordAPITests.note("eph", ["v": ["value": "e"]], type: "Item")],
                    ["operationType": "create", "record": RecordAPITests.note("keep", ["v": ["value": "k"]], type: "Item").merging(["timeToLive": NSNull()]) { $1 }],
                ])
                XCTAssertEqual(saveStatus, 200, "\(saved)")
                XCTAssertNotNil(saved.first?["expirationDate"], "\(saved)")
                try await TestSupport.eventually(timeout: .seconds(30), "eph to expire") {
                    try await RecordAPITests.lookup(client, fixture, zone: "Q", ["eph"]).first?["serverErrorCode"] as? String == "NOT_FOUND"
                }
                try await TestSupport.eventually(timeout: .seconds(60), "stratus-gc to delete eph") {
                    try await RecordExpirationTests.deleteEvents(fixture.store).map(\.recordName) == ["eph"]
                }
                let deletes = try await RecordExpirationTests.deleteEvents(fixture.store)
                XCTAssertTrue(deletes.allSatisfy { $0.requestID.hasPrefix("stratus-gc/expire/") }, "\(deletes)")
                let alive = try await RecordAPITests.lookup(client, fixture, zone: "Q", ["keep"])
                XCTAssertEqual(alive.first?["recordName"] as? String, "keep", "\(alive)")
                XCTAssertNil(alive.first?["expirationDate"])
                // The indexer applied the events past zone.updated: the query index holds keep.
                try await TestSupport.eventually(timeout: .seconds(30), "the query index to hold keep") {
                    try await RecordExpirationTests.query(client, fixture) == ["keep"]
                }
            }
        }
    }
}
