import Foundation

/// Which of a container's databases a call reaches.
public enum DatabaseScope: String, Sendable, Codable, CaseIterable {
    case `private`, `public`, shared
}

/// A zone's id: its name and, in the shared database, its owner.
public struct ZoneID: Sendable, Hashable, Codable, CustomStringConvertible {
    public var zoneName: String
    public var ownerRecordName: String?

    public static let `default` = ZoneID(zoneName: "_defaultZone")

    public init(zoneName: String, ownerRecordName: String? = nil) {
        self.zoneName = zoneName
        self.ownerRecordName = ownerRecordName
    }

    public var description: String { ownerRecordName.map { "\(zoneName) of \($0)" } ?? zoneName }

    var wire: JSON {
        var members: [String: JSON] = ["zoneName": .string(zoneName)]
        if let ownerRecordName { members["ownerRecordName"] = .string(ownerRecordName) }
        return .object(members)
    }

    init?(wire: JSON?) {
        guard let name = wire?["zoneName"]?.string else { return nil }
        self.init(zoneName: name, ownerRecordName: wire?["ownerRecordName"]?.string)
    }
}

/// A record's id: its name within its zone.
public struct RecordID: Sendable, Hashable, Codable, CustomStringConvertible {
    public var recordName: String
    public var zoneID: ZoneID

    public init(recordName: String, zoneID: ZoneID = .default) {
        self.recordName = recordName
        self.zoneID = zoneID
    }

    public var description: String { "\(recordName) in \(zoneID)" }
}

/// A reference to another record of the same zone.
public struct Reference: Sendable, Hashable, Codable {
    public enum Action: String, Sendable, Codable { case none = "NONE", deleteSelf = "DELETE_SELF", validate = "VALIDATE" }
    public var recordName: String
    public var action: Action

    public init(recordName: String, action: Action = .none) {
        self.recordName = recordName
        self.action = action
    }
}

/// A location, as CloudKit's location dictionary.
public struct Location: Sendable, Hashable, Codable {
    public var latitude: Double
    public var longitude: Double
    public var altitude: Double?
    public var horizontalAccuracy: Double?
    public var verticalAccuracy: Double?
    public var course: Double?
    public var speed: Double?
    /// Milliseconds since 1970.
    public var timestamp: Int64?

    public init(latitude: Double, longitude: Double) {
        self.latitude = latitude
        self.longitude = longitude
    }
}

/// An asset field's value: what an upload answered (to save), or what a fetched record carries
/// (`downloadURL` to read its bytes).
public struct Asset: Sendable, Hashable, Codable {
    public var fileChecksum: String?
    public var size: Int64?
    public var receipt: String?
    public var referenceChecksum: String?
    public var wrappingKey: String?
    public var downloadURL: String?

    public init(fileChecksum: String? = nil, size: Int64? = nil, receipt: String? = nil, referenceChecksum: String? = nil, downloadURL: String? = nil) {
        self.fileChecksum = fileChecksum
        self.size = size
        self.receipt = receipt
        self.referenceChecksum = referenceChecksum
        self.downloadURL = downloadURL
    }
}

/// A field's value, one case per CloudKit field type; lists hold values of one type.
public enum FieldValue: Sendable, Hashable, Codable {
    case string(String)
    case int64(Int64)
    case double(Double)
    /// Milliseconds since 1970.
    case timestamp(Int64)
    case bytes(Data)
    case reference(Reference)
    case location(Location)
    case asset(Asset)
    /// A list; `elementType` is the wire type of its elements (e.g. `STRING`), needed for an empty list.
    case list(elementType: String, [FieldValue])

    public static func date(_ date: Date) -> FieldValue { .timestamp(Int64((date.timeIntervalSince1970 * 1000).rounded())) }

    /// The wire's type name (`STRING`, `INT64`, …, `STRING_LIST`).
    public var wireType: String {
        switch self {
        case .string: "STRING"
        case .int64: "INT64"
        case .double: "DOUBLE"
        case .timestamp: "TIMESTAMP"
        case .bytes: "BYTES"
        case .reference: "REFERENCE"
        case .location: "LOCATION"
        case .asset: "ASSETID"
        case .list(let element, _): element + "_LIST"
        }
    }

    public var stringValue: String? { if case .string(let value) = self { return value }; return nil }
    public var int64Value: Int64? { if case .int64(let value) = self { return value }; return nil }
    public var doubleValue: Double? { if case .double(let value) = self { return value }; return nil }
    public var bytesValue: Data? { if case .bytes(let value) = self { return value }; return nil }
    public var assetValue: Asset? { if case .asset(let value) = self { return value }; return nil }

    var wireValue: JSON {
        switch self {
        case .string(let value): return .string(value)
        case .int64(let value): return .int(value)
        case .double(let value): return .double(value)
        case .timestamp(let value): return .int(value)
        case .bytes(let value): return .string(value.base64EncodedString())
        case .reference(let value): return ["recordName": .string(value.recordName), "action": .string(value.action.rawValue)]
        case .location(let value):
            var members: [String: JSON] = ["latitude": .double(value.latitude), "longitude": .double(value.longitude)]
            for (key, member) in [("altitude", value.altitude), ("horizontalAccuracy", value.horizontalAccuracy),
                                  ("verticalAccuracy", value.verticalAccuracy), ("course", value.course), ("speed", value.speed)] {
                if let member { members[key] = .double(member) }
            }
            if let timestamp = value.timestamp { members["timestamp"] = .int(timestamp) }
            return .object(members)
        case .asset(let value):
            var members: [String: JSON] = [:]
            for (key, member) in [("fileChecksum", value.fileChecksum), ("receipt", value.receipt), ("referenceChecksum", value.referenceChecksum),
                                  ("wrappingKey", value.wrappingKey), ("downloadURL", value.downloadURL)] {
                if let member { members[key] = .string(member) }
            }
            if let size = value.size { members["size"] = .int(size) }
            return .object(members)
        case .list(_, let values): return .array(values.map(\.wireValue))
        }
    }

