import Foundation
import Logging
import PostgresNIO
import StratusCore

/// What one write transaction did to shares: the share records it saved (their rows are written at
/// `close`, once every record of the request is known) and the roots it pointed at shares.
struct ShareWrites {
    /// Saved share records, in the order saved, each with its decided state (`Record.shareState`).
    var saved: [Record] = []
    /// Share record name → the record saved in this transaction whose `share` field points at it.
    var roots: [ExactName: String] = [:]
    /// Share record name → the root record its `forRecord` names (saved in this transaction or stored).
    var named: [ExactName: String] = [:]
    /// States decided outside `ShareRules` (records/accept), by share record name: a save of the
    /// share takes this state instead of deciding one from what a client sent.
    var decided: [ExactName: ShareState] = [:]

    /// Whether `writeShares` has anything to write or check.
    var hasWrites: Bool { !saved.isEmpty || !roots.isEmpty }
}

/// The share parts of the write path: a share record's save is checked against `ShareRules` and its
/// rows written in the same transaction as the record; a share goes with its root.
///
/// Fan-out: a share's save (participants added, removed, permission changed) and deletion
/// append `record.saved` / `record.deleted` events like every record (the saved record carries its
/// `shareState`); the share fan-out (`stratus-shares`, `SharesProjection`) consumes those events to
/// update each participant's shared-database change tracking (`SharedZoneTracking`). Nothing here
/// waits for it.
extension ZoneWriter {
    /// Checks and completes a saved share record: only in a custom zone of the private database;
    /// its state decided by `ShareRules` from what the caller sent and what the tables hold (or by
    /// records/accept); a short GUID made by the server.
    mutating func shareSaved(_ record: Record, before: Record?, proposal: ShareProposal?, in transaction: Transaction) async throws -> Record {
        let database = context.database
        try RecordStore.Failure.deciding { () throws(StratusError) in try ShareWriteRules.checkPlace(record.recordName, scope: database.scope, zone: context.zone) }
        let stored = before == nil ? nil : try await ShareTables.share(record.recordName, zone: context.zone.zoneName, of: database, on: transaction)
        let state: ShareState
        if let decided = sharing.decided[ExactName(record.recordName)] {
            state = decided
        } else {
            let caller = context.causation.userRecordName ?? "_server"
            let proposed = (proposal ?? ShareProposal()).state(owner: database.owner, current: stored?.state)
            do {
                state = try ShareRules.decide(current: stored?.state, proposed: proposed, caller: caller)
            } catch {
                throw RecordStore.Failure(error: ShareWriteRules.refused(record.recordName, error))
            }
        }
        if stored == nil {
            let others = try await ShareTables.shareNames(zone: context.zone.zoneName, of: database, on: transaction)
                + sharing.saved.map(\.recordName)
            let zoneName = context.zone.zoneName
            try RecordStore.Failure.deciding { () throws(StratusError) in try ShareWriteRules.checkKind(record.recordName, others: others, zoneName: zoneName) }
        }
        var shared = record
        shared.shareState = state
        if shared.shortGUID == nil { shared.shortGUID = Self.newShortGUID() }
        sharing.saved.removeAll { ExactName($0.recordName) == ExactName(shared.recordName) }
        sharing.saved.append(shared)
        return shared
    }

    /// Notes the root a saved record's `forRecord` names, as `ShareWriteRules` reads it: the share is
    /// attached to that record at `writeShares`, as if the record's share field pointed at it.
    mutating func noteNamedRoot(_ record: Record, _ forRecord: ShareRootName) throws {
        let zone = context.zone
        let root = try RecordStore.Failure.deciding { () throws(StratusError) -> String in
            try ShareWriteRules.forRecordRoot(record.recordName, recordType: record.recordType, forRecord: forRecord, zone: zone)
        }
        sharing.named[ExactName(record.recordName)] = root
    }

    /// Notes that `recordName` now points its `share` field at `share`: one root per share.
    mutating func noteRoot(_ recordName: String, of share: String) throws {
        let other = sharing.roots[ExactName(share)]
        try RecordStore.Failure.deciding { () throws(StratusError) in try ShareWriteRules.checkOneRoot(recordName, share: share, other: other) }
        sharing.roots[ExactName(share)] = recordName
    }

