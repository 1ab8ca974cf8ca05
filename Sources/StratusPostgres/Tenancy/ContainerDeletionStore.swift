import Foundation
import Logging
import PostgresNIO
import StratusCore

/// Carries out a container's deletion (`ContainerDeletion`, whose steps it runs) and keeps the job's
/// row (`container_deletions`, migration 0047). Each user goes through `UserDeletionStore`; what no
/// user owns is found from the catalog: every table with a `container` column, and every table
/// keyed by a zone key, loses the container's rows. Every step is idempotent and records its
/// progress, so running the job again after a crash finishes it.
public struct ContainerDeletionStore: Sendable {
    let store: PostgresStore

    /// Creates the store.
    public init(store: PostgresStore) { self.store = store }

    /// Starts a deletion (or finds the one already started): from this commit every API process
    /// refuses the container's requests (migration 0047's trigger notifies `stratus_access`). A
    /// container's heir of public records is cleared: its users' public records go with them.
    /// Refused for a container that does not exist and no job names.
    public func start(container: String, requestedBy: String, logger: Logger) async throws -> ContainerDeletion.Progress {
        try await store.readCommitted(logger: logger) { transaction in
            let connection = transaction.connection
            let marked = try await connection.query("""
                UPDATE containers SET deleting_at = coalesce(deleting_at, now()), public_records_heir = NULL
                WHERE container = \(container) RETURNING 1
                """, logger: logger)
            var exists = false
            for try await _ in marked { exists = true }
            if exists {
                try await connection.query("""
                    INSERT INTO container_deletions (container, step, requested_by) VALUES (\(container), \(ContainerDeletion.Step.users.rawValue), \(requestedBy))
                    ON CONFLICT (container) DO NOTHING
                    """, logger: logger)
            }
            guard let progress = try await Self.progress(container: container, on: connection, logger: logger) else {
                throw StratusError(.notFound, "no container '\(ClientText.excerpt(container))'")
            }
            return progress
        }
    }

    /// How far a container's deletion is; nil when none was started (or the name was created again).
    public func progress(container: String, logger: Logger) async throws -> ContainerDeletion.Progress? {
        try await store.withConnection { connection in try await Self.progress(container: container, on: connection, logger: logger) }
    }

    static func progress(container: String, on connection: PostgresConnection, logger: Logger) async throws -> ContainerDeletion.Progress? {
        let rows = try await connection.query("""
            SELECT step, users_deleted, rows_deleted, assets_deleted FROM container_deletions WHERE container = \(container)
            """, logger: logger)
        for try await (step, users, rowCount, assets) in rows.decode((String, Int64, Int64, Int64).self) {
            return ContainerDeletion.Progress(
                step: ContainerDeletion.Step(rawValue: step) ?? .users, usersDeleted: users, rowsDeleted: rowCount, assetsDeleted: assets)
        }
        return nil
    }

    /// Containers whose deletion started and has not finished (the oldest first, at most `limit`).
    public func unfinished(limit: Int, logger: Logger) async throws -> [String] {
        try await store.withConnection { connection in
            let rows = try await connection.query("""
                SELECT container FROM container_deletions WHERE finished_at IS NULL ORDER BY requested_at LIMIT \(Int64(limit))
                """, logger: logger)
            var containers: [String] = []
            for try await container in rows.decode(String.self) { containers.append(container) }
            return containers
        }
    }

