import Foundation

/// `record.deleted` payloads written and read without Foundation's JSON coders (written by
/// `EncoderFormWritable`). A collector writes hundreds at a time, and every deletion is read by four
/// workers, most of which need none of the record's last fields (the largest part of the payload):
/// they read the payload without them.
extension RecordDeleted {
    /// The payload of a `record.deleted` event without the image of the record's last fields
    /// (`last` is nil): for a reader that needs only which record went. The image's bytes are cut out
    /// unread, and the rest is read by `JSONParser`; anything unusual is decoded whole through
    /// `Codable` (which reports what is wrong).
    public static func withoutImage(_ event: EventEnvelope) throws -> RecordDeleted {
        guard event.type == eventType else { return try event.decode(RecordDeleted.self) }
        guard let members = JSONScan.members(of: event.payload, cutting: "last"), let deleted = RecordDeleted(imageless: members) else {
            var whole = try event.decode(RecordDeleted.self)
            whole.last = nil
            return whole
        }
        return deleted
    }

    /// The members but `last`, as `Codable` reads them; nil when one is missing or of another type.
    private init?(imageless members: [String: JSONValue]) {
        let string = JSONValue.text(of:), optionalString = JSONValue.optionalString, optionalInt = JSONValue.optionalInt
        guard let database = DatabaseID(json: members["database"]), let zoneID = ZoneID(json: members["zoneID"]),
              let recordName = string(members["recordName"]), let recordType = string(members["recordType"]),
              let incarnation = optionalString(members["zoneIncarnation"]), let createdVersion = optionalInt(members["createdVersion"]),
              let cascadedFrom = optionalString(members["cascadedFrom"]), let createdAt = optionalInt(members["createdAt"])
        else { return nil }
        var zoneIncarnation: UUID?
        if let incarnation {
            guard let uuid = UUID(uuidString: incarnation) else { return nil }
            zoneIncarnation = uuid
        }
        self.database = database
        self.zoneID = zoneID
        self.zoneIncarnation = zoneIncarnation
        self.recordName = recordName
        self.recordType = recordType
        self.createdVersion = createdVersion
        self.cascadedFrom = cascadedFrom
        self.last = nil
        self.createdAt = createdAt
    }
}

extension NewEvent {
    /// A `record.deleted` event, its payload written directly (`EncoderFormWritable`), not through
    /// `JSONEncoder`.
    public init(zoneKey: ZoneKey, zoneSequence: Int64?, deleted payload: RecordDeleted, causation: Causation) {
        self.init(zoneKey: zoneKey, zoneSequence: zoneSequence, payload: payload, causation: causation)
    }
}

extension DatabaseID {
    /// A database as `Codable` reads it from JSON; nil when a member is missing or of another type.
    init?(json: JSONValue?) {
        let string = JSONValue.text(of:)
        guard case .object(let members)? = json, let container = string(members["container"]),
              let environment = string(members["environment"]).flatMap(Environment.init(rawValue:)),
              let scope = string(members["scope"]).flatMap(DatabaseScope.init(rawValue:)), let owner = string(members["owner"])
        else { return nil }
        self.init(container: container, environment: environment, scope: scope, owner: owner)
    }
}

extension ZoneID {
    /// A zone as `Codable` reads it from JSON; nil when a member is missing or of another type.
    init?(json: JSONValue?) {
        guard case .object(let members)? = json, let zoneName = JSONValue.text(of: members["zoneName"]),
              let owner = JSONValue.text(of: members["ownerRecordName"])
        else { return nil }
        self.init(zoneName: zoneName, ownerRecordName: owner)
    }
}
