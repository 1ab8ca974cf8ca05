import Crypto
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import PostgresNIO
@testable import StratusKit
import StratusPostgres
import StratusTesting
import StratusWorkers
import XCTest

/// The sync engine's cases against the real API: a conflict resolved through the delegate, an
/// expired change token, a zone deleted on another device, an account change, and — with the
/// relay and the workers — a change pushed to another device and a participant's engine in the
/// shared database.
final class StratusKitEngineTests: XCTestCase {
    static let notes = ZoneID(zoneName: "Notes")

    func testAConflictGoesToTheDelegateWithTheServersRecordAndItsResolutionIsSent() async throws {
        try await KitStack.with { fixture, port, _ in
            let database = KitStack.container(fixture, port: port, user: "_conflict").privateCloudDatabase
            let (a, b) = try SyncDevice.pair(on: database)
            let id = RecordID(recordName: "note", zoneID: Self.notes)
            try await a.sendNew(id, text: "first", fetchedBy: b)
            await a.save(id, fields: ["text": "from a"])
            try await a.engine.sendChanges()
            // b changes its older version: the server refuses it, and b hears why with the server's record.
            b.resolvesConflicts = false
            await b.save(id, fields: ["text": "from b"])
            try await b.engine.sendChanges()
            let conflict = try XCTUnwrap(b.conflictErrors.first)
            XCTAssertEqual(conflict.code, .conflict)
            XCTAssertEqual(conflict.serverRecord?.fields["text"], .string("from a"))
            XCTAssertFalse(b.engine.state.hasPendingUntrackedChanges, "a failed save is the app's to re-add")
            XCTAssertEqual(b.records[id]?.fields["text"], .string("from a"), "this app took the server's record")
            // Resolving (b's text wins on the server's version) and re-adding sends it.
            b.resolvesConflicts = true
            await b.save(id, fields: ["text": "merged"])
            try await b.engine.sendChanges()
            try await a.engine.fetchChanges()
            let fetched1 = try await database.record(for: id).fields["text"]
            XCTAssertEqual(fetched1, .string("merged"))
            XCTAssertEqual(a.records[id]?.fields["text"], .string("merged"))
        }
    }

    func testAnExpiredChangeTokenResetsTheZoneAndRefetchesItWhole() async throws {
        try await KitStack.with { fixture, port, _ in
            let database = KitStack.container(fixture, port: port, user: "_expired").privateCloudDatabase
            let (a, b) = try SyncDevice.pair(on: database)
            try await a.sendNew(RecordID(recordName: "old", zoneID: Self.notes), text: "old", fetchedBy: b)
            // The zone is deleted and made again behind b's back (no sync of b between): b's token
            // is of the zone's earlier incarnation, which the server answers CHANGE_TOKEN_EXPIRED.
            _ = try await database.modifyZones(deleting: [Self.notes])
            _ = try await database.modifyZones(saving: [Zone(zoneID: Self.notes)])
            _ = try await database.modifyRecords(saving: [Record(recordType: "Note", recordID: RecordID(recordName: "new", zoneID: Self.notes), fields: ["text": "new"])], zoneID: Self.notes)
            do {
                _ = try await database.recordZoneChanges(Self.notes, since: b.engine.state.read { $0.zoneTokens[Self.notes] })
                XCTFail("the old token was still answered")
            } catch let error as StratusKitError {
                XCTAssertEqual(error.code, .changeTokenExpired)
            }
            try await b.engine.fetchChanges()
            XCTAssertTrue(b.eventNames.contains("zoneReset"), "\(b.eventNames)")
            XCTAssertEqual(Set(b.records.keys.map(\.recordName)), ["new"], "the zone's earlier records are gone, its current ones fetched")
            XCTAssertNotNil(b.engine.state.read { $0.zoneTokens[Self.notes] })
        }
    }

