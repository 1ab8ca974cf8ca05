import Foundation
import Hummingbird
import HummingbirdTesting
import StratusAPI
import StratusCore
import StratusKafka
import StratusPostgres
import StratusRelay
import StratusTesting
import StratusWorkers

/// The API over a fresh migrated database with one container, its notification hub, and — when
/// `pipeline` — the relay and one worker of `projection` on a topic of the test's own (without it,
/// events stay in the log until the test applies them). `live`: the application `stratus-api` runs
/// (buildApplication, the hub among its services) on a real port, instead of the router in-process.
enum APIPipelineFixture {
    /// Where the stack is, for processes the test starts besides it.
    struct Location: Sendable {
        /// The test database's URL.
        var databaseURL: String
        var brokers: String
        /// The test's own topic.
        var topic: String
        var partitions: Int

        /// The environment a Stratus executable needs to join this stack.
        var settings: [String: String] {
            ["STRATUS_DATABASE_URL": databaseURL, "STRATUS_KAFKA_BROKERS": brokers, "STRATUS_TOPIC": topic, "STRATUS_TOPIC_PARTITIONS": "\(partitions)",
             "STRATUS_CONSUMER_GROUP_SUFFIX": topic]
        }
    }

    static func withStack(
        projection: any Projection, pipeline: Bool, live: Bool = false,
        _ body: @Sendable (RecordAPITests.Fixture, any TestClientProtocol, APIDependencies) async throws -> Void
    ) async throws {
        try await withStack(projection: projection, relay: pipeline, worker: pipeline, live: live) { fixture, client, dependencies, _ in
            try await body(fixture, client, dependencies)
        }
    }

    /// The same, with the relay and the in-process worker each on or off (a test that runs the
    /// worker's executable itself runs only the relay here).
    static func withStack(
        projection: any Projection, relay runsRelay: Bool, worker runsWorker: Bool, live: Bool = false,
        _ body: @Sendable (RecordAPITests.Fixture, any TestClientProtocol, APIDependencies, Location) async throws -> Void
    ) async throws {
        let brokers = try TestSupport.kafkaBrokers()
        try await TestSupport.withMigratedStore { store, url in
            let token = try await ContainerStore(store: store).create(container: "iCloud.com.example.notes", label: "test", logger: TestSupport.logger)
            var configuration = APIConfiguration(secretKey: SecretKey.generate())
            configuration.port = 0
            let fixture = RecordAPITests.Fixture(store: store, configuration: configuration, apiToken: token)
            let pipelineFixture = PipelineFixture()
            let location = Location(databaseURL: url, brokers: brokers, topic: pipelineFixture.uniqueTopic(), partitions: 2)
            let (relayConfiguration, workerConfiguration) = pipelineFixture.configurations(topic: location.topic, partitions: location.partitions)
            let kafka = pipelineFixture.kafka(brokers)
            let relay = Relay(store: store, kafka: kafka, configuration: relayConfiguration, logger: TestSupport.logger)
            let worker = Worker(projection: projection, store: store, kafka: kafka, configuration: workerConfiguration, logger: TestSupport.logger)
            let dependencies = APIDependencies(store: store, readiness: [], metrics: { "" })
            try await withThrowingTaskGroup(of: Void.self) { group in
                if !live { group.addTask { try await dependencies.hub.run() } }
                if runsRelay { group.addTask { try await relay.run() } }
                if runsWorker { group.addTask { try await worker.run() } }
                defer { group.cancelAll() }
                if live {
                    let app = buildApplication(dependencies, configuration: configuration, services: [], logger: TestSupport.logger)
                    try await app.test(.live) { client in try await body(fixture, client, dependencies, location) }
                } else {
                    let router = buildRouter(dependencies, configuration: configuration)
                    try await Application(router: router, logger: TestSupport.logger).test(.router) { client in
                        try await body(fixture, client, dependencies, location)
                    }
                }
            }
        }
    }
}
