import Foundation
import Logging
import PostgresNIO
import StratusCore

/// Carries out a user's deletion (`UserDeletion`, whose rules decide each step) and keeps the job's
/// row (migration 0037): the step it reached and its counts. Every step is idempotent and records
/// its progress as it goes, so running the job again after a crash finishes it.
public struct UserDeletionStore: Sendable {
    let store: PostgresStore

    /// Creates the store.
    public init(store: PostgresStore) { self.store = store }

    /// Deletes an asset's bytes from the blob store (the runtime's, which knows the store).
    public typealias BlobDeleter = @Sendable (UUID) async throws -> Void

    /// Starts a deletion (or finds the one already started): refused for a user the container's
    /// directory does not know and no job names.
    public func start(container: String, user: String, requestedBy: String, logger: Logger) async throws -> UserDeletion.Progress {
        try await store.withConnection { connection in
            if let progress = try await Self.progress(container: container, user: user, on: connection, logger: logger) { return progress }
            var known = false
            for try await _ in try await connection.query(
                "SELECT 1 FROM users WHERE container = \(container) AND user_record_name = \(user)", logger: logger) { known = true }
            guard known else { throw StratusError(.notFound, "container '\(ClientText.excerpt(container))' has no user '\(ClientText.excerpt(user))'") }
            try await connection.query("""
                INSERT INTO user_deletions (container, user_record_name, step, requested_by) VALUES (\(container), \(user), \(UserDeletion.Step.signOut.rawValue), \(requestedBy))
                ON CONFLICT DO NOTHING
                """, logger: logger)
            return try await Self.progress(container: container, user: user, on: connection, logger: logger) ?? UserDeletion.Progress(step: .signOut)
        }
    }

    /// How far a user's deletion is; nil when none was started.
    public func progress(container: String, user: String, logger: Logger) async throws -> UserDeletion.Progress? {
        try await store.withConnection { connection in try await Self.progress(container: container, user: user, on: connection, logger: logger) }
    }

    static func progress(container: String, user: String, on connection: PostgresConnection, logger: Logger) async throws -> UserDeletion.Progress? {
        let rows = try await connection.query("""
            SELECT step, zones_deleted, records_deleted, shares_left, assets_deleted, events_redacted, records_handed_over FROM user_deletions
            WHERE container = \(container) AND user_record_name = \(user)
            """, logger: logger)
        for try await (step, zones, records, shares, assets, events, handedOver) in rows.decode((String, Int32, Int64, Int32, Int32, Int64, Int64).self) {
            return UserDeletion.Progress(
                step: UserDeletion.Step(rawValue: step) ?? .signOut, zonesDeleted: Int(zones), recordsDeleted: records, sharesLeft: Int(shares),
                assetsDeleted: Int(assets), eventsRedacted: events, recordsHandedOver: handedOver)
        }
        return nil
    }

    /// Runs the job from the step it reached to its end, reporting each change of progress;
    /// `pauseAfterZones` (tests only) makes it wait, forever, once that many zones are deleted. One
    /// process at a time runs a job: it holds an advisory lock on a connection of its own for as
    /// long as it runs (released when the process dies), and another is refused (TRY_AGAIN_LATER).
    public func run(
        container: String, user: String, pauseAfterZones: Int? = nil, deleteBlob: @escaping BlobDeleter, logger: Logger,
        progress report: @escaping @Sendable (UserDeletion.Progress) -> Void = { _ in }
    ) async throws -> UserDeletion.Progress {
        let lock = UserDeletion.requestID(container: container, user: user)
        return try await store.withDedicatedConnection { connection in
            var locked = false
            for try await value in try await connection.query("SELECT pg_try_advisory_lock(hashtextextended(\(lock), 0))", logger: logger).decode(Bool.self) {
                locked = value
            }
            guard locked else {
                throw StratusError(.tryAgainLater, "another process is running the deletion of '\(ClientText.excerpt(user))'")
            }
            return try await runSteps(container: container, user: user, pauseAfterZones: pauseAfterZones, deleteBlob: deleteBlob, logger: logger, report: report)
        }
    }

