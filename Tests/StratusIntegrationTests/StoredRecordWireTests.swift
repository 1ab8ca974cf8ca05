import Foundation
import PostgresNIO
@testable import StratusAPI
import StratusCore
import StratusPostgres
import StratusTesting
import XCTest

/// Pages of records are answered by copying each record's stored text (PostgreSQL's `jsonb` output)
/// into the wire dictionary (`RecordWire.write(stored:…)`). Every copy must say what the general
/// path — reading the record and writing `RecordWire.dictionary` — says, for every field type and
/// every optional member, and the records the copy cannot serve must take the general path.
final class StoredRecordWireTests: XCTestCase {
    static let zone = ZoneID(zoneName: "Z", ownerRecordName: "_owner")
    static let links = AssetLinks(key: try! SecretKey(bytes: Array(repeating: 7, count: 32)), base: "http://h", expiresAt: 1_800_000_000_000)

    static func stamp(_ time: Int64, device: String?) -> RecordStamp {
        RecordStamp(timestamp: time, userRecordName: "_u\"ser\\", deviceID: device)
    }

    /// Records of every shape the copy serves.
    static let copied: [(String, Record)] = [
        ("every scalar type", Record(
            recordName: "r-1", recordType: "Item", fields: [
                "text": .string("tab\t, quote \", backslash \\, emoji 🌍, nul-free control \u{1}"),
                "int": .int64(9_007_199_254_740_993), "negative": .int64(-42), "double": .double(3.25), "whole": .double(3.0),
                "small": .double(1e-7), "large": .double(1.5e300), "time": .timestamp(1_700_000_000_123),
                "bytes": .bytes(Data([0, 1, 2, 250])), "ref": .reference(Reference(recordName: "other", action: .deleteSelf)),
                "place": .location(Location(latitude: 1.5, longitude: -2.25, horizontalAccuracy: 3, altitude: 10, timestamp: 1_700_000_000_000)),
            ], changeTag: "t1", created: stamp(1, device: nil), modified: stamp(2, device: "phone"), version: 3, createdVersion: 1)),
        ("lists", Record(
            recordName: "r-2", recordType: "Item", fields: [
                "texts": .list(.string, [.string("a"), .string("b\"")]), "ints": .list(.int64, [.int64(1), .int64(-2)]),
                "doubles": .list(.double, [.double(0.5), .double(2)]), "refs": .list(.reference, [.reference(Reference(recordName: "x", action: .none))]),
                "empty": .list(.string, []),
            ], changeTag: "t2", created: stamp(1, device: "d1"), modified: stamp(1, device: "d1"))),
        ("parent, share, short GUID and expiration", Record(
            recordName: "child", recordType: "Note", fields: [:], changeTag: "t3", created: stamp(5, device: nil), modified: stamp(6, device: nil),
            parent: "root", share: "share-1", shortGUID: "0aBcD", version: 9, createdVersion: 9, expirationDate: 1_900_000_000_000)),
        ("a name with escapes", Record(
            recordName: "na\"me\\é", recordType: "T_y", fields: ["f": .string("v")], changeTag: "t\"4",
            created: stamp(-5, device: nil), modified: stamp(0, device: nil))),
    ]

    /// The stored text of a record as the query index hands it out: its `EventCoding` JSON, through `jsonb`.
    static func storedText(_ record: Record, _ store: PostgresStore) async throws -> String {
        let json = String(decoding: EventCoding.encode(record), as: UTF8.self)
        return try await store.withConnection { connection in
            let rows = try await connection.query("SELECT \(json)::jsonb::text", logger: TestSupport.logger)
            for try await text in rows.decode(String.self) { return text }
            throw TestSupport.MissingServer(description: "no row")
        }
    }

    static func general(_ record: Record, desiredKeys: [String]? = nil, numbersAsStrings: Bool = false) -> JSONValue {
        RecordWire.dictionary(record, zone: zone, desiredKeys: desiredKeys, numbersAsStrings: numbersAsStrings, links: links)
    }

    static func written(_ text: String, desiredKeys: [String]? = nil, numbersAsStrings: Bool = false) throws -> JSONValue {
        var out: [UInt8] = []
        try RecordWire.write(
            stored: text, zone: zone, zoneID: zone.json.serialized(), desiredKeys: desiredKeys.map(Set.init), numbersAsStrings: numbersAsStrings,
            links: links, into: &out)
        return try JSONParser.parse(out)
    }

