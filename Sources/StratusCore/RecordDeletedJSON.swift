import Foundation

/// `record.deleted` payloads written and read without Foundation's JSON coders. A collector writes
/// hundreds at a time, and every deletion is read by four workers, most of which need none of the
/// record's last fields (the largest part of the payload): they read the payload without them.
extension RecordDeleted {
    /// The payload as JSON: the members `Codable` writes (nil ones left out), so `Codable` reads it
    /// back as the same payload.
    public var json: JSONValue {
        var members: [String: JSONValue] = [
            "database": .object([
                "container": .string(database.container), "environment": .string(database.environment.rawValue),
                "scope": .string(database.scope.rawValue), "owner": .string(database.owner)]),
            "zoneID": .object(["zoneName": .string(zoneID.zoneName), "ownerRecordName": .string(zoneID.ownerRecordName)]),
            "recordName": .string(recordName),
            "recordType": .string(recordType),
        ]
        if let zoneIncarnation { members["zoneIncarnation"] = .string(zoneIncarnation.uuidString) }
        if let createdVersion { members["createdVersion"] = .int(createdVersion) }
        if let cascadedFrom { members["cascadedFrom"] = .string(cascadedFrom) }
        if let createdAt { members["createdAt"] = .int(createdAt) }
        if let last {
            members["last"] = .object([
                "fields": .object(last.fields.mapValues { FieldCoding.encode($0) }),
                "omitted": .array(last.omitted.map(JSONValue.string)),
                "modifiedAt": .int(last.modifiedAt)])
        }
        return .object(members)
    }

    /// The payload of a `record.deleted` event without the image of the record's last fields
    /// (`last` is nil): for a reader that needs only which record went. The image's bytes are cut out
    /// unread, and the rest is read by `JSONParser`; anything unusual is decoded whole through
    /// `Codable` (which reports what is wrong).
    public static func withoutImage(_ event: EventEnvelope) throws -> RecordDeleted {
        guard event.type == eventType else { return try event.decode(RecordDeleted.self) }
        var bytes = [UInt8](event.payload)
        if let image = JSONScan.member("last", in: bytes) { bytes.replaceSubrange(image, with: "null".utf8) }
        guard let json = try? JSONParser.parse(bytes), case .object(let members) = json,
              let deleted = RecordDeleted(imageless: members) else {
            var whole = try event.decode(RecordDeleted.self)
            whole.last = nil
            return whole
        }
        return deleted
    }

    /// The members but `last`, as `Codable` reads them; nil when one is missing or of another type.
    private init?(imageless members: [String: JSONValue]) {
        let string = JSONValue.text(of:), optionalString = JSONValue.optionalString, optionalInt = JSONValue.optionalInt
        guard case .object(let database)? = members["database"], case .object(let zone)? = members["zoneID"],
              let container = string(database["container"]), let environment = string(database["environment"]).flatMap(Environment.init(rawValue:)),
              let scope = string(database["scope"]).flatMap(DatabaseScope.init(rawValue:)), let owner = string(database["owner"]),
              let zoneName = string(zone["zoneName"]), let zoneOwner = string(zone["ownerRecordName"]),
              let recordName = string(members["recordName"]), let recordType = string(members["recordType"]),
              let incarnation = optionalString(members["zoneIncarnation"]), let createdVersion = optionalInt(members["createdVersion"]),
              let cascadedFrom = optionalString(members["cascadedFrom"]), let createdAt = optionalInt(members["createdAt"])
        else { return nil }
        var zoneIncarnation: UUID?
        if let incarnation {
            guard let uuid = UUID(uuidString: incarnation) else { return nil }
            zoneIncarnation = uuid
        }
        self.database = DatabaseID(container: container, environment: environment, scope: scope, owner: owner)
        self.zoneID = ZoneID(zoneName: zoneName, ownerRecordName: zoneOwner)
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
    /// A `record.deleted` event, its payload written from `RecordDeleted.json` rather than through
    /// `JSONEncoder` (the same members; the log stores payloads as `jsonb`).
    public init(zoneKey: ZoneKey, zoneSequence: Int64?, deleted payload: RecordDeleted, causation: Causation) {
        self.zoneKey = zoneKey
        self.zoneSequence = zoneSequence
        self.type = RecordDeleted.eventType
        self.schemaVersion = RecordDeleted.schemaVersion
        self.payload = Data(payload.json.serialized())
        self.causation = causation
    }
}
