import Foundation
import Logging
import PostgresNIO
import StratusPostgres

extension BenchSuite {
    /// 11. `expireRecords` records, pre-loaded through the API with an expiration an hour away into
    /// four zones and indexed by stratus-gc, are made due at once (their expiration moved to now in
    /// SQL, the bench's fast-forward of the clock, with the wake-up the index sends); then timed until
    /// stratus-gc has deleted the last of them through the write path, while single-record creates
    /// run in another zone at `concurrency` 4.
    func gcExpire(_ client: CloudKitClient, store: PostgresStore) async throws -> ScenarioResult {
        let zones = (0..<4).map { zone("Expire\($0)") }
        for zone in zones { try await client.createZone(zone) }
        let writeZone = zone("ExpireWrites")
        try await client.createZone(writeZone)
        let owner = try await client.userRecordName()
        let perZone = max(1, settings.expireRecords / zones.count)
        let later = Int64(Date().timeIntervalSince1970 * 1000) + 3_600_000
        for zone in zones {
            var next = 0
            while next < perZone {
                let end = min(next + settings.batchSize, perZone)
                _ = try await client.expectOK("records/modify", ["zoneID": ["zoneName": zone], "atomic": true, "operations": (next..<end).map { index in
                    Self.create(["recordName": "x\(index)", "recordType": "Ephemeral", "expirationDate": later, "fields": ["n": ["value": index]] as JSONObject])
                }])
                next = end
            }
        }
        let loaded = Int64(perZone * zones.count)
        let container = target.container
        let logger = logger
        // stratus-gc has indexed every expiration.
        let indexDeadline = ContinuousClock.now + .seconds(300)
        while try await store.withConnection({ connection in
            try await Self.scalar(connection.query("""
                SELECT count(*) FROM record_expirations
                WHERE container = \(container) AND environment = 'development' AND scope = 'private' AND owner = \(owner) AND zone_name = ANY(\(zones))
                """, logger: logger))
        }) < loaded {
            guard ContinuousClock.now < indexDeadline else { throw BenchFailure(description: "stratus-gc did not index the expirations within 300 s") }
            try await Task.sleep(for: .milliseconds(250))
        }
        let clock = ContinuousClock()
        try await store.withConnection { connection in
            try await connection.query("BEGIN", logger: logger)
            for table in ["records", "record_expirations"] {
                try await connection.query(PostgresQuery(unsafeSQL: """
                    UPDATE \(table) SET expires_at = (extract(epoch from now()) * 1000)::bigint
                    WHERE container = $1 AND environment = 'development' AND scope = 'private' AND owner = $2 AND zone_name = ANY($3)
                      AND expires_at IS NOT NULL
                    """, binds: try Self.binds(container, owner, zones)), logger: logger)
            }
            try await connection.query("SELECT pg_notify(\(RecordExpirationIndex.channel), '')", logger: logger)
            try await connection.query("COMMIT", logger: logger)
        }
        let start = clock.now
        let watch = ProcessWatch.current
        let before = await watch?.snapshot()
        async let writes = closedLoop(concurrency: 4, duration: Duration(seconds: settings.seconds), state: { $0 }) { clientIndex, iteration in
            let reply = try await client.post("records/modify", [
                "zoneID": ["zoneName": writeZone], "operations": [Self.create(Self.note("w-\(clientIndex)-\(iteration)", count: iteration))],
            ])
            return reply.status == 200 && reply.errorCode == nil ? .done() : .failed("HTTP \(reply.status) \(reply.errorCode ?? "")")
        }
        var outcome = LoadOutcome()
        let collectDeadline = clock.now + .seconds(600)
        while true {
            // Whether any is left: a look that stops at the first row, so the measuring costs the
            // database next to nothing (a count of the remaining rows, every 10 ms, cost it seconds).
            let left = try await store.withConnection { connection in
                try await Self.scalar(connection.query("""
                    SELECT count(*) FROM (SELECT 1 FROM records
                    WHERE container = \(container) AND environment = 'development' AND scope = 'private' AND owner = \(owner) AND zone_name = ANY(\(zones))
                    LIMIT 1) AS remaining
                    """, logger: logger))
            }
            if left == 0 { break }
            guard clock.now < collectDeadline else {
                outcome.errors = 1
                outcome.failures.append("expired records were still there after 600 s")
                break
            }
            try await Task.sleep(for: .milliseconds(20))
        }
        let elapsed = clock.now - start
        if let watch, let before { outcome.cpu = watch.usage(from: before, to: await watch.snapshot()) }
        let writeLoad = await writes
        outcome.operations = Int(loaded)
        outcome.seconds = elapsed.seconds
        outcome.latencies.record(elapsed)
        return ScenarioResult(
            name: "gc.expire", operation: "expired records deleted by stratus-gc through the write path (events, tombstones) while creates run",
            concurrency: 1, load: outcome, figures: [
                "records": Double(loaded), "recordsPerSecond": elapsed > .zero ? Double(loaded) / elapsed.seconds : 0,
                "writesPerSecond": writeLoad.seconds > 0 ? Double(writeLoad.operations - writeLoad.errors) / writeLoad.seconds : 0,
                "writeP50Ms": writeLoad.latencies.milliseconds(at: 50), "writeP99Ms": writeLoad.latencies.milliseconds(at: 99),
                "writeErrors": Double(writeLoad.errors),
            ])
    }

    private static func binds(_ container: String, _ owner: String, _ zones: [String]) throws -> PostgresBindings {
        var binds = PostgresBindings()
        binds.append(container)
        binds.append(owner)
        binds.append(zones)
        return binds
    }
}