    func runSteps(
        container: String, user: String, pauseAfterZones: Int?, deleteBlob: BlobDeleter, logger: Logger, report: @Sendable (UserDeletion.Progress) -> Void
    ) async throws -> UserDeletion.Progress {
        guard var progress = try await progress(container: container, user: user, logger: logger) else {
            throw StratusError(.notFound, "no deletion of user '\(ClientText.excerpt(user))' was started")
        }
        let job = Job(store: store, container: container, user: user, logger: logger)
        while !progress.finished {
            report(progress)
            switch progress.step {
            case .signOut: try await job.signOut()
            case .zones: try await job.deleteZones(pauseAfterZones: pauseAfterZones, report: report)
            case .defaultZones: try await job.deleteDefaultZoneRecords()
            case .publicRecords:
                switch try await job.publicRecordsFate() {
                case .delete: try await job.deletePublicRecords()
                case .handOver(let heir): try await job.handOverPublicRecords(to: heir)
                }
            case .participations: try await job.leaveShares()
            case .subscriptions: try await job.deleteSubscriptions()
            case .assets: try await job.deleteAssets(deleteBlob)
            case .events: try await job.redactEvents()
            case .directory: try await job.deleteDirectoryEntries()
            case .done: break
            }
            try await job.advance(from: progress.step)
            progress = try await self.progress(container: container, user: user, logger: logger) ?? progress
        }
        report(progress)
        return progress
    }

    /// Runs the sign-out step now, if the job has not passed it: a user's own request answers
    /// once they are signed out everywhere.
    public func signOut(container: String, user: String, logger: Logger) async throws -> UserDeletion.Progress {
        let job = Job(store: store, container: container, user: user, logger: logger)
        if try await progress(container: container, user: user, logger: logger)?.step == .signOut {
            try await job.signOut()
            try await job.advance(from: .signOut)
        }
        return try await progress(container: container, user: user, logger: logger) ?? UserDeletion.Progress(step: .signOut)
    }

    /// Deletions started and not finished (the oldest first, at most `limit`): what a runner takes up.
    public func unfinished(limit: Int, logger: Logger) async throws -> [(container: String, user: String)] {
        try await store.withConnection { connection in
            let rows = try await connection.query("""
                SELECT container, user_record_name FROM user_deletions WHERE step <> \(UserDeletion.Step.done.rawValue)
                ORDER BY requested_at LIMIT \(Int64(limit))
                """, logger: logger)
            var jobs: [(String, String)] = []
            for try await row in rows.decode((String, String).self) { jobs.append(row) }
            return jobs
        }
    }
}

/// One deletion's steps.
struct Job: Sendable {
    let store: PostgresStore
    let container: String
    let user: String
    let logger: Logger

    var causation: Causation { Causation(requestID: UserDeletion.requestID(container: container, user: user), userRecordName: user) }

    func execute(_ query: PostgresQuery) async throws {
        try await store.withConnection { connection in _ = try await connection.query(query, logger: logger) }
    }

    /// Adds to one of the job's counts.
    func count(_ column: String, _ amount: Int) async throws {
        guard amount > 0 else { return }
        try await execute(PostgresQuery(unsafeSQL: """
            UPDATE user_deletions SET \(column) = \(column) + $3, updated_at = now() WHERE container = $1 AND user_record_name = $2
            """, binds: binds(Int64(amount))))
    }

    func binds(_ extra: Int64? = nil) -> PostgresBindings {
        var binds = PostgresBindings()
        binds.append(container)
        binds.append(user)
        if let extra { binds.append(extra) }
        return binds
    }

    func advance(from step: UserDeletion.Step) async throws {
        try await execute("""
            UPDATE user_deletions SET step = \(step.next.rawValue), updated_at = now(),
                   finished_at = CASE WHEN \(step.next == .done) THEN now() ELSE finished_at END
            WHERE container = \(container) AND user_record_name = \(user) AND step = \(step.rawValue)
            """)
    }

    /// Runs statements of `sql`, each with the container ($1) and the user ($2), in one transaction.
    func statements(_ sql: [String]) async throws {
        try await store.readCommitted(logger: logger) { transaction in
            for statement in sql {
                _ = try await transaction.connection.query(PostgresQuery(unsafeSQL: statement, binds: binds()), logger: logger)
            }
        }
    }

