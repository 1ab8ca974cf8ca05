import Foundation
@testable import StratusCore
import XCTest

/// The pure decision of which subscriptions an event fires: every firesOn combination against every
/// kind of change, zone and database coalescing keys, and the save-time horizon.
final class SubscriptionEvaluationTests: XCTestCase {
    let database = DatabaseID(container: "iCloud.test", environment: .development, scope: .private, owner: "_alice")
    let zone = ZoneID(zoneName: "Q", ownerRecordName: "_alice")

    func record(_ count: Int64, type: String = "Item") -> Record {
        let stamp = RecordStamp(timestamp: 1_000, userRecordName: "_alice", deviceID: nil)
        return Record(recordName: "r", recordType: type, fields: ["count": .int64(count)], changeTag: "t", created: stamp, modified: stamp)
    }

    func querySubscription(firesOn: FiresOn, createdAt: Int64 = 0, zoneName: String? = "Q") throws -> OwnedSubscription {
        let query = try RecordQuery.parse(.object([
            "recordType": .string("Item"),
            "filterBy": .array([.object(["fieldName": .string("count"), "comparator": .string("GREATER_THAN"), "fieldValue": .object(["value": .int(5)])])]),
        ]))
        let subscription = Subscription(
            subscriptionID: "s", type: .query, zoneID: zoneName.map { ZoneID(zoneName: $0, ownerRecordName: "_alice") }, query: query, queryJSON: nil,
            firesOn: firesOn, firesOnce: false, notificationInfo: nil)
        return OwnedSubscription(database: database, subscriber: "_alice", subscription: subscription, createdAt: createdAt)
    }

    func drafts(_ change: SubscriptionEvaluation.Change, _ owners: [OwnedSubscription], eventAt: Int64 = 10, zoneID: ZoneID? = nil) -> [NotificationDraft] {
        SubscriptionEvaluation.drafts(for: change, zoneID: zoneID ?? zone, eventID: 7, eventCreatedAt: eventAt, causation: Causation(requestID: "req"), subscriptions: owners)
    }

    func testEveryFiresOnCombinationAgainstEveryKindOfChange() throws {
        // (change, the reason it reports, the firesOn option that reason needs); nil: never fires.
        let big = record(9), small = record(1)
        let cases: [(String, SubscriptionEvaluation.Change, QueryNotificationReason?, FiresOn?)] = [
            ("created matching", .saved(after: big, before: nil, created: true), .recordCreated, .create),
            ("created not matching", .saved(after: small, before: nil, created: true), nil, nil),
            ("updated, matching before and after", .saved(after: big, before: big, created: false), .recordUpdated, .update),
            ("updated into the predicate", .saved(after: big, before: small, created: false), .recordCreated, .create),
            ("updated out of the predicate", .saved(after: small, before: big, created: false), .recordDeleted, .delete),
            ("updated, matching neither", .saved(after: small, before: small, created: false), nil, nil),
            ("updated, before unknown, matching", .saved(after: big, before: nil, created: false), .recordUpdated, .update),
            ("deleted matching", .deleted(recordName: "r", recordType: "Item", last: big), .recordDeleted, .delete),
            ("deleted not matching", .deleted(recordName: "r", recordType: "Item", last: small), nil, nil),
            ("deleted, image unknown", .deleted(recordName: "r", recordType: "Item", last: nil), nil, nil),
            ("another record type", .saved(after: record(9, type: "Note"), before: nil, created: true), nil, nil),
            ("a zone change", .zone, nil, nil),
        ]
        for bits in 1...7 {
            let firesOn = FiresOn(rawValue: bits)
            let owner = try querySubscription(firesOn: firesOn)
            for (name, change, reason, needs) in cases {
                let expected = reason.flatMap { reason in needs.map { firesOn.contains($0) } == true ? reason : nil }
                let found = drafts(change, [owner])
                XCTAssertEqual(found.map(\.reason), expected.map { [$0] } ?? [], "\(name) with firesOn \(firesOn.names)")
                if let draft = found.first {
                    XCTAssertEqual(draft.dedupeKey, "event/7")
                    XCTAssertEqual(draft.recordName, "r")
                }
            }
        }
    }

