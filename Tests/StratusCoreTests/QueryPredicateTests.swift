import Foundation
@testable import StratusCore
import XCTest

/// `RecordQuery.matches`: the in-memory answer to "would `records/query` return this record", which
/// must agree with the SQL `QueryStore` runs against the query index.
final class QueryPredicateTests: XCTestCase {
    static func record(_ fields: [String: FieldValue], name: String = "r1", type: String = "Item", created: Int64 = 1_000, modified: Int64 = 2_000) -> Record {
        Record(recordName: name, recordType: type, fields: fields, changeTag: "t",
               created: RecordStamp(timestamp: created, userRecordName: "_u", deviceID: nil),
               modified: RecordStamp(timestamp: modified, userRecordName: "_u", deviceID: nil))
    }

    static func filter(_ field: String, _ comparator: StratusCore.Comparator, _ value: FieldValue, distance: Double? = nil) -> QueryFilter {
        QueryFilter(fieldName: field, comparator: comparator, value: value, distance: distance)
    }

    /// Every case of the table: a filter, the record's fields, and whether it matches.
    struct Case {
        var filter: QueryFilter
        var fields: [String: FieldValue]
        var expected: Bool
        var line: UInt
    }

    static func strings(_ values: String...) -> FieldValue { .list(.string, values.map(FieldValue.string)) }
    static func ints(_ values: Int64...) -> FieldValue { .list(.int64, values.map(FieldValue.int64)) }
    static func ref(_ name: String, _ action: ReferenceAction = .none) -> FieldValue { .reference(Reference(recordName: name, action: action)) }