    func testAZoneOfManyPagesArrivesPageByPageInOrderEachWithItsToken() async throws {
        try await KitStack.with { fixture, port, _ in
            let database = KitStack.container(fixture, port: port, user: "_pages").privateCloudDatabase
            _ = try await database.modifyZones(saving: [Zone(zoneID: Self.notes)])
            let saved = (0..<7).map { Record(recordType: "Note", recordID: RecordID(recordName: "r\($0)", zoneID: Self.notes), fields: ["text": .string("t\($0)")]) }
            _ = try await database.modifyRecords(saving: saved, zoneID: Self.notes)
            let device = SyncDevice(name: "a", acknowledged: nil)
            try device.launch(database, resultsLimit: 2)
            try await device.engine.fetchChanges()
            // The next page is asked for while one is handed over; the app still hears each page,
            // then its state (with the page's token), in order, and the zone's end once.
            let zoneEvents = device.eventNames.drop { $0 != "willFetchRecordZoneChanges" }
            XCTAssertEqual(Array(zoneEvents), ["willFetchRecordZoneChanges"] + Array(repeating: ["fetchedRecordZoneChanges", "stateUpdate"], count: 4).flatMap { $0 }
                + ["didFetchRecordZoneChanges", "didFetchChanges"])
            XCTAssertEqual(device.records.mapValues { $0.fields["text"] }, Dictionary(uniqueKeysWithValues: saved.map { ($0.recordID, $0.fields["text"]) }))
            let token = try XCTUnwrap(device.engine.state.read { $0.zoneTokens[Self.notes] })
            XCTAssertEqual(device.locked { $0.persisted }, device.engine.state.serialization, "the last state handed over is the engine's")
            XCTAssertTrue(device.engine.state.read(\.zonesToRefetch).isEmpty)
            // From that token: only what changed since.
            let next = Record(recordType: "Note", recordID: RecordID(recordName: "r7", zoneID: Self.notes), fields: ["text": "t7"])
            _ = try await database.modifyRecords(saving: [next], zoneID: Self.notes)
            let since = try await database.recordZoneChanges(Self.notes, since: token)
            XCTAssertEqual(since.modified.map(\.recordID), [next.recordID])
            try await device.engine.fetchChanges()
            XCTAssertEqual(device.records.count, 8)
            XCTAssertEqual(device.eventNames.filter { $0 == "fetchedRecordZoneChanges" }.count, 5, "one page more, of the one record")
        }
    }

    func testAZoneDeletedOnAnotherDeviceGoesWithItsPendingChanges() async throws {
        try await KitStack.with { fixture, port, _ in
            let database = KitStack.container(fixture, port: port, user: "_zonegone").privateCloudDatabase
            let (a, b) = try SyncDevice.pair(on: database)
            try await a.sendNew(RecordID(recordName: "one", zoneID: Self.notes), text: "one", fetchedBy: b)
            XCTAssertEqual(b.zones, [Self.notes])
            await a.deleteZone(Self.notes)
            try await a.engine.sendChanges()
            // b changed a record of it meanwhile; then hears the zone is gone.
            await b.save(RecordID(recordName: "one", zoneID: Self.notes), fields: ["text": "edited"])
            try await b.engine.fetchChanges()
            XCTAssertEqual(b.zones, [])
            XCTAssertEqual(b.records.count, 0)
            XCTAssertFalse(b.engine.state.hasPendingUntrackedChanges, "a change of a deleted zone has nowhere to go")
            XCTAssertNil(b.engine.state.read { $0.zoneTokens[Self.notes] })
            let fetched2 = try await database.allZones().map(\.zoneID)
            XCTAssertEqual(fetched2, [.default])
            // A save to a zone gone before the device heard of it fails with ZONE_NOT_FOUND, reported.
            let c = SyncDevice(name: "c", acknowledged: nil)
            try c.launch(database)
            await c.save(RecordID(recordName: "two", zoneID: Self.notes), fields: ["text": "two"])
            try await c.engine.sendChanges()
            XCTAssertTrue(c.eventNames.contains("sentRecordZoneChanges"))
            XCTAssertNil(c.records[RecordID(recordName: "two", zoneID: Self.notes)])
            XCTAssertFalse(c.engine.state.hasPendingUntrackedChanges)
        }
    }

