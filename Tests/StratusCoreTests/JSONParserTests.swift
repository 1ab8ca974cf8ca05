import Foundation
@testable import StratusCore
import XCTest

/// `JSONParser` reads what JSON readers read and refuses what they refuse, with an offset, never a
/// trap; `EventCoding.decodeRecord` reads the same records `Codable` does.
final class JSONParserTests: XCTestCase {
    func testSerializedValuesReadBackAsTheSameValue() throws {
        XCTAssertEqual(try JSONParser.parse(JSONValueSerializationTests.sample.serialized()), JSONValueSerializationTests.sample)
        var generator = SplitMixGenerator(seed: 7)
        for _ in 0..<300 {
            let value = Self.randomValue(&generator, depth: 0)
            XCTAssertEqual(try JSONParser.parse(value.serialized()), value)
        }
    }

    func testItReadsWhatAnotherReaderReads() throws {
        let cases: [(String, JSONValue)] = [
            (" \n\t{ \"a\" : [ 1 , -0 , 2.5 , 1e3 , -1E-2 , true , false , null ] } \r\n",
             .object(["a": .array([.int(1), .int(0), .double(2.5), .double(1000), .double(-0.01), .bool(true), .bool(false), .null])])),
            (#""\"\\\/\b\f\n\r\t\u0041\u00e9\u20AC\ud83e\udded""#, .string("\"\\/\u{08}\u{0C}\n\r\tAé€🧭")),
            (#""é 漢字 👩‍💻""#, .string("é 漢字 👩‍💻")),
            ("9223372036854775807", .int(.max)),
            ("-9223372036854775808", .int(.min)),
            ("9223372036854775808", .double(9_223_372_036_854_775_808)),
            ("1.0", .double(1)),
            ("[]", .array([])),
            ("{}", .object([:])),
        ]
        for (text, expected) in cases {
            XCTAssertEqual(try JSONParser.parse(text), expected, text)
            // Foundation agrees, up to its reading integral numbers as integers.
            let foundation = try JSONDecoder().decode(JSONValue.self, from: Data(text.utf8))
            XCTAssertEqual(Self.numbersAsDoubles(foundation), Self.numbersAsDoubles(expected), text)
        }
    }

    func testWhatIsNotJSONIsRefusedWithWhereNeverATrap() {
        let bad: [[UInt8]] = [
            [], Array("   ".utf8), Array("{".utf8), Array("[1,]".utf8), Array("{\"a\":1,}".utf8), Array("{\"a\" 1}".utf8),
            Array("{a:1}".utf8), Array("[1 2]".utf8), Array("01".utf8), Array("1.".utf8), Array(".5".utf8), Array("1e".utf8),
            Array("-".utf8), Array("+1".utf8), Array("1e999".utf8), Array("tru".utf8), Array("nul".utf8), Array("truex".utf8),
            Array("\"abc".utf8), Array("\"a\u{01}b\"".utf8), Array("\"\\x\"".utf8), Array("\"\\u12\"".utf8), Array("\"\\u12G4\"".utf8),
            Array("\"\\ud83e\"".utf8), Array("\"\\ud83e\\u0041\"".utf8), Array("\"\\udded\"".utf8), [0x22, 0xFF, 0xFE, 0x22],
            [0x22, 0xC3, 0x22], Array("[1] [2]".utf8), Array("\"\\".utf8), Array("NaN".utf8), Array("Infinity".utf8),
            Array(repeating: UInt8(ascii: "["), count: JSONParser.maxDepth + 1) + Array(repeating: UInt8(ascii: "]"), count: JSONParser.maxDepth + 1),
            Array(repeating: UInt8(ascii: "["), count: 100_000),
        ]
        for bytes in bad {
            XCTAssertThrowsError(try JSONParser.parse(bytes), String(decoding: bytes.prefix(40), as: UTF8.self)) { error in
                guard let failure = error as? JSONParser.Failure else { return XCTFail("\(error)") }
                XCTAssertTrue((0...bytes.count).contains(failure.offset), "\(failure)")
            }
        }
        // A member named twice: the last one counts, as in PostgreSQL's jsonb.
        XCTAssertEqual(try JSONParser.parse(#"{"a":1,"a":2}"#), .object(["a": .int(2)]))
        let deepest = Array(repeating: UInt8(ascii: "["), count: JSONParser.maxDepth) + Array(repeating: UInt8(ascii: "]"), count: JSONParser.maxDepth)
        XCTAssertNoThrow(try JSONParser.parse(deepest))
        // A request nests at most `maxRequestDepth` deep, objects and arrays alike.
        func nested(_ depth: Int) -> [UInt8] {
            Array(repeating: Array(#"{"a":["#.utf8), count: depth / 2).flatMap { $0 } + Array("1".utf8)
                + Array(repeating: Array("]}".utf8), count: depth / 2).flatMap { $0 }
        }
        XCTAssertNoThrow(try JSONParser.parse(nested(JSONParser.maxRequestDepth), reading: .request))
        XCTAssertThrowsError(try JSONParser.parse(nested(JSONParser.maxRequestDepth + 2), reading: .request)) { error in
            XCTAssertEqual((error as? JSONParser.Failure)?.reason, "nested deeper than \(JSONParser.maxRequestDepth)")
        }
        XCTAssertNoThrow(try JSONParser.parse(nested(JSONParser.maxRequestDepth + 2)), "stored text may nest deeper")
    }

    /// Strings are scanned eight bytes at a time: a quote, an escape, a control character or a
    /// byte of a multi-byte character at any place of any word, and at the text's end, reads as a
    /// byte-by-byte reader reads it (the string's end, its escapes, its refusal with its offset).
    func testEveryStopOfAStringIsFoundWhereverItFallsInAWord() throws {
        let specials: [(bytes: [UInt8], means: String?)] = [
            ([0x5C, 0x22], "\""), ([0x5C, 0x5C], "\\"), ([0x5C, 0x6E], "\n"), ([0x5C, 0x75, 0x30, 0x30, 0x34, 0x31], "A"),
            ([0xC3, 0xA9], "é"), ([0xF0, 0x9F, 0x8C, 0x8D], "🌍"), ([0x7F], "\u{7F}"), ([0x20], " "), ([0x7E], "~"),
            ([0x01], nil), ([0x1F], nil), ([0x0A], nil), ([0xFF], nil), ([0xC3], nil), ([0x80], nil),
        ]
        for length in 0..<20 {
            for special in specials {
                for place in 0...length {
                    var body = Array(repeating: UInt8(ascii: "a"), count: length)
                    body.insert(contentsOf: special.bytes, at: place)
                    let text = [0x22] + body + [0x22]
                    if let means = special.means {
                        let expected = String(repeating: "a", count: place) + means + String(repeating: "a", count: length - place)
                        XCTAssertEqual(try JSONParser.parse(text), .string(expected), "\(text)")
                        XCTAssertEqual(try JSONParser.parse([0x5B] + text + [0x2C] + text + [0x5D]), .array([.string(expected), .string(expected)]))
                    } else {
                        XCTAssertThrowsError(try JSONParser.parse(text), "\(text)") { error in
                            let offset = (error as? JSONParser.Failure)?.offset ?? -1
                            // A control character is refused where it is, bytes that are not UTF-8 at the string's start.
                            XCTAssertEqual(offset, special.bytes[0] < 0x20 ? 1 + place : 1, "\(text): \(error)")
                        }
                    }
                    // Without its closing quote the text ends inside the string (or at the bad byte).
                    XCTAssertThrowsError(try JSONParser.parse([0x22] + body))
                }
            }
        }
    }

    /// Integers are read from their digits, up to 64 bits; past them, and with a fraction or an
    /// exponent, they are doubles.
    func testIntegersOfEveryLengthReadExactly() throws {
        var digits = ""
        for count in 1...19 {
            digits += "\(count % 10)"
            let value = Int64(digits)!
            XCTAssertEqual(try JSONParser.parse(digits), .int(value), digits)
            XCTAssertEqual(try JSONParser.parse("-" + digits), .int(-value), digits)
        }
        XCTAssertEqual(try JSONParser.parse("-0"), .int(0))
        XCTAssertEqual(try JSONParser.parse("999999999999999999"), .int(999_999_999_999_999_999))
        XCTAssertEqual(try JSONParser.parse("9999999999999999999"), .double(9_999_999_999_999_999_999))
        XCTAssertEqual(try JSONParser.parse("-9223372036854775809"), .double(-9_223_372_036_854_775_809))
        XCTAssertEqual(try JSONParser.parse("[12,-3,4.5]"), .array([.int(12), .int(-3), .double(4.5)]))
    }

    func testRecordsReadAsCodableReadsThem() throws {
        var generator = SplitMixGenerator(seed: 11)
        for index in 0..<400 {
            let record = Self.randomRecord(&generator, index: index)
            let text = String(decoding: EventCoding.encode(record), as: UTF8.self)
            let codable = try JSONDecoder().decode(Record.self, from: Data(text.utf8))
            let fast = try EventCoding.decodeRecord(text)
            XCTAssertEqual(fast, codable, text)
            XCTAssertEqual(fast, record, text)
            let fields = String(decoding: EventCoding.encode(record.fields), as: UTF8.self)
            XCTAssertEqual(try EventCoding.decodeFields(fields), record.fields)
        }
        // What PostgreSQL's jsonb gives back: spaces after separators, keys in its own order.
        let jsonb = #"{"fields": {"n": {"type": "INT64", "value": 7}, "d": {"type": "DOUBLE", "value": 1.0}}, "created": {"timestamp": 1, "userRecordName": "_u"}, "modified": {"deviceID": null, "timestamp": 2, "userRecordName": "_u"}, "version": 3, "changeTag": "t", "recordName": "r", "recordType": "T", "parent": null}"#
        let read = try EventCoding.decodeRecord(jsonb)
        XCTAssertEqual(read, try JSONDecoder().decode(Record.self, from: Data(jsonb.utf8)))
        XCTAssertEqual(read.fields["d"], .double(1))
        XCTAssertNil(read.parent)
        XCTAssertThrowsError(try EventCoding.decodeRecord(#"{"recordName": "r"}"#))
        XCTAssertThrowsError(try EventCoding.decodeRecord("not json"))
    }

    // MARK: - Generators

    static func numbersAsDoubles(_ value: JSONValue) -> JSONValue {
        switch value {
        case .int(let number): .double(Double(number))
        case .array(let values): .array(values.map(numbersAsDoubles))
        case .object(let members): .object(members.mapValues(numbersAsDoubles))
        default: value
        }
    }

    static let texts = JSONValueSerializationTests.strings + ["a\"b", "\\", "\u{0}", "tab\t", "🧭 compass", "e\u{301}"]

    static func randomValue(_ generator: inout SplitMixGenerator, depth: Int) -> JSONValue {
        switch generator.next() % (depth > 3 ? 5 : 7) {
        case 0: return .null
        case 1: return .bool(generator.next() % 2 == 0)
        case 2: return .int(Int64(bitPattern: generator.next()) >> (generator.next() % 64))
        case 3:
            let double = Double(Int64(bitPattern: generator.next()) >> 20) / Double(1 << (generator.next() % 40))
            return double == double.rounded() && abs(double) < 1e15 ? .double(double + 0.5) : .double(double)
        case 4: return .string(texts[Int(generator.next() % UInt64(texts.count))])
        case 5: return .array((0..<Int(generator.next() % 5)).map { _ in randomValue(&generator, depth: depth + 1) })
        default:
            var members: [String: JSONValue] = [:]
            for _ in 0..<Int(generator.next() % 5) { members[texts[Int(generator.next() % UInt64(texts.count))]] = randomValue(&generator, depth: depth + 1) }
            return .object(members)
        }
    }

    static func randomRecord(_ generator: inout SplitMixGenerator, index: Int) -> Record {
        // Stored text never holds NUL (the write path refuses it, and PostgreSQL's text cannot).
        let storable = texts.filter { !$0.contains("\u{0}") }
        func text() -> String { storable[Int(generator.next() % UInt64(storable.count))] }
        func number() -> Int64 { Int64(bitPattern: generator.next()) >> (generator.next() % 64) }
        func double() -> Double { Double(Int64(bitPattern: generator.next()) >> 12) / 1024 }
        var fields: [String: FieldValue] = [:]
        for field in 0..<Int(generator.next() % 9) {
            let value: FieldValue
            switch generator.next() % 10 {
            case 0: value = .string(text())
            case 1: value = .int64(number())
            case 2: value = .double(double())
            case 3: value = .timestamp(number())
            case 4: value = .bytes(Data(text().utf8))
            case 5: value = .reference(Reference(recordName: "r\(number())", action: generator.next() % 2 == 0 ? .none : .deleteSelf))
            case 6: value = .location(Location(latitude: 47.3, longitude: 8.5, horizontalAccuracy: generator.next() % 2 == 0 ? nil : 3, timestamp: number()))
            case 7: value = .list(.string, (0..<Int(generator.next() % 4)).map { _ in .string(text()) })
            case 8: value = .list(.int64, (0..<Int(generator.next() % 4)).map { _ in .int64(number()) })
            default: value = .list(.double, [.double(double()), .double(1)])
            }
            fields["f\(field)"] = value
        }
        let optional = generator.next() % 2 == 0
        return Record(
            recordName: "record-\(index)-\(text())", recordType: "Item", fields: fields, changeTag: "tag\(index)",
            created: RecordStamp(timestamp: number(), userRecordName: "_u\(index)", deviceID: optional ? nil : text()),
            modified: RecordStamp(timestamp: number(), userRecordName: text(), deviceID: optional ? text() : nil),
            parent: optional ? "parent" : nil, share: optional ? nil : "share", shortGUID: optional ? "guid" : nil,
            version: optional ? number() : nil, createdVersion: optional ? nil : number(), expirationDate: optional ? number() : nil)
    }
}

/// A small deterministic generator for the tests' random values.
struct SplitMixGenerator {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