    func signOut() async throws {
        try await statements([
            "UPDATE users SET credential_epoch = credential_epoch + 1, updated_at = now() WHERE container = $1 AND user_record_name = $2",
            "DELETE FROM sessions WHERE container = $1 AND user_record_name = $2",
            "DELETE FROM linked_accounts WHERE user_record_name = $2 AND EXISTS (SELECT 1 FROM users WHERE container = $1 AND user_record_name = $2)",
            "DELETE FROM device_tokens WHERE container = $1 AND subscriber = $2",
            "DELETE FROM courier_tokens WHERE container = $1 AND subscriber = $2",
        ])
    }

    func deleteZones(pauseAfterZones: Int?, report: @Sendable (UserDeletion.Progress) -> Void) async throws {
        let zones = ZoneStore(store: store)
        while true {
            let found: [(database: DatabaseID, zoneName: String)] = try await store.withConnection { connection in
                let rows = try await connection.query("""
                    SELECT environment, zone_name FROM zones WHERE container = \(container) AND scope = 'private' AND owner = \(user) AND NOT deleted
                    """, logger: logger)
                var list: [(database: DatabaseID, zoneName: String)] = []
                for try await (environment, zoneName) in rows.decode((String, String).self) {
                    guard let environment = Environment(rawValue: environment) else { continue }
                    list.append((DatabaseID(container: container, environment: environment, scope: .private, owner: user), zoneName))
                }
                return list
            }
            guard let next = UserDeletion.zonesToDelete(found, user: user).first else { return }
            let done = try await UserDeletionStore.progress(container: container, user: user, on: store, logger: logger)
            if UserDeletion.pauses(zonesDeleted: done.zonesDeleted, pauseAfterZones: pauseAfterZones) {
                report(done)
                logger.warning("user deletion paused (a test setting)", metadata: ["zones": "\(done.zonesDeleted)"])
                while true { try await Task.sleep(for: .seconds(3600)) }
            }
            _ = try await zones.modify([.delete(ZoneID(zoneName: next.zoneName, ownerRecordName: user))], in: next.database, causation: causation, logger: logger)
            try await count("zones_deleted", 1)
        }
    }

    /// Deletes, through the write path, batches of the records `where` names (with the
    /// container, $1, and the user, $2) in a default zone of `database`.
    func deleteRecords(in database: @escaping @Sendable (Environment) -> DatabaseID, where condition: String, sharedWith: String? = nil) async throws {
        let records = RecordStore(store: store)
        for environment in Environment.allCases {
            let target = database(environment)
            while true {
                let names: [String] = try await store.withConnection { connection in
                    var binds = binds()
                    binds.append(environment.rawValue)
                    // Owner key: the caller's `condition` names the owner (`owner = $2`).
                    let rows = try await connection.query(PostgresQuery(unsafeSQL: """
                        SELECT record_name FROM records WHERE container = $1 AND environment = $3 AND zone_name = '_defaultZone' AND \(condition)
                        ORDER BY record_name LIMIT \(UserDeletion.batch)
                        """, binds: binds), logger: logger)
                    var names: [String] = []
                    for try await name in rows.decode(String.self) { names.append(name) }
                    return names
                }
                guard !names.isEmpty else { break }
                let outcomes = try await records.modify(
                    names.map { RecordStore.Command(type: .forceDelete, input: RecordInput(recordName: $0)) },
                    zone: ZoneID(zoneName: ZoneID.defaultZoneName, ownerRecordName: target.owner), in: target, atomic: false, causation: causation,
                    deviceID: nil, sharedWith: sharedWith, logger: logger)
                let deleted = outcomes.filter { if case .success = $0 { true } else { false } }.count
                if deleted == 0 {
                    let reasons = outcomes.compactMap { if case .failure(let failure) = $0 { failure.error.reason } else { nil } }
                    throw StratusError(.internalError, "the user's records could not be deleted: \(reasons.first ?? "no reason")")
                }
                try await count("records_deleted", deleted)
            }
        }
    }

    func deleteDefaultZoneRecords() async throws {
        let user = user, container = container
        try await deleteRecords(
            in: { DatabaseID(container: container, environment: $0, scope: .private, owner: user) }, where: "scope = 'private' AND owner = $2")
    }

    func deletePublicRecords() async throws {
        let container = container
        try await deleteRecords(
            in: { DatabaseID(container: container, environment: $0, scope: .public, owner: DatabaseID.publicOwner) },
            where: "scope = 'public' AND owner = '\(DatabaseID.publicOwner)' AND created_by = $2")
    }