    func testAnotherAccountAndASignedOutUserAreAccountChanges() async throws {
        try await KitStack.with { fixture, port, _ in
            let alice = KitStack.container(fixture, port: port, user: "_alice").privateCloudDatabase
            let device = SyncDevice(name: "phone", acknowledged: nil)
            try device.launch(alice)
            await device.createZone(Self.notes)
            await device.save(RecordID(recordName: "mine", zoneID: Self.notes), fields: ["text": "alice's"])
            try await device.engine.sendChanges()
            XCTAssertEqual(device.accounts, [.signIn(currentUser: "_alice")])
            // The same device's state, now with bob's credential: another account.
            try device.launch(KitStack.container(fixture, port: port, user: "_bob").privateCloudDatabase)
            await device.save(RecordID(recordName: "queued", zoneID: Self.notes), fields: ["text": "x"])
            try await device.engine.fetchChanges()
            XCTAssertEqual(device.accounts.last, .switchAccounts(previousUser: "_alice", currentUser: "_bob"))
            XCTAssertEqual(device.records.count, 0, "alice's data left the device")
            XCTAssertFalse(device.engine.state.hasPendingUntrackedChanges, "nothing of alice's is sent as bob's")
            let fetched3 = try await ServerContents.read(KitStack.container(fixture, port: port, user: "_bob").privateCloudDatabase).records.count
            XCTAssertEqual(fetched3, 0)
            // A credential that no longer works (expired): signed out, and the engine stops.
            try device.launch(KitStack.container(fixture, port: port, user: "_bob", expiresIn: -60).privateCloudDatabase)
            do {
                try await device.engine.fetchChanges()
                XCTFail("an expired credential fetched")
            } catch let error as StratusKitError {
                XCTAssertTrue(error.isAccountFailure, "\(error)")
            }
            XCTAssertEqual(device.accounts.last, .signOut(previousUser: "_bob"))
            XCTAssertNil(device.engine.state.read(\.userRecordName))
        }
    }

