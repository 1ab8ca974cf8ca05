import Foundation

/// Who changed a record, when, from which device.
public struct RecordStamp: Sendable, Hashable, Codable {
    /// Milliseconds since 1970.
    public var timestamp: Int64
    /// The acting user's record name.
    public var userRecordName: String
    /// The client's device id, if it sent one.
    public var deviceID: String?

    /// The `deviceID` a record dictionary shows for a write whose client named no device: web
    /// service requests name none, and clients expect the key in every stamp.
    public static let webServiceDeviceID = "_stratus"

    /// Creates a stamp.
    public init(timestamp: Int64, userRecordName: String, deviceID: String?) {
        self.timestamp = timestamp
        self.userRecordName = userRecordName
        self.deviceID = deviceID
    }
}

/// A stored record: its name and type, fields and system fields.
public struct Record: Sendable, Hashable, Codable {
    /// Unique within its zone.
    public var recordName: String
    /// The record type, e.g. `Note`.
    public var recordType: String
    /// The fields by name.
    public var fields: [String: FieldValue]
    /// Opaque; changes on every write. Clients send it back to prove what they last saw.
    public var changeTag: String
    /// Creation stamp.
    public var created: RecordStamp
    /// Last modification stamp.
    public var modified: RecordStamp
    /// The parent record's name (CloudKit's parent reference), if any.
    public var parent: String?
    /// The share record's name, if the record is shared.
    public var share: String?
    /// A short id for share URLs, when one was asked for.
    public var shortGUID: String?
    /// The zone change counter value of the record's latest write (custom zones).
    public var version: Int64?
    /// The zone change counter value of the record's creation (custom zones).
    public var createdVersion: Int64?
    /// When the record expires, in milliseconds since 1970 (a Stratus extension: CloudKit's TTL for
    /// ephemeral records); from then on it is gone for every reader, and `stratus-gc` deletes it.
    public var expirationDate: Int64?
    /// A share record's sharing state (`cloudkit.share` only): its owner, public permission and
    /// participants, as the shares tables hold them. Carried in the record's events so the share
    /// fan-out sees who the change concerns.
    public var shareState: ShareState?

    /// Creates a record.
    public init(recordName: String, recordType: String, fields: [String: FieldValue], changeTag: String, created: RecordStamp,
                modified: RecordStamp, parent: String? = nil, share: String? = nil, shortGUID: String? = nil,
                version: Int64? = nil, createdVersion: Int64? = nil, expirationDate: Int64? = nil, shareState: ShareState? = nil) {
        self.recordName = recordName
        self.recordType = recordType
        self.fields = fields
        self.changeTag = changeTag
        self.created = created
        self.modified = modified
        self.parent = parent
        self.share = share
        self.shortGUID = shortGUID
        self.version = version
        self.createdVersion = createdVersion
        self.expirationDate = expirationDate
        self.shareState = shareState
    }

    /// Whether the record has expired at `now` (milliseconds since 1970).
    public func isExpired(at now: Int64) -> Bool {
        expirationDate.map { $0 <= now } ?? false
    }

    /// Every reference the record holds, with its field name.
    public var references: [(field: String, reference: Reference)] {
        fields.sorted { $0.key < $1.key }.flatMap { name, value in value.references.map { (name, $0) } }
    }

    /// Checks a client-supplied record name: 1–255 bytes, no control characters (NUL included).
    /// `place` names where it was sent: the record's own name, a reference target, a parent, a share —
    /// all become keys of the same indexes.
    public static func validate(recordName: String, _ place: @autoclosure () -> String = "recordName") throws(StratusError) {
        guard !recordName.isEmpty, recordName.utf8.count <= 255 else {
            throw StratusError(.badRequest, "\(place()) must be 1 to 255 bytes, got \(recordName.utf8.count)")
        }
        guard !recordName.unicodeScalars.contains(where: { $0.properties.generalCategory == .control }) else {
            throw StratusError(.badRequest, "\(place()) must not contain control characters (NUL included)")
        }
    }

    /// Checks a record type name: letters, digits and `_`, starting with a letter, at most 255 characters.
    public static func validate(recordType: String) throws(StratusError) {
        if recordType == ShareRecord.recordType { return }
        guard let first = recordType.unicodeScalars.first, first.isASCII, first.properties.isAlphabetic,
              recordType.utf8.count <= 255,
              recordType.unicodeScalars.allSatisfy({ $0.isASCII && ($0.properties.isAlphabetic || ("0"..."9").contains($0) || $0 == "_") })
        else {
            throw StratusError(.badRequest, "recordType '\(recordType.prefix(64))' must start with a letter and contain only letters, digits and '_'")
        }
    }

