import Foundation
import PostgresNIO
import StratusCore
import StratusPostgres
import StratusWorkers

extension BenchSuite {
    /// 4. Single-record lookups of records the update scenario wrote.
    func lookup(_ client: CloudKitClient, concurrency: Int) async throws -> ScenarioResult {
        let zone = zone("Write")
        let many = settings.concurrency
        return await lookups(client, name: "lookup.c\(concurrency)", concurrency: concurrency) { clientIndex, iteration in
            (zone, "u\(many)-\((clientIndex + iteration) % many)-\(iteration % 8)")
        }
    }

    /// Single-record lookups, `concurrency` clients; `pick` names the zone and record of a client's
    /// iteration, which must be found.
    func lookups(
        _ client: CloudKitClient, name: String, concurrency: Int, pick: @escaping @Sendable (Int, Int) -> (zone: String, record: String)
    ) async -> ScenarioResult {
        let load = await closedLoop(concurrency: concurrency, duration: Duration(seconds: settings.seconds), state: { $0 }) { clientIndex, iteration in
            let (zone, record) = pick(clientIndex, iteration)
            // Written and read as JSONValues: 16 clients make as many requests a second as the API
            // answers, on the same two cores.
            let reply = try await client.expectOKValue("records/lookup", .object([
                "zoneID": .object(["zoneName": .string(zone)]), "records": .array([.object(["recordName": .string(record)])]),
            ]))
            guard case .array(let records)? = reply["records"], records.count == 1, records[0]["recordName"]?.stringValue == record else {
                return .failed("records/lookup of \(record) answered another record or none")
            }
            return .done()
        }
        return ScenarioResult(name: name, operation: "records/lookup, one record", concurrency: concurrency, load: load)
    }

    /// 3. Read-modify-write on a few hot records: read, add one, save with the change tag; a stale
    /// tag loses with CONFLICT. Afterwards every counter must equal the acknowledged increments.
    func readModifyWrite(_ client: CloudKitClient) async throws -> ScenarioResult {
        let zone = zone("Hot")
        try await client.createZone(zone)
        let names = (0..<settings.hotRecords).map { "hot-\($0)" }
        _ = try await client.expectOK("records/modify", [
            "zoneID": ["zoneName": zone],
            "operations": names.map { Self.create(["recordName": $0, "recordType": "Counter", "fields": ["value": ["value": 0]] as JSONObject]) },
        ])
        let load = await closedLoop(concurrency: settings.concurrency, duration: Duration(seconds: settings.seconds), state: { $0 }) { clientIndex, iteration in
            let name = names[(clientIndex + iteration) % names.count]
            let read = try await client.expectOK("records/lookup", ["zoneID": ["zoneName": zone], "records": [["recordName": name]]])
            guard let record = read.records.first, let tag = record["recordChangeTag"] as? String,
                  let value = ((record["fields"] as? JSONObject)?["value"] as? JSONObject)?["value"] as? Int
            else { return .failed("lookup of \(name) returned no counter") }
            let write = try await client.post("records/modify", [
                "zoneID": ["zoneName": zone],
                "operations": [["operationType": "update", "record": [
                    "recordName": name, "recordType": "Counter", "recordChangeTag": tag, "fields": ["value": ["value": value + 1]] as JSONObject,
                ] as JSONObject]],
            ])
            if write.status == 200, write.errorCode == nil { return .done(counter: "ack:\(name)") }
            if write.errorCode == "CONFLICT" { return .done(counter: "conflicts") }
            return .failed("HTTP \(write.status) \(write.errorCode ?? "")")
        }
        let final = try await client.expectOK("records/lookup", ["zoneID": ["zoneName": zone], "records": names.map { ["recordName": $0] }])
        var lost = 0
        var acknowledged = 0
        for record in final.records {
            let name = record["recordName"] as? String ?? ""
            let value = ((record["fields"] as? JSONObject)?["value"] as? JSONObject)?["value"] as? Int ?? -1
            let acks = load.counters["ack:\(name)"] ?? 0
            acknowledged += acks
            lost += abs(acks - value)
        }
        let conflicts = load.counters["conflicts"] ?? 0
        return ScenarioResult(name: "rmw.c\(settings.concurrency)", operation: "records/lookup then records/modify update", concurrency: settings.concurrency, load: load, figures: [
            "acknowledged": Double(acknowledged), "conflicts": Double(conflicts), "lostUpdates": Double(lost),
            "conflictRate": load.operations > 0 ? Double(conflicts) / Double(load.operations) : 0,
        ])
    }

