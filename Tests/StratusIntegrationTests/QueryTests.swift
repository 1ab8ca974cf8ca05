import Foundation
import Hummingbird
import HummingbirdTesting
import PostgresNIO
import StratusAPI
import StratusCore
import StratusKafka
@testable import StratusPostgres
import StratusRelay
import StratusTesting
import StratusWorkers
import XCTest

/// records/query over the query index the indexer maintains from the event pipeline (real PostgreSQL and broker).
final class QueryTests: XCTestCase {
    typealias Fixture = RecordAPITests.Fixture
    typealias Body = [String: Any]

    /// The API plus the relay and the indexer, on a topic of the test's own. Without `indexer`,
    /// only the API runs: events stay in the log until the test applies them.
    static func withStack(indexer: Bool = true, _ body: @Sendable (Fixture, any TestClientProtocol) async throws -> Void) async throws {
        try await APIPipelineFixture.withStack(projection: IndexerProjection(), pipeline: indexer) { fixture, client, _ in try await body(fixture, client) }
    }

    static func query(_ client: any TestClientProtocol, _ fixture: Fixture, _ query: Body, zone: String? = "Q", extra: Body = [:], user: String = "_alice") async throws -> (Int, Body) {
        var body: Body = ["query": query]
        if let zone { body["zoneID"] = ["zoneName": zone] }
        body.merge(extra) { _, new in new }
        return try await RecordAPITests.post(client, fixture.path("records/query", user: user), body)
    }

    static func names(_ reply: Body) -> [String] {
        (reply["records"] as? [Body] ?? []).compactMap { $0["recordName"] as? String }
    }

    /// Waits (bounded) until the index answers `query` with `count` records.
    static func waitForIndex(_ client: any TestClientProtocol, _ fixture: Fixture, _ query: Body, zone: String? = "Q", extra: Body = [:], count: Int) async throws {
        try await TestSupport.eventually(timeout: .seconds(60), "the indexer to index \(count) records") {
            let (_, reply) = try await Self.query(client, fixture, query, zone: zone, extra: extra.merging(["resultsLimit": 200]) { a, _ in a })
            return Self.names(reply).count == count
        }
    }

    static func item(_ name: String, _ fields: Body) -> Body {
        ["operationType": "create", "record": RecordAPITests.note(name, fields, type: "Item")]
    }

    /// A worker's batch reaches the index with each run of saves and each run of deletions as one
    /// statement: the same index as event by event — a record saved twice in a run at its latest,
    /// deleted records gone, a re-created one back, a save or deletion older than what the index
    /// holds changing nothing — and a run naming a record twice is no error.
    func testABatchOfSavesAndDeletionsIndexesLikeOneEventAtATime() async throws {
        try await Self.withStack(indexer: false) { fixture, client in
            try await RecordAPITests.createZone(client, fixture, "Q")
            let (created, _) = try await RecordAPITests.modify(client, fixture, zone: "Q", (1...6).map { index in
                ["operationType": "create", "record": RecordAPITests.note("r\(index)", ["count": ["value": index]], type: "Item")]
            })
            XCTAssertEqual(created, 200)
            // r6 again in the same run of saves: its latest count is the one indexed.
            let (updated, _) = try await RecordAPITests.modify(client, fixture, zone: "Q", [
                ["operationType": "forceUpdate", "record": RecordAPITests.note("r6", ["count": ["value": 60]], type: "Item")],
            ])
            XCTAssertEqual(updated, 200)
            let (deleted, _) = try await RecordAPITests.modify(client, fixture, zone: "Q", ["r2", "r3", "r4", "r5"].map { name in
                ["operationType": "forceDelete", "record": ["recordName": name]]
            })
            XCTAssertEqual(deleted, 200)
            let (recreated, _) = try await RecordAPITests.modify(client, fixture, zone: "Q", [
                ["operationType": "create", "record": RecordAPITests.note("r3", ["count": ["value": 30]], type: "Item")],
            ])
            XCTAssertEqual(recreated, 200)
            let events = try await EventLog(store: fixture.store).events(after: 0, limit: 10_000, logger: TestSupport.logger)
            let applied = try await Applier(projection: IndexerProjection(), store: fixture.store).apply(batch: events, logger: TestSupport.logger)
            XCTAssertEqual(applied, events.count)
            let everything: Body = ["recordType": "Item", "sortBy": [["fieldName": "count", "ascending": true]]]
            let (status, reply) = try await Self.query(client, fixture, everything)
            XCTAssertEqual(status, 200, "\(reply)")
            XCTAssertEqual(Self.names(reply), ["r1", "r3", "r6"])
            let counts = (reply["records"] as? [Body] ?? []).map { (($0["fields"] as? Body)?["count"] as? Body)?["value"] as? Int }
            XCTAssertEqual(counts, [1, 30, 60], "r6 at its latest save")
            // The deletions again, each twice in one run, and the first ones late; then the saves of
            // the records the index holds again, late, r6's two and r3's two in one run: nothing
            // changes. (A deleted record's old save never comes again: the zone's checkpoint.)
            let deletions = events.filter { $0.type == RecordDeleted.eventType }
            XCTAssertEqual(deletions.count, 4)
            let saves = events.filter { event in
                event.type == RecordSaved.eventType && ["r1", "r3", "r6"].contains((try? event.decode(RecordSaved.self))?.record.recordName)
            }
            XCTAssertEqual(saves.count, 5)
            try await fixture.store.serializable(logger: TestSupport.logger) { transaction in
                try await IndexerProjection().apply(deletions + deletions, in: transaction, logger: TestSupport.logger)
                try await IndexerProjection().apply(saves, in: transaction, logger: TestSupport.logger)
            }
            let (_, again) = try await Self.query(client, fixture, everything)
            XCTAssertEqual(Self.names(again), ["r1", "r3", "r6"], "r3's re-creation is newer than its deletion and its first save")
            let countsAgain = (again["records"] as? [Body] ?? []).map { (($0["fields"] as? Body)?["count"] as? Body)?["value"] as? Int }
            XCTAssertEqual(countsAgain, [1, 30, 60])
        }
    }

