import Foundation
import PostgresNIO
import StratusCore
@testable import StratusPostgres
import StratusTesting
import StratusWorkers
import XCTest

/// Applies the event log to projections as their workers would, each call the events after the
/// last it applied.
actor LogFollower {
    let appliers: [Applier]
    let store: PostgresStore
    /// The last event applied.
    private(set) var applied: Int64 = 0

    init(_ projections: [any Projection], store: PostgresStore) {
        appliers = projections.map { Applier(projection: $0, store: store) }
        self.store = store
    }

    func applyAll() async throws {
        let events = try await EventLog(store: store).events(after: applied, limit: 10_000, logger: TestSupport.logger)
        for applier in appliers { _ = try await applier.apply(batch: events, logger: TestSupport.logger) }
        applied = events.last?.id ?? applied
    }
}

/// The event log's retention (migration 0042, `EventLogRetention`): whole partitions go once every
/// worker and the relay have passed them and the window no longer holds them, never an event a
/// reader still needs; and a rebuild after pruning, from a snapshot of the tables plus the tail,
/// ends where the indexer that saw every event is.
final class EventRetentionTests: XCTestCase {
    static let workers = WorkerDefinition.all.map(\.name)
    /// Partitions of ten ids, sixteen of them ahead: a test's few dozen events span several.
    static let small = EventRetention.Settings(windowMilliseconds: 0, partitionEvents: 10, ahead: 16)

    /// Creates small partitions ahead (the migration leaves only the default one after the
    /// migrated rows), so the test's events fill partitions that close.
    static func startSmallPartitions(_ store: PostgresStore) async throws {
        let next = try await EventLog(store: store).lastID(logger: TestSupport.logger) + 1
        let plan = try await EventLogRetention(store: store).pass(settings: small, workers: workers, logger: TestSupport.logger)
        XCTAssertEqual(plan.create.count, 16)
        XCTAssertLessThanOrEqual(plan.create.first?.lower ?? 0, next, "the next id falls in a new partition")
    }

    /// Every worker's checkpoint of every zone at the zone's counter but `except`'s, which stays at `sequence`.
    static func checkpoints(_ store: PostgresStore, except: (worker: String, zone: ZoneKey, sequence: Int64)? = nil) async throws {
        _ = try await store.withConnection { connection in
            try await connection.query("""
                INSERT INTO worker_checkpoints (worker, zone_key, last_sequence, last_event_id)
                SELECT w.worker, z.zone_key,
                       CASE WHEN w.worker = \(except?.worker) AND z.zone_key = \(except?.zone.rawValue) THEN \(except?.sequence) ELSE z.change_counter END, 0
                FROM zones z CROSS JOIN unnest(\(workers)::text[]) AS w(worker) WHERE z.change_counter > 0
                ON CONFLICT (worker, zone_key) DO UPDATE SET last_sequence = EXCLUDED.last_sequence
                """, logger: TestSupport.logger)
        }
    }

    static func queue(_ store: PostgresStore, _ ids: [Int64]) async throws {
        try await store.withConnection { connection in
            try await connection.query("DELETE FROM unpublished_events", logger: TestSupport.logger)
            try await connection.query("INSERT INTO unpublished_events (id) SELECT unnest(\(ids)::int8[])", logger: TestSupport.logger)
        }
    }

    /// The zone's events, sequence → id, as the log holds them now.
    static func events(_ store: PostgresStore, _ zone: ZoneKey) async throws -> [Int64: Int64] {
        try await store.withConnection { connection in
            var ids: [Int64: Int64] = [:]
            for try await (sequence, id) in try await connection.query(
                "SELECT zone_sequence, id FROM events WHERE zone_key = \(zone.rawValue)", logger: TestSupport.logger).decode((Int64, Int64).self) {
                ids[sequence] = id
            }
            return ids
        }
    }

