import Foundation
import StratusCore
import XCTest

final class JSONValueSerializationTests: XCTestCase {
    /// Strings that need escaping, or must pass through untouched.
    static let strings = [
        "", "plain", "quote \" and backslash \\", "slash / stays", "new\nline\r\ttab", "\u{08}\u{0C}\u{00}\u{01}\u{1F}\u{7F}",
        "é ü 漢字", "emoji 👩‍💻🇨🇭", "line sep \u{2028} para sep \u{2029}", "\\u0041 is not unescaped", String(repeating: "x", count: 300),
    ]

    static let sample: JSONValue = .object([
        "strings": .array(strings.map(JSONValue.string)),
        "ints": .array([0, 1, -1, Int64.max, Int64.min, 9_007_199_254_740_993].map(JSONValue.int)),
        // Integral doubles read back as integers (as JSONEncoder's text does): see the test below.
        "doubles": .array([0.1, -2.5, 1e20, 1e-7, 5e-324, Double.greatestFiniteMagnitude, 3.141592653589793].map(JSONValue.double)),
        "literals": .array([.null, .bool(true), .bool(false)]),
        "nested": .object(["b": .array([.object([:]), .array([])]), "a": .object(["z": .int(1), "é": .int(2), "Z": .int(3), "": .int(4)])]),
        "quote \" and backslash \\": .string("a key that needs escaping"),
    ])

    func testSerializedTextReadsBackAsTheSameValue() throws {
        let bytes = Self.sample.serialized()
        let decoded = try JSONDecoder().decode(JSONValue.self, from: Data(bytes))
        XCTAssertEqual(decoded, Self.sample)
        // Also valid to a second reader, which must see the same strings and exact integers.
        let object = try XCTUnwrap(JSONSerialization.jsonObject(with: Data(bytes)) as? [String: Any])
        XCTAssertEqual(object["strings"] as? [String], Self.strings)
        XCTAssertEqual((object["ints"] as? [NSNumber])?.map(\.int64Value), [0, 1, -1, Int64.max, Int64.min, 9_007_199_254_740_993])
    }

    func testKeysAreSortedAsJSONEncoderSortsThemAndNothingIsAdded() throws {
        let value: JSONValue = .object(["b": .int(1), "a": .object(["z": .null, "é": .bool(true), "Z": .string("s/t")]), "": .array([.double(1.5)])])
        let fast = String(decoding: value.serialized(), as: UTF8.self)
        XCTAssertEqual(fast, #"{"":[1.5],"a":{"Z":"s/t","z":null,"é":true},"b":1}"#)
        // The same text as JSONEncoder's, but for the slash, which JSONEncoder escapes.
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        XCTAssertEqual(fast, String(decoding: try encoder.encode(value), as: UTF8.self))
    }

    func testIntegralDoublesAreWrittenAsNumbersOfTheSameValue() throws {
        let bytes = JSONValue.array([0.0, -0.0, 1.0, 42.0, -7.0].map(JSONValue.double)).serialized()
        XCTAssertEqual(String(decoding: bytes, as: UTF8.self), "[0.0,-0.0,1.0,42.0,-7.0]")
        let numbers = try XCTUnwrap(JSONSerialization.jsonObject(with: Data(bytes)) as? [NSNumber])
        XCTAssertEqual(numbers.map(\.doubleValue), [0, 0, 1, 42, -7])
    }

    func testControlCharactersAreEscapedAndNonFiniteNumbersWrittenAsNull() {
        XCTAssertEqual(String(decoding: JSONValue.string("a\u{01}\"\\\n").serialized(), as: UTF8.self), #""a\u0001\"\\\n""#)
        XCTAssertEqual(String(decoding: JSONValue.array([.double(.infinity), .double(.nan)]).serialized(), as: UTF8.self), "[null,null]")
    }
}