    func testADeletionLeavesAMarkerOnlyWhereAnOlderSaveMayStillCome() async throws {
        try await Self.withStack(indexer: false) { fixture, client in
            try await RecordAPITests.createZone(client, fixture, "Q")
            var (status, reply) = try await RecordAPITests.modify(client, fixture, zone: "Q", [
                ["operationType": "create", "record": RecordAPITests.note("custom", ["count": ["value": 1]], type: "Item")]])
            XCTAssertEqual(status, 200, "\(reply)")
            (status, reply) = try await RecordAPITests.modify(client, fixture, zone: nil, [
                ["operationType": "create", "record": RecordAPITests.note("default", ["count": ["value": 2]], type: "Item")]])
            XCTAssertEqual(status, 200, "\(reply)")
            // A rebuild is filling generation 2 beside the live generation 1.
            _ = try await fixture.store.withConnection { connection in
                try await connection.query("INSERT INTO query_index.generations (generation, state) VALUES (2, 'building')", logger: TestSupport.logger)
            }
            let saves = try await EventLog(store: fixture.store).events(after: 0, limit: 1_000, logger: TestSupport.logger)
            _ = try await Applier(projection: IndexerProjection(), store: fixture.store).apply(batch: saves, logger: TestSupport.logger)
            let rows1 = try await Self.indexRows(fixture.store)
            XCTAssertEqual(rows1, ["1/custom/live", "1/default/live", "2/custom/live", "2/default/live"])

            (status, reply) = try await RecordAPITests.modify(client, fixture, zone: "Q", [["operationType": "forceDelete", "record": ["recordName": "custom"]]])
            XCTAssertEqual(status, 200, "\(reply)")
            (status, reply) = try await RecordAPITests.modify(client, fixture, zone: nil, [["operationType": "forceDelete", "record": ["recordName": "default"]]])
            XCTAssertEqual(status, 200, "\(reply)")
            let all = try await EventLog(store: fixture.store).events(after: 0, limit: 1_000, logger: TestSupport.logger)
            let deletions = Array(all.dropFirst(saves.count))
            XCTAssertEqual(deletions.map(\.type), [RecordDeleted.eventType, RecordDeleted.eventType])
            _ = try await Applier(projection: IndexerProjection(), store: fixture.store).apply(batch: deletions, logger: TestSupport.logger)
            // The live custom zone's row is gone; the default zone keeps a marker (how far the index has
            // come is read from it), and so does the generation being built.
            let rows2 = try await Self.indexRows(fixture.store)
            XCTAssertEqual(rows2, ["1/default/deleted", "2/custom/deleted", "2/default/deleted"])

            // The rebuild now reaches the old save: the marker outranks it.
            guard let oldSave = saves.first(where: { $0.type == RecordSaved.eventType && (try? $0.decode(RecordSaved.self).record.recordName) == "custom" }) else {
                return XCTFail("no save of custom in \(saves.map(\.type))")
            }
            try await fixture.store.serializable(logger: TestSupport.logger) { transaction in
                try await QueryIndexStore.apply(try oldSave.decode(RecordSaved.self), event: oldSave, generations: [2], in: transaction)
            }
            let rows3 = try await Self.indexRows(fixture.store)
            XCTAssertEqual(rows3, ["1/default/deleted", "2/custom/deleted", "2/default/deleted"])
        }
    }

    /// Every row of the query index as generation/record/live or deleted, in order.
    static func indexRows(_ store: PostgresStore) async throws -> [String] {
        try await store.withConnection { connection in
            var rows: [String] = []
            for try await row in try await connection.query("""
                SELECT generation || '/' || record_name || '/' || CASE WHEN deleted THEN 'deleted' ELSE 'live' END
                FROM query_index.records ORDER BY generation, record_name
                """, logger: TestSupport.logger).decode(String.self) { rows.append(row) }
            return rows
        }
    }