    func testASubscriptionNeverFiresForEventsBeforeItsSaveNorForOtherZones() throws {
        let created = SubscriptionEvaluation.Change.saved(after: record(9), before: nil, created: true)
        XCTAssertEqual(drafts(created, [try querySubscription(firesOn: .create, createdAt: 11)], eventAt: 10).count, 0)
        XCTAssertEqual(drafts(created, [try querySubscription(firesOn: .create, createdAt: 10)], eventAt: 10).count, 1)
        XCTAssertEqual(drafts(created, [try querySubscription(firesOn: .create)], zoneID: ZoneID(zoneName: "Other", ownerRecordName: "_alice")).count, 0)
        XCTAssertEqual(drafts(created, [try querySubscription(firesOn: .create, zoneName: nil)], zoneID: ZoneID(zoneName: "Other", ownerRecordName: "_alice")).count, 1,
                       "a zone-wide subscription watches every zone")
    }

    func testZoneAndDatabaseSubscriptionsCoalescePerRequestAndIgnoreTheDefaultZone() {
        let zoneSubscription = OwnedSubscription(database: database, subscriber: "_alice", subscription: Subscription(
            subscriptionID: "z", type: .zone, zoneID: zone, query: nil, queryJSON: nil, firesOn: [.create, .update, .delete], firesOnce: false,
            notificationInfo: nil), createdAt: 0)
        let databaseSubscription = OwnedSubscription(database: database, subscriber: "_alice", subscription: Subscription(
            subscriptionID: "d", type: .database, zoneID: nil, query: nil, queryJSON: nil, firesOn: [.create, .update, .delete], firesOnce: false,
            notificationInfo: nil), createdAt: 0)
        let change = SubscriptionEvaluation.Change.deleted(recordName: "r", recordType: "Item", last: nil)
        let found = drafts(change, [zoneSubscription, databaseSubscription])
        XCTAssertEqual(found.map(\.dedupeKey), ["request/req", "zone/Q/request/req"])
        XCTAssertEqual(drafts(.zone, [zoneSubscription, databaseSubscription]).count, 2, "zone creations and deletions fire both")
        let defaultZone = ZoneID(zoneName: ZoneID.defaultZoneName, ownerRecordName: "_alice")
        XCTAssertEqual(drafts(change, [zoneSubscription, databaseSubscription], zoneID: defaultZone).count, 0)
    }

    func testANotificationIsMarkedWithTheDeviceOnlyWhenItsSubscriberWroteTheChange() throws {
        let subscription = { (subscriber: String) in OwnedSubscription(
            database: self.database, subscriber: subscriber, subscription: Subscription(
                subscriptionID: "d", type: .database, zoneID: nil, query: nil, queryJSON: nil, firesOn: [.create, .update, .delete],
                firesOnce: false, notificationInfo: nil), createdAt: 0) }
        let query = try querySubscription(firesOn: [.create])
        let fromPhone = Causation(requestID: "req", userRecordName: "_alice", deviceID: "phone")
        let made = SubscriptionEvaluation.drafts(
            for: .saved(after: record(9), before: nil, created: true), zoneID: zone, eventID: 7, eventCreatedAt: 10, causation: fromPhone,
            subscriptions: [subscription("_alice"), query, subscription("_bob")])
        // alice's own change from her phone: her notifications name the phone; bob's (a participant,
        // say) name no device, whatever device alice's write named.
        XCTAssertEqual(made.map(\.owner.subscriber), ["_alice", "_alice", "_bob"])
        XCTAssertEqual(made.map(\.deviceID), ["phone", "phone", nil])
        XCTAssertNil(SubscriptionEvaluation.origin(of: Causation(requestID: "r", userRecordName: "_alice"), for: "_alice"), "no device named")
        XCTAssertNil(SubscriptionEvaluation.origin(of: Causation(requestID: "r", deviceID: "phone"), for: "_alice"), "no user: not the subscriber's")
        XCTAssertEqual(drafts(.zone, [subscription("_alice")]).map(\.deviceID), [nil], "a request that names no device")
    }

