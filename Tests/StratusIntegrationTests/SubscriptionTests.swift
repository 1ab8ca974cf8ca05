import Foundation
import Hummingbird
import HummingbirdTesting
import StratusAPI
import StratusCore
import StratusKafka
@testable import StratusPostgres
import StratusRelay
import StratusTesting
@testable import StratusWorkers
import XCTest

/// Subscriptions end to end: subscriptions/modify, list and lookup; stratus-subscriptions evaluating
/// the events the relay publishes; the notification log read by notifications/changes and the web
/// courier (real PostgreSQL and broker).
final class SubscriptionTests: XCTestCase {
    typealias Fixture = RecordAPITests.Fixture
    typealias Body = [String: Any]

    /// The API plus the relay and stratus-subscriptions' worker (and the notification hub), on a topic of the test's own.
    static func withStack(pipeline: Bool = true, _ body: @Sendable (Fixture, any TestClientProtocol, NotificationHub) async throws -> Void) async throws {
        try await APIPipelineFixture.withStack(projection: SubscriptionsProjection(), pipeline: pipeline) { fixture, client, dependencies in
            try await body(fixture, client, dependencies.hub)
        }
    }

    static func modify(_ client: any TestClientProtocol, _ fixture: Fixture, database: String = "private", user: String? = "_alice",
                       _ operations: [Body]) async throws -> (Int, [Body]) {
        let (status, json) = try await RecordAPITests.post(client, fixture.path("subscriptions/modify", database: database, user: user), ["operations": operations])
        return (status, json["subscriptions"] as? [Body] ?? [json])
    }

    static func create(_ subscription: Body) -> Body { ["operationType": "create", "subscription": subscription] }

    static func querySubscription(_ id: String, type: String = "Item", filters: [Body] = [], firesOn: [String] = ["create", "update", "delete"],
                                  zone: String? = "Q", extra: Body = [:]) -> Body {
        var subscription: Body = [
            "subscriptionID": id, "subscriptionType": "query", "firesOn": firesOn,
            "query": ["recordType": type, "filterBy": filters],
        ]
        if let zone { subscription["zoneID"] = ["zoneName": zone] }
        subscription.merge(extra) { _, new in new }
        return subscription
    }

    static func notificationsPath(_ fixture: Fixture, _ operation: String, user: String = "_alice") -> String {
        fixture.path(operation, user: user).replacingOccurrences(of: "/database/1/\(fixture.container)/development/private/", with: "/device/1/\(fixture.container)/development/")
    }

    /// The user's whole notification log, oldest first.
    static func notifications(_ client: any TestClientProtocol, _ fixture: Fixture, user: String = "_alice") async throws -> [Body] {
        var all: [Body] = []
        var token: String?
        while true {
            var body: Body = ["resultsLimit": 50]
            if let token { body["syncToken"] = token }
            let (status, json) = try await RecordAPITests.post(client, notificationsPath(fixture, "notifications/changes", user: user), body)
            XCTAssertEqual(status, 200, "\(json)")
            all += json["notifications"] as? [Body] ?? []
            token = json["syncToken"] as? String
            guard json["moreComing"] as? Bool == true else { return all }
        }
    }

    /// Waits until the user's log holds `count` notifications, then returns them.
    static func waitForNotifications(_ client: any TestClientProtocol, _ fixture: Fixture, user: String = "_alice", count: Int) async throws -> [Body] {
        var found: [Body] = []
        try await TestSupport.eventually(timeout: .seconds(60), "\(count) notifications for \(user)") {
            found = try await notifications(client, fixture, user: user)
            return found.count >= count
        }
        return found
    }

    static func reasons(_ notifications: [Body], subscription: String) -> [String] {
        notifications.filter { $0["subscriptionID"] as? String == subscription }.compactMap { notification in
            guard let reason = notification["queryNotificationReason"] as? String, let name = notification["recordName"] as? String else { return nil }
            return "\(name):\(reason)"
        }
    }

    static func save(_ client: any TestClientProtocol, _ fixture: Fixture, _ name: String, count: Int, title: String = "t", zone: String = "Q",
                     operation: String = "forceUpdate", user: String = "_alice") async throws {
        let (status, records) = try await RecordAPITests.modify(client, fixture, zone: zone, user: user, [[
            "operationType": operation,
            "record": RecordAPITests.note(name, ["count": ["value": count], "title": ["value": title]], type: "Item"),
        ]])
        XCTAssertEqual(status, 200, "\(records)")
    }

    // MARK: subscriptions/modify, list, lookup

