import Foundation
import Hummingbird
import HummingbirdTesting
import StratusAPI
import StratusCore
import StratusPostgres
import StratusTesting
import XCTest

/// Sharing over HTTP against the real PostgreSQL, with several users: share records stored with
/// their root (the rules enforced in the write's transaction), records/resolve and records/accept,
/// and the shared database's reads limited to the zones and hierarchies shared with the caller.
final class SharingTests: XCTestCase {
    typealias Body = [String: Any]
    static let container = "iCloud.com.example.trips"

    struct Fixture: Sendable {
        let apiToken: String
        let secretKey: SecretKey
        /// The owner.
        let alice: String
        /// Invited by user record name.
        let bob: String
        /// Invited by email address (carol@example.com).
        let carol: String
        /// A stranger to every share.
        let dave: String
        /// The users' container.
        var container = SharingTests.container

        func path(_ operation: String, _ database: String = "private", as user: String?) -> String {
            var uri = "/database/1/\(container)/development/\(database)/\(operation)?ckAPIToken=\(apiToken)"
            if let user {
                let token = WebAuthToken(
                    userRecordName: user, container: container, expiresAt: Int64(Date().timeIntervalSince1970) + 3600, credentialEpoch: 1
                ).signed(with: secretKey)
                uri += "&ckWebAuthToken=\(token)"
            }
            return uri
        }
    }

    func withFixture(_ body: @Sendable (Fixture, any TestClientProtocol) async throws -> Void) async throws {
        try await Self.withFixture { fixture, _, client in try await body(fixture, client) }
    }

    /// The fixture with its store (for the console's pages over the same data); `maxResults`: the
    /// API's largest page, when not its default.
    static func withFixture(
        maxResults: Int? = nil, _ body: @Sendable (Fixture, PostgresStore, any TestClientProtocol) async throws -> Void
    ) async throws {
        try await TestSupport.withMigratedStore { store, _ in
            let token = try await ContainerStore(store: store).create(container: Self.container, label: "test", logger: TestSupport.logger)
            let names = try await Self.createUsers(store: store, container: Self.container)
            var configuration = APIConfiguration(secretKey: SecretKey.generate())
            if let maxResults { configuration.limits.maxResults = maxResults }
            let fixture = Fixture(apiToken: token, secretKey: configuration.secretKey, alice: names[0], bob: names[1], carol: names[2], dave: names[3])
            let router = buildRouter(APIDependencies(store: store, readiness: [], metrics: { "" }), configuration: configuration)
            try await Application(router: router, logger: TestSupport.logger).test(.router) { client in
                try await body(fixture, store, client)
            }
        }
    }

    /// alice, bob, carol and dave (each `<login>@example.com`) in a container's user directory; their user record names.
    static func createUsers(store: PostgresStore, container: String) async throws -> [String] {
        let users = UserStore(store: store, rounds: 1_000)
        var names: [String] = []
        for login in ["alice", "bob", "carol", "dave"] {
            names.append(try await users.create(
                container: container, login: login, password: "a password",
                identity: UserIdentityChange(emailAddress: "\(login)@example.com"), logger: TestSupport.logger))
        }
        return names
    }

    static func send(_ client: any TestClientProtocol, _ uri: String, _ body: Any) async throws -> (Int, Body) {
        let data = try JSONSerialization.data(withJSONObject: body)
        return try await client.execute(uri: uri, method: .post, headers: [:], body: ByteBuffer(data: data)) { response in
            let object = try? JSONSerialization.jsonObject(with: Data(buffer: response.body)) as? Body
            return (Int(response.status.code), object ?? [:])
        }
    }

    /// Sends and expects 200.
    static func ok(_ client: any TestClientProtocol, _ uri: String, _ body: Any, file: StaticString = #filePath, line: UInt = #line) async throws -> Body {
        let (status, answer) = try await send(client, uri, body)
        XCTAssertEqual(status, 200, "\(answer)", file: file, line: line)
        return answer
    }

    static func list(_ answer: Body, _ key: String) -> [Body] { answer[key] as? [Body] ?? [] }

    /// Expects `count` zones in `user`'s shared database.
    static func expectSharedZones(
        _ client: any TestClientProtocol, _ fixture: Fixture, _ user: String, _ count: Int, file: StaticString = #filePath, line: UInt = #line
    ) async throws {
        let zones = list(try await ok(client, fixture.path("zones/list", "shared", as: user), [:], file: file, line: line), "zones")
        XCTAssertEqual(zones.count, count, "\(zones)", file: file, line: line)
    }

    static func createZone(_ client: any TestClientProtocol, _ fixture: Fixture, _ name: String) async throws {
        _ = try await Self.ok(client, fixture.path("zones/modify", as: fixture.alice), [
            "operations": [["operationType": "create", "zone": ["zoneID": ["zoneName": name]]]],
        ])
    }

    static func participant(_ user: String, _ permission: String) -> Body {
        ["userIdentity": ["lookupInfo": ["userRecordName": user]], "permission": permission]
    }

