/// What the query index does with a field: filter on it, search its text, sort by it.
public struct FieldIndexes: OptionSet, Sendable, Hashable {
    public let rawValue: Int
    public init(rawValue: Int) { self.rawValue = rawValue }

    /// EQUALS, ranges, IN, BEGINS_WITH, list and NEAR comparators.
    public static let queryable = FieldIndexes(rawValue: 1)
    /// CONTAINS_ALL_TOKENS / CONTAINS_ANY_TOKENS, and membership in `___all`.
    public static let searchable = FieldIndexes(rawValue: 2)
    /// `sortBy`.
    public static let sortable = FieldIndexes(rawValue: 4)
    /// Everything: what development containers get for every field until schema management sets it.
    public static let all: FieldIndexes = [.queryable, .searchable, .sortable]
}

/// Which fields of which record types the query index serves. Development indexes everything;
/// schema management will switch fields off per record type.
public struct IndexPolicy: Sendable, Hashable {
    /// Record type → field → indexes; fields not named get `defaultIndexes`.
    public var fields: [String: [String: FieldIndexes]]
    /// What an unnamed field gets.
    public var defaultIndexes: FieldIndexes
    /// Whether filters and sorts on the system fields (`___recordID`, `___createTime`, `___modTime`)
    /// need their flags too, as in a schema's enforced environment; otherwise they are always served.
    public var checksSystemFields: Bool

    /// Creates a policy.
    public init(fields: [String: [String: FieldIndexes]] = [:], defaultIndexes: FieldIndexes = .all, checksSystemFields: Bool = false) {
        self.fields = fields
        self.defaultIndexes = defaultIndexes
        self.checksSystemFields = checksSystemFields
    }

    /// Every field of every type, fully indexed.
    public static let development = IndexPolicy()

    /// The indexes of one field.
    public func indexes(recordType: String, field: String) -> FieldIndexes {
        fields[recordType]?[field] ?? defaultIndexes
    }

    /// Refuses a query that needs an index a field does not have, in CloudKit's words ("Field 'x' is
    /// not marked queryable"), naming the flag the schema would need.
    public func check(_ query: RecordQuery) throws(StratusError) {
        for filter in query.filters where checked(filter.fieldName) && filter.fieldName != "___all" {
            let token = filter.comparator == .containsAllTokens || filter.comparator == .containsAnyTokens
            let needed: FieldIndexes = token ? .searchable : .queryable
            guard indexes(recordType: query.recordType, field: filter.fieldName).contains(needed) else {
                throw Self.notMarked(filter.fieldName, recordType: query.recordType, token ? "searchable" : "queryable")
            }
        }
        for sort in query.sorts where checked(sort.fieldName) {
            guard indexes(recordType: query.recordType, field: sort.fieldName).contains(.sortable) else {
                throw Self.notMarked(sort.fieldName, recordType: query.recordType, "sortable")
            }
        }
    }

    private func checked(_ field: String) -> Bool { checksSystemFields || !RecordQuery.systemFields.contains(field) }

    private static func notMarked(_ field: String, recordType: String, _ flag: String) -> StratusError {
        StratusError(.badRequest, "Field '\(ClientText.excerpt(field))' is not marked \(flag): record type '\(ClientText.excerpt(recordType))' needs \(flag.uppercased()) on it in the schema")
    }

    /// Whether a field's text goes into the record's search document (`___all`).
    public func isSearchable(recordType: String, field: String) -> Bool {
        indexes(recordType: recordType, field: field).contains(.searchable)
    }
}
