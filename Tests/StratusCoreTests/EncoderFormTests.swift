import Foundation
import StratusCore
import XCTest

/// The store's direct JSON writers (`EncoderFormWritable`, `JSONValue.writeEncoderForm`) against
/// `JSONEncoder` with `.sortedKeys`, byte for byte: rows and events must read, size and compare as
/// they always did.
final class EncoderFormTests: XCTestCase {
    private static func encoderBytes<T: Encodable>(_ value: T) throws -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        return String(decoding: try encoder.encode(value), as: UTF8.self)
    }

    private static func direct(_ value: some EncoderFormWritable) -> String? {
        var bytes: [UInt8] = []
        return value.writeEncoderForm(into: &bytes) ? String(decoding: bytes, as: UTF8.self) : nil
    }

    private static func encoderForm(_ value: JSONValue) -> String {
        var bytes: [UInt8] = []
        value.writeEncoderForm(into: &bytes)
        return String(decoding: bytes, as: UTF8.self)
    }

    static let strings = [
        "", "plain", "a/b//c", "quote \" and backslash \\", "new\nline\r\ttab", "\u{08}\u{0C}\u{00}\u{01}\u{1F}\u{7F}",
        "é ü 漢字", "emoji 👩‍💻🇨🇭", "line sep \u{2028}", "\\u0041", String(repeating: "x/", count: 200),
    ]

    static let doubles: [Double] = [
        0, -0.0, 1, -1, 100, 0.1, -2.5, 1e15, 1e16, 1e20, 1e-5, 1e-7, 5e-324, 123_456_789_012_345_678, 12_345.678,
        Double.greatestFiniteMagnitude, -Double.greatestFiniteMagnitude, 3.141592653589793, 9_007_199_254_740_993,
    ]

    func testJSONValuesAreWrittenAsJSONEncoderWritesThem() throws {
        let value: JSONValue = .object([
            "strings": .array(Self.strings.map(JSONValue.string)),
            "ints": .array([0, 1, 9, 10, -1, -9, -10, 1234567, Int64.max, Int64.min].map(JSONValue.int)),
            "doubles": .array(Self.doubles.map(JSONValue.double)),
            "literals": .array([.null, .bool(true), .bool(false)]),
            // Keys in byte order, not numeric or case-folded: "a10" before "a9", "B" before "a".
            "nested": .object(["a9": .int(1), "a10": .int(2), "B": .int(3), "a": .int(4), "": .int(5), "é": .int(6), "_": .int(7), "s/t": .int(8)]),
            "quote \" and / slash": .object([:]),
            "empty": .array([]),
        ])
        XCTAssertEqual(Self.encoderForm(value), try Self.encoderBytes(value))
        // Every double and string alone too (a leading or trailing member hides nothing).
        for double in Self.doubles {
            XCTAssertEqual(Self.encoderForm(.double(double)), try Self.encoderBytes(JSONValue.double(double)), "\(double)")
        }
        for string in Self.strings {
            XCTAssertEqual(Self.encoderForm(.string(string)), try Self.encoderBytes(JSONValue.string(string)), string)
        }
    }

    /// A zone sync token (signed on every sync page) with every optional member set and unset,
    /// and zone keys that need escaping; and read back directly as `JSONDecoder` reads it.
    func testZoneSyncTokensAreWrittenAndReadAsTheCoderDoes() throws {
        let optionals: [Int64?] = [nil, 0, -1, Int64.max]
        var tokens = 0
        for key in Self.strings + ["iCloud.a/development/private/_u1/Notes"] {
            for upTo in optionals {
                for below in optionals {
                    for horizon in optionals {
                        let token = ZoneSyncToken(zoneKey: key, incarnation: UUID(), version: upTo ?? 7, reverseUpTo: upTo, reverseBelow: below, horizon: horizon)
                        let written = try XCTUnwrap(Self.direct(token))
                        XCTAssertEqual(written, try Self.encoderBytes(token), key)
                        let json = try JSONParser.parse(written)
                        XCTAssertEqual(ZoneSyncToken(json: json), try JSONDecoder().decode(ZoneSyncToken.self, from: Data(written.utf8)), key)
                        tokens += 1
                    }
                }
            }
        }
        XCTAssertEqual(tokens, 12 * 4 * 4 * 4)
        // Explicit nulls read as unset, as `decodeIfPresent` reads them.
        let id = UUID()
        let nulls = try JSONParser.parse(#"{"b":null,"h":null,"i":"\#(id.uuidString)","u":null,"v":3,"z":"k"}"#)
        XCTAssertEqual(ZoneSyncToken(json: nulls), ZoneSyncToken(zoneKey: "k", incarnation: id, version: 3))
        // What `Decodable` refuses, the direct reader declines too.
        for text in [#"{"i":"\#(id.uuidString)","v":3}"#, #"{"i":"not a uuid","v":3,"z":"k"}"#, #"{"i":"\#(id.uuidString)","v":3.5,"z":"k"}"#,
                     #"{"i":"\#(id.uuidString)","v":"3","z":"k"}"#, #"{"i":"\#(id.uuidString)","v":3,"z":1}"#, #"{"h":"1","i":"\#(id.uuidString)","v":3,"z":"k"}"#,
                     #"["i"]"#] {
            XCTAssertNil(ZoneSyncToken(json: try JSONParser.parse(text)), text)
            XCTAssertNil(try? JSONDecoder().decode(ZoneSyncToken.self, from: Data(text.utf8)), text)
        }
    }

    /// A web auth token (read on every request) read directly as `JSONDecoder` reads it.
    func testWebAuthTokensAreReadAsTheCoderReadsThem() throws {
        for user in Self.strings {
            for epoch: Int64? in [nil, 0, Int64.min] {
                for session: String? in [nil, "", "s/1"] {
                    let token = WebAuthToken(userRecordName: user, container: "iCloud.a/b", expiresAt: Int64.max, credentialEpoch: epoch, sessionID: session)
                    let written = EventCoding.encode(token)
                    XCTAssertEqual(WebAuthToken(json: try JSONParser.parse(Array(written))), try JSONDecoder().decode(WebAuthToken.self, from: written), user)
                    XCTAssertEqual(WebAuthToken(json: try JSONParser.parse(Array(written))), token, user)
                }
            }
        }
        for text in [#"{"c":"a","e":1}"#, #"{"c":"a","e":1.5,"u":"x"}"#, #"{"c":"a","e":1,"u":"x","p":"1"}"#, #"{"c":"a","e":1,"u":"x","s":2}"#, "[]"] {
            XCTAssertNil(WebAuthToken(json: try JSONParser.parse(text)), text)
            XCTAssertNil(try? JSONDecoder().decode(WebAuthToken.self, from: Data(text.utf8)), text)
        }
    }

    func testManyRandomValuesAgree() throws {
        var generator = SplitMixGenerator(seed: 49)
        for round in 0..<300 {
            let value = Self.randomValue(depth: 0, &generator)
            XCTAssertEqual(Self.encoderForm(value), try Self.encoderBytes(value), "round \(round)")
        }
    }

    /// The plain form (responses) is unchanged: "1.0" keeps its fraction, "/" is not escaped.
    func testThePlainFormStaysAsItWas() {
        XCTAssertEqual(String(decoding: JSONValue.array([.double(1), .string("a/b"), .int(-10)]).serialized(), as: UTF8.self), #"[1.0,"a/b",-10]"#)
        XCTAssertEqual(Self.encoderForm(.array([.double(1), .string("a/b"), .int(-10)])), #"[1,"a\/b",-10]"#)
    }

    /// One value of every field type, lists of each, and names that sort in byte order.
    static let fields: [String: FieldValue] = [
        "string": .string("a/b \"c\" é\n"),
        "int64": .int64(Int64.min),
        "double": .double(2),
        "doubleFraction": .double(-0.5),
        "timestamp": .timestamp(1_700_000_000_123),
        "bytes": .bytes(Data([0, 1, 2, 250, 255])),
        "reference": .reference(Reference(recordName: "target/1", action: .deleteSelf)),
        "referenceNone": .reference(Reference(recordName: "t", action: .none)),
        "asset": .asset(.object(["fileChecksum": .string("abc/+="), "size": .int(12), "receipt": .string("r"), "ratio": .double(1)])),
        "location": .location(Location(latitude: 47, longitude: 8.5, horizontalAccuracy: 1, verticalAccuracy: 2.5, altitude: -3,
                                       speed: 0, course: 359.9, timestamp: 1_700_000_000_000)),
        "locationBare": .location(Location(latitude: -0.0, longitude: 1e-7)),
        "strings": .list(.string, [.string("x"), .string("/")]),
        "ints": .list(.int64, [.int64(0), .int64(Int64.max)]),
        "doubles": .list(.double, [.double(1), .double(1e20), .double(0.25)]),
        "timestamps": .list(.timestamp, [.timestamp(0)]),
        "bytesList": .list(.bytes, [.bytes(Data("hi".utf8))]),
        "references": .list(.reference, [.reference(Reference(recordName: "r", action: .validate))]),
        "assets": .list(.asset, [.asset(.object(["size": .int(1)]))]),
        "locations": .list(.location, [.location(Location(latitude: 1, longitude: 2))]),
        "emptyList": .list(.int64, []),
        "a10": .int64(1), "a9": .int64(2), "B": .int64(3),
    ]

    /// Every optional member set but the share state (which the coder writes: see below).
    static let fullRecord = Record(
        recordName: "note/1", recordType: "Note", fields: fields, changeTag: "tag/1",
        created: RecordStamp(timestamp: 1, userRecordName: "_alice", deviceID: "dev/1"),
        modified: RecordStamp(timestamp: 2, userRecordName: "_bob", deviceID: "dev"),
        parent: "parent/1", share: "share/1", shortGUID: "guid", version: 7, createdVersion: 3, expirationDate: 99)

    static let bareRecord = Record(
        recordName: "n", recordType: "T", fields: [:], changeTag: "c",
        created: RecordStamp(timestamp: 0, userRecordName: "u", deviceID: nil),
        modified: RecordStamp(timestamp: -1, userRecordName: "u", deviceID: nil))

    /// A writer that missed a member added to `Record` would pass with a sample that leaves it unset:
    /// the sample sets every optional member but the share state.
    func testTheFullSampleSetsEveryOptionalMember() {
        for child in Mirror(reflecting: Self.fullRecord).children where child.label != "shareState" {
            let mirror = Mirror(reflecting: child.value)
            if mirror.displayStyle == .optional {
                XCTAssertFalse(mirror.children.isEmpty, "the sample leaves \(child.label ?? "?") unset")
            }
        }
        for child in Mirror(reflecting: Self.fullRecord.created).children {
            let mirror = Mirror(reflecting: child.value)
            if mirror.displayStyle == .optional { XCTAssertFalse(mirror.children.isEmpty, "stamp's \(child.label ?? "?")") }
        }
    }

    func testRecordsAndFieldsAreWrittenAsJSONEncoderWritesThem() throws {
        for record in [Self.fullRecord, Self.bareRecord] {
            XCTAssertEqual(Self.direct(record), try Self.encoderBytes(record))
            XCTAssertEqual(String(decoding: EventCoding.encode(record), as: UTF8.self), try Self.encoderBytes(record))
        }
        XCTAssertEqual(Self.direct(Self.fields), try Self.encoderBytes(Self.fields))
        XCTAssertEqual(Self.direct([String: FieldValue]()), "{}")
        // A share record's state is left to the coder, whose bytes EventCoding then gives.
        var share = Self.bareRecord
        share.shareState = ShareState(owner: "_alice")
        XCTAssertNil(Self.direct(share))
        XCTAssertEqual(String(decoding: EventCoding.encode(share), as: UTF8.self), try Self.encoderBytes(share))
    }

    func testSavesAndDeletesAreWrittenAsJSONEncoderWritesThem() throws {
        let database = DatabaseID(container: "iCloud.a/b", environment: .production, scope: .private, owner: "_alice")
        let zone = ZoneID(zoneName: "Notes", ownerRecordName: "_alice")
        let incarnation = UUID(uuidString: "6B1C1F5E-0000-4000-8000-00000000ABCD")!
        var before = Self.fullRecord
        before.fields["string"] = .string("old")
        before.fields["gone"] = .list(.int64, (0..<5000).map { .int64($0) })
        let saves = [
            RecordSaved(database: database, zoneID: zone, zoneIncarnation: incarnation, record: Self.fullRecord, before: before),
            RecordSaved(database: database, zoneID: zone, zoneIncarnation: nil, record: Self.bareRecord, before: nil),
        ]
        XCTAssertFalse(saves[0].previous?.omitted.isEmpty ?? true, "the sample's previous image omits a field too")
        for save in saves {
            XCTAssertEqual(Self.direct(save), try Self.encoderBytes(save))
            XCTAssertEqual(String(decoding: NewEvent(zoneKey: ZoneKey(rawValue: "k"), zoneSequence: 1, payload: save,
                                                     causation: Causation(requestID: "r")).payload, as: UTF8.self),
                           try Self.encoderBytes(save))
        }
        // The write path's event, its fields given as the row's bytes, is the same payload.
        let fieldsJSON = EventCoding.encode(Self.fullRecord.fields)
        XCTAssertEqual(String(decoding: fieldsJSON, as: UTF8.self), try Self.encoderBytes(Self.fullRecord.fields))
        let given = NewEvent(zoneKey: ZoneKey(rawValue: "k"), zoneSequence: 1, saved: saves[0], fieldsJSON: fieldsJSON, causation: Causation(requestID: "r"))
        XCTAssertEqual(String(decoding: given.payload, as: UTF8.self), try Self.encoderBytes(saves[0]))
        XCTAssertEqual(given.type, RecordSaved.eventType)
        XCTAssertEqual(given.schemaVersion, RecordSaved.schemaVersion)
        let limits = WriteLimits()
        let event = try limits.savedEvent(Self.fullRecord, before: before, zoneKey: ZoneKey(rawValue: "k"), zoneSequence: 1, database: database,
                                          zone: zone, incarnation: incarnation, causation: Causation(requestID: "r"), fieldsJSON: fieldsJSON)
        XCTAssertEqual(event, try limits.savedEvent(Self.fullRecord, before: before, zoneKey: ZoneKey(rawValue: "k"), zoneSequence: 1,
                                                    database: database, zone: zone, incarnation: incarnation, causation: Causation(requestID: "r")))
        // Read back, it is what JSONEncoder's text reads back as (an asset's integral double reads
        // as an integer from either: the form the log always had).
        XCTAssertEqual(try JSONDecoder().decode(RecordSaved.self, from: event.payload),
                       try JSONDecoder().decode(RecordSaved.self, from: try EventCoding.encoder.encode(saves[0])))

        let deletes = [
            RecordDeleted(database: database, zoneID: zone, zoneIncarnation: incarnation, record: Self.fullRecord, cascadedFrom: "root/1"),
            RecordDeleted(database: database, zoneID: zone, zoneIncarnation: nil, record: Self.bareRecord, cascadedFrom: nil),
        ]
        for delete in deletes {
            XCTAssertEqual(Self.direct(delete), try Self.encoderBytes(delete))
        }
        var bare = deletes[1]
        bare.last = nil
        bare.createdAt = nil
        XCTAssertEqual(Self.direct(bare), try Self.encoderBytes(bare))
    }

    private static func randomValue(depth: Int, _ generator: inout SplitMixGenerator) -> JSONValue {
        switch Int.random(in: 0..<(depth > 3 ? 5 : 7), using: &generator) {
        case 0: return .null
        case 1: return .bool(Bool.random(using: &generator))
        case 2: return .int(Int64.random(in: Int64.min...Int64.max, using: &generator) >> Int64.random(in: 0...63, using: &generator))
        case 3:
            let pick = Int.random(in: 0..<3, using: &generator)
            if pick == 0 { return .double(Self.doubles.randomElement(using: &generator)!) }
            if pick == 1 { return .double(Double(Int.random(in: -1_000_000...1_000_000, using: &generator))) }
            // Any finite double, of either sign.
            let magnitude = Double(bitPattern: UInt64.random(in: 0...0x7FEF_FFFF_FFFF_FFFF, using: &generator))
            return .double(Bool.random(using: &generator) ? magnitude : -magnitude)
        case 4: return .string(Self.randomString(&generator))
        case 5: return .array((0..<Int.random(in: 0...4, using: &generator)).map { _ in randomValue(depth: depth + 1, &generator) })
        default:
            var members: [String: JSONValue] = [:]
            for _ in 0..<Int.random(in: 0...5, using: &generator) {
                members[Self.randomString(&generator)] = randomValue(depth: depth + 1, &generator)
            }
            return .object(members)
        }
    }

    private static func randomString(_ generator: inout SplitMixGenerator) -> String {
        let pieces = ["a", "B", "z", "9", "10", "/", "\"", "\\", "\n", "\u{01}", "\u{7F}", "é", "漢", "👩‍💻", "_", " "]
        return (0..<Int.random(in: 0...6, using: &generator)).map { _ in pieces.randomElement(using: &generator)! }.joined()
    }
}

extension SplitMixGenerator: RandomNumberGenerator {}
