import Foundation

/// The suite's knobs; the defaults are the documented full run.
public struct BenchSettings: Codable, Sendable {
    /// Seconds of each timed scenario.
    public var seconds: Double = 8
    /// The "many clients" concurrency.
    public var concurrency: Int = 16
    /// Records per atomic batch.
    public var batchSize: Int = 200
    /// Records in the query zone (loaded by the batch scenario).
    public var queryRecords: Int = 100_000
    /// Fields of each query-zone record: 3 (category, score, title: the reference workload of
    /// docs/benchmarks.md) or 10 (seven more scalars, for the cost of ten field indexes).
    public var itemFields: Int = 3
    /// Longest the batch load may take; the query zone then holds what was loaded.
    public var batchSeconds: Double = 240
    /// Records in the sync zone.
    public var syncRecords: Int = 10_000
    /// Records the read-modify-write clients fight over.
    public var hotRecords: Int = 4
    /// Commit-to-visible samples.
    public var lagSamples: Int = 100
    /// Commit-to-visible samples each taken after the stack was left alone for `lagIdleSeconds`
    /// (long enough for idle workers to stop fetching): the lag of the first write after a quiet spell.
    public var lagAfterIdleSamples: Int = 10
    /// The quiet spell before each of those samples.
    public var lagIdleSeconds: Double = 2.5
    /// Longest wait for the indexer to catch up.
    public var indexTimeout: Double = 600
    /// Seconds the idle measurement samples the stack's CPU while nothing is sent.
    public var idleSeconds: Double = 30
    /// An earlier run's id whose zones this run reuses (nil: a new run with zones of its own).
    public var reuseRun: String?
    /// Seconds the stack is left alone before the idle measurement starts.
    public var idleQuietSeconds: Double = 5
    /// Record-saved → notification-received samples over the WebSocket courier.
    public var notifySamples: Int = 100
    /// Query subscriptions of the fanout scenario, spread over `fanoutUsers` users' private databases.
    public var fanoutSubscriptions: Int = 10_000
    /// The users (private databases) the fanout subscriptions are spread over.
    public var fanoutUsers: Int = 500
    /// Saves the fanout scenario has stratus-subscriptions evaluate.
    public var fanoutEvents: Int = 1_000
    /// Participants of share.fanout's zone (hierarchy shares of at most 100 each).
    public var shareParticipants: Int = 1_000
    /// Changes share.fanout times, each until every participant's database sync shows it.
    public var shareSamples: Int = 5
    /// Expired records the gc.expire scenario has stratus-gc collect.
    public var expireRecords: Int = 20_000
    /// Records the scale run loads (group `scale`).
    public var scaleRecords: Int = 1_000_000
    /// Zones the scale run spreads them over.
    public var scaleZones: Int = 1_000
    /// Longest each step of the scale run may load; a step not loaded by then ends the run.
    public var scaleLoadSeconds: Double = 1_800
    /// Longest the scale run waits for the indexer after each step.
    public var scaleIndexTimeout: Double = 1_800
    /// Records storage.churn writes (group `storage`), each then updated `churnUpdates` times.
    public var churnRecords: Int = 100_000
    public var churnUpdates: Int = 10
    /// The ids a partition of the log spans in storage.churn (nil: `churnRecords`, one round's events).
    public var churnPartitionEvents: Int?
    /// The retention window storage.churn prunes with, in seconds (0: every event all readers passed).
    public var churnWindowSeconds: Double = 0
    /// Only these scenario groups (idle, write, limit, isolation, rmw, batch, changes, query, lag,
    /// notify, share, asset, gc, rebuild, sdk, storage, hostile, scale); nil: all but storage,
    /// hostile and scale, which run only when named.
    public var groups: [String]?

    /// The full run's defaults.
    public init() {}

    /// Whether `group` runs: the scale run, storage.churn and hostile.cpu only when named.
    func runs(_ group: String) -> Bool { groups?.contains(group) ?? !["scale", "storage", "hostile"].contains(group) }
}

