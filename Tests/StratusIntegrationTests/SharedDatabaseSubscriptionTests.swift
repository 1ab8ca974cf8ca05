import Foundation
import HummingbirdTesting
import StratusCore
import StratusPostgres
import StratusTesting
import StratusWorkers
import XCTest

/// Participants' `database` subscriptions in their shared database, end to end with the relay and
/// stratus-shares running: an owner's change in a zone shared with them (by a hierarchy or whole)
/// logs one notification per participant and request in their notification log, read through
/// `notifications/changes`; a stranger and a removed participant get none, and replaying
/// stratus-shares logs nothing twice.
final class SharedDatabaseSubscriptionTests: XCTestCase {
    typealias Body = [String: Any]

    /// A user's notification log as `notifications/changes` answers it, oldest first.
    static func notifications(_ client: any TestClientProtocol, _ fixture: SharingTests.Fixture, _ user: String) async throws -> [Body] {
        let path = fixture.path("notifications/changes", as: user)
            .replacingOccurrences(of: "/database/1/\(fixture.container)/development/private/", with: "/device/1/\(fixture.container)/development/")
        var all: [Body] = []
        var token: String?
        while true {
            let answer = try await SharingTests.ok(client, path, token.map { ["syncToken": $0, "resultsLimit": 50] } ?? ["resultsLimit": 50])
            all += SharingTests.list(answer, "notifications")
            token = answer["syncToken"] as? String
            guard answer["moreComing"] as? Bool == true else { return all }
        }
    }

    /// Each notification as "zone scope type subscription dbs" (dbs: the push payload's database scope).
    static func summary(_ notifications: [Body]) -> [String] {
        notifications.map { notification in
            let zone = notification["zoneID"] as? Body ?? [:]
            let met = ((notification["payload"] as? Body)?["ck"] as? Body)?["met"] as? Body ?? [:]
            return "\(zone["zoneName"] as? String ?? "?")@\(zone["ownerRecordName"] as? String ?? "?") \(notification["databaseScope"] as? String ?? "?") "
                + "\(notification["notificationType"] as? String ?? "?") \(notification["subscriptionID"] as? String ?? "?") \(met["dbs"] ?? "?")"
        }
    }

    /// Waits until stratus-shares has applied every event, then answers each user's log summarised.
    static func settledLogs(_ client: any TestClientProtocol, _ fixture: SharingTests.Fixture, _ store: PostgresStore, _ users: [String])
        async throws -> [String: [String]] {
        try await SubscriptionsKillReplayTests.waitForCheckpoints(store, worker: "stratus-shares")
        var logs: [String: [String]] = [:]
        for user in users { logs[user] = summary(try await notifications(client, fixture, user)) }
        return logs
    }

    /// Every logged notification (subscriber, position, dedupe key) and every subscriber's last position.
    static func logRows(_ store: PostgresStore) async throws -> (notifications: [String], positions: [String]) {
        try await store.withConnection { connection in
            var notifications: [String] = []
            for try await (subscriber, position, key) in try await connection.query(
                "SELECT subscriber, position, dedupe_key FROM notifications ORDER BY subscriber, position", logger: TestSupport.logger
            ).decode((String, Int64, String).self) {
                notifications.append("\(subscriber) \(position) \(key)")
            }
            var positions: [String] = []
            for try await (subscriber, last) in try await connection.query(
                "SELECT subscriber, last_position FROM notification_positions ORDER BY subscriber", logger: TestSupport.logger
            ).decode((String, Int64).self) {
                positions.append("\(subscriber) \(last)")
            }
            return (notifications, positions)
        }
    }

