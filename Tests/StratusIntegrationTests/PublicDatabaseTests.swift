import Foundation
import HummingbirdTesting
import StratusCore
import StratusTesting
import XCTest

/// The public database is shared by every user of a container: a record belongs to its creator,
/// who alone changes or deletes it (CloudKit's default `_creator` rule), and no other user's
/// reference can bind it.
final class PublicDatabaseTests: XCTestCase {
    typealias Body = RecordAPITests.Body

    /// The public database has no zones of the caller's to report: after a write made its zone's
    /// row, zones/changes still answers none, a token, and nothing more coming (a client pages on
    /// while moreComing is true).
    func testZoneChangesOfThePublicDatabaseAnswerNoZoneAndNothingMoreComing() async throws {
        try await RecordAPITests.withAPI { fixture, client in
            let (created, _) = try await RecordAPITests.modify(client, fixture, zone: nil, user: "_alice", database: "public",
                [["operationType": "create", "record": RecordAPITests.note("menu", ["title": ["value": "Alice's"]])]])
            XCTAssertEqual(created, 200)
            let (status, reply) = try await RecordAPITests.post(client, fixture.path("zones/changes", database: "public", user: "_alice"), [String: Any]())
            XCTAssertEqual(status, 200, "\(reply)")
            XCTAssertEqual((reply["zones"] as? [Any])?.count, 0)
            XCTAssertEqual(reply["moreComing"] as? Bool, false)
            XCTAssertNotNil(reply["syncToken"] as? String)
        }
    }

    func testOnlyTheCreatorChangesOrDeletesAPublicRecord() async throws {
        try await RecordAPITests.withAPI { fixture, client in
            let (created, saved) = try await RecordAPITests.modify(client, fixture, zone: nil, user: "_alice", database: "public",
                [["operationType": "create", "record": RecordAPITests.note("menu", ["title": ["value": "Alice's"]])]])
            XCTAssertEqual(created, 200)
            let tag = try XCTUnwrap(saved.first?["recordChangeTag"] as? String)
            // Bob reads it, but every way of writing it is refused, with the record left as it was.
            let attempts: [Body] = [
                ["operationType": "update", "record": RecordAPITests.note("menu", ["title": ["value": "Bob's"]], tag: tag)],
                ["operationType": "forceUpdate", "record": RecordAPITests.note("menu", ["title": ["value": "Bob's"]])],
                ["operationType": "replace", "record": RecordAPITests.note("menu", ["title": ["value": "Bob's"]], tag: tag)],
                ["operationType": "forceReplace", "record": RecordAPITests.note("menu", ["title": ["value": "Bob's"]])],
                ["operationType": "delete", "record": ["recordName": "menu", "recordChangeTag": tag]],
                ["operationType": "forceDelete", "record": ["recordName": "menu"]],
            ]
            for attempt in attempts {
                let (status, results) = try await RecordAPITests.modify(client, fixture, zone: nil, user: "_bob", database: "public", [attempt])
                XCTAssertEqual(status, 200)
                XCTAssertEqual(results.first?["serverErrorCode"] as? String, "ACCESS_DENIED", "\(attempt["operationType"]!): \(results)")
                XCTAssertTrue((results.first?["reason"] as? String ?? "").contains("creator"))
            }
            let (_, read) = try await RecordAPITests.post(client, fixture.path("records/lookup", database: "public", user: "_bob"), ["records": [["recordName": "menu"]]])
            let record = try XCTUnwrap((read["records"] as? [Body])?.first)
            XCTAssertEqual((record["fields"] as? Body)?["title"] as? Body as NSDictionary?, ["value": "Alice's", "type": "STRING"] as NSDictionary)
            XCTAssertEqual(record["recordChangeTag"] as? String, tag)
            // The creator still may.
            let (_, updated) = try await RecordAPITests.modify(client, fixture, zone: nil, user: "_alice", database: "public",
                [["operationType": "update", "record": RecordAPITests.note("menu", ["title": ["value": "Alice's, new"]], tag: tag)]])
            XCTAssertNotNil(updated.first?["recordChangeTag"], "\(updated)")
            let (_, deleted) = try await RecordAPITests.modify(client, fixture, zone: nil, user: "_alice", database: "public",
                [["operationType": "forceDelete", "record": ["recordName": "menu"]]])
            XCTAssertEqual(deleted.first?["deleted"] as? Bool, true, "\(deleted)")
        }
    }

    func testAnotherUsersReferenceCannotBlockOrCascadeAPublicRecord() async throws {
        try await RecordAPITests.withAPI { fixture, client in
            _ = try await RecordAPITests.modify(client, fixture, zone: nil, user: "_alice", database: "public",
                [["operationType": "create", "record": RecordAPITests.note("post", ["title": ["value": "hello"]])]])
            // Bob may point at Alice's record, but not with an action that binds it.
            for action in ["VALIDATE", "DELETE_SELF"] {
                let (_, results) = try await RecordAPITests.modify(client, fixture, zone: nil, user: "_bob", database: "public",
                    [["operationType": "create", "record": RecordAPITests.note("pin-\(action)", ["target": ["value": ["recordName": "post", "action": action], "type": "REFERENCE"]])]])
                XCTAssertEqual(results.first?["serverErrorCode"] as? String, "ACCESS_DENIED", "\(action): \(results)")
            }
            let (_, plain) = try await RecordAPITests.modify(client, fixture, zone: nil, user: "_bob", database: "public",
                [["operationType": "create", "record": RecordAPITests.note("link", ["target": ["value": ["recordName": "post", "action": "NONE"], "type": "REFERENCE"]])]])
            XCTAssertNotNil(plain.first?["recordChangeTag"], "a plain reference is allowed: \(plain)")
            // Alice's own references keep their meaning.
            let (_, own) = try await RecordAPITests.modify(client, fixture, zone: nil, user: "_alice", database: "public",
                [["operationType": "create", "record": RecordAPITests.note("comment", ["on": ["value": ["recordName": "post", "action": "DELETE_SELF"], "type": "REFERENCE"]])]])
            XCTAssertNotNil(own.first?["recordChangeTag"], "\(own)")
            let (_, deleted) = try await RecordAPITests.modify(client, fixture, zone: nil, user: "_alice", database: "public",
                [["operationType": "forceDelete", "record": ["recordName": "post"]]])
            XCTAssertEqual(deleted.first?["deleted"] as? Bool, true, "Alice deletes her record: \(deleted)")
            let (_, read) = try await RecordAPITests.post(client, fixture.path("records/lookup", database: "public", user: "_bob"),
                                                         ["records": [["recordName": "comment"], ["recordName": "link"]]])
            let records = read["records"] as? [Body] ?? []
            XCTAssertEqual(records.first?["serverErrorCode"] as? String, "NOT_FOUND", "her DELETE_SELF comment went with it")
            XCTAssertEqual(records.last?["recordName"] as? String, "link")
            XCTAssertNil(records.last?["serverErrorCode"], "Bob's record is untouched")
        }
    }
}
