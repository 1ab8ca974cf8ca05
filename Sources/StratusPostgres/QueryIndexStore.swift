import Foundation
import Logging
import PostgresNIO
import StratusConnections
import StratusCore

/// The query index: written by the indexer from record events, read by `records/query`.
public enum QueryIndexStore {
    /// Applies `record.saved` to every generation being served or built (or those `generations`
    /// names); an event older than what a generation holds for the record changes nothing.
    public static func apply(_ saved: RecordSaved, event: EventEnvelope, generations: [Int]? = nil, in transaction: Transaction) async throws {
        try await write(one: (RecordSaved.Indexed(saved), event.id), generations: generations, in: transaction)
    }

    /// Writes one record's save.
    private static func write(one row: (saved: RecordSaved.Indexed, version: Int64), generations: [Int]?, in transaction: Transaction) async throws {
        let (saved, version) = row
        let database = saved.database, record = saved.record
        // Prepared (`Transaction.prepared`): an insert whose conflict is the primary key's has one
        // plan whatever the values, and a save applied alone (a worker's batch of one event, most
        // of them at one writer) was planned at every call.
        for try await _ in try await transaction.prepared("""
            INSERT INTO query_index.records AS r (generation, container, environment, scope, owner, zone_name, record_name, record_type,
                version, deleted, created_at, modified_at, record, search)
            SELECT g.generation, \(database.container), \(database.environment.rawValue), \(database.scope.rawValue), \(database.owner), \(saved.zoneName),
                \(record.recordName), \(record.recordType), \(version), false, \(record.created.timestamp), \(record.modified.timestamp),
                \(saved.recordJSON)::jsonb, to_tsvector(g.language, \(saved.document))
            FROM query_index.generations AS g
            WHERE g.generation = ANY(coalesce(\(generationsBound(generations))::int[], \(unescaped: servedGenerations)))
            ON CONFLICT (generation, container, environment, scope, owner, zone_name, record_name) DO UPDATE SET
                record_type = EXCLUDED.record_type, version = EXCLUDED.version, deleted = false, created_at = EXCLUDED.created_at,
                modified_at = EXCLUDED.modified_at, record = EXCLUDED.record, search = EXCLUDED.search
            WHERE r.version < EXCLUDED.version
            """) {}
    }

    /// Applies a run of saves read for the index (`RecordSaved.indexed`), each with the id of its
    /// event, with one statement (a batch load or a busy zone brings hundreds in a row): what
    /// applying them one by one leaves — a record saved twice in the run takes its latest save, and
    /// an event older than what a generation holds changes nothing. `generations` names the
    /// generations written (nil: every one served or built).
    public static func apply(indexed saves: [(saved: RecordSaved.Indexed, version: Int64)], generations: [Int]? = nil, in transaction: Transaction) async throws {
        let rows = latestPerRecord(saves) {
            (RecordKey(database: $0.saved.database, zoneName: $0.saved.zoneName, recordName: $0.saved.record.recordName), $0.version)
        }
        guard !rows.isEmpty else { return }
        if rows.count == 1 { return try await write(one: rows[0], generations: generations, in: transaction) }
        try await write(rows, generations: generations, in: transaction)
    }

    /// The latest item of each record in `items`, in their order: what applying them one by one leaves.
    private static func latestPerRecord<Item>(_ items: [Item], _ identity: (Item) -> (key: RecordKey, version: Int64)) -> [Item] {
        var latest: [RecordKey: (index: Int, version: Int64)] = [:]
        for (index, item) in items.enumerated() {
            let (key, version) = identity(item)
            if let known = latest[key], known.version >= version { continue }
            latest[key] = (index, version)
        }
        return latest.values.map(\.index).sorted().map { items[$0] }
    }

