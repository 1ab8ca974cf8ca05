import Foundation
import HummingbirdTesting
@testable import StratusAPI
import StratusCore
@testable import StratusPostgres
import StratusTesting
import XCTest

/// A forward sync's next page is read while the client reads the last one (`SyncReadAhead`), and
/// served only while it is still the answer: every page equals what a sync store without it
/// answers, a change to the zone between two pages — a write, a zone deleted, tombstones collected
/// — drops the page read ahead, and so does its age; the pages kept are bounded.
final class SyncReadAheadTests: XCTestCase {
    /// A page as the client gets it.
    struct Page: Equatable {
        var changes: [SyncStore.Change]
        var version: Int64
        var moreComing: Bool
        var wire: String?

        /// The records' names, in page order.
        var names: [String] { SyncReadAheadTests.names(changes: changes, wire: wire) }

        init(_ page: SyncStore.ZoneChanges) {
            changes = page.changes
            version = page.version
            moreComing = page.moreComing
            wire = page.wireText
        }
    }

    static let zone = ZoneID(zoneName: "Sync", ownerRecordName: "_alice")

    static func database(_ fixture: RecordAPITests.Fixture) -> DatabaseID {
        DatabaseID(container: fixture.container, environment: .development, scope: .private, owner: "_alice")
    }

    /// The zone id text the API asks wire pages with.
    static let wire = String(decoding: zone.json.serialized(), as: UTF8.self)

    /// Creates the sync zone with `count` notes, a few at a time.
    static func fill(_ client: any TestClientProtocol, _ fixture: RecordAPITests.Fixture, count: Int) async throws {
        try await RecordAPITests.createZone(client, fixture, zone.zoneName)
        for start in stride(from: 0, to: count, by: 10) {
            let (status, _) = try await RecordAPITests.modify(client, fixture, zone: zone.zoneName, (start..<min(start + 10, count)).map {
                ["operationType": "create", "record": RecordAPITests.note("n\($0)", ["v": ["value": "note \($0)"]])]
            })
            XCTAssertEqual(status, 200)
        }
    }

    /// One page after `since` (of `incarnation`), as the API asks for it.
    static func page(
        _ sync: SyncStore, _ fixture: RecordAPITests.Fixture, incarnation: UUID?, since: Int64, horizon: Int64 = 0, limit: Int, wire: String? = wire
    ) async throws -> SyncStore.ZoneChanges {
        try await sync.changes(
            zone: zone, in: database(fixture), incarnation: incarnation, since: since, horizon: horizon, limit: limit, maxBytes: 1 << 20, wire: wire,
            logger: TestSupport.logger)
    }

    /// Every page of a sync from the start.
    static func pull(_ sync: SyncStore, _ fixture: RecordAPITests.Fixture, limit: Int, wire: String? = wire) async throws -> [Page] {
        var pages: [Page] = []
        var incarnation: UUID?
        var version: Int64 = 0
        var horizon: Int64 = 0
        while true {
            let page = try await page(sync, fixture, incarnation: incarnation, since: version, horizon: horizon, limit: limit, wire: wire)
            pages.append(Page(page))
            incarnation = page.incarnation
            version = page.version
            horizon = page.horizon
            if !page.moreComing { return pages }
            XCTAssertLessThan(pages.count, 1000, "a sync ends")
            if pages.count >= 1000 { return pages }
        }
    }

    func testEveryNextPageIsServedReadAheadAndEqualsThePageReadWhenAsked() async throws {
        try await RecordAPITests.withAPI { fixture, client in
            try await Self.fill(client, fixture, count: 23)
            // A record deleted: a tombstone among the pages.
            let (status, results) = try await RecordAPITests.modify(client, fixture, zone: Self.zone.zoneName, [["operationType": "forceDelete", "record": ["recordName": "n3"]]])
            XCTAssertEqual(status, 200, "\(results)")
            XCTAssertEqual(results.first?["deleted"] as? Bool, true, "\(results)")
            let plain = SyncStore(store: fixture.store)
            for wire in [Self.wire, nil] {
                let readAhead = SyncReadAhead(capacity: 4, window: .seconds(60), owner: fixture.tasks)
                let ahead = SyncStore(store: fixture.store, readAhead: readAhead)
                let expected = try await Self.pull(plain, fixture, limit: 4, wire: wire)
                let pages = try await Self.pull(ahead, fixture, limit: 4, wire: wire)
                XCTAssertEqual(pages, expected, "wire \(wire != nil): the pages read ahead are the pages")
                XCTAssertEqual(expected.count, 6, "23 records, one deleted, in pages of 4")
                // n3 once, as its deletion (after the page of the version it was created at).
                XCTAssertEqual(expected.flatMap(\.names).sorted(), (0..<23).map { "n\($0)" }.sorted(), "every record once")
                // Every page but the first was read ahead and served; nothing is left over.
                XCTAssertEqual(readAhead.outcomes.served, expected.count - 1, "wire \(wire != nil)")
                XCTAssertEqual(readAhead.outcomes.discarded, 0)
                XCTAssertEqual(readAhead.count, 0, "the last page says no more are coming: nothing is read after it")
            }
        }
    }

