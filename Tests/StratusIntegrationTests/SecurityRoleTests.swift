import Crypto
import Foundation
import HummingbirdTesting
import StratusCore
@testable import StratusPostgres
import StratusTesting
import XCTest

/// The public database's security roles, checked in the write transaction: CloudKit's defaults
/// (`_world` reads, `_icloud` creates, `_creator` writes), custom roles with per-type grants, and
/// ACCESS_DENIED (the web service's code for a device's PERMISSION_FAILURE) for what no role of the
/// writer allows.
final class SecurityRoleTests: XCTestCase {
    typealias Body = RecordAPITests.Body
    static let causation = Causation(requestID: "security-role-test")

    static let schema = """
        DEFINE SCHEMA
        CREATE ROLE Moderator;
        RECORD TYPE Post (text STRING, GRANT WRITE TO "_creator", GRANT CREATE TO "_icloud", GRANT READ TO "_world", GRANT WRITE TO Moderator);
        RECORD TYPE Notice (text STRING, GRANT READ TO "_world", GRANT CREATE, WRITE TO Moderator);
        """

    static func importSchema(_ schemas: SchemaStore, _ fixture: RecordAPITests.Fixture) async throws {
        let parsed = try SchemaLanguage.parse(schema)
        let outcome = try await schemas.importSchema(parsed, container: fixture.container, causation: causation, logger: TestSupport.logger)
        XCTAssertEqual(outcome, .applied(parsed.normalized), "the schema only adds")
    }

    static func write(_ client: any TestClientProtocol, _ fixture: RecordAPITests.Fixture, user: String, _ operation: Body) async throws -> Body {
        let (status, results) = try await RecordAPITests.modify(client, fixture, zone: nil, user: user, database: "public", [operation])
        XCTAssertEqual(status, 200, "\(results)")
        return results.first ?? [:]
    }

    static func post(_ name: String, type: String = "Post", _ text: String, tag: String? = nil) -> Body {
        var record: Body = ["recordName": name, "recordType": type, "fields": ["text": ["value": text]]]
        if let tag { record["recordChangeTag"] = tag }
        return record
    }

    func testACustomRoleGrantLetsAnotherUserChangeAndDeleteWhatDefaultsKeepToTheCreator() async throws {
        try await RecordAPITests.withAPI { fixture, client in
            let schemas = SchemaStore(store: fixture.store)
            try await Self.importSchema(schemas, fixture)
            let assigned = try await schemas.assignRole("Moderator", to: "_mod", container: fixture.container, environment: .development, logger: TestSupport.logger)
            XCTAssertTrue(assigned)
            let unknownRole = try await schemas.assignRole("Nobody", to: "_mod", container: fixture.container, environment: .development, logger: TestSupport.logger)
            XCTAssertFalse(unknownRole, "only a role the schema creates is assigned")

            let created = try await Self.write(client, fixture, user: "_alice", ["operationType": "create", "record": Self.post("p1", "Alice's")])
            let tag = try XCTUnwrap(created["recordChangeTag"] as? String, "\(created)")
            // Bob holds no role that may write Alice's post: refused in the write transaction, nothing changed.
            for operation: Body in [
                ["operationType": "forceUpdate", "record": Self.post("p1", "Bob's")],
                ["operationType": "forceDelete", "record": ["recordName": "p1"]],
            ] {
                let refused = try await Self.write(client, fixture, user: "_bob", operation)
                XCTAssertEqual(refused["serverErrorCode"] as? String, "ACCESS_DENIED", "\(refused)")
                XCTAssertTrue((refused["reason"] as? String ?? "").contains("'Post'"), "\(refused)")
            }
            let unchanged = try await RecordAPITests.post(client, fixture.path("records/lookup", database: "public", user: "_bob"), ["records": [["recordName": "p1"]]])
            XCTAssertEqual((unchanged.1["records"] as? [Body])?.first?["recordChangeTag"] as? String, tag)
            // The moderator's role has WRITE on Post: it changes and deletes Alice's post.
            let moderated = try await Self.write(client, fixture, user: "_mod", ["operationType": "update", "record": Self.post("p1", "Moderated", tag: tag)])
            XCTAssertNil(moderated["serverErrorCode"], "\(moderated)")
            XCTAssertEqual(((moderated["fields"] as? Body)?["text"] as? Body)?["value"] as? String, "Moderated")
            let removed = try await Self.write(client, fixture, user: "_mod", ["operationType": "forceDelete", "record": ["recordName": "p1"]])
            XCTAssertEqual(removed["deleted"] as? Bool, true, "\(removed)")
            // Taken away, the role no longer helps.
            _ = try await schemas.assignRole("Moderator", to: "_mod", remove: true, container: fixture.container, environment: .development, logger: TestSupport.logger)
            _ = try await Self.write(client, fixture, user: "_alice", ["operationType": "create", "record": Self.post("p2", "Again")])
            let demoted = try await Self.write(client, fixture, user: "_mod", ["operationType": "forceDelete", "record": ["recordName": "p2"]])
            XCTAssertEqual(demoted["serverErrorCode"] as? String, "ACCESS_DENIED", "\(demoted)")
        }
    }

