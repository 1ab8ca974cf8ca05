import Foundation
import HummingbirdTesting
import StratusCore
import StratusPostgres
import StratusTesting
import StratusWorkers
import XCTest

/// The share fan-out (`SharesProjection`, stratus-shares) end to end with the relay and the worker
/// running: participants' shared-database sync follows the changes of the owner's shared zone,
/// shows the zone gone when they lose it, and their old zone token then expires, while a stranger
/// still finds no zone.
final class SharingFanOutTests: XCTestCase {
    typealias Body = [String: Any]

    /// The pipeline's stack with alice, bob, carol and dave in the container's user directory.
    func withFanOut(_ body: @Sendable (SharingTests.Fixture, any TestClientProtocol, PostgresStore) async throws -> Void) async throws {
        try await APIPipelineFixture.withStack(projection: SharesProjection(), pipeline: true) { api, client, _ in
            let names = try await SharingTests.createUsers(store: api.store, container: api.container)
            let fixture = SharingTests.Fixture(
                apiToken: api.apiToken, secretKey: api.configuration.secretKey, alice: names[0], bob: names[1], carol: names[2], dave: names[3],
                container: api.container)
            try await body(fixture, client, api.store)
        }
    }

    /// One `changes/database` call in `user`'s shared database: the zones answered as
    /// (owner/zone, deleted) and the new token.
    static func databaseSync(_ client: any TestClientProtocol, _ fixture: SharingTests.Fixture, _ user: String, _ token: String?)
        async throws -> (zones: [String], token: String) {
        let answer = try await SharingTests.ok(client, fixture.path("changes/database", "shared", as: user), token.map { ["syncToken": $0] } ?? [:])
        let zones = SharingTests.list(answer, "zones").map { zone in
            let id = zone["zoneID"] as? Body ?? [:]
            return "\(id["zoneName"] as? String ?? "?")\(zone["deleted"] as? Bool == true ? " deleted" : "")"
        }
        return (zones, answer["syncToken"] as? String ?? "")
    }

    /// Waits until `user`'s database sync from `token` answers `expected`; returns the token after it.
    static func waitForDatabaseSync(
        _ client: any TestClientProtocol, _ fixture: SharingTests.Fixture, _ user: String, from token: String, shows expected: [String], _ what: String
    ) async throws -> String {
        var latest = token
        try await TestSupport.eventually(timeout: .seconds(60), what) {
            let (zones, next) = try await databaseSync(client, fixture, user, token)
            latest = next
            return zones == expected
        }
        return latest
    }

    /// `records/changes` in `user`'s shared database from a zone token: the status, the records
    /// answered (name, or "name deleted"), the error code and the new token.
    static func zoneSync(_ client: any TestClientProtocol, _ fixture: SharingTests.Fixture, _ user: String, _ token: String?)
        async throws -> (status: Int, records: Set<String>, error: String?, token: String?) {
        var body: Body = ["zoneID": ["zoneName": "Trip", "ownerRecordName": fixture.alice]]
        if let token { body["syncToken"] = token }
        let (status, answer) = try await SharingTests.send(client, fixture.path("records/changes", "shared", as: user), body)
        let records = Set(SharingTests.list(answer, "records").map { record in
            "\(record["recordName"] as? String ?? "?")\(record["deleted"] as? Bool == true ? " deleted" : "")"
        })
        return (status, records, answer["serverErrorCode"] as? String, answer["syncToken"] as? String)
    }

    /// Alice's writes to her zone Trip.
    static func ownerWrites(_ client: any TestClientProtocol, _ fixture: SharingTests.Fixture, _ operations: [Body]) async throws -> Body {
        try await SharingTests.ok(client, fixture.path("records/modify", as: fixture.alice), ["zoneID": ["zoneName": "Trip"], "operations": operations])
    }