    func testRetentionNeverRemovesAnEventAWorkerOrTheRelayHasNotPassed() async throws {
        try await TestSupport.withMigratedStore { store, _ in
            let logger = TestSupport.logger
            try await Self.startSmallPartitions(store)
            let database = DatabaseID(container: "iCloud.test", environment: .development, scope: .private, owner: "_alice")
            let zone = ZoneID(zoneName: "Kept", ownerRecordName: "_alice")
            let key = ZoneKey(database: database, zoneName: "Kept")
            _ = try await ZoneStore(store: store).modify([.create(zone)], in: database, causation: Causation(requestID: "z"), logger: logger)
            for batch in 0..<4 {
                let commands = (0..<10).map { RecordStore.Command(type: .create, input: RecordInput(recordName: "r\(batch)-\($0)", recordType: "Item", fields: ["n": .int64(Int64($0))])) }
                _ = try await RecordStore(store: store).modify(commands, zone: zone, in: database, atomic: true, causation: Causation(requestID: "b\(batch)"), deviceID: nil, logger: logger)
            }
            let written = try await Self.events(store, key)
            let last = try XCTUnwrap(written.keys.max())
            XCTAssertEqual(last, 41)
            let retention = EventLogRetention(store: store)

            // The relay has published everything, every worker has applied everything but
            // stratus-shares, which is at sequence 15.
            try await Self.queue(store, [])
            try await Self.checkpoints(store, except: ("stratus-shares", key, 15))
            // Inside a window of an hour nothing goes, passed or not.
            var plan = try await retention.pass(settings: .init(windowMilliseconds: 3_600_000, partitionEvents: 10, ahead: 16), workers: Self.workers, logger: logger)
            XCTAssertEqual(plan.drop, [])
            let all = try await Self.events(store, key)
            XCTAssertEqual(all.count, 41)

            plan = try await retention.pass(settings: Self.small, workers: Self.workers, logger: logger)
            var left = try await Self.events(store, key)
            XCTAssertTrue((16...41).allSatisfy { left[$0] == written[$0] }, "every event after stratus-shares' checkpoint is kept")
            XCTAssertLessThan(left.count, 41, "a partition before it went")
            let prunedBelow = try XCTUnwrap(plan.prunedBelow)
            XCTAssertLessThanOrEqual(prunedBelow, written[16]!)
            XCTAssertTrue(left.values.allSatisfy { $0 >= prunedBelow }, "every event below the pruned id went, whole partitions")
            XCTAssertTrue(written.values.filter { $0 >= prunedBelow }.allSatisfy { left.values.contains($0) })
            let recorded = try await retention.prunedBelow(logger: logger)
            XCTAssertEqual(recorded, prunedBelow)
            // What a worker behind reads to catch up is still there.
            let gap = try await EventLog(store: store).events(zoneKey: key, sequences: 16...41, logger: logger)
            XCTAssertEqual(gap.map(\.zoneSequence), (16...41).map { Optional($0) })

            // stratus-shares moves to 25, but the relay must still send sequence 30 again.
            try await Self.checkpoints(store, except: ("stratus-shares", key, 25))
            try await Self.queue(store, [written[30]!])
            try await retention.pass(settings: Self.small, workers: Self.workers, logger: logger)
            left = try await Self.events(store, key)
            XCTAssertTrue((26...41).allSatisfy { left[$0] != nil }, "the relay's queued event and everything after stratus-shares' checkpoint stay")
            XCTAssertNil(left[15], "a partition every reader passed went")
            try await Self.checkpoints(store)
            try await retention.pass(settings: Self.small, workers: Self.workers, logger: logger)
            left = try await Self.events(store, key)
            XCTAssertNotNil(left[30], "the relay has not sent it yet")

            // Everything passed: all closed partitions go; the one the next id falls in stays.
            try await Self.queue(store, [])
            plan = try await retention.pass(settings: Self.small, workers: Self.workers, logger: logger)
            left = try await Self.events(store, key)
            XCTAssertNil(left[30])
            XCTAssertEqual(left[41], written[41], "the open partition stays whatever its readers")
            XCTAssertFalse(plan.drop.isEmpty)

            // A snapshot-mode sync reads the log: from a token whose next change is gone it is
            // expired, from the start it is refused, from a token the kept tail continues it answers.
            let sync = SyncStore(store: store)
            for (since, code) in [(Int64(10), ServerErrorCode.changeTokenExpired), (0, .badRequest)] {
                do {
                    _ = try await sync.changes(zone: zone, in: database, incarnation: nil, since: since, limit: 100, mode: .snapshot, logger: logger)
                    XCTFail("a snapshot sync from \(since) needs pruned events")
                } catch let error as StratusError {
                    XCTAssertEqual(error.code, code, error.reason)
                }
            }
            let tail = try await sync.changes(zone: zone, in: database, incarnation: nil, since: 40, limit: 100, mode: .snapshot, logger: logger)
            XCTAssertEqual(tail.changes.count, 1)
        }
    }