    func testAWriteBetweenTwoPagesIsSeenAndThePageReadAheadDropped() async throws {
        try await RecordAPITests.withAPI { fixture, client in
            try await Self.fill(client, fixture, count: 12)
            let readAhead = SyncReadAhead(capacity: 4, window: .seconds(60), owner: fixture.tasks)
            let ahead = SyncStore(store: fixture.store, readAhead: readAhead)
            let plain = SyncStore(store: fixture.store)
            let first = try await Self.page(ahead, fixture, incarnation: nil, since: 0, limit: 5)
            XCTAssertTrue(first.moreComing)
            // The next page read before the write commits.
            await readAhead.settle()
            XCTAssertEqual(readAhead.count, 1)
            // A record of the next page changed, and one added, by another writer.
            let (status, _) = try await RecordAPITests.modify(client, fixture, zone: Self.zone.zoneName, [
                ["operationType": "forceUpdate", "record": RecordAPITests.note("n6", ["v": ["value": "changed"]])],
                ["operationType": "create", "record": RecordAPITests.note("late", ["v": ["value": "late"]])],
            ])
            XCTAssertEqual(status, 200)
            let second = try await Self.page(ahead, fixture, incarnation: first.incarnation, since: first.version, limit: 5)
            let fresh = try await Self.page(plain, fixture, incarnation: first.incarnation, since: first.version, limit: 5)
            XCTAssertEqual(Page(second), Page(fresh), "the page answers as of the question, the write included")
            XCTAssertFalse(Self.names(second).contains("n6"), "n6 changed since it was read: it comes at its new version, later")
            XCTAssertEqual(Self.names(second).count, 5)
            XCTAssertEqual(readAhead.outcomes.discarded, 1, "the page read before the write was dropped")
            XCTAssertEqual(readAhead.outcomes.served, 0)
            // The rest of the sync holds the changed record and the new one, once each.
            var version = second.version
            var names = Self.names(first) + Self.names(second)
            var moreComing = second.moreComing
            while moreComing {
                let page = try await Self.page(ahead, fixture, incarnation: first.incarnation, since: version, limit: 5)
                names += Self.names(page)
                version = page.version
                moreComing = page.moreComing
            }
            XCTAssertEqual(names.sorted(), ((0..<12).map { "n\($0)" } + ["late"]).sorted())
            XCTAssertGreaterThanOrEqual(readAhead.outcomes.served, 1, "pages after the write are read ahead again")
        }
    }

