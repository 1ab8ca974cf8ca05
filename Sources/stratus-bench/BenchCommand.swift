import ArgumentParser
import Foundation
import Logging
import StratusBench
import StratusCore

/// `stratus-bench`: drives a running Stratus stack over HTTP and prints the report
/// (scripts/bench.sh starts the stack and calls it; docs/benchmarks.md explains the numbers).
@main
struct BenchCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "stratus-bench",
        abstract: "Run the benchmark suite against a running stratus-api (see scripts/bench.sh).")

    @Option(help: "The API's base URL.")
    var apiURL = "http://127.0.0.1:8080"
    @Option(help: "The container.")
    var container = "iCloud.dev.stratus"
    @Option(help: "A file whose first non-comment line is the container's API token.")
    var apiTokenFile: String
    @Option(help: "A file whose first non-comment line is a web auth token of the benchmark user.")
    var webAuthTokenFile: String
    @Option(help: "The API's PostgreSQL URL (default: $STRATUS_DATABASE_URL).")
    var databaseURL: String?
    @Option(help: "Seconds of each timed scenario.")
    var seconds: Double = 8
    @Option(help: "Clients of the concurrent scenarios.")
    var concurrency = 16
    @Option(help: "Records in the query zone.")
    var queryRecords = 100_000
    @Option(help: "Fields of each query-zone record: 3 (the reference workload) or 10.")
    var itemFields = 3
    @Option(help: "Records in the sync zone.")
    var syncRecords = 10_000
    @Option(help: "Commit-to-visible samples.")
    var lagSamples = 100
    @Option(help: "Commit-to-visible samples after a quiet spell each (lag.after-idle; 0 leaves it out).")
    var lagAfterIdleSamples = 10
    @Option(help: "Record-saved → notification-received samples over the WebSocket courier (notify.lag).")
    var notifySamples = 100
    @Option(help: "Query subscriptions of notify.fanout, spread over --fanout-users users' private databases.")
    var fanoutSubscriptions = 10_000
    @Option(help: "Users (private databases) of notify.fanout.")
    var fanoutUsers = 500
    @Option(help: "Saves stratus-subscriptions evaluates in notify.fanout.")
    var fanoutEvents = 1_000
    @Option(help: "Participants of share.fanout's shared zone.")
    var shareParticipants = 1_000
    @Option(help: "Changes share.fanout times until every participant's database sync shows each.")
    var shareSamples = 5
    @Option(help: "A file holding the API's token-signing key (share.fanout signs its participants in with it; without it share.fanout is left out).")
    var secretKeyFile: String?
    @Option(help: "Expired records stratus-gc collects in gc.expire.")
    var expireRecords = 20_000
    @Option(help: "Seconds the idle measurement samples the stack's CPU.")
    var idleSeconds: Double = 30
    @Option(help: "A process of the stack whose CPU the report shows (idle and under load), as NAME=PID; repeatable. Its children count as part of it.")
    var process: [String] = []
    @Option(help: "Records storage.churn writes and updates (default: $STRATUS_BENCH_CHURN_RECORDS, else 100,000).")
    var churnRecords: Int?
    @Option(help: "Times storage.churn updates each record.")
    var churnUpdates = 10
    @Option(help: "Only these scenario groups, comma-separated: idle, write, limit, isolation, rmw, batch, changes, query, lag, notify, share, asset, gc, rebuild, sdk, storage and hostile (each run only when named), scale.")
    var only: String?
    @Flag(help: "The scale run instead of the suite (with --only: besides those groups): --scale-records over --scale-zones, measured at a hundredth, a tenth and all of them.")
    var scale = false
    @Option(help: "Records the scale run loads.")
    var scaleRecords = 1_000_000
    @Option(help: "Zones the scale run spreads its records over.")
    var scaleZones = 1_000
    @Option(help: "Where to write the JSON report.")
    var output: String?
    @Option(help: "Reuse the zones of an earlier run on the same database (its id: the suffix of its zone names), e.g. to repeat the queries against a stack held by STRATUS_BENCH_HOLD=1 without loading again.")
    var reuseRun: String?

    func run() async throws {
        var logger = Logger(label: "stratus-bench")
        logger.logLevel = .warning
        guard let databaseURL = databaseURL ?? ProcessInfo.processInfo.environment["STRATUS_DATABASE_URL"] else {
            throw ValidationError("--database-url or STRATUS_DATABASE_URL is needed (the raw-PostgreSQL limit and the rebuild run there)")
        }
        let processes = try process.map { argument in
            guard let watched = WatchedProcess(argument: argument) else { throw ValidationError("--process takes NAME=PID, got '\(argument)'") }
            return watched
        }
        let target = BenchTarget(
            apiURL: apiURL, container: container, apiToken: try Self.secret(apiTokenFile), webAuthToken: try Self.secret(webAuthTokenFile),
            databaseURL: databaseURL, processes: processes,
            // With the stack's processes watched, the load generator's own CPU is shown beside them.
            loadGenerator: processes.isEmpty ? nil : WatchedProcess(name: "stratus-bench", pid: getpid()),
            secretKey: try secretKeyFile.map { try SecretKey(text: Self.secret($0)) })
        var settings = BenchSettings()
        settings.seconds = seconds
        settings.concurrency = concurrency
        settings.queryRecords = queryRecords
        guard itemFields == 3 || itemFields == 10 else { throw ValidationError("--item-fields is 3 or 10") }
        settings.itemFields = itemFields
        settings.syncRecords = syncRecords
        settings.lagSamples = lagSamples
        settings.notifySamples = notifySamples
        settings.fanoutSubscriptions = fanoutSubscriptions
        settings.fanoutUsers = fanoutUsers
        settings.fanoutEvents = fanoutEvents
        settings.shareParticipants = shareParticipants
        settings.shareSamples = shareSamples
        settings.expireRecords = expireRecords
        settings.lagAfterIdleSamples = lagAfterIdleSamples
        settings.idleSeconds = idleSeconds
        settings.reuseRun = reuseRun
        let environment = ProcessInfo.processInfo.environment
        let churn = try churnRecords ?? environment["STRATUS_BENCH_CHURN_RECORDS"].map { text in
            guard let value = Int(text) else { throw ValidationError("STRATUS_BENCH_CHURN_RECORDS must be a whole number, got '\(text.prefix(40))'") }
            return value
        } ?? settings.churnRecords
        guard (1...10_000_000).contains(churn), (0...100).contains(churnUpdates) else {
            throw ValidationError("storage.churn writes 1 to 10,000,000 records, updated 0 to 100 times")
        }
        settings.churnRecords = churn
        settings.churnUpdates = churnUpdates
        // The stack's partition size, when scripts/bench.sh set it, is the one storage.churn's passes create too.
        settings.churnPartitionEvents = environment["STRATUS_EVENT_PARTITION_EVENTS"].flatMap { Int($0) }
        settings.groups = only.map { $0.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) } }
        if scale {
            guard (1...10_000).contains(scaleZones), (scaleZones...10_000_000).contains(scaleRecords) else {
                throw ValidationError("--scale-zones is 1 to 10,000 and --scale-records from --scale-zones to 10,000,000")
            }
            settings.scaleRecords = scaleRecords
            settings.scaleZones = scaleZones
            settings.groups = (settings.groups ?? []) + ["scale"]
        }
        let report = try await BenchSuite(target: target, settings: settings, logger: logger) { line in
            print("[bench] \(line)")
        }.run()
        print("")
        print(report.table())
        if let output {
            try report.json().write(to: URL(fileURLWithPath: output))
            print("report: \(output)")
        }
    }

    /// The first line of a secret file that is not a comment.
    static func secret(_ path: String) throws -> String {
        let text = try String(contentsOfFile: path, encoding: .utf8)
        guard let line = text.split(separator: "\n").map({ $0.trimmingCharacters(in: .whitespaces) }).first(where: { !$0.isEmpty && !$0.hasPrefix("#") }) else {
            throw ValidationError("\(path) holds no token")
        }
        return line
    }
}
