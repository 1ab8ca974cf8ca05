import Foundation
import Hummingbird
import HummingbirdTesting
import PostgresNIO
import StratusAPI
import StratusCore
import StratusPostgres
import StratusTesting
import StratusWorkers
import XCTest

/// The console's data pages over HTTP against the real PostgreSQL: zones, records with paging and
/// every field's type, create / edit / delete through the API's write path (seen by the API's sync),
/// look-up by name, and a query with a filter and a sort over the indexer's query index.
final class ConsoleDataTests: XCTestCase {
    typealias Browser = ConsoleAuthTests.Browser
    typealias Body = [String: Any]
    static let container = "iCloud.com.example.notes"

    /// Signs an operator in; returns the session's CSRF token.
    static func signIn(_ browser: Browser, store: PostgresStore, containers: [String]? = nil) async throws -> String {
        try await ConsoleAuthTests.addOperator(store, containers: containers)
        let signedIn = try await browser.signIn("ops@example.com", ConsoleAuthTests.password)
        XCTAssertEqual(signedIn.status, 303)
        let home = try await browser.request("/console")
        return try XCTUnwrap(home.csrf)
    }

    static let alice = ["container": container, "environment": "development", "database": "private", "user": "_alice"]

    static func link(_ path: String, _ items: [String: String]) -> String {
        path + "?" + ConsoleAuthTests.encode(items)
    }

    /// The API's view of a zone: records/changes from a sync token (nil: from the start).
    static func changes(_ client: any TestClientProtocol, _ fixture: RecordAPITests.Fixture, zone: String, token: String?) async throws -> (records: [Body], token: String) {
        var body: Body = ["zoneID": ["zoneName": zone]]
        if let token { body["syncToken"] = token }
        let (status, reply) = try await RecordAPITests.post(client, fixture.path("records/changes"), body)
        XCTAssertEqual(status, 200, "\(reply)")
        return (reply["records"] as? [Body] ?? [], try XCTUnwrap(reply["syncToken"] as? String))
    }