    func testCreateNeedsAGrantAndWorldReadableTypesAreReadWithoutAUser() async throws {
        try await RecordAPITests.withAPI { fixture, client in
            let schemas = SchemaStore(store: fixture.store)
            try await Self.importSchema(schemas, fixture)
            _ = try await schemas.assignRole("Moderator", to: "_mod", container: fixture.container, environment: .development, logger: TestSupport.logger)
            // Notice grants CREATE only to Moderator: a signed-in user is refused, the moderator creates.
            let refused = try await Self.write(client, fixture, user: "_alice", ["operationType": "create", "record": Self.post("n1", type: "Notice", "hi")])
            XCTAssertEqual(refused["serverErrorCode"] as? String, "ACCESS_DENIED", "\(refused)")
            XCTAssertTrue((refused["reason"] as? String ?? "").contains("CREATE"), "\(refused)")
            let created = try await Self.write(client, fixture, user: "_mod", ["operationType": "create", "record": Self.post("n1", type: "Notice", "hi")])
            XCTAssertNil(created["serverErrorCode"], "\(created)")
            // Nor may Alice write it; but everyone reads it, without a user too (the container allows it).
            let overwrite = try await Self.write(client, fixture, user: "_alice", ["operationType": "forceUpdate", "record": Self.post("n1", type: "Notice", "mine")])
            XCTAssertEqual(overwrite["serverErrorCode"] as? String, "ACCESS_DENIED", "\(overwrite)")
            let (status, read) = try await RecordAPITests.post(client, fixture.path("records/lookup", database: "public", user: nil), ["records": [["recordName": "n1"]]])
            XCTAssertEqual(status, 200)
            XCTAssertEqual(((((read["records"] as? [Body])?.first?["fields"]) as? Body)?["text"] as? Body)?["value"] as? String, "hi")
            // The grants are the public database's: in her private database Alice writes any type.
            try await RecordAPITests.createZone(client, fixture, "Notes")
            let (_, own) = try await RecordAPITests.modify(client, fixture, [["operationType": "create", "record": Self.post("n2", type: "Notice", "private")]])
            XCTAssertNil(own.first?["serverErrorCode"], "\(own)")
            // A type the schema lacks has CloudKit's defaults: any signed-in user creates, only the creator writes.
            let fresh = try await Self.write(client, fixture, user: "_alice", ["operationType": "create", "record": Self.post("f1", type: "Fresh", "x")])
            XCTAssertNil(fresh["serverErrorCode"], "\(fresh)")
            let other = try await Self.write(client, fixture, user: "_bob", ["operationType": "forceDelete", "record": ["recordName": "f1"]])
            XCTAssertEqual(other["serverErrorCode"] as? String, "ACCESS_DENIED", "\(other)")
        }
    }

    /// A server-to-server key acts as its own user: signed in, and holding what the operator assigns it.
    func testAServerKeyActsWithTheRolesAnOperatorAssignsItsUser() async throws {
        try await RecordAPITests.withAPI { fixture, client in
            let schemas = SchemaStore(store: fixture.store)
            try await Self.importSchema(schemas, fixture)
            let privateKey = P256.Signing.PrivateKey()
            let key = try await ServerKeyStore(store: fixture.store).register(
                container: fixture.container, publicKey: try ServerPublicKey(text: privateKey.publicKey.pemRepresentation), label: "moderation", logger: TestSupport.logger)
            func signed(_ operation: Body) async throws -> Body {
                let subpath = AuthTests.path("records/modify")
                let body = try AuthTests.json(["operations": [operation]])
                let (status, answer) = try await AuthTests.send(
                    client, subpath, headers: try AuthTests.signedHeaders(keyID: key.keyID, key: privateKey, body: body, subpath: subpath), body: body)
                XCTAssertEqual(status, 200, "\(answer)")
                return (answer["records"] as? [Body])?.first ?? answer
            }
            _ = try await Self.write(client, fixture, user: "_alice", ["operationType": "create", "record": Self.post("p1", "Alice's")])
            let notice: Body = ["operationType": "create", "record": Self.post("n1", type: "Notice", "from the server")]
            let unassigned = try await signed(notice)
            XCTAssertEqual(unassigned["serverErrorCode"] as? String, "ACCESS_DENIED", "a key holds no custom role of its own: \(unassigned)")
            let notMine = try await signed(["operationType": "forceDelete", "record": ["recordName": "p1"]])
            XCTAssertEqual(notMine["serverErrorCode"] as? String, "ACCESS_DENIED", "\(notMine)")
            let post = try await signed(["operationType": "create", "record": Self.post("p2", "the key's own")])
            XCTAssertNil(post["serverErrorCode"], "a key creates what _icloud may: \(post)")

            let assigned = try await schemas.assignRole("Moderator", to: key.userRecordName, container: fixture.container, environment: .development, logger: TestSupport.logger)
            XCTAssertTrue(assigned)
            let created = try await signed(notice)
            XCTAssertNil(created["serverErrorCode"], "\(created)")
            let moderated = try await signed(["operationType": "forceDelete", "record": ["recordName": "p1"]])
            XCTAssertEqual(moderated["deleted"] as? Bool, true, "\(moderated)")
        }
    }
}
