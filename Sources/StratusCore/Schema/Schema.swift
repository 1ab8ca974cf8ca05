import Foundation

/// A container environment's schema, as CloudKit's schema language describes it: custom security
/// roles and record types (their fields, field types, index flags and grants).
public struct Schema: Sendable, Hashable, Codable {
    /// The roles `CREATE ROLE` declares (the built-in `_world`, `_icloud`, `_creator` are never listed).
    public var roles: [String]
    /// The record types.
    public var recordTypes: [RecordTypeSchema]

    /// Creates a schema.
    public init(roles: [String] = [], recordTypes: [RecordTypeSchema] = []) {
        self.roles = roles
        self.recordTypes = recordTypes
    }

    /// The built-in roles: everyone, signed-in users, a record's creator.
    public static let builtInRoles: Set<String> = ["_world", "_icloud", "_creator"]

    /// The record type of that name, if any.
    public func recordType(named name: String) -> RecordTypeSchema? {
        recordTypes.first { $0.name == name }
    }

    /// The same schema in the one order the printer and the store use (roles and record types by
    /// name, each type's system fields first, then its fields by name): two schemas that say the
    /// same are equal once normalized.
    public var normalized: Schema {
        Schema(roles: roles.sorted(by: Self.byteOrder), recordTypes: recordTypes.map(\.normalized).sorted { Self.byteOrder($0.name, $1.name) })
    }

    /// What the query index serves for this schema: each field its flags, fields the schema does
    /// not name nothing (production's enforcement).
    public var indexPolicy: IndexPolicy {
        var fields: [String: [String: FieldIndexes]] = [:]
        for type in recordTypes {
            fields[type.name] = Dictionary(type.fields.map { ($0.name, $0.indexes) }, uniquingKeysWith: { $1 })
        }
        return IndexPolicy(fields: fields, defaultIndexes: [], checksSystemFields: true)
    }

    static func byteOrder(_ a: String, _ b: String) -> Bool { Array(a.utf8).lexicographicallyPrecedes(b.utf8) }
}

/// One record type of a schema.
public struct RecordTypeSchema: Sendable, Hashable, Codable {
    /// The record type's name.
    public var name: String
    /// Its fields, system fields (`___createTime`, …) included.
    public var fields: [SchemaField]
    /// Who may read, create and write its records.
    public var grants: [SchemaGrant]

    /// Creates a record type.
    public init(name: String, fields: [SchemaField] = [], grants: [SchemaGrant] = []) {
        self.name = name
        self.fields = fields
        self.grants = grants
    }

    /// The system fields every record type has, with their types, as CloudKit's tools export them.
    /// Their index flags are the record type's own indexes (e.g. `"___recordID" REFERENCE QUERYABLE`).
    public static let systemFields: [(name: String, type: SchemaFieldType)] = [
        ("___createTime", SchemaFieldType(.timestamp)),
        ("___createdBy", SchemaFieldType(.reference)),
        ("___etag", SchemaFieldType(.string)),
        ("___modTime", SchemaFieldType(.timestamp)),
        ("___modifiedBy", SchemaFieldType(.reference)),
        ("___recordID", SchemaFieldType(.reference)),
    ]

    /// Whether a field name is one of the system fields.
    public static func isSystemField(_ name: String) -> Bool { systemFields.contains { $0.name == name } }

    /// CloudKit's default grants for a new record type: creators read and write their own records,
    /// signed-in users create, everyone reads.
    public static let defaultGrants: [SchemaGrant] = [
        SchemaGrant([.write], to: "_creator"),
        SchemaGrant([.create], to: "_icloud"),
        SchemaGrant([.read], to: "_world"),
    ]

    /// A record type as a development save creates it: the system fields without indexes and the
    /// default grants.
    public static func created(name: String) -> RecordTypeSchema {
        RecordTypeSchema(name: name, fields: systemFields.map { SchemaField(name: $0.name, type: $0.type) }, grants: defaultGrants)
    }

    /// The field of that name, if any.
    public func field(named name: String) -> SchemaField? {
        fields.first { $0.name == name }
    }

    /// The same type with its fields in the printer's order: system fields as CloudKit lists them,
    /// then the others by name.
    public var normalized: RecordTypeSchema {
        var copy = self
        copy.fields = fields.sorted { a, b in
            let (ia, ib) = (Self.systemFields.firstIndex { $0.name == a.name }, Self.systemFields.firstIndex { $0.name == b.name })
            switch (ia, ib) {
            case let (ia?, ib?): return ia < ib
            case (.some, nil): return true
            case (nil, .some): return false
            case (nil, nil): return Schema.byteOrder(a.name, b.name)
            }
        }
        return copy
    }
}

/// One field of a record type.
public struct SchemaField: Sendable, Hashable, Codable {
    /// The field's name.
    public var name: String
    /// Its type.
    public var type: SchemaFieldType
    /// QUERYABLE, SEARCHABLE, SORTABLE.
    public var indexes: FieldIndexes

    /// Creates a field.
    public init(name: String, type: SchemaFieldType, indexes: FieldIndexes = []) {
        self.name = name
        self.type = type
        self.indexes = indexes
    }
}

/// What a role may do with a record type's records.
public struct SchemaPermission: OptionSet, Sendable, Hashable, Codable {
    public let rawValue: Int
    public init(rawValue: Int) { self.rawValue = rawValue }

    /// Read the records.
    public static let read = SchemaPermission(rawValue: 1)
    /// Create records.
    public static let create = SchemaPermission(rawValue: 2)
    /// Change and delete the records.
    public static let write = SchemaPermission(rawValue: 4)

    /// The schema language's words, in the order the schema language prints them.
    public var schemaWords: [String] {
        [(SchemaPermission.read, "READ"), (.create, "CREATE"), (.write, "WRITE")].filter { contains($0.0) }.map(\.1)
    }
}

/// `GRANT READ, CREATE, WRITE TO role`.
public struct SchemaGrant: Sendable, Hashable, Codable {
    /// A record type's grants from their stored JSON (`[{"permissions": 3, "role": "_world"}, …]`,
    /// as `Codable` wrote them). Every save reads its record type's grants: read with `JSONParser`
    /// in the stored form, and through `JSONDecoder` (whose answer this is) in any other.
    public static func list(json text: String) throws -> [SchemaGrant] {
        if let grants = storedList(text) { return grants }
        return try EventCoding.decoder.decode([SchemaGrant].self, from: Data(text.utf8))
    }

    /// The grants of text in the stored form (each grant exactly its two members); nil for any other.
    private static func storedList(_ text: String) -> [SchemaGrant]? {
        guard case .array(let elements)? = try? JSONParser.parse(text) else { return nil }
        var grants: [SchemaGrant] = []
        grants.reserveCapacity(elements.count)
        for element in elements {
            guard case .object(let members) = element, members.count == 2,
                  case .int(let permissions)? = members["permissions"], let raw = Int(exactly: permissions),
                  case .string(let role)? = members["role"]
            else { return nil }
            grants.append(SchemaGrant(SchemaPermission(rawValue: raw), to: role))
        }
        return grants
    }

    /// What the role may do.
    public var permissions: SchemaPermission
    /// A built-in role (`_world`, `_icloud`, `_creator`) or one the schema creates.
    public var role: String

    /// Creates a grant.
    public init(_ permissions: SchemaPermission, to role: String) {
        self.permissions = permissions
        self.role = role
    }
}

extension FieldIndexes: Codable {
    public init(from decoder: any Decoder) throws { self.init(rawValue: try decoder.singleValueContainer().decode(Int.self)) }
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(rawValue)
    }
}
