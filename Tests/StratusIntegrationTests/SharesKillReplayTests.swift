import Foundation
import HummingbirdTesting
import StratusCore
@testable import StratusPostgres
import StratusTesting
import StratusWorkers
import XCTest

/// The built `stratus-shares` killed (SIGKILL) in the middle of a burst of share and record
/// changes, restarted, and replayed from the beginning with `stratus replay stratus-shares`: the
/// participants' change tracking after the restart is what the burst must leave, and the replay
/// rebuilds exactly the same rows.
final class SharesKillReplayTests: XCTestCase {
    typealias Body = [String: Any]

    /// One tracking row, all of it.
    struct Tracked: Hashable, Comparable, CustomStringConvertible {
        var user: String
        var zone: String
        var share: String
        var active: Bool
        var sequence: Int64

        static func < (lhs: Tracked, rhs: Tracked) -> Bool { lhs.description < rhs.description }
        var description: String { "\(user) \(zone) \(share) \(active) \(sequence)" }
    }

    /// One write of the burst.
    enum Step: Sendable {
        case accept(String)
        case create(zone: String, name: String, parent: String)
        case delete(zone: String, name: String)
        /// Trip's share keeps only these guests.
        case keepOnly([String])

        func perform(_ client: any TestClientProtocol, _ fixture: SharingTests.Fixture, guids: [String]) async throws {
            let operations: [Body]
            let zone: String
            switch self {
            case .accept(let guest):
                _ = try await SharingTests.ok(client, fixture.path("records/accept", "public", as: guest), ["shortGUIDs": guids])
                return
            case .create(let zoneName, let record, let parent):
                zone = zoneName
                operations = [["operationType": "create", "record": ["recordName": record, "recordType": "Day", "parent": ["recordName": parent]]]]
            case .delete(let zoneName, let record):
                zone = zoneName
                operations = [["operationType": "forceDelete", "record": ["recordName": record]]]
            case .keepOnly(let kept):
                zone = "Trip"
                operations = [["operationType": "forceUpdate", "record": [
                    "recordName": "share", "participants": kept.map { SharingTests.participant($0, "READ_WRITE") }]]]
            }
            let answer = try await SharingTests.ok(client, fixture.path("records/modify", as: fixture.alice), ["zoneID": ["zoneName": zone], "operations": operations])
            XCTAssertNil(SharingTests.list(answer, "records").first { $0["serverErrorCode"] != nil }, "\(answer)")
        }
    }

    static let participants = 8
    /// Writes the kill waits for before it lets the rest of the burst go.
    static let beforeKill = 12

