import Foundation
@testable import StratusKit
import StratusTesting
import XCTest

/// A device of a test: a small notes app over StratusKit. Its local store (records and zones),
/// the state it persisted at the last `.stateUpdate`, and its sync engine; what the server
/// acknowledged goes to the test's `Acknowledged` model. Conflicts are resolved "this device's
/// change wins": the local fields go again on the server's change tag.
final class SyncDevice: StratusSyncEngineDelegate, @unchecked Sendable {
    struct Store: Sendable {
        var records: [RecordID: Record] = [:]
        var zones: Set<ZoneID> = []
        var persisted: StratusSyncEngine.State.Serialization?
    }

    let name: String
    let acknowledged: Acknowledged?
    private let lock = NSLock()
    private var store = Store()
    private var events: [String] = []
    private var conflicts: [StratusKitError] = []
    private var accountChanges: [StratusSyncEngine.AccountChange] = []
    /// Set: the process "dies" when the next send starts; what it persisted then is what a new
    /// process resumes from, and nothing of that send's answer reaches the app.
    private var doomed = false
    private var snapshotAtDeath: Store?
    var resolvesConflicts = true
    private(set) var engine: StratusSyncEngine!

    init(name: String, acknowledged: Acknowledged?) {
        self.name = name
        self.acknowledged = acknowledged
    }

    func locked<T>(_ body: (inout Store) -> T) -> T {
        lock.lock()
        defer { lock.unlock() }
        return body(&store)
    }

    var records: [RecordID: Record] { locked { $0.records } }
    var zones: Set<ZoneID> { locked { $0.zones } }
    var eventNames: [String] { lock.lock(); defer { lock.unlock() }; return events }
    var conflictErrors: [StratusKitError] { lock.lock(); defer { lock.unlock() }; return conflicts }
    var accounts: [StratusSyncEngine.AccountChange] { lock.lock(); defer { lock.unlock() }; return accountChanges }

    /// A new engine (a new process) from what this device persisted last.
    func launch(_ database: StratusDatabase, courier: StratusSyncEngine.CourierMode = .none, resultsLimit: Int? = nil) throws {
        var configuration = StratusSyncEngine.Configuration(database: database, stateSerialization: locked { $0.persisted }, delegate: self)
        configuration.courier = courier
        configuration.resultsLimit = resultsLimit
        configuration.longPollTimeout = 5
        configuration.sendDebounce = .milliseconds(10)
        engine = try StratusSyncEngine(configuration)
    }

    /// Two devices of one user, each launched on `database`.
    static func pair(on database: StratusDatabase, courier: StratusSyncEngine.CourierMode = .none) throws -> (SyncDevice, SyncDevice) {
        let a = SyncDevice(name: "a", acknowledged: nil), b = SyncDevice(name: "b", acknowledged: nil)
        try a.launch(database, courier: courier)
        try b.launch(database, courier: courier)
        return (a, b)
    }

    /// Makes `zone` with one record of `text` here, sends it, and has `other` fetch it.
    func sendNew(_ id: RecordID, text: String, fetchedBy other: SyncDevice) async throws {
        await createZone(id.zoneID)
        await save(id, fields: ["text": .string(text)])
        try await engine.sendChanges()
        try await other.engine.fetchChanges()
        XCTAssertEqual(other.records[id]?.fields["text"], .string(text), "\(other.name) fetched \(name)'s record")
    }

    // MARK: What the user does

    func createZone(_ zone: ZoneID) async {
        locked { $0.zones.insert(zone) }
        engine.state.add(pendingDatabaseChanges: [.saveZone(Zone(zoneID: zone))])
        await engine.saveState()
    }

    func deleteZone(_ zone: ZoneID) async {
        let gone = locked { store -> [PendingRecordZoneChange] in
            store.zones.remove(zone)
            let ids = store.records.keys.filter { $0.zoneID == zone }
            for id in ids { store.records[id] = nil }
            return ids.flatMap { [.saveRecord($0), .deleteRecord($0)] }
        }
        engine.state.remove(pendingRecordZoneChanges: gone)
        engine.state.add(pendingDatabaseChanges: [.deleteZone(zone)])
        await engine.saveState()
    }