    /// Checks a field name: letters, digits and `_`, starting with a letter, at most 255 characters.
    public static func validate(fieldName: String) throws(StratusError) {
        guard let first = fieldName.unicodeScalars.first, first.isASCII, first.properties.isAlphabetic,
              fieldName.utf8.count <= 255,
              fieldName.unicodeScalars.allSatisfy({ $0.isASCII && ($0.properties.isAlphabetic || ("0"..."9").contains($0) || $0 == "_") })
        else {
            throw StratusError(.badRequest, "Field name '\(fieldName.prefix(64))' must start with a letter and contain only letters, digits and '_'")
        }
    }
}

/// CloudKit's record operation types.
public enum RecordOperationType: String, Sendable, Hashable, Codable, CaseIterable {
    case create, update, forceUpdate, replace, forceReplace, delete, forceDelete

    /// Whether the operation deletes.
    public var isDelete: Bool { self == .delete || self == .forceDelete }
}

/// What a client sent for one record operation, already type-checked.
public struct RecordInput: Sendable, Hashable {
    public var recordName: String
    public var recordType: String?
    public var changeTag: String?
    public var fields: [String: FieldValue]
    /// Fields sent empty (`{}` or `{"value": null}`): `update` removes them.
    public var removedFields: Set<String>
    /// nil: not sent (keep); .some(nil): sent empty (clear).
    public var parent: String??
    public var share: String??
    public var createShortGUID: Bool
    /// The record's expiration in milliseconds (`RecordExpiration`): nil: not sent (kept, or the
    /// zone's default for a new record); .some(nil): sent empty (the record never expires).
    public var expirationDate: Int64??
    /// A share record's `publicPermission` and `participants` as sent (`cloudkit.share` only).
    public var shareProposal: ShareProposal?
    /// The root record a share record's `forRecord` names (`cloudkit.share` only).
    public var forRecord: ShareRootName?

    /// Creates an input.
    public init(recordName: String, recordType: String? = nil, changeTag: String? = nil, fields: [String: FieldValue] = [:],
                removedFields: Set<String> = [], parent: String?? = nil, share: String?? = nil, createShortGUID: Bool = false,
                expirationDate: Int64?? = nil, shareProposal: ShareProposal? = nil, forRecord: ShareRootName? = nil) {
        self.recordName = recordName
        self.recordType = recordType
        self.changeTag = changeTag
        self.fields = fields
        self.removedFields = removedFields
        self.parent = parent
        self.share = share
        self.createShortGUID = createShortGUID
        self.expirationDate = expirationDate
        self.shareProposal = shareProposal
        self.forRecord = forRecord
    }
}

extension RecordInput {
    /// Checks the record names the input points at: every reference target, the parent and the
    /// share are held to the rules of record names, since they are stored and indexed like them.
    public func validateReferences() throws(StratusError) {
        for (field, value) in fields.sorted(by: { $0.key < $1.key }) {
            for reference in value.references {
                try Record.validate(recordName: reference.recordName, "Field '\(field)' reference recordName")
            }
        }
        if case .some(.some(let parent)) = parent { try Record.validate(recordName: parent, "record.parent.recordName") }
        if case .some(.some(let share)) = share { try Record.validate(recordName: share, "record.share.recordName") }
        if let forRecord { try Record.validate(recordName: forRecord.recordName, "record.forRecord.recordName") }
    }
}

/// The pure decision for one record operation against the record's current state.
public enum RecordDecision {
    /// What to do.
    public enum Outcome: Sendable, Hashable {
        /// Store this record (created or changed).
        case save(Record, before: Record?)
        /// Delete this record.
        case delete(Record)
    }

    /// A CONFLICT that carries the server's record, so the client can merge.
    public struct Conflict: Error, Sendable {
        /// The error to report.
        public var error: StratusError
        /// The server's current record.
        public var serverRecord: Record
    }

