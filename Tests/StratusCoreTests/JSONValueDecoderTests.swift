import Foundation
@testable import StratusCore
import XCTest

/// `JSONValueDecoder` (every request body's reader) answers what `JSONDecoder` answers for the same
/// text: the same values, and the same errors (kind, place, type), which the API turns into its
/// BAD_REQUEST reasons.
final class JSONValueDecoderTests: XCTestCase {
    struct Zone: Decodable, Equatable {
        var zoneName: String
        var ownerRecordName: String?
    }

    enum Kind: String, Decodable, Equatable { case create, update }

    /// The shapes of the API's requests: required and optional members, nested objects and lists,
    /// JSON values kept as sent (present, null or absent), numbers, flags, raw-value enums.
    struct Request: Decodable, Equatable {
        struct Operation: Decodable, Equatable {
            var operationType: Kind
            var record: [String: JSONValue]
            var desiredKeys: [String]?
        }
        var operations: [Operation]
        var zoneID: Zone?
        var atomic: Bool?
        var resultsLimit: Int?
        var score: Double?
        var query: JSONValue?
        var parent: JSONValue??
        var tags: [[String]]?
        var counts: [String: Int]?
        var small: UInt8?

        enum CodingKeys: String, CodingKey { case operations, zoneID, atomic, resultsLimit, score, query, parent, tags, counts, small }

