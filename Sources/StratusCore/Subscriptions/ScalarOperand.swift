/// One side of a scalar comparison as the query index's SQL types it: `text` compared under
/// `COLLATE "C"` (UTF-8 byte order; equal only when the bytes are, never by Unicode equivalence),
/// or `numeric` compared by exact decimal value. Text and numbers never compare: PostgreSQL
/// refuses the statement.
enum ScalarOperand: Sendable, Hashable {
    case text([UInt8])
    case number(StoredNumber)

    /// Text.
    static func text(_ string: String) -> ScalarOperand { .text(Array(string.utf8)) }

    /// A filter value as `QueryStore` binds it (`::text` or `::numeric`); nil for values it refuses.
    static func bound(_ value: FieldValue) -> ScalarOperand? {
        switch value {
        case .string(let text): .text(text)
        case .int64(let number), .timestamp(let number): .number(StoredNumber(number))
        case .double(let number): .number(StoredNumber(bound: number))
        case .reference(let reference): .text(reference.recordName)
        case .bytes, .asset, .location, .list: nil
        }
    }

    /// Whether this is a `numeric` rather than `text`.
    var isNumber: Bool {
        if case .number = self { true } else { false }
    }

    /// The order of two operands of the same type; nil when their types differ.
    func compare(_ other: ScalarOperand) -> Ordering? {
        switch (self, other) {
        case (.text(let left), .text(let right)):
            return left == right ? .same : left.lexicographicallyPrecedes(right) ? .less : .greater
        case (.number(let left), .number(let right)):
            return left == right ? .same : left < right ? .less : .greater
        default:
            return nil
        }
    }

    /// The outcome of a comparison.
    enum Ordering: Sendable { case less, same, greater }
}