    func save(_ id: RecordID, fields: [String: FieldValue], encrypted: [String: FieldValue] = [:]) async {
        locked { store in
            var record = store.records[id] ?? Record(recordType: "Note", recordID: id)
            record.fields = fields
            record.encryptedValues = encrypted
            store.records[id] = record
        }
        engine.state.add(pendingRecordZoneChanges: [.saveRecord(id)])
        await engine.saveState()
    }

    func delete(_ id: RecordID) async {
        locked { $0.records[id] = nil }
        engine.state.add(pendingRecordZoneChanges: [.deleteRecord(id)])
        await engine.saveState()
    }

    /// The next send dies after its requests reached the server, before anything of their answers
    /// reached the app; the device comes back from what it had persisted before.
    func killDuringNextSend(resumeWith database: StratusDatabase) async throws {
        locked { _ in doomed = true }
        do { try await engine.sendChanges() } catch {}
        let restored = lock.withLock { () -> Store? in
            defer { doomed = false; snapshotAtDeath = nil }
            return snapshotAtDeath
        }
        if let restored { locked { $0 = restored } }
        try launch(database)
    }

    // MARK: The delegate

    func handleEvent(_ event: StratusSyncEngine.Event, syncEngine: StratusSyncEngine) async {
        let dead = lock.withLock { () -> Bool in
            if doomed, snapshotAtDeath == nil, case .willSendChanges = event { snapshotAtDeath = store }
            return snapshotAtDeath != nil
        }
        if dead { return }
        lock.withLock { events.append(Self.name(event)) }
        switch event {
        case .stateUpdate(let serialization):
            locked { $0.persisted = serialization }
        case .accountChange(let change):
            lock.withLock { accountChanges.append(change) }
            if case .signIn = change { return }
            locked { $0 = Store(persisted: $0.persisted) }
        case .fetchedDatabaseChanges(let modifications, let deletions):
            locked { store in
                store.zones.formUnion(modifications)
                for deletion in deletions {
                    store.zones.remove(deletion.zoneID)
                    for id in store.records.keys where id.zoneID == deletion.zoneID { store.records[id] = nil }
                }
            }
        case .fetchedRecordZoneChanges(let modifications, let deletions):
            let pending = Set(syncEngine.state.pendingRecordZoneChanges)
            var dropped: [PendingRecordZoneChange] = []
            locked { store in
                for record in modifications {
                    store.zones.insert(record.recordID.zoneID)
                    if pending.contains(.saveRecord(record.recordID)), var local = store.records[record.recordID] {
                        // Changed here too: this device's change wins, on the server's version.
                        local.recordChangeTag = record.recordChangeTag
                        store.records[record.recordID] = local
                    } else if !pending.contains(.deleteRecord(record.recordID)) {
                        store.records[record.recordID] = record
                    }
                }
                for id in deletions {
                    store.records[id] = nil
                    dropped.append(.saveRecord(id))
                }
            }
            if !dropped.isEmpty { syncEngine.state.remove(pendingRecordZoneChanges: dropped) }
        case .zoneReset(let zone):
            let pending = Set(syncEngine.state.pendingRecordZoneChanges.map(\.recordID))
            locked { store in
                for id in store.records.keys where id.zoneID == zone && !pending.contains(id) { store.records[id] = nil }
            }
        case .sentDatabaseChanges(let sent):
            locked { store in
                for zone in sent.savedZones { store.zones.insert(zone.zoneID) }
                for (zone, _) in sent.failedZoneSaves { store.zones.remove(zone.zoneID) }
            }
            for zone in sent.savedZones { acknowledged?.zoneSaved(zone.zoneID) }
            for zone in sent.deletedZoneIDs { acknowledged?.zoneDeleted(zone) }
        case .sentRecordZoneChanges(let sent):
            let pending = Set(syncEngine.state.pendingRecordZoneChanges)
            var requeue: [PendingRecordZoneChange] = []
            locked { store in
                for record in sent.savedRecords {
                    if pending.contains(.saveRecord(record.recordID)), var local = store.records[record.recordID] {
                        local.recordChangeTag = record.recordChangeTag
                        store.records[record.recordID] = local
                    } else if !pending.contains(.deleteRecord(record.recordID)) {
                        store.records[record.recordID] = record
                    }
                }
                for (record, error) in sent.failedRecordSaves {
                    // Deleted here meanwhile: the delete goes next.
                    if pending.contains(.deleteRecord(record.recordID)) { continue }
                    if [.conflict, .exists].contains(error.code), let server = error.serverRecord, resolvesConflicts, var local = store.records[record.recordID] {
                        local.recordChangeTag = server.recordChangeTag
                        store.records[record.recordID] = local
                        requeue.append(.saveRecord(record.recordID))
                    } else if [.conflict, .exists].contains(error.code), let server = error.serverRecord {
                        store.records[record.recordID] = server
                    } else {
                        // Gone on the server (its zone, or the record): so it goes here.
                        store.records[record.recordID] = nil
                    }
                }
            }
            lock.withLock { conflicts += sent.failedRecordSaves.map(\.error).filter { $0.code == .conflict || $0.code == .exists } }
            for record in sent.savedRecords { acknowledged?.recordSaved(record) }
            for id in sent.deletedRecordIDs { acknowledged?.recordDeleted(id) }
            if !requeue.isEmpty { syncEngine.state.add(pendingRecordZoneChanges: requeue) }
        default:
            break
        }
    }

