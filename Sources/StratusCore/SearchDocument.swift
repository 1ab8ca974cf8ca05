/// The text full-text search reads of a record: its searchable STRING fields and STRING_LIST
/// members, in field-name order, joined by spaces and cut to `maxBytes`. One definition for the
/// indexer, which stores it, and for predicates evaluated in memory, which must search the same text.
public enum SearchDocument {
    /// The most text of one record that full-text search indexes, in UTF-8 bytes. PostgreSQL refuses
    /// a text search document over 1 MB; this many bytes of the shortest distinct words stay well
    /// below it, so no record can make the indexer fail.
    public static let maxBytes = 128 * 1024

    /// The record's search document under an index policy.
    public static func text(of record: Record, policy: IndexPolicy) -> String {
        let searchable = record.fields.filter { policy.isSearchable(recordType: record.recordType, field: $0.key) }
        let text = searchable.sorted { $0.key < $1.key }.map(\.value).compactMap { value -> String? in
            switch value {
            case .string(let string): string
            case .list(.string, let values): values.compactMap { if case .string(let s) = $0 { s } else { nil } }.joined(separator: " ")
            default: nil
            }
        }.joined(separator: " ")
        return cut(text)
    }

    /// `text` cut to `maxBytes` at a character boundary.
    public static func cut(_ text: String) -> String {
        guard text.utf8.count > maxBytes else { return text }
        var end = text.utf8.index(text.utf8.startIndex, offsetBy: maxBytes)
        while end > text.startIndex, String.Index(end, within: text) == nil { end = text.utf8.index(before: end) }
        return String(text[..<end])
    }
}
