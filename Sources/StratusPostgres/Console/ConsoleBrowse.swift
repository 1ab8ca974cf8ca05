import Foundation
import Logging
import PostgresNIO
import StratusCore

/// What the console reads to let an operator browse a zone: record names a page at a time. The
/// records themselves are read through `RecordStore.lookup`, as the API reads them.
public struct ConsoleBrowse: Sendable {
    let store: PostgresStore

    /// Creates the reader.
    public init(store: PostgresStore) { self.store = store }

    /// Up to `limit` record names of a zone after `after` (nil: from the first), in name order.
    public func recordNames(zone: ZoneID, in database: DatabaseID, after: String?, limit: Int, logger: Logger) async throws -> [String] {
        try await store.withConnection { connection in
            let rows = try await connection.query(
                """
                SELECT record_name FROM records
                WHERE container = \(database.container) AND environment = \(database.environment.rawValue) AND scope = \(database.scope.rawValue)
                  AND owner = \(database.owner) AND zone_name = \(zone.zoneName) AND record_name > \(after ?? "")
                ORDER BY record_name LIMIT \(limit)
                """, logger: logger)
            var names: [String] = []
            for try await name in rows.decode(String.self) { names.append(name) }
            return names
        }
    }
}