    func testSubscriptionsAreCreatedListedLookedUpReplacedAndDeleted() async throws {
        try await Self.withStack(pipeline: false) { fixture, client, hub in
            try await RecordAPITests.createZone(client, fixture, "Q")
            let (status, saved) = try await Self.modify(client, fixture, [
                Self.create(Self.querySubscription("big", filters: [["fieldName": "count", "comparator": "GREATER_THAN", "fieldValue": ["value": 5]]],
                                                   extra: ["notificationInfo": ["alertBody": "Big item", "shouldBadge": true, "desiredKeys": ["title"]]])),
                Self.create(["subscriptionID": "zone", "subscriptionType": "zone", "zoneID": ["zoneName": "Q"]]),
                Self.create(["subscriptionID": "db", "subscriptionType": "database"]),
                Self.create(["subscriptionType": "query", "firesOn": ["create"], "zoneWide": true, "query": ["recordType": "Item"]]),
            ])
            XCTAssertEqual(status, 200)
            XCTAssertEqual(saved.count, 4)
            XCTAssertEqual(saved[0]["subscriptionID"] as? String, "big")
            XCTAssertEqual(saved[0]["firesOn"] as? [String], ["create", "update", "delete"])
            XCTAssertEqual((saved[0]["notificationInfo"] as? Body)?["alertBody"] as? String, "Big item")
            XCTAssertEqual((saved[1]["zoneID"] as? Body)?["zoneName"] as? String, "Q")
            XCTAssertEqual(saved[2]["subscriptionType"] as? String, "database")
            let generated = try XCTUnwrap(saved[3]["subscriptionID"] as? String)
            XCTAssertNotNil(UUID(uuidString: generated), "a subscription sent without an id gets one")
            XCTAssertEqual(saved[3]["zoneWide"] as? Bool, true)

            let (_, list) = try await RecordAPITests.post(client, fixture.path("subscriptions/list"), [String: Any]())
            XCTAssertEqual(Set((list["subscriptions"] as? [Body] ?? []).compactMap { $0["subscriptionID"] as? String }), ["big", "zone", "db", generated])
            let counts = try await SubscriptionStore(store: fixture.store).counts(logger: TestSupport.logger)
            XCTAssertEqual(counts, ["query": 2, "zone": 1, "database": 1], "the operations' count of subscriptions by type")
            let (_, otherList) = try await RecordAPITests.post(client, fixture.path("subscriptions/list", user: "_bob"), [String: Any]())
            XCTAssertEqual((otherList["subscriptions"] as? [Body])?.count, 0, "subscriptions belong to their user")

            let (_, looked) = try await RecordAPITests.post(client, fixture.path("subscriptions/lookup"), ["subscriptions": [["subscriptionID": "zone"], ["subscriptionID": "nope"]]])
            let items = looked["subscriptions"] as? [Body] ?? []
            XCTAssertEqual(items.first?["subscriptionType"] as? String, "zone")
            XCTAssertEqual(items.last?["serverErrorCode"] as? String, "NOT_FOUND")
            XCTAssertEqual(items.last?["subscriptionID"] as? String, "nope")

            // update replaces an existing one and refuses a missing one; delete answers deleted.
            let (_, changed) = try await Self.modify(client, fixture, [
                ["operationType": "update", "subscription": Self.querySubscription("big", firesOn: ["delete"])],
                ["operationType": "update", "subscription": Self.querySubscription("missing")],
                ["operationType": "delete", "subscription": ["subscriptionID": "db"]],
                ["operationType": "delete", "subscription": ["subscriptionID": "db2"]],
            ])
            XCTAssertEqual(changed[0]["firesOn"] as? [String], ["delete"])
            XCTAssertEqual(changed[1]["serverErrorCode"] as? String, "NOT_FOUND")
            XCTAssertEqual(changed[2]["deleted"] as? Bool, true)
            XCTAssertEqual(changed[3]["serverErrorCode"] as? String, "NOT_FOUND")
            let (_, after) = try await RecordAPITests.post(client, fixture.path("subscriptions/list"), [String: Any]())
            XCTAssertEqual((after["subscriptions"] as? [Body])?.count, 3)
        }
    }

