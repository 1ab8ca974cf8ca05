import Foundation
import HummingbirdTesting
@testable import StratusCore
@testable import StratusPostgres
import StratusTesting
import XCTest

/// `RecordQuery.matches` and `records/query` agree: over records of every field type (and the
/// awkward values: mixed numbers, Unicode-equivalent text, empty lists, missing fields), every
/// filter of a table answered by the query index (real PostgreSQL, through the indexer) returns
/// exactly the records `matches` accepts.
final class QueryPredicateAgreementTests: XCTestCase {
    typealias Body = [String: Any]

    static var zurich: Body { ["latitude": 47.3769, "longitude": 8.5417] }
    static var bern: Body { ["latitude": 46.948, "longitude": 7.4474] }
    static var paris: Body { ["latitude": 48.8566, "longitude": 2.3522] }

    /// Records of type Item with overlapping fields of differing types; one of type Other.
    static var records: [(String, Body)] {
        func v(_ value: Any, _ type: String? = nil) -> Body { type.map { ["value": value, "type": $0] } ?? ["value": value] }
        let twoToThe60 = 1_152_921_504_606_846_976
        return [
            ("r01", ["s": v("Apple"), "n": v(5), "t": v(1000, "TIMESTAMP"), "tags": v(["red", "fruit"]), "nums": v([1, 2]), "dbls": v([1e20, 1.5e-7], "DOUBLE_LIST"),
                     "ref": v(["recordName": "x"], "REFERENCE"), "refs": v([["recordName": "x"], ["recordName": "y", "action": "NONE"]], "REFERENCE_LIST"),
                     "loc": v(zurich, "LOCATION"), "b": v("AAEC", "BYTES"), "bl": v(["AAEC", "AQ=="], "BYTES_LIST"), "title": v("The quick brown fox")]),
            ("r02", ["s": v("apple"), "n": v(5, "DOUBLE"), "t": v(5, "TIMESTAMP"), "tags": v(["Red"]), "nums": v([2.5, 2], "DOUBLE_LIST"),
                     "ref": v(["recordName": "y"], "REFERENCE"), "loc": v(bern, "LOCATION"), "title": v("quick-witted fox-like red")]),
            ("r03", ["s": v("APPLE pie"), "n": v(2.5), "tags": v([], "STRING_LIST"), "nums": v([], "INT64_LIST"), "refs": v([], "REFERENCE_LIST"),
                     "loc": v(paris, "LOCATION"), "title": v("Die Füchse, naïve café")]),
            ("r04", ["s": v("Zebra"), "n": v(twoToThe60), "title": v("john@example.com wrote 2 notes"), "tags": v(["stone", "red", "r"])]),
            ("r05", ["s": v("\u{E9}"), "n": v(Double(twoToThe60), "DOUBLE"), "tags": v("red")]),
            ("r06", ["s": v("e\u{301}"), "n": v("5"), "ref": v("x")]),
            ("r07", ["s": v(""), "n": v(5, "TIMESTAMP"), "loc": v(["latitude": 47.38, "longitude": 8.55], "LOCATION"), "nums": v([12, 3])]),
            ("r08", [:]),
            ("r09", ["s": v(7), "tags": v([12, 3]), "loc": v("zurich"), "title": v(["red fox", "Quick"])]),
            ("r10", ["s": v("x"), "refs": v([["recordName": "x"]], "REFERENCE_LIST"), "nums": v([5, 9_007_199_254_740_993]), "b": v("AQ==", "BYTES")]),
            // A list's own text is its JSON, where a newline is `\n`: the field's search sees "nbreak".
            ("r11", ["tags": v(["line\nbreak", "x"]), "title": v("line")]),
        ]
    }