    /// Writes saves, one row each (no two of the same record), with one statement.
    private static func write(_ rows: [(saved: RecordSaved.Indexed, version: Int64)], generations: [Int]?, in transaction: Transaction) async throws {
        var containers: [String] = [], environments: [String] = [], scopes: [String] = [], owners: [String] = []
        var zones: [String] = [], names: [String] = [], types: [String] = [], versions: [Int64] = []
        var created: [Int64] = [], modified: [Int64] = [], records: [String] = [], documents: [String] = []
        for (saved, version) in rows {
            let database = saved.database, record = saved.record
            containers.append(database.container)
            environments.append(database.environment.rawValue)
            scopes.append(database.scope.rawValue)
            owners.append(database.owner)
            zones.append(saved.zoneName)
            names.append(record.recordName)
            types.append(record.recordType)
            versions.append(version)
            created.append(record.created.timestamp)
            modified.append(record.modified.timestamp)
            records.append(saved.recordJSON)
            documents.append(saved.document)
        }
        // Prepared, as the save of one record: the rows come as arrays, so the text is the same for
        // every run, and its plan (the arrays' rows joined with the few generations) is the same
        // whatever their length.
        for try await _ in try await transaction.prepared("""
            INSERT INTO query_index.records AS r (generation, container, environment, scope, owner, zone_name, record_name, record_type,
                version, deleted, created_at, modified_at, record, search)
            SELECT g.generation, s.container, s.environment, s.scope, s.owner, s.zone_name, s.record_name, s.record_type,
                s.version, false, s.created_at, s.modified_at, s.record::jsonb, to_tsvector(g.language, s.document)
            FROM unnest(\(containers)::text[], \(environments)::text[], \(scopes)::text[], \(owners)::text[], \(zones)::text[],
                        \(names)::text[], \(types)::text[], \(versions)::int8[], \(created)::int8[], \(modified)::int8[],
                        \(records)::text[], \(documents)::text[])
                AS s(container, environment, scope, owner, zone_name, record_name, record_type, version, created_at, modified_at, record, document)
            CROSS JOIN query_index.generations AS g
            WHERE g.generation = ANY(coalesce(\(generationsBound(generations))::int[], \(unescaped: servedGenerations)))
            ON CONFLICT (generation, container, environment, scope, owner, zone_name, record_name) DO UPDATE SET
                record_type = EXCLUDED.record_type, version = EXCLUDED.version, deleted = false, created_at = EXCLUDED.created_at,
                modified_at = EXCLUDED.modified_at, record = EXCLUDED.record, search = EXCLUDED.search
            WHERE r.version < EXCLUDED.version
            """) {}
    }

    /// `generations` as the statements bind it: `int[]`, the type PostgreSQL gives the parameter of
    /// a prepared statement whose first call bound NULL (an untyped value, cast to `int[]`), so every
    /// later call binds the same type.
    private static func generationsBound(_ generations: [Int]?) -> [Int32]? {
        generations.map { $0.map { Int32(clamping: $0) } }
    }

    /// The most text of one record that full-text search indexes, in UTF-8 bytes (`SearchDocument.maxBytes`).
    public static let maxSearchBytes = SearchDocument.maxBytes

    /// Applies `record.deleted`. A generation being built gets a deletion marker (its rebuild may
    /// still bring an older save of the record, which the marker's version outranks), and so does
    /// the default zone everywhere (its events carry no zone sequence: the marker's version is how
    /// `records/query` tells how far the index has come). A custom zone's row in the live generation
    /// simply goes: its events reach the live index in zone order, each once (the zone's
    /// checkpoint), so no older event of the record can follow — and a deleted row costs the table's
    /// indexes nothing, where a marker is a new version of the row in every one of them.
    public static func apply(_ deleted: RecordDeleted, event: EventEnvelope, generations: [Int]? = nil, in transaction: Transaction) async throws {
        if let generations {
            try await mark([(deleted, event.id)], generations: "ARRAY[\(generations.map(String.init).joined(separator: ","))]", in: transaction)
        } else {
            try await apply(deletions: [(deleted, event)], in: transaction)
        }
    }

    /// Applies a run of `record.deleted` events with one statement per kind of zone (a collector's
    /// or a zone's deletions arrive hundreds at a time): what applying them one by one leaves, a
    /// record named twice taking its latest.
    public static func apply(deletions: [(deleted: RecordDeleted, event: EventEnvelope)], in transaction: Transaction) async throws {
        var latest: [RecordKey: (deleted: RecordDeleted, version: Int64)] = [:]
        var order: [RecordKey] = []
        for (deleted, event) in deletions {
            let key = RecordKey(database: deleted.database, zoneName: deleted.zoneID.zoneName, recordName: deleted.recordName)
            if let known = latest[key] {
                if known.version >= event.id { continue }
            } else {
                order.append(key)
            }
            latest[key] = (deleted, event.id)
        }
        let rows = order.compactMap { latest[$0] }
        let defaultZone = rows.filter { $0.deleted.zoneID.isDefaultZone }
        let customZones = rows.filter { !$0.deleted.zoneID.isDefaultZone }
        if !defaultZone.isEmpty { try await mark(defaultZone, generations: servedGenerations, in: transaction) }
        guard !customZones.isEmpty else { return }
        // One statement per zone: the primary key finds each row (the zone's other rows are not read).
        for zoneRows in customZones.groupedByZone({ ZoneKey(database: $0.deleted.database, zoneName: $0.deleted.zoneID.zoneName) }) {
            guard let first = zoneRows.first else { continue }
            let names = zoneRows.map(\.deleted.recordName)
            try await transaction.connection.query("""
                DELETE FROM query_index.records AS r
                USING unnest(\(names)::text[], \(zoneRows.map(\.version))::int8[]) AS d(record_name, version)
                WHERE r.generation = (SELECT generation FROM query_index.generations WHERE state = 'live')
                  AND \(zone: first.deleted.zoneID.zoneName, of: first.deleted.database) AND r.record_name = ANY(\(names))
                  AND r.record_name = d.record_name AND r.version < d.version
                """, logger: transaction.logger)
        }
        try await mark(customZones, generations: buildingGenerations, in: transaction)
    }