    func testParticipantsSyncTheirHierarchyAndLoseTheZoneWhenRemoved() async throws {
        try await withFanOut { fixture, client, store in
            // Alice shares the trip with bob (READ_ONLY) and carol (READ_WRITE); both accept.
            let share = try await SharingTests.shareTrip(client, fixture)
            let shortGUID = try XCTUnwrap(share["shortGUID"] as? String)
            for user in [fixture.bob, fixture.carol] {
                let accepted = SharingTests.list(try await SharingTests.ok(client, fixture.path("records/accept", "public", as: user), [
                    "shortGUIDs": [shortGUID],
                ]), "results")
                XCTAssertEqual(accepted.first?["participantStatus"] as? String, "ACCEPTED", "\(accepted)")
            }
            try await SubscriptionsKillReplayTests.waitForCheckpoints(store, worker: "stratus-shares")

            // Each participant's first sync: the zone, then its records within the hierarchy.
            var databaseTokens: [String: String] = [:]
            var zoneTokens: [String: String] = [:]
            for user in [fixture.bob, fixture.carol] {
                let (zones, token) = try await Self.databaseSync(client, fixture, user, nil)
                XCTAssertEqual(zones, ["Trip"])
                databaseTokens[user] = token
                let first = try await Self.zoneSync(client, fixture, user, nil)
                XCTAssertEqual(first.records, ["trip", "day1", "day2", "share-1"])
                zoneTokens[user] = first.token
                let (quiet, _) = try await Self.databaseSync(client, fixture, user, token)
                XCTAssertEqual(quiet, [], "nothing new once the fan-out has caught up")
            }
            // dave has no such zone.
            let stranger = try await Self.zoneSync(client, fixture, fixture.dave, zoneTokens[fixture.bob])
            XCTAssertEqual(stranger.status, 404)
            XCTAssertEqual(stranger.error, "ZONE_NOT_FOUND")
            let (daveZones, daveToken) = try await Self.databaseSync(client, fixture, fixture.dave, nil)
            XCTAssertEqual(daveZones, [])

            // Alice's write, then each participant: their database sync shows the zone changed and
            // their zone sync from their last token answers `records`.
            func ownerWrite(_ operation: Body, reaches records: Set<String>, _ what: String) async throws {
                _ = try await Self.ownerWrites(client, fixture, [operation])
                for user in [fixture.bob, fixture.carol] {
                    databaseTokens[user] = try await Self.waitForDatabaseSync(
                        client, fixture, user, from: databaseTokens[user]!, shows: ["Trip"], "\(what) to reach \(user)'s database sync")
                    let synced = try await Self.zoneSync(client, fixture, user, zoneTokens[user])
                    XCTAssertEqual(synced.records, records, what)
                    zoneTokens[user] = synced.token
                }
            }
            // A record added under the shared root reaches both participants' sync.
            try await ownerWrite(["operationType": "create", "record": ["recordName": "day3", "recordType": "Day", "parent": ["recordName": "day1"]]],
                                 reaches: ["day3"], "the added record")
            // A record moved out of the hierarchy disappears from it.
            try await ownerWrite(["operationType": "forceUpdate", "record": ["recordName": "day2", "parent": ["recordName": "other"]]],
                                 reaches: ["day2 deleted"], "the move")

            // Alice removes bob: his access ends with her request, his database sync shows the zone
            // gone at once, and once the fan-out has applied the removal his zone token is expired.
            let removed = try await Self.ownerWrites(client, fixture, [
                ["operationType": "forceUpdate", "record": [
                    "recordName": "share-1", "participants": [["userIdentity": ["lookupInfo": ["emailAddress": "carol@example.com"]], "permission": "READ_WRITE"]],
                ]],
            ])
            XCTAssertNil(SharingTests.list(removed, "records").first?["serverErrorCode"], "\(removed)")
            let (lookupStatus, lookup) = try await SharingTests.send(client, fixture.path("records/lookup", "shared", as: fixture.bob), [
                "zoneID": ["zoneName": "Trip", "ownerRecordName": fixture.alice], "records": [["recordName": "trip"]],
            ])
            XCTAssertEqual(lookupStatus, 404)
            XCTAssertEqual(lookup["serverErrorCode"] as? String, "ZONE_NOT_FOUND", "access ends in the owner's request")
            let (gone, _) = try await Self.databaseSync(client, fixture, fixture.bob, databaseTokens[fixture.bob])
            XCTAssertEqual(gone, ["Trip deleted"])
            try await TestSupport.eventually(timeout: .seconds(60), "bob's old zone token to expire") {
                let expired = try await Self.zoneSync(client, fixture, fixture.bob, zoneTokens[fixture.bob])
                return expired.error == "CHANGE_TOKEN_EXPIRED"
            }
            let expired = try await Self.zoneSync(client, fixture, fixture.bob, zoneTokens[fixture.bob])
            XCTAssertEqual(expired.status, 410, "the reset CloudKit gives")
            // changes/zone says the same for the zone.
            let batch = SharingTests.list(try await SharingTests.ok(client, fixture.path("changes/zone", "shared", as: fixture.bob), [
                "zones": [["zoneID": ["zoneName": "Trip", "ownerRecordName": fixture.alice], "syncToken": zoneTokens[fixture.bob]!]],
            ]), "zones")
            XCTAssertEqual(batch.first?["serverErrorCode"] as? String, "CHANGE_TOKEN_EXPIRED", "\(batch)")
            // Without a token he simply has no such zone; dave, with bob's token, neither.
            let fresh = try await Self.zoneSync(client, fixture, fixture.bob, nil)
            XCTAssertEqual(fresh.error, "ZONE_NOT_FOUND")
            let daveAfter = try await Self.zoneSync(client, fixture, fixture.dave, zoneTokens[fixture.bob])
            XCTAssertEqual(daveAfter.error, "ZONE_NOT_FOUND", "a stranger gets no hint the zone exists")
            let (daveQuiet, _) = try await Self.databaseSync(client, fixture, fixture.dave, daveToken)
            XCTAssertEqual(daveQuiet, [])

            // Carol is told of the share's change, and keeps syncing.
            databaseTokens[fixture.carol] = try await Self.waitForDatabaseSync(
                client, fixture, fixture.carol, from: databaseTokens[fixture.carol]!, shows: ["Trip"], "the share change to reach carol")
            let carol = try await Self.zoneSync(client, fixture, fixture.carol, zoneTokens[fixture.carol])
            XCTAssertEqual(carol.status, 200)
            XCTAssertEqual(carol.records, ["share-1"])
        }
    }