    func testACourierIsHandedEveryNotificationButThoseOfItsOwnDevice() {
        XCTAssertFalse(SubscriptionEvaluation.hands(notificationFrom: "phone", toCourierOf: "phone"))
        XCTAssertTrue(SubscriptionEvaluation.hands(notificationFrom: "phone", toCourierOf: "laptop"))
        XCTAssertTrue(SubscriptionEvaluation.hands(notificationFrom: "phone", toCourierOf: nil), "a courier made for no device")
        XCTAssertTrue(SubscriptionEvaluation.hands(notificationFrom: nil, toCourierOf: "phone"), "a change of no device, or of another user")
        XCTAssertTrue(SubscriptionEvaluation.hands(notificationFrom: nil, toCourierOf: nil))
    }

    func testASharedDatabaseSubscriptionIsKeyedByTheZonesOwnerToo() {
        // bob's database subscription in his shared database; two owners' zones named Q changed in one request.
        let shared = DatabaseID(container: "iCloud.test", environment: .development, scope: .shared, owner: "_bob")
        let subscription = OwnedSubscription(database: shared, subscriber: "_bob", subscription: Subscription(
            subscriptionID: "d", type: .database, zoneID: nil, query: nil, queryJSON: nil, firesOn: [.create, .update, .delete], firesOnce: false,
            notificationInfo: nil), createdAt: 0)
        let keys = ["_alice", "_carol"].flatMap { owner in
            drafts(.zone, [subscription], zoneID: ZoneID(zoneName: "Q", ownerRecordName: owner)).map(\.dedupeKey)
        }
        XCTAssertEqual(keys, ["owner/_alice/zone/Q/request/req", "owner/_carol/zone/Q/request/req"])
        let payload = drafts(.zone, [subscription]).first?.payload(notificationID: UUID(), badge: nil)
        XCTAssertEqual(payload?["ck"]?["met"]?["dbs"], .int(3), "CloudKit's shared database scope")
    }

    func testDesiredKeysAndTheCollapseIDComeFromTheRecordTheNotificationDescribes() throws {
        var owner = try querySubscription(firesOn: [.create, .delete])
        var info = NotificationInfo()
        info.desiredKeys = ["count", "missing"]
        info.collapseIDKey = "count"
        owner.subscription.notificationInfo = info
        let created = drafts(.saved(after: record(9), before: nil, created: true), [owner])
        XCTAssertEqual(created.first?.fields, ["count": .int64(9)])
        XCTAssertEqual(created.first?.collapseID, "9")
        // Leaving the predicate describes the record as it matched (its before-image).
        let left = drafts(.saved(after: record(2), before: record(8), created: false), [owner])
        XCTAssertEqual(left.first?.reason, .recordDeleted)
        XCTAssertEqual(left.first?.fields, ["count": .int64(8)])
        let payload = try XCTUnwrap(left.first).payload(notificationID: UUID(), badge: 3)
        XCTAssertEqual(payload["ck"]?["qry"]?["af"]?["count"], .int(8))
        XCTAssertEqual(payload["ck"]?["qry"]?["fo"], .int(3))
        XCTAssertEqual(payload["aps"]?["content-available"], .int(1))
        XCTAssertNil(payload["aps"]?["badge"], "no badge unless the subscription asks for one")
    }

    func testAStoredDefinitionReadsBackAsTheSameSubscription() throws {
        let json: JSONValue = .object([
            "subscriptionID": .string("s"), "subscriptionType": .string("query"), "zoneWide": .bool(true),
            "firesOn": .array([.string("create"), .string("delete")]), "firesOnce": .bool(true),
            "query": .object(["recordType": .string("Item"), "filterBy": .array([]), "sortBy": .array([])]),
            "notificationInfo": .object(["alertBody": .string("hi"), "desiredKeys": .array([.string("count")])]),
        ])
        let parsed = try Subscription.parse(json, scope: .private, databaseOwner: "_alice")
        XCTAssertEqual(parsed.firesOn, [.create, .delete])
        XCTAssertNil(parsed.zoneID)
        XCTAssertNil(parsed.queryJSON?["sortBy"], "what is stored is what is evaluated")
        XCTAssertEqual(try Subscription.stored(parsed.json, scope: .private, databaseOwner: "_alice"), parsed)
    }
}