    /// Deletion markers for a run of deletions in one generation (a rebuild's path): what marking
    /// them one by one leaves, a record named twice taking its latest.
    static func mark(_ deletions: [(deleted: RecordDeleted, version: Int64)], generation: Int, in transaction: Transaction) async throws {
        let rows = latestPerRecord(deletions) {
            (RecordKey(database: $0.deleted.database, zoneName: $0.deleted.zoneID.zoneName, recordName: $0.deleted.recordName), $0.version)
        }
        guard !rows.isEmpty else { return }
        try await mark(rows, generations: "ARRAY[\(generation)]", in: transaction)
    }

    /// Deletion markers for `rows` in the generations `generations` (SQL for an int[]) names.
    private static func mark(_ rows: [(deleted: RecordDeleted, version: Int64)], generations: String, in transaction: Transaction) async throws {
        try await transaction.connection.query("""
            INSERT INTO query_index.records AS r (generation, container, environment, scope, owner, zone_name, record_name, record_type, version, deleted)
            SELECT g, d.container, d.environment, d.scope, d.owner, d.zone_name, d.record_name, d.record_type, d.version, true
            FROM unnest(\(rows.map(\.deleted.database.container))::text[], \(rows.map(\.deleted.database.environment.rawValue))::text[],
                        \(rows.map(\.deleted.database.scope.rawValue))::text[], \(rows.map(\.deleted.database.owner))::text[],
                        \(rows.map(\.deleted.zoneID.zoneName))::text[], \(rows.map(\.deleted.recordName))::text[],
                        \(rows.map(\.deleted.recordType))::text[], \(rows.map(\.version))::int8[])
                 AS d(container, environment, scope, owner, zone_name, record_name, record_type, version)
            CROSS JOIN unnest(\(unescaped: generations)::int[]) AS g
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
        // Crosses owners: a replay empties the worker's whole projection (each node's, when sharded).
        try await transaction.connection.query("DELETE FROM query_index.records", logger: transaction.logger)
        try await transaction.connection.query("DELETE FROM query_index.generations WHERE state <> 'live'", logger: transaction.logger)
    }

    /// The generations a live event goes to when the caller names none: the one serving queries and
    /// any being built. Read inside each write statement rather than by a query of its own, so an
    /// event costs the indexer one round trip.
    private static let servedGenerations = "ARRAY(SELECT generation FROM query_index.generations WHERE state IN ('live', 'building'))"
    /// One record of the index, for keeping the latest of a run's events per record: its names
    /// compared by their bytes as PostgreSQL compares them ("é" as U+00E9 and "e" + U+0301 are two
    /// records, though Swift calls them equal).
    private struct RecordKey: Hashable {
        var database: DatabaseID
        var zoneName: ExactName
        var recordName: ExactName

        init(database: DatabaseID, zoneName: String, recordName: String) {
            self.database = database
            self.zoneName = ExactName(zoneName)
            self.recordName = ExactName(recordName)
        }
    }

    /// The generations a rebuild is filling, read the same way.
    private static let buildingGenerations = "ARRAY(SELECT generation FROM query_index.generations WHERE state = 'building')"
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

    /// A page of the log read for a rebuild: its saves and deletions decoded (`RecordSaved.indexed`,
    /// `RecordDeleted.withoutImage`) before the page's transaction, so a rebuild can read the next
    /// page while the database writes this one.
    public struct Page: Sendable {
        /// What the page's transaction does, in the events' order.
        enum Step: Sendable {
            /// Saves, as one statement.
            case saves([(saved: RecordSaved.Indexed, version: Int64)])
            /// Deletions, as one statement of deletion markers.
            case deletions([(deleted: RecordDeleted, version: Int64)])
            /// A zone's deletion, or a save or deletion that did not decode (it then fails in the
            /// transaction, and the page is applied event by event).
            case event(EventEnvelope)
        }

        /// The events, in order.
        public let events: [EventEnvelope]
        let steps: [Step]

        /// Whether applying the page depends on the pages before it being applied first: a zone's
        /// deletion removes the zone's rows older than it, so an older save written after it would
        /// stay. Every other write keeps the newer version whatever the order.
        public var dependsOnOrder: Bool { events.contains { $0.type == .zoneDeleted } }

        /// Reads `events` (CPU only; no database). Saves and deletions keep the newer version of a
        /// row whatever order they are written in, so between two zone deletions every save is one
        /// statement and every deletion another; events the index does not hold (zones created,
        /// subscriptions, shares) are passed over rather than splitting them.
        public init(_ events: [EventEnvelope]) {
            self.events = events
            var steps: [Step] = []
            var saves: [(saved: RecordSaved.Indexed, version: Int64)] = []
            var deletions: [(deleted: RecordDeleted, version: Int64)] = []
            func flush() {
                if !saves.isEmpty { steps.append(.saves(saves)) }
                if !deletions.isEmpty { steps.append(.deletions(deletions)) }
                saves.removeAll()
                deletions.removeAll()
            }
            for event in events {
                switch event.type {
                case RecordSaved.eventType:
                    if let saved = try? RecordSaved.indexed(event) {
                        saves.append((saved, event.id))
                        continue
                    }
                case RecordDeleted.eventType:
                    if let deleted = try? RecordDeleted.withoutImage(event) {
                        deletions.append((deleted, event.id))
                        continue
                    }
                case .zoneDeleted:
                    break
                default:
                    continue
                }
                flush()
                steps.append(.event(event))
            }
            flush()
            self.steps = steps
        }
    }

    /// Applies a page of events, in order, to one generation only (the rebuild's path): one
    /// transaction per page, so a rebuild pays one commit per page rather than per event. READ
    /// COMMITTED is enough (every row write keeps the newer version), and it lets the page commit
    /// while the live indexer writes the same generation.
    /// An event that fails for good is left out of the generation and recorded as the indexer's
    /// dead letter, so one poison event never aborts a rebuild.
    public func apply(_ page: Page, to generation: Int, logger: Logger) async throws {
        do {
            // Each run of saves as one statement, as the live indexer writes them.
            try await store.readCommitted(logger: logger) { transaction in
                for step in page.steps {
                    switch step {
                    case .saves(let saves): try await QueryIndexStore.apply(indexed: saves, generations: [generation], in: transaction)
                    case .deletions(let deletions): try await QueryIndexStore.mark(deletions, generation: generation, in: transaction)
                    case .event(let event): try await Self.apply(event, to: generation, in: transaction)
                    }
                }
            }
        } catch where PostgresStore.isPermanent(error) {
            try await store.readCommitted(logger: logger) { transaction in
                for event in page.events {
                    guard let error = try await transaction.isolating({ try await Self.apply(event, to: generation, in: transaction) }) else { continue }
                    let reason = "reindex into generation \(generation): \(PostgresStore.describe(error))"
                    try await DeadLetterStore.record(worker: Self.worker, event: event, reason: reason, in: transaction)
                    logger.error("event left out of the new index generation", metadata: ["event": "\(event.id)", "reason": "\(reason)"])
                }
            }
        }
    }

    /// Writes every record a snapshot of the tables holds into a generation being built, each at the
    /// snapshot's position as its version: an event of the log's tail (above the position) replaces
    /// it, and no event the snapshot already reflects does. One transaction per page of `pageSize`
    /// records. Returns how many records it wrote.
    public func load(_ snapshot: LogSnapshot, into generation: Int, pageSize: Int, logger: Logger) async throws -> Int {
        var cursor = LogSnapshot.RecordCursor()
        var count = 0
        while true {
            try Task.checkCancellation()
            let page = try await snapshot.records(from: cursor, limit: pageSize)
            guard let database = page.database, !page.records.isEmpty else { return count }
            cursor = page.next
            let zoneID = ZoneID(zoneName: page.zoneName, ownerRecordName: database.owner)
            let rows = page.records.map { record in
                (saved: RecordSaved.Indexed(RecordSaved(database: database, zoneID: zoneID, zoneIncarnation: nil, record: record, before: nil)),
                 version: snapshot.position)
            }
            try await store.readCommitted(logger: logger) { transaction in
                try await QueryIndexStore.apply(indexed: rows, generations: [generation], in: transaction)
            }
            count += rows.count
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
            // Crosses owners: a rebuild's generation of the whole index (each node's, when sharded).
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
            // Crosses owners: a rebuild's generation of the whole index (each node's, when sharded).
            try await transaction.connection.execute("""
                DELETE FROM query_index.records WHERE generation IN (SELECT generation FROM query_index.generations WHERE state = 'retired')
                """, logger: transaction.logger)
        }
    }
}