    /// Alice's zone Trip: root `trip` (shared by `share-1` with bob and carol@example.com), `day1`
    /// under it, `day2` under `day1`, and `other` outside the hierarchy. Returns the share's answer.
    static func shareTrip(_ client: any TestClientProtocol, _ fixture: Fixture, publicPermission: String = "NONE") async throws -> Body {
        try await Self.createZone(client, fixture, "Trip")
        let answer = try await Self.ok(client, fixture.path("records/modify", as: fixture.alice), [
            "zoneID": ["zoneName": "Trip"],
            "operations": [
                ["operationType": "create", "record": [
                    "recordName": "trip", "recordType": "Trip", "fields": ["title": ["value": "Lisbon"]], "share": ["recordName": "share-1"]]],
                ["operationType": "create", "record": ["recordName": "day1", "recordType": "Day", "parent": ["recordName": "trip"]]],
                ["operationType": "create", "record": ["recordName": "day2", "recordType": "Day", "parent": ["recordName": "day1"]]],
                ["operationType": "create", "record": ["recordName": "other", "recordType": "Day"]],
                ["operationType": "create", "record": [
                    "recordName": "share-1", "recordType": "cloudkit.share", "publicPermission": publicPermission,
                    "participants": [
                        // A client's claims of acceptance and roles are not taken.
                        ["userIdentity": ["lookupInfo": ["userRecordName": fixture.bob]], "permission": "READ_ONLY", "acceptanceStatus": "ACCEPTED", "type": "OWNER"],
                        ["userIdentity": ["lookupInfo": ["emailAddress": "Carol@Example.com"]], "permission": "READ_WRITE"],
                    ]]],
            ],
        ])
        let records = Self.list(answer, "records")
        XCTAssertEqual(records.count, 5, "\(answer)")
        XCTAssertNil(records.first { $0["serverErrorCode"] != nil }, "\(answer)")
        return records[4]
    }

