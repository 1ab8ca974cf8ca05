import Foundation

/// Limits a write (`records/modify`) must respect, and the pure checks against them: a record's
/// size, its event's size. The storage quota's check is `StorageQuota`.
public struct WriteLimits: Sendable, Hashable {
    /// Bytes of one record's fields, encoded.
    public var maxRecordBytes: Int = 1_000_000
    /// Bytes of the event message a write becomes (envelope, payload and key): below the broker's
    /// message limit, so that every accepted write can be delivered.
    public var maxEventBytes: Int = 950_000
    /// Bytes of records (fields as stored) one user may keep per container and environment,
    /// counted in `storage_usage`; 0: no quota.
    public var userQuotaBytes: Int64 = 0

    /// Creates the defaults.
    public init() {}

    /// Refuses a record whose fields, encoded, are `fieldBytes` long when that passes `maxRecordBytes`.
    public func checkRecord(_ recordName: String, fieldBytes: Int) throws(StratusError) {
        guard fieldBytes <= maxRecordBytes else {
            throw StratusError(.limitExceeded, "Record '\(ClientText.excerpt(recordName))' is \(fieldBytes) bytes; the limit is \(maxRecordBytes)")
        }
    }

    /// The `record.saved` event of a save, within `maxEventBytes`. The previous values (`before`)
    /// are a convenience for workers, which can look them up: an event too large with them is made
    /// without them, never refused for them. Refuses a record whose event is too large even so.
    public func savedEvent(
        _ record: Record, before: Record?, zoneKey: ZoneKey, zoneSequence: Int64?, database: DatabaseID, zone: ZoneID, incarnation: UUID?,
        causation: Causation
    ) throws(StratusError) -> NewEvent {
        var event = NewEvent(zoneKey: zoneKey, zoneSequence: zoneSequence, payload: RecordSaved(
            database: database, zoneID: zone, zoneIncarnation: incarnation, record: record, before: before), causation: causation)
        var eventBytes = EventCoding.envelopeSize(of: event)
        if eventBytes > maxEventBytes, before != nil {
            event = NewEvent(zoneKey: zoneKey, zoneSequence: zoneSequence, payload: RecordSaved(
                database: database, zoneID: zone, zoneIncarnation: incarnation, record: record, before: before, previousBudget: 0),
                causation: causation)
            eventBytes = EventCoding.envelopeSize(of: event)
        }
        guard eventBytes <= maxEventBytes else {
            throw StratusError(.limitExceeded,
                "Record '\(ClientText.excerpt(record.recordName))' makes an event of \(eventBytes) bytes; the event limit is \(maxEventBytes)")
        }
        return event
    }
}