    /// One table covering every comparator with a matching and a non-matching case.
    static let table: [Case] = {
        var cases: [Case] = []
        func add(_ field: String, _ comparator: StratusCore.Comparator, _ value: FieldValue, _ fields: [String: FieldValue], _ expected: Bool,
                 distance: Double? = nil, line: UInt = #line) {
            cases.append(Case(filter: filter(field, comparator, value, distance: distance), fields: fields, expected: expected, line: line))
        }
        let paris = Location(latitude: 48.8566, longitude: 2.3522)
        // EQUALS / NOT_EQUALS: bytes for text (case-sensitive), numeric value for numbers.
        add("s", .equals, .string("Apple"), ["s": .string("Apple")], true)
        add("s", .equals, .string("apple"), ["s": .string("Apple")], false)
        add("n", .equals, .int64(5), ["n": .double(5.0)], true)
        add("n", .equals, .double(5.0), ["n": .int64(5)], true)
        add("n", .equals, .int64(5), ["n": .string("5")], false)
        add("s", .notEquals, .string("a"), ["s": .string("b")], true)
        add("s", .notEquals, .string("a"), ["s": .string("a")], false)
        add("s", .notEquals, .string("a"), [:], false)  // NULL <> 'a' is NULL
        add("n", .notEquals, .int64(1), ["n": .string("x")], false)  // another type is NULL too
        // Ranges.
        add("n", .lessThan, .int64(3), ["n": .double(2.5)], true)
        add("n", .lessThan, .int64(3), ["n": .int64(3)], false)
        add("n", .lessThanOrEquals, .double(3.0), ["n": .int64(3)], true)
        add("n", .lessThanOrEquals, .int64(3), ["n": .timestamp(4)], false)
        add("n", .greaterThan, .timestamp(10), ["n": .int64(11)], true)
        add("n", .greaterThan, .int64(10), [:], false)
        add("n", .greaterThanOrEquals, .int64(10), ["n": .double(10)], true)
        add("n", .greaterThanOrEquals, .int64(10), ["n": .double(9.999)], false)
        add("s", .greaterThan, .string("Z"), ["s": .string("a")], true)  // byte order: 'a' (0x61) > 'Z' (0x5A)
        add("s", .lessThan, .string("ab"), ["s": .string("abc")], false)
        // NEAR.
        add("l", .near, .location(paris), ["l": .location(Location(latitude: 48.8606, longitude: 2.3376))], true, distance: 2_000)
        add("l", .near, .location(paris), ["l": .location(Location(latitude: 51.5074, longitude: -0.1278))], false, distance: 2_000)
        add("l", .near, .location(paris), ["l": .list(.location, [.location(paris)])], false, distance: 2_000)
        // IN / NOT_IN.
        add("s", .in, strings("a", "b"), ["s": .string("b")], true)
        add("s", .in, strings("a", "b"), ["s": .string("B")], false)
        add("n", .in, ints(1, 2), ["n": .double(2)], true)
        add("s", .notIn, strings("a"), ["s": .string("b")], true)
        add("s", .notIn, strings("a"), ["s": .string("a")], false)
        add("s", .notIn, strings("a"), [:], true)  // NOT_IN holds on a missing field
        add("s", .notIn, strings("a"), ["s": .int64(1)], true)  // …and on another type
        // BEGINS_WITH / NOT_BEGINS_WITH.
        add("s", .beginsWith, .string("App"), ["s": .string("Apple")], true)
        add("s", .beginsWith, .string("app"), ["s": .string("Apple")], false)
        add("s", .notBeginsWith, .string("x"), ["s": .string("Apple")], true)
        add("s", .notBeginsWith, .string("A"), ["s": .string("Apple")], false)
        add("s", .notBeginsWith, .string("A"), [:], true)
        // Tokens.
        add("s", .containsAllTokens, .string("QUICK fox"), ["s": .string("The quick brown fox")], true)
        add("s", .containsAllTokens, .string("quick cat"), ["s": .string("The quick brown fox")], false)
        add("s", .containsAnyTokens, .string("cat fox"), ["s": .string("The quick brown fox")], true)
        add("s", .containsAnyTokens, .string("cat dog"), ["s": .string("The quick brown fox")], false)
        add("___all", .containsAllTokens, .string("fox list"), ["s": .string("fox"), "t": strings("a list")], true)
        add("___all", .containsAnyTokens, .string("wolf"), ["s": .string("fox")], false)
        // LIST_CONTAINS and the rest.
        add("l", .listContains, .string("b"), ["l": strings("a", "b")], true)
        add("l", .listContains, .string("c"), ["l": strings("a", "b")], false)
        add("l", .notListContains, .string("c"), ["l": strings("a", "b")], true)
        add("l", .notListContains, .string("a"), ["l": strings("a", "b")], false)
        add("l", .listContainsAny, strings("x", "b"), ["l": strings("a", "b")], true)
        add("l", .listContainsAny, strings("x", "y"), ["l": strings("a", "b")], false)
        add("l", .notListContainsAny, strings("x", "y"), ["l": strings("a", "b")], true)
        add("l", .notListContainsAny, strings("x", "a"), ["l": strings("a", "b")], false)
        add("l", .listContainsAll, strings("b", "a"), ["l": strings("a", "b", "c")], true)
        add("l", .listContainsAll, strings("a", "x"), ["l": strings("a", "b")], false)
        add("l", .notListContainsAll, strings("a", "x"), ["l": strings("a", "b")], true)
        add("l", .notListContainsAll, strings("a", "b"), ["l": strings("a", "b")], false)
        add("l", .listMemberBeginsWith, .string("ap"), ["l": strings("pear", "apple")], true)
        add("l", .listMemberBeginsWith, .string("Ap"), ["l": strings("pear", "apple")], false)
        add("l", .notListMemberBeginsWith, .string("x"), ["l": strings("pear", "apple")], true)
        add("l", .notListMemberBeginsWith, .string("pe"), ["l": strings("pear", "apple")], false)
        return cases
    }()

    func testEveryComparatorHasAMatchingAndANonMatchingCase() {
        for entry in Self.table {
            XCTAssertEqual(entry.filter.matches(Self.record(entry.fields)), entry.expected,
                           "\(entry.filter.fieldName) \(entry.filter.comparator.rawValue) \(entry.filter.value) on \(entry.fields)", line: entry.line)
        }
        for comparator in StratusCore.Comparator.allCases {
            let outcomes = Set(Self.table.filter { $0.filter.comparator == comparator }.map(\.expected))
            XCTAssertEqual(outcomes, [true, false], "\(comparator.rawValue) needs a matching and a non-matching case")
        }
    }

    func testRecordTypeMustBeEqualAndFiltersAreANDed() {
        let record = Self.record(["a": .int64(1), "b": .string("x")])
        let both = RecordQuery(recordType: "Item", filters: [Self.filter("a", .equals, .int64(1)), Self.filter("b", .equals, .string("x"))], sorts: [])
        XCTAssertTrue(both.matches(record))
        var oneFails = both
        oneFails.filters[1].value = .string("y")
        XCTAssertFalse(oneFails.matches(record))
        var otherType = both
        otherType.recordType = "item"
        XCTAssertFalse(otherType.matches(record), "record types compare exactly")
        XCTAssertTrue(RecordQuery(recordType: "Item", filters: [], sorts: []).matches(record), "no filters: every record of the type")
    }

