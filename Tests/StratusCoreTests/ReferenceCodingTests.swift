import Foundation
import StratusCore
import XCTest

/// A reference's zone: stored without it (always its record's zone), answered with it in Apple's
/// form (`{recordName, zoneID, action}`), read the same whether a client sends it or not.
final class ReferenceCodingTests: XCTestCase {
    static let zoneID: JSONValue = .object(["zoneName": .string("z"), "ownerRecordName": .string("_alice"), "zoneType": .string("REGULAR_CUSTOM_ZONE")])
    static let reference = FieldValue.reference(Reference(recordName: "t", action: .none))
    static let list = FieldValue.list(.reference, [.reference(Reference(recordName: "a", action: .deleteSelf)), .reference(Reference(recordName: "b", action: .validate))])

    func testTheAnswerNamesTheZoneAndTheStoredFormDoesNot() {
        XCTAssertEqual(FieldCoding.encode(Self.reference, zone: Self.zoneID), .object([
            "type": .string("REFERENCE"),
            "value": .object(["recordName": .string("t"), "action": .string("NONE"), "zoneID": Self.zoneID]),
        ]))
        guard case .array(let elements)? = FieldCoding.encode(Self.list, zone: Self.zoneID)["value"] else { return XCTFail("a list") }
        XCTAssertEqual(elements.map { $0["zoneID"] }, [Self.zoneID, Self.zoneID])
        XCTAssertEqual(elements.map { $0["action"]?.stringValue }, ["DELETE_SELF", "VALIDATE"])
        // Stored (and in events): as before, no zone.
        XCTAssertEqual(FieldCoding.encode(Self.reference), .object([
            "type": .string("REFERENCE"), "value": .object(["recordName": .string("t"), "action": .string("NONE")]),
        ]))
        guard case .array(let stored)? = FieldCoding.encode(Self.list)["value"] else { return XCTFail("a list") }
        XCTAssertEqual(stored.compactMap { $0["zoneID"] }, [])
        // Other types are not touched by a zone.
        XCTAssertEqual(FieldCoding.encode(.string("x"), zone: Self.zoneID), FieldCoding.encode(.string("x")))
        XCTAssertEqual(FieldCoding.encode(.location(Location(latitude: 1, longitude: 2)), zone: Self.zoneID), FieldCoding.encode(.location(Location(latitude: 1, longitude: 2))))
    }

    func testAReferenceReadsTheSameWithOrWithoutItsZone() throws {
        let answered = FieldCoding.encode(Self.reference, zone: Self.zoneID)
        XCTAssertEqual(try FieldCoding.decode(field: "f", answered), Self.reference)
        XCTAssertEqual(try FieldCoding.decode(field: "f", FieldCoding.encode(Self.list, zone: Self.zoneID)), Self.list)
        let sent = try JSONParser.parse(#"{"value": {"recordName": "t", "zoneID": {"zoneName": "z"}, "action": "NONE"}, "type": "REFERENCE"}"#)
        XCTAssertEqual(try FieldCoding.decode(field: "f", sent), Self.reference)
        // Inferred from a dictionary with a zone, too.
        let untyped = try JSONParser.parse(#"{"value": {"recordName": "t", "zoneID": {"zoneName": "z"}}}"#)
        XCTAssertEqual(try FieldCoding.decode(field: "f", untyped), Self.reference)
    }

    /// The byte copy of stored text gives each reference the zone, exactly where `jsonb` writes a
    /// reference's value, and leaves text that only spells one (inside a string) alone.
    func testTheStoredTextCopyGivesEachReferenceItsZone() throws {
        let zoneText = Self.zoneID.serialized()
        let stored = #"{"f": {"type": "REFERENCE", "value": {"action": "NONE", "recordName": "t"}}, "l": {"type": "REFERENCE_LIST", "value": [{"action": "DELETE_SELF", "recordName": "a"}, {"action": "VALIDATE", "recordName": "b"}]}, "s": {"type": "STRING", "value": "{\"action\": \"NONE\"}"}}"#
        let bytes = Array(stored.utf8)
        var out: [UInt8] = []
        StoredReferenceZone.append(bytes, 0..<bytes.count, zoneID: zoneText, into: &out)
        let copied = try JSONParser.parse(out)
        let fields: [String: FieldValue] = ["f": Self.reference, "l": Self.list, "s": .string(#"{"action": "NONE"}"#)]
        XCTAssertEqual(copied, .object(fields.mapValues { FieldCoding.encode($0, zone: Self.zoneID) }))
        // A part of the text: only what lies in it.
        var part: [UInt8] = []
        let start = Array(stored.utf8).count - 40
        StoredReferenceZone.append(bytes, start..<bytes.count, zoneID: zoneText, into: &part)
        XCTAssertEqual(part, Array(bytes[start...]))
        var empty: [UInt8] = []
        StoredReferenceZone.append(bytes, 0..<0, zoneID: zoneText, into: &empty)
        XCTAssertEqual(empty, [])
    }
}