    /// 2. Atomic batches of creates, loading the query zone.
    func batchLoad(_ client: CloudKitClient) async throws -> ScenarioResult {
        let zone = zone("Query")
        try await client.createZone(zone)
        let size = settings.batchSize
        let batches = (settings.queryRecords + size - 1) / size
        let run = run
        let load = await closedLoop(concurrency: 1, duration: Duration(seconds: settings.batchSeconds), limit: batches, state: { $0 }) { _, batch in
            let first = batch * size
            let operations = (first..<min(first + size, settings.queryRecords)).map { Self.create(Self.item($0, run: run, fields: settings.itemFields)) }
            // The reply read as a records answer (every byte checked, every record read), not
            // turned into Foundation values: the load generator shares the two cores.
            let reply = try await client.postSummarised("records/modify", ["zoneID": ["zoneName": zone], "operations": operations, "atomic": true])
            guard reply.status == 200, reply.errorCode == nil else { return .failed("HTTP \(reply.status) \(reply.errorCode ?? "")") }
            return reply.records == operations.count ? .done() : .failed("\(reply.records) of \(operations.count) records answered")
        }
        let records = min(settings.queryRecords, (load.operations - load.errors) * size)
        return ScenarioResult(name: "batch\(size).c1", operation: "records/modify, \(size) creates, atomic", concurrency: 1, load: load, figures: [
            "recordsPerSecond": load.seconds > 0 ? Double(records) / load.seconds : 0, "records": Double(records),
        ])
    }

    /// Loads the sync zone with `count` records (not timed as a scenario).
    func loadSyncZone(_ client: CloudKitClient) async throws -> String {
        let zone = zone("Sync")
        try await client.createZone(zone)
        var next = 0
        while next < settings.syncRecords {
            let end = min(next + settings.batchSize, settings.syncRecords)
            _ = try await client.expectOK("records/modify", ["zoneID": ["zoneName": zone], "operations": (next..<end).map {
                Self.create(Self.note("s-\($0)", count: $0))
            }])
            next = end
        }
        return zone
    }

    /// Pulls a zone's changes from no token in pages of `pageSize` (nil: the server's largest)
    /// until `count` changes or the end; returns the changes, the pages and the largest page.
    static func pull(_ client: CloudKitClient, zone: String, count: Int, pageSize: Int?) async throws -> (changes: Int, pages: Int, largestPage: Int) {
        var token: String?
        var changes = 0
        var pages = 0
        var largestPage = 0
        while changes < count {
            var body: [String: JSONValue] = ["zoneID": .object(["zoneName": .string(zone)])]
            if let pageSize { body["resultsLimit"] = .int(Int64(pageSize)) }
            if let token { body["syncToken"] = .string(token) }
            let page = try await client.changesPage(.object(body))
            changes += page.records
            largestPage = max(largestPage, page.records)
            pages += 1
            token = page.syncToken
            guard page.moreComing else { break }
        }
        return (changes, pages, largestPage)
    }

    /// 5. records/changes: the first 1000 changes of the sync zone from no token, in pages of 200.
    func changes(_ client: CloudKitClient, store: PostgresStore) async throws -> ScenarioResult {
        let zone = try await loadSyncZone(client)
        // The workers apply the load before the reads are timed, as before every other timed
        // scenario: otherwise the indexer's catch-up shares the cores with the first pulls.
        try await settle(client)
        return await changes(client, zone: zone, records: settings.syncRecords)
    }

    /// records/changes: the first 1000 changes (at most `records`, the zone's) of `zone`, in pages of 200.
    func changes(_ client: CloudKitClient, zone: String, records: Int, prefix: String = "") async -> ScenarioResult {
        let want = min(1000, records)
        let load = await closedLoop(concurrency: 1, duration: Duration(seconds: settings.seconds), state: { $0 }) { _, _ in
            let (changes, _, _) = try await Self.pull(client, zone: zone, count: want, pageSize: 200)
            return changes == want ? .done() : .failed("pulled \(changes) of \(want) changes")
        }
        return ScenarioResult(name: "\(prefix)changes.\(want)", operation: "records/changes, \(want) changes in pages of 200", concurrency: 1, load: load, figures: [
            "changesPerSecond": load.seconds > 0 ? Double((load.operations - load.errors) * want) / load.seconds : 0,
        ])
    }

