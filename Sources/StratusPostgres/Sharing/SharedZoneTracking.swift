import Foundation
import Logging
import PostgresNIO
import StratusCore

/// The shared database's change tracking (`shared_zone_tracking`, migration 0023), kept by
/// stratus-shares from the zone events: for every participant who accepted a share, the owner's
/// zone sequence of the last change they are told of, and whether they still hold the share.
///
/// Every statement is idempotent (`GREATEST`, upserts): an event applied again, or the whole log
/// replayed over an emptied table, leaves the same rows. Each stamps `changed_xid` (migration 0032)
/// on the rows whose news for the participant it changes (a change told of, the share gained or
/// lost; not an inactive row's sequence), so the participant's database token finds them. It never decides access: the API reads
/// that from the shares tables in the request's own transaction.
///
/// Each statement returns the participants its rows tell of the change (a name once per row, so
/// possibly repeated): who is notified through their shared database's `database` subscriptions.
public enum SharedZoneTracking {
    /// Applies a save of a share record (its decided state): each participant who accepted (the
    /// owner aside) holds the share, told of the change at `sequence`; every other row of the share
    /// (removed, left, or a place taken back) no longer holds it, and is told of the loss.
    public static func applyShare(
        _ state: ShareState, shareName: String, zone zoneName: String, of database: DatabaseID, sequence: Int64, in transaction: Transaction
    ) async throws -> [String] {
        let holders = state.holders
        return try await told(transaction, """
            WITH dropped AS (
                UPDATE shared_zone_tracking SET active = false, change_sequence = GREATEST(change_sequence, \(sequence)),
                changed_xid = CASE WHEN active THEN pg_current_xact_id() ELSE changed_xid END
                WHERE \(zone: zoneName, of: database) AND share_name = \(shareName) AND NOT (user_record_name = ANY(\(holders)))
                  AND (active OR change_sequence < \(sequence))
                RETURNING user_record_name),
            held AS (
                INSERT INTO shared_zone_tracking (container, environment, user_record_name, scope, owner, zone_name, share_name, active, change_sequence)
                SELECT \(database.container), \(database.environment.rawValue), holder, \(database.scope.rawValue), \(database.owner), \(zoneName),
                       \(shareName), true, \(sequence)
                FROM unnest(\(holders)::text[]) AS holder
                ON CONFLICT (container, environment, user_record_name, scope, owner, zone_name, share_name)
                DO UPDATE SET active = true, change_sequence = GREATEST(shared_zone_tracking.change_sequence, EXCLUDED.change_sequence),
                    changed_xid = CASE WHEN NOT shared_zone_tracking.active OR shared_zone_tracking.change_sequence < EXCLUDED.change_sequence
                                       THEN pg_current_xact_id() ELSE shared_zone_tracking.changed_xid END
                RETURNING user_record_name)
            SELECT user_record_name FROM dropped UNION ALL SELECT user_record_name FROM held
            """)
    }

    /// Applies a deletion of a share record: nobody holds it any more, each told at `sequence`.
    public static func applyShareDeleted(shareName: String, zone zoneName: String, of database: DatabaseID, sequence: Int64, in transaction: Transaction) async throws -> [String] {
        // Crosses owners: the share fan-out tells every participant of one owner's zone; sharded,
        // stratus-shares applies the event on each participant's node (docs/scale-out.md).
        try await told(transaction, """
            UPDATE shared_zone_tracking SET active = false, change_sequence = GREATEST(change_sequence, \(sequence)),
                changed_xid = CASE WHEN active THEN pg_current_xact_id() ELSE changed_xid END
            WHERE \(zone: zoneName, of: database) AND share_name = \(shareName) AND (active OR change_sequence < \(sequence))
            RETURNING user_record_name
            """)
    }