    /// Decides an operation.
    /// - Parameters:
    ///   - stamp: who is writing, and when.
    ///   - newChangeTag: the tag a saved record gets.
    ///   - newShortGUID: makes a short GUID when one is asked for.
    ///   - defaultExpiration: the expiration (ms) the zone's default time to live gives a record
    ///     created now; a new record that sends no expiration gets it, an existing one keeps its own.
    public static func decide(
        _ type: RecordOperationType, _ input: RecordInput, current: Record?, stamp: RecordStamp, newChangeTag: String,
        newShortGUID: () -> String, defaultExpiration: Int64? = nil
    ) throws -> Outcome {
        switch type {
        case .delete, .forceDelete:
            guard let current else { throw StratusError(.notFound, "Record '\(ClientText.excerpt(input.recordName))' does not exist") }
            if type == .delete { try checkTag(input, current) }
            return .delete(current)
        case .create:
            if current != nil { throw StratusError(.exists, "Record '\(ClientText.excerpt(input.recordName))' already exists") }
            return .save(try new(input, stamp: stamp, changeTag: newChangeTag, newShortGUID: newShortGUID, defaultExpiration: defaultExpiration), before: nil)
        case .update, .replace, .forceUpdate, .forceReplace:
            guard let current else {
                if type == .forceUpdate || type == .forceReplace {
                    // A forced save of a missing record creates it, as CloudKit's "save regardless" policies do.
                    return .save(try new(
                        input, stamp: stamp, changeTag: newChangeTag, newShortGUID: newShortGUID, defaultExpiration: defaultExpiration), before: nil)
                }
                throw StratusError(.notFound, "Record '\(ClientText.excerpt(input.recordName))' does not exist")
            }
            if type == .update || type == .replace { try checkTag(input, current) }
            if let recordType = input.recordType, recordType != current.recordType {
                throw StratusError(.badRequest, "Record '\(ClientText.excerpt(input.recordName))' is a \(current.recordType); its type cannot change to \(recordType.prefix(64))")
            }
            var next = current
            // update merges the sent fields (older clients must not erase newer fields); replace drops unsent ones.
            if type == .update || type == .forceUpdate {
                next.fields = current.fields.merging(input.fields) { _, new in new }
                for name in input.removedFields { next.fields[name] = nil }
            } else {
                next.fields = input.fields
            }
            if let parent = input.parent { next.parent = parent }
            if let share = input.share { next.share = share }
            if input.createShortGUID, next.shortGUID == nil { next.shortGUID = newShortGUID() }
            if let expirationDate = input.expirationDate { next.expirationDate = expirationDate }
            next.changeTag = newChangeTag
            next.modified = stamp
            return .save(next, before: current)
        }
    }

    private static func checkTag(_ input: RecordInput, _ current: Record) throws {
        guard let tag = input.changeTag else {
            throw StratusError(.badRequest, "Record '\(ClientText.excerpt(input.recordName))': this operation needs recordChangeTag (or use its force form)")
        }
        guard tag == current.changeTag else {
            throw Conflict(error: StratusError(.conflict, "Record '\(ClientText.excerpt(input.recordName))' was changed on the server; merge with serverRecord and retry"), serverRecord: current)
        }
    }

    private static func new(
        _ input: RecordInput, stamp: RecordStamp, changeTag: String, newShortGUID: () -> String, defaultExpiration: Int64?
    ) throws(StratusError) -> Record {
        guard let recordType = input.recordType else {
            throw StratusError(.badRequest, "Record '\(ClientText.excerpt(input.recordName))' needs a recordType to be created")
        }
        return Record(
            recordName: input.recordName, recordType: recordType, fields: input.fields, changeTag: changeTag, created: stamp, modified: stamp,
            parent: input.parent ?? nil, share: input.share ?? nil, shortGUID: input.createShortGUID ? newShortGUID() : nil,
            expirationDate: input.expirationDate ?? defaultExpiration)
    }
}

/// `record.saved`: a record was created or changed; carries the stored after-image and, since
/// schema version 2, what the changed fields held before (`previous`), so a worker can tell whether
/// the record matched a predicate before the change without reading anything else.
public struct RecordSaved: EventPayload {
    public static let eventType: EventType = "record.saved"
    public static let schemaVersion = 2
    public var database: DatabaseID
    public var zoneID: ZoneID
    /// The zone incarnation (custom zones).
    public var zoneIncarnation: UUID?
    /// The record as stored.
    public var record: Record
    /// The change tag the record had before, nil when created.
    public var previousChangeTag: String?
    /// The fields whose values changed (all of them for a new record).
    public var changedFields: [String]
    /// The changed fields' values before the change (updates only; nil in events of schema version 1).
    public var previous: PreviousImage?

    /// Creates the payload; the previous values of changed fields are carried up to `previousBudget`
    /// bytes of encoded values (larger ones are named in `previous.omitted`).
    public init(database: DatabaseID, zoneID: ZoneID, zoneIncarnation: UUID?, record: Record, before: Record?,
                previousBudget: Int = PreviousImage.defaultBudget) {
        self.database = database
        self.zoneID = zoneID
        self.zoneIncarnation = zoneIncarnation
        self.record = record
        self.previousChangeTag = before?.changeTag
        let names = Set(record.fields.keys).union(before?.fields.keys ?? [:].keys)
        self.changedFields = names.filter { record.fields[$0] != before?.fields[$0] }.sorted()
        self.previous = before.map { before in
            PreviousImage(fields: before.fields, names: changedFields, modifiedAt: before.modified.timestamp, budget: previousBudget)
        }
    }