    func testRecordsAreCreatedEditedAndDeletedThroughTheAPIsWritePathAndSyncSeesEachChange() async throws {
        try await RecordAPITests.withAPI { fixture, client in
            let browser = Browser(client)
            let csrf = try await Self.signIn(browser, store: fixture.store)

            // container → environment → database: the chooser's form opens the zones page.
            let chooser = try await browser.request("/console/containers/\(Self.container)")
            XCTAssertEqual(chooser.status, 200)
            XCTAssertTrue(chooser.html.contains("action=\"/console/zones\""))
            let zones = try await browser.request(Self.link("/console/zones", Self.alice))
            XCTAssertEqual(zones.status, 200, zones.html)
            XCTAssertTrue(zones.html.contains("_defaultZone"))

            // A zone, created by a form that needs the session's token.
            var zoneForm = Self.alice
            zoneForm["zoneName"] = "Notes"
            let forged = try await browser.request("/console/zones", method: .post, form: zoneForm)
            XCTAssertEqual(forged.status, 403)
            zoneForm["csrf"] = csrf
            let created = try await browser.request("/console/zones", method: .post, form: zoneForm)
            XCTAssertEqual(created.status, 303, created.html)
            let recordsPage = try await browser.request(try XCTUnwrap(created.location))
            XCTAssertEqual(recordsPage.status, 200, recordsPage.html)
            XCTAssertTrue(recordsPage.html.contains("The zone was created."))
            XCTAssertTrue(recordsPage.html.contains("No records."))
            let (_, apiZones) = try await RecordAPITests.post(client, fixture.path("zones/list"), [:])
            XCTAssertEqual((apiZones["zones"] as? [Body])?.compactMap { ($0["zoneID"] as? Body)?["zoneName"] as? String }.sorted(), ["Notes", "_defaultZone"])
            let start = try await Self.changes(client, fixture, zone: "Notes", token: nil)
            XCTAssertEqual(start.records.count, 0)

            // A record of several field types; the page shows each field with its type.
            var save = Self.alice
            save["csrf"] = csrf
            save["zone"] = "Notes"
            save["recordName"] = "note-1"
            save["recordType"] = "Note"
            save["fields"] = #"{"title": {"value": "Hello <b>there</b>"}, "count": {"value": 3}, "tags": {"value": ["a", "b"]}, "when": {"value": 1700000000000, "type": "TIMESTAMP"}}"#
            let saved = try await browser.request("/console/record/save", method: .post, form: save)
            XCTAssertEqual(saved.status, 303, saved.html)
            let recordPage = try await browser.request(try XCTUnwrap(saved.location))
            XCTAssertEqual(recordPage.status, 200, recordPage.html)
            XCTAssertTrue(recordPage.html.contains("The record was saved."))
            for (field, type) in [("title", "STRING"), ("count", "INT64"), ("tags", "STRING_LIST"), ("when", "TIMESTAMP")] {
                XCTAssertTrue(recordPage.html.contains("<td><code>\(field)</code></td><td>\(type)</td>"), "\(field) \(type): \(recordPage.html)")
            }
            XCTAssertTrue(recordPage.html.contains("&quot;Hello &lt;b&gt;there&lt;/b&gt;&quot;"), "values are escaped")
            XCTAssertFalse(recordPage.html.contains("<b>there"))

            // The API's sync sees it, as it sees a write of its own.
            let afterCreate = try await Self.changes(client, fixture, zone: "Notes", token: start.token)
            XCTAssertEqual(afterCreate.records.map { $0["recordName"] as? String }, ["note-1"])
            XCTAssertEqual((RecordAPITests.fields(afterCreate.records[0])["title"])?["value"] as? String, "Hello <b>there</b>")
            XCTAssertEqual((RecordAPITests.fields(afterCreate.records[0])["count"])?["value"] as? Int, 3)

            // Edit: the form carries the change tag it saw.
            let changeTag = try XCTUnwrap(ConsoleAuthTests.field("changeTag", in: recordPage.html))
            var edit = Self.alice
            edit["csrf"] = csrf
            edit["zone"] = "Notes"
            edit["recordName"] = "note-1"
            edit["recordType"] = "Note"
            edit["changeTag"] = changeTag
            edit["fields"] = #"{"title": {"value": "Edited"}}"#
            let edited = try await browser.request("/console/record/save", method: .post, form: edit)
            XCTAssertEqual(edited.status, 303, edited.html)
            let afterEdit = try await Self.changes(client, fixture, zone: "Notes", token: afterCreate.token)
            XCTAssertEqual(afterEdit.records.count, 1)
            XCTAssertEqual((RecordAPITests.fields(afterEdit.records[0])["title"])?["value"] as? String, "Edited")
            XCTAssertEqual((RecordAPITests.fields(afterEdit.records[0])["count"])?["value"] as? Int, 3, "an edit changes only the fields it names")
            // The same edit again carries a stale change tag: refused as the API refuses it.
            let stale = try await browser.request("/console/record/save", method: .post, form: edit)
            XCTAssertEqual(stale.status, 409, stale.html)
            // Bad input is refused with a reason, nothing stored.
            edit["fields"] = "{not json"
            let broken = try await browser.request("/console/record/save", method: .post, form: edit)
            XCTAssertEqual(broken.status, 400)
            XCTAssertTrue(broken.html.contains("not valid JSON"), broken.html)

            // Events: the write path appended one per write.
            let events = try await fixture.store.withConnection { connection in
                let rows = try await connection.query("SELECT count(*)::bigint FROM events WHERE type = 'record.saved'", logger: TestSupport.logger)
                for try await count in rows.decode(Int64.self) { return count }
                return 0
            }
            XCTAssertEqual(events, 2)

            // Look-up by name.
            let lookup = try await browser.request(Self.link("/console/records", Self.alice.merging(["zone": "Notes", "lookup": "note-1"]) { $1 }))
            XCTAssertEqual(lookup.status, 303)
            XCTAssertTrue(lookup.location?.hasPrefix("/console/record?") == true)
            let missing = try await browser.request(Self.link("/console/record", Self.alice.merging(["zone": "Notes", "record": "nope"]) { $1 }))
            XCTAssertEqual(missing.status, 404)

            // Delete: needs the token; then sync sees the deletion.
            var delete = Self.alice
            delete["zone"] = "Notes"
            delete["recordName"] = "note-1"
            let unsigned = try await browser.request("/console/record/delete", method: .post, form: delete)
            XCTAssertEqual(unsigned.status, 403)
            delete["csrf"] = csrf
            delete["changeTag"] = changeTag
            let raced = try await browser.request("/console/record/delete", method: .post, form: delete)
            XCTAssertEqual(raced.status, 409, "a delete with a change tag another write replaced is refused")
            let current = try await browser.request(Self.link("/console/record", Self.alice.merging(["zone": "Notes", "record": "note-1"]) { $1 }))
            delete["changeTag"] = try XCTUnwrap(ConsoleAuthTests.field("changeTag", in: current.html))
            let deleted = try await browser.request("/console/record/delete", method: .post, form: delete)
            XCTAssertEqual(deleted.status, 303, deleted.html)
            let afterDelete = try await Self.changes(client, fixture, zone: "Notes", token: afterEdit.token)
            XCTAssertEqual(afterDelete.records.count, 1)
            XCTAssertEqual(afterDelete.records.first?["deleted"] as? Bool, true)
        }
    }