    func testEveryComparatorSortOrderAndStablePaging() async throws {
        try await Self.withStack { fixture, client in
            try await RecordAPITests.createZone(client, fixture, "Q")
            let zurich: Body = ["latitude": 47.3769, "longitude": 8.5417]
            let bern: Body = ["latitude": 46.948, "longitude": 7.4474]
            let paris: Body = ["latitude": 48.8566, "longitude": 2.3522]
            let rows: [(String, Body)] = [
                ("apple", ["title": ["value": "Red apple pie"], "count": ["value": 3], "price": ["value": 1.5], "when": ["value": 1000, "type": "TIMESTAMP"],
                           "tags": ["value": ["fruit", "red"]], "nums": ["value": [1, 2]], "ref": ["value": ["recordName": "x"], "type": "REFERENCE"], "place": ["value": zurich]]),
                ("banana", ["title": ["value": "Yellow banana bread"], "count": ["value": 7], "price": ["value": 0.5], "when": ["value": 2000, "type": "TIMESTAMP"],
                            "tags": ["value": ["fruit", "yellow"]], "nums": ["value": [2, 3]], "ref": ["value": ["recordName": "y"], "type": "REFERENCE"], "place": ["value": bern]]),
                ("cherry", ["title": ["value": "Cherry tart, red"], "count": ["value": 12], "price": ["value": 4.25], "when": ["value": 3000, "type": "TIMESTAMP"],
                            "tags": ["value": ["red", "stone"]], "nums": ["value": [5]], "ref": ["value": ["recordName": "x"], "type": "REFERENCE"], "place": ["value": paris]]),
                ("date", ["title": ["value": "Dates"], "count": ["value": 7], "price": ["value": 3.0], "when": ["value": 4000, "type": "TIMESTAMP"]]),
            ]
            let (status, _) = try await RecordAPITests.modify(client, fixture, zone: "Q", rows.map { Self.item($0.0, $0.1) })
            XCTAssertEqual(status, 200)
            _ = try await RecordAPITests.modify(client, fixture, zone: "Q", [["operationType": "create", "record": RecordAPITests.note("other", ["title": ["value": "Red apple"]], type: "Other")]])
            try await Self.waitForIndex(client, fixture, ["recordType": "Item"], count: 4)

            func check(_ filter: Body, _ expected: [String], _ line: UInt = #line) async throws {
                let (status, reply) = try await Self.query(client, fixture, ["recordType": "Item", "filterBy": [filter], "sortBy": [["fieldName": "___recordID"]]])
                XCTAssertEqual(status, 200, "\(filter) → \(reply)", line: line)
                XCTAssertEqual(Self.names(reply), expected, "\(filter)", line: line)
            }
            func value(_ v: Any, _ type: String? = nil) -> Body { type.map { ["value": v, "type": $0] } ?? ["value": v] }
            try await check(["comparator": "EQUALS", "fieldName": "count", "fieldValue": value(7)], ["banana", "date"])
            try await check(["comparator": "NOT_EQUALS", "fieldName": "count", "fieldValue": value(7)], ["apple", "cherry"])
            try await check(["comparator": "LESS_THAN", "fieldName": "count", "fieldValue": value(7)], ["apple"])
            try await check(["comparator": "LESS_THAN_OR_EQUALS", "fieldName": "count", "fieldValue": value(7)], ["apple", "banana", "date"])
            try await check(["comparator": "GREATER_THAN", "fieldName": "price", "fieldValue": value(1.5)], ["cherry", "date"])
            try await check(["comparator": "GREATER_THAN_OR_EQUALS", "fieldName": "when", "fieldValue": value(3000, "TIMESTAMP")], ["cherry", "date"])
            try await check(["comparator": "EQUALS", "fieldName": "title", "fieldValue": value("Dates")], ["date"])
            try await check(["comparator": "LESS_THAN", "fieldName": "title", "fieldValue": value("Cherry")], [])
            try await check(["comparator": "IN", "fieldName": "count", "fieldValue": value([3, 12], "INT64_LIST")], ["apple", "cherry"])
            try await check(["comparator": "NOT_IN", "fieldName": "count", "fieldValue": value([3, 12], "INT64_LIST")], ["banana", "date"])
            try await check(["comparator": "IN", "fieldName": "title", "fieldValue": value(["Dates", "nope"])], ["date"])
            try await check(["comparator": "BEGINS_WITH", "fieldName": "title", "fieldValue": value("Red")], ["apple"])
            try await check(["comparator": "NOT_BEGINS_WITH", "fieldName": "title", "fieldValue": value("Red")], ["banana", "cherry", "date"])
            try await check(["comparator": "CONTAINS_ALL_TOKENS", "fieldName": "title", "fieldValue": value("red TART")], ["cherry"])
            try await check(["comparator": "CONTAINS_ANY_TOKENS", "fieldName": "title", "fieldValue": value("bread pie")], ["apple", "banana"])
            try await check(["comparator": "CONTAINS_ALL_TOKENS", "fieldName": "___all", "fieldValue": value("red")], ["apple", "cherry"])
            try await check(["comparator": "CONTAINS_ANY_TOKENS", "fieldName": "___all", "fieldValue": value("yellow stone")], ["banana", "cherry"])
            try await check(["comparator": "LIST_CONTAINS", "fieldName": "tags", "fieldValue": value("red")], ["apple", "cherry"])
            try await check(["comparator": "NOT_LIST_CONTAINS", "fieldName": "tags", "fieldValue": value("red")], ["banana", "date"])
            try await check(["comparator": "LIST_CONTAINS", "fieldName": "nums", "fieldValue": value(2)], ["apple", "banana"])
            try await check(["comparator": "LIST_CONTAINS_ANY", "fieldName": "tags", "fieldValue": value(["yellow", "stone"])], ["banana", "cherry"])
            try await check(["comparator": "NOT_LIST_CONTAINS_ANY", "fieldName": "tags", "fieldValue": value(["yellow", "stone"])], ["apple", "date"])
            try await check(["comparator": "LIST_CONTAINS_ALL", "fieldName": "tags", "fieldValue": value(["fruit", "red"])], ["apple"])
            try await check(["comparator": "NOT_LIST_CONTAINS_ALL", "fieldName": "tags", "fieldValue": value(["fruit", "red"])], ["banana", "cherry", "date"])
            try await check(["comparator": "LIST_MEMBER_BEGINS_WITH", "fieldName": "tags", "fieldValue": value("ye")], ["banana"])
            try await check(["comparator": "NOT_LIST_MEMBER_BEGINS_WITH", "fieldName": "tags", "fieldValue": value("ye")], ["apple", "cherry", "date"])
            try await check(["comparator": "EQUALS", "fieldName": "ref", "fieldValue": value(["recordName": "x"], "REFERENCE")], ["apple", "cherry"])
            try await check(["comparator": "NEAR", "fieldName": "place", "fieldValue": value(zurich, "LOCATION"), "distance": 100_000], ["apple", "banana"])
            try await check(["comparator": "NEAR", "fieldName": "place", "fieldValue": value(zurich, "LOCATION"), "distance": 1000], ["apple"])
            try await check(["comparator": "EQUALS", "fieldName": "___recordID", "fieldValue": value("banana")], ["banana"])
            // Filters are ANDed.
            let (_, both) = try await Self.query(client, fixture, ["recordType": "Item", "filterBy": [
                ["comparator": "LIST_CONTAINS", "fieldName": "tags", "fieldValue": value("red")], ["comparator": "GREATER_THAN", "fieldName": "count", "fieldValue": value(5)],
            ]])
            XCTAssertEqual(Self.names(both), ["cherry"])

            // Sorts: a field descending (ties by name), creation time, distance from a place.
            var (_, reply) = try await Self.query(client, fixture, ["recordType": "Item", "sortBy": [["fieldName": "count", "ascending": false]]])
            XCTAssertEqual(Self.names(reply), ["cherry", "date", "banana", "apple"], "ties break in the first key's direction")
            (_, reply) = try await Self.query(client, fixture, ["recordType": "Item", "sortBy": [["fieldName": "title"]]])
            XCTAssertEqual(Self.names(reply), ["cherry", "date", "apple", "banana"])
            (_, reply) = try await Self.query(client, fixture, ["recordType": "Item", "filterBy": [["comparator": "NEAR", "fieldName": "place", "fieldValue": value(paris, "LOCATION"), "distance": 1_000_000]],
                                                                "sortBy": [["fieldName": "place", "relativeLocation": ["value": paris, "type": "LOCATION"]]]])
            XCTAssertEqual(Self.names(reply), ["cherry", "banana", "apple"])
            (_, reply) = try await Self.query(client, fixture, ["recordType": "Item", "sortBy": [["fieldName": "___modTime", "ascending": false], ["fieldName": "___recordID"]]], extra: ["desiredKeys": ["count"]])
            XCTAssertEqual(Set(Self.names(reply)), ["apple", "banana", "cherry", "date"])
            XCTAssertEqual(Set((reply["records"] as? [Body] ?? []).flatMap { RecordAPITests.fields($0).keys }), ["count"], "desiredKeys trims fields")

            // Paging: three at a time by count, while records are written between pages.
            var seen: [String] = []
            var marker: String?
            var pages = 0
            repeat {
                var extra: Body = ["resultsLimit": 3]
                if let marker { extra["continuationMarker"] = marker }
                (_, reply) = try await Self.query(client, fixture, ["recordType": "Item", "sortBy": [["fieldName": "count"]]], extra: extra)
                seen += Self.names(reply)
                marker = reply["continuationMarker"] as? String
                if let marker {
                    // Apple's markers are standard base64 of bytes; clients decode them to check.
                    XCTAssertTrue(WireCompatibilityTests.isStandardBase64(marker), "the marker is standard padded base64: \(marker)")
                }
                pages += 1
                if pages == 1 {
                    // One sorts before the position reached, one after: paging neither repeats nor skips.
                    _ = try await RecordAPITests.modify(client, fixture, zone: "Q", [Self.item("early", ["count": ["value": 1]]), Self.item("late", ["count": ["value": 99]])])
                    try await Self.waitForIndex(client, fixture, ["recordType": "Item"], count: 6)
                }
            } while marker != nil && pages < 10
            XCTAssertEqual(seen, ["apple", "banana", "date", "cherry", "late"], "pages continue after the last row seen")
            XCTAssertEqual(Set(seen).count, seen.count, "no record twice")
            // A marker is bound to its query.
            let (_, firstPage) = try await Self.query(client, fixture, ["recordType": "Item"], extra: ["resultsLimit": 1])
            let (badStatus, bad) = try await Self.query(client, fixture, ["recordType": "Other"], extra: ["continuationMarker": firstPage["continuationMarker"] as! String])
            XCTAssertEqual(badStatus, 400, "\(bad)")
        }
    }