    func testAHierarchyShareIsResolvedAcceptedAndReadOnlyWithinItsHierarchy() async throws {
        try await withFixture { fixture, client in
            let share = try await Self.shareTrip(client, fixture)
            let shortGUID = try XCTUnwrap(share["shortGUID"] as? String, "the server makes the short GUID: \(share)")
            XCTAssertEqual(share["publicPermission"] as? String, "NONE")
            let participants = Self.list(share, "participants")
            XCTAssertEqual(participants.map { $0["acceptanceStatus"] as? String }, ["ACCEPTED", "PENDING", "PENDING"])
            XCTAssertEqual(participants.map { $0["type"] as? String }, ["OWNER", "USER", "USER"])
            XCTAssertEqual((share["url"] as? String)?.hasSuffix("/share/\(Self.container)/\(shortGUID)"), true, "\(share)")

            // Resolving: the invited see the share and their status; a stranger finds nothing.
            let resolved = Self.list(try await Self.ok(client, fixture.path("records/resolve", "public", as: fixture.bob), [
                "shortGUIDs": [["value": shortGUID, "shouldFetchRootRecord": true]],
            ]), "results")
            XCTAssertEqual(resolved.first?["participantStatus"] as? String, "PENDING", "\(resolved)")
            XCTAssertEqual(resolved.first?["rootRecordName"] as? String, "trip")
            XCTAssertEqual((resolved.first?["rootRecord"] as? Body)?["recordName"] as? String, "trip")
            XCTAssertEqual(((resolved.first?["zoneID"] as? Body)?["ownerRecordName"]) as? String, fixture.alice)
            let stranger = Self.list(try await Self.ok(client, fixture.path("records/resolve", "public", as: fixture.dave), [
                "shortGUIDs": [shortGUID, "no-such-guid"],
            ]), "results")
            XCTAssertEqual(stranger.map { $0["serverErrorCode"] as? String }, ["NOT_FOUND", "NOT_FOUND"])
            let strangerAccepts = Self.list(try await Self.ok(client, fixture.path("records/accept", "public", as: fixture.dave), [
                "shortGUIDs": [shortGUID],
            ]), "results")
            XCTAssertEqual(strangerAccepts.first?["serverErrorCode"] as? String, "NOT_FOUND", "no hint that a private share exists")

            // Before accepting, the shared database is empty.
            try await Self.expectSharedZones(client, fixture, fixture.bob, 0)
            let before = try await Self.ok(client, fixture.path("changes/database", "shared", as: fixture.bob), [:])
            XCTAssertEqual(Self.list(before, "zones").count, 0)
            let accepted = Self.list(try await Self.ok(client, fixture.path("records/accept", "public", as: fixture.bob), [
                "shortGUIDs": [["value": shortGUID]],
            ]), "results")
            XCTAssertEqual(accepted.first?["participantStatus"] as? String, "ACCEPTED", "\(accepted)")
            // Carol was invited by email address: accepting makes the place hers.
            let carol = Self.list(try await Self.ok(client, fixture.path("records/accept", "public", as: fixture.carol), [
                "shortGUIDs": [shortGUID],
            ]), "results")
            XCTAssertEqual(carol.first?["participantStatus"] as? String, "ACCEPTED", "\(carol)")
            XCTAssertEqual(carol.first?["participantPermission"] as? String, "READ_WRITE")
            let carolEntry = Self.list(carol.first?["share"] as? Body ?? [:], "participants")[2]
            XCTAssertEqual((carolEntry["userIdentity"] as? Body)?["userRecordName"] as? String, fixture.carol)

            // bob's database sync shows the zone.
            let synced = try await Self.ok(client, fixture.path("changes/database", "shared", as: fixture.bob), ["syncToken": before["syncToken"] ?? ""])
            XCTAssertEqual(Self.list(synced, "zones").map { ($0["zoneID"] as? Body)?["ownerRecordName"] as? String }, [fixture.alice], "\(synced)")
            let quiet = try await Self.ok(client, fixture.path("changes/database", "shared", as: fixture.bob), ["syncToken": synced["syncToken"] ?? ""])
            XCTAssertEqual(Self.list(quiet, "zones").count, 0, "no change since")
            // The owner's zone is in bob's shared database, and only the hierarchy is readable.
            let zones = Self.list(try await Self.ok(client, fixture.path("zones/list", "shared", as: fixture.bob), [:]), "zones")
            XCTAssertEqual(zones.map { ($0["zoneID"] as? Body)?["zoneName"] as? String }, ["Trip"])
            XCTAssertEqual((zones.first?["zoneID"] as? Body)?["ownerRecordName"] as? String, fixture.alice)
            let zoneID: Body = ["zoneName": "Trip", "ownerRecordName": fixture.alice]
            let looked = Self.list(try await Self.ok(client, fixture.path("records/lookup", "shared", as: fixture.bob), [
                "zoneID": zoneID, "records": [["recordName": "trip"], ["recordName": "day1"], ["recordName": "day2"], ["recordName": "other"], ["recordName": "share-1"]],
            ]), "records")
            XCTAssertEqual(looked.map { $0["serverErrorCode"] as? String ?? "found" }, ["found", "found", "found", "NOT_FOUND", "found"], "\(looked)")
            XCTAssertEqual(((looked[0]["fields"] as? Body)?["title"] as? Body)?["value"] as? String, "Lisbon")
            XCTAssertEqual(Self.list(looked[4], "participants").count, 3, "the share record carries its participants")
            let changes = Self.list(try await Self.ok(client, fixture.path("records/changes", "shared", as: fixture.bob), ["zoneID": zoneID]), "records")
            XCTAssertEqual(Set(changes.compactMap { $0["recordName"] as? String }), ["trip", "day1", "day2", "share-1"], "\(changes)")

            // A stranger's shared database has no such zone, whatever the endpoint.
            let (lookupStatus, lookupAnswer) = try await Self.send(client, fixture.path("records/lookup", "shared", as: fixture.dave), [
                "zoneID": zoneID, "records": [["recordName": "trip"]],
            ])
            XCTAssertEqual(lookupStatus, 404)
            XCTAssertEqual(lookupAnswer["serverErrorCode"] as? String, "ZONE_NOT_FOUND")
            let zoneLookup = Self.list(try await Self.ok(client, fixture.path("zones/lookup", "shared", as: fixture.dave), ["zones": [zoneID]]), "zones")
            XCTAssertEqual(zoneLookup.first?["serverErrorCode"] as? String, "ZONE_NOT_FOUND")
            let strangerChanges = Self.list(try await Self.ok(client, fixture.path("changes/zone", "shared", as: fixture.dave), [
                "zones": [["zoneID": zoneID]],
            ]), "zones")
            XCTAssertEqual(strangerChanges.first?["serverErrorCode"] as? String, "ZONE_NOT_FOUND", "\(strangerChanges)")
            try await Self.expectSharedZones(client, fixture, fixture.dave, 0)

            // The owner removes bob: his next request finds nothing; carol keeps her access.
            let saved = try await Self.ok(client, fixture.path("records/modify", as: fixture.alice), [
                "zoneID": ["zoneName": "Trip"],
                "operations": [["operationType": "forceUpdate", "record": [
                    "recordName": "share-1", "participants": [["userIdentity": ["lookupInfo": ["emailAddress": "carol@example.com"]], "permission": "READ_WRITE"]],
                ]]],
            ])
            let after = Self.list(Self.list(saved, "records").first ?? [:], "participants")
            XCTAssertEqual(after.map { $0["acceptanceStatus"] as? String }, ["ACCEPTED", "ACCEPTED", "REMOVED"], "\(saved)")
            let (removedStatus, removedAnswer) = try await Self.send(client, fixture.path("records/lookup", "shared", as: fixture.bob), [
                "zoneID": zoneID, "records": [["recordName": "trip"]],
            ])
            XCTAssertEqual(removedStatus, 404)
            XCTAssertEqual(removedAnswer["serverErrorCode"] as? String, "ZONE_NOT_FOUND")
            let lost = try await Self.ok(client, fixture.path("changes/database", "shared", as: fixture.bob), ["syncToken": quiet["syncToken"] ?? ""])
            XCTAssertEqual(Self.list(lost, "zones").map { $0["deleted"] as? Bool }, [true], "his database sync shows the zone gone: \(lost)")
            try await Self.expectSharedZones(client, fixture, fixture.bob, 0)
            let rejoin = Self.list(try await Self.ok(client, fixture.path("records/accept", "public", as: fixture.bob), ["shortGUIDs": [shortGUID]]), "results")
            XCTAssertEqual(rejoin.first?["serverErrorCode"] as? String, "ACCESS_DENIED", "a removed participant cannot accept again")
            try await Self.expectSharedZones(client, fixture, fixture.carol, 1)

            // A record moved out of the hierarchy leaves it; deleting the root deletes the share.
            _ = try await Self.ok(client, fixture.path("records/modify", as: fixture.alice), [
                "zoneID": ["zoneName": "Trip"],
                "operations": [["operationType": "forceUpdate", "record": ["recordName": "day1", "parent": NSNull()]]],
            ])
            let moved = Self.list(try await Self.ok(client, fixture.path("records/lookup", "shared", as: fixture.carol), [
                "zoneID": zoneID, "records": [["recordName": "day1"], ["recordName": "day2"], ["recordName": "trip"]],
            ]), "records")
            XCTAssertEqual(moved.map { $0["serverErrorCode"] as? String ?? "found" }, ["NOT_FOUND", "NOT_FOUND", "found"], "\(moved)")
            let deleted = try await Self.ok(client, fixture.path("records/modify", as: fixture.alice), [
                "zoneID": ["zoneName": "Trip"], "operations": [["operationType": "forceDelete", "record": ["recordName": "trip"]]],
            ])
            XCTAssertEqual(Self.list(deleted, "records").first?["deleted"] as? Bool, true, "\(deleted)")
            try await Self.expectSharedZones(client, fixture, fixture.carol, 0)
            let gone = Self.list(try await Self.ok(client, fixture.path("records/lookup", as: fixture.alice), [
                "zoneID": ["zoneName": "Trip"], "records": [["recordName": "share-1"]],
            ]), "records")
            XCTAssertEqual(gone.first?["serverErrorCode"] as? String, "NOT_FOUND", "the share went with its root")
            let resolvedGone = Self.list(try await Self.ok(client, fixture.path("records/resolve", "public", as: fixture.carol), ["shortGUIDs": [shortGUID]]), "results")
            XCTAssertEqual(resolvedGone.first?["serverErrorCode"] as? String, "NOT_FOUND")
        }
    }