    func testParsedQueryMatchesAsItsFiltersSay() throws {
        let json = try JSONDecoder().decode(JSONValue.self, from: Data("""
            {"recordType": "Item", "filterBy": [
              {"fieldName": "n", "comparator": "GREATER_THAN", "fieldValue": {"value": 2}},
              {"fieldName": "tags", "comparator": "LIST_CONTAINS", "fieldValue": {"value": "red"}},
              {"fieldName": "___all", "comparator": "CONTAINS_ANY_TOKENS", "fieldValue": {"value": "Hello"}}
            ]}
            """.utf8))
        let query = try RecordQuery.parse(json)
        XCTAssertTrue(query.matches(Self.record(["n": .double(2.5), "tags": Self.strings("red"), "title": .string("hello world")])))
        XCTAssertFalse(query.matches(Self.record(["n": .int64(2), "tags": Self.strings("red"), "title": .string("hello world")])))
        XCTAssertFalse(query.matches(Self.record(["n": .int64(3), "tags": Self.strings("blue"), "title": .string("hello world")])))
        XCTAssertFalse(query.matches(Self.record(["n": .int64(3), "tags": Self.strings("red"), "title": .string("goodbye")])))
    }

    /// Text is compared by its UTF-8 bytes, as under `COLLATE "C"`: never by Unicode equivalence.
    func testTextComparesByBytesNotUnicodeEquivalence() {
        let composed = "caf\u{E9}", decomposed = "cafe\u{301}"
        XCTAssertEqual(composed, decomposed, "Swift would call them equal")
        XCTAssertFalse(Self.filter("s", .equals, .string(composed)).matches(Self.record(["s": .string(decomposed)])))
        XCTAssertTrue(Self.filter("s", .notEquals, .string(composed)).matches(Self.record(["s": .string(decomposed)])))
        XCTAssertFalse(Self.filter("s", .in, Self.strings(composed)).matches(Self.record(["s": .string(decomposed)])))
        XCTAssertFalse(Self.filter("s", .beginsWith, .string(composed)).matches(Self.record(["s": .string(decomposed + "s")])))
        XCTAssertTrue(Self.filter("s", .greaterThan, .string("z")).matches(Self.record(["s": .string("\u{E9}")])), "é (0xC3…) sorts after z")
        XCTAssertTrue(Self.filter("s", .lessThan, .string("a")).matches(Self.record(["s": .string("Z")])))
    }

    /// Numbers compare by the exact decimal the index stores: a double as its shortest text.
    func testInt64AndDoubleCompareByExactDecimalValue() {
        let twoToThe60: Int64 = 1 << 60
        // The double 2^60 is stored as 1.152921504606847e+18 = 1152921504606847000, which is above 2^60 = 1152921504606846976.
        XCTAssertFalse(Self.filter("n", .equals, .int64(twoToThe60)).matches(Self.record(["n": .double(Double(twoToThe60))])))
        XCTAssertTrue(Self.filter("n", .greaterThan, .int64(twoToThe60)).matches(Self.record(["n": .double(Double(twoToThe60))])))
        XCTAssertTrue(Self.filter("n", .equals, .int64(1_152_921_504_606_847_000)).matches(Self.record(["n": .double(Double(twoToThe60))])))
        // Beyond 2^53 integers stay exact.
        XCTAssertTrue(Self.filter("n", .greaterThan, .double(9_007_199_254_740_992)).matches(Self.record(["n": .int64(9_007_199_254_740_993)])))
        XCTAssertFalse(Self.filter("n", .equals, .double(9_007_199_254_740_992)).matches(Self.record(["n": .int64(9_007_199_254_740_993)])))
        XCTAssertTrue(Self.filter("n", .equals, .double(0.1)).matches(Self.record(["n": .double(0.1)])))
        XCTAssertTrue(Self.filter("n", .equals, .int64(0)).matches(Self.record(["n": .double(-0.0)])))
        XCTAssertTrue(Self.filter("n", .lessThan, .double(-1.5)).matches(Self.record(["n": .int64(-2)])))
        XCTAssertFalse(Self.filter("n", .lessThan, .double(-2.5)).matches(Self.record(["n": .int64(-2)])))
        XCTAssertTrue(Self.filter("n", .in, .list(.double, [.double(1e20)])).matches(Self.record(["n": .double(1e20)])))
        XCTAssertTrue(Self.filter("t", .equals, .int64(1_700_000_000_000)).matches(Self.record(["t": .timestamp(1_700_000_000_000)])))
        // A list of numbers is not a number.
        XCTAssertFalse(Self.filter("n", .equals, .int64(1)).matches(Self.record(["n": Self.ints(1)])))
        // A number never equals text.
        XCTAssertFalse(Self.filter("s", .equals, .string("1")).matches(Self.record(["s": .int64(1)])))
    }