/// One scenario's measurements.
public struct ScenarioResult: Codable, Sendable {
    /// A stable key, e.g. `create.c16`.
    public var name: String
    /// What one operation is.
    public var operation: String
    /// Clients issuing operations at once.
    public var concurrency: Int
    /// Operations completed (including failed ones).
    public var operations: Int
    /// Operations that failed.
    public var errors: Int
    /// Wall time of the scenario.
    public var seconds: Double
    /// Operations per second.
    public var perSecond: Double
    /// Latency percentiles of one operation, in milliseconds.
    public var p50: Double
    public var p95: Double
    public var p99: Double
    public var max: Double
    /// Figures particular to the scenario (records/s, conflicts, lost updates, events/s …).
    public var figures: [String: Double]
    /// The first failures, when there were any.
    public var failures: [String]
    /// CPU of each watched process of the stack while the load ran; nil when none was watched.
    public var cpu: [ProcessCPU]?

    init(name: String, operation: String, concurrency: Int, load: LoadOutcome, figures: [String: Double] = [:]) {
        self.name = name
        self.operation = operation
        self.concurrency = concurrency
        operations = load.operations
        errors = load.errors
        seconds = load.seconds
        perSecond = load.seconds > 0 ? Double(load.operations - load.errors) / load.seconds : 0
        p50 = load.latencies.milliseconds(at: 50)
        p95 = load.latencies.milliseconds(at: 95)
        p99 = load.latencies.milliseconds(at: 99)
        max = load.latencies.maxMilliseconds
        self.figures = figures
        failures = load.failures
        cpu = load.cpu
    }
}

/// Stratus's throughput over the raw-PostgreSQL limit for the same work.
public struct LimitRatio: Codable, Sendable {
    /// The Stratus scenario.
    public var scenario: String
    /// The raw-transaction scenario.
    public var limit: String
    /// Stratus operations per second.
    public var stratus: Double
    /// Raw-transaction operations per second.
    public var raw: Double
    /// stratus / raw.
    public var ratio: Double
}

/// The machine a report came from.
public struct Machine: Codable, Sendable {
    public var cores: Int
    public var memoryGiB: Double
    public var cpu: String
    public var system: String

    static func current() -> Machine {
        let cpuInfo = (try? String(contentsOfFile: "/proc/cpuinfo", encoding: .utf8)) ?? ""
        let model = cpuInfo.split(separator: "\n").first { $0.hasPrefix("model name") }
            .map { String($0.split(separator: ":", maxSplits: 1).last ?? "").trimmingCharacters(in: .whitespaces) } ?? "unknown"
        let release = ((try? String(contentsOfFile: "/proc/sys/kernel/osrelease", encoding: .utf8)) ?? "").trimmingCharacters(in: .whitespacesAndNewlines)
        return Machine(
            cores: ProcessInfo.processInfo.activeProcessorCount,
            memoryGiB: (Double(ProcessInfo.processInfo.physicalMemory) / Double(1 << 30) * 10).rounded() / 10,
            cpu: model, system: "Linux \(release)")
    }
}

/// What a run of the suite measured.
public struct BenchReport: Codable, Sendable {
    /// When the run started (ISO 8601).
    public var startedAt: String
    /// Wall time of the whole run.
    public var seconds: Double
    public var machine: Machine
    public var settings: BenchSettings
    /// The processes whose CPU was measured.
    public var processes: [WatchedProcess]
    /// What the stack used while idle, per process; nil when the idle group did not run or no
    /// process was watched.
    public var idle: IdleMeasurement?
    public var scenarios: [ScenarioResult]
    public var ratios: [LimitRatio]
    /// Each watched process's peak resident memory at the end of the run; nil when none was watched.
    public var peakMemory: [ProcessMemory]?

    /// The scenario named `name`.
    public func scenario(_ name: String) -> ScenarioResult? { scenarios.first { $0.name == name } }

    /// The report as pretty JSON.
    public func json() throws -> Data {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        return try encoder.encode(self)
    }