    func testRecordsArePagedAndOperatorsStayInTheirContainers() async throws {
        try await RecordAPITests.withAPI { fixture, client in
            let browser = Browser(client)
            _ = try await Self.signIn(browser, store: fixture.store, containers: [Self.container])
            try await RecordAPITests.createZone(client, fixture, "Notes")
            let (status, _) = try await RecordAPITests.modify(client, fixture, zone: "Notes", (1...55).map { index in
                ["operationType": "create", "record": RecordAPITests.note(String(format: "r%03d", index), ["v": ["value": index]])]
            })
            XCTAssertEqual(status, 200)
            let first = try await browser.request(Self.link("/console/records", Self.alice.merging(["zone": "Notes"]) { $1 }))
            XCTAssertEqual(first.status, 200)
            XCTAssertEqual(first.html.components(separatedBy: "<tr><td><a href=").count - 1, 50, "a page shows at most 50 records")
            XCTAssertTrue(first.html.contains("r001") && first.html.contains("r050") && !first.html.contains("r051"))
            let next = try XCTUnwrap(first.html.range(of: "href=\"([^\"]+)\" id=\"next-page\"", options: .regularExpression).map {
                String(first.html[$0].dropFirst(6).prefix { $0 != "\"" }).replacingOccurrences(of: "&amp;", with: "&")
            })
            let second = try await browser.request(next)
            XCTAssertEqual(second.html.components(separatedBy: "<tr><td><a href=").count - 1, 5)
            XCTAssertTrue(second.html.contains("r055") && !second.html.contains("r050"))
            XCTAssertFalse(second.html.contains("id=\"next-page\""))

            let other = try await browser.request(Self.link("/console/zones", Self.alice.merging(["container": "iCloud.other"]) { $1 }))
            XCTAssertEqual(other.status, 403)
            let bad = try await browser.request(Self.link("/console/zones", Self.alice.merging(["environment": "staging"]) { $1 }))
            XCTAssertEqual(bad.status, 400)
            XCTAssertTrue(bad.html.contains("development or production"))
            let signedOut = Browser(client)
            let away = try await signedOut.request(Self.link("/console/records", Self.alice.merging(["zone": "Notes"]) { $1 }))
            XCTAssertEqual(away.status, 303, "data pages need a session")
        }
    }

    func testAQueryWithAFilterAndASortRunsOverTheQueryIndex() async throws {
        try await APIPipelineFixture.withStack(projection: IndexerProjection(), pipeline: true) { fixture, client, _ in
            let browser = Browser(client)
            _ = try await Self.signIn(browser, store: fixture.store)
            try await RecordAPITests.createZone(client, fixture, "Q")
            let (status, _) = try await RecordAPITests.modify(client, fixture, zone: "Q", (1...6).map { index in
                ["operationType": "create", "record": RecordAPITests.note("item-\(index)", ["count": ["value": index], "kind": ["value": index % 2 == 0 ? "even" : "odd"]], type: "Item")]
            })
            XCTAssertEqual(status, 200)
            let query = Self.alice.merging(["zone": "Q", "recordType": "Item", "field": "kind", "comparator": "EQUALS", "value": "even", "sort": "count", "order": "descending"]) { $1 }
            var page = try await browser.request(Self.link("/console/query", query))
            try await TestSupport.eventually(timeout: .seconds(60), "the indexer to index the items") {
                page = try await browser.request(Self.link("/console/query", query))
                return page.html.contains("3 records")
            }
            XCTAssertEqual(page.status, 200)
            let order = ["item-6", "item-4", "item-2"].map { page.html.range(of: ">\($0)</a>")?.lowerBound }
            XCTAssertFalse(order.contains(nil), page.html)
            XCTAssertEqual(order.compactMap { $0 }, order.compactMap { $0 }.sorted(), "sorted by count, descending")
            XCTAssertFalse(page.html.contains(">item-1</a>"), "the filter leaves odd items out")

            let numeric = Self.alice.merging(["zone": "Q", "recordType": "Item", "field": "count", "comparator": "GREATER_THAN", "value": "4", "valueType": "INT64"]) { $1 }
            let greater = try await browser.request(Self.link("/console/query", numeric))
            XCTAssertTrue(greater.html.contains("2 records"), greater.html)
            let wrong = try await browser.request(Self.link("/console/query", numeric.merging(["value": "four"]) { $1 }))
            XCTAssertEqual(wrong.status, 400)
            let comparator = try await browser.request(Self.link("/console/query", numeric.merging(["comparator": "DROP TABLE"]) { $1 }))
            XCTAssertEqual(comparator.status, 400)
        }
    }