    func testInvalidSubscriptionsAreRefusedItemByItem() async throws {
        try await Self.withStack(pipeline: false) { fixture, client, hub in
            try await RecordAPITests.createZone(client, fixture, "Q")
            let long = String(repeating: "x", count: 256)
            let cases: [(Body, String, String)] = [
                (["subscriptionID": "a"], "BAD_REQUEST", "subscriptionType"),
                (["subscriptionID": "a", "subscriptionType": "poll"], "BAD_REQUEST", "unknown subscriptionType"),
                (Self.querySubscription("a", firesOn: []), "BAD_REQUEST", "firesOn"),
                (Self.querySubscription("a", firesOn: ["explode"]), "BAD_REQUEST", "firesOn"),
                (["subscriptionID": "a", "subscriptionType": "query", "firesOn": ["create"]], "BAD_REQUEST", "needs a query"),
                (Self.querySubscription("a", filters: [["fieldName": "count", "comparator": "SOUNDS_LIKE", "fieldValue": ["value": 1]]]), "BAD_REQUEST", "comparator"),
                (["subscriptionID": "a", "subscriptionType": "zone", "zoneID": ["zoneName": "_defaultZone"]], "BAD_REQUEST", "custom zones"),
                (["subscriptionID": "a", "subscriptionType": "zone"], "BAD_REQUEST", "needs a zoneID"),
                (["subscriptionID": "a", "subscriptionType": "zone", "zoneID": ["zoneName": "Missing"]], "ZONE_NOT_FOUND", "Missing"),
                (["subscriptionID": "a", "subscriptionType": "zone", "zoneID": ["zoneName": "Q", "ownerRecordName": "_bob"]], "ZONE_NOT_FOUND", "Q"),
                (["subscriptionID": "a", "subscriptionType": "zone", "zoneID": ["zoneName": "Q"], "firesOn": ["create"]], "BAD_REQUEST", "only to query"),
                (["subscriptionID": "a", "subscriptionType": "database", "zoneID": ["zoneName": "Q"]], "BAD_REQUEST", "no zoneID"),
                (["subscriptionID": "a\u{0}b", "subscriptionType": "database"], "BAD_REQUEST", "NUL"),
                (["subscriptionID": long, "subscriptionType": "database"], "BAD_REQUEST", "1 to 255"),
                (["subscriptionID": "a", "subscriptionType": "database", "colour": "red"], "BAD_REQUEST", "unknown key"),
                (Self.querySubscription("a", extra: ["notificationInfo": ["desiredKeys": Array(repeating: "f", count: 65)]]), "BAD_REQUEST", "desiredKeys"),
                (Self.querySubscription("a", extra: ["notificationInfo": ["alertBody": String(repeating: "b", count: 2_000)]]), "BAD_REQUEST", "alertBody"),
                (Self.querySubscription("a", extra: ["notificationInfo": ["desiredKeys": ["9bad"]]]), "BAD_REQUEST", "desiredKeys"),
                (Self.querySubscription("a", extra: ["notificationInfo": ["shouldBadge": "yes"]]), "BAD_REQUEST", "shouldBadge"),
                (Self.querySubscription("a", extra: ["zoneWide": true]), "BAD_REQUEST", "zoneWide"),
                (Self.querySubscription("a", extra: ["query": ["recordType": "Item", "note": "hidden\u{0}nul"]]), "BAD_REQUEST", "NUL"),
                (Self.querySubscription("a", extra: ["notificationInfo": ["alertBody": "a\u{0}b"]]), "BAD_REQUEST", "NUL"),
            ]
            let (status, results) = try await Self.modify(client, fixture, cases.map { Self.create($0.0) })
            XCTAssertEqual(status, 200)
            XCTAssertEqual(results.count, cases.count)
            for ((subscription, code, reason), result) in zip(cases, results) {
                XCTAssertEqual(result["serverErrorCode"] as? String, code, "\(subscription) → \(result)")
                XCTAssertTrue((result["reason"] as? String ?? "").contains(reason), "\(subscription) → \(result)")
            }
            // What each database takes: the public database only query subscriptions, the shared one only database subscriptions.
            let (_, publicResults) = try await Self.modify(client, fixture, database: "public", [
                Self.create(["subscriptionID": "z", "subscriptionType": "zone", "zoneID": ["zoneName": "Q"]]),
                Self.create(Self.querySubscription("p", zone: nil)),
            ])
            XCTAssertEqual(publicResults[0]["serverErrorCode"] as? String, "BAD_REQUEST")
            XCTAssertEqual(publicResults[1]["subscriptionID"] as? String, "p")
            let (_, sharedResults) = try await Self.modify(client, fixture, database: "shared", [Self.create(Self.querySubscription("s", zone: nil))])
            XCTAssertEqual(sharedResults[0]["serverErrorCode"] as? String, "BAD_REQUEST")
            // A repeated id, an empty or oversized batch, and no user.
            let (repeated, _) = try await Self.modify(client, fixture, [Self.create(Self.querySubscription("r")), Self.create(Self.querySubscription("r"))])
            XCTAssertEqual(repeated, 400)
            let (empty, _) = try await Self.modify(client, fixture, [])
            XCTAssertEqual(empty, 400)
            let (tooMany, _) = try await Self.modify(client, fixture, (0..<201).map { Self.create(Self.querySubscription("s\($0)")) })
            XCTAssertEqual(tooMany, 400)
            let (anonymous, json) = try await Self.modify(client, fixture, database: "public", user: nil, [Self.create(Self.querySubscription("p", zone: nil))])
            XCTAssertEqual(anonymous, 421, "\(json)")
            let (_, list) = try await RecordAPITests.post(client, fixture.path("subscriptions/list"), [String: Any]())
            XCTAssertEqual((list["subscriptions"] as? [Body])?.count, 0, "nothing invalid was stored")
        }
    }

    // MARK: Evaluation

