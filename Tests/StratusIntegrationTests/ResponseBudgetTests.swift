import Foundation
import HummingbirdTesting
import StratusTesting
import XCTest

/// A sync response is bounded in bytes as well as in records: large records end a page early, and
/// the zones of one changes/zone request share one budget, so no request can make the server build
/// a response of hundreds of megabytes.
final class ResponseBudgetTests: XCTestCase {
    typealias Body = RecordAPITests.Body

    func testSyncPagesEndAtTheResponseBudgetAndEveryRecordStillArrives() async throws {
        // Each record holds ~3 KB of fields; the budget is 7,000 bytes: two records a page.
        try await RecordAPITests.withAPI(maxResponseBytes: 7_000) { fixture, client in
            for zone in ["A", "B"] {
                try await RecordAPITests.createZone(client, fixture, zone)
                let (status, _) = try await RecordAPITests.modify(client, fixture, zone: zone, (0..<5).map { index in
                    ["operationType": "create", "record": RecordAPITests.note("\(zone)\(index)", ["text": ["value": String(repeating: "x", count: 3_000)]])]
                })
                XCTAssertEqual(status, 200)
            }
            // records/changes: pages of two until all five came, each once.
            var token: String?
            var seen: [String] = []
            var pages = 0
            repeat {
                var body: Body = ["zoneID": ["zoneName": "A"]]
                if let token { body["syncToken"] = token }
                let (status, reply) = try await RecordAPITests.post(client, fixture.path("records/changes"), body)
                XCTAssertEqual(status, 200, "\(reply)")
                let names = (reply["records"] as? [Body] ?? []).compactMap { $0["recordName"] as? String }
                XCTAssertLessThanOrEqual(names.count, 2, "a page stays within the budget")
                seen += names
                token = reply["syncToken"] as? String
                pages += 1
                if reply["moreComing"] as? Bool != true { break }
            } while pages < 10
            XCTAssertEqual(seen, ["A0", "A1", "A2", "A3", "A4"])
            XCTAssertEqual(pages, 3)
            // changes/zone: both zones share the budget; the second gets what is left (nothing),
            // keeps its position, and says more is coming.
            let (status, reply) = try await RecordAPITests.post(client, fixture.path("changes/zone"), ["zones": [["zoneID": ["zoneName": "A"]], ["zoneID": ["zoneName": "B"]]]])
            XCTAssertEqual(status, 200, "\(reply)")
            let zones = reply["zones"] as? [Body] ?? []
            XCTAssertEqual(zones.count, 2)
            XCTAssertEqual((zones.first?["records"] as? [Body])?.count, 2)
            XCTAssertEqual((zones.last?["records"] as? [Body])?.count, 0)
            XCTAssertEqual(zones.last?["moreComing"] as? Bool, true)
            let (_, again) = try await RecordAPITests.post(client, fixture.path("changes/zone"), ["zones": [["zoneID": ["zoneName": "B"], "syncToken": zones.last?["syncToken"] as Any]]])
            XCTAssertEqual(((again["zones"] as? [Body])?.first?["records"] as? [Body])?.compactMap { $0["recordName"] as? String }, ["B0", "B1"],
                           "the second zone resumes from where it was")
        }
    }

    func testARecordLargerThanTheBudgetStillArrivesAlone() async throws {
        try await RecordAPITests.withAPI(maxResponseBytes: 1_000) { fixture, client in
            try await RecordAPITests.createZone(client, fixture, "Big")
            _ = try await RecordAPITests.modify(client, fixture, zone: "Big", (0..<2).map { index in
                ["operationType": "create", "record": RecordAPITests.note("big\(index)", ["text": ["value": String(repeating: "y", count: 5_000)]])]
            })
            let (_, first) = try await RecordAPITests.post(client, fixture.path("records/changes"), ["zoneID": ["zoneName": "Big"]])
            XCTAssertEqual((first["records"] as? [Body])?.compactMap { $0["recordName"] as? String }, ["big0"])
            XCTAssertEqual(first["moreComing"] as? Bool, true)
            let (_, second) = try await RecordAPITests.post(client, fixture.path("records/changes"), ["zoneID": ["zoneName": "Big"], "syncToken": first["syncToken"] as Any])
            XCTAssertEqual((second["records"] as? [Body])?.compactMap { $0["recordName"] as? String }, ["big1"])
            XCTAssertEqual(second["moreComing"] as? Bool, false)
        }
    }
}