    /// What becomes of the user's public records: the container's heir, if it names one who is
    /// still a user of the container and not being deleted, takes them.
    func publicRecordsFate() async throws -> UserDeletion.PublicRecordsFate {
        try await store.withConnection { connection in
            let rows = try await connection.query("""
                SELECT c.public_records_heir,
                       EXISTS (SELECT 1 FROM users u WHERE u.container = c.container AND u.user_record_name = c.public_records_heir)
                       AND NOT EXISTS (SELECT 1 FROM user_deletions d WHERE d.container = c.container AND d.user_record_name = c.public_records_heir)
                FROM containers c WHERE c.container = \(container)
                """, logger: logger)
            for try await (heir, available) in rows.decode((String?, Bool).self) {
                return UserDeletion.publicRecordsFate(heir: heir, heirAvailable: available, user: user)
            }
            return .delete
        }
    }

    /// Hands the user's public records to the heir, in one transaction: wherever a public record
    /// names the user as its creator or last modifier — its row, its query index rows, its events'
    /// payloads (`UserDeletion.stampPaths`) — and wherever a public-database event names them as
    /// its cause, the heir is named instead; the bytes of the records they created, and their
    /// public assets, count against the heir's storage from now on (and the assets are not
    /// deleted with the user's). The contents stay; the change tags stay, so clients holding the
    /// records see them unchanged. Run again, it finds nothing left to rename.
    func handOverPublicRecords(to heir: String) async throws {
        // The user's public records that are gone already are not handed over: their events are
        // redacted first, while they still name the user.
        try await redactEvents()
        let handedOver: Int64 = try await store.readCommitted(logger: logger) { transaction in
            let connection = transaction.connection
            let publicOwner = DatabaseID.publicOwner
            // The records (their rows locked first) and the storage their bytes count against.
            // Crosses owners: the user's public-database assets, found by the user they count against
            // (the records are the public database's, whose owner the statement names).
            let rows = try await connection.query("""
                WITH old AS (
                    SELECT environment, zone_name, record_name, created_by = \(user) AS created FROM records
                    WHERE container = \(container) AND scope = 'public' AND owner = \(publicOwner) AND (created_by = \(user) OR modified_by = \(user))
                    ORDER BY environment, zone_name, record_name FOR UPDATE),
                moved AS (
                    UPDATE records r SET created_by = CASE WHEN r.created_by = \(user) THEN \(heir) ELSE r.created_by END,
                                         modified_by = CASE WHEN r.modified_by = \(user) THEN \(heir) ELSE r.modified_by END
                    FROM old WHERE r.container = \(container) AND r.environment = old.environment AND r.scope = 'public' AND r.owner = \(publicOwner)
                      AND r.zone_name = old.zone_name AND r.record_name = old.record_name
                    RETURNING r.environment, old.created, r.fields_bytes),
                moved_assets AS (
                    UPDATE assets SET usage_owner = \(heir) WHERE container = \(container) AND scope = 'public' AND usage_owner = \(user)
                    RETURNING environment, coalesce(size, 0) AS bytes),
                bytes AS (
                    SELECT environment, sum(fields_bytes) AS bytes FROM moved WHERE created GROUP BY environment
                    UNION ALL SELECT environment, sum(bytes) FROM moved_assets GROUP BY environment),
                counted AS (
                    INSERT INTO storage_usage (container, environment, owner, shard, bytes)
                    SELECT \(container), environment, who, \(transaction.usageShard), CASE WHEN who = \(heir) THEN total ELSE -total END
                    FROM (SELECT environment, sum(bytes)::int8 AS total FROM bytes GROUP BY environment) t
                    CROSS JOIN unnest(ARRAY[\(heir), \(user)]::text[]) AS who
                    WHERE total <> 0
                    ON CONFLICT (container, environment, owner, shard) DO UPDATE SET bytes = storage_usage.bytes + EXCLUDED.bytes
                    RETURNING 1)
                SELECT (SELECT count(*) FROM moved WHERE created), (SELECT count(*) FROM counted)
                """, logger: logger)
            var moved: Int64 = 0
            for try await (count, _) in rows.decode((Int64, Int64).self) { moved = count }
            // The query index's rows of those records (every generation).
            for path in UserDeletion.recordStampPaths {
                _ = try await connection.query(PostgresQuery(unsafeSQL: """
                    UPDATE query_index.records SET record = jsonb_set(record, $4::text[], to_jsonb($3::text))
                    WHERE container = $1 AND scope = 'public' AND owner = '\(publicOwner)' AND record #>> $4::text[] = $2
                    """, binds: binds(heir: heir, path: path)), logger: logger)
            }
            // The events of the container's public database.
            let publicZones = "split_part(zone_key, '/', 1) = $1 AND split_part(zone_key, '/', 3) = 'public'"
            for path in UserDeletion.stampPaths {
                // Crosses owners: the public database's events, found by their zone keys.
                _ = try await connection.query(PostgresQuery(unsafeSQL: """
                    UPDATE events SET payload = jsonb_set(payload, $4::text[], to_jsonb($3::text))
                    WHERE \(publicZones) AND payload #>> $4::text[] = $2
                    """, binds: binds(heir: heir, path: path)), logger: logger)
            }
            // Crosses owners: the public database's events, found by their zone keys.
            _ = try await connection.query(PostgresQuery(unsafeSQL: """
                UPDATE events SET causation = jsonb_set(causation, '{userRecordName}', to_jsonb($3::text))
                WHERE \(publicZones) AND causation->>'userRecordName' = $2
                """, binds: binds(heir: heir, path: nil)), logger: logger)
            return moved
        }
        try await count("records_handed_over", Int(handedOver))
    }

