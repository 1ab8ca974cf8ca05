import Foundation
import Logging
import PostgresNIO
import StratusCore

/// The query index: written by the indexer from record events, read by `records/query`.
public enum QueryIndexStore {
    /// Applies `record.saved` to every generation being served or built; an event older than what a
    /// generation holds for the record changes nothing.
    public static func apply(
        _ saved: RecordSaved, event: EventEnvelope, generations: [Int]? = nil, policy: IndexPolicy = .development, in transaction: Transaction
    ) async throws {
        let database = saved.database
        let record = saved.record
        let recordJSON = String(decoding: EventCoding.encode(record), as: UTF8.self)
        let document = SearchDocument.text(of: record, policy: policy)
        try await transaction.connection.query("""
            INSERT INTO query_index.records AS r (generation, container, environment, scope, owner, zone_name, record_name, record_type,
                version, deleted, created_at, modified_at, record, search)
            SELECT g.generation, \(database.container), \(database.environment.rawValue), \(database.scope.rawValue), \(database.owner), \(saved.zoneID.zoneName),
                \(record.recordName), \(record.recordType), \(event.id), false, \(record.created.timestamp), \(record.modified.timestamp),
                \(recordJSON)::jsonb, to_tsvector(g.language, \(document))
            FROM query_index.generations AS g
            WHERE g.generation = ANY(coalesce(\(generations)::int[], \(unescaped: servedGenerations)))
            ON CONFLICT (generation, container, environment, scope, owner, zone_name, record_name) DO UPDATE SET
                record_type = EXCLUDED.record_type, version = EXCLUDED.version, deleted = false, created_at = EXCLUDED.created_at,
                modified_at = EXCLUDED.modified_at, record = EXCLUDED.record, search = EXCLUDED.search
            WHERE r.version < EXCLUDED.version
            """, logger: transaction.logger)
    }

    /// The most text of one record that full-text search indexes, in UTF-8 bytes (`SearchDocument.maxBytes`).
    public static let maxSearchBytes = SearchDocument.maxBytes

    /// Applies `record.deleted`: the row becomes a deletion marker (so an older event arriving late cannot bring it back).
    public static func apply(_ deleted: RecordDeleted, event: EventEnvelope, generations: [Int]? = nil, in transaction: Transaction) async throws {
        let database = deleted.database
        try await transaction.connection.query("""
            INSERT INTO query_index.records AS r (generation, container, environment, scope, owner, zone_name, record_name, record_type, version, deleted)
            SELECT g, \(database.container), \(database.environment.rawValue), \(database.scope.rawValue), \(database.owner), \(deleted.zoneID.zoneName),
                \(deleted.recordName), \(deleted.recordType), \(event.id), true
            FROM unnest(coalesce(\(generations)::int[], \(unescaped: servedGenerations))) AS g
            ON CONFLICT (generation, container, environment, scope, owner, zone_name, record_name) DO UPDATE SET
                version = EXCLUDED.version, deleted = true, record = NULL, search = NULL
            WHERE r.version < EXCLUDED.version
            """, logger: transaction.logger)
    }

    /// Applies a run of `record.deleted` events with one statement (a collector's or a zone's
    /// deletions arrive hundreds at a time): the same markers as applying them one by one, a record
    /// named twice getting its latest.
    public static func apply(deletions: [(deleted: RecordDeleted, event: EventEnvelope)], in transaction: Transaction) async throws {
        guard deletions.count > 1 else {
            if let only = deletions.first { try await apply(only.deleted, event: only.event, in: transaction) }
            return
        }
        struct Key: Hashable {
            var database: DatabaseID
            var zoneName: String
            var recordName: String
        }
        var latest: [Key: (deleted: RecordDeleted, version: Int64)] = [:]
        for (deleted, event) in deletions {
            let key = Key(database: deleted.database, zoneName: deleted.zoneID.zoneName, recordName: deleted.recordName)
            if let known = latest[key], known.version >= event.id { continue }
            latest[key] = (deleted, event.id)
        }
        let rows = Array(latest.values)
        try await transaction.connection.query("""
            INSERT INTO query_index.records AS r (generation, container, environment, scope, owner, zone_name, record_name, record_type, version, deleted)
            SELECT g, d.container, d.environment, d.scope, d.owner, d.zone_name, d.record_name, d.record_type, d.version, true
            FROM unnest(\(rows.map(\.deleted.database.container))::text[], \(rows.map(\.deleted.database.environment.rawValue))::text[],
                        \(rows.map(\.deleted.database.scope.rawValue))::text[], \(rows.map(\.deleted.database.owner))::text[],
                        \(rows.map(\.deleted.zoneID.zoneName))::text[], \(rows.map(\.deleted.recordName))::text[],
                        \(rows.map(\.deleted.recordType))::text[], \(rows.map(\.version))::int8[])
                 AS d(container, environment, scope, owner, zone_name, record_name, record_type, version)
            CROSS JOIN unnest(\(unescaped: servedGenerations)) AS g
            ON CONFLICT (generation, container, environment, scope, owner, zone_name, record_name) DO UPDATE SET
                version = EXCLUDED.version, deleted = true, record = NULL, search = NULL
            WHERE r.version < EXCLUDED.version
            """, logger: transaction.logger)
    }

