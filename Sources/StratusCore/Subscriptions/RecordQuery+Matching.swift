/// Deciding in memory, without the query index, whether a record is one `records/query` would
/// return: what a subscription's evaluator needs for every saved record.
///
/// Every rule mirrors the SQL `QueryStore` builds from the same `RecordQuery`, including its
/// cross-type rules: numbers (INT64, DOUBLE, TIMESTAMP) compare with each other by exact decimal
/// value; text compares by UTF-8 bytes (case-sensitive); a comparison with a missing field or a
/// field of another type is SQL's NULL, so EQUALS, NOT_EQUALS, ranges, IN, BEGINS_WITH, NEAR and
/// the positive list comparators fail while NOT_IN, NOT_BEGINS_WITH and the NOT_ list comparators
/// hold; a filter the SQL would refuse (a BYTES value, text against a time, a token search with no
/// tokens) matches nothing.
///
/// Token comparators are the one approximation (`SearchText`): tokens are lower-cased runs of
/// letters and digits with no stop words and no stemming, as the default `simple` configuration
/// has neither, while PostgreSQL's parser keeps e-mail addresses, host names, URLs, paths, decimal
/// numbers and versions whole, so a query token such as `example` matches `john@example.com` here
/// but not in the index; a generation built with a stemming configuration differs further. The
/// usual error is an extra notification, never a changed record (docs/query-index.md).
extension RecordQuery {
    /// Whether `records/query` would return `record` for this query: the record type is equal and every filter holds.
    public func matches(_ record: Record) -> Bool {
        matches(record, policy: .development)
    }

    /// `matches(_:)` under an index policy, which decides the fields `___all` searches.
    public func matches(_ record: Record, policy: IndexPolicy) -> Bool {
        guard record.recordType.utf8.elementsEqual(recordType.utf8) else { return false }
        var context = PredicateContext(record: record, policy: policy)
        for filter in filters {
            guard filter.evaluate(in: &context) == true else { return false }
        }
        return true
    }
}

extension QueryFilter {
    /// Whether `record` satisfies this one filter as the query index would decide it (the record type is not checked).
    public func matches(_ record: Record) -> Bool {
        matches(record, policy: .development)
    }

    /// `matches(_:)` under an index policy, which decides the fields `___all` searches.
    public func matches(_ record: Record, policy: IndexPolicy) -> Bool {
        var context = PredicateContext(record: record, policy: policy)
        return evaluate(in: &context) == true
    }

    /// The filter's outcome: nil where the SQL would refuse the statement (which then returns no
    /// record), otherwise whether the condition holds (SQL's NULL counts as false).
    func evaluate(in context: inout PredicateContext) -> Bool? {
        let record = context.record
        switch fieldName {
        case "___recordID": return compare(.text(record.recordName), numeric: false)
        case "___createTime": return compare(.number(StoredNumber(record.created.timestamp)), numeric: true)
        case "___modTime": return compare(.number(StoredNumber(record.modified.timestamp)), numeric: true)
        default: break
        }
        let field = record.fields[fieldName]
        let stored = field.map(StoredJSON.value)
        if fieldName == "___all" || comparator == .containsAllTokens || comparator == .containsAnyTokens {
            guard case .string(let text) = value else { return nil }
            let wanted = RecordQuery.tokens(text)
            guard !wanted.isEmpty else { return nil }
            let all = comparator == .containsAllTokens
            // The SQL tests the record's search document first, then (for a named field) the field's
            // own text — any type's, as `->>'value'` renders it.
            guard SearchText.satisfies(context.documentTokens, wanted, all: all) else { return false }
            if fieldName == "___all" { return true }
            return SearchText.satisfies(SearchText.tokens(stored.flatMap(StoredJSON.text) ?? ""), wanted, all: all)
        }
        switch comparator {
        case .near:
            guard case .location(let point) = value, let metres = distance else { return nil }
            // Only a field stored as LOCATION has a distance; anything else is NULL.
            guard case .location(let location)? = field else { return false }
            guard let metresAway = GreatCircle.distance(from: point, to: location) else { return nil }
            return GreatCircle.isWithin(metresAway, metres: metres)
        case .listContains, .notListContains:
            let contains = stored.map { StoredJSON.contains($0, .array([Self.elementJSON(value)])) }
            return comparator == .listContains ? contains ?? false : !(contains ?? false)
        case .listContainsAll, .notListContainsAll, .listContainsAny, .notListContainsAny:
            guard case .list(_, let elements) = value else { return nil }
            let positive = comparator == .listContainsAll || comparator == .listContainsAny
            // Only an array contains a list; a missing field or any other value satisfies just the NOT_ forms.
            guard case .array(let items)? = stored else { return !positive }
            var membership = StoredListMembership(items)
            let holds: Bool
            if comparator == .listContainsAll || comparator == .notListContainsAll {
                var all = true
                for element in elements where !membership.contains(Self.elementJSON(element)) { all = false; break }
                holds = all
            } else {
                var any = false
                for element in elements where membership.contains(Self.elementJSON(element)) { any = true; break }
                holds = any
            }
            return positive ? holds : !holds
        case .listMemberBeginsWith, .notListMemberBeginsWith:
            guard case .string(let prefix) = value else { return nil }
            var any = false
            if case .array(let items)? = stored {
                // Members are read as text: a number's digits, an object's `jsonb` text.
                any = items.contains { StoredJSON.text($0).map { $0.utf8.starts(with: prefix.utf8) } ?? false }
            }
            return comparator == .listMemberBeginsWith ? any : !any
        default:
            break
        }
        // The filter value's type picks what the stored value is read as.
        switch value {
        case .reference, .list(.reference, _):
            var recordName: ScalarOperand?
            if case .object(let members)? = stored, let member = members["recordName"], let text = StoredJSON.text(member) {
                recordName = .text(text)
            }
            return compare(recordName, numeric: false)
        case .int64, .double, .timestamp, .list(.int64, _), .list(.double, _), .list(.timestamp, _):
            var number: ScalarOperand?
            if let field, [.int64, .double, .timestamp].contains(field.type.base), !field.type.isList,
               let stored, let parsed = StoredJSON.number(stored) {
                number = .number(parsed)
            }
            return compare(number, numeric: true)
        default:
            var text: ScalarOperand?
            if case .string(let string)? = stored { text = .text(string) }
            return compare(text, numeric: false)
        }
    }