    /// The container ($1), the user ($2), the heir ($3) and a JSON path ($4).
    private func binds(heir: String, path: [String]?) -> PostgresBindings {
        var binds = binds()
        binds.append(heir)
        if let path { binds.append(path) }
        return binds
    }

    /// Leaves every share of another user the user takes part in (the owner's share is saved with
    /// them removed, so the fan-out follows), then removes their participant and tracking rows.
    func leaveShares() async throws {
        let records = RecordStore(store: store)
        let shares: [(environment: String, owner: String, zone: String, share: String)] = try await store.withConnection { connection in
            // Crosses owners: the shares the user takes part in, found by participant in every owner's database
            // (each node's, when sharded).
            let rows = try await connection.query("""
                SELECT environment, owner, zone_name, share_name FROM share_participants
                WHERE container = \(container) AND user_record_name = \(user) AND owner <> \(user) AND acceptance_status <> 'REMOVED'
                ORDER BY environment, owner, zone_name, share_name
                """, logger: logger)
            var shares: [(String, String, String, String)] = []
            for try await row in rows.decode((String, String, String, String).self) { shares.append(row) }
            return shares
        }
        for share in shares {
            guard let environment = Environment(rawValue: share.environment) else { continue }
            let database = DatabaseID(container: container, environment: environment, scope: .private, owner: share.owner)
            let outcomes = try await records.modify(
                [RecordStore.Command(type: .forceDelete, input: RecordInput(recordName: share.share))],
                zone: ZoneID(zoneName: share.zone, ownerRecordName: share.owner), in: database, atomic: false, causation: causation, deviceID: nil,
                sharedWith: user, logger: logger)
            if case .failure(let failure) = outcomes.first, failure.error.code != .notFound {
                throw StratusError(.internalError, "the user could not leave a share: \(failure.error.reason)")
            }
            try await count("shares_left", 1)
        }
        try await statements([
            // Crosses owners: the user's participant rows in every owner's shares.
            "DELETE FROM share_participants WHERE container = $1 AND user_record_name = $2 AND owner <> $2",
            "DELETE FROM shared_zone_tracking WHERE container = $1 AND user_record_name = $2",
        ])
    }

    func deleteSubscriptions() async throws {
        try await statements([
            """
            DELETE FROM notification_deliveries WHERE notification_id IN
                (SELECT notification_id FROM notifications WHERE container = $1 AND (subscriber = $2 OR (scope = 'private' AND zone_owner = $2)))
            """,
            "DELETE FROM notifications WHERE container = $1 AND (subscriber = $2 OR (scope = 'private' AND zone_owner = $2))",
            "DELETE FROM notification_positions WHERE container = $1 AND subscriber = $2",
            "DELETE FROM subscriptions WHERE container = $1 AND (subscriber = $2 OR (scope = 'private' AND owner = $2))",
        ])
    }

