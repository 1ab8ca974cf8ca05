import Foundation
import StratusCore
import XCTest

/// The pure checks that keep one tenant's bad input from trapping the server or reaching SQL.
final class HostileInputCoreTests: XCTestCase {
    func json(_ text: String) throws -> JSONValue { try JSONDecoder().decode(JSONValue.self, from: Data(text.utf8)) }

    func assertRefused<T>(
        _ expression: @autoclosure () throws -> T, _ code: ServerErrorCode = .badRequest, naming place: String,
        file: StaticString = #filePath, line: UInt = #line
    ) {
        XCTAssertThrowsError(try expression(), file: file, line: line) { error in
            let error = error as? StratusError
            XCTAssertEqual(error?.code, code, "\(String(describing: error))", file: file, line: line)
            XCTAssertTrue(error?.reason.contains(place) ?? false, "the reason names \(place): \(String(describing: error))", file: file, line: line)
        }
    }

    // MARK: numeric conversions

    func testLocationTimestampsBeyond64BitsAreRefusedNotTrapped() throws {
        for timestamp in ["9223372036854775808", "1e19", "-1e19", "1.8446744073709552e19", "1e300"] {
            let value = try json(#"{"value": {"latitude": 1, "longitude": 2, "timestamp": \#(timestamp)}, "type": "LOCATION"}"#)
            assertRefused(try FieldCoding.decode(field: "place", value), naming: "place")
        }
        for timestamp in [Double.nan, .infinity, -.infinity] {
            let value = JSONValue.object(["latitude": .int(1), "longitude": .int(2), "timestamp": .double(timestamp)])
            assertRefused(try FieldCoding.decode(field: "place", value, as: FieldType(.location)), naming: "place")
        }
        // In range: an integer stays exact (even beyond 2^53), a fraction is dropped.
        let exact = try FieldCoding.decode(field: "place", try json(#"{"value": {"latitude": 1, "longitude": 2, "timestamp": 9223372036854775807}, "type": "LOCATION"}"#))
        XCTAssertEqual(exact, .location(Location(latitude: 1, longitude: 2, timestamp: .max)))
        let fraction = try FieldCoding.decode(field: "place", try json(#"{"value": {"latitude": 1, "longitude": 2, "timestamp": 1700000000000.75}}"#))
        XCTAssertEqual(fraction, .location(Location(latitude: 1, longitude: 2, timestamp: 1_700_000_000_000)))
        // The same value in a query: a NEAR filter and a sort's relativeLocation.
        let far = #"{"latitude": 1, "longitude": 2, "timestamp": 1e19}"#
        assertRefused(try RecordQuery.parse(json(#"{"recordType": "T", "filterBy": [{"comparator": "NEAR", "fieldName": "p", "fieldValue": {"value": \#(far)}, "distance": 5}]}"#)), naming: "p")
        assertRefused(try RecordQuery.parse(json(#"{"recordType": "T", "sortBy": [{"fieldName": "p", "relativeLocation": {"value": \#(far)}}]}"#)), naming: "relativeLocation")
    }

    /// A number list decodes as its elements decode one by one: the direct path for each type's
    /// common element agrees with the general one on every other form, and refuses what it refuses.
    func testNumberListsDecodeAsTheirElementsDo() throws {
        let forms: [JSONValue] = [.int(7), .int(-1), .int(.max), .double(2), .double(2.5), .double(-0.0), .double(1e300), .double(.nan), .double(.infinity),
                                  .string("12"), .string("1.5"), .string("x"), .null, .bool(true), .array([]), .object([:])]
        for base in [FieldType.Base.int64, .double, .timestamp] {
            for form in forms {
                let single = Result { () throws(StratusError) -> FieldValue in try FieldCoding.decode(field: "n", form, as: FieldType(base)) }
                let list = Result { () throws(StratusError) -> FieldValue in
                    try FieldCoding.decode(field: "n", .array([.int(1), form, .int(2)]), as: FieldType(base, isList: true))
                }
                switch (single, list) {
                case (.success(let value), .success(.list(let listBase, let elements))):
                    XCTAssertEqual(listBase, base)
                    XCTAssertEqual(elements.count, 3, "\(base) \(form)")
                    XCTAssertEqual(elements[1], value, "\(base) \(form)")
                case (.failure, .failure(let error)):
                    XCTAssertTrue(error.reason.contains("'n'"), error.reason)
                default:
                    XCTFail("\(base) \(form): alone \(single), in a list \(list)")
                }
            }
        }
    }

    func testNonFiniteDoublesAreRefused() {
        for number in [Double.nan, .infinity] {
            assertRefused(try FieldCoding.decode(field: "d", .double(number), as: FieldType(.double)), naming: "d")
            let location = JSONValue.object(["latitude": .int(1), "longitude": .int(2), "altitude": .double(number)])
            assertRefused(try FieldCoding.decode(field: "l", location, as: FieldType(.location)), naming: "l")
        }
    }

    func testSignatureDatesWithLongFractionsParseWithoutOverflow() {
        let base = ISO8601Time.seconds("2026-01-31T12:00:00Z")
        XCTAssertNotNil(base)
        for digits in [1, 18, 19, 20, 40, 400] {
            XCTAssertEqual(ISO8601Time.seconds("2026-01-31T12:00:00." + String(repeating: "9", count: digits) + "Z"), base, "\(digits) fraction digits")
        }
        XCTAssertNil(ISO8601Time.seconds("2026-01-31T12:00:00.99999999999999999999x9Z"))
        XCTAssertNil(ISO8601Time.seconds("2026-01-31T12:00:00.Z"))
        XCTAssertNil(ISO8601Time.seconds("+026-01-31T12:00:00Z"))
    }

    func testSecretKeysOfFullWidthHexDigitsAreRefusedNotTrapped() {
        // Character.isHexDigit admits full-width digits; UInt8(_:radix:) does not.
        XCTAssertThrowsError(try SecretKey(text: String(repeating: "\u{FF21}", count: 64)))
    }

    // MARK: NUL and names

    func testNULIsRefusedInEveryTextAFieldCarries() throws {
        let cases: [(String, String)] = [
            (#"{"value": "a\u0000b"}"#, "title"),
            (#"{"value": ["ok", "a\u0000b"], "type": "STRING_LIST"}"#, "title"),
            (#"{"value": {"recordName": "a\u0000b"}, "type": "REFERENCE"}"#, "title"),
            (#"{"value": [{"recordName": "a\u0000b"}], "type": "REFERENCE_LIST"}"#, "title"),
            (#"{"value": {"fileChecksum": "x", "nested": {"deep": ["a\u0000"]}}, "type": "ASSETID"}"#, "title"),
            (#"{"value": {"fileChecksum": "x", "k\u0000": 1}, "type": "ASSETID"}"#, "title"),
        ]
        for (text, place) in cases {
            assertRefused(try FieldCoding.decode(field: place, try json(text)), naming: "Field '\(place)'")
        }
        XCTAssertNoThrow(try ClientText.check("plain é text", "x"))
        assertRefused(try ClientText.check(names: ["a", "b\u{0}"], "desiredKeys", limit: 10), naming: "desiredKeys[1]")
        assertRefused(try ClientText.check(names: Array(repeating: "a", count: 11), "desiredKeys", limit: 10), .limitExceeded, naming: "desiredKeys")
        // Query values are field values: the same check applies.
        assertRefused(try RecordQuery.parse(json(#"{"recordType": "T", "filterBy": [{"comparator": "BEGINS_WITH", "fieldName": "f", "fieldValue": {"value": "a\u0000"}}]}"#)), naming: "f")
        assertRefused(try RecordQuery.parse(json(#"{"recordType": "T", "filterBy": [{"comparator": "IN", "fieldName": "f", "fieldValue": {"value": ["x", "\u0000"]}}]}"#)), naming: "f")
    }

    func testReferenceTargetsParentsAndSharesFollowTheRecordNameRules() {
        let long = String(repeating: "x", count: 2_800)
        let references: [(RecordInput, String)] = [
            (RecordInput(recordName: "r", fields: ["owner": .reference(Reference(recordName: long, action: .deleteSelf))]), "Field 'owner'"),
            (RecordInput(recordName: "r", fields: ["many": .list(.reference, [.reference(Reference(recordName: "ok", action: .none)),
                                                                              .reference(Reference(recordName: "a\u{1}b", action: .none))])]), "Field 'many'"),
            (RecordInput(recordName: "r", parent: .some(long)), "record.parent"),
            (RecordInput(recordName: "r", parent: .some("")), "record.parent"),
            (RecordInput(recordName: "r", share: .some("s\u{0}")), "record.share"),
        ]
        for (input, place) in references { assertRefused(try input.validateReferences(), naming: place) }
        let fine = RecordInput(recordName: "r", fields: ["owner": .reference(Reference(recordName: String(repeating: "é", count: 127), action: .validate))],
                               parent: .some("p"), share: .some(nil))
        XCTAssertNoThrow(try fine.validateReferences())
        assertRefused(try Record.validate(recordName: "a\u{0}", "records[3].recordName"), naming: "records[3].recordName")
    }

    // MARK: query limits

    func testQueriesAreBoundedInFiltersSortsListValuesAndTokens() throws {
        func query(filters: [String] = [], sorts: Int = 0) throws -> JSONValue {
            let sortBy = (0..<sorts).map { #"{"fieldName": "f\#($0)"}"# }
            return try json(#"{"recordType": "T", "filterBy": [\#(filters.joined(separator: ","))], "sortBy": [\#(sortBy.joined(separator: ","))]}"#)
        }
        func list(_ count: Int, _ comparator: String = "IN") -> String {
            #"{"comparator": "\#(comparator)", "fieldName": "n", "fieldValue": {"value": [\#((0..<count).map(String.init).joined(separator: ","))]}}"#
        }
        func tokens(_ text: String, _ comparator: String = "CONTAINS_ANY_TOKENS") -> String {
            #"{"comparator": "\#(comparator)", "fieldName": "___all", "fieldValue": {"value": "\#(text)"}}"#
        }
        let equals = #"{"comparator": "EQUALS", "fieldName": "n", "fieldValue": {"value": 1}}"#
        let limits = RecordQuery.Limits()
        XCTAssertEqual([limits.maxFilters, limits.maxSorts, limits.maxListValues, limits.maxSearchTokens, limits.maxSearchTextBytes], [32, 8, 1_000, 32, 1_024])
        // At the limits: accepted.
        XCTAssertNoThrow(try RecordQuery.parse(query(filters: Array(repeating: equals, count: 32), sorts: 8)))
        XCTAssertNoThrow(try RecordQuery.parse(query(filters: [list(1_000), list(1_000, "NOT_IN"), list(1_000, "LIST_CONTAINS_ANY")])))
        let thirtyTwo = (0..<32).map { "w\($0)" }.joined(separator: " ")
        XCTAssertNoThrow(try RecordQuery.parse(query(filters: [tokens(thirtyTwo), tokens(String(repeating: "a", count: 1_024), "CONTAINS_ALL_TOKENS")])))
        // Beyond them: LIMIT_EXCEEDED naming the place.
        assertRefused(try RecordQuery.parse(query(filters: Array(repeating: equals, count: 33))), .limitExceeded, naming: "query.filterBy")
        assertRefused(try RecordQuery.parse(query(sorts: 9)), .limitExceeded, naming: "query.sortBy")
        assertRefused(try RecordQuery.parse(query(sorts: 99)), .limitExceeded, naming: "query.sortBy")
        for comparator in ["IN", "NOT_IN", "LIST_CONTAINS_ANY", "NOT_LIST_CONTAINS_ANY", "LIST_CONTAINS_ALL", "NOT_LIST_CONTAINS_ALL"] {
            assertRefused(try RecordQuery.parse(query(filters: [list(1_001, comparator)])), .limitExceeded, naming: "query.filterBy[0].fieldValue")
        }
        assertRefused(try RecordQuery.parse(query(filters: [equals, tokens(thirtyTwo + " w32")])), .limitExceeded, naming: "query.filterBy[1].fieldValue")
        assertRefused(try RecordQuery.parse(query(filters: [tokens(String(repeating: "a", count: 1_025))])), .limitExceeded, naming: "1024 bytes")
        // Other limits can be configured.
        var tight = RecordQuery.Limits()
        tight.maxSorts = 1
        XCTAssertNoThrow(try RecordQuery.parse(query(sorts: 1), limits: tight))
        assertRefused(try RecordQuery.parse(query(sorts: 2), limits: tight), .limitExceeded, naming: "at most 1 sorts")
    }

    // MARK: types decide, not shapes

    func testAnAssetShapedLikeALocationNeedsItsType() throws {
        let both = #"{"fileChecksum": "abc", "latitude": "north", "longitude": "east"}"#
        assertRefused(try FieldCoding.decode(field: "photo", try json(#"{"value": \#(both)}"#)), naming: "send 'type'")
        let typed = try FieldCoding.decode(field: "photo", try json(#"{"value": \#(both), "type": "ASSETID"}"#))
        XCTAssertEqual(typed.type, FieldType(.asset))
        XCTAssertEqual(try FieldCoding.infer(field: "p", try json(#"{"latitude": 1, "longitude": 2}"#)), FieldType(.location))
        XCTAssertEqual(try FieldCoding.infer(field: "p", try json(#"{"fileChecksum": "abc"}"#)), FieldType(.asset))
    }

    // MARK: exact names

    func testExactNamesTellCanonicallyEquivalentNamesApart() {
        let composed = "\u{E9}", decomposed = "e\u{301}", kelvin = "\u{212A}"
        XCTAssertEqual(composed, decomposed, "Swift's String equality is canonical equivalence")
        XCTAssertEqual("K", kelvin)
        XCTAssertNotEqual(ExactName(composed), ExactName(decomposed))
        XCTAssertNotEqual(ExactName("K"), ExactName(kelvin))
        XCTAssertEqual(ExactName(composed), ExactName(String(decoding: Array(composed.utf8), as: UTF8.self)))
        XCTAssertEqual(Set([composed, decomposed, "K", kelvin].map(ExactName.init)).count, 4)
        var byName: [ExactName: Int] = [:]
        byName[ExactName(composed)] = 1
        byName[ExactName(decomposed)] = 2
        XCTAssertEqual(byName[ExactName(composed)], 1)
        XCTAssertEqual(byName[ExactName(decomposed)], 2)
    }
}