    /// A query without a sort orders by zone and record name as the database compares text, which is
    /// the order the jsonb keys gave before the names were sorted as plain columns: page by page,
    /// in one zone and zone-wide, with records written between pages, every record once, in the
    /// order PostgreSQL gives the names as jsonb strings. Two names Swift calls equal ("é" and
    /// "e" + U+0301) saved in one batch are two records of the index.
    func testAnUnsortedQueryPagesByZoneAndNameInTheOrderTheJSONKeysGave() async throws {
        try await Self.withStack { fixture, client in
            let names = ["b", "B", "a", "_x", "a b", "ab", "é", "e\u{301}", "e", "Z", "10", "9", "z", "Ab", "a-b", "ä"]
            for zone in ["U", "V"] {
                try await RecordAPITests.createZone(client, fixture, zone)
                let (status, reply) = try await RecordAPITests.modify(client, fixture, zone: zone, names.map { Self.item($0, ["n": ["value": 1]]) })
                XCTAssertEqual(status, 200, "\(reply)")
                let refused = reply.filter { $0.keys.contains("serverErrorCode") }
                XCTAssertEqual(refused.count, 0, "\(refused)")
            }
            try await Self.waitForIndex(client, fixture, ["recordType": "Item"], zone: "U", count: names.count)
            try await Self.waitForIndex(client, fixture, ["recordType": "Item"], zone: nil, extra: ["zoneWide": true], count: 2 * names.count)

            /// The names' order as PostgreSQL compares them as jsonb strings (`query_index.key`).
            func jsonOrder(_ pairs: [(String, String)]) async throws -> [String] {
                try await fixture.store.withConnection { connection in
                    let rows = try await connection.query("""
                        SELECT z || '/' || n FROM unnest(\(pairs.map(\.0))::text[], \(pairs.map(\.1))::text[]) AS t(z, n)
                        ORDER BY query_index.key(z), query_index.key(n)
                        """, logger: TestSupport.logger)
                    var ordered: [String] = []
                    for try await name in rows.decode(String.self) { ordered.append(name) }
                    return ordered
                }
            }
            func pages(zone: String?, writeBetween: [(zone: String, name: String)], thenIndexed total: Int) async throws -> [String] {
                var seen: [String] = []
                var marker: String?
                var pages = 0
                repeat {
                    var extra: Body = ["resultsLimit": 3]
                    if zone == nil { extra["zoneWide"] = true }
                    if let marker { extra["continuationMarker"] = marker }
                    let (status, reply) = try await Self.query(client, fixture, ["recordType": "Item"], zone: zone, extra: extra)
                    XCTAssertEqual(status, 200, "\(reply)")
                    seen += (reply["records"] as? [Body] ?? []).map { record in
                        let zoneName = (record["zoneID"] as? Body)?["zoneName"] as? String ?? zone ?? "?"
                        return "\(zoneName)/\(record["recordName"] as? String ?? "?")"
                    }
                    marker = reply["continuationMarker"] as? String
                    pages += 1
                    if pages == 2 {
                        for (zone, name) in writeBetween {
                            _ = try await RecordAPITests.modify(client, fixture, zone: zone, [Self.item(name, ["n": ["value": 2]])])
                        }
                        try await Self.waitForIndex(client, fixture, ["recordType": "Item"], zone: nil, extra: ["zoneWide": true], count: total)
                    }
                } while marker != nil && pages < 40
                return seen
            }

            // One zone: a record before the position reached (never shown) and one after (shown).
            let inZone = try await pages(zone: "U", writeBetween: [("U", "!"), ("U", "zz")], thenIndexed: 2 * names.count + 2)
            let expectedInZone = try await jsonOrder(names.map { ("U", $0) } + [("U", "zz")])
            XCTAssertEqual(inZone, expectedInZone)
            XCTAssertEqual(inZone.count, names.count + 1, "every record once, the later one after the position")

            // Zone-wide: the zones in order, each zone's names in order.
            let zoneWide = try await pages(zone: nil, writeBetween: [("V", "zzz")], thenIndexed: 2 * names.count + 3)
            let everything = names.map { ("U", $0) } + [("U", "!"), ("U", "zz")] + names.map { ("V", $0) } + [("V", "zzz")]
            let expectedZoneWide = try await jsonOrder(everything)
            XCTAssertEqual(zoneWide, expectedZoneWide)
        }
    }

    /// A load of records leaves the query index analysed by the indexer itself (`PlannerStatistics`),
    /// not a minute later by autovacuum: its queries are never planned without statistics.
    func testALoadOfRecordsLeavesTheQueryIndexAnalysedByTheIndexer() async throws {
        try await Self.withStack { fixture, client in
            // Only the keeper analyses the index here: autovacuum, when a loaded machine lets it come
            // first, leaves the keeper rightly nothing to do, and its analysis is not a manual one.
            try await fixture.store.withConnection { connection in
                _ = try await connection.query("ALTER TABLE query_index.records SET (autovacuum_enabled = false)", logger: TestSupport.logger)
            }
            try await RecordAPITests.createZone(client, fixture, "Load")
            for batch in 0..<6 {
                let (status, reply) = try await RecordAPITests.modify(client, fixture, zone: "Load", (0..<200).map { Self.item("r\(batch)-\($0)", ["n": ["value": $0]]) })
                XCTAssertEqual(status, 200, "\(reply)")
            }
            try await PlannerStatisticsTests.waitForAnAnalysis(of: "query_index.records", withRows: 1_000, fixture.store)
        }
    }