    /// The indexer rebuilt after the log was pruned (a snapshot of the records and zones at a log
    /// position, then the tail) holds what the indexer that applied every event holds, goes on from
    /// there without a gap, and a rebuild the tail alone cannot make is refused.
    func testAnIndexRebuiltAfterPruningEqualsTheOneThatSawEveryEvent() async throws {
        try await TestSupport.withMigratedStore { store, _ in
            let logger = TestSupport.logger
            try await Self.startSmallPartitions(store)
            let (database, kept, dropped, zones, records) = try await IndexerReplayTests.twoZones(store)
            func modify(_ zone: ZoneID, _ type: RecordOperationType, _ names: [String], value: Int = 0) async throws {
                let commands = names.map {
                    RecordStore.Command(type: type, input: RecordInput(
                        recordName: $0, recordType: "Item", fields: type == .forceDelete ? [:] : ["title": .string("\($0) v\(value)"), "n": .int64(Int64(value))]))
                }
                _ = try await records.modify(commands, zone: zone, in: database, atomic: true, causation: Causation(requestID: "m"), deviceID: nil, logger: logger)
            }
            let follower = LogFollower([IndexerProjection()], store: store)
            let indexer = follower.appliers[0]
            func applyAll() async throws { try await follower.applyAll() }
            try await modify(kept, .create, (0..<12).map { "r\($0)" })
            try await modify(dropped, .create, ["d0", "d1"])
            try await modify(kept, .forceUpdate, ["r0", "r1", "r2"], value: 1)
            try await modify(kept, .forceDelete, ["r3"])
            _ = try await zones.modify([.delete(dropped)], in: database, causation: Causation(requestID: "d"), logger: logger)
            try await applyAll()

            // Every reader has passed everything: the log is pruned down to its open partition.
            try await Self.queue(store, [])
            try await Self.checkpoints(store)
            let plan = try await EventLogRetention(store: store).pass(settings: Self.small, workers: Self.workers, logger: logger)
            XCTAssertGreaterThan(plan.drop.count, 1)
            // The tail: writes after the pruning, which the live indexer applies.
            try await modify(kept, .forceUpdate, ["r4"], value: 2)
            try await modify(kept, .forceDelete, ["r5"])
            _ = try await zones.modify([.create(ZoneID(zoneName: "Later", ownerRecordName: "_alice"))], in: database, causation: Causation(requestID: "l"), logger: logger)
            try await applyAll()
            let expected = try await Self.index(store)
            XCTAssertEqual(expected.rows.count, 12 - 2)
            XCTAssertEqual(expected.zones, ["iCloud.test/development/private/_alice/Kept", "iCloud.test/development/private/_alice/Later"])

            // A replay from the log's beginning is refused; so is a worker with no snapshot seed.
            do {
                _ = try await Reindex(store: store).run(start: .log, logger: logger)
                XCTFail("the log no longer holds its beginning")
            } catch let error as StratusError {
                XCTAssertTrue(error.reason.contains("pruned"), error.reason)
            }
            do {
                _ = try await Rebuild(projection: SharesProjection(), store: store, kafka: nil, topic: "unused").run(logger: logger)
                XCTFail("a projection without a seed cannot be rebuilt from the tail alone")
            } catch let error as StratusError {
                XCTAssertTrue(error.reason.contains("pruned"), error.reason)
            }

            let generation = try await QueryIndexGenerations(store: store).live(logger: logger)
            try await IndexerReplay(store: store, kafka: nil, topic: "unused").run(pageSize: 3, logger: logger)
            let rebuilt = try await Self.index(store)
            let rebuiltGeneration = try await QueryIndexGenerations(store: store).live(logger: logger)
            XCTAssertGreaterThan(rebuiltGeneration, generation)
            XCTAssertEqual(rebuilt.rows, expected.rows, "the rebuilt index holds the same records, fields and search documents")
            XCTAssertEqual(rebuilt.zones, expected.zones, "and the same zone directory")

            // The rebuilt indexer goes on from the snapshot's positions: the next event applies
            // without a gap, and nothing is applied twice.
            try await modify(kept, .forceUpdate, ["r6"], value: 3)
            let next = try await EventLog(store: store).events(after: await follower.applied, limit: 100, logger: logger)
            XCTAssertEqual(next.count, 1)
            let outcome = try await indexer.apply(next[0], logger: logger)
            XCTAssertEqual(outcome, .applied(filledGap: 0))
            let latest = try await Self.index(store)
            XCTAssertTrue(latest.rows.contains { $0.hasPrefix("Kept | r6 | Item") && $0.contains("r6 v3") }, "\(latest.rows)")
        }
    }

