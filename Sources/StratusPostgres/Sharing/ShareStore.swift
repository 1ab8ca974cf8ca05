import Foundation
import Logging
import PostgresNIO
import StratusCore

/// Shares by short GUID (records/resolve, records/accept) and the shared database: which owners'
/// zones a user reaches, and reads limited to them, the access decided from the shares tables in
/// the reading transaction itself.
public struct ShareStore: Sendable {
    let store: PostgresStore

    /// Creates the share store.
    public init(store: PostgresStore) { self.store = store }

    /// A share as records/resolve and records/accept answer it.
    public struct Resolved: Sendable {
        /// The short GUID asked for.
        public var shortGUID: String
        /// The owner's zone the share lives in.
        public var zone: ZoneID
        /// The share record, with its state.
        public var share: Record
        /// The root record of a hierarchy share; nil for a zone-wide share.
        public var rootRecordName: String?
        /// The root record itself.
        public var root: Record?
        /// The caller's place in the share, if they have one.
        public var participant: ShareParticipant?
    }

    /// Resolves short GUIDs for `user`: a share is found by its participants (any status) and, when
    /// public, by anyone signed in; for anyone else it is NOT_FOUND.
    public func resolve(_ shortGUIDs: [String], container: String, environment: StratusCore.Environment, user: String, logger: Logger)
        async throws -> [String: Result<Resolved, StratusError>] {
        try await store.snapshot(logger: logger) { transaction in
            let email = try await Self.email(of: user, container: container, on: transaction)
            var results: [String: Result<Resolved, StratusError>] = [:]
            for row in try await Self.shareRows(shortGUIDs, container: container, environment: environment, on: transaction) {
                results[row.shortGUID] = try await Self.resolved(row, user: user, email: email, on: transaction).map { .success($0) }
            }
            for guid in shortGUIDs where results[guid] == nil { results[guid] = .failure(StratusError(.notFound, "No share has short GUID '\(guid)'")) }
            return results
        }
    }

    /// Accepts shares for `user` (`ShareRules.accept`): each in its own transaction holding its
    /// zone's lock, as a save of the share record (its event appended like every record change).
    public func accept(_ shortGUIDs: [String], container: String, environment: StratusCore.Environment, user: String, requestID: String, logger: Logger)
        async throws -> [String: Result<Resolved, StratusError>] {
        let rows = try await store.snapshot(logger: logger) { transaction in
            try await Self.shareRows(shortGUIDs, container: container, environment: environment, on: transaction)
        }
        var results: [String: Result<Resolved, StratusError>] = [:]
        for row in rows {
            let database = row.database
            let context = WriteContext(
                database: database, zone: ZoneID(zoneName: row.zoneName, ownerRecordName: row.owner),
                causation: Causation(requestID: requestID, userRecordName: user), deviceID: nil, limits: RecordStore.Limits())
            do {
                let resolved = try await store.locked(logger: logger, locks: [context.zoneKey.rawValue]) { transaction in
                    let email = try await Self.email(of: user, container: container, on: transaction)
                    guard let stored = try await ShareTables.share(row.shareName, zone: row.zoneName, of: database, on: transaction),
                          stored.shortGUID == row.shortGUID else {
                        throw StratusError(.notFound, "No share has short GUID '\(row.shortGUID)'")
                    }
                    if let accepted = try ShareRules.accept(stored.state, user: user, email: email) {
                        var writer = try await ZoneWriter.open(context, in: transaction)
                        writer.sharing.decided[ExactName(row.shareName)] = accepted
                        _ = try await writer.apply(RecordStore.Command(type: .forceUpdate, input: RecordInput(recordName: row.shareName)), in: transaction)
                        try await writer.close(in: transaction)
                    }
                    guard let resolved = try await Self.resolved(row, user: user, email: email, on: transaction) else {
                        throw StratusError(.notFound, "No share has short GUID '\(row.shortGUID)'")
                    }
                    return resolved
                }
                results[row.shortGUID] = .success(resolved)
            } catch let error as StratusError {
                results[row.shortGUID] = .failure(error)
            } catch let failure as RecordStore.Failure {
                results[row.shortGUID] = .failure(failure.error)
            }
        }
        for guid in shortGUIDs where results[guid] == nil { results[guid] = .failure(StratusError(.notFound, "No share has short GUID '\(guid)'")) }
        return results
    }

    /// A share's key by short GUID.
    struct ShareRow: Sendable {
        var shortGUID: String
        var container: String
        var environment: StratusCore.Environment
        var owner: String
        var zoneName: String
        var shareName: String

        /// The owner's private database, where the share lives.
        var database: DatabaseID { DatabaseID(container: container, environment: environment, scope: .private, owner: owner) }
    }

    static func shareRows(_ shortGUIDs: [String], container: String, environment: StratusCore.Environment, on transaction: Transaction) async throws -> [ShareRow] {
        // Crosses owners: a share's URL names only its short GUID; sharded, the directory maps it to the
        // owner's node (docs/scale-out.md).
        let rows = try await transaction.connection.query("""
            SELECT short_guid, owner, zone_name, record_name FROM shares
            WHERE container = \(container) AND environment = \(environment.rawValue) AND short_guid = ANY(\(shortGUIDs))
            """, logger: transaction.logger)
        var found: [ShareRow] = []
        for try await (guid, owner, zone, name) in rows.decode((String, String, String, String).self) {
            found.append(ShareRow(shortGUID: guid, container: container, environment: environment, owner: owner, zoneName: zone, shareName: name))
        }
        return found
    }

    /// A directory user's email address, if they gave one.
    static func email(of user: String, container: String, on transaction: Transaction) async throws -> String? {
        let rows = try await transaction.connection.query("""
            SELECT email FROM users WHERE container = \(container) AND user_record_name = \(user)
            """, logger: transaction.logger)
        for try await email in rows.decode(String?.self) { return email }
        return nil
    }

    /// The share as `user` may see it; nil when they may not (a stranger to a private share).
    static func resolved(_ row: ShareRow, user: String, email: String?, on transaction: Transaction) async throws -> Resolved? {
        let owner = row.database
        guard let stored = try await ShareTables.share(row.shareName, zone: row.zoneName, of: owner, on: transaction) else { return nil }
        let participant = ShareRules.participantIndex(in: stored.state, user: user, email: email).map { stored.state.participants[$0] }
        guard participant != nil || stored.state.publicPermission != .none else { return nil }
        let names = [row.shareName] + (stored.root.map { [$0] } ?? [])
        let records = try await RecordRow.live(names, zone: row.zoneName, of: owner, on: transaction)
        guard var share = records[ExactName(row.shareName)] else { return nil }
        share.shareState = stored.state
        return Resolved(
            shortGUID: row.shortGUID, zone: ZoneID(zoneName: row.zoneName, ownerRecordName: row.owner), share: share, rootRecordName: stored.root,
            root: stored.root.flatMap { records[ExactName($0)] }, participant: participant)
    }
}