    func testZoneWideQueriesAccessControlAndBadInput() async throws {
        try await Self.withStack { fixture, client in
            for zone in ["Q", "P"] { try await RecordAPITests.createZone(client, fixture, zone) }
            _ = try await RecordAPITests.modify(client, fixture, zone: "Q", [Self.item("q1", ["n": ["value": 1]])])
            _ = try await RecordAPITests.modify(client, fixture, zone: "P", [Self.item("p1", ["n": ["value": 2]])])
            try await Self.waitForIndex(client, fixture, ["recordType": "Item"], zone: nil, extra: ["zoneWide": true], count: 2)
            var (_, reply) = try await Self.query(client, fixture, ["recordType": "Item"], zone: "P")
            XCTAssertEqual(Self.names(reply), ["p1"])
            XCTAssertEqual(((reply["records"] as? [Body])?.first?["zoneID"] as? Body)?["zoneName"] as? String, "P")
            // Bob sees none of alice's records, zone-wide or not.
            (_, reply) = try await Self.query(client, fixture, ["recordType": "Item"], zone: nil, extra: ["zoneWide": true], user: "_bob")
            XCTAssertEqual(Self.names(reply), [])
            // Deleting a zone removes its records from the index.
            _ = try await RecordAPITests.post(client, fixture.path("zones/modify"), ["operations": [["operationType": "delete", "zone": ["zoneID": ["zoneName": "P"]]]]])
            try await Self.waitForIndex(client, fixture, ["recordType": "Item"], zone: nil, extra: ["zoneWide": true], count: 1)
            // Bad input is BAD_REQUEST with a reason.
            let bad: [Body] = [
                [:], ["recordType": "Bad Type"], ["recordType": "Item", "filterBy": [["comparator": "SOUNDS_LIKE", "fieldName": "n", "fieldValue": ["value": 1]]]],
                ["recordType": "Item", "filterBy": [["comparator": "NEAR", "fieldName": "p", "fieldValue": ["value": ["latitude": 1, "longitude": 2]]]]],
                ["recordType": "Item", "filterBy": [["comparator": "IN", "fieldName": "n", "fieldValue": ["value": 1]]]],
                ["recordType": "Item", "filterBy": [["comparator": "EQUALS", "fieldName": "___all", "fieldValue": ["value": "x"]]]],
                ["recordType": "Item", "filterBy": [["comparator": "CONTAINS_ALL_TOKENS", "fieldName": "n", "fieldValue": ["value": "!!!"]]]],
                ["recordType": "Item", "sortBy": [["fieldName": "n", "ascending": "up"]]],
            ]
            for query in bad {
                let (status, reply) = try await Self.query(client, fixture, query)
                XCTAssertEqual(status, 400, "\(query) → \(reply)")
                XCTAssertEqual(reply["serverErrorCode"] as? String, "BAD_REQUEST", "\(query)")
            }
            // System fields compare typed columns: a value or comparator a column cannot take is
            // BAD_REQUEST naming the field, never a type error from PostgreSQL (a 500).
            let location: Body = ["value": ["latitude": 1, "longitude": 2]]
            let badSystem: [(String, String, Body, Body)] = [
                ("___createTime", "EQUALS", ["value": "x"], [:]),
                ("___createTime", "EQUALS", ["value": 1.5], [:]),
                ("___modTime", "GREATER_THAN", ["value": ["recordName": "q1"], "type": "REFERENCE"], [:]),
                ("___createTime", "IN", ["value": ["a", "b"]], [:]),
                ("___modTime", "NOT_IN", ["value": 5], [:]),
                ("___modTime", "BEGINS_WITH", ["value": "1"], [:]),
                ("___createTime", "LIST_CONTAINS", ["value": 1], [:]),
                ("___createTime", "CONTAINS_ANY_TOKENS", ["value": "x"], [:]),
                ("___createTime", "NEAR", location, ["distance": 5]),
                ("___recordID", "EQUALS", ["value": 5], [:]),
                ("___recordID", "LESS_THAN", ["value": 1000, "type": "TIMESTAMP"], [:]),
                ("___recordID", "IN", ["value": [1, 2]], [:]),
                ("___recordID", "NOT_IN", ["value": "q1"], [:]),
                ("___recordID", "BEGINS_WITH", ["value": ["recordName": "q1"], "type": "REFERENCE"], [:]),
                ("___recordID", "CONTAINS_ALL_TOKENS", ["value": "q1"], [:]),
                ("___recordID", "LIST_CONTAINS_ALL", ["value": ["q1"]], [:]),
                ("___recordID", "NEAR", location, ["distance": 5]),
            ]
            for (field, comparator, value, extra) in badSystem {
                let filter = (["comparator": comparator, "fieldName": field, "fieldValue": value] as Body).merging(extra) { a, _ in a }
                let (status, reply) = try await Self.query(client, fixture, ["recordType": "Item", "filterBy": [filter]])
                XCTAssertEqual(status, 400, "\(filter) → \(reply)")
                XCTAssertEqual(reply["serverErrorCode"] as? String, "BAD_REQUEST", "\(filter)")
                XCTAssertTrue((reply["reason"] as? String ?? "").contains(field), "the reason names \(field): \(reply)")
            }
            // …and the values they can take work.
            let now = Int(Date().timeIntervalSince1970 * 1000), hour = 3_600_000
            let goodSystem: [(String, String, Body, [String])] = [
                ("___createTime", "GREATER_THAN", ["value": now - hour, "type": "TIMESTAMP"], ["q1"]),
                ("___createTime", "GREATER_THAN", ["value": now + hour, "type": "TIMESTAMP"], []),
                ("___modTime", "LESS_THAN_OR_EQUALS", ["value": now + hour], ["q1"]),
                ("___createTime", "IN", ["value": [Int](), "type": "TIMESTAMP_LIST"], []),
                ("___recordID", "IN", ["value": ["q1", "nope"]], ["q1"]),
                ("___recordID", "NOT_IN", ["value": ["q1"]], []),
                ("___recordID", "IN", ["value": [["recordName": "q1"]], "type": "REFERENCE_LIST"], ["q1"]),
                ("___recordID", "BEGINS_WITH", ["value": "q"], ["q1"]),
            ]
            for (field, comparator, value, expected) in goodSystem {
                let filter: Body = ["comparator": comparator, "fieldName": field, "fieldValue": value]
                let (status, reply) = try await Self.query(client, fixture, ["recordType": "Item", "filterBy": [filter]])
                XCTAssertEqual(status, 200, "\(filter) → \(reply)")
                XCTAssertEqual(Self.names(reply), expected, "\(filter)")
            }
            let (markerStatus, _) = try await Self.query(client, fixture, ["recordType": "Item"], extra: ["continuationMarker": "forged"])
            XCTAssertEqual(markerStatus, 400)
        }
    }

