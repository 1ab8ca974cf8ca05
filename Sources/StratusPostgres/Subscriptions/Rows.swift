import PostgresNIO

/// Every row of a query's answer, decoded: for the small answers (a few rows) read whole.
func collect<each Column: PostgresDecodable>(_ rows: PostgresRowSequence, as type: (repeat each Column).Type) async throws -> [(repeat each Column)] {
    var collected: [(repeat each Column)] = []
    for try await row in rows.decode(type) { collected.append(row) }
    return collected
}