    /// Applies a change inside the zone (a record saved or deleted): every participant holding a
    /// share of the zone is told at `sequence` (the last of a run of the zone's changes) — one
    /// statement however many participants, through the partial index.
    public static func applyZoneChange(zone zoneName: String, of database: DatabaseID, sequence: Int64, in transaction: Transaction) async throws -> [String] {
        // Every write of a shared zone's owner comes here: prepared (the partial index's predicate names no value).
        var told: [String] = []
        // Crosses owners: the share fan-out tells every participant of one owner's zone; sharded,
        // stratus-shares applies the event on each participant's node (docs/scale-out.md).
        for try await name in try await transaction.prepared("""
            UPDATE shared_zone_tracking SET change_sequence = \(sequence), changed_xid = pg_current_xact_id()
            WHERE \(zone: zoneName, of: database) AND active AND change_sequence < \(sequence)
            RETURNING user_record_name
            """).decode(String.self) {
            told.append(name)
        }
        return told
    }

    /// Applies a deletion of the zone: its shares went with it.
    public static func applyZoneDeleted(zone zoneName: String, of database: DatabaseID, sequence: Int64, in transaction: Transaction) async throws -> [String] {
        // Crosses owners: the share fan-out tells every participant of one owner's zone; sharded,
        // stratus-shares applies the event on each participant's node (docs/scale-out.md).
        try await told(transaction, """
            UPDATE shared_zone_tracking SET active = false, change_sequence = GREATEST(change_sequence, \(sequence)),
                changed_xid = CASE WHEN active THEN pg_current_xact_id() ELSE changed_xid END
            WHERE \(zone: zoneName, of: database) AND (active OR change_sequence < \(sequence))
            RETURNING user_record_name
            """)
    }

    /// Runs a tracking statement; the participants its rows name.
    private static func told(_ transaction: Transaction, _ statement: PostgresQuery) async throws -> [String] {
        try await collect(transaction.connection.query(statement, logger: transaction.logger), as: String.self)
    }

    /// Empties the tracking (a replay rebuilds it from the event log).
    public static func reset(in transaction: Transaction) async throws {
        // Crosses owners: a replay empties the worker's whole projection (each node's, when sharded).
        try await transaction.connection.execute("DELETE FROM shared_zone_tracking", logger: transaction.logger)
    }
}

extension ShareStore {
    /// A zone of a user's shared database as changes/database answers it.
    public struct TrackedZone: Sendable {
        /// The owner's zone.
        public var zone: Zone
        /// The zone sequence of the last change the fan-out told the user of (0: none yet).
        public var changeSequence: Int64
    }

    /// The zones shared with `user` now (decided from the shares tables) with their positions in
    /// the user's change tracking, read in one snapshot; with that snapshot, which a sync from a
    /// token of the earlier form hands out once it has answered every zone that differs.
    ///
    /// The same zones as `sharedZones` (accepted shares that are not the user's own, of live
    /// zones), each with the furthest position of the user's tracking.
    public func trackedZones(
        user: String, container: String, environment: StratusCore.Environment, logger: Logger
    ) async throws -> (zones: [TrackedZone], reading: ChangeReading) {
        try await store.snapshot(logger: logger) { transaction in
            let reading = try await ChangeReading.read(on: transaction)
            let rows = try await transaction.connection.query("""
                SELECT shared.owner, shared.zone_name, z.incarnation, z.change_counter, z.default_time_to_live,
                       coalesce((SELECT max(t.change_sequence) FROM shared_zone_tracking AS t
                                 WHERE t.container = \(container) AND t.environment = \(environment.rawValue) AND t.user_record_name = \(user)
                                   AND t.scope = 'private' AND t.owner = shared.owner AND t.zone_name = shared.zone_name), 0)
                FROM (
                    SELECT DISTINCT p.owner, p.zone_name
                    FROM share_participants AS p
                    JOIN shares AS s ON s.container = p.container AND s.environment = p.environment AND s.scope = p.scope AND s.owner = p.owner
                         AND s.zone_name = p.zone_name AND s.record_name = p.share_name
                    WHERE p.container = \(container) AND p.environment = \(environment.rawValue) AND p.user_record_name = \(user)
                      AND p.acceptance_status = 'ACCEPTED' AND p.type <> 'OWNER'
                ) AS shared
                JOIN zones AS z ON z.container = \(container) AND z.environment = \(environment.rawValue) AND z.scope = 'private'
                     AND z.owner = shared.owner AND z.zone_name = shared.zone_name AND NOT z.deleted
                ORDER BY shared.owner, shared.zone_name
                LIMIT 10000
                """, logger: transaction.logger)
            var zones: [TrackedZone] = []
            for try await (owner, zoneName, incarnation, counter, ttl, sequence) in rows.decode((String, String, UUID, Int64, Int64?, Int64).self) {
                zones.append(TrackedZone(zone: Self.ownersZone(owner, zoneName, container, environment, incarnation, counter, ttl), changeSequence: sequence))
            }
            return (zones, reading)
        }
    }

