import Foundation
import Logging
import PostgresNIO
import StratusCore

/// The snapshot a database sync reads in (`pg_current_snapshot()`), and the cluster it belongs to:
/// what its database change token holds (`DatabaseChangeToken`, migration 0032).
public struct ChangeReading: Sendable {
    /// The cluster (`DatabaseChangeToken.binding` of its system identifier).
    public var cluster: UInt64
    /// The snapshot, bounded.
    public var snapshot: ChangeSnapshot
    /// The transaction id the cluster has reached (the snapshot's xmax as read).
    public var reached: UInt64

    /// The columns that read it, as the first items of a statement's select list: the statement's
    /// snapshot (one statement reads in one) and the cluster's system identifier, as text.
    static let columns = "pg_current_snapshot()::text, (SELECT system_identifier FROM pg_control_system())::text"

    /// The error when the server's snapshot does not read as one.
    static let unreadable = StratusError(.internalError, "The database server's snapshot could not be read")

    /// Reads it from the `columns` of a row.
    static func parse(snapshot text: String, system: String) throws -> ChangeReading {
        guard let (snapshot, reached) = ChangeSnapshot.read(text) else { throw unreadable }
        return ChangeReading(cluster: DatabaseChangeToken.binding(system), snapshot: snapshot, reached: reached)
    }

    /// Reads it; the first statement of a `PostgresStore.snapshot` transaction, so the snapshot is
    /// the one every later statement of the transaction reads in.
    static func read(on transaction: Transaction) async throws -> ChangeReading {
        let rows = try await transaction.connection.query("SELECT \(unescaped: columns)", logger: transaction.logger)
        for try await (text, system) in rows.decode((String, String).self) {
            return try parse(snapshot: text, system: system)
        }
        throw unreadable
    }

    /// The window a sync of `database` from `token` answers (`DatabaseChangeWindow.open`).
    func window(_ token: DatabaseChangeToken?, database: DatabaseID) throws(StratusError) -> DatabaseChangeWindow {
        try DatabaseChangeWindow.open(
            token, cluster: cluster, database: DatabaseChangeToken.binding(database.key), current: snapshot, reached: reached)
    }

    /// The token a sync from an earlier token's zone-by-zone comparison hands out once nothing more is coming.
    public func token(for database: DatabaseID) -> DatabaseChangeToken {
        DatabaseChangeWindow.position(cluster: cluster, database: DatabaseChangeToken.binding(database.key), current: snapshot)
    }
}