    func testStoredNumbersShowAsNumericDoes() {
        XCTAssertEqual(StoredNumber(stored: 1e20).text, "100000000000000000000")
        XCTAssertEqual(StoredNumber(stored: 1.5e-7).text, "0.00000015")
        XCTAssertEqual(StoredNumber(stored: 1.0).text, "1")
        XCTAssertEqual(StoredNumber(stored: -0.0).text, "0")
        XCTAssertEqual(StoredNumber(stored: -2.25).text, "-2.25")
        XCTAssertEqual(StoredNumber(Int64.min).text, "-9223372036854775808")
        XCTAssertTrue(StoredNumber(text: "1.50") == StoredNumber(text: "1.5"))
        XCTAssertTrue(StoredNumber(text: "-3")! < StoredNumber(text: "-2.5")!)
        XCTAssertTrue(StoredNumber(text: "0.001")! < StoredNumber(text: "0.01")!)
        XCTAssertTrue(StoredNumber(bound: .infinity) < StoredNumber(bound: .nan))
        XCTAssertTrue(StoredNumber(bound: -.infinity) < StoredNumber(text: "-1e300")!)
    }

    func testMissingFieldsAndOtherTypesAreSQLNull() {
        let empty = Self.record([:])
        for comparator: StratusCore.Comparator in [.equals, .notEquals, .lessThan, .lessThanOrEquals, .greaterThan, .greaterThanOrEquals] {
            XCTAssertFalse(Self.filter("n", comparator, .int64(1)).matches(empty), comparator.rawValue)
            XCTAssertFalse(Self.filter("s", comparator, .string("a")).matches(empty), comparator.rawValue)
            XCTAssertFalse(Self.filter("s", comparator, .string("a")).matches(Self.record(["s": .int64(1)])), comparator.rawValue)
        }
        XCTAssertFalse(Self.filter("n", .in, Self.ints(1)).matches(empty))
        XCTAssertTrue(Self.filter("n", .notIn, Self.ints(1)).matches(empty))
        XCTAssertTrue(Self.filter("n", .notIn, Self.ints(1)).matches(Self.record(["n": .string("1")])))
        XCTAssertFalse(Self.filter("s", .beginsWith, .string("")).matches(empty))
        XCTAssertTrue(Self.filter("s", .beginsWith, .string("")).matches(Self.record(["s": .string("")])))
        XCTAssertFalse(Self.filter("l", .near, .location(Location(latitude: 0, longitude: 0)), distance: 1e9).matches(empty))
        XCTAssertFalse(Self.filter("l", .listContains, .string("a")).matches(empty))
        XCTAssertTrue(Self.filter("l", .notListContains, .string("a")).matches(empty))
        XCTAssertFalse(Self.filter("l", .listContainsAll, Self.strings()).matches(empty))
        XCTAssertTrue(Self.filter("l", .notListContainsAll, Self.strings()).matches(empty))
        XCTAssertFalse(Self.filter("l", .listContainsAny, Self.strings("a")).matches(empty))
        XCTAssertTrue(Self.filter("l", .notListContainsAny, Self.strings("a")).matches(empty))
        XCTAssertFalse(Self.filter("l", .listMemberBeginsWith, .string("a")).matches(empty))
        XCTAssertTrue(Self.filter("l", .notListMemberBeginsWith, .string("a")).matches(empty))
        XCTAssertFalse(Self.filter("s", .containsAnyTokens, .string("a")).matches(empty))
    }

    func testEmptyValueListsDecideBeforeTypes() {
        let record = Self.record(["s": .string("a"), "l": Self.strings("a")])
        XCTAssertFalse(Self.filter("s", .in, Self.strings()).matches(record))
        XCTAssertTrue(Self.filter("s", .notIn, Self.strings()).matches(record))
        XCTAssertTrue(Self.filter("___createTime", .notIn, Self.strings()).matches(record))
        // Every array contains the empty list; nothing contains any of it.
        XCTAssertTrue(Self.filter("l", .listContainsAll, Self.strings()).matches(record))
        XCTAssertFalse(Self.filter("l", .listContainsAny, Self.strings()).matches(record))
        XCTAssertTrue(Self.filter("l", .notListContainsAny, Self.strings()).matches(record))
        // A scalar is not a list, even for the empty list.
        XCTAssertFalse(Self.filter("s", .listContainsAll, Self.strings()).matches(record))
        XCTAssertTrue(Self.filter("s", .notListContainsAll, Self.strings()).matches(record))
    }