    /// After a random workload, a rebuilt index generation answers a battery of queries exactly as
    /// the live one did, and so does a full replay.
    func testRebuildAnswersExactlyLikeTheLiveIndex() async throws {
        try await Self.withStack { fixture, client in
            try await RecordAPITests.createZone(client, fixture, "Q")
            var random = SplitMix64(seed: 42)
            for step in 0..<120 {
                let name = "r\(random.next() % 40)"
                let words = ["alpha", "beta", "gamma", "delta"]
                let operation: Body = random.next() % 5 == 0
                    ? ["operationType": "forceDelete", "record": ["recordName": name]]
                    : ["operationType": "forceReplace", "record": RecordAPITests.note(name, [
                        "n": ["value": Int(random.next() % 10)], "w": ["value": words[Int(random.next() % 4)] + " \(step)"],
                    ], type: "Item")]
                _ = try await RecordAPITests.modify(client, fixture, zone: "Q", [operation])
            }
            let server = try await SyncTests.serverRecordCount(fixture, zone: "Q")
            try await Self.waitForIndex(client, fixture, ["recordType": "Item"], count: server)
            // The count can match before the last replacements are applied: wait for all of them.
            try await TestSupport.eventually(timeout: .seconds(60), "the indexer to apply every event of the zone") {
                try await Self.behind(client, fixture, zone: "Q") == "0"
            }
            let battery: [Body] = [
                ["recordType": "Item", "sortBy": [["fieldName": "n"], ["fieldName": "___recordID"]]],
                ["recordType": "Item", "filterBy": [["comparator": "GREATER_THAN", "fieldName": "n", "fieldValue": ["value": 4]]]],
                ["recordType": "Item", "filterBy": [["comparator": "CONTAINS_ANY_TOKENS", "fieldName": "___all", "fieldValue": ["value": "alpha gamma"]]]],
                ["recordType": "Item", "filterBy": [["comparator": "BEGINS_WITH", "fieldName": "w", "fieldValue": ["value": "be"]]], "sortBy": [["fieldName": "___modTime", "ascending": false]]],
            ]
            func answers() async throws -> [[String]] {
                var all: [[String]] = []
                for query in battery {
                    let (_, reply) = try await Self.query(client, fixture, query, extra: ["resultsLimit": 200])
                    all.append(Self.names(reply))
                }
                return all
            }
            let live = try await answers()
            XCTAssertGreaterThan(live[0].count, 0)
            let rebuilt = try await Reindex(store: fixture.store).run(logger: TestSupport.logger)
            XCTAssertEqual(rebuilt.generation, 2)
            let afterReindex = try await answers()
            XCTAssertEqual(afterReindex, live, "a new generation built from the event log answers like the live one")
            try await Rebuild(projection: IndexerProjection(), store: fixture.store, kafka: nil, topic: "unused").run(logger: TestSupport.logger)
            let afterReplay = try await answers()
            XCTAssertEqual(afterReplay, live, "a full replay answers like the live index")
        }
    }
}

extension SyncTests {
    /// How many records a zone holds on the server.
    static func serverRecordCount(_ fixture: RecordAPITests.Fixture, zone: String) async throws -> Int {
        let database = DatabaseID(container: fixture.container, environment: .development, scope: .private, owner: "_alice")
        let page = try await SyncStore(store: fixture.store).changes(
            zone: ZoneID(zoneName: zone, ownerRecordName: "_alice"), in: database, incarnation: nil, since: 0, limit: 100_000, logger: TestSupport.logger)
        return page.changes.count
    }
}

extension QueryTests {
    /// The indexer is stopped in the middle of a burst and started again: it resumes from its
    /// committed position and checkpoints, and its index equals a full rebuild.
    func testIndexerStoppedMidBatchResumesToTheSameIndex() async throws {
        let brokers = try TestSupport.kafkaBrokers()
        try await TestSupport.withMigratedStore { store, _ in
            let database = DatabaseID(container: "iCloud.kill", environment: .development, scope: .private, owner: "_u")
            let zoneID = ZoneID(zoneName: "K", ownerRecordName: "_u")
            _ = try await ZoneStore(store: store).modify([.create(zoneID)], in: database, causation: Causation(requestID: "k"), logger: TestSupport.logger)
            let topic = "kill-" + UUID().uuidString.prefix(8).lowercased()
            var relayConfiguration = RelayConfiguration()
            relayConfiguration.topic = topic
            relayConfiguration.partitions = 2
            var workerConfiguration = WorkerConfiguration()
            workerConfiguration.topic = topic
            workerConfiguration.consumerGroupSuffix = topic
            workerConfiguration.batchSize = 50
            let workerSettings = workerConfiguration
            let kafka = KafkaClientConfiguration(brokers: brokers)
            let relay = Relay(store: store, kafka: kafka, configuration: relayConfiguration, logger: TestSupport.logger)
            let records = RecordStore(store: store)
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { try await relay.run() }
                defer { group.cancelAll() }
                var random = SplitMix64(seed: 7)
                for round in 0..<20 {
                    let commands = (0..<25).map { index -> RecordStore.Command in
                        let name = "r\(random.next() % 200)"
                        return random.next() % 6 == 0
                            ? RecordStore.Command(type: .forceDelete, input: RecordInput(recordName: name))
                            : RecordStore.Command(type: .forceReplace, input: RecordInput(recordName: name, recordType: "Item", fields: ["n": .int64(Int64(round * 100 + index))]))
                    }
                    _ = try await records.modify(commands, zone: zoneID, in: database, atomic: false, causation: Causation(requestID: "k\(round)"), deviceID: nil, logger: TestSupport.logger)
                }
                // First life: stopped as soon as it has applied part of the burst.
                let first = Task {
                    try await Worker(projection: IndexerProjection(), store: store, kafka: kafka, configuration: workerSettings, logger: TestSupport.logger).run()
                }
                try await TestSupport.eventually(timeout: .seconds(60), "the indexer to start applying") { try await Self.indexedRows(store) > 0 }
                first.cancel()
                _ = await first.result
                let partial = try await Self.indexedRows(store)
                // Second life: the same consumer group, from its committed offsets.
                let second = Task {
                    try await Worker(projection: IndexerProjection(), store: store, kafka: kafka, configuration: workerSettings, logger: TestSupport.logger).run()
                }
                defer { second.cancel() }
                let expected = try await SyncTests.liveRecordNames(store, database: database, zone: zoneID)
                try await TestSupport.eventually(timeout: .seconds(90), "the restarted indexer to converge") {
                    try await Self.liveIndexNames(store) == expected
                }
                print("indexer restart: \(partial) rows before the stop, \(expected.count) after")
            }
            let live = try await Self.indexSnapshot(store)
            try await Rebuild(projection: IndexerProjection(), store: store, kafka: nil, topic: topic).run(logger: TestSupport.logger)
            let rebuilt = try await Self.indexSnapshot(store)
            XCTAssertEqual(rebuilt, live, "after a stop and restart the index equals a full rebuild")
        }
    }

    static func indexedRows(_ store: PostgresStore) async throws -> Int {
        try await QueryIndexScaleTests.indexedAny(store)
    }

    static func liveIndexNames(_ store: PostgresStore) async throws -> Set<String> {
        try await QueryIndexScaleTests.strings(store, "SELECT record_name FROM query_index.records WHERE NOT deleted")
    }

    static func indexSnapshot(_ store: PostgresStore) async throws -> Set<String> {
        try await QueryIndexScaleTests.strings(store, "SELECT record_name || ':' || deleted || ':' || coalesce(record::text, '') FROM query_index.records")
    }
}

