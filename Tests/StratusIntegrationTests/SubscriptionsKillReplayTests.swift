import Foundation
import HummingbirdTesting
import StratusCore
@testable import StratusPostgres
import StratusTesting
import StratusWorkers
import XCTest

/// The built `stratus-subscriptions` killed (SIGKILL) in the middle of a burst, restarted, and
/// replayed from the beginning with `stratus replay stratus-subscriptions`: the notification log
/// holds every expected notification exactly once, and nothing else, at every step.
final class SubscriptionsKillReplayTests: XCTestCase {
    typealias Body = [String: Any]

    /// One write of the burst: one record in one request.
    struct Write: Sendable {
        var zone: String
        var recordName: String
        var count: Int
        /// The record's count before, for an update.
        var previousCount: Int?
    }

    /// A logged notification, as much as says which one it is.
    struct Logged: Hashable, Comparable, CustomStringConvertible {
        var subscriptionID: String
        var dedupeKey: String
        var type: String
        var reason: String?
        var zone: String
        var recordName: String?

        static func < (lhs: Logged, rhs: Logged) -> Bool { lhs.description < rhs.description }
        var description: String { "\(subscriptionID) \(dedupeKey) \(type) \(reason ?? "-") \(zone) \(recordName ?? "-")" }
    }

    /// The burst: 32 creates alternating between zones Q and R, then 16 updates of Q's records that
    /// move them into, within and out of the "big" predicate (count > 9).
    static let burst: [Write] = {
        var writes = (0..<32).map { index in Write(zone: index % 2 == 0 ? "Q" : "R", recordName: "r\(index)", count: index) }
        for index in stride(from: 0, to: 32, by: 2) {
            writes.append(Write(zone: "Q", recordName: "r\(index)", count: (index + 20) % 40, previousCount: index))
        }
        return writes
    }()

    /// Writes the kill waits for before it lets the rest of the burst go.
    static let beforeKill = 24

    static var subscriptions: [Body] { [
        SubscriptionTests.querySubscription("big", filters: [["fieldName": "count", "comparator": "GREATER_THAN", "fieldValue": ["value": 9]]]),
        SubscriptionTests.querySubscription("creates", firesOn: ["create"], zone: nil, extra: ["zoneWide": true]),
        ["subscriptionID": "zone-q", "subscriptionType": "zone", "zoneID": ["zoneName": "Q"]],
        ["subscriptionID": "db", "subscriptionType": "database"],
    ] }

