import Foundation
import Logging
import StratusPostgres
import StratusWorkers

/// The benchmark suite: every scenario of docs/benchmarks.md against a running stack, the raw
/// PostgreSQL limit beside it, and a report.
public struct BenchSuite: Sendable {
    let target: BenchTarget
    let settings: BenchSettings
    let logger: Logger
    let progress: @Sendable (String) -> Void
    /// Distinguishes this run's zones from earlier runs' on the same database.
    let run: String

    /// Creates the suite; `progress` hears a line as each scenario starts and ends.
    public init(target: BenchTarget, settings: BenchSettings, logger: Logger, progress: @escaping @Sendable (String) -> Void = { _ in }) {
        self.target = target
        self.settings = settings
        self.logger = logger
        self.progress = progress
        run = settings.reuseRun ?? String(UInt32.random(in: 0...UInt32.max), radix: 36)
    }

    /// Runs the scenarios in order and reports.
    public func run() async throws -> BenchReport {
        let startedAt = ISO8601DateFormatter().string(from: Date())
        let clock = ContinuousClock()
        let began = clock.now
        let client = CloudKitClient(target: target, connections: max(settings.concurrency, 8) + 4)
        let store = try PostgresStore(url: target.databaseURL, maxConnections: settings.concurrency + 4, logger: logger)
        var results: [ScenarioResult] = []
        var idle: IdleMeasurement?
        let idleWatch = target.processes.isEmpty ? nil : ProcessWatch(processes: target.processes)
        let processes = target.processes + (target.loadGenerator.map { [$0] } ?? [])
        let watch = processes.isEmpty ? nil : ProcessWatch(processes: processes)
        do {
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { try await store.run() }
                defer { group.cancelAll() }
                try await ProcessWatch.$current.withValue(watch) {
                    if settings.runs("idle"), let idleWatch {
                        idle = try await measureIdle(client, watch: idleWatch)
                    }
                    results = try await scenarios(client, store)
                }
            }
        } catch {
            try? await client.shutdown()
            throw error
        }
        try await client.shutdown()
        let peakMemory = await watch?.peakMemory()
        var ratios: [LimitRatio] = []
        let many = settings.concurrency
        for (scenario, limit) in [("create.c1", "limit.create.c1"), ("create.c\(many)", "limit.create.c\(many)"),
                                  ("create.c\(many).zones", "limit.create.c\(many).zones"),
                                  ("batch\(settings.batchSize).c1", "limit.batch\(settings.batchSize).c1"),
                                  ("sync.\(settings.syncRecords)", "limit.sync.\(settings.syncRecords)"),
                                  ("sync.\(settings.syncRecords).max", "limit.sync.\(settings.syncRecords).max")] {
            guard let stratus = results.first(where: { $0.name == scenario }), let raw = results.first(where: { $0.name == limit }), raw.perSecond > 0 else { continue }
            ratios.append(LimitRatio(scenario: scenario, limit: limit, stratus: stratus.perSecond, raw: raw.perSecond, ratio: stratus.perSecond / raw.perSecond))
        }
        return BenchReport(
            startedAt: startedAt, seconds: (clock.now - began).seconds, machine: .current(), settings: settings,
            processes: processes, idle: idle, scenarios: results, ratios: ratios, peakMemory: peakMemory)
    }

    /// CPU of each watched process while nothing is sent: after the indexer has caught up and a
    /// quiet pause, two readings of `/proc` `idleSeconds` apart.
    func measureIdle(_ client: CloudKitClient, watch: ProcessWatch) async throws -> IdleMeasurement {
        try await settle(client)
        progress(String(format: "idle: %.0f s quiet, then %.0f s measured", settings.idleQuietSeconds, settings.idleSeconds))
        try await Task.sleep(for: Duration(seconds: settings.idleQuietSeconds))
        let start = await watch.snapshot()
        try await Task.sleep(for: Duration(seconds: settings.idleSeconds))
        let end = await watch.snapshot()
        let processes = watch.usage(from: start, to: end)
        let idle = IdleMeasurement(
            seconds: (end.at - start.at).seconds, processes: processes, totalPercentOfCore: processes.map(\.percentOfCore).reduce(0, +))
        progress("idle: " + processes.map { String(format: "%@ %.2f%%", $0.name, $0.percentOfCore) }.joined(separator: ", ")
            + String(format: "; total %.2f%% of a core", idle.totalPercentOfCore))
        return idle
    }

    private func scenarios(_ client: CloudKitClient, _ store: PostgresStore) async throws -> [ScenarioResult] {
        var results: [ScenarioResult] = []
        func record(_ result: ScenarioResult) {
            results.append(result)
            progress(String(format: "%@: %.1f ops/s, p50 %.2f ms, p99 %.2f ms, %d errors", result.name, result.perSecond, result.p50, result.p99, result.errors))
        }
        let many = settings.concurrency
        let limit = PostgresLimit(store: store, logger: logger, run: run)
        if settings.runs("write") {
            try await client.createZone(zone("Write"))
            for concurrency in [1, many] {
                try await settle(client)
                record(try await create(client, concurrency: concurrency))
            }
            if let result = try await createInOwnZones(client) { record(result) }
            for result in try await createOneUser(client) { record(result) }
        }
        if settings.runs("limit") {
            try await limit.prepare(writers: many)
            for (concurrency, ownZones) in [(1, false), (many, false), (many, true)] {
                try await settle(client)
                record(await limit.create(concurrency: concurrency, ownZones: ownZones, duration: Duration(seconds: settings.seconds)))
            }
            try await settle(client)
            record(await limit.batch(size: settings.batchSize, duration: Duration(seconds: settings.seconds)))
        }
        if settings.runs("write") {
            for concurrency in [1, many] {
                try await settle(client)
                record(try await update(client, concurrency: concurrency))
            }
            for concurrency in [1, many] {
                record(try await lookup(client, concurrency: concurrency))
            }
        }
        if settings.runs("isolation") {
            for result in try await isolation(client) { record(result) }
        }
        if settings.runs("rmw") {
            try await settle(client)
            record(try await readModifyWrite(client))
        }
        if settings.runs("batch") {
            try await settle(client)
            record(try await batchLoad(client))
        }
        if settings.runs("changes") {
            record(try await changes(client, store: store))
            record(await fullSync(client))
            record(await limit.sync(zoneName: zone("Sync"), expected: settings.syncRecords, duration: Duration(seconds: settings.seconds)))
            // At the largest page the API allows (its resultsLimit cap, STRATUS_MAX_RESULTS), and the raw limit at that page.
            let largest = await fullSync(client, pageSize: nil)
            record(largest)
            record(await limit.sync(
                zoneName: zone("Sync"), expected: settings.syncRecords, pageSize: max(1, Int(largest.figures["pageSize"] ?? 200)), suffix: ".max",
                duration: Duration(seconds: settings.seconds)))
        }
        if settings.runs("query") {
            let catchUp = try await settle(client)
            var fullText: ScenarioResult?
            for (index, var result) in await queries(client).enumerated() {
                if index == 0 { result.figures["indexCatchUpSeconds"] = catchUp }
                if result.name == "query.fulltext" { fullText = result }
                record(result)
            }
            if let settled = try await settledFullText(client, store: store, afterLoad: fullText) { record(settled) }
        }
        if settings.runs("lag") {
            try await settle(client)
            record(try await lag(client))
            if settings.lagAfterIdleSamples > 0 {
                record(try await lag(client, afterIdle: true))
            }
        }
        if settings.runs("notify") {
            try await settle(client)
            record(try await notifyLag(client))
            record(try await notifyFanout(client, store: store))
        }
        if settings.runs("share") {
            try await settle(client)
            if let result = try await shareFanout(client, store: store) { record(result) }
        }
        if settings.runs("asset") {
            for (megabytes, rounds) in [(1, 20), (50, 3)] {
                for result in try await assets(client, megabytes: megabytes, rounds: rounds) { record(result) }
            }
        }
        if settings.runs("gc") {
            try await settle(client)
            record(try await gcExpire(client, store: store))
        }
        if settings.runs("rebuild") {
            record(try await rebuild(store))
        }
        if settings.runs("sdk") {
            for result in try await sdk(measured: results) { record(result) }
        }
        if settings.runs("hostile") {
            for result in try await hostile(client) { record(result) }
        }
        if settings.runs("storage") {
            try await settle(client)
            record(try await churn(client, store: store))
        }
        if settings.runs("scale") {
            try await scale(client, record: record)
        }
        return results
    }

    // MARK: - Data

    func zone(_ name: String) -> String { "Bench\(name)_\(run)" }

    static let words: [String] = {
        let syllables = ["ka", "lo", "mi", "ne", "ru", "ta", "vo", "zi", "pe", "su", "do", "ga", "fi", "ho", "ba", "we", "ly", "xo", "qu", "je"]
        var words: [String] = []
        for first in syllables { for second in syllables { words.append(first + second + "n") } }
        return words  // 400 words
    }()

    /// A record as the write scenarios store it: a title, a count, and a body of about 200 bytes.
    static func note(_ name: String, count: Int) -> JSONObject {
        ["recordName": name, "recordType": "Note", "fields": [
            "title": ["value": "Note \(name)"],
            "count": ["value": count],
            "body": ["value": String(repeating: "Lorem ipsum dolor sit amet. ", count: 7)],
        ] as JSONObject]
    }

    /// A record of the query zone: a category (100 values), a score and a four-word title — with
    /// `fields: 10`, seven more scalars, as a larger app's record type has them
    /// (scripts/bench-schema*.ckdb declare which of them are indexed).
    static func item(_ index: Int, run: String, fields: Int = 3) -> JSONObject {
        var generator = SplitMix(seed: UInt64(index))
        let title = (0..<4).map { _ in words[Int(generator.next() % UInt64(words.count))] }.joined(separator: " ")
        let reference: JSONObject = [
            "category": ["value": "c\(index % 100)"],
            "score": ["value": Int(generator.next() % 1_000_000)],
            "title": ["value": title],
        ]
        guard fields == 10 else { return ["recordName": "item-\(index)", "recordType": "Item", "fields": reference] }
        return ["recordName": "item-\(index)", "recordType": "Item", "fields": reference.merging([
            "rank": ["value": Int(generator.next() % 10_000)],
            "price": ["value": Double(generator.next() % 100_000) / 100, "type": "DOUBLE"],
            "due": ["value": 1_700_000_000_000 + Int(generator.next() % 31_536_000_000), "type": "TIMESTAMP"],
            "status": ["value": ["open", "closed", "waiting", "done"][index % 4]],
            "region": ["value": "r\(generator.next() % 50)"],
            "stock": ["value": Int(generator.next() % 1_000)],
            "rating": ["value": Double(generator.next() % 50) / 10, "type": "DOUBLE"],
        ] as JSONObject) { old, _ in old }]
    }

    static func create(_ record: JSONObject) -> JSONObject { ["operationType": "create", "record": record] }

    // MARK: - Settling

    /// Waits until the indexer has applied every event (so a scenario's background is the same
    /// each time), at most `timeout` seconds (default `indexTimeout`); returns the seconds waited.
    @discardableResult
    func settle(_ client: CloudKitClient, timeout: Double? = nil) async throws -> Double {
        let clock = ContinuousClock()
        let start = clock.now
        let timeout = timeout ?? settings.indexTimeout
        let deadline = start + Duration(seconds: timeout)
        while clock.now < deadline {
            // Zone-wide: the header then counts every zone's backlog, not only the default zone's
            // (the query zone's load was otherwise not waited for).
            let reply = try await client.post("records/query", [
                "zoneWide": true, "query": ["recordType": "Nothing"], "resultsLimit": 1,
            ])
            if reply.status == 200, reply.headers.first(name: "X-Stratus-Index-Behind-Events") == "0" {
                return (clock.now - start).seconds
            }
            try await Task.sleep(for: .milliseconds(50))
        }
        throw BenchFailure(description: "the indexer did not catch up within \(timeout) s")
    }

    // MARK: - Scenarios

    /// 1. Single-record creates in one custom zone.
    func create(_ client: CloudKitClient, concurrency: Int) async throws -> ScenarioResult {
        await creates(
            client, name: "create.c\(concurrency)", operation: "records/modify, one create", concurrency: concurrency, zones: [zone("Write")],
            prefix: "c\(concurrency)")
    }

    /// 1. Single-record updates with the change tag, each client on records of its own.
    func update(_ client: CloudKitClient, concurrency: Int) async throws -> ScenarioResult {
        let zone = zone("Write")
        let perClient = 8
        var tags: [[String]] = []
        for clientIndex in 0..<concurrency {
            let records = (0..<perClient).map { Self.create(Self.note("u\(concurrency)-\(clientIndex)-\($0)", count: 0)) }
            let reply = try await client.expectOK("records/modify", ["zoneID": ["zoneName": zone], "operations": records])
            tags.append(reply.records.map { $0["recordChangeTag"] as? String ?? "" })
        }
        let initial = tags
        struct Writer: Sendable {
            var client: Int
            var tags: [String]
        }
        let load = await closedLoop(concurrency: concurrency, duration: Duration(seconds: settings.seconds), state: { Writer(client: $0, tags: initial[$0]) }) { writer, iteration in
            let slot = iteration % perClient
            var record = Self.note("u\(concurrency)-\(writer.client)-\(slot)", count: iteration)
            record["recordChangeTag"] = writer.tags[slot]
            let reply = try await client.post("records/modify", [
                "zoneID": ["zoneName": zone], "operations": [["operationType": "update", "record": record]],
            ])
            guard reply.status == 200, reply.errorCode == nil, let tag = reply.records.first?["recordChangeTag"] as? String else {
                return .failed("HTTP \(reply.status) \(reply.errorCode ?? "")")
            }
            writer.tags[slot] = tag
            return .done()
        }
        return ScenarioResult(name: "update.c\(concurrency)", operation: "records/modify, one update with its change tag", concurrency: concurrency, load: load)
    }
}