    /// Writes the rows of the shares this transaction saved: a hierarchy share needs its root, named
    /// by its `forRecord` (saved in the same request or stored), saved in the same request pointing
    /// at it, or already known; a record pointing at an existing share must be its root.
    mutating func writeShares(in transaction: Transaction) async throws {
        let database = context.database
        let zoneName = context.zone.zoneName
        let saved = Set(sharing.saved.map { ExactName($0.recordName) })
        for record in sharing.saved {
            guard let state = record.shareState, let shortGUID = record.shortGUID else { continue }
            var root: String?
            if !ShareRecord.isZoneWide(record.recordName) {
                let stored = try await ShareTables.share(record.recordName, zone: zoneName, of: database, on: transaction)
                let named = sharing.named[ExactName(record.recordName)]
                let pointedBy = sharing.roots[ExactName(record.recordName)]
                do throws(RecordStore.Failure) {
                    root = try RecordStore.Failure.deciding { () throws(StratusError) -> String in
                        try ShareWriteRules.root(share: record.recordName, named: named, pointedBy: pointedBy, stored: stored?.root)
                    }
                } catch {
                    throw RecordStore.ItemRefused(recordName: record.recordName, failure: error)
                }
                if let named { try await checkNamedRoot(named, of: record.recordName, in: transaction) }
            }
            try await ShareTables.write(
                share: record.recordName, root: root, shortGUID: shortGUID, state: state, zone: zoneName, of: database, on: transaction)
        }
        for (share, root) in sharing.roots.sorted(by: { $0.key.name < $1.key.name }) where !saved.contains(share) {
            guard let stored = try await ShareTables.share(share.name, zone: zoneName, of: database, on: transaction) else { continue }
            do throws(RecordStore.Failure) {
                try RecordStore.Failure.deciding { () throws(StratusError) in try ShareWriteRules.checkStoredRoot(root, share: share.name, storedRoot: stored.root) }
            } catch {
                throw RecordStore.ItemRefused(recordName: root, failure: error)
            }
        }
        sharing = ShareWrites(decided: sharing.decided)
    }

    /// Checks the root a share's `forRecord` names: it exists (saved in this transaction or stored,
    /// not expired) and no other share roots it, stored or saved in this transaction.
    private mutating func checkNamedRoot(_ root: String, of share: String, in transaction: Transaction) async throws {
        let target = try await load(root, in: transaction)
        let exists = target.map { !$0.isExpired(at: Int64(Date().timeIntervalSince1970 * 1000)) } ?? false
        let key = ExactName(root)
        let rootedBy = try await sharesRooted(at: [key], in: transaction).map { $0.share }
            + sharing.roots.filter { ExactName($0.value) == key }.map { $0.key.name }.sorted()
            + sharing.named.filter { ExactName($0.value) == key }.map { $0.key.name }.sorted()
        do throws(RecordStore.Failure) {
            try RecordStore.Failure.deciding { () throws(StratusError) in
                try ShareWriteRules.checkNamedRoot(share: share, root: root, exists: exists, rootedBy: rootedBy)
            }
        } catch {
            throw RecordStore.ItemRefused(recordName: share, failure: error)
        }
    }

    /// The shares rooted at any of `names`, with their roots (private custom zones only).
    func sharesRooted(at names: Set<ExactName>, in transaction: Transaction) async throws -> [(share: String, root: String)] {
        guard context.database.scope == .private, !context.zone.isDefaultZone, !names.isEmpty else { return [] }
        let rows = try await transaction.connection.query("""
            SELECT record_name, root_record_name FROM shares
            WHERE \(zone: context.zone.zoneName, of: context.database) AND root_record_name = ANY(\(names.map(\.name)))
            ORDER BY record_name
            """, logger: transaction.logger)
        var found: [(String, String)] = []
        for try await (share, root) in rows.decode((String, String).self) { found.append((share, root)) }
        return found
    }

    /// Removes the rows of deleted share records (their participants go with them).
    mutating func sharesDeleted(_ records: [Record], in transaction: Transaction) async throws {
        let shares = records.filter { ShareRecord.isShare($0.recordType) }.map(\.recordName)
        guard !shares.isEmpty else { return }
        let gone = Set(shares.map(ExactName.init))
        sharing.saved.removeAll { gone.contains(ExactName($0.recordName)) }
        try await transaction.connection.query("""
            DELETE FROM shares WHERE \(zone: context.zone.zoneName, of: context.database) AND record_name = ANY(\(shares))
            """, logger: transaction.logger)
    }
}

/// A share's row: its state, root and short GUID.
struct StoredShare: Sendable {
    var state: ShareState
    var root: String?
    var shortGUID: String
}

/// Reads and writes of the `shares` and `share_participants` tables.
enum ShareTables {
    /// One share of a zone, if it has a row.
    static func share(_ name: String, zone zoneName: String, of database: DatabaseID, on transaction: Transaction) async throws -> StoredShare? {
        try await shares([name], zone: zoneName, of: database, on: transaction.connection, logger: transaction.logger)[ExactName(name)]
    }

    /// Shares of a zone by record name; names without a row are absent.
    static func shares(
        _ names: [String], zone zoneName: String, of database: DatabaseID, on connection: PostgresConnection, logger: Logger
    ) async throws -> [ExactName: StoredShare] {
        guard !names.isEmpty else { return [:] }
        let rows = try await connection.query("""
            SELECT record_name, root_record_name, short_guid, public_permission FROM shares
            WHERE \(zone: zoneName, of: database) AND record_name = ANY(\(names))
            """, logger: logger)
        var found: [ExactName: StoredShare] = [:]
        for try await (name, root, shortGUID, permission) in rows.decode((String, String?, String, String).self) {
            found[ExactName(name)] = StoredShare(
                state: ShareState(owner: database.owner, publicPermission: SharePermission(rawValue: permission) ?? .none), root: root, shortGUID: shortGUID)
        }
        guard !found.isEmpty else { return found }
        let participants = try await connection.query("""
            SELECT share_name, lookup_key, email, user_record_name, permission, acceptance_status, type FROM share_participants
            WHERE \(zone: zoneName, of: database) AND share_name = ANY(\(found.keys.map(\.name)))
            ORDER BY share_name, position
            """, logger: logger)
        for try await (share, key, email, user, permission, status, type) in participants.decode((String, String, String?, String?, String, String, String).self) {
            let lookup: ParticipantLookup = key.hasPrefix("e:") ? .emailAddress(email ?? String(key.dropFirst(2))) : .userRecordName(String(key.dropFirst(2)))
            found[ExactName(share)]?.state.participants.append(ShareParticipant(
                lookup: lookup, permission: SharePermission(rawValue: permission) ?? .readOnly,
                acceptanceStatus: ShareAcceptanceStatus(rawValue: status) ?? .pending, type: ShareParticipantType(rawValue: type) ?? .user,
                userRecordName: user))
        }
        return found
    }