    func testSharedWritesNeedReadWriteAndStayInTheHierarchy() async throws {
        try await withFixture { fixture, client in
            let share = try await Self.shareTrip(client, fixture)
            let shortGUID = try XCTUnwrap(share["shortGUID"] as? String)
            for user in [fixture.bob, fixture.carol] {
                _ = try await Self.ok(client, fixture.path("records/accept", "public", as: user), ["shortGUIDs": [shortGUID]])
            }
            let zoneID: Body = ["zoneName": "Trip", "ownerRecordName": fixture.alice]
            func write(_ user: String, _ operations: [Body]) async throws -> (Int, Body) {
                try await Self.send(client, fixture.path("records/modify", "shared", as: user), ["zoneID": zoneID, "operations": operations])
            }
            func codes(_ answer: Body) -> [String] { Self.list(answer, "records").map { $0["serverErrorCode"] as? String ?? "ok" } }

            // READ_ONLY: no writes.
            let (_, readOnly) = try await write(fixture.bob, [["operationType": "forceUpdate", "record": ["recordName": "day1", "fields": ["n": ["value": 1]]]]])
            XCTAssertEqual(codes(readOnly), ["ACCESS_DENIED"], "\(readOnly)")
            // READ_WRITE: inside the hierarchy only; what lies outside does not exist for her.
            let (_, created) = try await write(fixture.carol, [
                ["operationType": "create", "record": ["recordName": "day3", "recordType": "Day", "parent": ["recordName": "day2"]]],
            ])
            XCTAssertEqual(codes(created), ["ok"], "\(created)")
            XCTAssertEqual((Self.list(created, "records").first?["created"] as? Body)?["userRecordName"] as? String, fixture.carol)
            let stored = Self.list(try await Self.ok(client, fixture.path("records/lookup", as: fixture.alice), [
                "zoneID": ["zoneName": "Trip"], "records": [["recordName": "day3"]],
            ]), "records")
            XCTAssertEqual(stored.first?["recordName"] as? String, "day3", "the record is stored in the owner's zone")
            let (_, outside) = try await write(fixture.carol, [["operationType": "forceUpdate", "record": ["recordName": "other", "fields": ["n": ["value": 1]]]]])
            XCTAssertEqual(codes(outside), ["NOT_FOUND"], "\(outside)")
            let (_, orphan) = try await write(fixture.carol, [["operationType": "create", "record": ["recordName": "orphan", "recordType": "Day"]]])
            XCTAssertEqual(codes(orphan), ["ACCESS_DENIED"], "\(orphan)")
            let (_, escape) = try await write(fixture.carol, [["operationType": "forceUpdate", "record": ["recordName": "day1", "parent": ["recordName": "other"]]]])
            XCTAssertEqual(codes(escape), ["ACCESS_DENIED"], "\(escape)")
            // A participant changes nobody else's place, and leaves by saving the share without herself.
            let (_, raise) = try await write(fixture.bob, [["operationType": "forceUpdate", "record": [
                "recordName": "share-1", "publicPermission": "READ_WRITE"]]])
            XCTAssertEqual(codes(raise), ["ACCESS_DENIED"], "\(raise)")
            let (_, leaves) = try await write(fixture.carol, [["operationType": "forceUpdate", "record": ["recordName": "share-1", "participants": [
                Self.participant(fixture.alice, "READ_WRITE"), Self.participant(fixture.bob, "READ_ONLY"),
            ]]]])
            XCTAssertEqual(codes(leaves), ["ok"], "\(leaves)")
            XCTAssertEqual(Self.list(Self.list(leaves, "records").first ?? [:], "participants").map { $0["acceptanceStatus"] as? String },
                           ["ACCEPTED", "ACCEPTED", "REMOVED"])
            try await Self.expectSharedZones(client, fixture, fixture.carol, 0)
            // Deleting the share from the shared database is leaving it too; the owner's share stays.
            let (_, deletes) = try await write(fixture.bob, [["operationType": "forceDelete", "record": ["recordName": "share-1"]]])
            XCTAssertEqual(Self.list(deletes, "records").first?["deleted"] as? Bool, true, "\(deletes)")
            try await Self.expectSharedZones(client, fixture, fixture.bob, 0)
            let owners = Self.list(try await Self.ok(client, fixture.path("records/lookup", as: fixture.alice), [
                "zoneID": ["zoneName": "Trip"], "records": [["recordName": "share-1"]],
            ]), "records")
            XCTAssertEqual(Self.list(owners.first ?? [:], "participants").map { $0["acceptanceStatus"] as? String }, ["ACCEPTED", "REMOVED", "REMOVED"])
            let (status, gone) = try await write(fixture.carol, [["operationType": "forceUpdate", "record": ["recordName": "day1", "fields": ["n": ["value": 2]]]]])
            XCTAssertEqual(status, 404, "\(gone)")
            XCTAssertEqual(gone["serverErrorCode"] as? String, "ZONE_NOT_FOUND")
            let (strangerStatus, stranger) = try await write(fixture.dave, [["operationType": "forceUpdate", "record": ["recordName": "trip"]]])
            XCTAssertEqual(strangerStatus, 404, "\(stranger)")
            XCTAssertEqual(stranger["serverErrorCode"] as? String, "ZONE_NOT_FOUND")
        }
    }