    /// stratus-subscriptions, stratus-gc and stratus-shares rebuilt after the log was pruned (each
    /// from a snapshot of the tables, then the tail) hold what the same workers that applied every
    /// event hold: the notification log, the expiry index, the asset references and bound assets,
    /// and every participant's shared-database tracking; and they go on from there without a gap.
    func testEveryWorkerRebuiltAfterPruningEqualsTheOneThatSawEveryEvent() async throws {
        try await UserDeletionTests.withLiveAPI(prepare: Self.startSmallPartitions) { fixture, store, _, client in
            let logger = TestSupport.logger
            let workers: [WorkerDefinition] = [.subscriptions, .gc, .shares]
            let follower = LogFollower(workers.map(\.projection), store: store)
            func save(_ user: String, zone: String, _ records: [[String: Any]], _ operation: String = "create") async throws {
                let answer = try await SharingTests.ok(client, fixture.path("records/modify", as: user), [
                    "zoneID": ["zoneName": zone], "operations": records.map { ["operationType": operation, "record": $0] },
                ])
                XCTAssertNil(SharingTests.list(answer, "records").first { $0["serverErrorCode"] != nil }, "\(answer)")
            }
            let later = Int64(Date().timeIntervalSince1970 * 1000) + 3_600_000
            func note(_ name: String, expiring: Bool) -> [String: Any] {
                ["recordName": name, "recordType": "Note", "fields": ["title": ["value": name]], "expirationDate": expiring ? later : NSNull()]
            }
            // Zones, records, assets, shares accepted both ways and a subscription; expiring notes.
            try await UserDeletionTests.makeData(client, fixture)
            try await save(fixture.alice, zone: "Notes", [note("x1", expiring: true), note("x2", expiring: true)])
            try await follower.applyAll()

            // Every reader has passed everything: the log is pruned down to its open partition.
            try await Self.queue(store, [])
            try await Self.checkpoints(store)
            let plan = try await EventLogRetention(store: store).pass(settings: Self.small, workers: Self.workers, logger: logger)
            XCTAssertGreaterThan(plan.drop.count, 1)

            // The tail: a note that fires the subscription and expires, one no longer expiring,
            // bob's photo saved without its asset (released), a change in each shared zone.
            try await save(fixture.alice, zone: "Notes", [note("x3", expiring: true)])
            try await save(fixture.alice, zone: "Notes", [note("x1", expiring: false)], "forceReplace")
            try await save(fixture.bob, zone: "BobTrip", [["recordName": "bob-photo", "recordType": "Photo", "fields": [:] as [String: Any]]], "forceReplace")
            try await save(fixture.alice, zone: "Trip", [note("t1", expiring: false)])
            try await save(fixture.bob, zone: "BobTrip", [note("b1", expiring: false)])
            try await follower.applyAll()

            let expected = try await Self.derived(store)
            XCTAssertFalse(expected.notifications.isEmpty)
            XCTAssertEqual(expected.expirations.count, 2, "\(expected.expirations)")
            XCTAssertTrue(expected.references.contains { $0.hasSuffix("|bob-photo|f") }, "the tail released bob's asset: \(expected.references)")
            XCTAssertTrue(expected.references.contains { $0.hasSuffix("|photo|t") }, "\(expected.references)")
            XCTAssertEqual(expected.tracking.filter { $0.contains("|t|") }.count, 2, "each user holds the other's share: \(expected.tracking)")

            // Each worker replayed now starts from a snapshot (the log's beginning is gone).
            for worker in workers {
                _ = try await worker.replay(from: ReplaySource(store: store, kafka: nil, topic: "unused"), logger: logger) { _ in }
            }
            let rebuilt = try await Self.derived(store)
            XCTAssertEqual(rebuilt.notifications, expected.notifications, "no notification lost or logged twice")
            XCTAssertEqual(rebuilt.expirations, expected.expirations, "the same expiry index")
            XCTAssertEqual(rebuilt.references, expected.references, "the same asset references")
            XCTAssertEqual(rebuilt.bound, expected.bound, "the same bound assets")
            XCTAssertEqual(rebuilt.tracking, expected.tracking, "the same shared-database tracking")

            // The rebuilt workers go on from the snapshot's positions: the next event applies to each
            // without a gap.
            try await save(fixture.alice, zone: "Trip", [note("t2", expiring: false)])
            let next = try await EventLog(store: store).events(after: await follower.applied, limit: 100, logger: logger)
            XCTAssertEqual(next.count, 1)
            for applier in follower.appliers {
                let outcome = try await applier.apply(next[0], logger: logger)
                XCTAssertEqual(outcome, .applied(filledGap: 0), applier.projection.name)
            }
        }
    }