    /// Applies `zone.deleted`: everything the zone held before the event goes.
    public static func apply(_ deleted: ZoneDeleted, event: EventEnvelope, generations: [Int]? = nil, in transaction: Transaction) async throws {
        let database = deleted.database
        try await transaction.connection.query("""
            DELETE FROM query_index.records
            WHERE generation = ANY(coalesce(\(generations)::int[], \(unescaped: servedGenerations))) AND container = \(database.container) AND environment = \(database.environment.rawValue)
              AND scope = \(database.scope.rawValue) AND owner = \(database.owner) AND zone_name = \(deleted.zoneID.zoneName) AND version < \(event.id)
            """, logger: transaction.logger)
    }

    /// Empties every generation (a replay starts from nothing).
    public static func reset(in transaction: Transaction) async throws {
        try await transaction.connection.query("DELETE FROM query_index.records", logger: transaction.logger)
        try await transaction.connection.query("DELETE FROM query_index.generations WHERE state <> 'live'", logger: transaction.logger)
    }

    /// The generations a live event goes to when the caller names none: the one serving queries and
    /// any being built. Read inside each write statement rather than by a query of its own, so an
    /// event costs the indexer one round trip.
    private static let servedGenerations = "ARRAY(SELECT generation FROM query_index.generations WHERE state IN ('live', 'building'))"
}

/// Index generations: the live one serves queries; a rebuild fills a new one and swaps it in.
public struct QueryIndexGenerations: Sendable {
    let store: PostgresStore

    /// Creates the generation manager.
    public init(store: PostgresStore) { self.store = store }

    /// The generation queries read.
    public func live(logger: Logger) async throws -> Int {
        try await store.withConnection { connection in
            let rows = try await connection.query("SELECT generation FROM query_index.generations WHERE state = 'live'", logger: logger)
            for try await generation in rows.decode(Int.self) { return generation }
            throw StratusError(.internalError, "the query index has no live generation")
        }
    }

    /// The generation queries read and its text search configuration.
    public func serving(logger: Logger) async throws -> (generation: Int, language: String) {
        try await store.withConnection { connection in
            let rows = try await connection.query(
                "SELECT generation, language::text FROM query_index.generations WHERE state = 'live'", logger: logger)
            for try await (generation, language) in rows.decode((Int, String).self) { return (generation, language) }
            throw StratusError(.internalError, "the query index has no live generation")
        }
    }

    /// Starts a new generation that the indexer also writes to from now on, with the text search
    /// configuration `language` (a PostgreSQL one, e.g. `simple` or `english`), or the live
    /// generation's when nil.
    public func begin(language: String? = nil, logger: Logger) async throws -> Int {
        try await store.serializable(logger: logger, lock: "query_index.generations") { transaction in
            if let language {
                let known = try await transaction.connection.query("""
                    SELECT EXISTS (SELECT 1 FROM pg_ts_config c JOIN pg_namespace n ON n.oid = c.cfgnamespace
                                   WHERE c.cfgname = \(language) OR n.nspname || '.' || c.cfgname = \(language))
                    """, logger: transaction.logger)
                for try await exists in known.decode(Bool.self) where !exists {
                    throw StratusError(.badRequest, "PostgreSQL has no text search configuration '\(language.prefix(64))' (see \\dF in psql)")
                }
            }
            let rows = try await transaction.connection.query("""
                INSERT INTO query_index.generations (generation, state, language)
                SELECT coalesce(max(generation), 0) + 1, 'building',
                       coalesce(\(language)::regconfig, (SELECT language FROM query_index.generations WHERE state = 'live'), 'simple')
                FROM query_index.generations RETURNING generation
                """, logger: transaction.logger)
            for try await generation in rows.decode(Int.self) { return generation }
            throw StratusError(.internalError, "could not start an index generation")
        }
    }