    /// Scalar comparisons, IN / NOT_IN and BEGINS_WITH on one typed operand (nil: SQL's NULL).
    private func compare(_ operand: ScalarOperand?, numeric: Bool) -> Bool? {
        switch comparator {
        case .equals, .notEquals, .lessThan, .lessThanOrEquals, .greaterThan, .greaterThanOrEquals:
            guard let bound = ScalarOperand.bound(value), bound.isNumber == numeric else { return nil }
            guard let order = operand?.compare(bound) else { return false }
            switch comparator {
            case .equals: return order == .same
            case .notEquals: return order != .same
            case .lessThan: return order == .less
            case .lessThanOrEquals: return order != .greater
            case .greaterThan: return order == .greater
            default: return order != .less
            }
        case .beginsWith, .notBeginsWith:
            guard case .string(let prefix) = value, !numeric else { return nil }
            var begins = false
            if case .text(let bytes)? = operand { begins = bytes.starts(with: prefix.utf8) }
            return comparator == .beginsWith ? begins : !begins
        case .in, .notIn:
            guard case .list(_, let values) = value else { return nil }
            var options = Set<ScalarOperand>()
            for element in values {
                guard let bound = ScalarOperand.bound(element) else { return nil }
                options.insert(bound)
            }
            // An empty list is decided before any type is looked at.
            guard !options.isEmpty else { return comparator == .notIn }
            guard options.allSatisfy({ $0.isNumber == numeric }) else { return nil }
            guard let operand else { return comparator == .notIn }
            return options.contains(operand) == (comparator == .in)
        default:
            return nil
        }
    }

    /// A wanted list element as it is stored in a record (a reference by its record name only).
    static func elementJSON(_ value: FieldValue) -> JSONValue {
        switch value {
        case .reference(let reference): .object(["recordName": .string(reference.recordName)])
        default: StoredJSON.value(of: value)
        }
    }
}

/// What one evaluation shares between a query's filters: the record, and its search document's
/// tokens, built at most once however many token filters there are.
struct PredicateContext {
    let record: Record
    let policy: IndexPolicy
    private var cachedDocumentTokens: Set<String>?

    init(record: Record, policy: IndexPolicy) {
        self.record = record
        self.policy = policy
    }

    /// The tokens `___all` searches.
    var documentTokens: Set<String> {
        mutating get {
            if let cachedDocumentTokens { return cachedDocumentTokens }
            let tokens = SearchText.documentTokens(record, policy: policy)
            cachedDocumentTokens = tokens
            return tokens
        }
    }
}
