import Foundation
import HummingbirdTesting
import StratusCore
import StratusTesting
import XCTest

/// A reference answers with its zone, as Apple's reference dictionary does (`recordName`,
/// `zoneID` with `zoneName` and `ownerRecordName`, `action`), on every read path — whether it was
/// saved with its zone or without (a reference always points into its record's zone) — so that a
/// client following it looks in the right zone.
final class ReferenceZoneTests: XCTestCase {
    typealias Body = [String: Any]
    typealias Fixture = RecordAPITests.Fixture
    static let zone = "Refs"

    /// The targets, then a record referring to them with and without the zone, alone and in a list.
    static func operations() -> [Body] { [
        ["operationType": "create", "record": ["recordName": "t", "recordType": "Item", "fields": ["n": ["value": 1]]]],
        ["operationType": "create", "record": ["recordName": "t2", "recordType": "Item", "fields": ["n": ["value": 2]]]],
        ["operationType": "create", "record": ["recordName": "holder", "recordType": "Item", "fields": [
            "zoned": ["value": ["recordName": "t", "zoneID": ["zoneName": zone], "action": "NONE"], "type": "REFERENCE"],
            "bare": ["value": ["recordName": "t2", "action": "VALIDATE"], "type": "REFERENCE"],
            "list": ["value": [["recordName": "t", "zoneID": ["zoneName": zone], "action": "NONE"], ["recordName": "t2", "action": "DELETE_SELF"]],
                     "type": "REFERENCE_LIST"],
        ]]],
    ] }

    /// Saves the records; the answer's records.
    static func save(_ client: any TestClientProtocol, _ fixture: Fixture) async throws -> [Body] {
        try await RecordAPITests.createZone(client, fixture, zone)
        let (status, answer) = try await RecordAPITests.post(client, fixture.path("records/modify"), ["zoneID": ["zoneName": zone], "operations": operations()])
        XCTAssertEqual(status, 200, "\(answer)")
        return answer["records"] as? [Body] ?? []
    }

    /// Each reference of `holder` as the answer writes it: recordName, action and the zone.
    static func check(_ records: [Body], _ path: String, file: StaticString = #filePath, line: UInt = #line) throws {
        let holder = try XCTUnwrap(records.first { $0["recordName"] as? String == "holder" }, "\(path): holder in \(records)", file: file, line: line)
        let fields = RecordAPITests.fields(holder)
        let list = fields["list"]?["value"] as? [Body] ?? []
        let references: [(Body?, String, String)] = [
            (fields["zoned"]?["value"] as? Body, "t", "NONE"), (fields["bare"]?["value"] as? Body, "t2", "VALIDATE"),
            (list.first, "t", "NONE"), (list.dropFirst().first, "t2", "DELETE_SELF"),
        ]
        for (reference, name, action) in references {
            let reference = try XCTUnwrap(reference, "\(path): \(fields)", file: file, line: line)
            XCTAssertEqual(reference["recordName"] as? String, name, path, file: file, line: line)
            XCTAssertEqual(reference["action"] as? String, action, path, file: file, line: line)
            let zoneID = reference["zoneID"] as? Body
            XCTAssertEqual(zoneID?["zoneName"] as? String, zone, "\(path): \(reference)", file: file, line: line)
            XCTAssertEqual(zoneID?["ownerRecordName"] as? String, "_alice", "\(path): \(reference)", file: file, line: line)
        }
    }

    /// A client follows a reference where it says: the target is found in the reference's zone.
    static func follow(_ client: any TestClientProtocol, _ fixture: Fixture, _ records: [Body]) async throws {
        let holder = try XCTUnwrap(records.first { $0["recordName"] as? String == "holder" })
        let reference = try XCTUnwrap(RecordAPITests.fields(holder)["zoned"]?["value"] as? Body)
        let (status, answer) = try await RecordAPITests.post(client, fixture.path("records/lookup"), [
            "zoneID": try XCTUnwrap(reference["zoneID"]), "records": [["recordName": try XCTUnwrap(reference["recordName"])]],
        ])
        XCTAssertEqual(status, 200, "\(answer)")
        let found = (answer["records"] as? [Body])?.first
        XCTAssertEqual(found?["recordName"] as? String, "t", "\(answer)")
        XCTAssertNil(found?["serverErrorCode"], "\(answer)")
    }

    func testTheModifyAnswerGivesAReferenceItsZone() async throws {
        try await RecordAPITests.withAPI { fixture, client in
            let saved = try await Self.save(client, fixture)
            try Self.check(saved, "records/modify")
            try await Self.follow(client, fixture, saved)
            // A client saves back what it was answered: the references with their zone id dictionaries.
            var holder = try XCTUnwrap(saved.first { $0["recordName"] as? String == "holder" })
            holder = holder.filter { ["recordName", "recordType", "recordChangeTag", "fields"].contains($0.key) }
            let (status, again) = try await RecordAPITests.post(client, fixture.path("records/modify"), [
                "zoneID": ["zoneName": Self.zone], "operations": [["operationType": "update", "record": holder]],
            ])
            XCTAssertEqual(status, 200, "\(again)")
            try Self.check(again["records"] as? [Body] ?? [], "records/modify, saved back")
        }
    }

    func testLookupGivesAReferenceItsZone() async throws {
        try await RecordAPITests.withAPI { fixture, client in
            _ = try await Self.save(client, fixture)
            for extra: Body in [[:], ["desiredKeys": ["zoned", "bare", "list"]], ["numbersAsStrings": true]] {
                let looked = try await RecordAPITests.lookup(client, fixture, zone: Self.zone, ["holder"], extra: extra)
                try Self.check(looked, "records/lookup \(extra)")
                try await Self.follow(client, fixture, looked)
            }
        }
    }

    func testChangesGiveAReferenceItsZone() async throws {
        try await RecordAPITests.withAPI { fixture, client in
            _ = try await Self.save(client, fixture)
            // The page PostgreSQL writes (forward and reverse), and the general page (desiredKeys, numbers as strings).
            for extra: Body in [[:], ["reverse": true], ["desiredKeys": ["zoned", "bare", "list"]], ["numbersAsStrings": true]] {
                var body: Body = ["zoneID": ["zoneName": Self.zone]]
                body.merge(extra) { _, new in new }
                let (status, page) = try await RecordAPITests.post(client, fixture.path("records/changes"), body)
                XCTAssertEqual(status, 200, "\(page)")
                let records = page["records"] as? [Body] ?? []
                try Self.check(records, "records/changes \(extra)")
                try await Self.follow(client, fixture, records)
            }
        }
    }

    func testQueryGivesAReferenceItsZone() async throws {
        try await QueryTests.withStack { fixture, client in
            _ = try await Self.save(client, fixture)
            let query: Body = ["recordType": "Item"]
            try await QueryTests.waitForIndex(client, fixture, query, zone: Self.zone, count: 3)
            for extra: Body in [[:], ["desiredKeys": ["zoned", "bare", "list"]], ["numbersAsStrings": true]] {
                let (status, answer) = try await QueryTests.query(client, fixture, query, zone: Self.zone, extra: extra)
                XCTAssertEqual(status, 200, "\(answer)")
                let records = answer["records"] as? [Body] ?? []
                try Self.check(records, "records/query \(extra)")
                try await Self.follow(client, fixture, records)
            }
        }
    }
}