    /// The table: every comparator over every field with values of every type.
    static func filters(zurichToBern: Double) -> [Body] {
        func v(_ value: Any, _ type: String? = nil) -> Body { type.map { ["value": value, "type": $0] } ?? ["value": value] }
        let fields = ["s", "n", "t", "tags", "nums", "dbls", "ref", "refs", "loc", "b", "bl", "title", "nothing", "___recordID", "___createTime", "___modTime"]
        let scalars: [Body] = [v("apple"), v("Apple"), v("\u{E9}"), v("x"), v(5), v(5, "DOUBLE"), v(2.5), v(5, "TIMESTAMP"), v(1000, "TIMESTAMP"),
                               v(["recordName": "x"], "REFERENCE"), v(1_152_921_504_606_846_976), v("AAEC", "BYTES"), v("r03")]
        let lists: [Body] = [v(["Apple", "Zebra"]), v([5, 7]), v([2.5, 1], "DOUBLE_LIST"), v([1000, 5], "TIMESTAMP_LIST"), v([["recordName": "x"]], "REFERENCE_LIST"),
                             v([], "STRING_LIST"), v(["red", "fruit"]), v(["red", "stone"]), v([2, 5]), v([1e20], "DOUBLE_LIST"), v(["AQ=="], "BYTES_LIST"), v(["r01", "r10"])]
        let prefixes: [Body] = [v("A"), v("app"), v(""), v("e"), v("\u{E9}"), v("re"), v("1"), v("{"), v("0.00"), v("r0")]
        let elements: [Body] = [v("red"), v("Red"), v(2), v(2, "DOUBLE"), v(["recordName": "x"], "REFERENCE"), v(12), v("AQ==", "BYTES"), v("AQ==")]
        let searches: [Body] = [v("red"), v("quick FOX"), v("fox cat"), v("2"), v("witted"), v("café"), v("füchse"), v("the"), v("naive"), v("break"), v("nbreak line")]
        var table: [Body] = []
        for field in fields {
            for comparator in ["EQUALS", "NOT_EQUALS", "LESS_THAN", "LESS_THAN_OR_EQUALS", "GREATER_THAN", "GREATER_THAN_OR_EQUALS"] {
                for value in scalars { table.append(["comparator": comparator, "fieldName": field, "fieldValue": value]) }
            }
            for comparator in ["IN", "NOT_IN", "LIST_CONTAINS_ANY", "NOT_LIST_CONTAINS_ANY", "LIST_CONTAINS_ALL", "NOT_LIST_CONTAINS_ALL"] {
                for value in lists { table.append(["comparator": comparator, "fieldName": field, "fieldValue": value]) }
            }
            for comparator in ["BEGINS_WITH", "NOT_BEGINS_WITH", "LIST_MEMBER_BEGINS_WITH", "NOT_LIST_MEMBER_BEGINS_WITH"] {
                for value in prefixes { table.append(["comparator": comparator, "fieldName": field, "fieldValue": value]) }
            }
            for comparator in ["LIST_CONTAINS", "NOT_LIST_CONTAINS"] {
                for value in elements { table.append(["comparator": comparator, "fieldName": field, "fieldValue": value]) }
            }
            for metres in [0, 1_500, 100_000, zurichToBern, zurichToBern.nextDown] {
                table.append(["comparator": "NEAR", "fieldName": field, "fieldValue": v(zurich, "LOCATION"), "distance": metres])
            }
        }
        for field in ["title", "tags", "s", "n", "___all"] {
            for comparator in ["CONTAINS_ALL_TOKENS", "CONTAINS_ANY_TOKENS"] {
                for value in searches { table.append(["comparator": comparator, "fieldName": field, "fieldValue": value]) }
            }
        }
        return table
    }

    static func jsonValue(_ body: Any) throws -> JSONValue {
        try JSONDecoder().decode(JSONValue.self, from: JSONSerialization.data(withJSONObject: body))
    }