    func testAZoneWidePublicShareIsJoinedByAnyoneSignedIn() async throws {
        try await withFixture { fixture, client in
            try await Self.createZone(client, fixture, "Album")
            let answer = try await Self.ok(client, fixture.path("records/modify", as: fixture.alice), [
                "zoneID": ["zoneName": "Album"],
                "operations": [
                    ["operationType": "create", "record": ["recordName": "a", "recordType": "Photo"]],
                    ["operationType": "create", "record": ["recordName": "b", "recordType": "Photo", "parent": ["recordName": "a"]]],
                    ["operationType": "create", "record": ["recordName": ShareRecord.zoneShareName, "recordType": "cloudkit.share", "publicPermission": "READ_ONLY"]],
                ],
            ])
            let share = Self.list(answer, "records")[2]
            let shortGUID = try XCTUnwrap(share["shortGUID"] as? String, "\(answer)")
            // A zone shared whole takes no record shares.
            let (_, refused) = try await Self.send(client, fixture.path("records/modify", as: fixture.alice), [
                "zoneID": ["zoneName": "Album"],
                "operations": [
                    ["operationType": "forceUpdate", "record": ["recordName": "a", "share": ["recordName": "share-a"]]],
                    ["operationType": "create", "record": ["recordName": "share-a", "recordType": "cloudkit.share"]],
                ],
            ])
            XCTAssertEqual(Self.list(refused, "records").last?["serverErrorCode"] as? String, "BAD_REQUEST", "\(refused)")

            let resolved = Self.list(try await Self.ok(client, fixture.path("records/resolve", "public", as: fixture.dave), ["shortGUIDs": [shortGUID]]), "results")
            XCTAssertNil(resolved.first?["serverErrorCode"], "anyone signed in resolves a public share: \(resolved)")
            XCTAssertNil(resolved.first?["participantStatus"])
            let accepted = Self.list(try await Self.ok(client, fixture.path("records/accept", "public", as: fixture.dave), ["shortGUIDs": [shortGUID]]), "results")
            XCTAssertEqual(accepted.first?["participantType"] as? String, "PUBLIC_USER", "\(accepted)")
            XCTAssertEqual(accepted.first?["participantPermission"] as? String, "READ_ONLY")
            let looked = Self.list(try await Self.ok(client, fixture.path("records/lookup", "shared", as: fixture.dave), [
                "zoneID": ["zoneName": "Album", "ownerRecordName": fixture.alice], "records": [["recordName": "a"], ["recordName": "b"]],
            ]), "records")
            XCTAssertEqual(looked.compactMap { $0["recordName"] as? String }, ["a", "b"])
            XCTAssertNil(looked.first { $0["serverErrorCode"] != nil }, "\(looked)")

            // Deleting the zone deletes its share.
            _ = try await Self.ok(client, fixture.path("zones/modify", as: fixture.alice), [
                "operations": [["operationType": "delete", "zone": ["zoneID": ["zoneName": "Album"]]]],
            ])
            try await Self.expectSharedZones(client, fixture, fixture.dave, 0)
            let gone = Self.list(try await Self.ok(client, fixture.path("records/resolve", "public", as: fixture.dave), ["shortGUIDs": [shortGUID]]), "results")
            XCTAssertEqual(gone.first?["serverErrorCode"] as? String, "NOT_FOUND")
        }
    }