    func testListsCompareElementsAsTheStoredJSONDoes() {
        // Numbers by value across INT64, DOUBLE and TIMESTAMP lists; never with text.
        XCTAssertTrue(Self.filter("l", .listContains, .double(2)).matches(Self.record(["l": Self.ints(1, 2)])))
        XCTAssertTrue(Self.filter("l", .listContains, .int64(7)).matches(Self.record(["l": .list(.timestamp, [.timestamp(7)])])))
        XCTAssertFalse(Self.filter("l", .listContains, .int64(1)).matches(Self.record(["l": Self.strings("1")])))
        XCTAssertTrue(Self.filter("l", .listContainsAll, .list(.double, [.double(1), .double(2.5)])).matches(Self.record(["l": .list(.double, [.double(2.5), .double(1)])])))
        // A scalar field contains no list element.
        XCTAssertFalse(Self.filter("s", .listContains, .string("a")).matches(Self.record(["s": .string("a")])))
        XCTAssertTrue(Self.filter("s", .notListContains, .string("a")).matches(Self.record(["s": .string("a")])))
        XCTAssertFalse(Self.filter("s", .listContainsAny, Self.strings("a")).matches(Self.record(["s": .string("a")])))
        XCTAssertTrue(Self.filter("s", .notListContainsAny, Self.strings("a")).matches(Self.record(["s": .string("a")])))
        // Case-sensitive.
        XCTAssertFalse(Self.filter("l", .listContains, .string("A")).matches(Self.record(["l": Self.strings("a")])))
        // BYTES lists hold base64 text.
        let bytes = Data([0, 1, 2])
        XCTAssertTrue(Self.filter("l", .listContains, .bytes(bytes)).matches(Self.record(["l": .list(.bytes, [.bytes(bytes)])])))
        XCTAssertTrue(Self.filter("l", .listContains, .string(bytes.base64EncodedString())).matches(Self.record(["l": .list(.bytes, [.bytes(bytes)])])))
    }

    func testReferencesCompareByRecordName() {
        let record = Self.record(["owner": Self.ref("alice", .deleteSelf), "links": .list(.reference, [Self.ref("a"), Self.ref("b", .validate)]), "s": .string("alice")])
        XCTAssertTrue(Self.filter("owner", .equals, Self.ref("alice")).matches(record), "the action does not count")
        XCTAssertFalse(Self.filter("owner", .equals, Self.ref("bob")).matches(record))
        XCTAssertTrue(Self.filter("owner", .notEquals, Self.ref("bob")).matches(record))
        XCTAssertTrue(Self.filter("owner", .in, .list(.reference, [Self.ref("x"), Self.ref("alice")])).matches(record))
        XCTAssertTrue(Self.filter("owner", .notIn, .list(.reference, [Self.ref("x")])).matches(record))
        XCTAssertTrue(Self.filter("owner", .lessThan, Self.ref("b")).matches(record))
        XCTAssertFalse(Self.filter("s", .equals, Self.ref("alice")).matches(record), "a STRING is not a reference")
        XCTAssertFalse(Self.filter("owner", .equals, .string("alice")).matches(record), "a reference is not a STRING")
        XCTAssertFalse(Self.filter("links", .equals, Self.ref("a")).matches(record), "a list is not a reference")
        XCTAssertTrue(Self.filter("links", .listContains, Self.ref("b")).matches(record))
        XCTAssertFalse(Self.filter("links", .listContains, Self.ref("c")).matches(record))
        XCTAssertTrue(Self.filter("links", .listContainsAll, .list(.reference, [Self.ref("b"), Self.ref("a")])).matches(record))
        XCTAssertFalse(Self.filter("links", .listContainsAll, .list(.reference, [Self.ref("b"), Self.ref("c")])).matches(record))
        XCTAssertTrue(Self.filter("links", .notListContainsAny, .list(.reference, [Self.ref("c")])).matches(record))
        XCTAssertFalse(Self.filter("owner", .listContains, Self.ref("alice")).matches(record), "a single reference is not a list")
    }