    func testRecordsQueryReturnsExactlyTheRecordsMatchesAccepts() async throws {
        XCTAssertEqual(SearchText.maxSearchBytes, QueryIndexStore.maxSearchBytes, "the in-memory search document is cut where the index's is")
        try await QueryTests.withStack { fixture, client in
            try await RecordAPITests.createZone(client, fixture, "Q")
            // The records hold values of every type in the same fields, as records written under earlier
            // development schemas do (a schema gives each field one type): the schema is reset before each.
            for record in Self.records {
                try await SchemaTests.resetDevelopmentSchema(fixture)
                let (status, saved) = try await RecordAPITests.modify(client, fixture, zone: "Q", [QueryTests.item(record.0, record.1)])
                XCTAssertEqual(status, 200, "\(saved)")
                XCTAssertNil(saved.first?["serverErrorCode"], "\(saved)")
            }
            _ = try await RecordAPITests.modify(client, fixture, zone: "Q", [["operationType": "create", "record": RecordAPITests.note("o1", ["s": ["value": "Apple"]], type: "Other")]])
            try await QueryTests.waitForIndex(client, fixture, ["recordType": "Item"], count: Self.records.count)
            try await QueryTests.waitForIndex(client, fixture, ["recordType": "Other"], count: 1)

            let database = DatabaseID(container: fixture.container, environment: .development, scope: .private, owner: "_alice")
            let names = Self.records.map(\.0) + ["o1"]
            let stored = try await RecordStore(store: fixture.store).lookup(names, zone: ZoneID(zoneName: "Q", ownerRecordName: "_alice"), in: database, logger: TestSupport.logger)
            let all = Array(stored.values)
            XCTAssertEqual(all.count, names.count)

            let zurich = Location(latitude: 47.3769, longitude: 8.5417), bern = Location(latitude: 46.948, longitude: 7.4474)
            let zurichToBern = try XCTUnwrap(GreatCircle.distance(from: zurich, to: bern))
            let times = all.map(\.created.timestamp).sorted()
            var table = Self.filters(zurichToBern: zurichToBern)
            for time in [times[0], times[times.count / 2]] {
                for comparator in ["EQUALS", "NOT_EQUALS", "LESS_THAN", "GREATER_THAN_OR_EQUALS", "NOT_IN"] {
                    let value: Body = comparator == "NOT_IN" ? ["value": [time], "type": "TIMESTAMP_LIST"] : ["value": time, "type": "TIMESTAMP"]
                    table.append(["comparator": comparator, "fieldName": "___createTime", "fieldValue": value])
                    table.append(["comparator": comparator, "fieldName": "___modTime", "fieldValue": value])
                }
            }

            var disagreements: [String] = []
            var answered = 0, refusedByBoth = 0, partial = 0
            for filter in table {
                let query: Body = ["recordType": "Item", "filterBy": [filter]]
                let (status, reply) = try await QueryTests.query(client, fixture, query, extra: ["resultsLimit": 200])
                let parsed: RecordQuery
                do {
                    parsed = try RecordQuery.parse(Self.jsonValue(query))
                } catch {
                    // What the parser refuses, the API refuses too.
                    if status != 400 { disagreements.append("\(filter): parse refused it, the API answered \(status)") }
                    refusedByBoth += 1
                    continue
                }
                let expected = Set(all.filter { parsed.matches($0) }.map(\.recordName))
                guard status == 200 else {
                    // A statement PostgreSQL refuses returns no record; `matches` must accept none either.
                    if !expected.isEmpty { disagreements.append("\(filter): the API answered \(status) \(reply), matches accepts \(expected.sorted())") }
                    continue
                }
                answered += 1
                let returned = Set(QueryTests.names(reply))
                if returned != expected {
                    disagreements.append("\(filter): index \(returned.sorted()), matches \(expected.sorted())")
                }
                if !returned.isEmpty && returned.count < Self.records.count { partial += 1 }
            }
            print("query predicate agreement: \(table.count) filters, \(answered) answered, \(refusedByBoth) refused by both, \(partial) selecting some but not all")
            XCTAssertEqual(disagreements, [], "\(disagreements.count) of \(table.count) filters disagree:\n" + disagreements.joined(separator: "\n"))
            XCTAssertGreaterThan(answered, 1_000, "the table exercises the index")
            XCTAssertGreaterThan(partial, 300, "most filters tell records apart")

            // NEAR's boundary falls on the same side: exactly the distance to Bern includes it, the next smaller double does not.
            let near: (Double) throws -> RecordQuery = { metres in
                try RecordQuery.parse(Self.jsonValue(["recordType": "Item", "filterBy": [
                    ["comparator": "NEAR", "fieldName": "loc", "fieldValue": ["value": Self.zurich, "type": "LOCATION"], "distance": metres]]]))
            }
            XCTAssertEqual(Set(all.filter { try! near(zurichToBern).matches($0) }.map(\.recordName)), ["r01", "r02", "r07"])
            XCTAssertEqual(Set(all.filter { try! near(zurichToBern.nextDown).matches($0) }.map(\.recordName)), ["r01", "r07"])

            // The documented difference: PostgreSQL's parser keeps an e-mail address as one lexeme,
            // so the index does not find its parts; in memory they are words.
            let email: Body = ["recordType": "Item", "filterBy": [["comparator": "CONTAINS_ANY_TOKENS", "fieldName": "___all", "fieldValue": ["value": "example"]]]]
            let (_, emailReply) = try await QueryTests.query(client, fixture, email)
            XCTAssertEqual(QueryTests.names(emailReply), [], "the index keeps john@example.com whole")
            XCTAssertEqual(all.filter { try! RecordQuery.parse(Self.jsonValue(email)).matches($0) }.map(\.recordName), ["r04"], "in memory it is three words")
        }
    }
}
