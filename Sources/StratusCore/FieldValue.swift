import Foundation

/// A CloudKit field type: a base type, or a list of one.
public struct FieldType: Sendable, Hashable, Codable, CustomStringConvertible {
    /// The scalar types.
    public enum Base: String, Sendable, Hashable, Codable, CaseIterable {
        case string = "STRING", int64 = "INT64", double = "DOUBLE", timestamp = "TIMESTAMP", bytes = "BYTES"
        case reference = "REFERENCE", asset = "ASSETID", location = "LOCATION"
    }

    /// The scalar type, or the element type of a list.
    public var base: Base
    /// Whether this is the `_LIST` form.
    public var isList: Bool

    /// Creates a type.
    public init(_ base: Base, isList: Bool = false) {
        self.base = base
        self.isList = isList
    }

    /// Parses `STRING`, `INT64_LIST`, ….
    public init?(rawValue: String) {
        if rawValue.hasSuffix("_LIST"), let base = Base(rawValue: String(rawValue.dropLast(5))) {
            self.init(base, isList: true)
        } else if let base = Base(rawValue: rawValue) {
            self.init(base)
        } else {
            return nil
        }
    }

    /// The wire name.
    public var rawValue: String { isList ? base.rawValue + "_LIST" : base.rawValue }
    public var description: String { rawValue }

    public init(from decoder: any Decoder) throws {
        let text = try decoder.singleValueContainer().decode(String.self)
        guard let type = FieldType(rawValue: text) else {
            throw DecodingError.dataCorrupted(.init(codingPath: decoder.codingPath, debugDescription: "unknown field type \(text)"))
        }
        self = type
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(rawValue)
    }
}

/// What happens to a record when the record its reference points at is deleted.
public enum ReferenceAction: String, Sendable, Hashable, Codable {
    /// Nothing.
    case none = "NONE"
    /// The referring record is deleted too.
    case deleteSelf = "DELETE_SELF"
    /// The target must exist when the reference is saved, and cannot be deleted while referred to.
    case validate = "VALIDATE"
}

/// A reference to another record in the same zone.
public struct Reference: Sendable, Hashable, Codable {
    /// The target's record name.
    public var recordName: String
    /// What deleting the target does.
    public var action: ReferenceAction

    /// Creates a reference.
    public init(recordName: String, action: ReferenceAction) {
        self.recordName = recordName
        self.action = action
    }
}

/// A geographic location, as CloudKit's LOCATION type.
public struct Location: Sendable, Hashable, Codable {
    public var latitude: Double
    public var longitude: Double
    public var horizontalAccuracy: Double?
    public var verticalAccuracy: Double?
    public var altitude: Double?
    public var speed: Double?
    public var course: Double?
    /// Milliseconds since 1970.
    public var timestamp: Int64?

    /// Creates a location.
    public init(latitude: Double, longitude: Double, horizontalAccuracy: Double? = nil, verticalAccuracy: Double? = nil,
                altitude: Double? = nil, speed: Double? = nil, course: Double? = nil, timestamp: Int64? = nil) {
        self.latitude = latitude
        self.longitude = longitude
        self.horizontalAccuracy = horizontalAccuracy
        self.verticalAccuracy = verticalAccuracy
        self.altitude = altitude
        self.speed = speed
        self.course = course
        self.timestamp = timestamp
    }
}

/// A field value of any CloudKit type.
///
/// Not `indirect` but for a location (the one large payload): lists keep their elements apart
/// already, and an indirect enum boxes every value on the heap, so each element of a long list cost
/// an allocation of its own (docs/benchmarks.md, "The store's JSON written directly").
public enum FieldValue: Sendable, Hashable {
    case string(String)
    case int64(Int64)
    case double(Double)
    /// Milliseconds since 1970.
    case timestamp(Int64)
    case bytes(Data)
    case reference(Reference)
    /// An asset's dictionary, stored as sent (assets themselves arrive with their own issue).
    case asset(JSONValue)
    indirect case location(Location)
    /// A list of values of one element type.
    case list(FieldType.Base, [FieldValue])

    /// The value's type.
    public var type: FieldType {
        switch self {
        case .string: FieldType(.string)
        case .int64: FieldType(.int64)
        case .double: FieldType(.double)
        case .timestamp: FieldType(.timestamp)
        case .bytes: FieldType(.bytes)
        case .reference: FieldType(.reference)
        case .asset: FieldType(.asset)
        case .location: FieldType(.location)
        case .list(let base, _): FieldType(base, isList: true)
        }
    }

    /// The references the value holds (one, or a list's).
    public var references: [Reference] {
        switch self {
        case .reference(let reference): [reference]
        case .list(.reference, let values): values.flatMap(\.references)
        default: []
        }
    }
}