    func testAnEngineThatRunsIsPushedAnotherDevicesChangeAndSendsItsOwn() async throws {
        try await KitStack.with(pipeline: true) { fixture, port, _ in
            let database = KitStack.container(fixture, port: port, user: "_pushed").privateCloudDatabase
            let (a, b) = try SyncDevice.pair(on: database, courier: .automatic)
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { await a.engine.run() }
                group.addTask { await b.engine.run() }
                defer { group.cancelAll() }
                // The couriers are listening once their subscription and tokens exist.
                for device in [a, b] {
                    try await TestSupport.eventually(timeout: .seconds(20), "\(device.name)'s courier") {
                        device.engine.state.read { $0.courier != nil && $0.subscriptionSaved }
                    }
                }
                await a.createZone(Self.notes)
                await a.save(RecordID(recordName: "hello", zoneID: Self.notes), fields: ["text": "pushed"])
                // a sends by itself (pending changes, debounced); b fetches when notified.
                try await TestSupport.eventually(timeout: .seconds(20), "b to be handed a's record") {
                    b.records[RecordID(recordName: "hello", zoneID: Self.notes)]?.fields["text"] == .string("pushed")
                }
                XCTAssertFalse(a.engine.state.hasPendingUntrackedChanges)
                // And back: b's change is pushed to a.
                await b.save(RecordID(recordName: "reply", zoneID: Self.notes), fields: ["text": "back"])
                try await TestSupport.eventually(timeout: .seconds(20), "a to be handed b's record") {
                    a.records[RecordID(recordName: "reply", zoneID: Self.notes)]?.fields["text"] == .string("back")
                }
            }
            // Each engine's courier token was made for its device, so the server does not push a
            // device its own changes (OwnChangeNotificationTests shows the courier's side).
            let devices = try await fixture.store.withConnection { connection in
                var found: [String] = []
                for try await device in try await connection.query("SELECT device_id FROM courier_tokens ORDER BY device_id", logger: TestSupport.logger).decode(String?.self) {
                    found.append(device ?? "(no device)")
                }
                return found
            }
            XCTAssertEqual(devices, [a.engine.state.deviceID, b.engine.state.deviceID].sorted())
            // The courier they listened on: the WebSocket where this platform's URLSession speaks it,
            // else (FoundationNetworking over a libcurl without WebSocket) the long poll, after the
            // WebSocket was tried and refused.
            let speaksWebSocket = await Self.urlSessionSpeaksWebSocket()
            for device in [a, b] {
                let unavailable = await device.engine.webSocketUnavailable
                let courier = await device.engine.lastCourier
                XCTAssertEqual(unavailable, !speaksWebSocket, device.name)
                XCTAssertEqual(courier, speaksWebSocket ? StratusSyncEngine.CourierMode.webSocket : .longPoll, device.name)
            }
        }
    }

    /// Whether URLSession here opens WebSockets: it refuses a `ws:` URL at once as unsupported
    /// where it cannot (else it tries to connect, and a closed port refuses the connection).
    static func urlSessionSpeaksWebSocket() async -> Bool {
        let task = URLSession.shared.webSocketTask(with: URL(string: "ws://127.0.0.1:1/")!)
        task.resume()
        defer { task.cancel() }
        do {
            _ = try await task.receive()
            return true
        } catch {
            return !StratusSyncEngine.refusesWebSocket(error)
        }
    }

    func testAParticipantsEngineSeesTheOwnersChangesInTheSharedDatabase() async throws {
        try await KitStack.with(projection: CompositeProjection(name: "stratus-shares", parts: [SharesProjection(), SubscriptionsProjection()]), pipeline: true) { fixture, port, _ in
            let owner = KitStack.container(fixture, port: port, user: "_owner").privateCloudDatabase
            let participant = KitStack.container(fixture, port: port, user: "_participant")
            let trip = ZoneID(zoneName: "Trip")
            _ = try await owner.modifyZones(saving: [Zone(zoneID: trip)])
            let share = Record.share(zoneID: trip, participants: [ShareParticipant(.userRecordName("_participant"), permission: .readWrite)])
            let saved = try await owner.save(share)
            let guid = try XCTUnwrap(saved.shareShortGUID, "\(saved.shareMembers)")
            XCTAssertEqual(saved.shareParticipants.first { $0.lookup == .userRecordName("_participant") }?.permission, .readWrite)
            let accepted = try await participant.sharedCloudDatabase.acceptShares(shortGUIDs: [guid])
            XCTAssertNoThrow(try accepted.first?.get())
            _ = try await owner.modifyRecords(saving: [Record(recordType: "Stop", recordID: RecordID(recordName: "lisbon", zoneID: trip), fields: ["city": "Lisbon"])], zoneID: trip)

            let device = SyncDevice(name: "participant", acknowledged: nil)
            try device.launch(participant.sharedCloudDatabase)
            let shared = ZoneID(zoneName: "Trip", ownerRecordName: "_owner")
            try await TestSupport.eventually(timeout: .seconds(20), "the participant's engine to fetch the owner's record") {
                try await device.engine.fetchChanges()
                return device.records[RecordID(recordName: "lisbon", zoneID: shared)] != nil
            }
            XCTAssertEqual(device.zones, [shared])
            // The owner's next change reaches the participant's next fetch.
            _ = try await owner.modifyRecords(saving: [Record(recordType: "Stop", recordID: RecordID(recordName: "porto", zoneID: trip), fields: ["city": "Porto"])], zoneID: trip)
            try await TestSupport.eventually(timeout: .seconds(20), "the owner's second record") {
                try await device.engine.fetchChanges()
                return device.records[RecordID(recordName: "porto", zoneID: shared)]?.fields["city"] == .string("Porto")
            }
            // The participant writes through the shared database (READ_WRITE); the owner sees it.
            await device.save(RecordID(recordName: "faro", zoneID: shared), fields: ["city": "Faro"])
            try await device.engine.sendChanges()
            let fetched4 = try await owner.record(for: RecordID(recordName: "faro", zoneID: trip)).fields["city"]
            XCTAssertEqual(fetched4, .string("Faro"))
            // The owner deletes the share: the participant's engine hears the zone is gone.
            _ = try await owner.modifyRecords(deleting: [share.recordID], zoneID: trip)
            try await TestSupport.eventually(timeout: .seconds(20), "the share's loss to reach the participant") {
                try await device.engine.fetchChanges()
                return device.zones.isEmpty
            }
            XCTAssertEqual(device.records.count, 0)
        }
    }
}
