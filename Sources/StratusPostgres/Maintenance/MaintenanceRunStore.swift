import Foundation
import Logging
import PostgresNIO
import StratusCore

/// A maintenance job: a rebuild of the query index, or a replay of one worker from the event log.
public enum MaintenanceJob: Sendable, Hashable {
    case reindex
    case replay(worker: String)

    /// Every job, in the order the console offers them: the reindex, then a replay of each of
    /// `workers` (the names of `WorkerDefinition.all`, which the runtime hands down: StratusWorkers,
    /// where each worker is defined, is a layer above this one).
    public static func all(workers: [String]) -> [MaintenanceJob] { [.reindex] + workers.map { .replay(worker: $0) } }

    /// `reindex`, or `replay:<worker>` (what a form posts).
    public var name: String {
        switch self {
        case .reindex: "reindex"
        case .replay(let worker): "replay:\(worker)"
        }
    }

    /// The job a form names, a replay only of one of `workers`; or nil.
    public init?(name: String, workers: [String]) {
        if name == "reindex" {
            self = .reindex
        } else if name.hasPrefix("replay:"), workers.contains(String(name.dropFirst("replay:".count))) {
            self = .replay(worker: String(name.dropFirst("replay:".count)))
        } else {
            return nil
        }
    }

    /// What a person reads, e.g. `replay stratus-gc`.
    public var label: String {
        switch self {
        case .reindex: "reindex"
        case .replay(let worker): "replay \(worker)"
        }
    }

    var kind: String { if case .reindex = self { "reindex" } else { "replay" } }
    var subject: String { if case .replay(let worker) = self { worker } else { "query-index" } }

    /// Jobs with the same key never run at once: a reindex and a replay of the indexer both build a
    /// query index generation.
    var lockKey: String { if case .replay(let worker) = self, worker != "stratus-indexer" { worker } else { "query-index" } }
}

/// Where maintenance runs record themselves (`maintenance_runs`, migration 0025): a run claims its
/// row before it starts (refused while a run of the same kind runs), reports its progress after
/// every page of the event log it reads and a heartbeat in between, and records how it ended. The
/// console's progress is read from here.
public struct MaintenanceRunStore: Sendable {
    let store: PostgresStore

    /// A run that has not reported for this long is taken to have died with its process.
    public static let staleAfter: Duration = .seconds(120)
    /// The most runs a page lists.
    public static let maxListed = 20

    /// Creates the store.
    public init(store: PostgresStore) { self.store = store }

    /// A run as recorded.
    public struct Run: Sendable, Equatable {
        public var id: Int64
        public var job: MaintenanceJob
        /// `running`, `finished` or `failed`.
        public var state: String
        public var startedBy: String
        /// Events read so far.
        public var events: Int64
        /// The event id reached, and the log's last event id when the pass began.
        public var position: Int64
        public var target: Int64
        public var startedAt: Date
        public var reportedAt: Date
        public var finishedAt: Date?
        public var error: String?
    }

    /// Claims a run of `job`, refused (CONFLICT, naming the run) while one of the same kind runs. A
    /// running row that stopped reporting (its process ended) is marked failed first.
    public func claim(_ job: MaintenanceJob, startedBy: String, logger: Logger) async throws -> Int64 {
        let stale = "\(Int(Self.staleAfter.components.seconds)) seconds"
        return try await store.serializable(logger: logger, lock: "maintenance_runs") { transaction in
            try await transaction.connection.query("""
                UPDATE maintenance_runs SET state = 'failed', finished_at = now(),
                       error = 'it stopped reporting (its process ended before it finished)'
                WHERE state = 'running' AND reported_at < now() - \(stale)::interval
                """, logger: transaction.logger)
            let running = try await transaction.connection.query("""
                SELECT id, started_by FROM maintenance_runs WHERE state = 'running' AND lock_key = \(job.lockKey)
                """, logger: transaction.logger)
            for try await (id, startedBy) in running.decode((Int64, String).self) {
                throw StratusError(.conflict, "Run \(id) (started by \(startedBy)) is still running and does the same work; wait until it finishes")
            }
            let rows = try await transaction.connection.query("""
                INSERT INTO maintenance_runs (kind, subject, lock_key, started_by) VALUES (\(job.kind), \(job.subject), \(job.lockKey), \(startedBy))
                RETURNING id
                """, logger: transaction.logger)
            for try await id in rows.decode(Int64.self) { return id }
            throw StratusError(.internalError, "could not record the run")
        }
    }

    /// Records a run's progress (also its heartbeat).
    public func report(_ id: Int64, events: Int64, position: Int64, target: Int64, logger: Logger) async throws {
        try await store.withConnection { connection in
            try await connection.execute("""
                UPDATE maintenance_runs SET events = \(events), position = \(position), target = \(target), reported_at = now()
                WHERE id = \(id) AND state = 'running'
                """, logger: logger)
        }
    }

    /// Records that a run is alive without new progress.
    public func heartbeat(_ id: Int64, logger: Logger) async throws {
        try await store.withConnection { connection in
            try await connection.execute("UPDATE maintenance_runs SET reported_at = now() WHERE id = \(id) AND state = 'running'", logger: logger)
        }
    }

    /// Records how a run ended: finished, or failed with `error` (an operator-readable message).
    public func finish(_ id: Int64, error: String?, logger: Logger) async throws {
        let state = error == nil ? "finished" : "failed"
        try await store.withConnection { connection in
            try await connection.execute("""
                UPDATE maintenance_runs SET state = \(state), error = \(error.map { String($0.prefix(1000)) }), finished_at = now(), reported_at = now()
                WHERE id = \(id)
                """, logger: logger)
        }
    }

    /// One run, or nil.
    public func run(_ id: Int64, logger: Logger) async throws -> Run? {
        try await runs(where: id, limit: 1, logger: logger).first
    }

    /// The latest runs, newest first.
    public func recent(limit: Int = maxListed, logger: Logger) async throws -> [Run] {
        try await runs(where: nil, limit: min(max(limit, 1), Self.maxListed), logger: logger)
    }

    private func runs(where id: Int64?, limit: Int, logger: Logger) async throws -> [Run] {
        try await store.withConnection { connection in
            let rows = try await connection.query("""
                SELECT id, kind, subject, state, started_by, events, position, target, started_at, reported_at, finished_at, error
                FROM maintenance_runs WHERE (\(id)::bigint IS NULL OR id = \(id)) ORDER BY id DESC LIMIT \(limit)
                """, logger: logger)
            var runs: [Run] = []
            for try await row in rows {
                let (id, kind, subject, state, startedBy, events, position, target, startedAt, reportedAt, finishedAt, error) =
                    try row.decode((Int64, String, String, String, String, Int64, Int64, Int64, Date, Date, Date?, String?).self)
                let job: MaintenanceJob = kind == "reindex" ? .reindex : .replay(worker: subject)
                runs.append(Run(
                    id: id, job: job, state: state, startedBy: startedBy, events: events, position: position, target: target,
                    startedAt: startedAt, reportedAt: reportedAt, finishedAt: finishedAt, error: error))
            }
            return runs
        }
    }
}
