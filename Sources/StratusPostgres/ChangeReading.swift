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

    /// Reads it; the first statement of a `PostgresStore.snapshot` transaction, so the snapshot is
    /// the one every later statement of the transaction reads in.
    static func read(on transaction: Transaction) async throws -> ChangeReading {
        let rows = try await transaction.connection.query(
            "SELECT pg_current_snapshot()::text, (SELECT system_identifier FROM pg_control_system())::text", logger: transaction.logger)
        for try await (text, system) in rows.decode((String, String).self) {
            guard let (snapshot, reached) = ChangeSnapshot.read(text) else { break }
            return ChangeReading(cluster: DatabaseChangeToken.binding(system), snapshot: snapshot, reached: reached)
        }
        throw StratusError(.internalError, "The database server's snapshot could not be read")
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