    /// 5. A full sync of `zone` (default: the sync zone, 10,000 records) in pages of `pageSize`
    /// (nil: the server's largest, `resultsLimit` left out, named `….max`; the figure `pageSize`
    /// is the largest page it answered).
    func fullSync(_ client: CloudKitClient, zone: String? = nil, records: Int? = nil, pageSize: Int? = 200, prefix: String = "") async -> ScenarioResult {
        let zone = zone ?? self.zone("Sync")
        let want = records ?? settings.syncRecords
        // At least one full sync, however long it takes; more while the time lasts.
        let load = await closedLoop(concurrency: 1, duration: Duration(seconds: settings.seconds), state: { $0 }) { _, _ in
            let (changes, _, largest) = try await Self.pull(client, zone: zone, count: .max, pageSize: pageSize)
            return changes == want ? .done(counter: "page:\(largest)") : .failed("a full sync returned \(changes) of \(want) records")
        }
        let largestPage = load.counters.keys.compactMap { Int($0.dropFirst("page:".count)) }.max() ?? 0
        return ScenarioResult(
            name: "\(prefix)sync.\(want)" + (pageSize == nil ? ".max" : ""),
            operation: "records/changes until moreComing is false, pages of " + (pageSize.map { "\($0)" } ?? "the server's most (resultsLimit left out)"),
            concurrency: 1, load: load, figures: [
                "changesPerSecond": load.seconds > 0 ? Double((load.operations - load.errors) * want) / load.seconds : 0,
                "pageSize": Double(pageSize ?? largestPage),
            ])
    }

    /// 6. Queries on the query zone (or `zone`; nil with `zoneWide`: every zone of the user's
    /// private database): equality, range with a sort, full-text tokens; names start with `prefix`.
    /// `only`: the shapes to run (nil: all); `suffix` ends their names.
    func queries(
        _ client: CloudKitClient, zone: String? = nil, zoneWide: Bool = false, prefix: String = "", only: Set<String>? = nil, suffix: String = ""
    ) async -> [ScenarioResult] {
        let zoneName = zone ?? self.zone("Query")
        let concurrency = 4
        let words = Self.words
        let shapes: [(String, String, @Sendable (Int) -> JSONObject)] = [
            ("query.equality", "category EQUALS (1% of the zone), first 100", { iteration in
                ["recordType": "Item", "filterBy": [["fieldName": "category", "comparator": "EQUALS", "fieldValue": ["value": "c\(iteration % 100)"]]]]
            }),
            ("query.range-sort", "score in a 1% range, sorted by score, first 100", { iteration in
                let low = (iteration * 7919) % 990_000
                return ["recordType": "Item", "filterBy": [
                    ["fieldName": "score", "comparator": "GREATER_THAN_OR_EQUALS", "fieldValue": ["value": low]],
                    ["fieldName": "score", "comparator": "LESS_THAN", "fieldValue": ["value": low + 10_000]],
                ], "sortBy": [["fieldName": "score", "ascending": true]]]
            }),
            ("query.fulltext", "title CONTAINS_ALL_TOKENS of one word, first 100", { iteration in
                ["recordType": "Item", "filterBy": [
                    ["fieldName": "title", "comparator": "CONTAINS_ALL_TOKENS", "fieldValue": ["value": words[(iteration * 31) % words.count]]],
                ]]
            }),
        ]
        var results: [ScenarioResult] = []
        for (name, operation, query) in shapes where only?.contains(name) ?? true {
            let load = await closedLoop(concurrency: concurrency, duration: Duration(seconds: settings.seconds), state: { $0 }) { clientIndex, iteration in
                var body: JSONObject = ["query": query(iteration * concurrency + clientIndex), "resultsLimit": 100]
                if zoneWide { body["zoneWide"] = true } else { body["zoneID"] = ["zoneName": zoneName] }
                let reply = try await client.postSummarised("records/query", body)
                guard reply.status == 200, reply.errorCode == nil else { return .failed("HTTP \(reply.status) \(reply.errorCode ?? "")") }
                return reply.records == 0 ? .done(counter: "empty") : .done(counter: "answered")
            }
            results.append(ScenarioResult(name: prefix + name + suffix, operation: "records/query, " + (zoneWide ? "zone-wide, " : "") + operation, concurrency: concurrency, load: load, figures: [
                "emptyAnswers": Double(load.counters["empty"] ?? 0),
            ]))
        }
        return results
    }