    func testQuerySubscriptionsFireOnCreateUpdateDeleteAndOnRecordsEnteringAndLeavingThePredicate() async throws {
        try await Self.withStack { fixture, client, hub in
            try await RecordAPITests.createZone(client, fixture, "Q")
            let big: Body = ["fieldName": "count", "comparator": "GREATER_THAN", "fieldValue": ["value": 5]]
            _ = try await Self.modify(client, fixture, [
                Self.create(Self.querySubscription("all", filters: [big], extra: ["notificationInfo": ["desiredKeys": ["title", "count"]]])),
                Self.create(Self.querySubscription("creates", filters: [big], firesOn: ["create"])),
                Self.create(Self.querySubscription("updates", filters: [big], firesOn: ["update"])),
                Self.create(Self.querySubscription("deletes", filters: [big], firesOn: ["delete"])),
                Self.create(Self.querySubscription("notes", type: "Note")),
            ])
            try await Self.save(client, fixture, "a", count: 7, title: "seven", operation: "create") // created, matching
            try await Self.save(client, fixture, "a", count: 8)                                      // updated, still matching
            try await Self.save(client, fixture, "a", count: 2)                                      // leaves the predicate
            try await Self.save(client, fixture, "a", count: 3)                                      // stays out: nothing
            try await Self.save(client, fixture, "a", count: 9, title: "nine")                      // enters the predicate
            try await Self.save(client, fixture, "small", count: 1, operation: "create")             // never matches: nothing
            let (status, _) = try await RecordAPITests.modify(client, fixture, zone: "Q", [["operationType": "forceDelete", "record": ["recordName": "a"]]])
            XCTAssertEqual(status, 200)
            try await Self.save(client, fixture, "last", count: 6, operation: "create")             // a marker: the log is complete after it
            let log = try await Self.waitForNotifications(client, fixture, count: 10)
            XCTAssertEqual(Self.reasons(log, subscription: "all"), [
                "a:recordCreated", "a:recordUpdated", "a:recordDeleted", "a:recordCreated", "a:recordDeleted", "last:recordCreated",
            ])
            XCTAssertEqual(Self.reasons(log, subscription: "creates"), ["a:recordCreated", "a:recordCreated", "last:recordCreated"])
            XCTAssertEqual(Self.reasons(log, subscription: "updates"), ["a:recordUpdated"])
            XCTAssertEqual(Self.reasons(log, subscription: "deletes"), ["a:recordDeleted", "a:recordDeleted"])
            XCTAssertEqual(Self.reasons(log, subscription: "notes"), [], "another record type never fires")
            XCTAssertEqual(log.count, 12)
            // The payload is CloudKit's: ck.qry names the record, the reason and the desired fields.
            let first = try XCTUnwrap(log.first { $0["subscriptionID"] as? String == "all" })
            let ck = try XCTUnwrap((first["payload"] as? Body)?["ck"] as? Body)
            let qry = try XCTUnwrap(ck["qry"] as? Body)
            XCTAssertEqual(qry["rid"] as? String, "a")
            XCTAssertEqual(qry["fo"] as? Int, 1)
            XCTAssertEqual(qry["sid"] as? String, "all")
            XCTAssertEqual(qry["zid"] as? String, "Q")
            XCTAssertEqual(qry["dbs"] as? Int, 2)
            XCTAssertEqual((qry["af"] as? Body)?["title"] as? String, "seven")
            XCTAssertEqual((qry["af"] as? Body)?["count"] as? Int, 7)
            XCTAssertEqual(ck["nid"] as? String, first["notificationID"] as? String)
            XCTAssertEqual(((first["payload"] as? Body)?["aps"] as? Body)?["content-available"] as? Int, 1, "no alert: a silent push")
        }
    }