    func testKillingTheWorkerMidBurstThenReplayingItLeavesEveryExpectedNotificationExactlyOnce() async throws {
        try await APIPipelineFixture.withStack(projection: SubscriptionsProjection(), relay: true, worker: false) { fixture, client, _, location in
            try await RecordAPITests.createZone(client, fixture, "Q")
            try await RecordAPITests.createZone(client, fixture, "R")
            let (status, saved) = try await SubscriptionTests.modify(client, fixture, Self.subscriptions.map(SubscriptionTests.create))
            XCTAssertEqual(status, 200)
            XCTAssertEqual(saved.compactMap { $0["subscriptionID"] as? String }, ["big", "creates", "zone-q", "db"], "\(saved)")
            let settings = location.settings.merging(["STRATUS_KAFKA_BACKGROUND_FETCH_WAIT_MS": "100"]) { $1 }

            // The burst, with the worker killed while it is applying it.
            let (gate, openGate) = AsyncStream<Void>.makeStream()
            let appliedAtKill = try await StratusExecutable.with("stratus-subscriptions", settings: settings) { worker in
                try await withThrowingTaskGroup(of: Void.self) { group in
                    group.addTask {
                        for (index, write) in Self.burst.enumerated() {
                            if index == Self.beforeKill { for await _ in gate { break } }
                            try await Self.perform(write, client, fixture)
                        }
                    }
                    defer { group.cancelAll() }
                    try await TestSupport.eventually(timeout: .seconds(90), "the worker to log its first notifications") {
                        try worker.requireRunning()
                        return try await Self.logged(fixture.store).count >= 3
                    }
                    let status = await worker.stop(signal: SIGKILL)
                    XCTAssertEqual(status, SIGKILL, "the worker was killed, not stopped")
                    let applied = try await Self.logged(fixture.store).count
                    openGate.yield()
                    openGate.finish()
                    try await group.waitForAll()
                    return applied
                }
            }

            let expected = try await Self.expected(fixture.store)
            // big: 11 creates over 9 in Q, then updates: 5 entering (r0…r8), 6 staying (r10…r18, r30), 5 leaving (r20…r28).
            XCTAssertEqual(expected.count, 27 /* big */ + 32 /* creates */ + 32 /* zone-q */ + 48 /* db */, "\(expected)")
            XCTAssertGreaterThan(appliedAtKill, 0)
            XCTAssertLessThan(appliedAtKill, expected.count, "the kill came before the worker had applied the burst")
            print("stratus-subscriptions was killed with \(appliedAtKill) of \(expected.count) notifications logged")

            // Restarted, the worker completes the log: every expected notification once, no other.
            try await StratusExecutable.with("stratus-subscriptions", settings: settings) { worker in
                try await TestSupport.eventually(timeout: .seconds(120), "the restarted worker to complete the log") {
                    try worker.requireRunning()
                    return try await Self.logged(fixture.store).count >= expected.count
                }
                // Whatever was applied twice would be logged by now: the log has settled when the
                // worker's checkpoints cover every event.
                try await Self.waitForCheckpoints(fixture.store)
                let status = await worker.stop(signal: SIGTERM)
                XCTAssertEqual(status, 0, "a stopped worker exits cleanly:\n\(worker.output().suffix(3000))")
            }
            try await Self.assertExactly(expected, in: fixture.store)
            let before = try await Self.notificationIDs(fixture.store)

            // Replayed from the beginning by the admin CLI, with the worker stopped as its help asks.
            let events = try await EventLog(store: fixture.store).events(after: 0, limit: 10_000, logger: TestSupport.logger).count
            let replay = try await StratusExecutable.run("stratus", ["replay", "stratus-subscriptions"], settings: settings)
            XCTAssertEqual(replay.status, 0, replay.output)
            XCTAssertTrue(replay.output.contains("replay stratus-subscriptions done: \(events) events"), replay.output)
            // The CLI's replay recorded itself as a run (what the console's operations page lists), with its progress.
            let runs = try await MaintenanceRunStore(store: fixture.store).recent(logger: TestSupport.logger)
            XCTAssertEqual(runs.map(\.job), [.replay(worker: "stratus-subscriptions")])
            XCTAssertEqual(runs.first?.state, "finished")
            XCTAssertEqual(runs.first?.startedBy, "cli")
            XCTAssertEqual(runs.first?.events, Int64(events))
            try await Self.assertExactly(expected, in: fixture.store)
            let after = try await Self.notificationIDs(fixture.store)
            XCTAssertEqual(after, before, "a replay logs nothing again and keeps every notification as it was")
        }
    }

    /// Saves one write of the burst through the API.
    static func perform(_ write: Write, _ client: any TestClientProtocol, _ fixture: RecordAPITests.Fixture) async throws {
        try await SubscriptionTests.save(client, fixture, write.recordName, count: write.count, zone: write.zone,
                                         operation: write.previousCount == nil ? "create" : "forceUpdate")
    }

