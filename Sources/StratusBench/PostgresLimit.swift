import Foundation
import Logging
import PostgresNIO
import StratusPostgres

/// The physical limit beside the API: the SERIALIZABLE transactions a write needs — the zone's
/// change counter advanced, the record rows written, their events appended and the relay notified —
/// issued straight from the Swift PostgreSQL client, without HTTP, JSON or Stratus's checks. They
/// run on copies of the API's tables (same columns and indexes) in the schema `bench_limit`, so
/// nothing they write reaches the relay or the workers.
struct PostgresLimit: Sendable {
    let store: PostgresStore
    let logger: Logger
    let run: String

    var zoneName: String { "Limit_\(run)" }

    /// The owner of the zone a writer writes to: `_bench` for all of them, or `_bench<n>` for
    /// writer n's own zone (the same zone name in the private database of a user of its own).
    static func owner(_ writer: Int?) -> String { writer.map { "_bench\($0)" } ?? "_bench" }

    func zoneKey(owner: String) -> String { "bench/development/private/\(owner)/\(zoneName)" }

    /// Creates the tables (once) and this run's zones: the shared one and one for each of `writers`.
    func prepare(writers: Int) async throws {
        try await store.withConnection { connection in
            for statement in [
                "CREATE SCHEMA IF NOT EXISTS bench_limit",
                "CREATE TABLE IF NOT EXISTS bench_limit.zones (LIKE public.zones INCLUDING ALL)",
                "CREATE TABLE IF NOT EXISTS bench_limit.records (LIKE public.records INCLUDING ALL)",
                // Its own id sequence: the API's events keep gap-free ids.
                """
                CREATE TABLE IF NOT EXISTS bench_limit.events (
                    id bigserial PRIMARY KEY, zone_key text NOT NULL, zone_sequence bigint, type text NOT NULL,
                    schema_version integer NOT NULL, payload jsonb NOT NULL, causation jsonb NOT NULL,
                    created_at timestamptz NOT NULL DEFAULT now())
                """,
                "CREATE TABLE IF NOT EXISTS bench_limit.unpublished_events (id bigint PRIMARY KEY)",
                "CREATE UNIQUE INDEX IF NOT EXISTS events_zone_sequence ON bench_limit.events (zone_key, zone_sequence) WHERE zone_sequence IS NOT NULL",
            ] {
                try await connection.query(PostgresQuery(unsafeSQL: statement), logger: logger)
            }
            try await connection.query("""
                INSERT INTO bench_limit.zones (container, environment, scope, owner, zone_name, incarnation, change_counter)
                SELECT 'bench', 'development', 'private', owner, \(zoneName), gen_random_uuid(), 0
                FROM unnest(\([Self.owner(nil)] + (0..<writers).map { Self.owner($0) })::text[]) AS t(owner)
                ON CONFLICT DO NOTHING
                """, logger: logger)
        }
    }

    /// Fields and event payload of one record, the size of the write scenarios' records.
    static func document(_ name: String, count: Int, owner: String) -> (fields: String, payload: String) {
        let body = String(repeating: "Lorem ipsum dolor sit amet. ", count: 7)
        let fields = #"{"body":{"type":"STRING","value":"\#(body)"},"count":{"type":"INT64","value":\#(count)},"title":{"type":"STRING","value":"Note \#(name)"}}"#
        let payload = #"{"database":{"container":"bench","environment":"development","scope":"private","owner":"\#(owner)"},"#
            + #""record":{"recordName":"\#(name)","recordType":"Note","fields":\#(fields),"changeTag":"x"}}"#
        return (fields, payload)
    }

