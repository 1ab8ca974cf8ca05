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

    /// Creates a policy.
    public init(fields: [String: [String: FieldIndexes]] = [:], defaultIndexes: FieldIndexes = .all) {
        self.fields = fields
        self.defaultIndexes = defaultIndexes
    }

    /// Every field of every type, fully indexed.
    public static let development = IndexPolicy()

    /// The indexes of one field.
    public func indexes(recordType: String, field: String) -> FieldIndexes {
        fields[recordType]?[field] ?? defaultIndexes
    }

    /// Refuses a query that needs an index a field does not have.
    public func check(_ query: RecordQuery) throws(StratusError) {
        for filter in query.filters where !RecordQuery.systemFields.contains(filter.fieldName) && filter.fieldName != "___all" {
            let token = filter.comparator == .containsAllTokens || filter.comparator == .containsAnyTokens
            let needed: FieldIndexes = token ? .searchable : .queryable
            guard indexes(recordType: query.recordType, field: filter.fieldName).contains(needed) else {
                throw StratusError(.badRequest, "Field '\(filter.fieldName)' of \(query.recordType) is not \(token ? "searchable" : "queryable")")
            }
        }
        for sort in query.sorts where !RecordQuery.systemFields.contains(sort.fieldName) {
            guard indexes(recordType: query.recordType, field: sort.fieldName).contains(.sortable) else {
                throw StratusError(.badRequest, "Field '\(sort.fieldName)' of \(query.recordType) is not sortable")
            }
        }
    }

    /// Whether a field's text goes into the record's search document (`___all`).
    public func isSearchable(recordType: String, field: String) -> Bool {
        indexes(recordType: recordType, field: field).contains(.searchable)
    }
}
