/// A field's type as CloudKit's schema language writes it: `STRING`, `LIST<INT64>`, `ENCRYPTED BYTES`,
/// `NUMBER PREFERRED AS DOUBLE`, ….
public struct SchemaFieldType: Sendable, Hashable, Codable, CustomStringConvertible {
    /// The scalar types of the schema language.
    public enum Base: String, Sendable, Hashable, Codable, CaseIterable {
        case asset = "ASSET", bytes = "BYTES", double = "DOUBLE", int64 = "INT64", location = "LOCATION"
        case number = "NUMBER", reference = "REFERENCE", string = "STRING", timestamp = "TIMESTAMP"

        /// The types `ENCRYPTED` may precede.
        public static let encryptable: Set<Base> = [.bytes, .string, .double, .int64, .location, .timestamp]
    }

    /// The scalar type, or a list's element type.
    public var base: Base
    /// `ENCRYPTED`: the field's values are kept apart from the indexes (and can have none).
    public var encrypted: Bool
    /// For `NUMBER`: the type a client reads its values as (`PREFERRED AS INT64 | DOUBLE`).
    public var preferred: Base?
    /// `LIST<…>`.
    public var isList: Bool

    /// Creates a type.
    public init(_ base: Base, encrypted: Bool = false, preferred: Base? = nil, isList: Bool = false) {
        self.base = base
        self.encrypted = encrypted
        self.preferred = preferred
        self.isList = isList
    }

    /// The schema type a value of `type` makes when a development save creates its field.
    public init(valueType type: FieldType) {
        let base: Base = switch type.base {
        case .string: .string
        case .int64: .int64
        case .double: .double
        case .timestamp: .timestamp
        case .bytes: .bytes
        case .reference: .reference
        case .asset: .asset
        case .location: .location
        }
        self.init(base, isList: type.isList)
    }

    /// The schema language's spelling, which is also how the type is stored.
    public var description: String {
        var scalar = (encrypted ? "ENCRYPTED " : "") + base.rawValue
        if let preferred { scalar += " PREFERRED AS " + preferred.rawValue }
        return isList ? "LIST<\(scalar)>" : scalar
    }

    /// Whether a value of wire type `type` may be stored in a field of this type. An `ENCRYPTED`
    /// field takes only `BYTES` (of its list-ness): its values are sealed on the device, opaque to
    /// the server whatever their type is to the app, and never a plain value of its base type.
    public func accepts(_ type: FieldType) -> Bool {
        guard type.isList == isList else { return false }
        if encrypted { return type.base == .bytes }
        switch base {
        case .number: return type.base == .int64 || type.base == .double
        default: return SchemaFieldType(valueType: FieldType(type.base)).base == base
        }
    }

    /// The indexes a development save gives a field it creates, by type, as CloudKit's development
    /// environment does: text is queryable, searchable and sortable; numbers, times and locations
    /// queryable and sortable; references and lists queryable (string lists searchable too); bytes,
    /// assets and encrypted fields nothing.
    public var defaultIndexes: FieldIndexes {
        var indexes = allowedIndexes
        if isList || base == .reference { indexes.remove(.sortable) }
        return indexes
    }

    /// The indexes a schema may give this type: none for bytes, assets and encrypted fields, and
    /// SEARCHABLE only for text.
    public var allowedIndexes: FieldIndexes {
        if encrypted || base == .bytes || base == .asset { return [] }
        return base == .string ? .all : [.queryable, .sortable]
    }
}

extension FieldIndexes {
    /// The schema language's words for the indexes, in the order the schema language prints them.
    public var schemaWords: [String] {
        var words: [String] = []
        if contains(.queryable) { words.append("QUERYABLE") }
        if contains(.searchable) { words.append("SEARCHABLE") }
        if contains(.sortable) { words.append("SORTABLE") }
        return words
    }
}
