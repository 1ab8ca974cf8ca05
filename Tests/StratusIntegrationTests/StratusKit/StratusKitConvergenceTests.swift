import Foundation
@testable import StratusKit
import StratusTesting
import XCTest

/// The convergence property: three devices of one user, each with its own store and state, make
/// random creates, updates, deletes and zone changes, go offline at random (their engines then
/// reach no server, and come back from what they persisted), and one device's process is killed
/// mid-send and resumed; at the end every device equals the server and each other, and the
/// server holds exactly what was acknowledged last: no acknowledged change lost, none resurrected.
final class StratusKitConvergenceTests: XCTestCase {
    func testDevicesConvergeWithTheServerWhateverTheyDoAndWhenTheyDie() async throws {
        try await KitStack.with { fixture, port, _ in
            var totals = Totals()
            for seed: UInt64 in [1, 2, 3] {
                totals.add(try await Self.run(seed: seed, fixture: fixture, port: port))
            }
            // The seeds exercise what the property is about: conflicts, offline spells, records left.
            print("convergence: \(totals)")
            XCTAssertGreaterThan(totals.conflicts, 0, "\(totals)")
            XCTAssertGreaterThan(totals.offlineSpells, 0, "\(totals)")
            XCTAssertGreaterThan(totals.records, 0, "\(totals)")
            XCTAssertEqual(totals.kills, 3, "one process killed mid-send per seed")
        }
    }

    struct Totals: CustomStringConvertible {
        var conflicts = 0, offlineSpells = 0, records = 0, kills = 0, zoneDeletes = 0
        mutating func add(_ other: Totals) {
            conflicts += other.conflicts
            offlineSpells += other.offlineSpells
            records += other.records
            kills += other.kills
            zoneDeletes += other.zoneDeletes
        }
        var description: String { "\(conflicts) conflicts, \(offlineSpells) offline spells, \(zoneDeletes) zone deletes, \(kills) kills, \(records) records at the end" }
    }

    static func run(seed: UInt64, fixture: KitStack.Fixture, port: Int) async throws -> Totals {
        var totals = Totals()
        var random = SplitMix64(seed: seed)
        let user = "_converge\(seed)"
        let online = KitStack.container(fixture, port: port, user: user).privateCloudDatabase
        let offline = KitStack.offline(fixture, user: user).privateCloudDatabase
        let acknowledged = Acknowledged()
        let devices = (0..<3).map { SyncDevice(name: "device \($0)", acknowledged: acknowledged) }
        var isOnline = [true, true, true]
        for device in devices { try device.launch(online) }
        let zoneNames = ["Z0", "Z1", "Z2"].map { ZoneID(zoneName: $0) }
        var counter = 0
        var killed = false
        let steps = 90
        for step in 0..<steps {
            let index = Int.random(in: 0..<devices.count, using: &random)
            let device = devices[index]
            let roll = Int.random(in: 0..<100, using: &random)
            let records = device.records.keys.sorted { $0.recordName < $1.recordName }
            let zones = device.zones.sorted { $0.zoneName < $1.zoneName }
            switch roll {
            case 0..<25:
                guard let zone = zones.randomElement(using: &random) else {
                    await device.createZone(zoneNames.randomElement(using: &random)!)
                    continue
                }
                counter += 1
                await device.save(RecordID(recordName: "r\(counter)", zoneID: zone), fields: ["text": .string("s\(seed) step \(step)"), "n": .int64(Int64(step))])
            case 25..<45:
                guard let id = records.randomElement(using: &random) else { continue }
                await device.save(id, fields: ["text": .string("s\(seed) step \(step) by \(index)"), "n": .int64(Int64(step))])
            case 45..<55:
                guard let id = records.randomElement(using: &random) else { continue }
                await device.delete(id)
            case 55..<58:
                guard let zone = zones.randomElement(using: &random) else { continue }
                await device.deleteZone(zone)
                totals.zoneDeletes += 1
            case 58..<61:
                await device.createZone(zoneNames.randomElement(using: &random)!)
            case 61..<67:
                // Offline spells: the engine is replaced by one that reaches no server (a new
                // process from what the device persisted), and back.
                isOnline[index].toggle()
                if !isOnline[index] { totals.offlineSpells += 1 }
                try device.launch(isOnline[index] ? online : offline)
            case 67..<70 where !killed && isOnline[index] && device.engine.state.hasPendingUntrackedChanges:
                killed = true
                try await device.killDuringNextSend(resumeWith: online)
            default:
                do {
                    try await device.engine.sendChanges()
                    try await device.engine.fetchChanges()
                } catch let error as StratusKitError where !isOnline[index] && error.code == .networkFailure {
                    // Offline: the changes stay pending.
                }
            }
        }
        if !killed, let device = devices.first {
            await device.createZone(zoneNames[0])
            await device.save(RecordID(recordName: "last", zoneID: zoneNames[0]), fields: ["text": "last"])
            try await device.killDuringNextSend(resumeWith: online)
        }
        // Everyone back online; rounds of send and fetch until nothing is pending anywhere.
        for (index, device) in devices.enumerated() where !isOnline[index] { try device.launch(online) }
        var rounds = 0
        repeat {
            rounds += 1
            for device in devices { try await device.engine.sendChanges() }
            for device in devices { try await device.engine.fetchChanges() }
        } while devices.contains(where: { $0.engine.state.hasPendingUntrackedChanges }) && rounds < 10
        XCTAssertFalse(devices.contains { $0.engine.state.hasPendingUntrackedChanges }, "seed \(seed): changes still pending after \(rounds) rounds")

        let server = try await ServerContents.read(online)
        let expected = acknowledged.snapshot
        XCTAssertEqual(Set(server.records.keys), Set(expected.records.keys),
                       "seed \(seed): the server holds exactly the records last acknowledged (missing: \(Set(expected.records.keys).subtracting(server.records.keys)), resurrected: \(Set(server.records.keys).subtracting(expected.records.keys)))")
        for (id, fields) in expected.records { XCTAssertEqual(server.records[id]?.fields, fields, "seed \(seed): \(id) as last acknowledged") }
        for device in devices {
            let local = device.records
            XCTAssertEqual(Set(local.keys), Set(server.records.keys), "seed \(seed): \(device.name)'s records")
            for (id, record) in server.records {
                XCTAssertEqual(local[id]?.fields, record.fields, "seed \(seed): \(device.name)'s \(id)")
                XCTAssertEqual(local[id]?.recordChangeTag, record.recordChangeTag, "seed \(seed): \(device.name)'s \(id) is the server's version")
            }
            XCTAssertEqual(device.zones, server.zones, "seed \(seed): \(device.name)'s zones")
        }
        totals.kills = 1
        totals.records = server.records.count
        totals.conflicts = devices.map(\.conflictErrors.count).reduce(0, +)
        return totals
    }
}
