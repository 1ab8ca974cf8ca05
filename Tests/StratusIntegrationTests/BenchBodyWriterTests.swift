import Foundation
@testable import StratusBench
import StratusCore
import XCTest

/// The load generator writes its request bodies with the server's JSON writer
/// (`CloudKitClient.bytes(of:)`): the same JSON as JSONSerialization's, each kind of value as what
/// it is (a flag is not a number, an integer not a double), and a body it does not know left to
/// JSONSerialization.
final class BenchBodyWriterTests: XCTestCase {
    func testABodyIsTheJSONJSONSerializationWrites() throws {
        let bodies: [JSONObject] = [
            [:],
            ["zoneID": ["zoneName": "Bench\"Zone\\/é\u{1}"], "operations": [
                ["operationType": "create", "record": ["recordName": "n-1", "recordType": "Note", "fields": [
                    "title": ["value": "Note n-1"], "count": ["value": 42], "price": ["value": 12.5, "type": "DOUBLE"],
                    "big": ["value": Int64(1) << 60],
                    "tags": ["value": ["a", "b"]], "empty": ["value": [Any]()],
                ] as JSONObject] as JSONObject],
            ]],
            ["atomic": true, "resultsLimit": 100, "desiredKeys": NSNull(), "zoneWide": false, "nested": [[1, 2], [true, false], [NSNull()]]],
        ]
        for body in bodies {
            let written = try CloudKitClient.bytes(of: body)
            let expected = try JSONSerialization.data(withJSONObject: body)
            XCTAssertEqual(try JSONParser.parse(written), try JSONParser.parse(Array(expected)), String(decoding: written, as: UTF8.self))
        }
    }

    /// A whole double stays a double (JSONSerialization writes 3.0 as 3), and a `JSONValue` in a
    /// body is written as it is.
    func testEachKindStaysWhatItIs() throws {
        let written = try CloudKitClient.bytes(of: [
            "flag": true, "number": 1, "double": 1.5, "whole": 3.0, "text": "1", "none": NSNull(), "value": JSONValue.object(["already": .int(1)]),
        ])
        XCTAssertEqual(try JSONParser.parse(written), .object([
            "flag": .bool(true), "number": .int(1), "double": .double(1.5), "whole": .double(3), "text": .string("1"), "none": .null,
            "value": .object(["already": .int(1)]),
        ]))
    }

    func testABodyTheWriterDoesNotKnowIsLeftToJSONSerialization() throws {
        XCTAssertNil(CloudKitClient.jsonValue(["float": Float(1.5)] as JSONObject))
        let written = try CloudKitClient.bytes(of: ["float": Float(1.5), "text": "t"])
        XCTAssertEqual(try JSONParser.parse(written), .object(["float": .double(1.5), "text": .string("t")]))
    }
}