    /// The record as it was before this change, when the event says enough to rebuild it: nil for a
    /// creation, and nil when the event names an omitted field among `needed` (or carries no previous
    /// image at all, as events of schema version 1 do).
    public func recordBefore(needing needed: Set<String>?) -> Record? {
        guard let previousChangeTag, let previous, previous.covers(needed) else { return nil }
        var before = record
        for name in changedFields { before.fields[name] = previous.fields[name] }
        before.changeTag = previousChangeTag
        before.modified.timestamp = previous.modifiedAt
        return before
    }
}

/// Field values a record held before a write or a delete, as carried by its event.
public struct PreviousImage: Sendable, Hashable, Codable {
    /// The values (a field absent here and not omitted did not exist).
    public var fields: [String: FieldValue]
    /// Fields that had a value too large for the event to carry: readers must look the image up elsewhere.
    public var omitted: [String]
    /// The modification time of the previous state, in milliseconds.
    public var modifiedAt: Int64

    /// Whether it holds every field of `needed` that it had (all of them when nil).
    func covers(_ needed: Set<String>?) -> Bool {
        omitted.isEmpty || needed.map { $0.isDisjoint(with: omitted) } ?? false
    }

    /// How many bytes of encoded values an event carries by default: enough for the small fields
    /// predicates look at, small next to a record's 1 MB, so no write is refused for its event's size.
    public static let defaultBudget = 16_384

    /// Keeps `names`' values of `fields`, smallest first, within `budget` bytes (of each value's JSON
    /// text as the event carries it, written directly: a deletion's image is sized for every field
    /// of every deleted record).
    public init(fields: [String: FieldValue], names: [String], modifiedAt: Int64, budget: Int) {
        var kept: [String: FieldValue] = [:]
        var omitted: [String] = []
        var spent = 0
        var scratch: [UInt8] = []
        let sized = names.compactMap { name in
            fields[name].map { value in
                scratch.removeAll(keepingCapacity: true)
                EncoderForm.field(value, &scratch)
                return (name, value, scratch.count)
            }
        }
        for (name, value, size) in sized.sorted(by: { ($0.2, $0.0) < ($1.2, $1.0) }) {
            if spent + size <= budget {
                kept[name] = value
                spent += size
            } else {
                omitted.append(name)
            }
        }
        self.fields = kept
        self.omitted = omitted.sorted()
        self.modifiedAt = modifiedAt
    }
}

/// `record.deleted`: a record is gone; remembers the version at which it was created and, since
/// schema version 2, the record's last fields (within a budget) so a worker can evaluate predicates
/// against what was deleted.
public struct RecordDeleted: EventPayload {
    public static let eventType: EventType = "record.deleted"
    public static let schemaVersion = 2
    public var database: DatabaseID
    public var zoneID: ZoneID
    public var zoneIncarnation: UUID?
    public var recordName: String
    public var recordType: String
    /// The zone change counter value at the record's creation (custom zones).
    public var createdVersion: Int64?
    /// The record whose deletion cascaded to this one through a DELETE_SELF reference.
    public var cascadedFrom: String?
    /// The record's fields when it was deleted (nil in events of schema version 1).
    public var last: PreviousImage?
    /// The record's creation time, in milliseconds (nil in events of schema version 1).
    public var createdAt: Int64?

    /// Creates the payload.
    public init(database: DatabaseID, zoneID: ZoneID, zoneIncarnation: UUID?, record: Record, cascadedFrom: String?,
                lastBudget: Int = PreviousImage.defaultBudget) {
        self.database = database
        self.zoneID = zoneID
        self.zoneIncarnation = zoneIncarnation
        self.recordName = record.recordName
        self.recordType = record.recordType
        self.createdVersion = record.createdVersion
        self.cascadedFrom = cascadedFrom
        self.last = PreviousImage(fields: record.fields, names: Array(record.fields.keys), modifiedAt: record.modified.timestamp, budget: lastBudget)
        self.createdAt = record.created.timestamp
    }

    /// The deleted record as far as the event tells: its name, type, fields and times (stamps carry no
    /// user or device). Nil when the event carries no image, or omits a field among `needed` (all
    /// fields when `needed` is nil).
    public func recordBefore(needing needed: Set<String>?) -> Record? {
        guard let last, let createdAt, last.covers(needed) else { return nil }
        return Record(
            recordName: recordName, recordType: recordType, fields: last.fields, changeTag: "",
            created: RecordStamp(timestamp: createdAt, userRecordName: "", deviceID: nil),
            modified: RecordStamp(timestamp: last.modifiedAt, userRecordName: "", deviceID: nil))
    }
}