    /// The field dictionary `{value, type}` the wire carries.
    var wire: JSON { ["value": wireValue, "type": .string(wireType)] }

    /// Reads a field dictionary; nil for a type this client does not know or a value that does not
    /// match its type.
    init?(wire: JSON) {
        guard let type = wire["type"]?.string, let value = wire["value"] else { return nil }
        self.init(type: type, value: value)
    }

    init?(type: String, value: JSON) {
        switch type {
        case "STRING": guard let text = value.string else { return nil }; self = .string(text)
        case "INT64": guard let number = value.int64 else { return nil }; self = .int64(number)
        case "DOUBLE": guard let number = value.double else { return nil }; self = .double(number)
        case "TIMESTAMP": guard let number = value.int64 else { return nil }; self = .timestamp(number)
        case "BYTES": guard let text = value.string, let data = Data(base64Encoded: text) else { return nil }; self = .bytes(data)
        case "REFERENCE":
            guard let name = value["recordName"]?.string else { return nil }
            self = .reference(Reference(recordName: name, action: value["action"]?.string.flatMap(Reference.Action.init(rawValue:)) ?? .none))
        case "LOCATION":
            guard let latitude = value["latitude"]?.double, let longitude = value["longitude"]?.double else { return nil }
            var location = Location(latitude: latitude, longitude: longitude)
            location.altitude = value["altitude"]?.double
            location.horizontalAccuracy = value["horizontalAccuracy"]?.double
            location.verticalAccuracy = value["verticalAccuracy"]?.double
            location.course = value["course"]?.double
            location.speed = value["speed"]?.double
            location.timestamp = value["timestamp"]?.int64
            self = .location(location)
        case "ASSETID", "ASSET":
            var asset = Asset(fileChecksum: value["fileChecksum"]?.string, size: value["size"]?.int64, receipt: value["receipt"]?.string,
                              referenceChecksum: value["referenceChecksum"]?.string, downloadURL: value["downloadURL"]?.string)
            asset.wrappingKey = value["wrappingKey"]?.string
            self = .asset(asset)
        default:
            guard type.hasSuffix("_LIST"), case .array(let items) = value else { return nil }
            let element = String(type.dropLast("_LIST".count))
            var values: [FieldValue] = []
            values.reserveCapacity(items.count)
            for item in items {
                guard let decoded = FieldValue(type: element, value: item) else { return nil }
                values.append(decoded)
            }
            self = .list(elementType: element, values)
        }
    }

    /// The bytes of the value's wire form: what a batch counts against its byte budget.
    var wireSize: Int { wire.encoded().count }
}

/// A record: its id, type, fields, and the server's system fields once it has been saved.
public struct Record: Sendable, Hashable, Codable {
    public var recordID: RecordID
    public var recordType: String
    public var fields: [String: FieldValue]
    /// Values the app marks encrypted: sealed on this device before they are sent (with the
    /// container's `keyProvider`), opened when read. The server sees only sealed bytes.
    public var encryptedValues: [String: FieldValue]
    /// Encrypted values as they came from the server, not opened (no key provider, or its key
    /// for them missing): sent back unchanged when the record is saved; `FieldSealing.open`
    /// with the key opens them.
    public var sealedValues: [String: Data]
    /// The server's version of the record; nil for a record never saved.
    public var recordChangeTag: String?
    /// Milliseconds since 1970; the server's.
    public var creationDate: Int64?
    public var modificationDate: Int64?
    public var creatorUserRecordName: String?
    public var lastModifiedUserRecordName: String?
    public var parent: Reference?
    /// The share this record roots, if any.
    public var share: Reference?
    /// A share record's own members (`cloudkit.share`): `publicPermission`, `participants`,
    /// `shortGUID`, `url`, as the wire has them.
    public var shareMembers: [String: JSON]

    public init(recordType: String, recordID: RecordID, fields: [String: FieldValue] = [:]) {
        self.recordID = recordID
        self.recordType = recordType
        self.fields = fields
        self.encryptedValues = [:]
        self.sealedValues = [:]
        self.shareMembers = [:]
    }

    public subscript(key: String) -> FieldValue? {
        get { fields[key] }
        set { fields[key] = newValue }
    }
}

/// A zone as the server answers it.
public struct Zone: Sendable, Hashable, Codable {
    public var zoneID: ZoneID
    public var atomic: Bool
    /// The zone's current sync token (custom zones).
    public var syncToken: String?
    public var defaultTimeToLive: Int64?

    public init(zoneID: ZoneID, atomic: Bool = true, syncToken: String? = nil) {
        self.zoneID = zoneID
        self.atomic = atomic
        self.syncToken = syncToken
    }
}

extension FieldValue: ExpressibleByStringLiteral, ExpressibleByIntegerLiteral, ExpressibleByFloatLiteral {
    public init(stringLiteral value: String) { self = .string(value) }
    public init(integerLiteral value: Int64) { self = .int64(value) }
    public init(floatLiteral value: Double) { self = .double(value) }
}
