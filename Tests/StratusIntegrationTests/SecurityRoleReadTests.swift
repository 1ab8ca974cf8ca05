import Crypto
import Foundation
import HummingbirdTesting
import StratusCore
@testable import StratusPostgres
import StratusTesting
import StratusWorkers
import XCTest

/// READ grants on the public database: a record type's grants decide who reads its records in
/// `records/lookup` (ACCESS_DENIED per record) and `records/query` (refused, or only the reader's
/// own records when READ reaches it only as `_creator`); CloudKit's default (`_world` reads) keeps
/// every record readable, without a user too where the container allows it.
final class SecurityRoleReadTests: XCTestCase {
    typealias Body = RecordAPITests.Body

    static let schema = """
        DEFINE SCHEMA
        CREATE ROLE Reviewer;
        RECORD TYPE Diary (text STRING QUERYABLE, GRANT WRITE TO "_creator", GRANT CREATE TO "_icloud", GRANT READ TO Reviewer);
        RECORD TYPE Audit (text STRING QUERYABLE, GRANT CREATE TO "_icloud", GRANT READ TO Reviewer);
        RECORD TYPE Board (text STRING QUERYABLE, GRANT WRITE TO "_creator", GRANT CREATE TO "_icloud", GRANT READ TO "_world");
        """

    static func lookup(_ client: any TestClientProtocol, _ fixture: RecordAPITests.Fixture, user: String?, _ names: [String]) async throws -> [String: Body] {
        let (status, body) = try await RecordAPITests.post(
            client, fixture.path("records/lookup", database: "public", user: user), ["records": names.map { ["recordName": $0] }])
        XCTAssertEqual(status, 200, "\(body)")
        var byName: [String: Body] = [:]
        for item in body["records"] as? [Body] ?? [] { byName[item["recordName"] as? String ?? ""] = item }
        return byName
    }

    static func query(_ client: any TestClientProtocol, _ fixture: RecordAPITests.Fixture, user: String?, type: String) async throws -> (Int, Body) {
        try await RecordAPITests.post(client, fixture.path("records/query", database: "public", user: user), ["query": ["recordType": type]])
    }