    func testADeletedZoneAndCollectedTombstonesAreSeenThroughAPageReadAhead() async throws {
        try await RecordAPITests.withAPI { fixture, client in
            try await Self.fill(client, fixture, count: 8)
            let (status, results) = try await RecordAPITests.modify(client, fixture, zone: Self.zone.zoneName, [
                ["operationType": "forceDelete", "record": ["recordName": "n1"]], ["operationType": "forceDelete", "record": ["recordName": "n2"]],
            ])
            XCTAssertEqual(status, 200, "\(results)")
            let readAhead = SyncReadAhead(capacity: 4, window: .seconds(60), owner: fixture.tasks)
            let ahead = SyncStore(store: fixture.store, readAhead: readAhead)
            // Tombstones collected past the token: the page read ahead (which holds them) is not
            // served, the token has expired.
            let first = try await Self.page(ahead, fixture, incarnation: nil, since: 0, limit: 2)
            XCTAssertTrue(first.moreComing)
            await readAhead.settle()
            XCTAssertEqual(readAhead.count, 1)
            let collected = try await SyncStore(store: fixture.store).collectTombstones(
                zone: Self.zone, in: Self.database(fixture), olderThan: Date().addingTimeInterval(60), logger: TestSupport.logger)
            XCTAssertEqual(collected, 2)
            do {
                _ = try await Self.page(ahead, fixture, incarnation: first.incarnation, since: first.version, limit: 2)
                XCTFail("a token older than the horizon expired")
            } catch let error as StratusError {
                XCTAssertEqual(error.code, .changeTokenExpired, "\(error)")
            }
            XCTAssertEqual(readAhead.outcomes.discarded, 1)
            // A zone deleted between two pages: no zone, not the page read before. (The sync from
            // the start passes below the horizon: its token carries the horizon it was read at.)
            let again = try await Self.page(ahead, fixture, incarnation: nil, since: 0, limit: 2)
            XCTAssertTrue(again.moreComing)
            XCTAssertGreaterThan(again.horizon, again.version)
            await readAhead.settle()
            XCTAssertEqual(readAhead.count, 1)
            let (deleted, _) = try await RecordAPITests.post(client, fixture.path("zones/modify"), ["operations": [["operationType": "delete", "zone": ["zoneID": ["zoneName": "Sync"]]]]])
            XCTAssertEqual(deleted, 200)
            do {
                _ = try await Self.page(ahead, fixture, incarnation: again.incarnation, since: again.version, horizon: again.horizon, limit: 2)
                XCTFail("the zone is gone")
            } catch let error as StratusError {
                XCTAssertEqual(error.code, .zoneNotFound, "\(error)")
            }
            XCTAssertEqual(readAhead.outcomes.discarded, 2)
            XCTAssertEqual(readAhead.outcomes.served, 0)
        }
    }

    func testAPageIsNotServedAfterItsWindowAndThePagesKeptAreBounded() async throws {
        try await RecordAPITests.withAPI { fixture, client in
            try await Self.fill(client, fixture, count: 9)
            let plain = SyncStore(store: fixture.store)
            let expected = try await Self.pull(plain, fixture, limit: 3)
            // No window: every page read ahead is too old when asked for, and none is served.
            let late = SyncReadAhead(capacity: 4, window: .zero, owner: fixture.tasks)
            let pages = try await Self.pull(SyncStore(store: fixture.store, readAhead: late), fixture, limit: 3)
            XCTAssertEqual(pages, expected)
            XCTAssertEqual(late.outcomes.served, 0)
            XCTAssertEqual(late.outcomes.discarded, expected.count - 1)
            // No room for a page's bytes: it is not kept, so nothing is served, and the pages are the same.
            let small = SyncReadAhead(capacity: 4, maxBytes: 16, window: .seconds(60), owner: fixture.tasks)
            let unkept = try await Self.pull(SyncStore(store: fixture.store, readAhead: small), fixture, limit: 3)
            XCTAssertEqual(unkept, expected)
            XCTAssertEqual(small.outcomes.served, 0)
            XCTAssertEqual(small.count, 0)
            // One page at a time: two syncs side by side share it, the second reads its own pages.
            let one = SyncReadAhead(capacity: 1, window: .seconds(60), owner: fixture.tasks)
            let shared = SyncStore(store: fixture.store, readAhead: one)
            let a = try await Self.page(shared, fixture, incarnation: nil, since: 0, limit: 3)
            let b = try await Self.page(shared, fixture, incarnation: nil, since: 0, limit: 2)
            XCTAssertEqual(one.count, 1, "the second sync found no room")
            let a2 = try await Self.page(shared, fixture, incarnation: a.incarnation, since: a.version, limit: 3)
            let b2 = try await Self.page(shared, fixture, incarnation: b.incarnation, since: b.version, limit: 2)
            XCTAssertEqual(Page(a2), expected[1])
            let b2Fresh = try await Self.page(plain, fixture, incarnation: b.incarnation, since: b.version, limit: 2)
            XCTAssertEqual(Page(b2), Page(b2Fresh))
            XCTAssertEqual(one.outcomes.served, 1, "the first sync's page was served")
            await one.settle()
            // Nothing is read ahead without one.
            XCTAssertNil(plain.readAhead)
        }
    }

    static func names(_ page: SyncStore.ZoneChanges) -> [String] { names(changes: page.changes, wire: page.wireText) }

    /// The names of a page's changes, or of the records its wire text holds.
    static func names(changes: [SyncStore.Change], wire: String?) -> [String] {
        guard let wire else { return changes.map(\.recordName) }
        guard case .array(let records)? = try? JSONParser.parse("[\(wire)]") else { return ["not JSON"] }
        return records.map { $0["recordName"]?.stringValue ?? "no name" }
    }
}
