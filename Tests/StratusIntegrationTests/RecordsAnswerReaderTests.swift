import Foundation
@testable import StratusBench
import StratusCore
import XCTest

/// The load generator reads `records/changes` and `records/query` answers on demand
/// (`RecordsAnswer`): it must read what the server's own JSON reader reads of them, and refuse what
/// that reader refuses. No server is needed.
final class RecordsAnswerReaderTests: XCTestCase {
    static func record(_ index: Int) -> JSONValue {
        if index % 7 == 3 { return .object(["recordName": .string("gone-\(index)"), "deleted": .bool(true)]) }
        return .object([
            "recordName": .string("r\(index) \"é\"/\u{1}"), "recordType": .string("Item"), "recordChangeTag": .string("t\(index)"),
            "fields": .object([
                "title": .object(["value": .string("a \\ b\n🌍 </script>"), "type": .string("STRING")]),
                "score": .object(["value": .int(Int64(index) * -1_000_003), "type": .string("INT64")]),
                "ratio": .object(["value": .double(1.5e-300), "type": .string("DOUBLE")]),
                "tags": .object(["value": .array([.string("x"), .string("")]), "type": .string("STRING_LIST")]),
                "where": .object(["value": .object(["latitude": .double(-0.25), "longitude": .double(8)]), "type": .string("LOCATION")]),
                "empty": .object(["value": .array([]), "type": .string("INT64_LIST")]),
            ]),
            "created": .object(["timestamp": .int(1_700_000_000_000), "userRecordName": .string("_u")]),
            "pluginFields": .object([:]), "shared": .bool(false), "parent": .null,
        ])
    }

    static func answer(records: Int, token: String?, moreComing: Bool?) -> JSONValue {
        var answer: [String: JSONValue] = ["records": .array((0..<records).map(record)), "zoneID": .object(["zoneName": .string("Sync")])]
        if let token { answer["syncToken"] = .string(token) }
        if let moreComing { answer["moreComing"] = .bool(moreComing) }
        return .object(answer)
    }

    static func read(_ text: [UInt8]) throws -> RecordsAnswer {
        try text.withUnsafeBytes { bytes throws(RecordsAnswer.Invalid) in try RecordsAnswer.read(bytes) }
    }

    func testAPageReadsAsTheServersReaderReadsIt() throws {
        for (records, token, moreComing) in [(200, "tok/1+=", true), (0, "t", false), (13, nil, nil), (1, "\u{7}\"\\é", false)] as [(Int, String?, Bool?)] {
            let answer = Self.answer(records: records, token: token, moreComing: moreComing)
            let page = try Self.read(answer.serialized())
            XCTAssertEqual(page, RecordsAnswer(records: records, syncToken: token, moreComing: moreComing ?? false))
            // The server's reader over the same bytes.
            let tree = try JSONParser.parse(String(decoding: answer.serialized(), as: UTF8.self))
            guard case .array(let entries)? = tree["records"] else { return XCTFail("no records") }
            XCTAssertEqual(page.records, entries.count)
            XCTAssertEqual(page.syncToken, tree["syncToken"]?.stringValue)
        }
        // Whitespace between every token, as a pretty-printing server would write.
        let spaced = Array(" {\n \"moreComing\" : true ,\t\"records\" : [ { \"recordName\" : \"a\" , \"fields\" : { \"n\" : { \"value\" : -1.5E+3 } } } ] , \"syncToken\" : \"s\" } \r\n".utf8)
        XCTAssertEqual(try Self.read(spaced), RecordsAnswer(records: 1, syncToken: "s", moreComing: true))
    }