    func testShareSavesAreCheckedInTheirTransaction() async throws {
        try await withFixture { fixture, client in
            try await Self.createZone(client, fixture, "Trip")
            // A new hierarchy share without its root: refused, and nothing stored.
            let (_, rootless) = try await Self.send(client, fixture.path("records/modify", as: fixture.alice), [
                "zoneID": ["zoneName": "Trip"],
                "operations": [
                    ["operationType": "create", "record": ["recordName": "note", "recordType": "Note"]],
                    ["operationType": "create", "record": ["recordName": "share-1", "recordType": "cloudkit.share",
                                                           "participants": [Self.participant(fixture.bob, "READ_ONLY")]]],
                ],
            ])
            XCTAssertEqual(Self.list(rootless, "records").map { $0["serverErrorCode"] as? String }, ["ATOMIC_ERROR", "BAD_REQUEST"], "\(rootless)")
            let nothing = Self.list(try await Self.ok(client, fixture.path("records/lookup", as: fixture.alice), [
                "zoneID": ["zoneName": "Trip"], "records": [["recordName": "note"], ["recordName": "share-1"]],
            ]), "records")
            XCTAssertEqual(nothing.map { $0["serverErrorCode"] as? String }, ["NOT_FOUND", "NOT_FOUND"])
            // Shares live in custom zones of the private database.
            let (_, defaultZone) = try await Self.send(client, fixture.path("records/modify", as: fixture.alice), [
                "operations": [["operationType": "create", "record": ["recordName": "share-2", "recordType": "cloudkit.share"]]],
            ])
            XCTAssertEqual(Self.list(defaultZone, "records").first?["serverErrorCode"] as? String, "BAD_REQUEST", "\(defaultZone)")
            // Bad participants are the client's error, naming the place.
            let (status, bad) = try await Self.send(client, fixture.path("records/modify", as: fixture.alice), [
                "zoneID": ["zoneName": "Trip"],
                "operations": [["operationType": "create", "record": [
                    "recordName": "share-3", "recordType": "cloudkit.share", "participants": [["permission": "READ_ONLY"]]]]],
            ])
            XCTAssertEqual(status, 400)
            XCTAssertEqual(bad["serverErrorCode"] as? String, "BAD_REQUEST")
            XCTAssertTrue((bad["reason"] as? String ?? "").contains("participants[0]"), "\(bad)")
            // Two records cannot root one share.
            let (_, twoRoots) = try await Self.send(client, fixture.path("records/modify", as: fixture.alice), [
                "zoneID": ["zoneName": "Trip"],
                "operations": [
                    ["operationType": "create", "record": ["recordName": "r1", "recordType": "Note", "share": ["recordName": "share-4"]]],
                    ["operationType": "create", "record": ["recordName": "r2", "recordType": "Note", "share": ["recordName": "share-4"]]],
                    ["operationType": "create", "record": ["recordName": "share-4", "recordType": "cloudkit.share"]],
                ],
            ])
            XCTAssertEqual(Self.list(twoRoots, "records")[1]["serverErrorCode"] as? String, "BAD_REQUEST", "\(twoRoots)")
            // Deleting the share record removes the share; its root stays.
            let saved = try await Self.ok(client, fixture.path("records/modify", as: fixture.alice), [
                "zoneID": ["zoneName": "Trip"],
                "operations": [
                    ["operationType": "create", "record": ["recordName": "r5", "recordType": "Note", "share": ["recordName": "share-5"]]],
                    ["operationType": "create", "record": ["recordName": "share-5", "recordType": "cloudkit.share"]],
                ],
            ])
            let shortGUID = try XCTUnwrap(Self.list(saved, "records").last?["shortGUID"] as? String, "\(saved)")
            let found = Self.list(try await Self.ok(client, fixture.path("records/resolve", "public", as: fixture.alice), ["shortGUIDs": [shortGUID]]), "results")
            XCTAssertEqual(found.first?["participantType"] as? String, "OWNER", "\(found)")
            _ = try await Self.ok(client, fixture.path("records/modify", as: fixture.alice), [
                "zoneID": ["zoneName": "Trip"], "operations": [["operationType": "forceDelete", "record": ["recordName": "share-5"]]],
            ])
            let gone = Self.list(try await Self.ok(client, fixture.path("records/resolve", "public", as: fixture.alice), ["shortGUIDs": [shortGUID]]), "results")
            XCTAssertEqual(gone.first?["serverErrorCode"] as? String, "NOT_FOUND")
            let root = Self.list(try await Self.ok(client, fixture.path("records/lookup", as: fixture.alice), [
                "zoneID": ["zoneName": "Trip"], "records": [["recordName": "r5"]],
            ]), "records")
            XCTAssertEqual(root.first?["recordName"] as? String, "r5")
        }
    }