    func testKillingTheFanOutMidBurstThenReplayingItRebuildsTheSameTracking() async throws {
        try await APIPipelineFixture.withStack(projection: SharesProjection(), relay: true, worker: false) { api, client, _, location in
            let users = UserStore(store: api.store, rounds: 1_000)
            var names: [String] = []
            for index in 0...Self.participants {
                names.append(try await users.create(
                    container: api.container, login: "user\(index)", password: "a password",
                    identity: UserIdentityChange(emailAddress: "user\(index)@example.com"), logger: TestSupport.logger))
            }
            let owner = names[0]
            let guests = Array(names.dropFirst())
            let fixture = SharingTests.Fixture(
                apiToken: api.apiToken, secretKey: api.configuration.secretKey, alice: owner, bob: guests[0], carol: guests[1], dave: guests[2],
                container: api.container)
            // Two zones, each with a hierarchy shared with every guest; their short GUIDs.
            var guids: [String] = []
            for zone in ["Trip", "Camp"] {
                try await SharingTests.createZone(client, fixture, zone)
                let answer = try await SharingTests.ok(client, fixture.path("records/modify", as: fixture.alice), [
                    "zoneID": ["zoneName": zone],
                    "operations": [
                        ["operationType": "create", "record": ["recordName": "root", "recordType": "Trip", "share": ["recordName": "share"]]],
                        ["operationType": "create", "record": [
                            "recordName": "share", "recordType": ShareRecord.recordType,
                            "participants": guests.map { SharingTests.participant($0, "READ_WRITE") }]],
                    ],
                ])
                guids.append(try XCTUnwrap(SharingTests.list(answer, "records").last?["shortGUID"] as? String, "\(answer)"))
            }
            // The burst: every guest accepts both shares, records come and go under the roots,
            // two guests are removed from Trip, and Camp's share is deleted with its root.
            // The accepts alternate with the creates, so the kill (held back until the 12th write)
            // lands while guests are still accepting: at most 6 of the 8 have accepted by then.
            var burst: [Step] = []
            for index in 0..<12 {
                if index < guests.count { burst.append(.accept(guests[index])) }
                burst.append(.create(zone: index % 2 == 0 ? "Trip" : "Camp", name: "r\(index)", parent: "root"))
            }
            burst += [.keepOnly(Array(guests.dropFirst(2))), .delete(zone: "Trip", name: "r0"), .delete(zone: "Camp", name: "root"),
                      .create(zone: "Trip", name: "last", parent: "r2")]
            let writes = burst
            let shortGUIDs = guids
            let settings = location.settings

            let (gate, openGate) = AsyncStream<Void>.makeStream()
            let trackedAtKill = try await StratusExecutable.with("stratus-shares", settings: settings) { worker in
                try await withThrowingTaskGroup(of: Void.self) { group in
                    group.addTask {
                        for (index, step) in writes.enumerated() {
                            if index == Self.beforeKill { for await _ in gate { break } }
                            try await step.perform(client, fixture, guids: shortGUIDs)
                        }
                    }
                    defer { group.cancelAll() }
                    try await TestSupport.eventually(timeout: .seconds(90), "the fan-out to track its first participants") {
                        try worker.requireRunning()
                        return try await Self.tracked(api.store).count >= 3
                    }
                    let status = await worker.stop(signal: SIGKILL)
                    XCTAssertEqual(status, SIGKILL, "the worker was killed, not stopped")
                    let tracked = try await Self.tracked(api.store)
                    openGate.yield()
                    openGate.finish()
                    try await group.waitForAll()
                    return tracked
                }
            }
            let expected = try await Self.expected(api.store, guests: guests, removed: Set(guests.prefix(2)))
            XCTAssertLessThan(trackedAtKill.count, expected.count, "the kill came before every guest's acceptance was written")
            XCTAssertNotEqual(trackedAtKill, expected, "the kill came before the fan-out had applied the burst")
            print("stratus-shares was killed with \(trackedAtKill.count) of \(expected.count) tracking rows")

            // Restarted, the worker completes the tracking.
            try await StratusExecutable.with("stratus-shares", settings: settings) { worker in
                try await SubscriptionsKillReplayTests.waitForCheckpoints(api.store, worker: "stratus-shares")
                try worker.requireRunning()
                let status = await worker.stop(signal: SIGTERM)
                XCTAssertEqual(status, 0, "a stopped worker exits cleanly:\n\(worker.output().suffix(3000))")
            }
            let afterRestart = try await Self.tracked(api.store)
            XCTAssertEqual(afterRestart, expected)

            // Replayed from the beginning by the admin CLI: the same rows, rebuilt from nothing.
            let events = try await EventLog(store: api.store).events(after: 0, limit: 10_000, logger: TestSupport.logger).count
            let replay = try await StratusExecutable.run("stratus", ["replay", "stratus-shares"], settings: settings)
            XCTAssertEqual(replay.status, 0, replay.output)
            XCTAssertTrue(replay.output.contains("replay stratus-shares done: \(events) events"), replay.output)
            let rebuilt = try await Self.tracked(api.store)
            XCTAssertEqual(rebuilt, afterRestart, "a replay rebuilds exactly what the killed and restarted worker left")
        }
    }

    /// What the burst must leave: every guest tracked in both zones; in Trip the kept guests active
    /// at the zone's last sequence and the two removed ones inactive at their removal's; in Camp
    /// nobody active, everyone at the share's deletion.
    static func expected(_ store: PostgresStore, guests: [String], removed: Set<String>) async throws -> [Tracked] {
        let events = try await EventLog(store: store).events(after: 0, limit: 10_000, logger: TestSupport.logger)
        var last: [String: Int64] = [:]
        var removal: Int64 = 0
        var shareDeletion: Int64 = 0
        for event in events {
            guard let sequence = event.zoneSequence else { continue }
            let zone: String
            switch event.type {
            case RecordSaved.eventType:
                let saved = try event.decode(RecordSaved.self)
                zone = saved.zoneID.zoneName
                if zone == "Trip", saved.record.recordName == "share",
                   saved.record.shareState?.participants.contains(where: { $0.acceptanceStatus == .removed }) == true, removal == 0 {
                    removal = sequence
                }
            case RecordDeleted.eventType:
                let deleted = try event.decode(RecordDeleted.self)
                zone = deleted.zoneID.zoneName
                if zone == "Camp", deleted.recordName == "share" { shareDeletion = sequence }
            default:
                continue
            }
            last[zone] = max(last[zone] ?? 0, sequence)
        }
        XCTAssertGreaterThan(removal, 0)
        XCTAssertGreaterThan(shareDeletion, 0)
        var rows: [Tracked] = []
        for guest in guests {
            let gone = removed.contains(guest)
            rows.append(Tracked(user: guest, zone: "Trip", share: "share", active: !gone, sequence: gone ? removal : last["Trip"] ?? 0))
            rows.append(Tracked(user: guest, zone: "Camp", share: "share", active: false, sequence: shareDeletion))
        }
        return rows.sorted()
    }

    /// The tracking table, one entry per row.
    static func tracked(_ store: PostgresStore) async throws -> [Tracked] {
        try await store.withConnection { connection in
            let rows = try await connection.query(
                "SELECT user_record_name, zone_name, share_name, active, change_sequence FROM shared_zone_tracking", logger: TestSupport.logger)
            var found: [Tracked] = []
            for try await row in rows.decode((String, String, String, Bool, Int64).self) {
                found.append(Tracked(user: row.0, zone: row.1, share: row.2, active: row.3, sequence: row.4))
            }
            return found.sorted()
        }
    }
}