    /// The records, share records with their `shareState` from the tables.
    static func attachStates(
        _ records: [Record], zone zoneName: String, of database: DatabaseID, on connection: PostgresConnection, logger: Logger
    ) async throws -> [Record] {
        let names = records.filter { ShareRecord.isShare($0.recordType) }.map(\.recordName)
        guard !names.isEmpty else { return records }
        let shares = try await shares(names, zone: zoneName, of: database, on: connection, logger: logger)
        return records.map { record in
            var record = record
            if let share = shares[ExactName(record.recordName)] { record.shareState = share.state }
            return record
        }
    }

    /// The names of a zone's shares.
    static func shareNames(zone zoneName: String, of database: DatabaseID, on transaction: Transaction) async throws -> [String] {
        let rows = try await transaction.connection.query("""
            SELECT record_name FROM shares WHERE \(zone: zoneName, of: database) ORDER BY record_name LIMIT 1000
            """, logger: transaction.logger)
        var names: [String] = []
        for try await name in rows.decode(String.self) { names.append(name) }
        return names
    }

    /// Writes a share's row and its participants.
    static func write(
        share: String, root: String?, shortGUID: String, state: ShareState, zone zoneName: String, of database: DatabaseID, on transaction: Transaction
    ) async throws {
        let connection = transaction.connection
        try await connection.query("""
            INSERT INTO shares (container, environment, scope, owner, zone_name, record_name, root_record_name, short_guid, public_permission)
            VALUES (\(database.container), \(database.environment.rawValue), \(database.scope.rawValue), \(database.owner), \(zoneName), \(share),
                    \(root), \(shortGUID), \(state.publicPermission.rawValue))
            ON CONFLICT (container, environment, scope, owner, zone_name, record_name) DO UPDATE SET
                root_record_name = EXCLUDED.root_record_name, short_guid = EXCLUDED.short_guid, public_permission = EXCLUDED.public_permission,
                changed_xid = pg_current_xact_id()
            """, logger: transaction.logger)
        let participants = state.participants
        let keys = participants.map(\.lookup.key)
        // Arrays carry no NULLs here: '' stands for none.
        let emails = participants.map { if case .emailAddress(let email) = $0.lookup { email } else { "" } }
        let users = participants.map { $0.userRecordName ?? "" }
        // One statement: participants no longer listed go; the others are written only where they
        // changed (an acceptance rewrites one row of the share's hundred, not all of them).
        try await connection.query("""
            WITH dropped AS (
                DELETE FROM share_participants WHERE \(zone: zoneName, of: database) AND share_name = \(share) AND lookup_key <> ALL(\(keys)::text[]))
            INSERT INTO share_participants AS p (container, environment, scope, owner, zone_name, share_name, position, lookup_key, email,
                user_record_name, permission, acceptance_status, type)
            SELECT \(database.container), \(database.environment.rawValue), \(database.scope.rawValue), \(database.owner), \(zoneName), \(share),
                   l.position - 1, l.lookup_key, NULLIF(l.email, ''), NULLIF(l.user_record_name, ''), l.permission, l.acceptance_status, l.type
            FROM unnest(\(keys)::text[], \(emails)::text[], \(users)::text[], \(participants.map(\.permission.rawValue))::text[],
                        \(participants.map(\.acceptanceStatus.rawValue))::text[], \(participants.map(\.type.rawValue))::text[])
                 WITH ORDINALITY AS l(lookup_key, email, user_record_name, permission, acceptance_status, type, position)
            ON CONFLICT (container, environment, scope, owner, zone_name, share_name, lookup_key) DO UPDATE SET
                position = EXCLUDED.position, email = EXCLUDED.email, user_record_name = EXCLUDED.user_record_name,
                permission = EXCLUDED.permission, acceptance_status = EXCLUDED.acceptance_status, type = EXCLUDED.type
            WHERE (p.position, p.email, p.user_record_name, p.permission, p.acceptance_status, p.type)
                IS DISTINCT FROM (EXCLUDED.position, EXCLUDED.email, EXCLUDED.user_record_name, EXCLUDED.permission, EXCLUDED.acceptance_status, EXCLUDED.type)
            """, logger: transaction.logger)
    }
}