    /// A Swift client saves a root record and a `cloudkit.share` whose `forRecord` names the root, in
    /// one atomic records/modify (the root's share field not set): the share is attached to that
    /// root, as it is to a root saved before; a forRecord naming another zone, a missing record or a
    /// record another share roots is refused, and nothing of the request is stored.
    func testAShareSavedWithForRecordIsAttachedToItsRoot() async throws {
        try await withFixture { fixture, client in
            try await Self.createZone(client, fixture, "Trip")
            try await Self.createZone(client, fixture, "Elsewhere")
            let zoneID: Body = ["zoneName": "Trip", "ownerRecordName": fixture.alice]
            let modify = fixture.path("records/modify", as: fixture.alice)
            func share(_ name: String, forRecord: Any, participants: [Body] = []) -> Body {
                ["operationType": "create", "record": [
                    "recordName": name, "recordType": "cloudkit.share", "forRecord": forRecord, "publicPermission": "NONE", "participants": participants]]
            }
            // The root and its share in one atomic request.
            let saved = try await Self.ok(client, modify, [
                "zoneID": zoneID, "atomic": true,
                "operations": [
                    ["operationType": "create", "record": ["recordName": "trip", "recordType": "Trip", "fields": ["title": ["value": "Lisbon"]]]],
                    ["operationType": "create", "record": ["recordName": "day1", "recordType": "Day", "parent": ["recordName": "trip", "zoneID": zoneID]]],
                    ["operationType": "create", "record": ["recordName": "other", "recordType": "Day"]],
                    share("share-1", forRecord: ["recordName": "trip", "zoneID": zoneID], participants: [Self.participant(fixture.bob, "READ_ONLY")]),
                ],
            ])
            let records = Self.list(saved, "records")
            XCTAssertEqual(records.count, 4, "\(saved)")
            XCTAssertNil(records.first { $0["serverErrorCode"] != nil }, "\(saved)")
            let shortGUID = try XCTUnwrap(records[3]["shortGUID"] as? String, "\(saved)")
            let resolved = Self.list(try await Self.ok(client, fixture.path("records/resolve", "public", as: fixture.bob), [
                "shortGUIDs": [["value": shortGUID, "shouldFetchRootRecord": true]],
            ]), "results")
            XCTAssertEqual(resolved.first?["rootRecordName"] as? String, "trip", "\(resolved)")
            // Accepted, it opens the root's hierarchy and nothing else.
            let accepted = Self.list(try await Self.ok(client, fixture.path("records/accept", "public", as: fixture.bob), ["shortGUIDs": [shortGUID]]), "results")
            XCTAssertEqual(accepted.first?["participantStatus"] as? String, "ACCEPTED", "\(accepted)")
            let looked = Self.list(try await Self.ok(client, fixture.path("records/lookup", "shared", as: fixture.bob), [
                "zoneID": zoneID, "records": [["recordName": "trip"], ["recordName": "day1"], ["recordName": "other"]],
            ]), "records")
            XCTAssertEqual(looked.map { $0["serverErrorCode"] as? String ?? "found" }, ["found", "found", "NOT_FOUND"], "\(looked)")

            // A root saved before: a later share names it (zoneID may be left out).
            _ = try await Self.ok(client, modify, [
                "zoneID": zoneID, "operations": [["operationType": "create", "record": ["recordName": "solo", "recordType": "Trip"]]],
            ])
            let later = Self.list(try await Self.ok(client, modify, ["zoneID": zoneID, "operations": [share("share-2", forRecord: ["recordName": "solo"])]]), "records")
            let laterGUID = try XCTUnwrap(later.first?["shortGUID"] as? String, "\(later)")
            let owner = Self.list(try await Self.ok(client, fixture.path("records/resolve", "public", as: fixture.alice), ["shortGUIDs": [laterGUID]]), "results")
            XCTAssertEqual(owner.first?["rootRecordName"] as? String, "solo", "\(owner)")

            // Refusals: each names the problem; the atomic request stores nothing.
            let refusals: [(String, [Body], String)] = [
                ("another zone", [share("share-3", forRecord: ["recordName": "trip", "zoneID": ["zoneName": "Elsewhere"]])], "zone"),
                ("a missing record", [share("share-3", forRecord: ["recordName": "nowhere"])], "does not exist"),
                ("a record shared already", [share("share-3", forRecord: ["recordName": "trip"])], "already shares"),
                ("a record named by two shares", [share("share-3", forRecord: ["recordName": "free"]), share("share-4", forRecord: ["recordName": "free"]),
                    ["operationType": "create", "record": ["recordName": "free", "recordType": "Trip"]]], "already shares"),
                ("a record pointed at another share", [
                    ["operationType": "create", "record": ["recordName": "taken", "recordType": "Trip", "share": ["recordName": "share-5"]]],
                    ["operationType": "create", "record": ["recordName": "share-5", "recordType": "cloudkit.share"]],
                    share("share-6", forRecord: ["recordName": "taken"])], "already shares"),
                ("a record that is no share", [["operationType": "create", "record": [
                    "recordName": "plain", "recordType": "Trip", "forRecord": ["recordName": "trip"]]]], "share records"),
            ]
            for (name, operations, reason) in refusals {
                let (_, answer) = try await Self.send(client, modify, ["zoneID": zoneID, "atomic": true, "operations": [
                    ["operationType": "create", "record": ["recordName": "bystander", "recordType": "Trip"]],
                ] + operations])
                let results = Self.list(answer, "records")
                let refused = results.filter { $0["serverErrorCode"] as? String == "BAD_REQUEST" }
                XCTAssertEqual(refused.count, 1, "\(name): \(answer)")
                XCTAssertTrue((refused.first?["reason"] as? String ?? "").contains(reason), "\(name): \(answer)")
                XCTAssertEqual(results.first?["serverErrorCode"] as? String, "ATOMIC_ERROR", "\(name): \(answer)")
                let stored = Self.list(try await Self.ok(client, fixture.path("records/lookup", as: fixture.alice), [
                    "zoneID": zoneID, "records": [["recordName": "bystander"], ["recordName": "share-3"], ["recordName": "free"], ["recordName": "taken"]],
                ]), "records")
                XCTAssertEqual(stored.map { $0["serverErrorCode"] as? String }, ["NOT_FOUND", "NOT_FOUND", "NOT_FOUND", "NOT_FOUND"], name)
            }
            let (malformed, malformedAnswer) = try await Self.send(client, modify, ["zoneID": zoneID, "operations": [share("share-3", forRecord: "trip")]])
            XCTAssertEqual(malformed, 400, "\(malformedAnswer)")
            XCTAssertTrue("\(malformedAnswer)".contains("forRecord"), "\(malformedAnswer)")

            // Once its share is deleted, a root may be shared again by a new share naming it.
            _ = try await Self.ok(client, modify, ["zoneID": zoneID, "operations": [["operationType": "forceDelete", "record": ["recordName": "share-2"]]]])
            let again = Self.list(try await Self.ok(client, modify, ["zoneID": zoneID, "operations": [share("share-7", forRecord: ["recordName": "solo"])]]), "records")
            XCTAssertNil(again.first?["serverErrorCode"], "\(again)")
            XCTAssertNotNil(again.first?["shortGUID"] as? String, "\(again)")
        }
    }

