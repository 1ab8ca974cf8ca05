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
    /// The container's quotas over all its users (`ContainerQuota`); none by default.
    public var containerQuota = ContainerQuota()

    /// Creates the defaults.
    public init() {}

    /// Refuses a record whose fields, encoded, are `fieldBytes` long when that passes `maxRecordBytes`.
    public func checkRecord(_ recordName: String, fieldBytes: Int) throws(StratusError) {
        guard fieldBytes <= maxRecordBytes else {
            throw StratusError(.limitExceeded, "Record '\(ClientText.excerpt(recordName))' is \(fieldBytes) bytes; the limit is \(maxRecordBytes)")
        }
    }

    /// The fewest bytes a record's fields as sent (`fields` of a `records/modify` record, not yet
    /// decoded) can come to once stored, counted from the parsed text in one pass, without
    /// decoding a value: a number or another string at least one byte, a string of a STRING field
    /// its UTF-8 and quotes, a reference its record name, a list its elements and commas, a field its name, the
    /// shortest type name and its dictionary. The count stops once it passes `stop`.
    /// `checkRecord` measures what the write stores; this lets a record that cannot fit be refused
    /// before its values are decoded (docs/benchmarks.md, "Hostile bodies").
    public static func leastRecordBytes(sent fields: [String: JSONValue], stop: Int = .max) -> Int {
        // `{}`, and per field `"name":{"type":"INT64","value":…}` with the shortest type name and a
        // comma (one fewer than the fields: `{` and `}` count one).
        var total = 1
        let shortestType = FieldType.Base.allCases.map(\.rawValue.utf8.count).min() ?? 1
        for (name, field) in fields where !FieldCoding.isRemoval(field) {
            guard total <= stop else { return total }
            total += name.utf8.count + shortestType + 24
            guard case .object(let members) = field, let value = members["value"] else { continue }
            let type = members["type"].map { $0.stringValue.flatMap(FieldType.init(rawValue:)) } ?? (try? FieldCoding.infer(field: name, value))
            total += leastBytes(value, base: type?.base, stop: stop - total)
        }
        return total
    }

    /// The fewest bytes `value` is stored as in a field of type `base` (nil: not known, so a string
    /// counts only its quotes); at least `stop` once it passes it.
    private static func leastBytes(_ value: JSONValue, base: FieldType.Base?, stop: Int) -> Int {
        switch value {
        case .array(let elements):
            var total = 1 + elements.count
            for element in elements {
                guard total <= stop else { return total }
                switch element {
                case .null, .bool, .int, .double: total += 1  // as below, without the call
                default: total += leastBytes(element, base: base, stop: stop - total)
                }
            }
            return total
        case .string(let text):
            // Only a STRING's text is stored as sent (escapes only lengthen it); INT64 and DOUBLE
            // from strings become numbers (one digit at the least), BYTES is written again as base64.
            return base == .string ? text.utf8.count + 2 : 1
        case .object(let members):
            // A reference: `{"action":"NONE","recordName":"…"}`; anything else at least `{}`.
            guard base == .reference, case .string(let name)? = members["recordName"] else { return 2 }
            return name.utf8.count + 33
        case .null, .bool, .int, .double:
            return 1
        }
    }

    /// Refuses a record whose fields as sent (`leastRecordBytes`) cannot fit in `maxRecordBytes`,
    /// before its values are decoded: LIMIT_EXCEEDED, as `checkRecord` refuses it.
    public func checkSentRecord(_ recordName: String, leastBytes: Int) throws(StratusError) {
        guard leastBytes <= maxRecordBytes else {
            throw StratusError(.limitExceeded, "Record '\(ClientText.excerpt(recordName))' is at least \(leastBytes) bytes; the limit is \(maxRecordBytes)")
        }
    }

    /// The `record.saved` event of a save, within `maxEventBytes`. The previous values (`before`)
    /// are a convenience for workers, which can look them up: an event too large with them is made
    /// without them, never refused for them. Refuses a record whose event is too large even so.
    /// `fieldsJSON`, when given, is `EventCoding.encode(record.fields)` (made for the row), which
    /// the event then carries as it is.
    public func savedEvent(
        _ record: Record, before: Record?, zoneKey: ZoneKey, zoneSequence: Int64?, database: DatabaseID, zone: ZoneID, incarnation: UUID?,
        causation: Causation, fieldsJSON: Data? = nil
    ) throws(StratusError) -> NewEvent {
        func made(_ saved: RecordSaved) -> NewEvent {
            if let fieldsJSON { NewEvent(zoneKey: zoneKey, zoneSequence: zoneSequence, saved: saved, fieldsJSON: fieldsJSON, causation: causation) }
            else { NewEvent(zoneKey: zoneKey, zoneSequence: zoneSequence, payload: saved, causation: causation) }
        }
        var event = made(RecordSaved(database: database, zoneID: zone, zoneIncarnation: incarnation, record: record, before: before))
        var eventBytes = EventCoding.envelopeSize(of: event)
        if eventBytes > maxEventBytes, before != nil {
            event = made(RecordSaved(
                database: database, zoneID: zone, zoneIncarnation: incarnation, record: record, before: before, previousBudget: 0))
            eventBytes = EventCoding.envelopeSize(of: event)
        }
        guard eventBytes <= maxEventBytes else {
            throw StratusError(.limitExceeded,
                "Record '\(ClientText.excerpt(record.recordName))' makes an event of \(eventBytes) bytes; the event limit is \(maxEventBytes)")
        }
        return event
    }
}
