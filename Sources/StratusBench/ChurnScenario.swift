import Foundation
import Logging
import PostgresNIO
import StratusCore
import StratusPostgres
import StratusWorkers

extension BenchSuite {
    /// 14. `storage.churn` (group `storage`, run only when named): `churnRecords` records in
    /// `concurrency` zones, each then updated `churnUpdates` times, in batches of `batchSize`; a
    /// retention pass after every round creates the log's partitions ahead (with a day's window,
    /// so it removes nothing yet). Once every worker has caught up, the query index is rebuilt from
    /// the whole log (a fresh replay), then the retention passes with `churnWindowSeconds` prune
    /// it, and the index is rebuilt again from a snapshot of the records plus the log's tail. The
    /// report gives the log's size before and after in bytes per live record, and whether the two
    /// rebuilt indexes are equal.
    func churn(_ client: CloudKitClient, store: PostgresStore) async throws -> ScenarioResult {
        let zones = (0..<max(1, settings.concurrency)).map { zone("Churn\($0)") }
        for zone in zones { try await client.createZone(zone) }
        let perZone = max(1, settings.churnRecords / zones.count)
        let retention = EventLogRetention(store: store)
        let workers = EventLogPruner.workers
        let partitionEvents = max(EventRetention.partitionEventsRange.lowerBound, Int64(settings.churnPartitionEvents ?? settings.churnRecords))
        let growing = EventRetention.Settings(windowMilliseconds: 86_400_000, partitionEvents: partitionEvents, ahead: 2)
        try await pass(retention, growing, workers)
        let clock = ContinuousClock()
        let start = clock.now
        var outcome = LoadOutcome()
        for round in 0...settings.churnUpdates {
            let batches = try await withThrowingTaskGroup(of: LoadOutcome.self) { group in
                for zone in zones {
                    group.addTask {
                        var done = LoadOutcome()
                        var next = 0
                        while next < perZone {
                            let end = min(next + settings.batchSize, perZone)
                            let operations: [JSONObject] = (next..<end).map { index in
                                var record = Self.note("n\(index)", count: round)
                                record["recordType"] = "Churn"
                                return ["operationType": round == 0 ? "create" : "forceUpdate", "record": record]
                            }
                            let began = clock.now
                            let reply = try await client.post("records/modify", ["zoneID": ["zoneName": zone], "atomic": true, "operations": operations])
                            done.latencies.record(clock.now - began)
                            done.operations += 1
                            if reply.status != 200 || reply.errorCode != nil || reply.records.count != end - next {
                                done.errors += 1
                                if done.failures.count < 5 { done.failures.append("HTTP \(reply.status) \(reply.errorCode ?? "")") }
                            }
                            next = end
                        }
                        return done
                    }
                }
                var all = LoadOutcome()
                for try await batch in group { all.merge(batch) }
                return all
            }
            outcome.merge(batches)
            try await pass(retention, growing, workers)
            progress("storage.churn: round \(round) of \(settings.churnUpdates) written")
        }
        outcome.seconds = (clock.now - start).seconds
        // The scenario measures the log's size, not lag: the four workers, PostgreSQL and the
        // broker share two cores and apply eleven events a record after the writes end (the full
        // run's 1.1 million took stratus-gc about ten minutes), so the wait grows with the events.
        try await caughtUp(store: store, workers: workers,
                           within: max(settings.indexTimeout, Double(perZone * zones.count * (settings.churnUpdates + 1)) / 500))

        let eventsBefore = try await count(store, "SELECT count(*)::bigint FROM events")
        let bytesBefore = try await retention.bytes(logger: logger)
        let replayStart = clock.now
        _ = try await Reindex(store: store).run(start: .log, logger: logger)
        let replaySeconds = (clock.now - replayStart).seconds
        let replayed = try await indexDigest(store)

        let pruneStart = clock.now
        let window = EventRetention.Settings(windowMilliseconds: Int64(settings.churnWindowSeconds * 1000), partitionEvents: partitionEvents, ahead: 2)
        // Passes until one drops nothing more (a pass drops what every reader has passed by then).
        var passes = 0
        while passes < 100 {
            passes += 1
            if try await pass(retention, window, workers).drop.isEmpty { break }
        }
        let pruneSeconds = (clock.now - pruneStart).seconds
        let eventsAfter = try await count(store, "SELECT count(*)::bigint FROM events")
        let bytesAfter = try await retention.bytes(logger: logger)
        let live = try await count(store, "SELECT count(*)::bigint FROM records")

        let rebuildStart = clock.now
        _ = try await Reindex(store: store).run(start: .automatic, logger: logger)
        let rebuildSeconds = (clock.now - rebuildStart).seconds
        let rebuilt = try await indexDigest(store)
        if rebuilt != replayed {
            outcome.errors += 1
            outcome.failures.append("the index rebuilt from the snapshot and the tail differs from a fresh replay of the whole log")
        }
        if eventsAfter > partitionEvents * 3 + Int64(live) / 100 && settings.churnWindowSeconds == 0 {
            outcome.errors += 1
            outcome.failures.append("the log kept \(eventsAfter) events after pruning, more than its open partitions hold")
        }
        return ScenarioResult(
            name: "storage.churn", operation: "records/modify, a batch of \(settings.batchSize) creates or forced updates, then retention and rebuilds",
            concurrency: zones.count, load: outcome, figures: [
                "records": Double(perZone * zones.count), "updates": Double(settings.churnUpdates),
                "eventsBefore": Double(eventsBefore), "eventsAfter": Double(eventsAfter), "liveRecords": Double(live),
                "logBytesBefore": Double(bytesBefore), "logBytesAfter": Double(bytesAfter),
                "bytesPerLiveRecordBefore": live > 0 ? Double(bytesBefore) / Double(live) : 0,
                "bytesPerLiveRecord": live > 0 ? Double(bytesAfter) / Double(live) : 0,
                "partitionEvents": Double(partitionEvents), "windowSeconds": settings.churnWindowSeconds, "prunePasses": Double(passes),
                "pruneSeconds": pruneSeconds, "replaySeconds": replaySeconds, "snapshotRebuildSeconds": rebuildSeconds,
                "indexRows": Double(rebuilt.rows), "indexEqualsReplay": rebuilt == replayed ? 1 : 0,
                "recordsPerSecond": outcome.seconds > 0 ? Double(perZone * zones.count * (settings.churnUpdates + 1)) / outcome.seconds : 0,
            ])
    }