    /// The report as a table for people.
    public func table() -> String {
        func number(_ value: Double, _ digits: Int = 1) -> String { String(format: "%.\(digits)f", value) }
        func pad(_ text: String, _ width: Int, left: Bool = false) -> String {
            text.count >= width ? text : (left ? text + String(repeating: " ", count: width - text.count) : String(repeating: " ", count: width - text.count) + text)
        }
        var lines = [
            "Stratus benchmark — \(startedAt), \(machine.cores) cores, \(number(machine.memoryGiB)) GiB, \(machine.cpu)",
            pad("scenario", 22, left: true) + pad("conc", 5) + pad("ops", 8) + pad("ops/s", 10) + pad("p50 ms", 9) + pad("p95 ms", 9)
                + pad("p99 ms", 9) + pad("errors", 7) + "  notes",
        ]
        for result in scenarios {
            let notes = result.figures.sorted { $0.key < $1.key }.map { "\($0.key)=\(number($0.value, $0.value.rounded() == $0.value ? 0 : 1))" }
                .joined(separator: " ")
            lines.append(pad(result.name, 22, left: true) + pad("\(result.concurrency)", 5) + pad("\(result.operations)", 8)
                + pad(number(result.perSecond), 10) + pad(number(result.p50, 2), 9) + pad(number(result.p95, 2), 9) + pad(number(result.p99, 2), 9)
                + pad("\(result.errors)", 7) + "  " + notes)
        }
        if !ratios.isEmpty {
            lines.append("")
            lines.append("Stratus / raw PostgreSQL limit (the same writes or sync pages from PostgreSQL alone, no HTTP):")
            for ratio in ratios {
                lines.append("  " + pad(ratio.scenario, 18, left: true) + " \(number(ratio.stratus)) / \(number(ratio.raw)) ops/s = " + number(ratio.ratio, 2))
            }
        }
        if let idle {
            lines.append("")
            lines.append("Idle CPU over \(number(idle.seconds, 0)) s, nothing sent (% of one core; Kafka client = librdkafka's threads):")
            for process in idle.processes {
                let kafka = process.kafkaClientPercent.map { "  Kafka client " + number($0, 2) } ?? ""
                lines.append("  " + pad(process.name, 24, left: true) + pad(number(process.percentOfCore, 2), 7) + kafka)
            }
            lines.append("  " + pad("total", 24, left: true) + pad(number(idle.totalPercentOfCore, 2), 7))
        }
        let underLoad = scenarios.filter { $0.cpu != nil }
        if !processes.isEmpty, !underLoad.isEmpty {
            let widths = processes.map { max($0.name.count, 6) + 2 }
            lines.append("")
            lines.append("CPU under load (% of one core, over each scenario's timed load):")
            lines.append(pad("scenario", 22, left: true) + zip(processes, widths).map { pad($0.name, $1) }.joined())
            for result in underLoad {
                let cpu = result.cpu ?? []
                lines.append(pad(result.name, 22, left: true) + zip(processes, widths).map { process, width in
                    pad(cpu.first { $0.name == process.name }.map { number($0.percentOfCore) } ?? "-", width)
                }.joined())
            }
        }
        if let peakMemory, !peakMemory.isEmpty {
            lines.append("")
            lines.append("Peak resident memory at the end of the run (VmHWM; a process alone, without its children):")
            for process in peakMemory {
                lines.append("  " + pad(process.name, 24, left: true) + pad(number(Double(process.peakResidentBytes) / 1_048_576), 9) + " MiB")
            }
        }
        lines += scaleTable()
        for result in scenarios where !result.failures.isEmpty {
            lines.append("failures of \(result.name): " + result.failures.joined(separator: " | "))
        }
        lines.append("total \(number(seconds, 0)) s")
        return lines.joined(separator: "\n")
    }

    /// The scale run's p50 by records loaded: a row per measurement, a column per step.
    func scaleTable() -> [String] {
        var steps: [Int] = []
        var rows: [String] = []
        var p50: [String: Double] = [:]
        for result in scenarios where result.name.hasPrefix("scale.") {
            let parts = result.name.split(separator: ".", maxSplits: 2)
            guard parts.count == 3, let step = Int(parts[1]) else { continue }
            if !steps.contains(step) { steps.append(step) }
            let row = String(parts[2])
            if !rows.contains(row) { rows.append(row) }
            p50["\(step) \(row)"] = row == "load" ? result.figures["recordsPerSecond"] : result.p50
        }
        guard !steps.isEmpty else { return [] }
        let width = 12
        var lines = ["", "Scale: p50 ms by records loaded (load: records/s):",
                     "  " + "measurement".padding(toLength: 26, withPad: " ", startingAt: 0) + steps.map { String(repeating: " ", count: max(0, width - "\($0)".count)) + "\($0)" }.joined()]
        for row in rows {
            lines.append("  " + row.padding(toLength: 26, withPad: " ", startingAt: 0) + steps.map { step in
                let text = p50["\(step) \(row)"].map { String(format: "%.2f", $0) } ?? "-"
                return String(repeating: " ", count: max(0, width - text.count)) + text
            }.joined())
        }
        return lines
    }
}