    /// A user's shared database: the zones other users shared with them (shares they accepted),
    /// and those zones' records they reach, shown read-only.
    func testAUsersSharedDatabaseListsTheZonesSharedWithThemAndShowsTheRecordsTheyReachReadOnly() async throws {
        try await SharingTests.withFixture { fixture, store, client in
            let share = try await SharingTests.shareTrip(client, fixture)
            let shortGUID = try XCTUnwrap(share["shortGUID"] as? String)
            _ = try await SharingTests.ok(client, fixture.path("records/accept", "public", as: fixture.bob), ["shortGUIDs": [shortGUID]])
            let browser = Browser(client)
            let csrf = try await Self.signIn(browser, store: store)
            let bob = ["container": SharingTests.container, "environment": "development", "database": "shared", "user": fixture.bob]

            let container = try await browser.request("/console/containers/\(SharingTests.container)")
            XCTAssertTrue(container.html.contains("<option value=\"shared\">a user&#39;s shared database (read-only)</option>")
                || container.html.contains("<option value=\"shared\">a user's shared database (read-only)</option>"), container.html)
            let zones = try await browser.request(Self.link("/console/zones", bob))
            XCTAssertEqual(zones.status, 200, zones.html)
            XCTAssertTrue(zones.html.contains(">Trip</a> <span class=\"muted\">of <span class=\"mono\">\(fixture.alice)</span>, trip (READ_ONLY)</span>"), zones.html)
            XCTAssertFalse(zones.html.contains("id=\"create-zone\""), "no zone is created in a shared database")
            // Carol has not accepted: her shared database is empty.
            let carol = try await browser.request(Self.link("/console/zones", bob.merging(["user": fixture.carol]) { $1 }))
            XCTAssertTrue(carol.html.contains("id=\"no-shared-zones\""), carol.html)

            let trip = bob.merging(["owner": fixture.alice, "zone": "Trip"]) { $1 }
            let records = try await browser.request(Self.link("/console/records", trip))
            XCTAssertEqual(records.status, 200, records.html)
            for name in ["trip", "day1", "day2", "share-1"] { XCTAssertTrue(records.html.contains(">\(name)</a>"), "\(name): \(records.html)") }
            XCTAssertFalse(records.html.contains(">other</a>"), "outside the shared hierarchy")
            XCTAssertTrue(records.html.contains("id=\"read-only\""), records.html)
            XCTAssertFalse(records.html.contains("id=\"create-record\""), records.html)
            let day = try await browser.request(Self.link("/console/record", trip.merging(["record": "day2"]) { $1 }))
            XCTAssertEqual(day.status, 200, day.html)
            XCTAssertFalse(day.html.contains("id=\"save-record\""), day.html)
            XCTAssertFalse(day.html.contains("id=\"delete-record\""), day.html)
            let other = try await browser.request(Self.link("/console/record", trip.merging(["record": "other"]) { $1 }))
            XCTAssertEqual(other.status, 404, other.html)
            // A zone not shared with the user is not found, as in the API.
            let dave = try await browser.request(Self.link("/console/records", trip.merging(["user": fixture.dave]) { $1 }))
            XCTAssertEqual(dave.status, 404, dave.html)
            // Writes are refused: the console shows the shared database read-only.
            var form = trip.merging(["csrf": csrf, "recordName": "day2", "recordType": "Day", "fields": "{}"]) { $1 }
            let save = try await browser.request("/console/record/save", method: .post, form: form)
            XCTAssertEqual(save.status, 403, save.html)
            form["zoneName"] = "Mine"
            let zone = try await browser.request("/console/zones", method: .post, form: form)
            XCTAssertEqual(zone.status, 403, zone.html)
        }
    }
}

