import Foundation
import Logging
import PostgresNIO
import StratusCore

/// The event log (outbox): append inside a write transaction; read and mark for the relay; read in
/// order for rebuilds.
public struct EventLog: Sendable {
    /// The channel a commit that appended events notifies; the relay listens on it.
    public static let channel = "stratus_events"

    let store: PostgresStore

    /// Creates the event log over a store.
    public init(store: PostgresStore) { self.store = store }

    /// A zone's change counter set by the statement that appends the zone's events (`append(_:advancing:in:)`).
    struct ZoneAdvance {
        var database: DatabaseID
        var zoneName: String
        /// The counter's new value: the zone sequence of the last event written.
        var counter: Int64

        /// The statement alone, for a counter that moves without events.
        var query: PostgresQuery { "\(counterOf: self)" }
    }

    /// Appends events in the caller's transaction, in one statement whatever their number, queues
    /// them for the relay (`unpublished_events`) and notifies it (delivered at commit): one round
    /// trip. Ids follow the order of `events`. A prepared statement (`Transaction.prepared`): it
    /// inserts what it is given, so its plan never depends on the tables.
    public static func append(_ events: [NewEvent], in transaction: Transaction) async throws {
        try await append(events, advancing: nil, in: transaction)
    }

    /// `append(_:in:)`, with the zone's change counter advanced by the same statement (`advancing`;
    /// nil: no counter changes): a write of a custom zone then costs one round trip fewer.
    static func append(_ events: [NewEvent], advancing zone: ZoneAdvance?, in transaction: Transaction) async throws {
        guard !events.isEmpty else { return }
        for try await _ in try await transaction.prepared(appendQuery(traced(events), advancing: zone)) {}
    }

    /// The events as they are written: under a traced request or apply, each carries its trace on
    /// (the relay's and the workers' spans join it); untraced, as they came.
    static func traced(_ events: [NewEvent]) -> [NewEvent] {
        guard let trace = TraceContext.currentTraceParent() else { return events }
        var events = events
        for index in events.indices where events[index].causation.traceParent == nil { events[index].causation.traceParent = trace }
        return events
    }

    static func appendQuery(_ events: [NewEvent], advancing zone: ZoneAdvance? = nil) -> PostgresQuery {
        """
        WITH \(appending: events, advancing: zone)
        SELECT 1 FROM notified
        """
    }

    /// The oldest unpublished events, in id order.
    public func unpublished(limit: Int, logger: Logger) async throws -> [EventEnvelope] {
        try await store.withConnection { connection in
            // Prepared: unplanned, its plan over the log's partitions took 0.3 ms a poll, twice its
            // run (docs/benchmarks.md, "Worker checkpoints planned once").
            try await Self.decode(connection.query(Self.unpublishedQuery(limit: limit), preparedIn: store.statements, logger: logger))
        }
    }

    /// The relay's read: the queue's first ids as one array, then the events by primary key, in id
    /// order. Not `id IN (SELECT …)`: planned as a join, that depends on the queue's statistics, and
    /// a queue analysed mid-burst (hundreds of rows, drained a moment later) made every poll hash
    /// the whole event log (docs/benchmarks.md, "The relay's read and backlog by primary key").
    static func unpublishedQuery(limit: Int) -> PostgresQuery {
        """
        SELECT \(unescaped: columns) FROM events
        WHERE id = ANY(ARRAY(SELECT id FROM unpublished_events ORDER BY id LIMIT \(limit)))
        ORDER BY id
        """
    }

    /// Events with id greater than `afterID`, in id order: the source for rebuilds and gap fills.
    public func events(after afterID: Int64, limit: Int, logger: Logger) async throws -> [EventEnvelope] {
        try await store.withConnection { connection in
            try await Self.decode(connection.query("""
                SELECT \(unescaped: Self.columns) FROM events WHERE id > \(afterID) ORDER BY id LIMIT \(limit)
                """, logger: logger))
        }
    }

    /// Marks events as acknowledged by the broker: they leave the relay's queue; the events
    /// themselves are not touched.
    public func markPublished(_ ids: [Int64], logger: Logger) async throws {
        guard !ids.isEmpty else { return }
        _ = try await store.withConnection { connection in
            try await connection.query("DELETE FROM unpublished_events WHERE id = ANY(\(ids))", logger: logger)
        }
    }

    /// Gives events the broker refused for good their terminal state: out of the relay's queue, with
    /// the reason in `publish_error`. One statement.
    public func markRejected(_ rejected: [(id: Int64, reason: String)], logger: Logger) async throws {
        guard !rejected.isEmpty else { return }
        _ = try await store.withConnection { connection in
            try await connection.query("""
                WITH dequeued AS (DELETE FROM unpublished_events WHERE id = ANY(\(rejected.map(\.id))))
                UPDATE events SET publish_error = r.reason
                FROM unnest(\(rejected.map(\.id))::int8[], \(rejected.map(\.reason))::text[]) AS r(id, reason)
                WHERE events.id = r.id
                """, logger: logger)
        }
    }