    func testZoneAndDatabaseSubscriptionsFireOncePerWriteAndFiresOnceSubscriptionsOnlyOnce() async throws {
        try await Self.withStack { fixture, client, hub in
            try await RecordAPITests.createZone(client, fixture, "Q")
            try await RecordAPITests.createZone(client, fixture, "Other")
            _ = try await Self.modify(client, fixture, [
                Self.create(["subscriptionID": "zone", "subscriptionType": "zone", "zoneID": ["zoneName": "Q"],
                             "notificationInfo": ["alertBody": "Q changed", "shouldBadge": true]]),
                Self.create(["subscriptionID": "db", "subscriptionType": "database"]),
                Self.create(Self.querySubscription("once", firesOn: ["create"], extra: ["firesOnce": true])),
            ])
            // One write of three records in Q: one zone notification, one database notification.
            let (status, _) = try await RecordAPITests.modify(client, fixture, zone: "Q", (1...3).map { index in
                ["operationType": "create", "record": RecordAPITests.note("r\(index)", ["count": ["value": index]], type: "Item")]
            })
            XCTAssertEqual(status, 200)
            try await Self.save(client, fixture, "o1", count: 1, zone: "Other", operation: "create")
            try await Self.save(client, fixture, "r4", count: 4, operation: "create")
            try await RecordAPITests.createZone(client, fixture, "Third")
            let log = try await Self.waitForNotifications(client, fixture, count: 7)
            try await Task.sleep(for: .milliseconds(500))
            let settled = try await Self.notifications(client, fixture)
            XCTAssertEqual(settled.count, log.count, "nothing more than expected arrives")
            let zone = settled.filter { $0["subscriptionID"] as? String == "zone" }
            XCTAssertEqual(zone.count, 2, "one per write in Q: \(zone)")
            XCTAssertEqual(zone.first?["notificationType"] as? String, "zone")
            let fet = try XCTUnwrap(((zone.first?["payload"] as? Body)?["ck"] as? Body)?["fet"] as? Body)
            XCTAssertEqual(fet["zid"] as? String, "Q")
            let aps = try XCTUnwrap((zone.last?["payload"] as? Body)?["aps"] as? Body)
            XCTAssertEqual((aps["alert"] as? Body)?["body"] as? String, "Q changed")
            let position = try XCTUnwrap(settled.firstIndex { $0["notificationID"] as? String == zone.last?["notificationID"] as? String })
            XCTAssertEqual(aps["badge"] as? Int, position + 1, "the badge counts the unread notifications")
            let database = settled.filter { $0["subscriptionID"] as? String == "db" }
            // Zones are applied in their own order (their events travel in different partitions).
            XCTAssertEqual(database.compactMap { ($0["zoneID"] as? Body)?["zoneName"] as? String }.sorted(), ["Other", "Q", "Q", "Third"])
            XCTAssertNotNil(((database.first?["payload"] as? Body)?["ck"] as? Body)?["met"])
            XCTAssertEqual(Self.reasons(settled, subscription: "once"), ["r1:recordCreated"], "firesOnce fires for the first change only")
            let (_, list) = try await RecordAPITests.post(client, fixture.path("subscriptions/list"), [String: Any]())
            XCTAssertEqual(Set((list["subscriptions"] as? [Body] ?? []).compactMap { $0["subscriptionID"] as? String }), ["zone", "db"], "the fired firesOnce subscription is gone")
            // Marking read lowers the unread count; notifications/changes pages with its token.
            let ids = zone.compactMap { $0["notificationID"] as? String }
            let (readStatus, read) = try await RecordAPITests.post(client, Self.notificationsPath(fixture, "notifications/read"), ["notificationIDs": ids])
            XCTAssertEqual(readStatus, 200)
            XCTAssertEqual((read["notifications"] as? [Body])?.compactMap { $0["changed"] as? Bool }, [true, true])
            let again = try await Self.notifications(client, fixture)
            XCTAssertEqual(again.filter { $0["isRead"] as? Bool == true }.count, 2)
        }
    }

    func testNotificationsGoOnlyToUsersWhoMayReadTheChange() async throws {
        try await Self.withStack { fixture, client, hub in
            try await RecordAPITests.createZone(client, fixture, "Q")
            try await RecordAPITests.createZone(client, fixture, "Q", user: "_bob")
            _ = try await Self.modify(client, fixture, user: "_bob", [
                Self.create(Self.querySubscription("bobs", zone: nil, extra: ["zoneWide": true])),
                Self.create(["subscriptionID": "bobdb", "subscriptionType": "database"]),
            ])
            _ = try await Self.modify(client, fixture, database: "public", user: "_bob", [Self.create(Self.querySubscription("public", zone: nil))])
            // Alice's private change: never Bob's business.
            try await Self.save(client, fixture, "secret", count: 1, operation: "create")
            // Alice's public record: everybody signed in may read it.
            let (status, _) = try await RecordAPITests.modify(client, fixture, zone: nil, database: "public", [
                ["operationType": "create", "record": RecordAPITests.note("shared", ["count": ["value": 1]], type: "Item")],
            ])
            XCTAssertEqual(status, 200)
            // Bob's own private change: his zone-wide and database subscriptions fire.
            try await Self.save(client, fixture, "his", count: 1, operation: "create", user: "_bob")
            let log = try await Self.waitForNotifications(client, fixture, user: "_bob", count: 3)
            try await Task.sleep(for: .milliseconds(500))
            let settled = try await Self.notifications(client, fixture, user: "_bob")
            XCTAssertEqual(settled.count, 3, "\(log)")
            XCTAssertEqual(Self.reasons(settled, subscription: "public"), ["shared:recordCreated"])
            XCTAssertEqual(Self.reasons(settled, subscription: "bobs"), ["his:recordCreated"])
            XCTAssertFalse(settled.contains { $0["recordName"] as? String == "secret" })
            let alice = try await Self.notifications(client, fixture)
            XCTAssertEqual(alice.count, 0, "Alice subscribed to nothing")
            // A sync token of Bob's log is not Alice's.
            let (_, bobs) = try await RecordAPITests.post(client, Self.notificationsPath(fixture, "notifications/changes", user: "_bob"), [String: Any]())
            let (stolen, _) = try await RecordAPITests.post(client, Self.notificationsPath(fixture, "notifications/changes"), ["syncToken": bobs["syncToken"] as? String ?? ""])
            XCTAssertEqual(stolen, 400)
        }
    }