    /// 6b. `query.fulltext` again once the query index has settled: what a vacuum does to it (the
    /// search vector's pending entries merged into its GIN index, the visibility map set) done
    /// now, as autovacuum would in its own time. `overSettled`: the p50 right after the load (the
    /// `query.fulltext` before it) over this one's; issue 49's goal is at most 2.
    func settledFullText(_ client: CloudKitClient, store: PostgresStore, afterLoad: ScenarioResult?) async throws -> ScenarioResult? {
        let logger = logger
        try await store.withConnection { connection in
            _ = try await connection.query("VACUUM (ANALYZE) query_index.records", logger: logger)
        }
        guard var settled = await queries(client, only: ["query.fulltext"], suffix: ".settled").first else { return nil }
        if let afterLoad, settled.p50 > 0 { settled.figures["overSettled"] = afterLoad.p50 / settled.p50 }
        return settled
    }

    /// 7. Commit → visible in records/query: save a record with a unique value, then query for it
    /// until it appears. `afterIdle`: each save follows a quiet spell of `lagIdleSeconds`.
    func lag(_ client: CloudKitClient, afterIdle: Bool = false) async throws -> ScenarioResult {
        let zone = zone(afterIdle ? "LagIdle" : "Lag")
        try await client.createZone(zone)
        let clock = ContinuousClock()
        var outcome = LoadOutcome()
        let watch = ProcessWatch.current
        let before = await watch?.snapshot()
        let start = clock.now
        for sample in 0..<(afterIdle ? settings.lagAfterIdleSamples : settings.lagSamples) {
            if afterIdle { try await Task.sleep(for: Duration(seconds: settings.lagIdleSeconds)) }
            let probe = "p\(sample)"
            _ = try await client.expectOK("records/modify", ["zoneID": ["zoneName": zone], "operations": [
                Self.create(["recordName": probe, "recordType": "Probe", "fields": ["probe": ["value": probe]] as JSONObject]),
            ]])
            let committed = clock.now
            let deadline = committed + .seconds(30)
            var visible = false
            while clock.now < deadline {
                let reply = try await client.post("records/query", ["zoneID": ["zoneName": zone], "query": [
                    "recordType": "Probe", "filterBy": [["fieldName": "probe", "comparator": "EQUALS", "fieldValue": ["value": probe]]],
                ]])
                if !reply.records.isEmpty { visible = true; break }
                try await Task.sleep(for: .milliseconds(1))
            }
            outcome.latencies.record(clock.now - committed)
            outcome.operations += 1
            if !visible {
                outcome.errors += 1
                outcome.failures.append("\(probe) not visible after 30 s")
            }
            try await Task.sleep(for: .milliseconds(20))
        }
        outcome.seconds = (clock.now - start).seconds
        if let watch, let before { outcome.cpu = watch.usage(from: before, to: await watch.snapshot()) }
        if afterIdle {
            return ScenarioResult(
                name: "lag.after-idle", operation: "records/modify acknowledged → visible in records/query, after \(settings.lagIdleSeconds) s of quiet",
                concurrency: 1, load: outcome)
        }
        return ScenarioResult(name: "lag.commit-to-query", operation: "records/modify acknowledged → visible in records/query", concurrency: 1, load: outcome)
    }

    /// 8. The indexer's rebuild: a new query index generation from the whole event log.
    func rebuild(_ store: PostgresStore) async throws -> ScenarioResult {
        let clock = ContinuousClock()
        let start = clock.now
        let (_, events) = try await Reindex(store: store).run(logger: logger)
        let elapsed = clock.now - start
        var outcome = LoadOutcome()
        outcome.operations = 1
        outcome.seconds = elapsed.seconds
        outcome.latencies.record(elapsed)
        return ScenarioResult(name: "rebuild.index", operation: "stratus reindex: every event into a new generation", concurrency: 1, load: outcome, figures: [
            "events": Double(events), "eventsPerSecond": elapsed.seconds > 0 ? Double(events) / elapsed.seconds : 0,
        ])
    }
}
