import PostgresNIO
@testable import StratusPostgres
import StratusTesting
import XCTest

/// Values that may be NULL, bound as array literals (`SQLArray`): PostgreSQL reads back each value
/// as it was, whatever characters it holds.
final class SQLArrayTests: XCTestCase {
    func testTextAndIntegerLiteralsReadBackAsTheyWere() async throws {
        let url = try await TestSupport.createDatabase()
        let texts: [String?] = [
            "plain", nil, "NULL", "null", "", "with \"quotes\"", "back\\slash\\", "{braces},commas", " spaced ", "ünïcødé 🎉", "\\\"", "a\nb\tc", "'",
        ]
        let numbers: [Int64?] = [0, nil, -1, Int64.max, Int64.min, 42]
        try await TestSupport.withStore(url: url) { store in
            try await store.withConnection { connection in
                var read: [String?] = []
                for try await (text, _) in try await connection.query("""
                    SELECT t, n FROM unnest(\(SQLArray.literal(texts))::text[]) WITH ORDINALITY AS u(t, n) ORDER BY n
                    """, logger: TestSupport.logger).decode((String?, Int64).self) {
                    read.append(text)
                }
                XCTAssertEqual(read, texts)
                var readNumbers: [Int64?] = []
                for try await (number, _) in try await connection.query("""
                    SELECT v, n FROM unnest(\(SQLArray.literal(numbers))::int8[]) WITH ORDINALITY AS u(v, n) ORDER BY n
                    """, logger: TestSupport.logger).decode((Int64?, Int64).self) {
                    readNumbers.append(number)
                }
                XCTAssertEqual(readNumbers, numbers)
                // No values: an empty array.
                for try await count in try await connection.query("""
                    SELECT cardinality(\(SQLArray.literal([String?]()))::text[])::int8 + cardinality(\(SQLArray.literal([Int64?]()))::int8[])::int8
                    """, logger: TestSupport.logger).decode(Int64.self) {
                    XCTAssertEqual(count, 0)
                }
            }
        }
    }
}
