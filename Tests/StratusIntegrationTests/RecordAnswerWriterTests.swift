import Foundation
@testable import StratusAPI
import StratusCore
import XCTest

/// `records/modify` and the lookups that read records write each record's dictionary straight into
/// the answer (`RecordWire.write(_:…)`). Its bytes must be `RecordWire.dictionary`'s, serialized,
/// for every field type, every optional member, a share record, assets with their download links,
/// chosen keys and numbers as strings. No server is needed.
final class RecordAnswerWriterTests: XCTestCase {
    static let zone = ZoneID(zoneName: "Z/\"1", ownerRecordName: "_owner")

    static let every: [String: FieldValue] = [
        "string": .string("a/b \"c\" é\n\u{1} 🌍 </script>"), "empty": .string(""),
        "int": .int64(Int64.min), "max": .int64(Int64.max), "zero": .int64(0),
        "double": .double(2), "fraction": .double(-0.5), "small": .double(1e-7), "large": .double(1.5e300), "negativeZero": .double(-0.0),
        "time": .timestamp(1_700_000_000_123), "before": .timestamp(-1000),
        "bytes": .bytes(Data([0, 1, 2, 250, 255])),
        "reference": .reference(Reference(recordName: "target/1", action: .deleteSelf)),
        "validated": .reference(Reference(recordName: "na\"me\\é", action: .validate)),
        "asset": .asset(.object(["fileChecksum": .string("abc/+="), "size": .int(12), "receipt": .string("6b1c1f5e-0000-4000-8000-00000000abcd"), "wrappingKey": .string("k")])),
        "location": .location(Location(latitude: 47, longitude: 8.5, horizontalAccuracy: 1, verticalAccuracy: 2.5, altitude: -3,
                                       speed: 0, course: 359.9, timestamp: 1_700_000_000_000)),
        "locationBare": .location(Location(latitude: -0.0, longitude: 1e-7)),
        "strings": .list(.string, [.string("x"), .string("/"), .string("\"")]),
        "ints": .list(.int64, [.int64(0), .int64(Int64.max), .int64(-7)]),
        "doubles": .list(.double, [.double(1), .double(1e20), .double(0.25)]),
        "timestamps": .list(.timestamp, [.timestamp(0), .timestamp(5)]),
        "bytesList": .list(.bytes, [.bytes(Data("hi".utf8)), .bytes(Data())]),
        "references": .list(.reference, [.reference(Reference(recordName: "r", action: .none)), .reference(Reference(recordName: "s", action: .validate))]),
        "assets": .list(.asset, [.asset(.object(["size": .int(1), "receipt": .string("6b1c1f5e-0000-4000-8000-00000000abce")])), .asset(.object(["size": .int(2)]))]),
        "locations": .list(.location, [.location(Location(latitude: 1, longitude: 2))]),
        "emptyList": .list(.int64, []),
        "a10": .int64(1), "a9": .int64(2), "B": .int64(3), "é": .string("key beyond ASCII"),
    ]

    static let full = Record(
        recordName: "note/1", recordType: "Note", fields: every, changeTag: "tag/\"1",
        created: RecordStamp(timestamp: 1, userRecordName: "_alice", deviceID: "dev/1"),
        modified: RecordStamp(timestamp: -2, userRecordName: "_bob\\", deviceID: nil),
        parent: "parent/1", share: "share/1", shortGUID: "guid", version: 7, createdVersion: 3, expirationDate: 1_900_000_000_000)

    static let bare = Record(
        recordName: "n", recordType: "T", fields: [:], changeTag: "c",
        created: RecordStamp(timestamp: 0, userRecordName: "u", deviceID: nil),
        modified: RecordStamp(timestamp: 0, userRecordName: "u", deviceID: nil))

    static var shareRecord: Record {
        var share = bare
        share.recordName = "share-1"
        share.recordType = "cloudkit.share"
        share.shortGUID = "0aBcD"
        share.shareState = ShareState(owner: "_alice")
        return share
    }

    static let links = AssetLinks(key: try! SecretKey(bytes: Array(repeating: 7, count: 32)), base: "http://h", expiresAt: 1_800_000_000_000)

    static func check(_ record: Record, desiredKeys: [String]?, numbersAsStrings: Bool, links: AssetLinks?, _ label: String) {
        let shareURL: (String) -> String = { "https://share.example/\($0)" }
        let expected = RecordWire.dictionary(record, zone: zone, desiredKeys: desiredKeys, numbersAsStrings: numbersAsStrings, links: links,
                                             shareURL: shareURL).serialized()
        var written = Array("[".utf8)
        RecordWire.write(record, zone: zone, zoneID: zone.json.serialized(), desiredKeys: desiredKeys, numbersAsStrings: numbersAsStrings,
                         links: links, shareURL: shareURL, into: &written)
        XCTAssertEqual(written.first, UInt8(ascii: "["), "\(label): it appends")
        XCTAssertEqual(String(decoding: written.dropFirst(), as: UTF8.self), String(decoding: expected, as: UTF8.self), label)
    }

    func testTheAnswerWriterWritesWhatTheDictionarySays() {
        // The sample's assets get download links (so the links' path is the one compared).
        let linked = String(decoding: RecordWire.dictionary(Self.full, zone: Self.zone, desiredKeys: ["asset", "assets"], numbersAsStrings: false,
                                                            links: Self.links).serialized(), as: UTF8.self)
        XCTAssertEqual(linked.components(separatedBy: "downloadURL").count, 3, linked)
        for (name, record) in [("full", Self.full), ("bare", Self.bare), ("share", Self.shareRecord)] {
            for numbersAsStrings in [false, true] {
                for links in [Self.links, nil] {
                    for desiredKeys in [nil, [], ["string", "asset", "ints", "missing"], Array(Self.every.keys)] as [[String]?] {
                        Self.check(record, desiredKeys: desiredKeys, numbersAsStrings: numbersAsStrings, links: links,
                                   "\(name), numbersAsStrings \(numbersAsStrings), links \(links != nil), keys \(desiredKeys?.count ?? -1)")
                    }
                }
            }
        }
    }

    /// Each field alone, so one type's mistake cannot hide behind another's, and the core writer
    /// against the field's encoding with and without a zone.
    func testEachFieldAloneIsWrittenAsEncoded() {
        let zoneID = Self.zone.json
        for (name, value) in Self.every {
            var record = Self.bare
            record.fields = [name: value]
            Self.check(record, desiredKeys: nil, numbersAsStrings: false, links: Self.links, name)
            Self.check(record, desiredKeys: nil, numbersAsStrings: true, links: nil, "\(name) as strings")
            guard value.type.base != .asset else { continue }
            for numbersAsStrings in [false, true] {
                for zone in [zoneID, nil] as [JSONValue?] {
                    var bytes: [UInt8] = []
                    FieldCoding.write(value, numbersAsStrings: numbersAsStrings, zoneID: zone?.serialized(), into: &bytes)
                    XCTAssertEqual(String(decoding: bytes, as: UTF8.self),
                                   String(decoding: FieldCoding.encode(value, numbersAsStrings: numbersAsStrings, zone: zone).serialized(), as: UTF8.self),
                                   "\(name), numbersAsStrings \(numbersAsStrings), zone \(zone != nil)")
                }
            }
        }
    }
}
