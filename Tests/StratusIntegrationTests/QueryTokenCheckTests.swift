import Foundation
import StratusCore
@testable import StratusPostgres
import StratusTesting
import StratusWorkers
import XCTest

/// A token filter on a named field: the search vector's GIN index picks the candidates (every
/// searchable field's tokens), and the field's own tokens decide among them in the page's order,
/// after the sort — so a page tokenises about as many fields as it returns (real PostgreSQL).
final class QueryTokenCheckTests: XCTestCase {
    static let database = DatabaseID(container: "iCloud.tokens", environment: .development, scope: .private, owner: "_u")

    func testAFieldsTokensDecideAmongTheCandidatesAfterTheSort() async throws {
        try await TestSupport.withMigratedStore { store, _ in
            let logger = TestSupport.logger
            let zone = ZoneID(zoneName: "Z", ownerRecordName: "_u")
            _ = try await ZoneStore(store: store).modify([.create(zone)], in: Self.database, causation: Causation(requestID: "z"), logger: logger)
            // "red" in the title of every third record; in the body only of the others, which the
            // search vector also holds (candidates the title's test refuses, between those it keeps).
            var titled: [String] = []
            var commands: [RecordStore.Command] = []
            for index in 0..<30 {
                let name = String(format: "r%02d", index)
                let inTitle = index % 3 == 0
                if inTitle { titled.append(name) }
                let fields: [String: FieldValue] = [
                    "title": .string(inTitle ? "a red apple" : "a green pear"),
                    "body": .string(inTitle ? "plain" : "not red at all"),
                ]
                commands.append(RecordStore.Command(type: .create, input: RecordInput(recordName: name, recordType: "Item", fields: fields)))
            }
            _ = try await RecordStore(store: store).modify(commands, zone: zone, in: Self.database, atomic: true, causation: Causation(requestID: "r"), deviceID: nil, logger: logger)
            let events = try await EventLog(store: store).events(after: 0, limit: 1_000, logger: logger)
            _ = try await Applier(projection: IndexerProjection(), store: store).apply(batch: events, logger: logger)

            let queries = QueryStore(store: store)
            for (comparator, words) in [("CONTAINS_ALL_TOKENS", "RED apple"), ("CONTAINS_ANY_TOKENS", "red nothing")] {
                let query = try RecordQuery.parse(.object([
                    "recordType": .string("Item"),
                    "filterBy": .array([.object(["fieldName": .string("title"), "comparator": .string(comparator), "fieldValue": .object(["value": .string(words)])])]),
                ]))
                // Page by page, three at a time: the titled records, in name order, each once.
                var names: [String] = []
                var after: [JSONValue]?
                var pages = 0
                repeat {
                    let page = try await queries.run(query, in: Self.database, scope: .zone("Z"), limit: 3, after: after, logger: logger)
                    names += page.rows.map(\.recordName)
                    after = page.continuation
                    pages += 1
                } while after != nil && pages < 20
                XCTAssertEqual(names, titled, comparator)

                // The title's test filters the ordered candidates (the subquery's rows); the scan
                // that picks and orders them tests only the search vector.
                let plan = try await queries.explain(query, in: Self.database, scope: .zone("Z"), limit: 3, logger: logger)
                let lines = plan.split(separator: "\n").map(String.init)
                let candidates = try XCTUnwrap(lines.firstIndex { $0.contains("Subquery Scan on candidates") }, plan)
                let tests = lines.indices.filter { lines[$0].contains("to_tsvector") }
                XCTAssertEqual(tests, [candidates + 1], "the field is tested once, on the ordered candidates:\n\(plan)")
                XCTAssertTrue(lines[candidates + 1].contains("Filter"), plan)
                // The search is a constant the planner made once: a configuration bound by name is
                // looked up, and the query made again, for every candidate row.
                XCTAssertFalse(plan.contains("to_tsquery"), "the search is made once, not for each candidate:\n\(plan)")
                XCTAssertTrue(plan.contains("::tsquery"), plan)
            }
        }
    }
}
