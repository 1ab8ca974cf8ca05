import Foundation
import ServiceLifecycle
import StratusAPI
import StratusBlobStore
import StratusCore
import StratusPostgres
@testable import StratusRuntime
import StratusTesting
@testable import StratusWorkers
import XCTest

/// Each worker is one `WorkerDefinition`: the executables, the console and `stratus replay` pick
/// workers from `WorkerDefinition.all`, and a definition carries what its process runs.
final class WorkerDefinitionTests: XCTestCase {
    /// Every worker executable, the console and `stratus replay` know the same workers: the
    /// definitions'.
    func testTheWorkersAreTheirDefinitions() {
        XCTAssertEqual(StratusProcess.workerNames, ["stratus-indexer", "stratus-subscriptions", "stratus-gc", "stratus-shares"])
        XCTAssertEqual(
            try StratusConfiguration.fromEnvironment(["STRATUS_SECRET_KEY": SecretKey.generate().hex]).api.console.workers, StratusProcess.workerNames,
            "the console's workers, whose runs it starts, are the definitions'")
        XCTAssertEqual(APIConfiguration(secretKey: SecretKey.generate()).console.workers, [], "no second list: only the definitions name workers")
        for name in StratusProcess.workerNames {
            XCTAssertEqual(StratusProcess.projection(named: name)?.name, name, "a worker's projection keeps its checkpoints under its name")
        }
        XCTAssertNil(StratusProcess.projection(named: "stratus-api"))
        var configuration = WorkerConfiguration()
        XCTAssertEqual(WorkerDefinition.gc.consumerGroup(configuration), "stratus-gc")
        configuration.consumerGroupSuffix = "t1"
        XCTAssertEqual(WorkerDefinition.gc.consumerGroup(configuration), "stratus-gc.t1")
    }

    /// The maintenance jobs are the reindex and a replay of each worker it is given (the console
    /// gives the definitions'), and a form may name only those.
    func testTheMaintenanceJobsAreAReplayOfEachWorkerGiven() {
        let workers = StratusProcess.workerNames
        XCTAssertEqual(MaintenanceJob.all(workers: workers), [.reindex] + WorkerDefinition.all.map { .replay(worker: $0.name) })
        XCTAssertEqual(MaintenanceJob.all(workers: ["stratus-gc"]).map(\.name), ["reindex", "replay:stratus-gc"])
        XCTAssertEqual(MaintenanceJob.all(workers: []), [.reindex])
        let cases: [(name: String, workers: [String], job: MaintenanceJob?)] = [
            ("reindex", [], .reindex),
            ("replay:stratus-gc", workers, .replay(worker: "stratus-gc")),
            ("replay:stratus-gc", ["stratus-indexer"], nil),
            ("replay:stratus-api", workers, nil),
            ("replay:", workers, nil),
            ("stratus-gc", workers, nil),
            ("", workers, nil),
        ]
        for test in cases {
            XCTAssertEqual(MaintenanceJob(name: test.name, workers: test.workers), test.job, "\(test)")
        }
    }

    /// What each worker's process runs beside its consumer: stratus-gc its four periodic passes,
    /// stratus-subscriptions its dispatcher, the others nothing.
    func testEachDefinitionMakesItsWorkersServicesFromItsSettings() async throws {
        try await TestSupport.withMigratedStore { store, _ in
            let directory = FileManager.default.temporaryDirectory.appendingPathComponent("stratus-workers-\(UUID().uuidString)").path
            defer { try? FileManager.default.removeItem(atPath: directory) }
            var configuration = try StratusConfiguration.fromEnvironment(["STRATUS_DATA_DIR": directory])
            configuration.tombstoneRetention = .seconds(7 * 86_400)
            configuration.expiry.batchSize = 17
            configuration.eventRetention.interval = .seconds(123)
            let context = WorkerContext(store: store, settings: configuration.workerSettings, logger: TestSupport.logger)
            var kinds: [String: [String]] = [:]
            for definition in WorkerDefinition.all {
                let services = definition.services(context)
                kinds[definition.name] = services.map { String(describing: type(of: $0)) }
                if definition.name == "stratus-gc" {
                    XCTAssertEqual((services.first as? TombstoneCollector)?.retention, .seconds(7 * 86_400), "stratus-gc reads its settings")
                    XCTAssertEqual(services.compactMap { $0 as? ExpiredRecordCollector }.first?.configuration.batchSize, 17)
                    XCTAssertEqual(services.compactMap { $0 as? EventLogPruner }.first?.configuration.interval, .seconds(123))
                }
                // They run and stop as the worker's process runs and stops them (which also closes
                // the dispatcher's HTTP clients).
                if services.isEmpty { continue }
                let group = ServiceGroup(configuration: .init(services: services, logger: TestSupport.logger))
                try await withThrowingTaskGroup(of: Void.self) { running in
                    running.addTask { try await group.run() }
                    await group.triggerGracefulShutdown()
                    try await running.waitForAll()
                }
            }
            XCTAssertEqual(kinds, [
                "stratus-indexer": [], "stratus-shares": [], "stratus-subscriptions": ["DeliveryDispatcher"],
                "stratus-gc": ["TombstoneCollector", "OrphanAssetCollector", "ExpiredRecordCollector", "UserDeletionRunner", "EventLogPruner"],
            ])
            // The worker a definition runs consumes its projection in its group.
            let worker = StratusProcess.worker(.gc, store: store, configuration, logger: TestSupport.logger)
            XCTAssertEqual(worker.groupID, "stratus-gc")
            XCTAssertEqual(worker.statistics?.table, "records")
        }
    }
}