extension SyncTests {
    static func liveRecordNames(_ store: PostgresStore, database: DatabaseID, zone: ZoneID) async throws -> Set<String> {
        let page = try await SyncStore(store: store).changes(zone: zone, in: database, incarnation: nil, since: 0, limit: 100_000, logger: TestSupport.logger)
        return Set(page.changes.map(\.recordName))
    }
}

/// `X-Stratus-Index-Behind-Events`: the events of the queried zones the indexer has yet to apply.
extension QueryTests {
    /// The header of a query on `zone` (nil: zone-wide).
    static func behind(_ client: any TestClientProtocol, _ fixture: Fixture, zone: String?, user: String = "_alice") async throws -> String? {
        var body: Body = ["query": ["recordType": "Item"], "resultsLimit": 1]
        if let zone { body["zoneID"] = ["zoneName": zone] } else { body["zoneWide"] = true }
        let data = try JSONSerialization.data(withJSONObject: body)
        return try await client.execute(uri: fixture.path("records/query", user: user), method: .post, body: ByteBuffer(data: data)) { response in
            XCTAssertEqual(response.status, .ok)
            return response.headers[.init("X-Stratus-Index-Behind-Events")!]
        }
    }

    /// Applies every event in the log to the index, as the indexer would.
    static func applyEventLog(_ store: PostgresStore) async throws {
        let events = try await EventLog(store: store).events(after: 0, limit: 10_000, logger: TestSupport.logger)
        _ = try await Applier(projection: IndexerProjection(), store: store).apply(batch: events, logger: TestSupport.logger)
    }

    /// Once the indexer has applied everything the header is 0, and stays 0 after a deleted zone's
    /// rows leave the index (it used to compare the event log with the newest index row, so the
    /// zone.deleted event, which leaves no row, counted as lag for ever).
    func testIndexBehindHeaderIsZeroOnceAppliedEvenAfterAZoneDeletion() async throws {
        XCTAssertEqual(QueryStore.indexerWorker, IndexerProjection().name, "the header reads the indexer's checkpoints")
        try await Self.withStack { fixture, client in
            for zone in ["Q", "P", "D"] { try await RecordAPITests.createZone(client, fixture, zone) }
            _ = try await RecordAPITests.modify(client, fixture, zone: "Q", [Self.item("q1", ["n": ["value": 1]])])
            _ = try await RecordAPITests.modify(client, fixture, zone: nil, [Self.item("z1", ["n": ["value": 2]])])
            // The deleted zone's records are the newest rows of the index.
            _ = try await RecordAPITests.modify(client, fixture, zone: "D", [Self.item("d1", ["n": ["value": 3]]), Self.item("d2", ["n": ["value": 4]])])
            try await Self.waitForIndex(client, fixture, ["recordType": "Item"], zone: nil, extra: ["zoneWide": true], count: 4)
            for zone in ["Q", "P", "D", "_defaultZone", nil] {
                let header = try await Self.behind(client, fixture, zone: zone)
                XCTAssertEqual(header, "0", "zone \(zone ?? "(zone-wide)")")
            }
            let (status, _) = try await RecordAPITests.post(client, fixture.path("zones/modify"), ["operations": [["operationType": "delete", "zone": ["zoneID": ["zoneName": "D"]]]]])
            XCTAssertEqual(status, 200)
            try await Self.waitForIndex(client, fixture, ["recordType": "Item"], zone: nil, extra: ["zoneWide": true], count: 2)
            for zone in ["Q", "P", "D", "_defaultZone", nil] {
                let header = try await Self.behind(client, fixture, zone: zone)
                XCTAssertEqual(header, "0", "after the zone deletion was applied, zone \(zone ?? "(zone-wide)")")
            }
        }
    }

    /// While the indexer is behind, the header counts the pending events of the queried zones only:
    /// not other zones', not other users'.
    func testIndexBehindHeaderCountsOnlyTheQueriedZonesPendingEvents() async throws {
        try await Self.withStack(indexer: false) { fixture, client in
            for zone in ["Q", "P"] { try await RecordAPITests.createZone(client, fixture, zone) }
            try await RecordAPITests.createZone(client, fixture, "Q", user: "_bob")
            // Bob's backlog is not alice's.
            _ = try await RecordAPITests.modify(client, fixture, zone: "Q", user: "_bob", [Self.item("b1", [:]), Self.item("b2", [:])])
            _ = try await RecordAPITests.modify(client, fixture, zone: nil, user: "_bob", [Self.item("b3", [:])])
            _ = try await RecordAPITests.modify(client, fixture, zone: "Q", [Self.item("q1", [:]), Self.item("q2", [:]), Self.item("q3", [:])])
            func expect(_ expected: [String?: String], _ when: String, line: UInt = #line) async throws {
                for (zone, count) in expected {
                    let header = try await Self.behind(client, fixture, zone: zone)
                    XCTAssertEqual(header, count, "\(when): zone \(zone ?? "(zone-wide)")", line: line)
                }
            }
            try await expect(["Q": "3", "P": "0", "_defaultZone": "0", nil: "3"], "three saves in Q pending")
            // The default zone has no zone sequence (so no checkpoint): its pending events count too.
            _ = try await RecordAPITests.modify(client, fixture, zone: nil, [Self.item("z1", [:]), Self.item("z2", [:])])
            _ = try await RecordAPITests.modify(client, fixture, zone: nil, [["operationType": "forceDelete", "record": ["recordName": "z1"]]])
            try await expect(["Q": "3", "P": "0", "_defaultZone": "3", nil: "6"], "and three events in the default zone")
            try await Self.applyEventLog(fixture.store)
            try await expect(["Q": "0", "P": "0", "_defaultZone": "0", nil: "0"], "everything applied")
            let bobs = try await Self.behind(client, fixture, zone: nil, user: "_bob")
            XCTAssertEqual(bobs, "0")
            // A pending zone deletion counts for that zone and zone-wide, not for the others.
            let (status, _) = try await RecordAPITests.post(client, fixture.path("zones/modify"), ["operations": [["operationType": "delete", "zone": ["zoneID": ["zoneName": "Q"]]]]])
            XCTAssertEqual(status, 200)
            _ = try await RecordAPITests.modify(client, fixture, zone: nil, [Self.item("z3", [:])])
            try await expect(["Q": "1", "P": "0", "_defaultZone": "1", nil: "2"], "a zone deletion and a save pending")
            try await Self.applyEventLog(fixture.store)
            try await expect(["Q": "0", "P": "0", "_defaultZone": "0", nil: "0"], "everything applied again")
        }
    }

