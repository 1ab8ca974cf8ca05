import Foundation
import HummingbirdTesting
import PostgresNIO
import StratusAPI
import StratusCore
import StratusPostgres
import StratusTesting
import XCTest

/// The console's operations page over HTTP against the real PostgreSQL: relay backlog, each
/// worker's lag and applied count from its checkpoints with a chart, and dead letters retried
/// (the worker's checkpoint goes back to just before the event) or discarded.
final class ConsoleOperationsTests: XCTestCase {
    typealias Browser = ConsoleAuthTests.Browser

    static func scalar(_ store: PostgresStore, _ query: PostgresQuery) async throws -> Int64? {
        try await store.withConnection { connection in
            let rows = try await connection.query(query, logger: TestSupport.logger)
            for try await value in rows.decode(Int64?.self) { return value }
            return nil
        }
    }

    /// Alice's zone Notes with three records: four events (the zone's creation and three saves).
    static func threeNotes(_ client: any TestClientProtocol, _ fixture: RecordAPITests.Fixture) async throws {
        try await RecordAPITests.createZone(client, fixture, "Notes")
        let (status, _) = try await RecordAPITests.modify(client, fixture, zone: "Notes", (1...3).map { index in
            ["operationType": "create", "record": RecordAPITests.note("n\(index)", ["v": ["value": index]])]
        })
        XCTAssertEqual(status, 200)
    }