        init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: CodingKeys.self)
            operations = try container.decode([Operation].self, forKey: .operations)
            zoneID = try container.decodeIfPresent(Zone.self, forKey: .zoneID)
            atomic = try container.decodeIfPresent(Bool.self, forKey: .atomic)
            resultsLimit = try container.decodeIfPresent(Int.self, forKey: .resultsLimit)
            score = try container.decodeIfPresent(Double.self, forKey: .score)
            query = try container.decodeIfPresent(JSONValue.self, forKey: .query)
            parent = container.contains(.parent) ? .some(try container.decode(JSONValue.self, forKey: .parent)) : nil
            tags = try container.decodeIfPresent([[String]].self, forKey: .tags)
            counts = try container.decodeIfPresent([String: Int].self, forKey: .counts)
            small = try container.decodeIfPresent(UInt8.self, forKey: .small)
        }
    }

    /// An error as the API's reason is made of it: its kind, its place and the type it names.
    static func describe(_ error: any Error) -> String {
        guard let error = error as? DecodingError else { return "not a DecodingError: \(error)" }
        func path(_ keys: [any CodingKey]) -> String { keys.map { $0.intValue.map { "[\($0)]" } ?? ".\($0.stringValue)" }.joined() }
        switch error {
        case .keyNotFound(let key, let context): return "keyNotFound \(key.stringValue) at \(path(context.codingPath))"
        case .typeMismatch(let type, let context): return "typeMismatch \(type) at \(path(context.codingPath))"
        case .valueNotFound(let type, let context): return "valueNotFound \(type) at \(path(context.codingPath))"
        case .dataCorrupted(let context): return "dataCorrupted at \(path(context.codingPath))"
        @unknown default: return "unknown"
        }
    }

    func assertSame<T: Decodable & Equatable>(_ type: T.Type, _ text: String, file: StaticString = #filePath, line: UInt = #line) {
        let expected = Result { try JSONDecoder().decode(T.self, from: Data(text.utf8)) }
        let actual = Result { try JSONValueDecoder.decode(T.self, from: Data(text.utf8)) }
        switch (expected, actual) {
        case (.success(let expected), .success(let actual)):
            XCTAssertEqual(actual, expected, text, file: file, line: line)
        case (.failure(let expected), .failure(let actual)):
            XCTAssertEqual(Self.describe(actual), Self.describe(expected), text, file: file, line: line)
        default:
            XCTFail("\(text): JSONDecoder \(expected), JSONValueDecoder \(actual)", file: file, line: line)
        }
    }

    func testRequestsDecodeAsJSONDecoderDecodesThem() {
        let operation = #"{"operationType":"create","record":{"recordName":"a","fields":{"n":{"value":1.0},"l":{"value":[1,2.5,1e2,-0.0,"x",null,true]}}}}"#
        let texts = [
            #"{"operations":[\#(operation)]}"#,
            #" {"operations":[\#(operation),\#(operation)],"zoneID":{"zoneName":"Z","ownerRecordName":null},"atomic":false} "#,
            #"{"operations":[],"resultsLimit":5,"score":1,"query":{"recordType":"T","filterBy":[{"value":1.0}]},"parent":null}"#,
            #"{"operations":[],"parent":{"recordName":"p"},"tags":[["a"],[]],"counts":{"a":1,"b":2.0},"small":255}"#,
            #"{"operations":[],"resultsLimit":1e2,"score":-1.5e-3,"query":[1,{"a":[0.5,1.0]}]}"#,
            // Repeated names: the first counts.
            #"{"operations":[],"atomic":true,"atomic":false}"#,
            // A byte order mark is passed over.
            "\u{FEFF}{\"operations\":[]}",
            // Errors: missing, mistyped and null members, at every depth.
            #"{}"#,
            #"[]"#,
            "null",
            #"{"operations":{}}"#,
            #"{"operations":null}"#,
            #"{"operations":[{"record":{}}]}"#,
            #"{"operations":[{"operationType":"remove","record":{}}]}"#,
            #"{"operations":[{"operationType":5,"record":{}}]}"#,
            #"{"operations":[{"operationType":"create","record":[]}]}"#,
            #"{"operations":[{"operationType":"create","record":{},"desiredKeys":["a",1]}]}"#,
            #"{"operations":[{"operationType":"create","record":{},"desiredKeys":["a",null]}]}"#,
            #"{"operations":[{"operationType":"create","record":{},"desiredKeys":"a"}]}"#,
            #"{"operations":[],"zoneID":{}}"#,
            #"{"operations":[],"zoneID":{"zoneName":7}}"#,
            #"{"operations":[],"zoneID":"Z"}"#,
            #"{"operations":[],"atomic":1}"#,
            #"{"operations":[],"atomic":"true"}"#,
            #"{"operations":[],"resultsLimit":"5"}"#,
            #"{"operations":[],"resultsLimit":1.5}"#,
            #"{"operations":[],"resultsLimit":1e30}"#,
            #"{"operations":[],"small":256}"#,
            #"{"operations":[],"small":-1}"#,
            #"{"operations":[],"score":"1"}"#,
            #"{"operations":[],"tags":[["a"],[1]]}"#,
            #"{"operations":[],"counts":{"a":"1"}}"#,
            // Not JSON.
            "",
            " ",
            #"{"operations":[]} x"#,
            #"{"operations":[],"score":1E400}"#,
            String(repeating: "[", count: 600) + String(repeating: "]", count: 600),
        ]
        for text in texts { assertSame(Request.self, text) }
        // A text that is no JSON is refused whole: JSONDecoder, which reads lazily, may name a
        // member it mistyped before it reaches the fault.
        for text in [#"{"operations":[1,]}"#, #"{"operations":"\ud800"}"#] {
            XCTAssertThrowsError(try JSONDecoder().decode(Request.self, from: Data(text.utf8)))
            XCTAssertThrowsError(try JSONValueDecoder.decode(Request.self, from: Data(text.utf8))) { error in
                XCTAssertEqual(Self.describe(error), "dataCorrupted at ", text)
            }
        }
        assertSame([String: JSONValue].self, #"{"a":1.0,"b":[1,2.0,3.5],"c":{"d":1e2}}"#)
        assertSame(JSONValue.self, #"[0.1e1, 4503599627370496.0, 123456789012345678901234567890, -9223372036854775808, "s", {}]"#)
    }

    func testDataAndURLMembersDecodeAsJSONDecoderDecodesThem() {
        struct Members: Decodable, Equatable {
            var data: Data?
            var url: URL?
        }
        for text in [#"{"data":"AAAA","url":"https://example.com/a b"}"#, #"{"data":"!!"}"#, #"{"url":""}"#, #"{"data":1}"#] {
            assertSame(Members.self, text)
        }
    }

    /// The hostile body's shape: a long list reaches the caller as read, an integer each.
    func testALongListIsHandedOverAsRead() throws {
        let count = 200_000
        let text = #"{"operations":[],"query":[1"# + String(repeating: ",1", count: count - 1) + "]}"
        let decoded = try JSONValueDecoder.decode(Request.self, from: Data(text.utf8))
        guard case .array(let elements)? = decoded.query else { return XCTFail("no list") }
        XCTAssertEqual(elements.count, count)
        XCTAssertTrue(elements.allSatisfy { $0 == .int(1) })
    }
}