    /// Runs the job from the step it reached to its end, reporting each change of progress;
    /// `pauseAfterUsers` (tests only) makes it wait, forever, once that many users are deleted. One
    /// process at a time runs a job (an advisory lock on a connection of its own, released when the
    /// process dies); another is refused (TRY_AGAIN_LATER).
    public func run(
        container: String, pauseAfterUsers: Int? = nil, deleteBlob: @escaping UserDeletionStore.BlobDeleter, logger: Logger,
        progress report: @escaping @Sendable (ContainerDeletion.Progress) -> Void = { _ in }
    ) async throws -> ContainerDeletion.Progress {
        let lock = ContainerDeletion.requestID(container: container)
        return try await store.withDedicatedConnection { connection in
            var locked = false
            for try await value in try await connection.query("SELECT pg_try_advisory_lock(hashtextextended(\(lock), 0))", logger: logger).decode(Bool.self) {
                locked = value
            }
            guard locked else {
                throw StratusError(.tryAgainLater, "another process is running the deletion of container '\(ClientText.excerpt(container))'")
            }
            guard var progress = try await progress(container: container, logger: logger) else {
                throw StratusError(.notFound, "no deletion of container '\(ClientText.excerpt(container))' was started")
            }
            let job = ContainerJob(store: store, container: container, logger: logger)
            while !progress.finished {
                report(progress)
                switch progress.step {
                case .users: try await job.deleteUsers(pauseAfterUsers: pauseAfterUsers, deleteBlob: deleteBlob, report: report)
                case .rest:
                    try await job.deleteAssets(deleteBlob)
                    try await job.deleteRows()
                case .container: try await job.deleteContainer()
                case .done: break
                }
                try await job.advance(from: progress.step)
                progress = try await self.progress(container: container, logger: logger) ?? progress
            }
            report(progress)
            return progress
        }
    }
}

/// One container deletion's steps.
struct ContainerJob: Sendable {
    let store: PostgresStore
    let container: String
    let logger: Logger

    /// Adds to one of the job's counts.
    func count(_ column: String, _ amount: Int64) async throws {
        guard amount > 0 else { return }
        try await store.withConnection { connection in
            var binds = PostgresBindings()
            binds.append(container)
            binds.append(amount)
            _ = try await connection.query(PostgresQuery(unsafeSQL: """
                UPDATE container_deletions SET \(column) = \(column) + $2, updated_at = now() WHERE container = $1
                """, binds: binds), logger: logger)
        }
    }

    func advance(from step: ContainerDeletion.Step) async throws {
        try await store.withConnection { connection in
            _ = try await connection.query("""
                UPDATE container_deletions SET step = \(step.next.rawValue), updated_at = now(),
                       finished_at = CASE WHEN \(step.next == .done) THEN now() ELSE finished_at END
                WHERE container = \(container) AND step = \(step.rawValue)
                """, logger: logger)
        }
    }

    /// Each user of the directory, through the user-deletion machinery (a job another process runs,
    /// e.g. stratus-gc's runner, is waited for).
    func deleteUsers(
        pauseAfterUsers: Int?, deleteBlob: @escaping UserDeletionStore.BlobDeleter, report: @Sendable (ContainerDeletion.Progress) -> Void
    ) async throws {
        let deletions = UserDeletionStore(store: store)
        let requestedBy = ContainerDeletion.requestID(container: container)
        while true {
            let users: [String] = try await store.withConnection { connection in
                let rows = try await connection.query("""
                    SELECT user_record_name FROM users WHERE container = \(container) ORDER BY user_record_name LIMIT \(Int64(UserDeletion.batch))
                    """, logger: logger)
                var users: [String] = []
                for try await user in rows.decode(String.self) { users.append(user) }
                return users
            }
            guard !users.isEmpty else { return }
            for user in users {
                if let done = try await ContainerDeletionStore(store: store).progress(container: container, logger: logger),
                   ContainerDeletion.pauses(usersDeleted: done.usersDeleted, pauseAfterUsers: pauseAfterUsers) {
                    report(done)
                    logger.warning("container deletion paused (a test setting)", metadata: ["users": "\(done.usersDeleted)"])
                    while true { try await Task.sleep(for: .seconds(3600)) }
                }
                _ = try await deletions.start(container: container, user: user, requestedBy: requestedBy, logger: logger)
                while true {
                    do {
                        _ = try await deletions.run(container: container, user: user, deleteBlob: deleteBlob, logger: logger)
                        break
                    } catch let error as StratusError where error.code == .tryAgainLater {
                        // Another process runs this user's deletion: wait for it to end.
                        try await Task.sleep(for: .milliseconds(200))
                        if try await deletions.progress(container: container, user: user, logger: logger)?.finished ?? true { break }
                    }
                }
                try await count("users_deleted", 1)
            }
        }
    }