    func testCreatorOnlyReadHidesOtherUsersRecordsFromLookupAndQueryAndARoleGrantOpensThem() async throws {
        try await QueryTests.withStack(indexer: false) { fixture, client in
            let schemas = SchemaStore(store: fixture.store)
            let parsed = try SchemaLanguage.parse(Self.schema)
            let imported = try await schemas.importSchema(parsed, container: fixture.container, causation: SecurityRoleTests.causation, logger: TestSupport.logger)
            XCTAssertEqual(imported, .applied(parsed.normalized))
            for (user, name, type) in [("_alice", "d1", "Diary"), ("_alice", "a1", "Audit"), ("_alice", "b1", "Board"), ("_bob", "d2", "Diary")] {
                let written = try await SecurityRoleTests.write(client, fixture, user: user, ["operationType": "create", "record": SecurityRoleTests.post(name, type: type, "by \(user)")])
                XCTAssertNil(written["serverErrorCode"], "\(written)")
            }
            try await QueryTests.applyEventLog(fixture.store)

            // Lookup: per record, ACCESS_DENIED for what no role of the reader's may read; a missing
            // record stays NOT_FOUND; the others are read as before.
            let bob = try await Self.lookup(client, fixture, user: "_bob", ["d1", "a1", "b1", "d2", "missing"])
            for name in ["d1", "a1"] {
                XCTAssertEqual(bob[name]?["serverErrorCode"] as? String, "ACCESS_DENIED", "\(name): \(bob)")
                XCTAssertNil(bob[name]?["fields"], "nothing of the record is shown")
                XCTAssertTrue((bob[name]?["reason"] as? String ?? "").contains("READ"), "\(bob)")
            }
            XCTAssertTrue((bob["d1"]?["reason"] as? String ?? "").contains("'Diary'"), "\(bob)")
            XCTAssertEqual(bob["missing"]?["serverErrorCode"] as? String, "NOT_FOUND")
            XCTAssertNotNil(bob["b1"]?["fields"], "\(bob)")
            XCTAssertNotNil(bob["d2"]?["fields"], "the creator reads its own: \(bob)")
            // The creator reads her Diary; Audit gives its creator no READ (nor WRITE), so not even she reads it.
            let alice = try await Self.lookup(client, fixture, user: "_alice", ["d1", "a1", "b1"])
            XCTAssertNotNil(alice["d1"]?["fields"], "\(alice)")
            XCTAssertEqual(alice["a1"]?["serverErrorCode"] as? String, "ACCESS_DENIED", "\(alice)")
            // Without a user (the container allows anonymous reads) only `_world` holds.
            let anonymous = try await Self.lookup(client, fixture, user: nil, ["d1", "b1"])
            XCTAssertEqual(anonymous["d1"]?["serverErrorCode"] as? String, "ACCESS_DENIED", "\(anonymous)")
            XCTAssertNotNil(anonymous["b1"]?["fields"], "world-readable without a user: \(anonymous)")

            // Query: a type READ reaches only as `_creator` yields the reader's own records; a type no
            // role of the reader's may read is refused.
            let (diaryStatus, diaries) = try await Self.query(client, fixture, user: "_bob", type: "Diary")
            XCTAssertEqual(diaryStatus, 200, "\(diaries)")
            XCTAssertEqual(QueryTests.names(diaries), ["d2"])
            let (aliceStatus, aliceDiaries) = try await Self.query(client, fixture, user: "_alice", type: "Diary")
            XCTAssertEqual(aliceStatus, 200, "\(aliceDiaries)")
            XCTAssertEqual(QueryTests.names(aliceDiaries), ["d1"])
            for (user, type) in [("_bob", "Audit"), ("_alice", "Audit"), (nil, "Diary")] as [(String?, String)] {
                let (status, refused) = try await Self.query(client, fixture, user: user, type: type)
                XCTAssertEqual(status, 403, "\(user ?? "anonymous") \(type): \(refused)")
                XCTAssertEqual(refused["serverErrorCode"] as? String, "ACCESS_DENIED", "\(refused)")
                XCTAssertTrue((refused["reason"] as? String ?? "").contains("'\(type)'"), "\(refused)")
            }
            let (boardStatus, boards) = try await Self.query(client, fixture, user: nil, type: "Board")
            XCTAssertEqual(boardStatus, 200, "\(boards)")
            XCTAssertEqual(QueryTests.names(boards), ["b1"], "the default world read is unchanged")

            // Sync: the public database has no change tracking (as CloudKit's), so nothing of it is synced.
            let (syncStatus, sync) = try await RecordAPITests.post(
                client, fixture.path("records/changes", database: "public", user: "_bob"), ["zoneID": ["zoneName": "_defaultZone"]])
            XCTAssertEqual(syncStatus, 400, "\(sync)")
            XCTAssertNil(sync["records"])
            let (_, zones) = try await RecordAPITests.post(client, fixture.path("zones/changes", database: "public", user: "_bob"), [:])
            XCTAssertEqual((zones["zones"] as? [Body])?.count, 0, "\(zones)")

            // The custom role's READ lets Bob read every Diary and Audit record.
            let assigned = try await schemas.assignRole("Reviewer", to: "_bob", container: fixture.container, environment: .development, logger: TestSupport.logger)
            XCTAssertTrue(assigned)
            let reviewer = try await Self.lookup(client, fixture, user: "_bob", ["d1", "a1"])
            XCTAssertNotNil(reviewer["d1"]?["fields"], "\(reviewer)")
            XCTAssertNotNil(reviewer["a1"]?["fields"], "\(reviewer)")
            let (_, reviewed) = try await Self.query(client, fixture, user: "_bob", type: "Diary")
            XCTAssertEqual(Set(QueryTests.names(reviewed)), ["d1", "d2"])
            let (_, audits) = try await Self.query(client, fixture, user: "_bob", type: "Audit")
            XCTAssertEqual(QueryTests.names(audits), ["a1"])
            // READ is not WRITE: the role still may not change Alice's diary.
            let overwrite = try await SecurityRoleTests.write(client, fixture, user: "_bob", ["operationType": "forceUpdate", "record": SecurityRoleTests.post("d1", type: "Diary", "Bob's")])
            XCTAssertEqual(overwrite["serverErrorCode"] as? String, "ACCESS_DENIED", "\(overwrite)")
        }
    }

