import Logging
import PostgresNIO
import StratusCore

extension PostgresConnection {
    /// Runs a statement whose rows do not matter and reads them all. A statement that returns rows
    /// reports an error raised while it runs (a serialization failure, a deadlock) only through its
    /// rows: left unread, the error is lost and the transaction silently aborted.
    func execute(_ query: PostgresQuery, logger: Logger) async throws {
        for try await _ in try await self.query(query, logger: logger) {}
    }

    /// Commits the open transaction; throws `TransactionRolledBack` when PostgreSQL answered COMMIT
    /// with ROLLBACK (the transaction had failed without the failure reaching its caller).
    func commit() async throws {
        let result = try await self.query("COMMIT").get()
        guard result.metadata.command == "COMMIT" else { throw TransactionRolledBack() }
    }
}

/// A transaction that PostgreSQL rolled back at COMMIT: one of its statements had failed unnoticed.
/// Treated like a serialization failure (the transaction is run again, a bounded number of times).
struct TransactionRolledBack: Error, CustomStringConvertible {
    var description: String { "the transaction was rolled back at commit" }
}

extension PostgresQuery.StringInterpolation {
    /// A text as a string literal in the statement's text (`'…'`, each quote doubled; backslashes
    /// are plain characters with `standard_conforming_strings`, PostgreSQL's default), for a value
    /// the planner must see when it makes a prepared statement's generic plan, such as a partition
    /// key. Only for the process's own names, never a client's text: each value is another text to
    /// prepare.
    mutating func appendInterpolation(literal text: String) {
        appendLiteral("'" + text.replacingOccurrences(of: "'", with: "''") + "'")
    }
}

/// A PostgreSQL array literal of values that may be NULL (`{"a",NULL}`), bound as text and cast in
/// the statement (`\(SQLArray.literal(values))::text[]`): the client library binds arrays of
/// non-optional values only. Every text element is quoted, with `"` and `\` escaped, so any text
/// (braces, commas, quotes, the word NULL) reads back as it was.
enum SQLArray {
    static func literal(_ values: [String?]) -> String {
        var literal = "{"
        for (index, value) in values.enumerated() {
            if index > 0 { literal += "," }
            guard let value else {
                literal += "NULL"
                continue
            }
            literal += "\""
            for character in value.unicodeScalars {
                if character == "\"" || character == "\\" { literal += "\\" }
                literal.unicodeScalars.append(character)
            }
            literal += "\""
        }
        return literal + "}"
    }

    static func literal(_ values: [Int64?]) -> String {
        "{" + values.map { $0.map(String.init) ?? "NULL" }.joined(separator: ",") + "}"
    }
}

extension PostgresRow.Iterator {
    /// The next cell, decoded as `type`: a row read cell by cell with concrete types, where the
    /// client library's tuple decoding (`decode((String, String, …).self)`) resolves its generic
    /// types for every row — about a tenth of the API's CPU for a query's page of 100 rows.
    mutating func decodeNext<Value: PostgresDecodable>(_ type: Value.Type) throws -> Value {
        guard let cell = next() else { throw StratusError(.internalError, "a row has fewer columns than its statement selects") }
        return try cell.decode(Value.self, context: .default)
    }
}