    /// The assets still in the container (its public database's, those of users outside its
    /// directory): each one's bytes, unless an asset of another container holds them, then its rows.
    func deleteAssets(_ deleteBlob: UserDeletionStore.BlobDeleter) async throws {
        let container = container
        try await AssetDeletion.inBatches(store: store, deleteBlob: deleteBlob, logger: logger, next: { connection in
            // Crosses owners: every asset of the container, whoever owns it.
            try await connection.query("""
                SELECT a.asset_id, coalesce(a.blob_id, a.asset_id),
                       EXISTS (SELECT 1 FROM assets o WHERE o.container <> a.container AND coalesce(o.blob_id, o.asset_id) = coalesce(a.blob_id, a.asset_id))
                FROM assets a WHERE a.container = \(container)
                ORDER BY a.asset_id LIMIT \(Int64(UserDeletion.batch))
                """, logger: logger)
        }, counted: { try await count("assets_deleted", Int64($0)) })
    }

    /// The tables that hold rows of a container, from the catalog: those with a `container` column
    /// (but the kept ones and `containers` itself, which goes last), then those keyed by a zone key.
    func tables() async throws -> [(name: String, byZoneKey: Bool)] {
        try await store.withConnection { connection in
            let rows = try await connection.query("""
                SELECT format('%I.%I', c.table_schema, c.table_name), c.column_name = 'zone_key'
                FROM information_schema.columns AS c JOIN information_schema.tables AS t USING (table_schema, table_name)
                WHERE t.table_type = 'BASE TABLE' AND c.table_schema NOT IN ('pg_catalog', 'information_schema')
                  AND c.column_name IN ('container', 'zone_key')
                  AND NOT (c.column_name = 'zone_key' AND EXISTS (
                      SELECT 1 FROM information_schema.columns AS o
                      WHERE o.table_schema = c.table_schema AND o.table_name = c.table_name AND o.column_name = 'container'))
                  AND NOT (c.table_name::text = ANY(\(Array(ContainerDeletion.keptTables) + ["containers"])))
                  AND NOT EXISTS (SELECT 1 FROM pg_inherits AS i WHERE i.inhrelid = format('%I.%I', c.table_schema, c.table_name)::regclass)
                ORDER BY 2, 1
                """, logger: logger)
            var tables: [(String, Bool)] = []
            for try await row in rows.decode((String, Bool).self) { tables.append(row) }
            return tables
        }
    }

    /// Every row left that names the container or one of its zones, table by table; the relay's
    /// queue and the deliveries of its notifications before the rows they point at.
    func deleteRows() async throws {
        var deleted: Int64 = 0
        try await store.readCommitted(logger: logger) { transaction in
            _ = try await transaction.connection.query("""
                DELETE FROM unpublished_events WHERE id IN (SELECT id FROM events WHERE split_part(zone_key, '/', 1) = \(container))
                """, logger: logger)
            // Crosses owners: the deliveries of every notification of the container.
            _ = try await transaction.connection.query("""
                DELETE FROM notification_deliveries WHERE notification_id IN (SELECT notification_id FROM notifications WHERE container = \(container))
                """, logger: logger)
        }
        for (table, byZoneKey) in try await tables() {
            let count: Int64 = try await store.readCommitted(logger: logger) { transaction in
                var binds = PostgresBindings()
                binds.append(container)
                let condition = byZoneKey ? "split_part(zone_key, '/', 1) = $1" : "container = $1"
                // Owner key: none, the whole container goes (every owner's rows of it).
                let rows = try await transaction.connection.query(PostgresQuery(unsafeSQL: """
                    WITH gone AS (DELETE FROM \(table) WHERE \(condition) RETURNING 1) SELECT count(*)::int8 FROM gone
                    """, binds: binds), logger: logger)
                var count: Int64 = 0
                for try await value in rows.decode(Int64.self) { count = value }
                return count
            }
            deleted += count
        }
        try await count("rows_deleted", deleted)
    }

    /// The container's row (its tokens, keys and the rest of its configuration go with it), once the
    /// rows written meanwhile (a worker applying an event it had already received) are gone too.
    func deleteContainer() async throws {
        try await deleteRows()
        try await store.withConnection { connection in
            _ = try await connection.query("DELETE FROM containers WHERE container = \(container)", logger: logger)
        }
    }
}