    /// Marks every event with id ≥ `fromID` unpublished so the relay sends it again. Returns how many.
    @discardableResult
    public func republish(from fromID: Int64, logger: Logger) async throws -> Int {
        try await store.withConnection { connection in
            let count = try await Self.requeue(from: fromID, on: connection, logger: logger)
            if count > 0 { try await connection.query("SELECT pg_notify(\(Self.channel), '')", logger: logger) }
            return count
        }
    }

    /// Puts every event with id ≥ `fromID` back in the relay's queue (those not in it already), on
    /// the caller's connection. Returns how many.
    static func requeue(from fromID: Int64, on connection: PostgresConnection, logger: Logger) async throws -> Int {
        let rows = try await connection.query("""
            WITH changed AS (
                INSERT INTO unpublished_events (id) SELECT id FROM events WHERE id >= \(fromID)
                ON CONFLICT (id) DO NOTHING RETURNING 1)
            SELECT count(*)::bigint FROM changed
            """, logger: logger)
        var count = 0
        for try await n in rows.decode(Int64.self) { count = Int(n) }
        return count
    }

    /// Unpublished event count and the age of the oldest, for the relay backlog metric.
    public func backlog(logger: Logger) async throws -> (count: Int64, oldestAgeSeconds: Double) {
        try await store.withConnection { connection in
            let rows = try await connection.query(Self.backlogQuery, logger: logger)
            for try await (count, age) in rows.decode((Int64, Double).self) { return (count, age) }
            return (0, 0)
        }
    }

    /// The queue's length, and the age of its first event (the lowest id: the oldest but for a
    /// transaction that started before another and committed after it) read by primary key: not a
    /// join of the queue with the log, which a queue analysed mid-burst planned as a scan of the log.
    static let backlogQuery: PostgresQuery = """
        SELECT (SELECT count(*) FROM unpublished_events)::bigint,
               coalesce(extract(epoch FROM now() - (
                   SELECT created_at FROM events WHERE id = (SELECT min(id) FROM unpublished_events))), 0)::float8
        """

    /// The highest event id, or 0.
    public func lastID(logger: Logger) async throws -> Int64 {
        try await store.withConnection { connection in
            let rows = try await connection.query("SELECT coalesce(max(id), 0)::bigint FROM events", logger: logger)
            for try await id in rows.decode(Int64.self) { return id }
            return 0
        }
    }

    static let columns = """
        id, zone_key, zone_sequence, type, schema_version, payload::text, causation::text,
        (extract(epoch FROM created_at) * 1000)::bigint
        """

    static func decode<Rows: AsyncSequence>(_ rows: Rows) async throws -> [EventEnvelope] where Rows.Element == PostgresRow {
        var events: [EventEnvelope] = []
        // A transaction's events share one causation: each text is decoded once.
        var causes: [String: Causation] = [:]
        for try await (id, zoneKey, sequence, type, version, payload, causation, createdAt) in rows.decode(
            (Int64, String, Int64?, String, Int, String, String, Int64).self
        ) {
            let cause = causes[causation] ?? (try? EventCoding.decoder.decode(Causation.self, from: Data(causation.utf8))) ?? Causation(requestID: "")
            causes[causation] = cause
            events.append(EventEnvelope(
                id: id, zoneKey: ZoneKey(rawValue: zoneKey), zoneSequence: sequence, type: EventType(type),
                schemaVersion: version, payload: Data(payload.utf8), causation: cause, createdAt: createdAt))
        }
        return events
    }
}

extension EventLog {
    /// A zone's events with sequence in the range, read inside a worker's transaction.
    public static func events(zoneKey: ZoneKey, sequences: ClosedRange<Int64>, in transaction: Transaction) async throws -> [EventEnvelope] {
        try await decode(transaction.connection.query("""
            SELECT \(unescaped: columns) FROM events
            WHERE zone_key = \(zoneKey.rawValue) AND zone_sequence BETWEEN \(sequences.lowerBound) AND \(sequences.upperBound)
            ORDER BY zone_sequence
            """, logger: transaction.logger))
    }
}

extension EventLog {
    /// A zone's events with sequence in the range, in sequence order.
    public func events(zoneKey: ZoneKey, sequences: ClosedRange<Int64>, logger: Logger) async throws -> [EventEnvelope] {
        try await store.withConnection { connection in
            try await Self.decode(connection.query("""
                SELECT \(unescaped: Self.columns) FROM events
                WHERE zone_key = \(zoneKey.rawValue) AND zone_sequence BETWEEN \(sequences.lowerBound) AND \(sequences.upperBound)
                ORDER BY zone_sequence
                """, logger: logger))
        }
    }
}

