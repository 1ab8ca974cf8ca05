import Foundation
import Logging
import PostgresNIO
import StratusCore

/// An owner's zone as the shared database of one user sees it.
public struct SharedZone: Sendable {
    /// The owner's zone (its `zoneID` names the owner).
    public var zone: Zone
    /// The shares the user accepted in the zone, and what each gives (Core decides writes from it).
    public var access: SharedZoneAccess

    /// Creates a shared zone.
    public init(zone: Zone, access: SharedZoneAccess = SharedZoneAccess()) {
        self.zone = zone
        self.access = access
    }

    /// The permission of a zone-wide share the user accepted; nil when only records are shared.
    public var zoneWide: SharePermission? { access.zoneWide }
    /// The roots of the record shares the user accepted in the zone, with the permission each gives.
    public var roots: [String: SharePermission] { access.roots }
    /// The share records the user reaches (each visible with its hierarchy).
    public var shares: [String] { access.shares }

    /// The owner's private database, where the zone lives.
    public var database: DatabaseID { zone.database }
}

/// The shared database: which zones a user reaches, and which of their records.
///
/// Access is decided from the shares tables inside the reading transaction, so an owner's save
/// that removes a participant ends their access in the next request. A zone the user does not reach
/// is ZONE_NOT_FOUND and a record outside their hierarchies NOT_FOUND, as for things that do not exist.
extension ShareStore {
    /// How far a record's `parent` chain is followed looking for a share's root: a record deeper than
    /// this below its root is outside the share.
    public static let maxHierarchyDepth = 64

    /// The zones shared with `user` in a container's environment (accepted shares of other users).
    public func sharedZones(user: String, container: String, environment: StratusCore.Environment, logger: Logger) async throws -> [SharedZone] {
        try await store.snapshot(logger: logger) { transaction in
            try await Self.sharedZones(user: user, container: container, environment: environment, on: transaction)
        }
    }

    /// The zones shared with `user`, or only the named owner's zone.
    static func sharedZones(
        user: String, container: String, environment: StratusCore.Environment, only: (owner: String, zoneName: String)? = nil, on transaction: Transaction
    ) async throws -> [SharedZone] {
        let rows = try await transaction.connection.query("""
            SELECT s.owner, s.zone_name, s.record_name, s.root_record_name, p.permission
            FROM share_participants AS p
            JOIN shares AS s ON s.container = p.container AND s.environment = p.environment AND s.scope = p.scope AND s.owner = p.owner
                 AND s.zone_name = p.zone_name AND s.record_name = p.share_name
            WHERE p.container = \(container) AND p.environment = \(environment.rawValue) AND p.user_record_name = \(user)
              AND p.acceptance_status = 'ACCEPTED' AND p.type <> 'OWNER'
              AND (\(only?.owner)::text IS NULL OR (p.owner = \(only?.owner) AND p.zone_name = \(only?.zoneName)))
            ORDER BY s.owner, s.zone_name, s.record_name
            LIMIT 10000
            """, logger: transaction.logger)
        var zones: [SharedZone] = []
        for try await (owner, zoneName, share, root, permissionText) in rows.decode((String, String, String, String?, String).self) {
            let permission = SharePermission(rawValue: permissionText) ?? .readOnly
            if zones.last.map({ $0.zone.zoneID.ownerRecordName != owner || $0.zone.zoneID.zoneName != zoneName }) ?? true {
                let database = DatabaseID(container: container, environment: environment, scope: .private, owner: owner)
                guard let row = try await ZoneStore.row(database: database, zoneName: zoneName, on: transaction.connection, logger: transaction.logger),
                      !row.deleted else { continue }
                zones.append(SharedZone(zone: row.zone))
            }
            guard zones.last?.zone.zoneID.zoneName == zoneName, zones.last?.zone.zoneID.ownerRecordName == owner else { continue }
            zones[zones.count - 1].access.shares.append(share)
            if let root {
                zones[zones.count - 1].access.roots[root] = permission
            } else {
                zones[zones.count - 1].access.zoneWide = permission
            }
        }
        return zones
    }

    /// The owner's zone as `user` reaches it, or ZONE_NOT_FOUND.
    static func sharedZone(
        _ zoneName: String, owner: String, user: String, container: String, environment: StratusCore.Environment, on transaction: Transaction
    ) async throws -> SharedZone {
        guard let zone = try await sharedZones(user: user, container: container, environment: environment, only: (owner, zoneName), on: transaction).first
        else { throw StratusError(.zoneNotFound, "No zone '\(ClientText.excerpt(zoneName))' of '\(ClientText.excerpt(owner))' is shared with the caller") }
        return zone
    }

    /// Which of `names` (records of the shared zone) the user reaches: every record of a zone-wide
    /// share; otherwise the share records and the records whose `parent` chain reaches a root.
    static func reachable(_ names: [String], in shared: SharedZone, on transaction: Transaction) async throws -> Set<ExactName> {
        if shared.zoneWide != nil { return Set(names.map(ExactName.init)) }
        let reached = Set(names.map(ExactName.init)).intersection(shared.shares.map(ExactName.init))
        return reached.union(try await rootsReached(from: names, in: shared, on: transaction).keys)
    }