    /// One statement reads the grants of every record type a lookup returns and the reader's roles,
    /// whatever the number of records; and the private database is never filtered.
    func testALookupReadsTheGrantsOnceAndOnlyInThePublicDatabase() async throws {
        try await RecordAPITests.withAPI { fixture, client in
            let schemas = SchemaStore(store: fixture.store)
            _ = try await schemas.importSchema(try SchemaLanguage.parse(Self.schema), container: fixture.container, causation: SecurityRoleTests.causation, logger: TestSupport.logger)
            let names = (0..<200).map { "d\($0)" }
            let operations: [Body] = names.map { ["operationType": "create", "record": SecurityRoleTests.post($0, type: $0.hasSuffix("7") ? "Board" : "Diary", "x")] }
            let (status, _) = try await RecordAPITests.modify(client, fixture, zone: nil, user: "_alice", database: "public", operations)
            XCTAssertEqual(status, 200)
            let database = DatabaseID(container: fixture.container, environment: .development, scope: .public, owner: DatabaseID.publicOwner)
            let records = RecordStore(store: fixture.store)
            let read = try await records.lookup(names, zone: ZoneID(zoneName: ZoneID.defaultZoneName, ownerRecordName: database.owner),
                                                in: database, reader: "_bob", logger: TestSupport.logger)
            XCTAssertEqual(read.records.count, 20, "only the Boards")
            XCTAssertEqual(read.denied.count, 180)
            XCTAssertEqual(Set(read.denied.values), ["Diary"])
            let grants = try await fixture.store.withConnection { connection in
                try await SchemaStore.readGrants(recordTypes: ["Diary", "Board", "Unknown"], reader: "_bob", database: database, on: connection, logger: TestSupport.logger)
            }
            XCTAssertEqual(grants.scope(of: "Diary"), .own)
            XCTAssertEqual(grants.scope(of: "Board"), .all)
            XCTAssertEqual(grants.scope(of: "Unknown"), .all, "a type the schema lacks has CloudKit's defaults")
            XCTAssertEqual(grants.holder.roles, [])
            // In Bob's private database the same type is his to read whatever the grants.
            try await RecordAPITests.createZone(client, fixture, "Notes", user: "_bob")
            _ = try await RecordAPITests.modify(client, fixture, user: "_bob", [["operationType": "create", "record": SecurityRoleTests.post("p", type: "Audit", "mine")]])
            let own = try await RecordAPITests.lookup(client, fixture, user: "_bob", ["p"])
            XCTAssertNotNil(own.first?["fields"], "\(own)")
        }
    }