    /// The user's assets — of their private zones, or uploaded by them (their usage) anywhere —
    /// a batch at a time: each one's bytes, unless another asset still holds them, then its rows.
    func deleteAssets(_ deleteBlob: UserDeletionStore.BlobDeleter) async throws {
        try await AssetDeletion.inBatches(store: store, deleteBlob: deleteBlob, logger: logger, next: { connection in
            try await connection.query("""
                SELECT a.asset_id, coalesce(a.blob_id, a.asset_id),
                       EXISTS (SELECT 1 FROM assets o WHERE o.asset_id <> a.asset_id AND coalesce(o.blob_id, o.asset_id) = coalesce(a.blob_id, a.asset_id)
                               AND NOT (o.container = \(container) AND ((o.scope = 'private' AND o.owner = \(user)) OR o.usage_owner = \(user))))
                FROM assets a
                WHERE a.container = \(container) AND ((a.scope = 'private' AND a.owner = \(user)) OR a.usage_owner = \(user))
                ORDER BY a.asset_id LIMIT \(UserDeletion.batch)
                """, logger: logger)
        }, counted: { try await count("assets_deleted", $0) })
    }

    /// Takes the user's data out of the event log (`UserDeletion.redaction`): in the user's own
    /// zones, for every record the job deleted elsewhere (found by the job's request id), and for
    /// every public record the user created or saved that is gone already (deleted before the
    /// account was, by the user or anyone else), a saved record's event becomes `event.redacted`
    /// with an empty payload, a deletion keeps its type without the record's image. Events the
    /// relay has not published yet stay queued and go out redacted. Run again, it finds nothing
    /// left to redact; the hand-over to an heir runs it first, before it renames the user.
    func redactEvents() async throws {
        let redacted: Int64 = try await store.readCommitted(logger: logger) { transaction in
            let connection = transaction.connection
            let requestID = UserDeletion.requestID(container: container, user: user)
            let rows = try await connection.query("""
                WITH doomed AS (
                    SELECT DISTINCT zone_key, payload->>'recordName' AS record_name FROM events
                    WHERE causation->>'requestID' = \(requestID) AND type = \(RecordDeleted.eventType.rawValue)
                    UNION
                    -- Crosses owners: the public database's events, found by their zone keys; a record
                    -- is gone when the public database has no row of that name in that zone.
                    SELECT DISTINCT e.zone_key, e.payload->'record'->>'recordName' FROM events e
                    WHERE split_part(e.zone_key, '/', 1) = \(container) AND split_part(e.zone_key, '/', 3) = 'public'
                      AND e.type = \(RecordSaved.eventType.rawValue)
                      AND (e.causation->>'userRecordName' = \(user) OR e.payload#>>'{record,created,userRecordName}' = \(user)
                           OR e.payload#>>'{record,modified,userRecordName}' = \(user))
                      AND NOT EXISTS (
                          SELECT 1 FROM records r
                          WHERE r.container = \(container) AND r.environment = split_part(e.zone_key, '/', 2) AND r.scope = 'public'
                            AND r.owner = split_part(e.zone_key, '/', 4) AND r.zone_name = split_part(e.zone_key, '/', 5)
                            AND r.record_name = e.payload->'record'->>'recordName')
                ),
                touched AS (
                    SELECT e.id, e.type FROM events e
                    WHERE (split_part(e.zone_key, '/', 1) = \(container) AND split_part(e.zone_key, '/', 3) = 'private'
                           AND split_part(e.zone_key, '/', 4) = \(user))
                       OR EXISTS (SELECT 1 FROM doomed d WHERE d.zone_key = e.zone_key
                                  AND d.record_name = coalesce(e.payload->'record'->>'recordName', e.payload->>'recordName'))
                ),
                saved AS (
                    UPDATE events e SET type = \(UserDeletion.redactedType.rawValue), payload = '{}'::jsonb,
                           causation = jsonb_build_object('requestID', e.causation->>'requestID')
                    FROM touched t WHERE e.id = t.id AND t.type = \(RecordSaved.eventType.rawValue)
                    RETURNING e.id
                ),
                deletions AS (
                    UPDATE events e SET payload = e.payload - 'last'
                    FROM touched t WHERE e.id = t.id AND t.type = \(RecordDeleted.eventType.rawValue) AND e.payload ? 'last'
                    RETURNING e.id
                )
                SELECT (SELECT count(*) FROM saved) + (SELECT count(*) FROM deletions)
                """, logger: logger)
            var count: Int64 = 0
            for try await value in rows.decode(Int64.self) { count = value }
            return count
        }
        try await count("events_redacted", Int(redacted))
    }

