import Foundation

/// CloudKit's query comparators.
public enum Comparator: String, Sendable, Hashable, Codable, CaseIterable {
    case equals = "EQUALS", notEquals = "NOT_EQUALS"
    case lessThan = "LESS_THAN", lessThanOrEquals = "LESS_THAN_OR_EQUALS"
    case greaterThan = "GREATER_THAN", greaterThanOrEquals = "GREATER_THAN_OR_EQUALS"
    case near = "NEAR"
    case `in` = "IN", notIn = "NOT_IN"
    case beginsWith = "BEGINS_WITH", notBeginsWith = "NOT_BEGINS_WITH"
    case containsAllTokens = "CONTAINS_ALL_TOKENS", containsAnyTokens = "CONTAINS_ANY_TOKENS"
    case listContains = "LIST_CONTAINS", notListContains = "NOT_LIST_CONTAINS"
    case listContainsAny = "LIST_CONTAINS_ANY", notListContainsAny = "NOT_LIST_CONTAINS_ANY"
    case listContainsAll = "LIST_CONTAINS_ALL", notListContainsAll = "NOT_LIST_CONTAINS_ALL"
    case listMemberBeginsWith = "LIST_MEMBER_BEGINS_WITH", notListMemberBeginsWith = "NOT_LIST_MEMBER_BEGINS_WITH"
}

/// One `filterBy` entry.
public struct QueryFilter: Sendable, Hashable {
    /// The field, or a system field (`___recordID`, `___createTime`, `___modTime`), or `___all` for token comparators.
    public var fieldName: String
    public var comparator: Comparator
    public var value: FieldValue
    /// Metres, for NEAR.
    public var distance: Double?

    /// Creates a filter (already checked).
    public init(fieldName: String, comparator: Comparator, value: FieldValue, distance: Double?) {
        self.fieldName = fieldName
        self.comparator = comparator
        self.value = value
        self.distance = distance
    }
}

/// One `sortBy` entry.
public struct QuerySort: Sendable, Hashable {
    public var fieldName: String
    public var ascending: Bool
    /// Sort by distance from this location (a LOCATION field).
    public var relativeLocation: Location?
}

/// A checked `records/query` query.
public struct RecordQuery: Sendable, Hashable {
    public var recordType: String
    public var filters: [QueryFilter]
    public var sorts: [QuerySort]

    /// The system fields a query may name.
    public static let systemFields: Set<String> = ["___recordID", "___createTime", "___modTime"]

    /// What one query may ask for, so no query costs the shared database more than a bounded amount.
    /// With the defaults a query binds at most about 32 × 1,000 values, well below PostgreSQL's
    /// 65,535 parameters of a statement.
    public struct Limits: Sendable, Hashable {
        /// `filterBy` entries.
        public var maxFilters: Int = 32
        /// `sortBy` entries.
        public var maxSorts: Int = 8
        /// Values of one list comparison (`IN`, `NOT_IN`, `LIST_CONTAINS_ANY`, `LIST_CONTAINS_ALL` and their negations).
        public var maxListValues: Int = 1_000
        /// Search tokens of one token comparison (`CONTAINS_ALL_TOKENS`, `CONTAINS_ANY_TOKENS`).
        public var maxSearchTokens: Int = 32
        /// Bytes of the text of one token comparison.
        public var maxSearchTextBytes: Int = 1_024

        /// The defaults.
        public init() {}
    }

