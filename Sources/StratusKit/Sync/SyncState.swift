import Foundation

/// A change the engine is to send: a record to save (the delegate hands the record when asked)
/// or delete.
public enum PendingRecordZoneChange: Sendable, Hashable, Codable {
    case saveRecord(RecordID)
    case deleteRecord(RecordID)

    public var recordID: RecordID {
        switch self {
        case .saveRecord(let id), .deleteRecord(let id): id
        }
    }
}

/// A zone the engine is to create or delete.
public enum PendingDatabaseChange: Sendable, Hashable, Codable {
    case saveZone(Zone)
    case deleteZone(ZoneID)

    public var zoneID: ZoneID {
        switch self {
        case .saveZone(let zone): zone.zoneID
        case .deleteZone(let id): id
        }
    }
}

/// What the engine keeps between launches: the database's and each zone's sync token, the
/// changes still to send, the user it synced for, and this device's courier. The app persists
/// the serialization each `.stateUpdate` event hands it and gives the last one back at launch.
struct SyncSnapshot: Sendable, Hashable, Codable {
    /// The format's version.
    var version = 1
    var userRecordName: String?
    var databaseToken: String?
    var zoneTokens: [ZoneID: String] = [:]
    /// Zones whose changes are to be fetched from scratch (their token expired).
    var zonesToRefetch: [ZoneID] = []
    /// In the order they were added, each once; the number is when it was last added.
    var pendingRecordZoneChanges: [Numbered<PendingRecordZoneChange>] = []
    var pendingDatabaseChanges: [Numbered<PendingDatabaseChange>] = []
    var counter: UInt64 = 0
    var courier: StratusDatabase.CourierToken?
    var subscriptionSaved = false
    /// This device's id (random, made once per state).
    var deviceID: String = UUID().uuidString

    struct Numbered<Change: Sendable & Hashable & Codable>: Sendable, Hashable, Codable {
        var change: Change
        var number: UInt64
    }

    /// Adds changes, each once: a change added again moves to the end with a new number (so a
    /// send in flight that carries its older version does not take it out of pending). A save and
    /// a delete of one record replace each other: the latest wins.
    mutating func add(records changes: [PendingRecordZoneChange]) {
        for change in changes {
            counter += 1
            pendingRecordZoneChanges.append(change, number: counter) { $0.recordID == change.recordID }
        }
    }

    mutating func remove(records changes: [PendingRecordZoneChange]) { pendingRecordZoneChanges.remove(changes) }

    /// Takes out a change sent and answered, unless it was added again since (`number` newer).
    mutating func settle(_ change: PendingRecordZoneChange, sentAs number: UInt64) { pendingRecordZoneChanges.settle(change, sentAs: number) }

    /// Adds zone changes. A delete replaces what is pending for its zone; a save after a pending
    /// delete keeps the delete before it (the zone is emptied, then made again).
    mutating func add(database changes: [PendingDatabaseChange]) {
        for change in changes {
            counter += 1
            pendingDatabaseChanges.append(change, number: counter) { pending in
                guard pending.zoneID == change.zoneID else { return false }
                if case .saveZone = change, case .deleteZone = pending { return false }
                return true
            }
        }
    }

    mutating func remove(database changes: [PendingDatabaseChange]) { pendingDatabaseChanges.remove(changes) }

    mutating func settle(_ change: PendingDatabaseChange, sentAs number: UInt64) { pendingDatabaseChanges.settle(change, sentAs: number) }

    /// Forgets what was synced (another account, or none): tokens and pending changes.
    mutating func reset(user: String?) {
        self = SyncSnapshot(userRecordName: user, deviceID: deviceID)
    }
}

extension StratusSyncEngine {
    /// The engine's state: the changes still to send; the app adds to it.
    public final class State: @unchecked Sendable {
        /// What the app persists (after each `.stateUpdate`) and hands back at launch. Opaque;
        /// `Codable`, so the app stores it however it stores the rest.
        public struct Serialization: Sendable, Hashable, Codable {
            var snapshot: SyncSnapshot
        }

        private let lock = NSLock()
        private var snapshot: SyncSnapshot
        /// Whether the app changed the pending changes since the last `.stateUpdate`.
        private var unsaved = false
        /// Told when the app adds changes (the engine schedules a send and a state update).
        let changed: AsyncStream<Void>.Continuation
        let changes: AsyncStream<Void>

        init(_ snapshot: SyncSnapshot) {
            self.snapshot = snapshot
            (changes, changed) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
        }

        public var pendingRecordZoneChanges: [PendingRecordZoneChange] { read { $0.pendingRecordZoneChanges.map(\.change) } }
        public var pendingDatabaseChanges: [PendingDatabaseChange] { read { $0.pendingDatabaseChanges.map(\.change) } }
        /// Whether anything is left to send.
        public var hasPendingUntrackedChanges: Bool { read { !$0.pendingRecordZoneChanges.isEmpty || !$0.pendingDatabaseChanges.isEmpty } }
        /// This device's id (made once per state): the engine's writes carry it as their `deviceID`.
        public var deviceID: String { read(\.deviceID) }
        /// The zones the engine holds a sync token for.
        public var zoneIDsWithTokens: Set<ZoneID> { read { Set($0.zoneTokens.keys) } }

        public func add(pendingRecordZoneChanges changes: [PendingRecordZoneChange]) {
            write { $0.add(records: changes) }
            lock.withLock { unsaved = true }
            changed.yield()
        }

        public func remove(pendingRecordZoneChanges changes: [PendingRecordZoneChange]) {
            write { $0.remove(records: changes) }
            lock.withLock { unsaved = true }
            changed.yield()
        }

        public func add(pendingDatabaseChanges changes: [PendingDatabaseChange]) {
            write { $0.add(database: changes) }
            lock.withLock { unsaved = true }
            changed.yield()
        }

        public func remove(pendingDatabaseChanges changes: [PendingDatabaseChange]) {
            write { $0.remove(database: changes) }
            lock.withLock { unsaved = true }
            changed.yield()
        }

        var serialization: Serialization { read { Serialization(snapshot: $0) } }

        /// Whether the app changed the pending changes since it was last asked; clears it.
        func takeUnsaved() -> Bool {
            lock.withLock {
                defer { unsaved = false }
                return unsaved
            }
        }

        func read<T>(_ body: (SyncSnapshot) -> T) -> T {
            lock.lock()
            defer { lock.unlock() }
            return body(snapshot)
        }

        @discardableResult
        func write<T>(_ body: (inout SyncSnapshot) -> T) -> T {
            lock.lock()
            defer { lock.unlock() }
            return body(&snapshot)
        }
    }
}

/// A list of pending changes, each with the number it was last added under.
extension Array {
    mutating func append<Change>(_ change: Change, number: UInt64, replacing replaces: (Change) -> Bool) where Element == SyncSnapshot.Numbered<Change> {
        removeAll { replaces($0.change) }
        append(SyncSnapshot.Numbered(change: change, number: number))
    }

    mutating func remove<Change>(_ changes: [Change]) where Element == SyncSnapshot.Numbered<Change> {
        let gone = Set(changes)
        removeAll { gone.contains($0.change) }
    }

    mutating func settle<Change>(_ change: Change, sentAs number: UInt64) where Element == SyncSnapshot.Numbered<Change> {
        removeAll { $0.change == change && $0.number <= number }
    }
}
