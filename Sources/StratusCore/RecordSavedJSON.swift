import Foundation

/// `record.saved` payloads read for the query index without Foundation's JSON coders: a rebuild
/// reads every save of the log, and `JSONDecoder` on the payload (with the previous image the index
/// never reads) and `JSONEncoder` on the record were most of its time.
extension RecordSaved {
    /// What the query index keeps of a save: where the record lives, the record, and its JSON as
    /// the index stores it.
    public struct Indexed: Sendable {
        /// The record's database.
        public var database: DatabaseID
        /// The record's zone.
        public var zoneName: String
        /// The record as saved.
        public var record: Record
        /// The record as JSON text: the payload's own `record` member, which the event's encoder
        /// wrote with the very coder `EventCoding.encode(record)` uses, so it is the same JSON value.
        public var recordJSON: String
        /// The record's search document. The index holds every STRING field's text (development's
        /// policy); a schema's SEARCHABLE flags decide which fields a query may search.
        public var document: String

        /// Creates the indexed part of a decoded save (its record encoded again).
        public init(_ saved: RecordSaved) {
            self.init(database: saved.database, zoneName: saved.zoneID.zoneName, record: saved.record,
                      recordJSON: String(decoding: EventCoding.encode(saved.record), as: UTF8.self))
        }

        init(database: DatabaseID, zoneName: String, record: Record, recordJSON: String) {
            self.database = database
            self.zoneName = zoneName
            self.record = record
            self.recordJSON = recordJSON
            document = SearchDocument.text(of: record, policy: .development)
        }
    }

    /// The indexed part of a `record.saved` event. The payload's members are delimited without
    /// reading them, and only `database`, `zoneID` and `record` go through `JSONParser`; anything
    /// unusual (a record carrying a share's state, a member of another shape) is decoded whole
    /// through `Codable`, which reports what is wrong.
    public static func indexed(_ event: EventEnvelope) throws -> Indexed {
        guard event.type == eventType, let indexed = fastIndexed([UInt8](event.payload)) else {
            return Indexed(try event.decode(RecordSaved.self))
        }
        return indexed
    }

    private static func fastIndexed(_ bytes: [UInt8]) -> Indexed? {
        var database: Range<Int>?, zone: Range<Int>?, record: Range<Int>?
        let visited = JSONScan.forEachMember(in: bytes, within: 0..<bytes.count) { name, value in
            let key = bytes[name]
            if key.elementsEqual("database".utf8) {
                database = value
            } else if key.elementsEqual("zoneID".utf8) {
                zone = value
            } else if key.elementsEqual("record".utf8) {
                record = value
            }
            return true
        }
        let text = JSONValue.text(of:)
        guard visited != nil, let database, let zone, let record,
              case .object(let base)? = try? JSONParser.parse(Array(bytes[database])),
              case .object(let zoneMembers)? = try? JSONParser.parse(Array(bytes[zone])),
              case .object(let members)? = try? JSONParser.parse(Array(bytes[record])), members["shareState"] == nil,
              let container = text(base["container"]), let environment = text(base["environment"]).flatMap(Environment.init(rawValue:)),
              let scope = text(base["scope"]).flatMap(DatabaseScope.init(rawValue:)), let owner = text(base["owner"]),
              let zoneName = text(zoneMembers["zoneName"]), let stored = try? Record(stored: members)
        else { return nil }
        return Indexed(
            database: DatabaseID(container: container, environment: environment, scope: scope, owner: owner), zoneName: zoneName,
            record: stored, recordJSON: String(decoding: bytes[record], as: UTF8.self))
    }
}

extension RecordSaved {
    /// A `record.saved` payload but its previous image (`previous` nil), read without `JSONDecoder`:
    /// what a projection needs that looks only at the record after the save (stratus-gc's expiry
    /// index and asset counts, for every update). The image is cut out unread; the rest goes through
    /// `JSONParser`, and anything unusual (a share's state, a member of another shape) through
    /// `Codable`, which reports what is wrong.
    public static func withoutPrevious(_ event: EventEnvelope) throws -> RecordSaved {
        guard event.type == eventType else { return try event.decode(RecordSaved.self) }
        guard let members = JSONScan.members(of: event.payload, cutting: "previous"), let saved = RecordSaved(previousless: members) else {
            var whole = try event.decode(RecordSaved.self)
            whole.previous = nil
            return whole
        }
        return saved
    }

    /// The members but `previous`, as `Codable` reads them; nil when one is missing or of another type.
    private init?(previousless members: [String: JSONValue]) {
        let string = JSONValue.text(of:), optionalString = JSONValue.optionalString
        guard let database = DatabaseID(json: members["database"]), let zoneID = ZoneID(json: members["zoneID"]),
              case .object(let recordMembers)? = members["record"], recordMembers["shareState"] == nil,
              let record = try? Record(stored: recordMembers),
              let incarnation = optionalString(members["zoneIncarnation"]), let previousChangeTag = optionalString(members["previousChangeTag"]),
              case .array(let changed)? = members["changedFields"]
        else { return nil }
        var changedFields: [String] = []
        changedFields.reserveCapacity(changed.count)
        for name in changed {
            guard let name = string(name) else { return nil }
            changedFields.append(name)
        }
        var zoneIncarnation: UUID?
        if let incarnation {
            guard let uuid = UUID(uuidString: incarnation) else { return nil }
            zoneIncarnation = uuid
        }
        self.database = database
        self.zoneID = zoneID
        self.zoneIncarnation = zoneIncarnation
        self.record = record
        self.previousChangeTag = previousChangeTag
        self.changedFields = changedFields
        self.previous = nil
    }
}