extension EventLog {
    /// The record as its last `record.saved` event before `eventID` left it, read inside a worker's
    /// transaction: the image a worker falls back on when an event does not carry it (an event of
    /// an older schema, or a value too large to carry). Walks the zone's events backwards.
    public static func lastSavedRecord(zoneKey: ZoneKey, recordName: String, before eventID: Int64, in transaction: Transaction) async throws -> Record? {
        let rows = try await transaction.connection.query("""
            SELECT payload::text FROM events
            WHERE zone_key = \(zoneKey.rawValue) AND id < \(eventID) AND type = \(RecordSaved.eventType.rawValue)
              AND payload->'record'->>'recordName' = \(recordName)
            ORDER BY id DESC LIMIT 1
            """, logger: transaction.logger)
        for try await payload in rows.decode(String.self) {
            return try EventCoding.decoder.decode(RecordSaved.self, from: Data(payload.utf8)).record
        }
        return nil
    }
}

extension PostgresQuery.StringInterpolation {
    /// The common table expressions by which a statement appends events (`EventLog.appendQuery`,
    /// or after a write's own, `thenAppending`): `appended` inserts them in one statement whatever
    /// their number (ids follow their order), `queued` queues them for the relay
    /// (`unpublished_events`), `advanced` (with `zone`) sets the zone's change counter, and
    /// `notified`, which the statement must read, notifies the relay (delivered at commit). It
    /// inserts what it is given, so its plan never depends on the tables.
    mutating func appendInterpolation(appending events: [NewEvent], advancing zone: EventLog.ZoneAdvance?) {
        // Zone sequences start at 1; -1 stands for "none" (default zones) in the array.
        let sequences = events.map { $0.zoneSequence ?? -1 }
        // A transaction's events share one causation, or a few: each is encoded once.
        var causations: [Causation: String] = [:]
        let causationJSON = events.map { event in
            if let known = causations[event.causation] { return known }
            let text = String(decoding: EventCoding.encode(event.causation), as: UTF8.self)
            causations[event.causation] = text
            return text
        }
        appendLiteral("""
            appended AS (
            INSERT INTO events (zone_key, zone_sequence, type, schema_version, payload, causation)
            SELECT zone_key, NULLIF(zone_sequence, -1), type, schema_version::int, payload::jsonb, causation::jsonb
            FROM unnest(
            """)
        appendInterpolation(events.map(\.zoneKey.rawValue))
        appendLiteral("::text[], ")
        appendInterpolation(sequences)
        appendLiteral("::int8[], ")
        appendInterpolation(events.map(\.type.rawValue))
        appendLiteral("::text[],\n            ")
        appendInterpolation(events.map { Int64($0.schemaVersion) })
        appendLiteral("::int8[], ")
        appendInterpolation(events.map { String(decoding: $0.payload, as: UTF8.self) })
        appendLiteral("::text[], ")
        appendInterpolation(causationJSON)
        appendLiteral("""
            ::text[])
                 WITH ORDINALITY AS e(zone_key, zone_sequence, type, schema_version, payload, causation, position)
            ORDER BY position
            RETURNING id),
            queued AS (INSERT INTO unpublished_events (id) SELECT id FROM appended)
            """)
        appendInterpolation(advancing: zone)
        appendLiteral(",\nnotified AS (SELECT pg_notify(")
        appendInterpolation(EventLog.channel)
        appendLiteral(", ''))")
    }

    /// After a statement's own common table expressions: `,` and the append's (`appending`), for
    /// events that are there; nothing without.
    mutating func appendInterpolation(thenAppending events: [NewEvent], advancing zone: EventLog.ZoneAdvance?) {
        guard !events.isEmpty else { return }
        appendLiteral(",\n")
        appendInterpolation(appending: events, advancing: zone)
    }

    /// `,advanced AS (UPDATE zones …)`: the writable CTE by which an append also moves its zone's
    /// counter (PostgreSQL runs a data-modifying WITH whether or not the query reads it); nothing
    /// without one.
    fileprivate mutating func appendInterpolation(advancing zone: EventLog.ZoneAdvance?) {
        guard let zone else { return }
        appendLiteral(",\nadvanced AS (")
        appendInterpolation(counterOf: zone)
        appendLiteral(")")
    }

    /// The UPDATE that sets a zone's change counter.
    fileprivate mutating func appendInterpolation(counterOf zone: EventLog.ZoneAdvance) {
        // Owner key: the zone's five key columns (`zone:of:`, below the counter's value).
        appendLiteral("UPDATE zones SET change_counter = ")
        appendInterpolation(zone.counter)
        appendLiteral(", modified_at = now(), changed_xid = pg_current_xact_id() WHERE ")
        appendInterpolation(zone: zone.zoneName, of: zone.database)
    }
}