    /// The roots of `shared`'s record shares each of `names` reaches through its `parent` chain
    /// (a root reaches itself); names that reach none are absent.
    static func rootsReached(from names: [String], in shared: SharedZone, on transaction: Transaction) async throws -> [ExactName: [String]] {
        try await rootsReached(from: names, roots: shared.roots, zone: shared.zone.zoneID.zoneName, of: shared.database, on: transaction)
    }

    /// The same for the record shares `roots` of the zone `zoneName` of `database`.
    static func rootsReached(
        from names: [String], roots shared: [String: SharePermission], zone zoneName: String, of database: DatabaseID, on transaction: Transaction
    ) async throws -> [ExactName: [String]] {
        let roots = Array(shared.keys)
        guard !roots.isEmpty, !names.isEmpty else { return [:] }
        // Each step follows one parent link through the records' primary key; the walk stops at a
        // root, at a record without a parent, or at the depth limit.
        let rows = try await transaction.connection.query("""
            WITH RECURSIVE chain (start, name, depth) AS (
                SELECT record_name, record_name, 0 FROM records WHERE \(zone: zoneName, of: database) AND record_name = ANY(\(names))
              UNION ALL
                SELECT chain.start, r.parent, chain.depth + 1
                FROM chain JOIN (SELECT record_name, parent FROM records WHERE \(zone: zoneName, of: database)) AS r ON r.record_name = chain.name
                WHERE r.parent IS NOT NULL AND NOT (chain.name = ANY(\(roots))) AND chain.depth < \(maxHierarchyDepth)
            )
            SELECT DISTINCT start, name FROM chain WHERE name = ANY(\(roots))
            """, logger: transaction.logger)
        var reached: [ExactName: [String]] = [:]
        for try await (start, root) in rows.decode((String, String).self) { reached[ExactName(start), default: []].append(root) }
        return reached
    }

    /// Records of an owner's zone shared with `user`, by exact name: those outside the user's
    /// hierarchies are absent (NOT_FOUND to the caller); a zone not shared with them is ZONE_NOT_FOUND.
    public func lookup(
        _ names: [String], zoneName: String, owner: String, user: String, container: String, environment: StratusCore.Environment, logger: Logger
    ) async throws -> [ExactName: Record] {
        try await store.snapshot(logger: logger) { transaction in
            let shared = try await Self.sharedZone(zoneName, owner: owner, user: user, container: container, environment: environment, on: transaction)
            let records = try await RecordRow.live(names, zone: zoneName, of: shared.database, on: transaction)
            let reached = try await Self.reachable(records.values.map(\.recordName), in: shared, on: transaction)
            return records.filter { reached.contains($0.key) }
        }
    }
}

/// Writes through the shared database: the participant's access is read in the write transaction
/// (under the zone's lock), so a removal the owner commits first is seen.
extension ZoneWriter {
    /// Checks one operation of a participant (`context.sharedWith`) as `SharedZoneAccess` decides:
    /// from the operation alone, then, for a record share, from the roots that the record (if it
    /// exists) and the parent it is given reach, read from the zone's tables.
    mutating func checkSharedWrite(_ command: RecordStore.Command, current: Record?, access: SharedZoneAccess, in transaction: Transaction) async throws {
        let input = command.input
        let check = try RecordStore.Failure.deciding { () throws(StratusError) in
            try access.check(recordName: input.recordName, recordType: input.recordType, parent: input.parent, current: current)
        }
        guard case .anchors(let anchors) = check else { return }
        // The records and parents to check must be in the tables.
        try await flushPending(in: transaction)
        let reached = try await ShareStore.rootsReached(
            from: anchors, roots: access.roots, zone: context.zone.zoneName, of: context.database, on: transaction)
        try RecordStore.Failure.deciding { () throws(StratusError) in try access.checkAnchors(anchors, recordName: input.recordName, reached: reached) }
    }
}

extension ZoneWriter {
    /// A participant's delete of a share record, in the shared database: they leave the share (the
    /// owner's record stays, saved with the participant REMOVED, as `ShareRules` allows); to them
    /// the share is deleted.
    mutating func leave(_ share: Record, in transaction: Transaction) async throws -> RecordStore.Outcome {
        let user = context.causation.userRecordName ?? "_server"
        guard let stored = try await ShareTables.share(share.recordName, zone: context.zone.zoneName, of: context.database, on: transaction) else {
            throw RecordStore.Failure(error: StratusError(.notFound, "Record '\(ClientText.excerpt(share.recordName))' does not exist"))
        }
        var proposed = stored.state
        for index in proposed.participants.indices where proposed.participants[index].isUser(user) {
            proposed.participants[index].acceptanceStatus = .removed
        }
        do {
            sharing.decided[ExactName(share.recordName)] = try ShareRules.decide(current: stored.state, proposed: proposed, caller: user)
        } catch {
            throw RecordStore.Failure(error: ShareWriteRules.refused(share.recordName, error))
        }
        _ = try await apply(RecordStore.Command(type: .forceUpdate, input: RecordInput(recordName: share.recordName)), in: transaction)
        return .deleted(recordName: share.recordName)
    }
}
