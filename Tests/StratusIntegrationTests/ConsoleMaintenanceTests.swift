import Foundation
import HummingbirdTesting
import PostgresNIO
import StratusAPI
import StratusCore
import StratusPostgres
import StratusTesting
import XCTest

/// Reindex and replay started from the console's operations page, against the real PostgreSQL: the
/// form is CSRF-protected, the request returns at once, the run records its progress in
/// `maintenance_runs` until it finishes, and a second run of the same kind is refused while one runs.
final class ConsoleMaintenanceTests: XCTestCase {
    typealias Browser = ConsoleAuthTests.Browser

    /// A run's row: state, events read, event id reached and the log's last id when it began.
    static func row(_ store: PostgresStore, _ id: Int64) async throws -> (state: String, events: Int64, position: Int64, target: Int64, error: String?)? {
        try await store.withConnection { connection in
            let rows = try await connection.query(
                "SELECT state, events, position, target, error FROM maintenance_runs WHERE id = \(id)", logger: TestSupport.logger)
            for try await row in rows.decode((String, Int64, Int64, Int64, String?).self) { return row }
            return nil
        }
    }

    /// The run a start's redirect names.
    static func runID(_ page: Browser.Page) throws -> Int64 {
        let location = try XCTUnwrap(page.location, page.html)
        let prefix = "/console/operations/runs/"
        XCTAssertTrue(location.hasPrefix(prefix), location)
        return try XCTUnwrap(Int64(location.dropFirst(prefix.count).prefix { $0.isNumber }), location)
    }

    /// Waits until the run's page says it finished; returns the page.
    static func finished(_ browser: Browser, _ id: Int64) async throws -> Browser.Page {
        var page = try await browser.request("/console/operations/runs/\(id)")
        try await TestSupport.eventually(timeout: .seconds(60), "run \(id) finished") {
            page = try await browser.request("/console/operations/runs/\(id)")
            XCTAssertEqual(page.status, 200, page.html)
            XCTAssertFalse(page.html.contains("<strong id=\"run-state\">failed</strong>"), page.html)
            return page.html.contains("<strong id=\"run-state\">finished</strong>")
        }
        return page
    }

    func testAReindexStartedFromThePageRunsOffTheRequestAndItsRecordedProgressReachesFinished() async throws {
        try await RecordAPITests.withAPI(maintenance: true) { fixture, client in
            let store = fixture.store
            let browser = Browser(client)
            let csrf = try await ConsoleDataTests.signIn(browser, store: store)
            try await ConsoleOperationsTests.threeNotes(client, fixture)
            let maxEvent = try await ConsoleOperationsTests.scalar(store, "SELECT max(id) FROM events")
            let lastEvent = try XCTUnwrap(maxEvent)

            let operations = try await browser.request("/console/operations")
            XCTAssertTrue(operations.html.contains("id=\"start-run\""), operations.html)
            XCTAssertTrue(operations.html.contains("<option value=\"replay:stratus-gc\">replay stratus-gc</option>"), operations.html)
            XCTAssertTrue(operations.html.contains("No runs yet."), operations.html)

            // Without the session's CSRF token nothing starts.
            let forged = try await browser.request("/console/operations/runs", method: .post, form: ["job": "reindex"])
            XCTAssertEqual(forged.status, 403, forged.html)
            let wrong = try await browser.request("/console/operations/runs", method: .post, form: ["job": "reindex", "csrf": "not-the-token"])
            XCTAssertEqual(wrong.status, 403, wrong.html)
            let none = try await ConsoleOperationsTests.scalar(store, "SELECT count(*)::bigint FROM maintenance_runs")
            XCTAssertEqual(none, 0)
            // A job that is not one is refused.
            let unknown = try await browser.request("/console/operations/runs", method: .post, form: ["job": "replay:stratus-api", "csrf": csrf])
            XCTAssertEqual(unknown.status, 400, unknown.html)

            let started = try await browser.request("/console/operations/runs", method: .post, form: ["job": "reindex", "csrf": csrf])
            XCTAssertEqual(started.status, 303, started.html)
            let id = try Self.runID(started)
            let page = try await Self.finished(browser, id)
            XCTAssertTrue(page.html.contains("started by console:ops@example.com"), page.html)
            XCTAssertTrue(page.html.contains("id=\"run-finished\""), page.html)
            XCTAssertFalse(page.html.contains("http-equiv=\"refresh\""), "a finished run's page stops reloading")
            // The numbers are the run's own record: every event read, up to the log's last id.
            let recorded = try await Self.row(store, id)
            let row = try XCTUnwrap(recorded)
            XCTAssertEqual(row.state, "finished")
            XCTAssertEqual(row.target, lastEvent)
            XCTAssertEqual(row.position, lastEvent)
            XCTAssertGreaterThanOrEqual(row.events, 4)
            XCTAssertTrue(page.html.contains("<span id=\"run-position\">\(lastEvent)</span> of <span id=\"run-target\">\(lastEvent)</span> (100 %)"), page.html)
            // The reindex swapped a new generation in.
            let live = try await ConsoleOperationsTests.scalar(store, "SELECT max(generation)::bigint FROM query_index.generations WHERE state = 'live'")
            XCTAssertEqual(live, 2)
            let listed = try await browser.request("/console/operations")
            XCTAssertTrue(listed.html.contains("<tr id=\"run-\(id)\">"), listed.html)
            XCTAssertTrue(listed.html.contains("<td class=\"state\">finished</td>"), listed.html)
        }
    }