    /// What is left: the directory row (its sessions and linked identities go with it), role
    /// memberships, storage totals, the deleted zones' rows, tombstones and expiry entries, and the
    /// indexer's rows of the user's zones. The participants' tracking rows of the user's zones stay:
    /// they carry no record data, and tell the participants' database syncs that the zones are gone.
    func deleteDirectoryEntries() async throws {
        let own = "container = $1 AND scope = 'private' AND owner = $2"
        try await statements([
            "DELETE FROM record_tombstones WHERE \(own)",
            "DELETE FROM record_expirations WHERE \(own)",
            "DELETE FROM record_references WHERE \(own)",
            "DELETE FROM query_index.records WHERE \(own)",
            "DELETE FROM index_zones WHERE \(own)",
            "DELETE FROM share_participants WHERE \(own)",
            "DELETE FROM shares WHERE \(own)",
            "DELETE FROM zones WHERE \(own)",
            // What still counts against the user leaves the container's stored bytes with their rows.
            """
            WITH gone AS (DELETE FROM storage_usage WHERE container = $1 AND owner = $2 RETURNING bytes)
            INSERT INTO container_usage (container, shard, bytes)
            SELECT $1, 0, -sum(bytes) FROM gone HAVING coalesce(sum(bytes), 0) <> 0
            ON CONFLICT (container, shard) DO UPDATE SET bytes = container_usage.bytes + EXCLUDED.bytes
            """,
            "DELETE FROM schema_role_members WHERE container = $1 AND user_record_name = $2",
            "DELETE FROM users WHERE container = $1 AND user_record_name = $2",
        ])
    }
}

extension UserDeletionStore {
    static func progress(container: String, user: String, on store: PostgresStore, logger: Logger) async throws -> UserDeletion.Progress {
        try await store.withConnection { connection in
            try await progress(container: container, user: user, on: connection, logger: logger) ?? UserDeletion.Progress(step: .zones)
        }
    }
}

/// Deleting assets for good, a batch at a time (a user's deletion, a container's): each one's bytes
/// from the blob store unless an asset outside what is deleted holds them, then its rows; the bytes
/// it counted are freed (for its user and its container) with the last asset holding them.
enum AssetDeletion {
    /// Runs batches that `next` selects (asset id, blob id, whether an asset left alone shares the
    /// blob) until it selects none, reporting each batch's size to `counted`.
    static func inBatches(
        store: PostgresStore, deleteBlob: UserDeletionStore.BlobDeleter, logger: Logger,
        next: @escaping @Sendable (PostgresConnection) async throws -> PostgresRowSequence, counted: (Int) async throws -> Void
    ) async throws {
        while true {
            let batch: [(asset: UUID, blob: UUID, shared: Bool)] = try await store.withConnection { connection in
                var batch: [(UUID, UUID, Bool)] = []
                for try await row in try await next(connection).decode((UUID, UUID, Bool).self) { batch.append(row) }
                return batch
            }
            guard !batch.isEmpty else { return }
            for asset in batch {
                if !asset.shared { try await deleteBlob(asset.blob) }
                try await store.readCommitted(logger: logger) { transaction in
                    // Crosses owners: an asset's reference entry found by the asset's id (the entry's zone is
                    // the asset's, on the same node).
                    _ = try await transaction.connection.query("DELETE FROM asset_references WHERE asset_id = \(asset.asset)", logger: logger)
                    let rows = try await transaction.connection.query(
                        "DELETE FROM assets WHERE asset_id = \(asset.asset) RETURNING container, environment, usage_owner, size", logger: logger)
                    var gone: (String, String, String?, Int64?)?
                    for try await row in rows.decode((String, String, String?, Int64?).self) { gone = row }
                    guard !asset.shared, case let (container, environment, owner?, size?)? = gone else { return }
                    let holders = try await transaction.connection.query(
                        "SELECT 1 FROM assets WHERE asset_id = \(asset.blob) OR blob_id = \(asset.blob) LIMIT 1", logger: logger)
                    for try await _ in holders { return }
                    try await StorageUsage.addAsset(-size, container: container, environment: environment, owner: owner, in: transaction)
                }
            }
            try await counted(batch.count)
        }
    }
}