    func testSystemFields() {
        let record = Self.record(["s": .string("x")], name: "note-42", created: 1_000, modified: 2_000)
        XCTAssertTrue(Self.filter("___recordID", .equals, .string("note-42")).matches(record))
        XCTAssertTrue(Self.filter("___recordID", .equals, Self.ref("note-42")).matches(record))
        XCTAssertFalse(Self.filter("___recordID", .equals, .string("Note-42")).matches(record))
        XCTAssertTrue(Self.filter("___recordID", .beginsWith, .string("note-")).matches(record))
        XCTAssertFalse(Self.filter("___recordID", .notBeginsWith, .string("note-")).matches(record))
        XCTAssertTrue(Self.filter("___recordID", .in, .list(.reference, [Self.ref("note-42")])).matches(record))
        XCTAssertTrue(Self.filter("___recordID", .greaterThan, .string("note-3")).matches(record), "text order, not numeric")
        XCTAssertTrue(Self.filter("___createTime", .equals, .timestamp(1_000)).matches(record))
        XCTAssertTrue(Self.filter("___createTime", .lessThan, .int64(1_001)).matches(record))
        XCTAssertFalse(Self.filter("___createTime", .greaterThan, .timestamp(1_000)).matches(record))
        XCTAssertTrue(Self.filter("___modTime", .greaterThanOrEquals, .timestamp(2_000)).matches(record))
        XCTAssertFalse(Self.filter("___modTime", .lessThan, .timestamp(2_000)).matches(record))
        XCTAssertTrue(Self.filter("___modTime", .notIn, .list(.timestamp, [.timestamp(1_000)])).matches(record))
        XCTAssertFalse(Self.filter("___modTime", .in, .list(.timestamp, [.timestamp(1_000)])).matches(record))
        // A user field of the same name is not read: the system value is.
        XCTAssertFalse(Self.filter("___recordID", .equals, .string("x")).matches(Self.record(["___recordID": .string("x")], name: "y")))
        // What the SQL refuses (text against a time, a number against the name, tokens on a system field) matches nothing.
        XCTAssertFalse(Self.filter("___createTime", .notEquals, .string("1")).matches(record))
        XCTAssertFalse(Self.filter("___recordID", .notEquals, .int64(1)).matches(record))
        XCTAssertFalse(Self.filter("___createTime", .notBeginsWith, .string("9")).matches(record))
        XCTAssertFalse(Self.filter("___recordID", .containsAnyTokens, .string("note")).matches(record))
    }

    /// Filters the SQL refuses make the whole query fail, so they match nothing — even their NOT_ forms.
    func testFiltersTheIndexRefusesMatchNothing() {
        let bytes = Data([1, 2, 3])
        let record = Self.record(["b": .bytes(bytes), "s": .string("a b")])
        XCTAssertFalse(Self.filter("b", .equals, .bytes(bytes)).matches(record))
        XCTAssertFalse(Self.filter("b", .notEquals, .bytes(bytes)).matches(record))
        XCTAssertFalse(Self.filter("b", .notIn, .list(.bytes, [.bytes(Data([9]))])).matches(record))
        XCTAssertFalse(Self.filter("s", .containsAnyTokens, .string("?!")).matches(record), "no tokens to search for")
        XCTAssertFalse(Self.filter("s", .containsAnyTokens, .int64(1)).matches(record))
        XCTAssertFalse(Self.filter("s", .listMemberBeginsWith, .int64(1)).matches(Self.record(["s": Self.ints(1)])))
        XCTAssertFalse(Self.filter("l", .near, .location(Location(latitude: 0, longitude: 0)), distance: nil).matches(
            Self.record(["l": .location(Location(latitude: 0, longitude: 0))])))
        XCTAssertFalse(Self.filter("l", .listContainsAny, .string("a")).matches(Self.record(["l": Self.strings("a")])))
        // The stored base64 text, though, is text: BEGINS_WITH and a STRING EQUALS read it.
        XCTAssertTrue(Self.filter("b", .equals, .string(bytes.base64EncodedString())).matches(record))
        XCTAssertTrue(Self.filter("b", .beginsWith, .string(String(bytes.base64EncodedString().prefix(2)))).matches(record))
    }