    /// One write transaction on `owner`'s zone: lock the zone (as the API does), advance its counter
    /// by `names.count`, insert the records and their events, notify, commit.
    func write(_ names: [String], owner: String = PostgresLimit.owner(nil), on connection: PostgresConnection) async throws {
        let zoneKey = zoneKey(owner: owner)
        try await connection.query("SELECT pg_advisory_lock(hashtextextended(\(zoneKey), 0))", logger: logger)
        do {
            try await connection.query("BEGIN ISOLATION LEVEL SERIALIZABLE", logger: logger)
            let rows = try await connection.query("""
                UPDATE bench_limit.zones SET change_counter = change_counter + \(Int64(names.count)), modified_at = now(),
                    changed_xid = pg_current_xact_id()
                WHERE container = 'bench' AND environment = 'development' AND scope = 'private' AND owner = \(owner) AND zone_name = \(zoneName)
                RETURNING change_counter
                """, logger: logger)
            var last: Int64 = 0
            for try await counter in rows.decode(Int64.self) { last = counter }
            let first = last - Int64(names.count) + 1
            let versions = (0..<Int64(names.count)).map { first + $0 }
            let documents = names.enumerated().map { Self.document($0.element, count: $0.offset, owner: owner) }
            let now = Int64(Date().timeIntervalSince1970 * 1000)
            let tags = names.map { _ in String(UInt64.random(in: 0...UInt64.max), radix: 36) }
            try await connection.query("""
                INSERT INTO bench_limit.records (container, environment, scope, owner, zone_name, record_name, record_type, fields, change_tag,
                    created_at, created_by, modified_at, modified_by, version, created_version)
                SELECT 'bench', 'development', 'private', \(owner), \(zoneName), name, 'Note', fields::jsonb, tag, \(now), \(owner), \(now), \(owner), version, version
                FROM unnest(\(names)::text[], \(documents.map(\.fields))::text[], \(tags)::text[], \(versions)::int8[]) AS t(name, fields, tag, version)
                """, logger: logger)
            try await connection.query("""
                WITH appended AS (
                INSERT INTO bench_limit.events (zone_key, zone_sequence, type, schema_version, payload, causation)
                SELECT \(zoneKey), version, 'record.saved', 1, payload::jsonb, '{"requestID":"bench"}'::jsonb
                FROM unnest(\(documents.map(\.payload))::text[], \(versions)::int8[]) AS t(payload, version)
                RETURNING id)
                INSERT INTO bench_limit.unpublished_events (id) SELECT id FROM appended
                """, logger: logger)
            try await connection.query("SELECT pg_notify('bench_limit', '')", logger: logger)
            try await connection.query("COMMIT", logger: logger)
        } catch {
            _ = try? await connection.query("ROLLBACK", logger: logger)
            _ = try? await connection.query("SELECT pg_advisory_unlock(hashtextextended(\(zoneKey), 0))", logger: logger)
            throw error
        }
        try await connection.query("SELECT pg_advisory_unlock(hashtextextended(\(zoneKey), 0))", logger: logger)
    }

    /// The limit of scenario 1: single-record creates, all in one zone or (`ownZones`) each client
    /// in its own user's zone (`create.c16.zones`).
    func create(concurrency: Int, ownZones: Bool = false, duration: Duration) async -> ScenarioResult {
        let suffix = ownZones ? ".zones" : ""
        let load = await closedLoop(concurrency: concurrency, duration: duration, state: { $0 }) { client, iteration in
            let (name, owner) = ("limit-c\(concurrency)\(suffix)-\(client)-\(iteration)", Self.owner(ownZones ? client : nil))
            // As the API does, a transaction aborted by a serialization failure or deadlock (which
            // SERIALIZABLE writers of different zones can still meet) is tried again, up to eight
            // times, after a random pause that grows with each attempt (two writers aborted together
            // would otherwise meet again at once).
            for attempt in 1...8 {
                do {
                    try await store.withConnection { connection in try await write([name], owner: owner, on: connection) }
                    return attempt == 1 ? .done() : .done(counter: "retried")
                } catch let error as PSQLError where ["40001", "40P01"].contains(error.serverInfo?[.sqlState]) {
                    guard attempt < 8 else { return .failed("SQLSTATE \(error.serverInfo?[.sqlState] ?? "?") after 8 attempts") }
                    try await Task.sleep(for: .milliseconds(Int.random(in: 1...min(200, 2 << attempt))))
                } catch let error as PSQLError {
                    return .failed("SQLSTATE \(error.serverInfo?[.sqlState] ?? "none"), \(error.code)")
                }
            }
            return .failed("unreachable")
        }
        return ScenarioResult(
            name: "limit.create.c\(concurrency)\(suffix)",
            operation: "raw SERIALIZABLE transaction: one record + its event" + (ownZones ? ", each client in a zone of its own" : ""),
            concurrency: concurrency, load: load, figures: ["retried": Double(load.counters["retried"] ?? 0)])
    }

