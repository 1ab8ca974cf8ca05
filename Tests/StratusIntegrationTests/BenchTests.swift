import Foundation
import Hummingbird
import HummingbirdTesting
import PostgresNIO
import StratusAPI
import StratusBench
import StratusCore
import StratusKafka
import StratusPostgres
import StratusRelay
import StratusTesting
import StratusWorkers
import XCTest

/// The benchmark suite, scaled down, against a live API on a real port with the relay and the
/// indexer: every scenario runs, measures something, and finds no error and no lost update.
final class BenchTests: XCTestCase {
    /// Runs the suite with `settings` against a live API (on a real port) with the relay and the
    /// indexer beside it; `processes` picks what it watches from the test's PostgreSQL.
    func runSuite(
        _ settings: BenchSettings, processes: @escaping @Sendable (PostgresStore) async throws -> [WatchedProcess] = { _ in [] },
        loadGenerator: WatchedProcess? = nil,
        _ check: @Sendable (BenchReport, PostgresStore) async throws -> Void
    ) async throws {
        let brokers = try TestSupport.kafkaBrokers()
        let container = "iCloud.com.example.bench"
        try await TestSupport.withMigratedStore { store, url in
            let apiToken = try await ContainerStore(store: store).create(container: container, label: "bench test", logger: TestSupport.logger)
            let configuration = APIConfiguration(secretKey: SecretKey.generate())
            let webAuthToken = WebAuthToken(userRecordName: "_bencher", container: container, expiresAt: Int64(Date().timeIntervalSince1970) + 3600)
                .signed(with: configuration.secretKey)
            let topic = "bench-test-" + UUID().uuidString.prefix(8).lowercased()
            let (relayConfiguration, workerConfiguration) = PipelineFixture().configurations(topic: topic, partitions: 2)
            let kafka = KafkaClientConfiguration(brokers: brokers)
            let relay = Relay(store: store, kafka: kafka, configuration: relayConfiguration, logger: TestSupport.logger)
            let indexer = Worker(projection: IndexerProjection(), store: store, kafka: kafka, configuration: workerConfiguration, logger: TestSupport.logger)
            let subscriptions = Worker(
                projection: SubscriptionsProjection(), store: store, kafka: kafka, configuration: workerConfiguration, logger: TestSupport.logger)
            // stratus-gc: its expiry index and collector.
            let gc = Worker(projection: ExpiryProjection(), store: store, kafka: kafka, configuration: workerConfiguration, logger: TestSupport.logger)
            let shares = Worker(projection: SharesProjection(), store: store, kafka: kafka, configuration: workerConfiguration, logger: TestSupport.logger)
            let collector = ExpiredRecordCollector(store: store, logger: TestSupport.logger)
            // stratus-api's own application (the WebSocket courier and the notification hub with it).
            var apiConfiguration = configuration
            apiConfiguration.host = "127.0.0.1"
            apiConfiguration.port = 0
            let app = buildApplication(APIDependencies(store: store, readiness: [], metrics: { "" }), configuration: apiConfiguration, services: [], logger: TestSupport.logger)
            let watched = try await processes(store)
            let report = try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { try await relay.run() }
                group.addTask { try await indexer.run() }
                group.addTask { try await subscriptions.run() }
                group.addTask { try await gc.run() }
                group.addTask { try await shares.run() }
                group.addTask { try await collector.run() }
                defer { group.cancelAll() }
                return try await app.test(.live) { client in
                    let port = try XCTUnwrap(client.port)
                    let target = BenchTarget(
                        apiURL: "http://127.0.0.1:\(port)", container: container, apiToken: apiToken, webAuthToken: webAuthToken, databaseURL: url,
                        processes: watched, loadGenerator: loadGenerator, secretKey: configuration.secretKey)
                    return try await BenchSuite(target: target, settings: settings, logger: TestSupport.logger).run()
                }
            }
            try await check(report, store)
        }
    }

    func testEveryScenarioRunsCleanAgainstALiveStack() async throws {
        var settings = BenchSettings()
        settings.seconds = 0.5
        settings.concurrency = 4
        settings.queryRecords = 600
        settings.syncRecords = 450
        settings.hotRecords = 2
        settings.lagSamples = 3
        settings.lagAfterIdleSamples = 2
        settings.lagIdleSeconds = 0.2
        settings.indexTimeout = 120
        settings.idleSeconds = 1
        settings.idleQuietSeconds = 0
        settings.notifySamples = 3
        settings.fanoutSubscriptions = 200
        settings.fanoutUsers = 10
        settings.fanoutEvents = 100
        settings.expireRecords = 400
        settings.shareParticipants = 101  // two shares: a hundred participants and one
        settings.shareSamples = 2
        try await runSuite(settings, processes: { _ in [WatchedProcess(name: "tests", pid: getpid())] }) { report, store in
            let expected = [
                "create.c1", "create.c4", "create.c4.zones", "create.c4.onezone-user", "create.c4.zones-user", "limit.create.c1", "limit.create.c4", "limit.create.c4.zones", "limit.batch200.c1",
                "update.c1", "update.c4", "lookup.c1", "lookup.c4", "isolation.onezone.c48", "isolation.zones.c48", "rmw.c4", "batch200.c1",
                "changes.450", "sync.450", "limit.sync.450", "sync.450.max", "limit.sync.450.max",
                "query.equality", "query.range-sort", "query.fulltext", "query.fulltext.settled", "lag.commit-to-query", "lag.after-idle", "notify.lag", "notify.fanout",
                "share.fanout", "asset.upload.1mb", "asset.download.1mb", "asset.upload.50mb", "asset.download.50mb", "gc.expire",
                "rebuild.index", "sdk.initial-sync.450", "sdk.propagation",
            ]
            XCTAssertEqual(report.scenarios.map(\.name), expected)
            for scenario in report.scenarios {
                XCTAssertGreaterThan(scenario.operations, 0, scenario.name)
                XCTAssertEqual(scenario.errors, 0, "\(scenario.name): \(scenario.failures)")
                XCTAssertGreaterThan(scenario.perSecond, 0, scenario.name)
                XCTAssertGreaterThan(scenario.p50, 0, scenario.name)
                XCTAssertLessThanOrEqual(scenario.p50, scenario.p99, scenario.name)
            }
            // One user's writers each in a zone of their own against all in one zone: the ratio is reported.
            XCTAssertGreaterThan(report.scenario("create.c4.zones-user")?.figures["ratioToOneZone"] ?? 0, 0)
            let rmw = try XCTUnwrap(report.scenario("rmw.c4"))
            XCTAssertEqual(rmw.figures["lostUpdates"], 0)
            XCTAssertGreaterThan(rmw.figures["acknowledged"] ?? 0, 0)
            XCTAssertEqual(report.scenario("batch200.c1")?.figures["records"], 600)
            XCTAssertEqual(report.scenario("query.equality")?.figures["emptyAnswers"], 0, "every category has records")
            // Full text once the index has settled, and right after the load against it.
            XCTAssertGreaterThan(report.scenario("query.fulltext.settled")?.figures["overSettled"] ?? 0, 0)
            XCTAssertGreaterThan(report.scenario("rebuild.index")?.figures["events"] ?? 0, 600 + 450)
            // The fanout: every save evaluated against the 200 subscriptions; saves i with i % 8 < 4
            // match one of the user's (categories c0…c3 of each type): 52 of 100.
            let fanout = try XCTUnwrap(report.scenario("notify.fanout"))
            XCTAssertEqual(fanout.figures["events"], 100)
            XCTAssertEqual(fanout.figures["subscriptions"], 200)
            XCTAssertEqual(fanout.figures["notifications"], 52)
            XCTAssertGreaterThan(fanout.figures["eventsPerSecond"] ?? 0, 0)
            // The share fan-out: every participant of both shares saw both changes.
            let share = try XCTUnwrap(report.scenario("share.fanout"))
            XCTAssertEqual(share.figures["participants"], 101)
            XCTAssertEqual(share.figures["shares"], 2)
            XCTAssertEqual(share.operations, 202)
            XCTAssertGreaterThan(share.figures["fanoutMaxMs"] ?? 0, 0, "the fan-out's own part is measured")
            XCTAssertLessThanOrEqual(share.figures["fanoutMaxMs"] ?? .infinity, share.max, "no participant sees a change before it is tracked")
            // The sync engine's full fetch is compared with sync.450 of the same run; its pushes were each handed over.
            let initialSync = try XCTUnwrap(report.scenario("sdk.initial-sync.450"))
            XCTAssertGreaterThan(initialSync.figures["ratioToSync"] ?? 0, 0)
            XCTAssertEqual(initialSync.figures["pageSize"], 200)
            XCTAssertEqual(report.scenario("sdk.propagation")?.operations, 3)
            let expire = try XCTUnwrap(report.scenario("gc.expire"))
            XCTAssertEqual(expire.figures["records"], 400, "every expired record collected")
            XCTAssertGreaterThan(expire.figures["writesPerSecond"] ?? 0, 0, "creates ran while stratus-gc collected")
            XCTAssertEqual(expire.figures["writeErrors"], 0)
            XCTAssertEqual(report.ratios.map(\.scenario), ["create.c1", "create.c4", "create.c4.zones", "batch200.c1", "sync.450", "sync.450.max"])
            for ratio in report.ratios { XCTAssertGreaterThan(ratio.ratio, 0, ratio.scenario) }
            // The largest page is the API's cap (200 here), and the raw limit reads pages of that size.
            XCTAssertEqual(report.scenario("sync.450.max")?.figures["pageSize"], 200)
            XCTAssertEqual(report.scenario("limit.sync.450.max")?.figures["pageSize"], 200)
            XCTAssertEqual(report.scenario("sync.450")?.figures["pageSize"], 200)
            // Each writer of create.c4.zones wrote into a zone of its own user's private database,
            // and each raw writer into a zone of its own.
            let writers = try await store.withConnection { connection in
                let rows = try await connection.query("""
                    SELECT (SELECT count(DISTINCT owner) FROM records WHERE zone_name LIKE 'BenchMine%' AND record_name LIKE 'create.c4.zones-%')::int8,
                           (SELECT count(DISTINCT owner) FROM bench_limit.records WHERE record_name LIKE 'limit-c4.zones-%')::int8
                    """, logger: TestSupport.logger)
                var counts: (Int64, Int64) = (0, 0)
                for try await value in rows.decode((Int64, Int64).self) { counts = value }
                return counts
            }
            XCTAssertEqual(writers.0, 4)
            XCTAssertEqual(writers.1, 4)

            // The raw-limit transactions stay in their own tables: nothing of them reaches the pipeline.
            let leaked = try await store.withConnection { connection in
                let rows = try await connection.query("SELECT count(*)::int8 FROM events WHERE zone_key LIKE 'bench/%'", logger: TestSupport.logger)
                var count: Int64 = -1
                for try await value in rows.decode(Int64.self) { count = value }
                return count
            }
            XCTAssertEqual(leaked, 0)

            // Every timed scenario says what the watched process used meanwhile; the run began idle.
            for scenario in report.scenarios where scenario.name != "rebuild.index" {
                let cpu = try XCTUnwrap(scenario.cpu, scenario.name)
                XCTAssertEqual(cpu.map(\.name), ["tests"], scenario.name)
                XCTAssertGreaterThan(cpu[0].cpuSeconds, 0, "the tests' process served \(scenario.name)")
            }
            XCTAssertEqual(report.idle?.processes.map(\.name), ["tests"])
            // The peak resident memory of each watched process, at the end of the run.
            XCTAssertEqual(report.peakMemory?.map(\.name), ["tests"])
            XCTAssertGreaterThan(report.peakMemory?.first?.peakResidentBytes ?? 0, 1 << 20)

            let decoded = try JSONDecoder().decode(BenchReport.self, from: report.json())
            XCTAssertEqual(decoded.scenarios.map(\.name), expected)
            let table = report.table()
            for name in expected { XCTAssertTrue(table.contains(name), name) }
            XCTAssertTrue(table.contains("CPU under load"))
            XCTAssertTrue(table.contains("Peak resident memory"))
            XCTAssertEqual(decoded.peakMemory?.map(\.name), ["tests"])
            XCTAssertFalse(table.contains("Scale:"), "the scale run is not part of the suite")
            print(table)
        }
    }

    /// The scale run, tiny: 2,000 records over 4 zones, measured after 500 (the probe zone's
    /// share) and after 2,000.
    /// storage.churn, scaled down: records updated twice in partitions of a thousand ids; the log
    /// ends holding no more than its open partitions, and the index rebuilt from a snapshot plus
    /// the tail equals the one replayed from the whole log.
    func testStorageChurnEndsWithABoundedLogAndTheSameIndex() async throws {
        var settings = BenchSettings()
        settings.groups = ["storage"]
        settings.churnRecords = 1_000
        settings.churnUpdates = 2
        settings.concurrency = 2
        settings.indexTimeout = 120
        try await runSuite(settings) { report, store in
            XCTAssertEqual(report.scenarios.map(\.name), ["storage.churn"])
            let churn = try XCTUnwrap(report.scenario("storage.churn"))
            XCTAssertEqual(churn.errors, 0, "\(churn.failures)")
            XCTAssertEqual(churn.figures["indexEqualsReplay"], 1)
            XCTAssertEqual(churn.figures["indexRows"], 1_000)
            XCTAssertGreaterThanOrEqual(churn.figures["eventsBefore"] ?? 0, 3_000)
            XCTAssertLessThan(churn.figures["eventsAfter"] ?? .infinity, 1_100, "only the open partition's events are left")
            XCTAssertLessThan(churn.figures["logBytesAfter"] ?? .infinity, churn.figures["logBytesBefore"] ?? 0)
            XCTAssertGreaterThan(churn.figures["bytesPerLiveRecord"] ?? 0, 0)
            let pruned = try await EventLogRetention(store: store).prunedBelow(logger: TestSupport.logger)
            XCTAssertGreaterThan(pruned, 0)
        }
    }

    func testScaleRunMeasuresEachStep() async throws {
        var settings = BenchSettings()
        settings.groups = ["scale"]
        settings.scaleRecords = 2_000
        settings.scaleZones = 4
        settings.seconds = 0.3
        settings.concurrency = 4
        settings.indexTimeout = 120
        settings.scaleIndexTimeout = 120
        try await runSuite(settings) { report, store in
            let measurements = [
                "load", "sync.500", "changes.500", "lookup.c1", "lookup.c4", "query.equality", "query.range-sort", "query.fulltext",
                "zonewide.query.equality", "zonewide.query.range-sort", "zonewide.query.fulltext",
            ]
            let expected = [500, 2_000].flatMap { step in measurements.map { "scale.\(step).\($0)" } }
            XCTAssertEqual(report.scenarios.map(\.name), expected)
            for scenario in report.scenarios {
                XCTAssertGreaterThan(scenario.operations, 0, scenario.name)
                XCTAssertEqual(scenario.errors, 0, "\(scenario.name): \(scenario.failures)")
                XCTAssertGreaterThan(scenario.perSecond, 0, scenario.name)
            }
            XCTAssertEqual(report.scenario("scale.500.load")?.figures["records"], 500)
            XCTAssertEqual(report.scenario("scale.2000.load")?.figures["records"], 1_500)
            XCTAssertNotNil(report.scenario("scale.2000.load")?.figures["indexCatchUpSeconds"])
            for step in [500, 2_000] {
                XCTAssertEqual(report.scenario("scale.\(step).query.equality")?.figures["emptyAnswers"], 0, "the probe zone holds every category")
                XCTAssertEqual(report.scenario("scale.\(step).zonewide.query.equality")?.figures["emptyAnswers"], 0)
            }
            // Every record loaded, 500 a zone.
            let perZone = try await store.withConnection { connection in
                let rows = try await connection.query("""
                    SELECT count(*)::int8 FROM records WHERE zone_name LIKE 'BenchScale%' GROUP BY zone_name ORDER BY zone_name
                    """, logger: TestSupport.logger)
                var counts: [Int64] = []
                for try await value in rows.decode(Int64.self) { counts.append(value) }
                return counts
            }
            XCTAssertEqual(perZone, [500, 500, 500, 500])
            let table = report.table()
            XCTAssertTrue(table.contains("Scale: p50 ms by records loaded"), table)
            XCTAssertTrue(table.contains("zonewide.query.fulltext"), table)
            print(table)
        }
    }

    /// The idle measurement reads each watched process and its children: here the tests' own
    /// process (the API, relay and indexer run in it) and the test PostgreSQL's postmaster with its
    /// backends.
    func testIdleMeasurementReportsEachWatchedProcess() async throws {
        var settings = BenchSettings()
        settings.groups = ["idle", "lag"]
        settings.lagSamples = 2
        settings.lagAfterIdleSamples = 0
        settings.idleSeconds = 2
        settings.idleQuietSeconds = 0.5
        settings.indexTimeout = 120
        let processes: @Sendable (PostgresStore) async throws -> [WatchedProcess] = { store in
            let backend = try await store.withConnection { connection in
                let rows = try await connection.query("SELECT pg_backend_pid()", logger: TestSupport.logger)
                var pid: Int32 = 0
                for try await value in rows.decode(Int32.self) { pid = value }
                return pid
            }
            // A backend's parent is the postmaster.
            let stat = try String(contentsOfFile: "/proc/\(backend)/stat", encoding: .utf8)
            let fields = stat[stat.index(after: try XCTUnwrap(stat.lastIndex(of: ")")))...].split(separator: " ")
            let postmaster = try XCTUnwrap(Int32(fields[1]))
            return [WatchedProcess(name: "tests", pid: getpid()), WatchedProcess(name: "postgres", pid: postmaster)]
        }
        // The tests' process stands in for the load generator too: under load it is shown as both,
        // and the idle measurement, the stack's, leaves the load generator out.
        try await runSuite(settings, processes: processes, loadGenerator: WatchedProcess(name: "load generator", pid: getpid())) { report, _ in
            let idle = try XCTUnwrap(report.idle, "the idle group ran")
            XCTAssertEqual(idle.processes.map(\.name), ["tests", "postgres"])
            XCTAssertEqual(idle.seconds, 2, accuracy: 1)
            for process in idle.processes {
                XCTAssertGreaterThanOrEqual(process.cpuSeconds, 0, process.name)
                XCTAssertEqual(process.percentOfCore, process.cpuSeconds / idle.seconds * 100, accuracy: 0.001, process.name)
                XCTAssertGreaterThanOrEqual(process.processes, 1, process.name)
            }
            let postgres = try XCTUnwrap(idle.processes.last)
            XCTAssertGreaterThan(postgres.processes, 1, "the postmaster's backends and helpers count as PostgreSQL")
            XCTAssertNil(postgres.kafkaClientPercent, "PostgreSQL runs no Kafka client")
            XCTAssertNotNil(idle.processes.first?.kafkaClientPercent, "the tests' relay and indexer run librdkafka threads")
            XCTAssertEqual(idle.totalPercentOfCore, idle.processes.map(\.percentOfCore).reduce(0, +), accuracy: 0.001)
            XCTAssertEqual(report.scenarios.map(\.name), ["lag.commit-to-query"])
            let lag = try XCTUnwrap(report.scenario("lag.commit-to-query")?.cpu)
            XCTAssertEqual(lag.map(\.name), ["tests", "postgres", "load generator"])
            XCTAssertEqual(lag[2].cpuSeconds, lag[0].cpuSeconds, accuracy: 0.05, "the same process read at the same instants")
            XCTAssertGreaterThan(lag[2].cpuSeconds, 0)
            XCTAssertEqual(report.processes.map(\.name), ["tests", "postgres", "load generator"])

            let decoded = try JSONDecoder().decode(BenchReport.self, from: report.json())
            XCTAssertEqual(decoded.idle?.processes.map(\.name), ["tests", "postgres"])
            let table = report.table()
            XCTAssertTrue(table.contains("Idle CPU"), table)
            XCTAssertTrue(table.contains("postgres"), table)
            XCTAssertTrue(table.contains("load generator"), table)
        }
    }
}