    func testACopiedRecordSaysWhatTheGeneralPathSays() async throws {
        try await TestSupport.withMigratedStore { store, _ in
            for (name, record) in Self.copied {
                let text = try await Self.storedText(record, store)
                var probe: [UInt8] = []
                XCTAssertTrue(RecordWire.copy(StoredRecordText(text)!, zoneID: Self.zone.json.serialized(), desiredKeys: nil, into: &probe), "\(name) is copied")
                let copy = try Self.written(text)
                XCTAssertTrue(Self.same(copy, Self.general(record)), "\(name):\n\(copy)\n\(Self.general(record))")
                for keys in [["text", "int", "texts", "missing"], [], ["f"]] {
                    XCTAssertTrue(Self.same(try Self.written(text, desiredKeys: keys), Self.general(record, desiredKeys: keys)), "\(name), desiredKeys \(keys)")
                }
            }
        }
    }

    func testRecordsTheCopyCannotServeTakeTheGeneralPath() async throws {
        try await TestSupport.withMigratedStore { store, _ in
            let receipt = "not-a-receipt"
            let withAsset = Record(
                recordName: "a", recordType: "Photo", fields: ["image": .asset(.object(["fileChecksum": .string("c"), "size": .int(3), "receipt": .string(receipt)]))],
                changeTag: "t", created: Self.stamp(1, device: nil), modified: Self.stamp(1, device: nil))
            let owner = "_owner"
            let share = Record(
                recordName: "s", recordType: "cloudkit.share", fields: [:], changeTag: "t", created: Self.stamp(1, device: nil), modified: Self.stamp(1, device: nil),
                shortGUID: "g", shareState: ShareState(owner: owner, participants: []))
            for (name, record) in [("an asset field", withAsset), ("a share", share)] {
                let text = try await Self.storedText(record, store)
                var probe: [UInt8] = []
                XCTAssertFalse(RecordWire.copy(StoredRecordText(text)!, zoneID: Self.zone.json.serialized(), desiredKeys: nil, into: &probe), name)
                XCTAssertEqual(probe, [], "\(name): a refused copy writes nothing")
                XCTAssertEqual(try Self.written(text), Self.general(record), name)
            }
            // Numbers as strings are written by the general path.
            let text = try await Self.storedText(Self.copied[0].1, store)
            XCTAssertEqual(try Self.written(text, numbersAsStrings: true), Self.general(Self.copied[0].1, numbersAsStrings: true))
            XCTAssertEqual(try Self.written(text, numbersAsStrings: true)["fields"]?["int"]?["value"], .string("9007199254740993"))
            // A string value that spells an asset's type is escaped in the stored text: still copied.
            let spelled = Record(
                recordName: "x", recordType: "T", fields: ["f": .string(#""type": "ASSETID""#)], changeTag: "t",
                created: Self.stamp(1, device: nil), modified: Self.stamp(1, device: nil))
            var probe: [UInt8] = []
            let spelledText = try await Self.storedText(spelled, store)
            XCTAssertTrue(RecordWire.copy(StoredRecordText(spelledText)!, zoneID: Self.zone.json.serialized(), desiredKeys: nil, into: &probe))
            // Text that is not a stored record is an error, not a crash.
            XCTAssertThrowsError(try Self.written("{\"recordName\": 1"))
            XCTAssertThrowsError(try Self.written("[]"))
        }
    }

    /// Equal as JSON: numbers by value (`jsonb` writes 3.0 as 3.0 or 3, 1e-7 as 0.0000001).
    static func same(_ a: JSONValue, _ b: JSONValue) -> Bool {
        switch (a, b) {
        case (.object(let x), .object(let y)):
            return x.count == y.count && x.allSatisfy { key, value in y[key].map { same(value, $0) } ?? false }
        case (.array(let x), .array(let y)):
            return x.count == y.count && zip(x, y).allSatisfy { same($0, $1) }
        case (.int(let x), .double(let y)), (.double(let y), .int(let x)):
            return Double(x) == y
        default:
            return a == b
        }
    }
}