    // MARK: Delivery to web clients

    func testTheWebCourierLongPollReceivesANotificationForASave() async throws {
        try await Self.withStack { fixture, client, hub in
            let (path, created) = try await Self.webCourier(client, fixture)
            XCTAssertEqual(created["apnsEnvironment"] as? String, "development")
            XCTAssertNotNil(created["apnsToken"] as? String)
            // The poll (the list form, a Stratus extension) waits for the save that comes after it starts.
            async let polled: (Int, Body) = Self.get(client, path + "?format=list&timeout=45")
            try await TestSupport.eventually(timeout: .seconds(10), "the poll to wait") { hub.waiting == 1 }
            try await Self.save(client, fixture, "pushed", count: 1, operation: "create")
            let (pollStatus, answer) = try await polled
            XCTAssertEqual(pollStatus, 200)
            let delivered = answer["notifications"] as? [Body] ?? []
            XCTAssertEqual(delivered.map { $0["recordName"] as? String }, ["pushed"])
            // Handed out once: the next poll answers only what came later (none, after a short wait).
            let (_, next) = try await Self.get(client, path + "?format=list&timeout=1")
            XCTAssertEqual((next["notifications"] as? [Body])?.count, 0)
            // Unknown tokens and bad timeouts are refused.
            let (unknown, _) = try await Self.get(client, "/device/1/\(fixture.container)/development/courier/nope")
            XCTAssertEqual(unknown, 401)
            let (badTimeout, _) = try await Self.get(client, path + "?timeout=-3")
            XCTAssertEqual(badTimeout, 400)
            // tokens/register takes a hexadecimal device token only.
            let (registered, _) = try await RecordAPITests.post(client, Self.notificationsPath(fixture, "tokens/register"),
                                                               ["apnsEnvironment": "production", "apnsToken": String(repeating: "ab", count: 32)])
            XCTAssertEqual(registered, 200)
            let (badDevice, _) = try await RecordAPITests.post(client, Self.notificationsPath(fixture, "tokens/register"), ["apnsToken": "not-hex\u{0}"])
            XCTAssertEqual(badDevice, 400)
            let (badEnvironment, _) = try await RecordAPITests.post(client, Self.notificationsPath(fixture, "tokens/create"), ["apnsEnvironment": "staging"])
            XCTAssertEqual(badEnvironment, 400)
            // Hostile notification calls: each a clear 400.
            let hostile: [(String, Any)] = [
                ("notifications/read", ["notificationIDs": (0..<201).map { _ in UUID().uuidString }]),
                ("notifications/read", ["notificationIDs": ["not-an-id\u{0}"]]),
                ("notifications/read", ["notificationIDs": "one"]),
                ("notifications/changes", ["syncToken": "AAAA"]),
                ("notifications/changes", ["syncToken": String(repeating: "A", count: 100_000)]),
                ("notifications/changes", ["resultsLimit": 1e30]),
                ("tokens/register", ["apnsToken": String(repeating: "a", count: 10_000)]),
            ]
            for (operation, body) in hostile {
                let (status, json) = try await RecordAPITests.post(client, Self.notificationsPath(fixture, operation), body)
                XCTAssertEqual(status, 400, "\(operation) \(String(describing: body).prefix(80)): \(json)")
            }
            let (limited, limitedJSON) = try await RecordAPITests.post(client, Self.notificationsPath(fixture, "notifications/changes"), ["resultsLimit": -5])
            XCTAssertEqual(limited, 200, "a limit below 1 is read as 1: \(limitedJSON)")
        }
    }

    /// Zone Q with the query subscription `all`, and a web courier token from tokens/create: the
    /// path of its `webcourierURL` and the whole answer.
    static func webCourier(_ client: any TestClientProtocol, _ fixture: Fixture) async throws -> (String, Body) {
        try await RecordAPITests.createZone(client, fixture, "Q")
        _ = try await Self.modify(client, fixture, [Self.create(Self.querySubscription("all"))])
        let (status, created) = try await RecordAPITests.post(client, Self.notificationsPath(fixture, "tokens/create"), ["apnsEnvironment": "development"])
        XCTAssertEqual(status, 200, "\(created)")
        let url = try XCTUnwrap(created["webcourierURL"] as? String)
        return (try XCTUnwrap(url.range(of: "/device/").map { String(url[$0.lowerBound...]) }), created)
    }

    /// A courier poll: the status and the raw answer (a 204 has none).
    static func poll(_ client: any TestClientProtocol, _ uri: String) async throws -> (Int, [UInt8]) {
        try await client.execute(uri: uri, method: .get) { response in (Int(response.status.code), Array(buffer: response.body)) }
    }

