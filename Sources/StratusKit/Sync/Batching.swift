import Foundation

extension StratusSyncEngine {
    /// What the delegate hands the engine to send: records to save (their current local
    /// version, with the change tag the device last had) and records to delete.
    public struct RecordZoneChangeBatch: Sendable {
        public var recordsToSave: [Record]
        public var recordIDsToDelete: [RecordID]
        /// Whether each zone's requests are atomic (all of a zone's operations of a request or none).
        public var atomicByZone: Bool

        public init(recordsToSave: [Record] = [], recordIDsToDelete: [RecordID] = [], atomicByZone: Bool = false) {
            self.recordsToSave = recordsToSave
            self.recordIDsToDelete = recordIDsToDelete
            self.atomicByZone = atomicByZone
        }

        /// A batch of the pending changes in order, as many as fit `limits`: each save's record
        /// from `recordProvider` (nil: the record is gone locally, and its save is dropped from
        /// the pending changes by the engine).
        public init(
            pendingChanges: [PendingRecordZoneChange], limits: BatchLimits = BatchLimits(), atomicByZone: Bool = false,
            recordProvider: (RecordID) async -> Record?
        ) async {
            self.init(atomicByZone: atomicByZone)
            var planner = BatchPlanner(limits: limits)
            for change in pendingChanges {
                switch change {
                case .saveRecord(let id):
                    guard let record = await recordProvider(id) else {
                        missingRecords.append(id)
                        continue
                    }
                    guard planner.admit(bytes: BatchPlanner.size(of: record)) else { return }
                    recordsToSave.append(record)
                case .deleteRecord(let id):
                    guard planner.admit(bytes: BatchPlanner.deleteSize) else { return }
                    recordIDsToDelete.append(id)
                }
            }
        }

        /// Saves the provider had no record for: the engine drops them from pending.
        public internal(set) var missingRecords: [RecordID] = []
    }

    /// What the delegate is asked for a batch with: the pending changes not yet in flight.
    public struct SendChangesContext: Sendable {
        public var pendingChanges: [PendingRecordZoneChange]
        /// The zones this send is limited to (nil: all).
        public var zoneIDs: Set<ZoneID>?
    }
}

/// How much one batch and one request carry. The server takes at most 200 operations and a
/// 10 MB body per request; the default keeps a request well below the body limit.
public struct BatchLimits: Sendable, Hashable {
    public var maxOperations: Int
    public var maxBytes: Int

    public init(maxOperations: Int = 200, maxBytes: Int = 4 << 20) {
        self.maxOperations = min(max(1, maxOperations), StratusDatabase.maxOperationsPerRequest)
        self.maxBytes = max(1, maxBytes)
    }
}

/// Counts operations and bytes against `BatchLimits`; splits a batch into requests, one zone
/// each, within them. Pure.
public struct BatchPlanner: Sendable {
    public let limits: BatchLimits
    private(set) var operations = 0
    private(set) var bytes = 0

    public init(limits: BatchLimits) { self.limits = limits }

    /// What a delete adds to a request (its operation dictionary, about).
    static let deleteSize = 128

    /// The bytes a record's save adds to a request: its wire form (encrypted values count their
    /// sealed size: 28 bytes of nonce and tag and the key id more than the value, in base64).
    static func size(of record: Record) -> Int {
        var size = RecordCoding.encode(record).encoded().count + 64
        for value in record.encryptedValues.values { size += (value.wireSize + 300) * 4 / 3 }
        return size
    }

    /// Whether one more operation of `bytes` fits; counts it when it does. The first operation
    /// always fits (a record larger than the budget is sent alone, and the server judges it).
    public mutating func admit(bytes size: Int) -> Bool {
        if operations > 0, operations + 1 > limits.maxOperations || bytes + size > limits.maxBytes { return false }
        operations += 1
        bytes += size
        return true
    }

    /// One request's operations.
    public struct Request: Sendable, Hashable {
        public var zoneID: ZoneID
        public var saves: [Record]
        public var deletes: [RecordID]
    }

    /// The requests that carry a batch: grouped by zone (in the order zones first appear), each
    /// within the limits.
    public static func requests(saves: [Record], deletes: [RecordID], limits: BatchLimits) -> [Request] {
        var order: [ZoneID] = []
        var byZone: [ZoneID: (saves: [Record], deletes: [RecordID])] = [:]
        for record in saves {
            if byZone[record.recordID.zoneID] == nil { order.append(record.recordID.zoneID) }
            byZone[record.recordID.zoneID, default: ([], [])].saves.append(record)
        }
        for id in deletes {
            if byZone[id.zoneID] == nil { order.append(id.zoneID) }
            byZone[id.zoneID, default: ([], [])].deletes.append(id)
        }
        var requests: [Request] = []
        for zone in order {
            guard let group = byZone[zone] else { continue }
            var planner = BatchPlanner(limits: limits)
            var current = Request(zoneID: zone, saves: [], deletes: [])
            func flush() {
                if !current.saves.isEmpty || !current.deletes.isEmpty { requests.append(current) }
                current = Request(zoneID: zone, saves: [], deletes: [])
                planner = BatchPlanner(limits: limits)
            }
            for record in group.saves {
                if !planner.admit(bytes: size(of: record)) {
                    flush()
                    _ = planner.admit(bytes: size(of: record))
                }
                current.saves.append(record)
            }
            for id in group.deletes {
                if !planner.admit(bytes: deleteSize) {
                    flush()
                    _ = planner.admit(bytes: deleteSize)
                }
                current.deletes.append(id)
            }
            flush()
        }
        return requests
    }
}