    /// What stratus-subscriptions, stratus-gc and stratus-shares keep, as sorted lines: the
    /// notification log's keys, the expiry index, the asset references (without their times: a
    /// snapshot's are the records' last change, a replay's the events'), the bound assets, and the
    /// shared-database tracking.
    static func derived(_ store: PostgresStore) async throws
        -> (notifications: [String], expirations: [String], references: [String], bound: [String], tracking: [String]) {
        func lines(_ query: PostgresQuery) async throws -> [String] {
            try await store.withConnection { connection in
                var lines: [String] = []
                for try await line in try await connection.query(query, logger: TestSupport.logger).decode(String.self) { lines.append(line) }
                return lines
            }
        }
        return (
            try await lines("SELECT concat_ws('|', subscriber, subscription_id, dedupe_key, event_id, notification_type) FROM notifications ORDER BY 1"),
            try await lines("SELECT concat_ws('|', owner, zone_name, record_name, expires_at) FROM record_expirations ORDER BY 1"),
            try await lines("SELECT concat_ws('|', asset_id, zone_key, record_name, CASE WHEN referenced THEN 't' ELSE 'f' END) FROM asset_references ORDER BY 1"),
            try await lines("SELECT asset_id::text FROM assets WHERE bound ORDER BY 1"),
            try await lines("""
                SELECT concat_ws('|', user_record_name, owner, zone_name, share_name, CASE WHEN active THEN 't' ELSE 'f' END, change_sequence)
                FROM shared_zone_tracking ORDER BY 1
                """))
    }

    /// The live generation's served rows without their versions (a snapshot's rows carry its
    /// position, a replay's their events' ids), and the zone directory's keys.
    static func index(_ store: PostgresStore) async throws -> (rows: [String], zones: [String]) {
        try await store.withConnection { connection in
            var rows: [String] = []
            for try await row in try await connection.query("""
                SELECT concat_ws(' | ', zone_name, record_name, record_type, created_at, modified_at, record::text, search::text)
                FROM query_index.records WHERE generation = (SELECT generation FROM query_index.generations WHERE state = 'live') AND NOT deleted
                ORDER BY zone_name, record_name
                """, logger: TestSupport.logger).decode(String.self) {
                rows.append(row)
            }
            var zones: [String] = []
            for try await key in try await connection.query("SELECT zone_key FROM index_zones ORDER BY zone_key", logger: TestSupport.logger).decode(String.self) {
                zones.append(key)
            }
            return (rows, zones)
        }
    }
}