    /// Exactly the notifications the burst must log: computed from the writes, with the event id
    /// (query notifications' key) and request id (zone and database notifications' key) each write
    /// got in the event log.
    static func expected(_ store: PostgresStore) async throws -> [Logged] {
        let events = try await EventLog(store: store).events(after: 0, limit: 10_000, logger: TestSupport.logger)
        let saves = try events.filter { $0.type == RecordSaved.eventType }.map { event in
            let saved = try event.decode(RecordSaved.self)
            return (id: event.id, request: event.causation.requestID, zone: saved.zoneID.zoneName, name: saved.record.recordName)
        }
        XCTAssertEqual(saves.count, burst.count, "one event per write")
        var expected: [Logged] = []
        // The k-th save of a record in the log is its k-th write in the burst.
        var seen: [String: Int] = [:]
        for save in saves {
            let nth = seen[save.name, default: 0]
            seen[save.name] = nth + 1
            guard let write = burst.filter({ $0.recordName == save.name }).dropFirst(nth).first, write.zone == save.zone else {
                XCTFail("an event the burst did not write: \(save)")
                continue
            }
            if write.zone == "Q" {
                let matches = write.count > 9
                let matched = write.previousCount.map { $0 > 9 }
                let reason: String? = switch (matched, matches) {
                case (nil, true), (false?, true): "recordCreated"
                case (true?, true): "recordUpdated"
                case (true?, false): "recordDeleted"
                default: nil
                }
                if let reason {
                    expected.append(Logged(subscriptionID: "big", dedupeKey: "event/\(save.id)", type: "query", reason: reason, zone: "Q", recordName: save.name))
                }
                expected.append(Logged(subscriptionID: "zone-q", dedupeKey: "request/\(save.request)", type: "zone", zone: "Q"))
            }
            if write.previousCount == nil {
                expected.append(Logged(subscriptionID: "creates", dedupeKey: "event/\(save.id)", type: "query", reason: "recordCreated", zone: write.zone,
                                       recordName: save.name))
            }
            expected.append(Logged(subscriptionID: "db", dedupeKey: "zone/\(write.zone)/request/\(save.request)", type: "database", zone: write.zone))
        }
        return expected.sorted()
    }

    /// The notification log, one entry per row.
    static func logged(_ store: PostgresStore) async throws -> [Logged] {
        try await store.withConnection { connection in
            let rows = try await connection.query(
                "SELECT subscription_id, dedupe_key, notification_type, reason, zone_name, record_name FROM notifications", logger: TestSupport.logger)
            var found: [Logged] = []
            for try await row in rows.decode((String, String, String, String?, String, String?).self) {
                found.append(Logged(subscriptionID: row.0, dedupeKey: row.1, type: row.2, reason: row.3, zone: row.4, recordName: row.5))
            }
            return found.sorted()
        }
    }

    /// Checks the log holds `expected` and nothing else, each once, at gapless positions 1…n.
    static func assertExactly(_ expected: [Logged], in store: PostgresStore, file: StaticString = #filePath, line: UInt = #line) async throws {
        let logged = try await logged(store)
        let missing = Set(expected).subtracting(logged)
        let unexpected = Set(logged).subtracting(expected)
        XCTAssertEqual(missing, [], "expected notifications missing", file: file, line: line)
        XCTAssertEqual(unexpected, [], "notifications that should not exist", file: file, line: line)
        XCTAssertEqual(logged, expected, "every notification exactly once", file: file, line: line)
        let positions = try await store.withConnection { connection in
            let rows = try await connection.query("SELECT position FROM notifications ORDER BY position", logger: TestSupport.logger)
            var positions: [Int64] = []
            for try await position in rows.decode(Int64.self) { positions.append(position) }
            return positions
        }
        XCTAssertEqual(positions, Array(1...Int64(expected.count)), "positions are gapless", file: file, line: line)
    }

    static func notificationIDs(_ store: PostgresStore) async throws -> [UUID] {
        try await store.withConnection { connection in
            let rows = try await connection.query("SELECT notification_id FROM notifications ORDER BY position", logger: TestSupport.logger)
            var ids: [UUID] = []
            for try await id in rows.decode(UUID.self) { ids.append(id) }
            return ids
        }
    }

    /// Waits until a worker's checkpoints (stratus-subscriptions' unless told) cover the last event of every zone.
    static func waitForCheckpoints(_ store: PostgresStore, worker: String = "stratus-subscriptions") async throws {
        try await TestSupport.eventually(timeout: .seconds(60), "the worker's checkpoints to reach every zone's last event") {
            try await store.withConnection { connection in
                let rows = try await connection.query("""
                    SELECT count(*) FROM (SELECT zone_key, max(zone_sequence) AS last FROM events WHERE zone_sequence IS NOT NULL GROUP BY zone_key) AS zones
                    WHERE NOT EXISTS (SELECT 1 FROM worker_checkpoints c
                                      WHERE c.worker = \(worker) AND c.zone_key = zones.zone_key AND c.last_sequence >= zones.last)
                    """, logger: TestSupport.logger)
                for try await behind in rows.decode(Int64.self) { return behind == 0 }
                return false
            }
        }
    }
}
