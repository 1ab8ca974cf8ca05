import Foundation

/// What a delete leaves behind, decided from the records it deletes (each root of the delete and
/// each record its cascade took, in order): a `record.deleted` event each and, in a custom zone, a
/// tombstone each at the next version of the zone's change counter, so that every device's sync
/// learns of the delete. Default zones have no counter: their events carry no version and they keep
/// no tombstones.
public enum RecordDeletion {
    /// A deleted record as the sync index remembers it.
    public struct Tombstone: Sendable, Hashable {
        /// The record's name.
        public var recordName: String
        /// The record's type.
        public var recordType: String
        /// The version at which the record was created, when known.
        public var createdVersion: Int64?
        /// The version of the delete.
        public var deletedVersion: Int64

        /// Creates a tombstone.
        public init(recordName: String, recordType: String, createdVersion: Int64?, deletedVersion: Int64) {
            self.recordName = recordName
            self.recordType = recordType
            self.createdVersion = createdVersion
            self.deletedVersion = deletedVersion
        }
    }

    /// Appends the events of deleting `deleted` (each with the record whose delete cascaded to it,
    /// nil for a root) to `events`, advancing `sequence`, the zone's change counter (nil in a
    /// default zone), once per record; returns the tombstones to write.
    public static func record(
        _ deleted: [(record: Record, cascadedFrom: String?)], sequence: inout Int64?, zoneKey: ZoneKey, database: DatabaseID, zone: ZoneID,
        incarnation: UUID?, causation: Causation, events: inout [NewEvent]
    ) -> [Tombstone] {
        var tombstones: [Tombstone] = []
        for (record, cascadedFrom) in deleted {
            let version = sequence.map { $0 + 1 }
            sequence = version
            if let version {
                tombstones.append(Tombstone(
                    recordName: record.recordName, recordType: record.recordType, createdVersion: record.createdVersion, deletedVersion: version))
            }
            events.append(NewEvent(zoneKey: zoneKey, zoneSequence: version, deleted: RecordDeleted(
                database: database, zoneID: zone, zoneIncarnation: incarnation, record: record, cascadedFrom: cascadedFrom), causation: causation))
        }
        return tombstones
    }
}