    /// The limit of scenario 2: batches of creates in one transaction.
    func batch(size: Int, duration: Duration) async -> ScenarioResult {
        let load = await closedLoop(concurrency: 1, duration: duration, state: { $0 }) { _, iteration in
            try await store.withConnection { connection in
                try await write((0..<size).map { "limit-b-\(iteration)-\($0)" }, on: connection)
            }
            return .done()
        }
        return ScenarioResult(name: "limit.batch\(size).c1", operation: "raw SERIALIZABLE transaction: \(size) records + events", concurrency: 1, load: load, figures: [
            "recordsPerSecond": load.seconds > 0 ? Double((load.operations - load.errors) * size) / load.seconds : 0,
        ])
    }

    /// The limit of a full sync: the sync zone's records selected by version, `pageSize` a page, and
    /// rendered as CloudKit record dictionaries by PostgreSQL alone (`json_agg(json_build_object(…))`),
    /// one statement a page read whole as text — no HTTP, no token, no Swift decoding or encoding.
    /// Reads the API's own rows of the zone `zoneName` (unique to the run), after one look-up of its key.
    /// `suffix` ends the scenario's name (`.max`: at the API's largest page).
    func sync(zoneName: String, expected: Int, pageSize: Int = 200, suffix: String = "", duration: Duration) async -> ScenarioResult {
        let load = await closedLoop(concurrency: 1, duration: duration, state: { $0 }) { _, _ in
            let changes = try await store.withConnection { connection in
                // The zone's key first: pages filtered by the literal key use the records' (zone, version)
                // index, as the API's do (a join with zones instead scans the table).
                var key: (String, String, String, String)?
                for try await row in try await connection.query("""
                    SELECT container, environment, scope, owner FROM zones WHERE zone_name = \(zoneName) AND NOT deleted
                    """, logger: logger).decode((String, String, String, String).self) { key = row }
                guard let (container, environment, scope, owner) = key else { return 0 }
                var since: Int64 = 0
                var changes = 0
                while true {
                    let rows = try await connection.query("""
                        SELECT count(*)::int8, coalesce(max(version), 0)::int8, coalesce(json_agg(json_build_object(
                            'recordName', record_name, 'recordType', record_type, 'recordChangeTag', change_tag, 'fields', fields,
                            'created', json_build_object('timestamp', created_at, 'userRecordName', created_by, 'deviceID', created_device),
                            'modified', json_build_object('timestamp', modified_at, 'userRecordName', modified_by, 'deviceID', modified_device)
                        ) ORDER BY version), '[]')::text
                        FROM (SELECT * FROM records
                              WHERE container = \(container) AND environment = \(environment) AND scope = \(scope) AND owner = \(owner)
                                AND zone_name = \(zoneName) AND version > \(since)
                              ORDER BY version LIMIT \(pageSize)) page
                        """, logger: logger)
                    var page: (count: Int64, last: Int64, json: String) = (0, 0, "")
                    for try await row in rows.decode((Int64, Int64, String).self) { page = row }
                    changes += Int(page.count)
                    since = page.last
                    if page.count < pageSize { return changes }
                }
            }
            return changes == expected ? .done() : .failed("the raw full sync read \(changes) of \(expected) records")
        }
        return ScenarioResult(name: "limit.sync.\(expected)\(suffix)", operation: "raw pages of \(pageSize) selected by version and rendered as JSON by PostgreSQL",
                              concurrency: 1, load: load, figures: [
            "changesPerSecond": load.seconds > 0 ? Double((load.operations - load.errors) * expected) / load.seconds : 0, "pageSize": Double(pageSize),
        ])
    }
}