    /// A query subscription of the public database notifies only subscribers who may read the record
    /// (a notification carries its name and desired fields): the READ grants decide, as for lookup,
    /// for saves and deletions alike.
    func testPublicQuerySubscriptionsNotifyOnlySubscribersWhoMayReadTheRecord() async throws {
        try await SubscriptionTests.withStack(pipeline: false) { fixture, client, _ in
            let schemas = SchemaStore(store: fixture.store)
            _ = try await schemas.importSchema(try SchemaLanguage.parse(Self.schema), container: fixture.container, causation: SecurityRoleTests.causation, logger: TestSupport.logger)
            _ = try await schemas.assignRole("Reviewer", to: "_carol", container: fixture.container, environment: .development, logger: TestSupport.logger)
            for user in ["_alice", "_bob", "_carol"] {
                let (status, made) = try await SubscriptionTests.modify(client, fixture, database: "public", user: user, [
                    SubscriptionTests.create(SubscriptionTests.querySubscription("diaries", type: "Diary", zone: nil,
                                                                                 extra: ["notificationInfo": ["desiredKeys": ["text"]]])),
                    SubscriptionTests.create(SubscriptionTests.querySubscription("boards", type: "Board", zone: nil)),
                ])
                XCTAssertEqual(status, 200, "\(made)")
            }
            for (user, name, type) in [("_alice", "d1", "Diary"), ("_bob", "d2", "Diary"), ("_alice", "b1", "Board")] {
                let written = try await SecurityRoleTests.write(client, fixture, user: user, ["operationType": "create", "record": SecurityRoleTests.post(name, type: type, "secret of \(user)")])
                XCTAssertNil(written["serverErrorCode"], "\(written)")
            }
            let deleted = try await SecurityRoleTests.write(client, fixture, user: "_alice", ["operationType": "forceDelete", "record": ["recordName": "d1"]])
            XCTAssertEqual(deleted["deleted"] as? Bool, true, "\(deleted)")
            let events = try await EventLog(store: fixture.store).events(after: 0, limit: 1000, logger: TestSupport.logger)
            _ = try await Applier(projection: SubscriptionsProjection(), store: fixture.store).apply(batch: events, logger: TestSupport.logger)

            func told(_ user: String) async throws -> [String] {
                let log = try await SubscriptionTests.notifications(client, fixture, user: user)
                return SubscriptionTests.reasons(log, subscription: "diaries") + SubscriptionTests.reasons(log, subscription: "boards")
            }
            // Each creator hears of its own diaries only (its deletion too); the reviewer of all; everyone of the board.
            let (alice, bob, carol) = (try await told("_alice"), try await told("_bob"), try await told("_carol"))
            XCTAssertEqual(alice, ["d1:recordCreated", "d1:recordDeleted", "b1:recordCreated"])
            XCTAssertEqual(bob, ["d2:recordCreated", "b1:recordCreated"])
            XCTAssertEqual(carol, ["d1:recordCreated", "d2:recordCreated", "d1:recordDeleted", "b1:recordCreated"])
            let bobs = try await SubscriptionTests.notifications(client, fixture, user: "_bob")
            XCTAssertFalse("\(bobs)".contains("secret of _alice"), "\(bobs)")
        }
    }

    /// A server-to-server key reads as its own user: the creator of what it wrote, holding the roles
    /// an operator assigns it, as for writes.
    func testAServerKeyReadsWithTheRolesAssignedToItsUser() async throws {
        try await RecordAPITests.withAPI { fixture, client in
            let schemas = SchemaStore(store: fixture.store)
            _ = try await schemas.importSchema(try SchemaLanguage.parse(Self.schema), container: fixture.container, causation: SecurityRoleTests.causation, logger: TestSupport.logger)
            let privateKey = P256.Signing.PrivateKey()
            let key = try await ServerKeyStore(store: fixture.store).register(
                container: fixture.container, publicKey: try ServerPublicKey(text: privateKey.publicKey.pemRepresentation), label: "reader", logger: TestSupport.logger)
            func signed(_ operation: String, _ body: Body) async throws -> Body {
                let subpath = AuthTests.path(operation)
                let data = try AuthTests.json(body)
                let (status, answer) = try await AuthTests.send(
                    client, subpath, headers: try AuthTests.signedHeaders(keyID: key.keyID, key: privateKey, body: data, subpath: subpath), body: data)
                XCTAssertEqual(status, 200, "\(answer)")
                return answer
            }
            _ = try await SecurityRoleTests.write(client, fixture, user: "_alice", ["operationType": "create", "record": SecurityRoleTests.post("d1", type: "Diary", "Alice's")])
            let own = try await signed("records/modify", ["operations": [["operationType": "create", "record": SecurityRoleTests.post("k1", type: "Diary", "the key's")]]])
            XCTAssertNil((own["records"] as? [Body])?.first?["serverErrorCode"], "\(own)")
            func lookedUp() async throws -> [String: Body] {
                let answer = try await signed("records/lookup", ["records": [["recordName": "d1"], ["recordName": "k1"]]])
                var byName: [String: Body] = [:]
                for item in answer["records"] as? [Body] ?? [] { byName[item["recordName"] as? String ?? ""] = item }
                return byName
            }
            let unassigned = try await lookedUp()
            XCTAssertEqual(unassigned["d1"]?["serverErrorCode"] as? String, "ACCESS_DENIED", "\(unassigned)")
            XCTAssertNotNil(unassigned["k1"]?["fields"], "the key reads what it created: \(unassigned)")
            _ = try await schemas.assignRole("Reviewer", to: key.userRecordName, container: fixture.container, environment: .development, logger: TestSupport.logger)
            let assigned = try await lookedUp()
            XCTAssertNotNil(assigned["d1"]?["fields"], "\(assigned)")
        }
    }
}