    func testTheOperationsPageShowsBacklogLagAndDeadLettersThatCanBeRetriedOrDiscarded() async throws {
        try await RecordAPITests.withAPI { fixture, client in
            let store = fixture.store
            let browser = Browser(client)
            let csrf = try await ConsoleDataTests.signIn(browser, store: store)
            try await Self.threeNotes(client, fixture)
            // The zone has four events (created, three saves); nothing publishes them here, and no worker ran.
            let zoneKey = "iCloud.com.example.notes/development/private/_alice/Notes"
            let events = try await Self.scalar(store, "SELECT count(*)::bigint FROM events WHERE zone_key = \(zoneKey)")
            XCTAssertEqual(events, 4)
            // The indexer has applied all four, the gc the first two.
            try await store.withConnection { connection in
                try await connection.query("""
                    INSERT INTO worker_checkpoints (worker, zone_key, last_sequence, last_event_id) VALUES
                        ('stratus-indexer', \(zoneKey), 4, 4), ('stratus-gc', \(zoneKey), 2, 2)
                    """, logger: TestSupport.logger)
            }
            let page = try await browser.request("/console/operations")
            XCTAssertEqual(page.status, 200, page.html)
            // Unpublished: the zone's four events and the schema's growth by the Note type (`schema.changed`).
            XCTAssertTrue(page.html.contains("Backlog: <strong>5</strong>"), page.html)
            XCTAssertTrue(page.html.contains("<tr id=\"worker-stratus-indexer\"><th scope=\"row\">stratus-indexer</th><td class=\"lag\">0</td><td>0</td><td>4</td>"), page.html)
            XCTAssertTrue(page.html.contains("<tr id=\"worker-stratus-gc\"><th scope=\"row\">stratus-gc</th><td class=\"lag\">2</td><td>1</td><td>2</td>"), page.html)
            XCTAssertTrue(page.html.contains("<tr id=\"worker-stratus-subscriptions\"><th scope=\"row\">stratus-subscriptions</th><td class=\"lag\">4</td>"), page.html)
            XCTAssertTrue(page.html.contains("<svg id=\"lag-chart\" role=\"img\""))
            XCTAssertTrue(page.html.contains("No dead letters."))

            // The gc applies one more: the next view's rate and chart have two samples.
            try await store.withConnection { connection in
                try await connection.query("UPDATE worker_checkpoints SET last_sequence = 3 WHERE worker = 'stratus-gc'", logger: TestSupport.logger)
            }
            var second = page
            try await TestSupport.eventually(timeout: .seconds(10), "a second sample") {
                second = try await browser.request("/console/operations")
                return second.html.contains("(2 so far)")
            }
            XCTAssertTrue(second.html.contains("<td class=\"lag\">1</td><td>1</td><td>3</td>"), second.html)
            let points = try XCTUnwrap(second.html.range(of: "points=\"[^\"]*\"", options: .regularExpression).map { String(second.html[$0]) })
            XCTAssertEqual(points.split(separator: " ").count, 2, "one point per sample: \(points)")
            // The applied-rate chart has a point per pair of samples: the gc applied one event between them.
            let rateChart = try XCTUnwrap(second.html.range(of: "<svg id=\"rate-chart\"[^§]*?</svg>", options: .regularExpression).map { String(second.html[$0]) })
            let gcLine = try XCTUnwrap(rateChart.range(of: "points=\"[^\"]*\"><title>stratus-gc</title>", options: .regularExpression).map { String(rateChart[$0]) })
            XCTAssertEqual(gcLine.split(separator: " ").count, 1, "one rate between two samples: \(gcLine)")
            XCTAssertTrue(rateChart.contains("Events each worker applied per second"))

            // Dead letters: the indexer set the second save (sequence 3) aside, and one message it could not read.
            let found = try await Self.scalar(store, "SELECT id FROM events WHERE zone_key = \(zoneKey) AND zone_sequence = 3")
            let eventID = try XCTUnwrap(found)
            let ids = try await store.withConnection { connection in
                let rows = try await connection.query("""
                    INSERT INTO worker_dead_letters (worker, event_id, zone_key, value, reason) VALUES
                        ('stratus-indexer', \(eventID), \(zoneKey), '\\x00'::bytea, 'refused: <b>bad</b>'),
                        ('stratus-indexer', NULL, NULL, '\\x00'::bytea, 'undecodable event')
                    RETURNING id
                    """, logger: TestSupport.logger)
                var ids: [Int64] = []
                for try await id in rows.decode(Int64.self) { ids.append(id) }
                return ids
            }
            let listed = try await browser.request("/console/operations")
            XCTAssertTrue(listed.html.contains("id=\"dead-letter-\(ids[0])\""))
            XCTAssertTrue(listed.html.contains("refused: &lt;b&gt;bad&lt;/b&gt;"), "reasons are escaped")
            let indexerRow = try XCTUnwrap(listed.html.range(of: "<tr id=\"worker-stratus-indexer\">[^\n]*?</tr>", options: .regularExpression).map { String(listed.html[$0]) })
            XCTAssertTrue(indexerRow.hasSuffix("<td>2</td></tr>"), "the indexer's two dead letters are counted: \(indexerRow)")

            // Retry needs the session's token.
            let forged = try await browser.request("/console/operations/dead-letters/retry", method: .post, form: ["id": "\(ids[0])"])
            XCTAssertEqual(forged.status, 403)
            let retried = try await browser.request("/console/operations/dead-letters/retry", method: .post, form: ["csrf": csrf, "id": "\(ids[0])"])
            XCTAssertEqual(retried.status, 303, retried.html)
            let after = try await browser.request(try XCTUnwrap(retried.location))
            XCTAssertTrue(after.html.contains("handed back to its worker"))
            XCTAssertFalse(after.html.contains("id=\"dead-letter-\(ids[0])\""))
            let rewound = try await Self.scalar(store, "SELECT last_sequence FROM worker_checkpoints WHERE worker = 'stratus-indexer' AND zone_key = \(zoneKey)")
            XCTAssertEqual(rewound, 2, "the indexer's checkpoint is just before the event, so its reconciliation applies the zone again from there")
            XCTAssertTrue(after.html.contains("<tr id=\"worker-stratus-indexer\"><th scope=\"row\">stratus-indexer</th><td class=\"lag\">2</td>"), after.html)

            // A dead letter that names no event has no position to go back to: refused, kept; it can be discarded.
            let noEvent = try await browser.request("/console/operations/dead-letters/retry", method: .post, form: ["csrf": csrf, "id": "\(ids[1])"])
            XCTAssertEqual(noEvent.status, 400)
            XCTAssertTrue(noEvent.html.contains("names no event"), noEvent.html)
            let discarded = try await browser.request("/console/operations/dead-letters/discard", method: .post, form: ["csrf": csrf, "id": "\(ids[1])"])
            XCTAssertEqual(discarded.status, 303)
            let remaining = try await Self.scalar(store, "SELECT count(*)::bigint FROM worker_dead_letters")
            XCTAssertEqual(remaining, 0)
            let again = try await browser.request("/console/operations/dead-letters/discard", method: .post, form: ["csrf": csrf, "id": "\(ids[1])"])
            XCTAssertEqual(again.status, 404)
            let garbage = try await browser.request("/console/operations/dead-letters/retry", method: .post, form: ["csrf": csrf, "id": "x"])
            XCTAssertEqual(garbage.status, 400)
        }
    }

    func testOperatorsLimitedToContainersCannotSeeOperations() async throws {
        try await RecordAPITests.withAPI { fixture, client in
            let browser = Browser(client)
            let csrf = try await ConsoleDataTests.signIn(browser, store: fixture.store, containers: [ConsoleDataTests.container])
            let page = try await browser.request("/console/operations")
            XCTAssertEqual(page.status, 403)
            let retry = try await browser.request("/console/operations/dead-letters/retry", method: .post, form: ["csrf": csrf, "id": "1"])
            XCTAssertEqual(retry.status, 403)
        }
    }
}