    func testNearAtTheBoundary() {
        let point = Location(latitude: 10, longitude: 20)
        let there = Location(latitude: 11, longitude: 20)
        let record = Self.record(["l": .location(there)])
        // One degree of latitude on the mean-radius sphere: 2πR / 360.
        let metres = try! XCTUnwrap(GreatCircle.distance(from: point, to: there))
        XCTAssertEqual(metres, 2 * Double.pi * 6_371_008.8 / 360, accuracy: 0.001)
        XCTAssertTrue(Self.filter("l", .near, .location(point), distance: metres).matches(record), "the boundary is inside (<=)")
        XCTAssertFalse(Self.filter("l", .near, .location(point), distance: metres.nextDown).matches(record))
        XCTAssertTrue(Self.filter("l", .near, .location(point), distance: 0).matches(Self.record(["l": .location(point)])))
        // Longitude shrinks with latitude: one degree east at 60° is about half as far.
        let east = try! XCTUnwrap(GreatCircle.distance(from: Location(latitude: 60, longitude: 0), to: Location(latitude: 60, longitude: 1)))
        XCTAssertEqual(east, 55_597, accuracy: 50)
        XCTAssertFalse(Self.filter("l", .near, .location(point), distance: 1e9).matches(Self.record(["l": .string("10,20")])))
        XCTAssertTrue(Self.filter("l", .near, .location(point), distance: .nan).matches(record), "float8 NaN is above every distance")
    }

    func testTokensAreLowerCasedWordsWithNoStemmingOrStopWords() {
        let record = Self.record(["title": .string("The Runner's GUIDE, vol.2 — naïve café"), "body": .string("x")])
        func any(_ text: String, _ field: String = "title") -> Bool { Self.filter(field, .containsAnyTokens, .string(text)).matches(record) }
        func all(_ text: String, _ field: String = "title") -> Bool { Self.filter(field, .containsAllTokens, .string(text)).matches(record) }
        XCTAssertTrue(all("guide RUNNER s"))
        XCTAssertTrue(all("the"), "'simple' keeps stop words")
        XCTAssertFalse(any("run"), "no stemming")
        XCTAssertFalse(any("runners"), "no stemming")
        XCTAssertTrue(all("NAÏVE Café"))
        XCTAssertFalse(any("naive"), "accents count")
        XCTAssertTrue(all("vol 2"))
        XCTAssertFalse(all("guide x"), "a field's search reads only that field")
        XCTAssertTrue(all("guide x", "___all"), "___all reads every STRING field")
        XCTAssertFalse(any("guide", "body"))
    }

    func testAllSearchesOnlySearchableStringFieldsAndStringListMembers() {
        let record = Self.record(["s": .string("alpha"), "tags": Self.strings("beta gamma"), "n": .int64(42), "secret": .string("delta")])
        let policy = IndexPolicy(fields: ["Item": ["secret": [.queryable]]])
        func all(_ text: String) -> Bool { Self.filter("___all", .containsAllTokens, .string(text)).matches(record, policy: policy) }
        XCTAssertTrue(all("alpha gamma"))
        XCTAssertFalse(all("42"), "numbers are not in the search document")
        XCTAssertFalse(all("delta"), "a field that is not searchable is not in ___all")
        XCTAssertTrue(Self.filter("___all", .containsAllTokens, .string("delta")).matches(record), "development indexes everything")
        // A field's own search also needs the record's search document to match.
        XCTAssertFalse(Self.filter("secret", .containsAllTokens, .string("delta")).matches(record, policy: policy))
        XCTAssertFalse(Self.filter("n", .containsAnyTokens, .string("42")).matches(record))
        XCTAssertTrue(Self.filter("n", .containsAnyTokens, .string("42")).matches(Self.record(["n": .int64(42), "s": .string("42")])),
                      "a number's own text is tokenised once the search document matches")
        // A query's filters share one search document.
        let query = RecordQuery(recordType: "Item", filters: [Self.filter("___all", .containsAnyTokens, .string("alpha")),
                                                             Self.filter("tags", .containsAllTokens, .string("gamma beta"))], sorts: [])
        XCTAssertTrue(query.matches(record))
    }

    func testSearchDocumentIsCutAtTheIndexLimit() {
        let filler = String(repeating: "a ", count: SearchText.maxSearchBytes / 2)
        // Fields join in name order: the text of "b" begins past the limit.
        let record = Self.record(["a": .string(filler), "b": .string("needle")])
        XCTAssertFalse(Self.filter("___all", .containsAnyTokens, .string("needle")).matches(record))
        XCTAssertFalse(Self.filter("b", .containsAnyTokens, .string("needle")).matches(record))
        XCTAssertTrue(Self.filter("___all", .containsAnyTokens, .string("needle")).matches(Self.record(["a": .string("needle"), "b": .string(filler)])))
        // PostgreSQL drops words of 2,047 bytes or more.
        XCTAssertFalse(Self.filter("s", .containsAnyTokens, .string(String(repeating: "x", count: 2_047))).matches(
            Self.record(["s": .string(String(repeating: "x", count: 2_047))])))
        XCTAssertTrue(Self.filter("s", .containsAnyTokens, .string(String(repeating: "x", count: 2_046))).matches(
            Self.record(["s": .string(String(repeating: "x", count: 2_046))])))
    }