    /// Apple's web courier shape: `webcourierURL` answers one notification per poll, CloudKit's push
    /// dictionary with `ck` (and `qry`) at the top level; the next poll gets the next, and none is
    /// handed out twice or skipped, also when the list form (`format=list`) takes the rest.
    func testTheWebCourierAnswersOneNotificationPerPollInApplesShape() async throws {
        try await Self.withStack { fixture, client, hub in
            let (path, _) = try await Self.webCourier(client, fixture)
            // Five notifications wait before the first poll.
            let names = ["n1", "n2", "n3", "n4", "n5"]
            for name in names { try await Self.save(client, fixture, name, count: 1, operation: "create") }
            let logged = try await Self.waitForNotifications(client, fixture, count: names.count)
            XCTAssertEqual(logged.compactMap { $0["recordName"] as? String }, names)
            // Three polls in Apple's shape: one notification each, oldest first.
            var handed: [String] = []
            for expected in names.prefix(3) {
                let (pollStatus, bytes) = try await Self.poll(client, path + "?timeout=5")
                XCTAssertEqual(pollStatus, 200)
                let answer = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(bytes)) as? Body, "one dictionary, not a list")
                XCTAssertNil(answer["notifications"])
                let ck = try XCTUnwrap(answer["ck"] as? Body, "\(answer)")
                XCTAssertNotNil(answer["aps"] as? Body)
                let query = try XCTUnwrap(ck["qry"] as? Body, "\(ck)")
                XCTAssertEqual(query["rid"] as? String, expected)
                XCTAssertEqual(query["sid"] as? String, "all")
                XCTAssertEqual(query["zid"] as? String, "Q")
                XCTAssertEqual(query["fo"] as? Int, 1)
                XCTAssertEqual(ck["cid"] as? String, fixture.container)
                handed.append(try XCTUnwrap(ck["nid"] as? String))
            }
            XCTAssertEqual(handed, logged.prefix(3).compactMap { $0["notificationID"] as? String })
            // The list form takes exactly the rest.
            let (_, rest) = try await Self.get(client, path + "?format=list&timeout=5")
            XCTAssertEqual((rest["notifications"] as? [Body])?.compactMap { $0["recordName"] as? String }, ["n4", "n5"])
            // Nothing is left: a poll in Apple's shape waits, then answers 204 with no body.
            let (empty, nothing) = try await Self.poll(client, path + "?timeout=1")
            XCTAssertEqual(empty, 204)
            XCTAssertEqual(nothing, [])
            // A poll in Apple's shape waits for the next save and answers it alone.
            async let waiting: (Int, [UInt8]) = Self.poll(client, path + "?timeout=45")
            try await TestSupport.eventually(timeout: .seconds(10), "the poll to wait") { hub.waiting == 1 }
            try await Self.save(client, fixture, "n6", count: 1, operation: "create")
            let (woken, bytes) = try await waiting
            XCTAssertEqual(woken, 200)
            let answer = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(bytes)) as? Body)
            XCTAssertEqual(((answer["ck"] as? Body)?["qry"] as? Body)?["rid"] as? String, "n6")
            // An unknown format is refused clearly.
            let (badFormat, refusal) = try await Self.get(client, path + "?format=xml&timeout=0")
            XCTAssertEqual(badFormat, 400)
            XCTAssertEqual(refusal["serverErrorCode"] as? String, "BAD_REQUEST")
        }
    }

    static func get(_ client: any TestClientProtocol, _ uri: String) async throws -> (Int, Body) {
        try await client.execute(uri: uri, method: .get) { response in
            let object = try JSONSerialization.jsonObject(with: Data(buffer: response.body), options: [.fragmentsAllowed]) as? Body ?? [:]
            return (Int(response.status.code), object)
        }
    }

    // MARK: Replay

    func testReplayingTheEventLogLogsNothingTwice() async throws {
        try await Self.withStack { fixture, client, hub in
            try await RecordAPITests.createZone(client, fixture, "Q")
            _ = try await Self.modify(client, fixture, [
                Self.create(Self.querySubscription("all")),
                Self.create(["subscriptionID": "zone", "subscriptionType": "zone", "zoneID": ["zoneName": "Q"]]),
            ])
            for index in 0..<5 { try await Self.save(client, fixture, "r\(index)", count: index, operation: "create") }
            try await Self.save(client, fixture, "r0", count: 10)
            let before = try await Self.waitForNotifications(client, fixture, count: 12)
            // Replay from the beginning, as `stratus replay stratus-subscriptions` does: forget the position, apply the log again.
            let applier = Applier(projection: SubscriptionsProjection(), store: fixture.store)
            try await applier.reset(logger: TestSupport.logger)
            let events = try await EventLog(store: fixture.store).events(after: 0, limit: 10_000, logger: TestSupport.logger)
            for event in events { try await applier.apply(event, logger: TestSupport.logger) }
            let after = try await Self.notifications(client, fixture)
            XCTAssertEqual(after.compactMap { $0["notificationID"] as? String }, before.compactMap { $0["notificationID"] as? String })
        }
    }

    /// A worker's batch evaluates many events at once and logs their notifications with a few
    /// statements: each user's positions stay gapless and in event order, badges count up, a zone
    /// subscription fires once per write, a `firesOnce` subscription once in all, and applying the
    /// batch again (redelivery) or replaying it logs nothing twice.
    func testABatchOfEventsLogsGaplessPositionsOncePerChangeForEverySubscriber() async throws {
        try await Self.withStack(pipeline: false) { fixture, client, hub in
            try await RecordAPITests.createZone(client, fixture, "Q")
            _ = try await Self.modify(client, fixture, [
                Self.create(Self.querySubscription("all", extra: ["notificationInfo": ["shouldBadge": true]])),
                Self.create(["subscriptionID": "zone", "subscriptionType": "zone", "zoneID": ["zoneName": "Q"]]),
                Self.create(Self.querySubscription("once", firesOn: ["create"], extra: ["firesOnce": true])),
            ])
            _ = try await Self.modify(client, fixture, database: "public", user: "_bob", [Self.create(Self.querySubscription("public", zone: nil))])
            _ = try await Self.modify(client, fixture, database: "public", user: "_carol", [Self.create(Self.querySubscription("public", zone: nil))])
            // One write of three records, two single saves, an update; two public records.
            let (status, _) = try await RecordAPITests.modify(client, fixture, zone: "Q", (1...3).map { index in
                ["operationType": "create", "record": RecordAPITests.note("r\(index)", ["count": ["value": index]], type: "Item")]
            })
            XCTAssertEqual(status, 200)
            try await Self.save(client, fixture, "r4", count: 4, operation: "create")
            try await Self.save(client, fixture, "r1", count: 10)
            for name in ["p1", "p2"] {
                let (saved, _) = try await RecordAPITests.modify(client, fixture, zone: nil, database: "public", [
                    ["operationType": "create", "record": RecordAPITests.note(name, ["count": ["value": 1]], type: "Item")],
                ])
                XCTAssertEqual(saved, 200)
            }
            let applier = Applier(projection: SubscriptionsProjection(), store: fixture.store)
            let events = try await EventLog(store: fixture.store).events(after: 0, limit: 10_000, logger: TestSupport.logger)
            let applied = try await applier.apply(batch: events, logger: TestSupport.logger)
            XCTAssertEqual(applied, events.count)

            let alice = try await Self.notifications(client, fixture)
            XCTAssertEqual(Self.reasons(alice, subscription: "all"), ["r1:recordCreated", "r2:recordCreated", "r3:recordCreated", "r4:recordCreated", "r1:recordUpdated"])
            XCTAssertEqual(alice.filter { $0["subscriptionID"] as? String == "zone" }.count, 3, "one per write in Q")
            XCTAssertEqual(Self.reasons(alice, subscription: "once"), ["r1:recordCreated"], "firesOnce fires for the first change only")
            let badges = alice.filter { $0["subscriptionID"] as? String == "all" }.compactMap { (($0["payload"] as? Body)?["aps"] as? Body)?["badge"] as? Int }
            let places = alice.enumerated().filter { $0.element["subscriptionID"] as? String == "all" }.map { $0.offset + 1 }
            XCTAssertEqual(badges, places, "each badge is the unread count when it was logged")
            for user in ["_bob", "_carol"] {
                let theirs = try await Self.notifications(client, fixture, user: user)
                XCTAssertEqual(Self.reasons(theirs, subscription: "public"), ["p1:recordCreated", "p2:recordCreated"])
            }
            let positions = try await fixture.store.withConnection { connection in
                var positions: [String: [Int64]] = [:]
                for try await (subscriber, position) in try await connection.query(
                    "SELECT subscriber, position FROM notifications ORDER BY subscriber, position", logger: TestSupport.logger
                ).decode((String, Int64).self) { positions[subscriber, default: []].append(position) }
                return positions
            }
            XCTAssertEqual(positions["_alice"], Array(1...Int64(alice.count)), "gapless")
            XCTAssertEqual(positions["_bob"], [1, 2])
            XCTAssertEqual(positions["_carol"], [1, 2])

            // The same batch again (a redelivery), then a replay from the beginning: nothing new.
            let redelivered = try await applier.apply(batch: events, logger: TestSupport.logger)
            XCTAssertEqual(redelivered, events.filter { $0.zoneSequence == nil }.count, "only unsequenced events come again")
            try await applier.reset(logger: TestSupport.logger)
            let replayed = try await applier.apply(batch: events, logger: TestSupport.logger)
            XCTAssertEqual(replayed, events.count)
            let again = try await Self.notifications(client, fixture)
            XCTAssertEqual(again.compactMap { $0["notificationID"] as? String }, alice.compactMap { $0["notificationID"] as? String })
            let bobs = try await Self.notifications(client, fixture, user: "_bob")
            XCTAssertEqual(bobs.count, 2)
        }
    }
}