    func nextRecordZoneChangeBatch(_ context: StratusSyncEngine.SendChangesContext, syncEngine: StratusSyncEngine) async -> StratusSyncEngine.RecordZoneChangeBatch? {
        let records = self.records
        return await StratusSyncEngine.RecordZoneChangeBatch(pendingChanges: context.pendingChanges) { records[$0] }
    }

    static func name(_ event: StratusSyncEngine.Event) -> String {
        switch event {
        case .stateUpdate: "stateUpdate"
        case .accountChange: "accountChange"
        case .fetchedDatabaseChanges: "fetchedDatabaseChanges"
        case .fetchedRecordZoneChanges: "fetchedRecordZoneChanges"
        case .zoneReset: "zoneReset"
        case .sentDatabaseChanges: "sentDatabaseChanges"
        case .sentRecordZoneChanges: "sentRecordZoneChanges"
        case .willFetchChanges: "willFetchChanges"
        case .willFetchRecordZoneChanges: "willFetchRecordZoneChanges"
        case .didFetchRecordZoneChanges: "didFetchRecordZoneChanges"
        case .didFetchChanges: "didFetchChanges"
        case .willSendChanges: "willSendChanges"
        case .didSendChanges: "didSendChanges"
        }
    }
}

/// What the server acknowledged, in the order the test's devices heard it (they send one at a
/// time, so that is the order the server wrote it): each record's last acknowledged fields.
final class Acknowledged: @unchecked Sendable {
    private let lock = NSLock()
    private var records: [RecordID: [String: FieldValue]] = [:]
    private var zones: Set<ZoneID> = []

    func recordSaved(_ record: Record) { lock.withLock { records[record.recordID] = record.fields; zones.insert(record.recordID.zoneID) } }
    func recordDeleted(_ id: RecordID) { _ = lock.withLock { records.removeValue(forKey: id) } }
    func zoneSaved(_ zone: ZoneID) { _ = lock.withLock { zones.insert(zone) } }
    func zoneDeleted(_ zone: ZoneID) {
        lock.withLock {
            zones.remove(zone)
            records = records.filter { $0.key.zoneID != zone }
        }
    }

    var snapshot: (records: [RecordID: [String: FieldValue]], zones: Set<ZoneID>) { lock.withLock { (records, zones) } }
}

/// Reads a database as it is on the server: its custom zones and every record of them.
enum ServerContents {
    static func read(_ database: StratusDatabase) async throws -> (records: [RecordID: Record], zones: Set<ZoneID>) {
        var records: [RecordID: Record] = [:]
        var zones: Set<ZoneID> = []
        for zone in try await database.allZones() where zone.zoneID != .default {
            zones.insert(zone.zoneID)
            var token: String?
            repeat {
                let page = try await database.recordZoneChanges(zone.zoneID, since: token)
                for record in page.modified { records[record.recordID] = record }
                for id in page.deleted { records[id] = nil }
                token = page.syncToken
                if !page.moreComing { break }
            } while true
        }
        return (records, zones)
    }
}