    func testErrorsAreReportedTheAnswersOwnFirst() throws {
        let refused = Array(#"{"uuid":"u","serverErrorCode":"BAD_REQUEST","reason":"no such zone"}"#.utf8)
        XCTAssertEqual(try Self.read(refused), RecordsAnswer(errorCode: "BAD_REQUEST", reason: "no such zone"))
        let recordError = Array(#"{"records":[{"recordName":"a"},{"recordName":"b","serverErrorCode":"NOT_FOUND"},{"serverErrorCode":"LIMIT_EXCEEDED"}],"moreComing":false}"#.utf8)
        XCTAssertEqual(try Self.read(recordError), RecordsAnswer(records: 3, errorCode: "NOT_FOUND"))
        // A records/query answer: its records and its continuation marker (skipped).
        let query = Self.answer(records: 100, token: nil, moreComing: nil)
        guard case .object(var members) = query else { return XCTFail("not an object") }
        members["continuationMarker"] = .string("bWFya2Vy")
        XCTAssertEqual(try Self.read(JSONValue.object(members).serialized()), RecordsAnswer(records: 100))
        // A member named twice counts as its last, as the server's reader reads it.
        let twice = Array(#"{"records":[{"recordName":"a","serverErrorCode":"X"},{"recordName":"b"}],"syncToken":"1","records":[{"recordName":"c"}],"syncToken":"2"}"#.utf8)
        XCTAssertEqual(try Self.read(twice), RecordsAnswer(records: 1, syncToken: "2"))
    }

    func testWhatIsNotAnAnswerIsRefused() {
        let refused = [
            "", "[]", "null", #"{"records":[]"#, #"{"records":[]} x"#, #"{"records":[{}]}"#, #"{"records":[1]}"#,
            #"{"records":[{"recordName":1}]}"#, #"{"records":[{"recordName":"a"},]}"#, #"{"records":[{"recordName":"a",}]}"#,
            #"{"syncToken":"a\qb"}"#, "{\"syncToken\":\"a\u{1}b\"}", #"{"syncToken":"\u12"}"#, #"{"syncToken":"open}"#,
            #"{"moreComing":tru}"#, #"{"moreComing":"yes"}"#, #"{"x":01x}"#, #"{"x":01}"#, #"{"x":-00.5}"#, #"{"x":[0, 007]}"#, #"{"x":-}"#, #"{"x":1.}"#, #"{"x":1e}"#, #"{"x":.5}"#,
            #"{"x":nul}"#, #"{"x":1e999}"#, #"{"x":-2.5E+400}"#, "{\"x\":1" + String(repeating: "0", count: 400) + "}", #"{"x" 1}"#, #"{x:1}"#, #"{"x":[1 2]}"#, #"{"x":{"a":1 "b":2}}"#,
            "{\"x\":" + String(repeating: "[", count: 100) + String(repeating: "]", count: 100) + "}",
        ]
        for text in refused {
            XCTAssertThrowsError(try Self.read(Array(text.utf8)), "read \(text.debugDescription)")
        }
        // Strings that are not UTF-8: a cut sequence, a stray continuation byte, an overlong form,
        // a surrogate, past U+10FFFF.
        for bad: [UInt8] in [[0xC3], [0x80], [0xC0, 0xAF], [0xED, 0xA0, 0x80], [0xF4, 0x90, 0x80, 0x80], [0xF0, 0x9F, 0x8C]] {
            XCTAssertThrowsError(try Self.read(Array(#"{"syncToken":"a"#.utf8) + bad + Array(#"b"}"#.utf8)), "read \(bad)")
        }
    }

    /// Random one-byte ASCII changes to a real answer: what the server's reader refuses, the page
    /// reader refuses too, and what the page reader reads, the server's reader reads alike.
    func testMutatedAnswersAgreeWithTheServersReader() throws {
        // With raw UTF-8 in a record and in the answer (the serializer escapes none of it either way).
        var original = Self.answer(records: 5, token: "token", moreComing: true).serialized()
        original.removeLast()
        original += Array(#","note":"é🌍 ü ж","extra":[{"recordName":"ü🌍"}]}"#.utf8)
        XCTAssertEqual(try Self.read(original), RecordsAnswer(records: 5, syncToken: "token", moreComing: true))
        var generator = SystemRandomNumberGenerator()
        let alphabet = Array("{}[]\",:0123456789.-+eEtrufalsn \\/u\tx".utf8)
        var refusedBoth = 0, readBoth = 0
        for _ in 0..<3_000 {
            var text = original
            let position = Int.random(in: 0..<text.count, using: &generator)
            switch Int.random(in: 0..<3, using: &generator) {
            case 0: text[position] = alphabet.randomElement(using: &generator)!
            case 1: text.remove(at: position)
            default: text.insert(alphabet.randomElement(using: &generator)!, at: position)
            }
            let tree = try? JSONParser.parse(String(decoding: text, as: UTF8.self))
            let page = try? Self.read(text)
            if tree == nil {
                XCTAssertNil(page, "read what the server's reader refuses: \(String(decoding: text, as: UTF8.self))")
                refusedBoth += 1
            }
            if let page, let tree {
                if case .array(let entries)? = tree["records"] { XCTAssertEqual(page.records, entries.count) } else { XCTAssertEqual(page.records, 0) }
                if page.errorCode == nil { XCTAssertEqual(page.syncToken, tree["syncToken"]?.stringValue) }
                readBoth += 1
            }
        }
        // Both outcomes occurred: the property held over both kinds of input.
        XCTAssertGreaterThan(refusedBoth, 100)
        XCTAssertGreaterThan(readBoth, 100)
    }
}