    func testParticipantsDatabaseSubscriptionsInTheSharedDatabaseAreNotifiedOfTheirZonesChanges() async throws {
        try await APIPipelineFixture.withStack(projection: SharesProjection(), relay: true, worker: true) { api, client, _, location in
            let names = try await SharingTests.createUsers(store: api.store, container: api.container)
            let fixture = SharingTests.Fixture(
                apiToken: api.apiToken, secretKey: api.configuration.secretKey, alice: names[0], bob: names[1], carol: names[2], dave: names[3],
                container: api.container)
            let store = api.store
            let (alice, bob, carol, dave) = (fixture.alice, fixture.bob, fixture.carol, fixture.dave)
            func ownerWrites(_ zone: String, _ operations: [Body]) async throws {
                let answer = try await SharingTests.ok(client, fixture.path("records/modify", as: alice), ["zoneID": ["zoneName": zone], "operations": operations])
                XCTAssertNil(SharingTests.list(answer, "records").first { $0["serverErrorCode"] != nil }, "\(answer)")
            }

            // Trip: a hierarchy shared with bob and carol; Camp: shared whole with bob. Both accept.
            let share = try await SharingTests.shareTrip(client, fixture)
            try await SharingTests.createZone(client, fixture, "Camp")
            let camp = try await SharingTests.ok(client, fixture.path("records/modify", as: alice), [
                "zoneID": ["zoneName": "Camp"],
                "operations": [["operationType": "create", "record": [
                    "recordName": ShareRecord.zoneShareName, "recordType": ShareRecord.recordType, "participants": [SharingTests.participant(bob, "READ_ONLY")]]]],
            ])
            let tripGUID = try XCTUnwrap(share["shortGUID"] as? String)
            let campGUID = try XCTUnwrap(SharingTests.list(camp, "records").first?["shortGUID"] as? String, "\(camp)")
            _ = try await SharingTests.ok(client, fixture.path("records/accept", "public", as: bob), ["shortGUIDs": [tripGUID, campGUID]])
            _ = try await SharingTests.ok(client, fixture.path("records/accept", "public", as: carol), ["shortGUIDs": [tripGUID]])
            try await SubscriptionsKillReplayTests.waitForCheckpoints(store, worker: "stratus-shares")

            // Each of bob, carol and dave (a stranger) saves a database subscription in their shared
            // database; the shared database takes no zone (nor query) subscription.
            for user in [bob, carol, dave] {
                let saved = SharingTests.list(try await SharingTests.ok(client, fixture.path("subscriptions/modify", "shared", as: user), [
                    "operations": [
                        ["operationType": "create", "subscription": ["subscriptionID": "shared-changes", "subscriptionType": "database"]],
                        ["operationType": "create", "subscription": ["subscriptionID": "z", "subscriptionType": "zone", "zoneID": ["zoneName": "Trip"]]],
                    ],
                ]), "subscriptions")
                XCTAssertEqual(saved.first?["subscriptionID"] as? String, "shared-changes", "\(saved)")
                XCTAssertEqual(saved.last?["serverErrorCode"] as? String, "BAD_REQUEST", "\(saved)")
            }
            let users = [bob, carol, dave]
            var logs = try await Self.settledLogs(client, fixture, store, users)
            XCTAssertEqual(logs, [bob: [], carol: [], dave: []], "changes made before a subscription never fire it")

            // Alice adds a day under Trip's root (two records, one request): one notification each
            // for bob and carol, in the shared scope, naming her zone; nothing for dave.
            try await ownerWrites("Trip", [
                ["operationType": "create", "record": ["recordName": "day3", "recordType": "Day", "parent": ["recordName": "day1"]]],
                ["operationType": "create", "record": ["recordName": "day4", "recordType": "Day", "parent": ["recordName": "day3"]]],
            ])
            let trip = "Trip@\(alice) shared database shared-changes 3"
            logs = try await Self.settledLogs(client, fixture, store, users)
            XCTAssertEqual(logs, [bob: [trip], carol: [trip], dave: []])

            // A change in Camp (shared whole with bob only) reaches bob alone.
            try await ownerWrites("Camp", [["operationType": "create", "record": ["recordName": "tent", "recordType": "Day"]]])
            let campChange = "Camp@\(alice) shared database shared-changes 3"
            logs = try await Self.settledLogs(client, fixture, store, users)
            XCTAssertEqual(logs, [bob: [trip, campChange], carol: [trip], dave: []])

            // Alice removes bob from Trip's share: both are told of that change (bob's shared
            // database loses the zone); her later change in Trip reaches carol only.
            try await ownerWrites("Trip", [["operationType": "forceUpdate", "record": [
                "recordName": "share-1", "participants": [["userIdentity": ["lookupInfo": ["emailAddress": "carol@example.com"]], "permission": "READ_WRITE"]],
            ]]])
            logs = try await Self.settledLogs(client, fixture, store, users)
            XCTAssertEqual(logs, [bob: [trip, campChange, trip], carol: [trip, trip], dave: []])
            try await ownerWrites("Trip", [["operationType": "create", "record": ["recordName": "day5", "recordType": "Day", "parent": ["recordName": "trip"]]]])
            logs = try await Self.settledLogs(client, fixture, store, users)
            XCTAssertEqual(logs, [bob: [trip, campChange, trip], carol: [trip, trip, trip], dave: []])

            // Replaying stratus-shares from the beginning logs nothing twice and moves no position.
            let before = try await Self.logRows(store)
            XCTAssertEqual(before.positions, ["\(bob) 3", "\(carol) 3"].sorted())
            XCTAssertEqual(before.notifications.map { $0.split(separator: " ").prefix(2).joined(separator: " ") },
                           [bob, carol].sorted().flatMap { user in (1...3).map { "\(user) \($0)" } }, "positions without gaps")
            let replay = try await StratusExecutable.run("stratus", ["replay", "stratus-shares"], settings: location.settings)
            XCTAssertEqual(replay.status, 0, replay.output)
            XCTAssertTrue(replay.output.contains("replay stratus-shares done"), replay.output)
            let after = try await Self.logRows(store)
            XCTAssertEqual(after.notifications, before.notifications)
            XCTAssertEqual(after.positions, before.positions)
            logs = try await Self.settledLogs(client, fixture, store, users)
            XCTAssertEqual(logs, [bob: [trip, campChange, trip], carol: [trip, trip, trip], dave: []])
        }
    }
}