    /// A retention pass, tried again as stratus-gc would when its short lock wait runs out (a
    /// worker's apply holding the log's partition): at most 50 times, a fifth of a second apart.
    @discardableResult
    private func pass(_ retention: EventLogRetention, _ settings: EventRetention.Settings, _ workers: [String]) async throws -> EventRetention.Plan {
        var attempts = 0
        while true {
            do {
                return try await retention.pass(settings: settings, workers: workers, logger: logger)
            } catch let error as StratusError where error.code == .tryAgainLater && attempts < 50 {
                attempts += 1
                try await Task.sleep(for: .milliseconds(200))
            }
        }
    }

    /// Waits until the relay has published everything and every worker's checkpoint of every zone
    /// is at the zone's change counter (at most `seconds`).
    private func caughtUp(store: PostgresStore, workers: [String], within seconds: Double) async throws {
        let deadline = ContinuousClock.now + Duration(seconds: seconds)
        while true {
            let behind = try await count(store, """
                SELECT (SELECT count(*) FROM unpublished_events) + (SELECT count(*) FROM zones z CROSS JOIN unnest('{\(workers.joined(separator: ","))}'::text[]) AS w(worker)
                    LEFT JOIN worker_checkpoints c ON c.worker = w.worker AND c.zone_key = z.zone_key
                    WHERE z.change_counter > coalesce(c.last_sequence, 0))
                """)
            if behind == 0 { return }
            guard ContinuousClock.now < deadline else {
                throw BenchFailure(description: "the workers did not catch up within \(Int(seconds)) s (\(behind) zones or events behind)")
            }
            try await Task.sleep(for: .milliseconds(200))
        }
    }

    /// The live query index's rows (not deletion markers) without their versions, as a digest and a count.
    private func indexDigest(_ store: PostgresStore) async throws -> IndexDigest {
        try await store.withConnection { connection in
            let rows = try await connection.query("""
                SELECT count(*)::bigint, coalesce(md5(string_agg(concat_ws('|', container, environment, scope, owner, zone_name, record_name, record_type,
                                                         created_at, modified_at, record::text, search::text), E'\\n'
                                                  ORDER BY container, environment, scope, owner, zone_name, record_name)), '')
                FROM query_index.records WHERE generation = (SELECT generation FROM query_index.generations WHERE state = 'live') AND NOT deleted
                """, logger: logger)
            for try await (count, digest) in rows.decode((Int64, String).self) { return IndexDigest(rows: Int(count), digest: digest) }
            return IndexDigest(rows: 0, digest: "")
        }
    }

    private func count(_ store: PostgresStore, _ sql: String) async throws -> Int64 {
        try await store.withConnection { connection in
            try await Self.scalar(connection.query(PostgresQuery(unsafeSQL: sql), logger: logger))
        }
    }
}

/// The live index's rows, counted and digested.
struct IndexDigest: Equatable {
    var rows: Int
    var digest: String
}