    /// The header's count is an index range scan per zone (`events_zone_id`), not a scan of the log.
    func testIndexBehindCountScansTheEventsByZoneIndex() async throws {
        try await TestSupport.withMigratedStore { store, _ in
            let database = DatabaseID(container: "iCloud.explain", environment: .development, scope: .private, owner: "_u0")
            // A log of some size over 300 databases of 7 zones each (one the default zone, whose events
            // have no sequence), so the planner's choice is a real one.
            try await store.withConnection { connection in
                try await connection.query("""
                    INSERT INTO events (zone_key, zone_sequence, type, schema_version, payload, causation)
                    SELECT 'iCloud.explain/development/private/_u' || (i % 300) || '/' || CASE WHEN i % 7 = 0 THEN '_defaultZone' ELSE 'Z' || (i % 7) END,
                           CASE WHEN i % 7 = 0 THEN NULL ELSE i END, 'record.saved', 1,
                           jsonb_build_object('record', jsonb_build_object('recordName', 'r' || i)), '{}'::jsonb
                    FROM generate_series(1, 60000) AS i
                    """, logger: TestSupport.logger)
                try await connection.query("""
                    INSERT INTO zones (container, environment, scope, owner, zone_name, incarnation, change_counter)
                    SELECT 'iCloud.explain', 'development', 'private', '_u' || (i % 300), 'Z' || (i / 300), gen_random_uuid(), 0
                    FROM generate_series(300, 2099) AS i
                    """, logger: TestSupport.logger)
                try await connection.query("ANALYZE events", logger: TestSupport.logger)
                try await connection.query("ANALYZE zones", logger: TestSupport.logger)
            }
            for scope in [QueryStore.Scope.zone("Z1"), .zone(ZoneID.defaultZoneName), .allZones] {
                let statement = QueryStore.behindQuery(in: database, scope: scope)
                let plan = try await TestSupport.plan(of: statement, in: store)
                XCTAssertTrue(plan.contains("events_zone_id"), "\(scope):\n\(plan)")
                XCTAssertFalse(plan.contains("Seq Scan on events"), "\(scope):\n\(plan)")
            }
            // Nothing is indexed: every event of the database's zones (i a multiple of 300) is pending.
            let queries = QueryStore(store: store)
            let all = try await queries.behind(in: database, scope: .allZones, logger: TestSupport.logger)
            XCTAssertEqual(all, 200)
            let one = try await queries.behind(in: database, scope: .zone("Z1"), logger: TestSupport.logger)
            let expected: [Int] = Array(stride(from: 300, through: 60000, by: 300)).filter { $0 % 7 == 1 }
            XCTAssertEqual(one, Int64(expected.count))
        }
    }

    /// A query of one custom zone counts the zone's pending events within the zone's own events:
    /// a zone holding most of the log, caught up, followed by another zone's burst, does not make
    /// each query read that burst.
    func testAOneZoneBehindCountReadsOnlyThatZonesEvents() async throws {
        try await TestSupport.withMigratedStore { store, _ in
            let database = DatabaseID(container: "iCloud.behind", environment: .development, scope: .private, owner: "_u")
            let big = ZoneKey(database: database, zoneName: "Big").rawValue
            let other = ZoneKey(database: database, zoneName: "Other").rawValue
            func append(_ key: String, sequences: ClosedRange<Int>) async throws {
                try await store.withConnection { connection in
                    try await connection.query("""
                        INSERT INTO events (zone_key, zone_sequence, type, schema_version, payload, causation)
                        SELECT \(key), i, 'record.saved', 1, jsonb_build_object('record', jsonb_build_object('recordName', 'r' || i)), '{}'::jsonb
                        FROM generate_series(\(sequences.lowerBound), \(sequences.upperBound)) AS i
                        """, logger: TestSupport.logger)
                }
            }
            // The big zone: 20,000 events, all applied (the indexer's checkpoint at its last one);
            // then 5,000 of another zone, as a sync zone's load follows the query zone's.
            try await append(big, sequences: 1...20_000)
            try await store.withConnection { connection in
                try await connection.query("""
                    INSERT INTO worker_checkpoints (worker, zone_key, last_sequence, last_event_id)
                    SELECT \(QueryStore.indexerWorker), \(big), 20000, max(id) FROM events WHERE zone_key = \(big)
                    """, logger: TestSupport.logger)
            }
            try await append(other, sequences: 1...5_000)
            try await store.withConnection { connection in
                // One indexed record, so that a page has a row to carry the count.
                try await connection.query("""
                    INSERT INTO query_index.records (generation, container, environment, scope, owner, zone_name, record_name, record_type, version, record)
                    VALUES (1, 'iCloud.behind', 'development', 'private', '_u', 'Big', 'r1', 'Item', 1,
                            '{"fields": {}, "recordName": "r1", "recordType": "Item", "changeTag": "t1"}')
                    """, logger: TestSupport.logger)
                try await connection.query("ANALYZE events", logger: TestSupport.logger)
            }
            let queries = QueryStore(store: store)
            let query = try RecordQuery.parse(QueryIndexScaleTests.json(#"{"recordType":"Item"}"#))
            let plan = try await queries.explain(query, in: database, scope: .zone("Big"), limit: 10, logger: TestSupport.logger)
            XCTAssertTrue(plan.contains("events_zone_sequence"), "the count is a range of the zone's own events:\n\(plan)")
            XCTAssertFalse(plan.contains("events_pkey"), "not the log from the checkpoint on:\n\(plan)")
            XCTAssertFalse(plan.contains("Seq Scan on events"), plan)
            let page = try await queries.run(query, in: database, scope: .zone("Big"), limit: 10, after: nil, logger: TestSupport.logger)
            XCTAssertEqual(page.behind, 0, "caught up")
            var caughtUp = try await queries.behind(in: database, scope: .zone("Big"), logger: TestSupport.logger)
            XCTAssertEqual(caughtUp, 0)
            // Three more saves in the big zone: pending, and counted by both paths.
            try await append(big, sequences: 20_001...20_003)
            let pending = try await queries.run(query, in: database, scope: .zone("Big"), limit: 10, after: nil, logger: TestSupport.logger)
            XCTAssertEqual(pending.behind, 3)
            caughtUp = try await queries.behind(in: database, scope: .zone("Big"), logger: TestSupport.logger)
            XCTAssertEqual(caughtUp, 3)
        }
    }
}