    /// Reads and checks a query dictionary: `{recordType, filterBy[], sortBy[]}`.
    public static func parse(_ json: JSONValue, limits: Limits = Limits()) throws(StratusError) -> RecordQuery {
        guard case .object(let members) = json else { throw StratusError(.badRequest, "query must be a dictionary") }
        guard let recordType = members["recordType"]?.stringValue else { throw StratusError(.badRequest, "query.recordType is required") }
        try Record.validate(recordType: recordType)
        var filters: [QueryFilter] = []
        if let filterBy = members["filterBy"] {
            guard case .array(let entries) = filterBy else { throw StratusError(.badRequest, "query.filterBy must be a list") }
            try check(entries.count, limit: limits.maxFilters, "query.filterBy", "filters", "per query")
            for (index, entry) in entries.enumerated() { filters.append(try filter(entry, index: index, limits: limits)) }
        }
        var sorts: [QuerySort] = []
        if let sortBy = members["sortBy"] {
            guard case .array(let entries) = sortBy else { throw StratusError(.badRequest, "query.sortBy must be a list") }
            try check(entries.count, limit: limits.maxSorts, "query.sortBy", "sorts", "per query")
            for (index, entry) in entries.enumerated() {
                guard let name = entry["fieldName"]?.stringValue else { throw StratusError(.badRequest, "query.sortBy[\(index)].fieldName is required") }
                if !systemFields.contains(name) { try Record.validate(fieldName: name) }
                var ascending = true
                if let flag = entry["ascending"] {
                    guard case .bool(let value) = flag else { throw StratusError(.badRequest, "query.sortBy[\(index)].ascending must be true or false") }
                    ascending = value
                }
                var location: Location?
                if let relative = entry["relativeLocation"] {
                    guard case .location(let parsed) = try FieldCoding.decode(field: "sortBy[\(index)].relativeLocation", relative) else {
                        throw StratusError(.badRequest, "query.sortBy[\(index)].relativeLocation must be a LOCATION")
                    }
                    location = parsed
                }
                sorts.append(QuerySort(fieldName: name, ascending: ascending, relativeLocation: location))
            }
        }
        return RecordQuery(recordType: recordType, filters: filters, sorts: sorts)
    }

    /// LIMIT_EXCEEDED when `count` is over `limit`, naming the place, what was counted and the limit.
    private static func check(_ count: Int, limit: Int, _ place: String, _ unit: String, _ scope: String) throws(StratusError) {
        guard count <= limit else {
            throw StratusError(.limitExceeded, "\(place) has \(count) \(unit); at most \(limit) \(unit) are allowed \(scope)")
        }
    }

    private static func filter(_ entry: JSONValue, index: Int, limits: Limits) throws(StratusError) -> QueryFilter {
        let place = "query.filterBy[\(index)]"
        guard let comparatorText = entry["comparator"]?.stringValue else { throw StratusError(.badRequest, "\(place).comparator is required") }
        guard let comparator = Comparator(rawValue: comparatorText) else {
            throw StratusError(.badRequest, "\(place): unknown comparator '\(comparatorText.prefix(64))'")
        }
        guard let name = entry["fieldName"]?.stringValue else { throw StratusError(.badRequest, "\(place).fieldName is required") }
        if name == "___all" {
            guard comparator == .containsAllTokens || comparator == .containsAnyTokens else {
                throw StratusError(.badRequest, "\(place): ___all works only with CONTAINS_ALL_TOKENS and CONTAINS_ANY_TOKENS")
            }
        } else if !systemFields.contains(name) {
            try Record.validate(fieldName: name)
        }
        guard let valueJSON = entry["fieldValue"] else { throw StratusError(.badRequest, "\(place).fieldValue is required") }
        let value = try FieldCoding.decode(field: name, valueJSON)
        var distance: Double?
        switch entry["distance"] {
        case .int(let metres)?: distance = Double(metres)
        case .double(let metres)?: distance = metres
        case nil, .null?: break
        default: throw StratusError(.badRequest, "\(place).distance must be a number of metres")
        }
        // System fields compare typed columns, not JSON: check them here so a mismatch is the
        // client's BAD_REQUEST rather than a type error from PostgreSQL.
        if let rule = systemFieldRules[name] { try check(systemField: name, rule, comparator, value, place: place) }
        // Check that the comparator fits the value.
        switch comparator {
        case .near:
            guard case .location = value, let distance, distance >= 0 else {
                throw StratusError(.badRequest, "\(place): NEAR needs a LOCATION fieldValue and a distance in metres")
            }
        case .in, .notIn, .listContainsAny, .notListContainsAny, .listContainsAll, .notListContainsAll:
            guard case .list(_, let values) = value else { throw StratusError(.badRequest, "\(place): \(comparator.rawValue) needs a list fieldValue") }
            try check(values.count, limit: limits.maxListValues, "\(place).fieldValue", "values", "in one \(comparator.rawValue)")
        case .containsAllTokens, .containsAnyTokens:
            guard case .string(let text) = value else { throw StratusError(.badRequest, "\(place): \(comparator.rawValue) needs a STRING fieldValue") }
            try check(text.utf8.count, limit: limits.maxSearchTextBytes, "\(place).fieldValue", "bytes", "in a token search")
            try check(tokens(text).count, limit: limits.maxSearchTokens, "\(place).fieldValue", "tokens", "in a token search")
        case .beginsWith, .notBeginsWith, .listMemberBeginsWith, .notListMemberBeginsWith:
            guard case .string = value else { throw StratusError(.badRequest, "\(place): \(comparator.rawValue) needs a STRING fieldValue") }
        case .equals, .notEquals, .lessThan, .lessThanOrEquals, .greaterThan, .greaterThanOrEquals, .listContains, .notListContains:
            if case .list = value { throw StratusError(.badRequest, "\(place): \(comparator.rawValue) needs a single value, not a list") }
            if case .location = value { throw StratusError(.badRequest, "\(place): compare locations with NEAR") }
        }
        return QueryFilter(fieldName: name, comparator: comparator, value: value, distance: distance)
    }