    func testAChangeOutsideEveryShareMovesNoParticipantAndAZoneShareEndsWithItsDeletion() async throws {
        try await withFanOut { fixture, client, store in
            // Two zones: Trip shared whole with bob, Private shared with nobody.
            try await SharingTests.createZone(client, fixture, "Trip")
            try await SharingTests.createZone(client, fixture, "Private")
            let saved = try await Self.ownerWrites(client, fixture, [
                ["operationType": "create", "record": ["recordName": "a", "recordType": "Day"]],
                ["operationType": "create", "record": [
                    "recordName": ShareRecord.zoneShareName, "recordType": ShareRecord.recordType,
                    "participants": [SharingTests.participant(fixture.bob, "READ_ONLY")]]],
            ])
            let shortGUID = try XCTUnwrap(SharingTests.list(saved, "records").last?["shortGUID"] as? String, "\(saved)")
            _ = try await SharingTests.ok(client, fixture.path("records/accept", "public", as: fixture.bob), ["shortGUIDs": [shortGUID]])
            try await SubscriptionsKillReplayTests.waitForCheckpoints(store, worker: "stratus-shares")
            let (zones, token) = try await Self.databaseSync(client, fixture, fixture.bob, nil)
            XCTAssertEqual(zones, ["Trip"])

            // A write to the unshared zone, then one to Trip: only Trip's reaches bob.
            _ = try await SharingTests.ok(client, fixture.path("records/modify", as: fixture.alice), [
                "zoneID": ["zoneName": "Private"], "operations": [["operationType": "create", "record": ["recordName": "p", "recordType": "Day"]]],
            ])
            try await SubscriptionsKillReplayTests.waitForCheckpoints(store, worker: "stratus-shares")
            let (unmoved, _) = try await Self.databaseSync(client, fixture, fixture.bob, token)
            XCTAssertEqual(unmoved, [], "a change to a zone bob does not share is not his")
            _ = try await Self.ownerWrites(client, fixture, [["operationType": "create", "record": ["recordName": "b", "recordType": "Day"]]])
            let next = try await Self.waitForDatabaseSync(client, fixture, fixture.bob, from: token, shows: ["Trip"], "the zone-wide change to reach bob")
            let first = try await Self.zoneSync(client, fixture, fixture.bob, nil)
            XCTAssertEqual(first.records, ["a", "b", ShareRecord.zoneShareName])

            // The zone share deleted: the zone is gone from bob's database, then his token expires.
            _ = try await Self.ownerWrites(client, fixture, [["operationType": "forceDelete", "record": ["recordName": ShareRecord.zoneShareName]]])
            let (gone, _) = try await Self.databaseSync(client, fixture, fixture.bob, next)
            XCTAssertEqual(gone, ["Trip deleted"])
            try await TestSupport.eventually(timeout: .seconds(60), "bob's zone token to expire after the share's deletion") {
                try await Self.zoneSync(client, fixture, fixture.bob, first.token).error == "CHANGE_TOKEN_EXPIRED"
            }
        }
    }
}