    /// A named field's search reads the field's `->>'value'`: for a list, its JSON text, escapes included.
    func testFieldSearchReadsAListAsItsJSONText() {
        let record = Self.record(["tags": Self.strings("line\nbreak", "tab\tstop")])
        XCTAssertTrue(Self.filter("___all", .containsAllTokens, .string("break stop")).matches(record), "the search document joins the members")
        XCTAssertFalse(Self.filter("tags", .containsAnyTokens, .string("break stop")).matches(record), "the list's text reads \\nbreak and \\tstop")
        XCTAssertTrue(Self.filter("tags", .containsAllTokens, .string("line tab")).matches(record))
        XCTAssertEqual(StoredJSON.text(StoredJSON.value(of: Self.strings("a\nb", "q\"", "\u{1}"))), #"["a\nb", "q\"", "\u0001"]"#)
        XCTAssertEqual(StoredJSON.text(.object(["recordName": .string("x"), "action": .string("NONE"), "b": .int(1)])), #"{"b": 1, "action": "NONE", "recordName": "x"}"#)
    }

    func testListMemberBeginsWithReadsMembersAsText() {
        XCTAssertTrue(Self.filter("l", .listMemberBeginsWith, .string("12")).matches(Self.record(["l": Self.ints(5, 123)])))
        XCTAssertTrue(Self.filter("l", .listMemberBeginsWith, .string("100000")).matches(Self.record(["l": .list(.double, [.double(1e20)])])))
        XCTAssertTrue(Self.filter("l", .listMemberBeginsWith, .string("0.0000001")).matches(Self.record(["l": .list(.double, [.double(1.5e-7)])])))
        XCTAssertTrue(Self.filter("l", .listMemberBeginsWith, .string("{\"action\": \"NONE\"")).matches(Self.record(["l": .list(.reference, [Self.ref("a")])])))
        XCTAssertFalse(Self.filter("l", .listMemberBeginsWith, .string("a")).matches(Self.record(["l": .string("apple")])), "a STRING is not a list")
        XCTAssertTrue(Self.filter("l", .notListMemberBeginsWith, .string("a")).matches(Self.record(["l": .string("apple")])))
    }

    /// A list comparison costs the stored list plus the wanted values, not their product.
    func testHugeListsAreMatchedInLinearTime() {
        let stored = (0..<100_000).map { FieldValue.string("member-\($0)") }
        let wanted = (0..<1_000).map { FieldValue.string("member-\($0 * 97)") }
        let references = (0..<100_000).map { FieldValue.reference(Reference(recordName: "r\($0)", action: .none)) }
        let wantedReferences = (0..<1_000).map { FieldValue.reference(Reference(recordName: "r\($0 * 97)", action: .none)) }
        let record = Self.record(["l": .list(.string, stored), "refs": .list(.reference, references)])
        let start = Self.threadCPUSeconds()
        XCTAssertTrue(Self.filter("l", .listContainsAll, .list(.string, wanted)).matches(record))
        XCTAssertFalse(Self.filter("l", .listContainsAny, .list(.string, wanted.map { _ in .string("absent") })).matches(record))
        XCTAssertTrue(Self.filter("refs", .listContainsAll, .list(.reference, wantedReferences)).matches(record))
        XCTAssertTrue(Self.filter("l", .in, .list(.string, wanted)).matches(Self.record(["l": .string("member-970")])))
        // 10⁸ comparisons, which a product would cost, take minutes of CPU in a debug build; the
        // linear matching about half a second. This thread's CPU time, not the clock's: the unit
        // tests run beside the integration tier, whose load stretches the clock many times over.
        XCTAssertLessThan(Self.threadCPUSeconds() - start, 20)
    }

    /// The CPU time the calling thread has used, in seconds.
    static func threadCPUSeconds() -> Double {
        var time = timespec()
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &time)
        return Double(time.tv_sec) + Double(time.tv_nsec) / 1e9
    }
}