    func testResolveAndAcceptRefuseBadRequests() async throws {
        try await withFixture { fixture, client in
            let (anonymous, needsUser) = try await Self.send(client, fixture.path("records/resolve", "public", as: nil), ["shortGUIDs": ["abc"]])
            XCTAssertEqual(anonymous, 421)
            XCTAssertEqual(needsUser["serverErrorCode"] as? String, "AUTHENTICATION_REQUIRED")
            let (empty, emptyAnswer) = try await Self.send(client, fixture.path("records/accept", "public", as: fixture.bob), ["shortGUIDs": []])
            XCTAssertEqual(empty, 400, "\(emptyAnswer)")
            let (many, manyAnswer) = try await Self.send(client, fixture.path("records/resolve", "public", as: fixture.bob), [
                "shortGUIDs": (0...200).map { "g\($0)" },
            ])
            XCTAssertEqual(many, 400, "\(manyAnswer)")
            XCTAssertEqual(manyAnswer["serverErrorCode"] as? String, "LIMIT_EXCEEDED")
            let (long, longAnswer) = try await Self.send(client, fixture.path("records/resolve", "public", as: fixture.bob), [
                "shortGUIDs": [String(repeating: "x", count: 65)],
            ])
            XCTAssertEqual(long, 400, "\(longAnswer)")
            let (twice, _) = try await Self.send(client, fixture.path("records/resolve", "public", as: fixture.bob), ["shortGUIDs": ["a", "a"]])
            XCTAssertEqual(twice, 400)
            let (shape, _) = try await Self.send(client, fixture.path("records/resolve", "public", as: fixture.bob), ["shortGUIDs": [["value": 3]]])
            XCTAssertEqual(shape, 400)
        }
    }
}