    func testASecondRunOfTheSameKindIsRefusedWhileOneRunsAndAStaleOneGivesWay() async throws {
        try await RecordAPITests.withAPI(maintenance: true) { fixture, client in
            let store = fixture.store
            let browser = Browser(client)
            let csrf = try await ConsoleDataTests.signIn(browser, store: store)
            // A reindex the CLI runs (claimed as `stratus reindex` claims it).
            let cli = try await MaintenanceRunStore(store: store).claim(.reindex, startedBy: "cli", logger: TestSupport.logger)
            for job in ["reindex", "replay:stratus-indexer"] {
                let refused = try await browser.request("/console/operations/runs", method: .post, form: ["job": job, "csrf": csrf])
                XCTAssertEqual(refused.status, 409, refused.html)
                XCTAssertTrue(refused.html.contains("Run \(cli) (started by cli) is still running and does the same work; wait until it finishes"), refused.html)
            }
            let runs = try await ConsoleOperationsTests.scalar(store, "SELECT count(*)::bigint FROM maintenance_runs")
            XCTAssertEqual(runs, 1)
            // Another kind of run is not held up.
            let gc = try await browser.request("/console/operations/runs", method: .post, form: ["job": "replay:stratus-gc", "csrf": csrf])
            XCTAssertEqual(gc.status, 303, gc.html)
            _ = try await Self.finished(browser, try Self.runID(gc))
            let running = try await browser.request("/console/operations/runs/\(cli)")
            XCTAssertTrue(running.html.contains("<strong id=\"run-state\">running</strong>"), running.html)
            XCTAssertTrue(running.html.contains("<meta http-equiv=\"refresh\" content=\"2; url=/console/operations/runs/\(cli)\">"), running.html)

            // A run that stopped reporting (its process ended) no longer holds the kind.
            try await store.withConnection { connection in
                try await connection.query(
                    "UPDATE maintenance_runs SET reported_at = now() - interval '1 hour' WHERE id = \(cli)", logger: TestSupport.logger)
            }
            let started = try await browser.request("/console/operations/runs", method: .post, form: ["job": "reindex", "csrf": csrf])
            XCTAssertEqual(started.status, 303, started.html)
            _ = try await Self.finished(browser, try Self.runID(started))
            let staleRow = try await Self.row(store, cli)
            let stale = try XCTUnwrap(staleRow)
            XCTAssertEqual(stale.state, "failed")
            XCTAssertEqual(stale.error, "it stopped reporting (its process ended before it finished)")
        }
    }

    func testOnlyAnOperatorOfEveryContainerStartsRuns() async throws {
        try await RecordAPITests.withAPI(maintenance: true) { fixture, client in
            let browser = Browser(client)
            let csrf = try await ConsoleDataTests.signIn(browser, store: fixture.store, containers: [ConsoleDataTests.container])
            let refused = try await browser.request("/console/operations/runs", method: .post, form: ["job": "reindex", "csrf": csrf])
            XCTAssertEqual(refused.status, 403, refused.html)
            let runs = try await ConsoleOperationsTests.scalar(fixture.store, "SELECT count(*)::bigint FROM maintenance_runs")
            XCTAssertEqual(runs, 0)
        }
    }
}