    private static func ownersZone(
        _ owner: String, _ zoneName: String, _ container: String, _ environment: StratusCore.Environment, _ incarnation: UUID, _ counter: Int64, _ ttl: Int64?
    ) -> Zone {
        let database = DatabaseID(container: container, environment: environment, scope: .private, owner: owner)
        return Zone(database: database, zoneID: ZoneID(zoneName: zoneName, ownerRecordName: owner), incarnation: incarnation,
                    changeCounter: counter, defaultTimeToLive: ttl)
    }

    /// A zone of a page of a user's shared database changes: the owner's zone, nil when the user no
    /// longer reaches it (removed, left, share or zone deleted).
    public struct SharedZoneChange: Sendable {
        public var zoneID: ZoneID
        public var zone: Zone?
    }

    /// A page of `user`'s shared database changes since `token` (nil: a first sync), in
    /// (owner, zone name) order, at most `limit`; and the token after them. One snapshot.
    ///
    /// The candidates are the zones of the user's participations that were accepted (or since
    /// removed: a participant removed or who left keeps a row `REMOVED`) and those of their
    /// tracking rows (`stratus-shares`). A zone the user reaches now (an accepted participation of a
    /// share of a live zone, as `trackedZones`) is answered when one of their tracking rows, or the
    /// row of a share they take part in, changed after the token (a change told of; a share saved:
    /// accepted, participants or permissions changed; a share made after the zone was re-created).
    /// One they no longer reach is answered deleted when the same changed, or, until the fan-out has
    /// told them of the loss, when the zone's row did (the owner's write that deleted the share or the
    /// zone, whose rows went with it). Access is read in the same snapshot: a removal shows at once.
    public func sharedZoneChanges(
        user: String, in database: DatabaseID, since token: DatabaseChangeToken?, limit: Int, logger: Logger
    ) async throws -> (zones: [SharedZoneChange], moreComing: Bool, token: DatabaseChangeToken) {
        let (container, environment) = (database.container, database.environment)
        let asked = DatabaseChangeWindow.asked(token)
        let (xmin, xmax, inProgress) = (String(asked.since.xmin), String(asked.since.xmax), asked.since.inProgress.map(String.init))
        // One statement, one round trip: the page and the snapshot it was read in, which names the
        // token after it.
        let statements = store.statements
        let (reading, entries) = try await store.withConnection { connection in
            // The user's participations and tracking rows are one list, grouped once by zone (no
            // self-join whose row estimate could make it quadratic); a zone is looked up by its
            // key (LIMIT 1 keeps the lookup a keyed one) only when something about it changed or
            // the fan-out's tracking of it is active: otherwise nothing of it is answered.
            let rows = try await connection.query("""
                WITH candidates AS (
                    SELECT owner, zone_name, bool_or(accepted) AS accepted, bool_or(changed) AS changed, bool_or(active) AS active
                    FROM (
                        SELECT p.owner, p.zone_name, p.acceptance_status = 'ACCEPTED' AS accepted,
                               changed_after(s.changed_xid, \(xmin)::xid8, \(xmax)::xid8, \(inProgress)::xid8[]) AS changed, false AS active
                        FROM share_participants AS p
                        JOIN shares AS s ON s.container = p.container AND s.environment = p.environment AND s.scope = p.scope
                             AND s.owner = p.owner AND s.zone_name = p.zone_name AND s.record_name = p.share_name
                        WHERE p.container = \(container) AND p.environment = \(environment.rawValue) AND p.user_record_name = \(user)
                          AND p.acceptance_status IN ('ACCEPTED', 'REMOVED') AND p.type <> 'OWNER' AND p.scope = 'private'
                        UNION ALL
                        SELECT owner, zone_name, false, changed_after(changed_xid, \(xmin)::xid8, \(xmax)::xid8, \(inProgress)::xid8[]), active
                        FROM shared_zone_tracking
                        WHERE container = \(container) AND environment = \(environment.rawValue) AND user_record_name = \(user) AND scope = 'private'
                    ) AS taking_part_or_tracked
                    WHERE \(asked.after?.first)::text IS NULL OR (owner, zone_name) > (\(asked.after?.first), \(asked.after?.last))
                    GROUP BY owner, zone_name
                    HAVING bool_or(changed) OR bool_or(active)),
                page AS (
                    SELECT c.owner, c.zone_name, z.incarnation, z.change_counter, z.default_time_to_live,
                           coalesce(c.accepted AND NOT z.deleted, false) AS reaches
                    FROM candidates AS c
                    LEFT JOIN LATERAL (
                        SELECT incarnation, change_counter, default_time_to_live, deleted, changed_xid FROM zones
                        WHERE container = \(container) AND environment = \(environment.rawValue) AND scope = 'private'
                          AND owner = c.owner AND zone_name = c.zone_name
                        LIMIT 1
                    ) AS z ON true
                    WHERE CASE WHEN coalesce(c.accepted AND NOT z.deleted, false) THEN c.changed
                               ELSE NOT \(asked.leavesOutDeleted) AND (c.changed OR c.active
                                   AND coalesce(changed_after(z.changed_xid, \(xmin)::xid8, \(xmax)::xid8, \(inProgress)::xid8[]), false)) END
                    ORDER BY c.owner, c.zone_name
                    LIMIT \(Int64(limit) + 1))
                SELECT reading.snapshot_text, reading.system_identifier,
                       page.owner, page.zone_name, page.incarnation, page.change_counter, page.default_time_to_live, page.reaches
                FROM (SELECT \(unescaped: ChangeReading.columns)) AS reading (snapshot_text, system_identifier)
                LEFT JOIN page ON true
                ORDER BY page.owner, page.zone_name
                """, preparedIn: statements, logger: logger)
            var reading: ChangeReading?
            var entries: [SharedZoneChange] = []
            for try await (snapshot, system, owner, zoneName, incarnation, counter, ttl, reaches)
                in rows.decode((String, String, String?, String?, UUID?, Int64?, Int64?, Bool?).self) {
                if reading == nil { reading = try ChangeReading.parse(snapshot: snapshot, system: system) }
                guard let owner, let zoneName, let reaches else { continue }
                let zone = reaches ? incarnation.map { Self.ownersZone(owner, zoneName, container, environment, $0, counter ?? 0, ttl) } : nil
                entries.append(SharedZoneChange(zoneID: ZoneID(zoneName: zoneName, ownerRecordName: owner), zone: zone))
            }
            guard let reading else { throw ChangeReading.unreadable }
            return (reading, entries)
        }
        let window = try reading.window(token, database: database)
        let page = Array(entries.prefix(limit))
        let moreComing = entries.count > limit
        let last = page.last.map { [$0.zoneID.ownerRecordName, $0.zoneID.zoneName] }
        return (page, moreComing, window.token(last: last, moreComing: moreComing))
    }


    /// Whether `user` held a share of the owner's zone once (the fan-out recorded it) but holds
    /// none now: their old zone token is expired rather than naming a zone that does not exist.
    public func lostAccess(user: String, owner: String, zoneName: String, container: String, environment: StratusCore.Environment, logger: Logger) async throws -> Bool {
        try await store.snapshot(logger: logger) { transaction in
            guard try await Self.sharedZones(user: user, container: container, environment: environment, only: (owner, zoneName), on: transaction).isEmpty
            else { return false }
            let rows = try await transaction.connection.query("""
                SELECT 1 FROM shared_zone_tracking
                WHERE container = \(container) AND environment = \(environment.rawValue) AND user_record_name = \(user)
                  AND scope = 'private' AND owner = \(owner) AND zone_name = \(zoneName)
                LIMIT 1
                """, logger: transaction.logger)
            for try await _ in rows { return true }
            return false
        }
    }
}