    /// Applies a page of events, in order, to one generation only (the rebuild's path): one
    /// transaction per page, so a rebuild pays one commit per page rather than per event. READ
    /// COMMITTED is enough (every row write keeps the newer version), and it lets the page commit
    /// while the live indexer writes the same generation.
    /// An event that fails for good is left out of the generation and recorded as the indexer's
    /// dead letter, so one poison event never aborts a rebuild.
    public func apply(_ events: [EventEnvelope], to generation: Int, logger: Logger) async throws {
        do {
            try await store.readCommitted(logger: logger) { transaction in
                for event in events { try await Self.apply(event, to: generation, in: transaction) }
            }
        } catch where PostgresStore.isPermanent(error) {
            try await store.readCommitted(logger: logger) { transaction in
                for event in events {
                    guard let error = try await transaction.isolating({ try await Self.apply(event, to: generation, in: transaction) }) else { continue }
                    let reason = "reindex into generation \(generation): \(PostgresStore.describe(error))"
                    try await DeadLetterStore.record(worker: Self.worker, event: event, reason: reason, in: transaction)
                    logger.error("event left out of the new index generation", metadata: ["event": "\(event.id)", "reason": "\(reason)"])
                }
            }
        }
    }

    /// The worker whose dead letters a rebuild's poison events join.
    static let worker = "stratus-indexer"

    private static func apply(_ event: EventEnvelope, to generation: Int, in transaction: Transaction) async throws {
        switch event.type {
        case RecordSaved.eventType: try await QueryIndexStore.apply(event.decode(RecordSaved.self), event: event, generations: [generation], in: transaction)
        case RecordDeleted.eventType: try await QueryIndexStore.apply(event.decode(RecordDeleted.self), event: event, generations: [generation], in: transaction)
        case .zoneDeleted: try await QueryIndexStore.apply(event.decode(ZoneDeleted.self), event: event, generations: [generation], in: transaction)
        default: break
        }
    }

    /// Drops a generation that was being built (a rebuild that failed or was stopped): its rows go,
    /// and the indexer stops writing to it. The live generation is never dropped.
    public func abandon(_ generation: Int, logger: Logger) async throws {
        try await store.serializable(logger: logger, lock: "query_index.generations") { transaction in
            try await transaction.connection.execute(
                "DELETE FROM query_index.generations WHERE generation = \(generation) AND state = 'building'", logger: transaction.logger)
        }
        try await store.withConnection { connection in
            try await connection.execute("""
                DELETE FROM query_index.records WHERE generation = \(generation)
                  AND NOT EXISTS (SELECT 1 FROM query_index.generations WHERE generation = \(generation))
                """, logger: logger)
        }
    }

    /// Makes `generation` live in one transaction and drops the old rows.
    public func swap(to generation: Int, logger: Logger) async throws {
        try await store.serializable(logger: logger, lock: "query_index.generations") { transaction in
            try await transaction.connection.query(
                "UPDATE query_index.generations SET state = 'retired' WHERE state = 'live'", logger: transaction.logger)
            try await transaction.connection.query(
                "UPDATE query_index.generations SET state = 'live' WHERE generation = \(generation)", logger: transaction.logger)
        }
        // The live indexer may still be writing the retired generation's rows in a transaction that
        // began before the swap: the clean-up can deadlock with it, and is then tried again.
        try await store.readCommitted(logger: logger) { transaction in
            try await transaction.connection.execute("""
                DELETE FROM query_index.records WHERE generation IN (SELECT generation FROM query_index.generations WHERE state = 'retired')
                """, logger: transaction.logger)
        }
    }
}