    /// What a system field can be compared with: its column's comparators and value types.
    private struct SystemFieldRule: Sendable {
        var comparators: [Comparator]
        var types: [FieldType.Base]
    }

    private static let scalarComparators: [Comparator] = [
        .equals, .notEquals, .lessThan, .lessThanOrEquals, .greaterThan, .greaterThanOrEquals, .in, .notIn,
    ]

    /// The times are integer milliseconds; the record ID is the record name (text, so it also has a prefix test).
    private static let systemFieldRules: [String: SystemFieldRule] = [
        "___createTime": SystemFieldRule(comparators: scalarComparators, types: [.timestamp, .int64]),
        "___modTime": SystemFieldRule(comparators: scalarComparators, types: [.timestamp, .int64]),
        "___recordID": SystemFieldRule(comparators: scalarComparators + [.beginsWith, .notBeginsWith], types: [.string, .reference]),
    ]

    private static func check(systemField name: String, _ rule: SystemFieldRule, _ comparator: Comparator, _ value: FieldValue, place: String) throws(StratusError) {
        guard rule.comparators.contains(comparator) else {
            throw StratusError(.badRequest, "\(place): \(name) cannot be compared with \(comparator.rawValue); use \(rule.comparators.map(\.rawValue).joined(separator: ", "))")
        }
        // A prefix is text, whatever else the field accepts.
        let types: [FieldType.Base] = comparator == .beginsWith || comparator == .notBeginsWith ? [.string] : rule.types
        let wantsList = comparator == .in || comparator == .notIn
        let expected = types.map { wantsList ? FieldType($0, isList: true).rawValue : $0.rawValue }.joined(separator: " or ")
        // An empty list matches nothing (IN) or everything (NOT_IN) whatever its declared type, and
        // `[]` without a type reads as STRING_LIST.
        if wantsList, case .list(_, let elements) = value, elements.isEmpty { return }
        guard value.type.isList == wantsList, types.contains(value.type.base) else {
            throw StratusError(.badRequest, "\(place): \(name) with \(comparator.rawValue) needs a \(expected) fieldValue, not \(value.type.rawValue)")
        }
    }

    /// Splits text into search tokens the way the index does: lower-cased runs of letters and digits.
    public static func tokens(_ text: String) -> [String] {
        text.lowercased().split { !($0.isLetter || $0.isNumber) }.map(String.init).filter { !$0.isEmpty }
    }
}
