import Foundation
import Hummingbird
import Logging
import ServiceLifecycle
import StratusAPI
import StratusCore
import StratusKafka
import StratusPostgres
import StratusPush
import StratusRelay
import StratusWorkers

/// Builds and runs each kind of Stratus process.
public enum StratusProcess {
    /// The projection of the worker of this name (`WorkerDefinition.named`), or nil.
    public static func projection(named name: String) -> (any Projection)? {
        WorkerDefinition.named(name)?.projection
    }

    /// The worker names `stratus replay` accepts: every definition's.
    public static let workerNames = WorkerDefinition.all.map(\.name)

    /// Makes the store. Unless `STRATUS_DATABASE_MIN_CONNECTIONS` says otherwise, it keeps every
    /// connection open when `keepsConnectionsOpen` (`stratus-api`, whose requests then never wait for
    /// a connection to open: docs/benchmarks-history.md, "Connections kept open") and none otherwise.
    public static func openStore(
        _ configuration: StratusConfiguration, keepsConnectionsOpen: Bool = false, applicationName: String = "stratus", logger: Logger
    ) throws -> PostgresStore {
        try PostgresStore(
            url: configuration.databaseURL, maxConnections: configuration.databaseMaxConnections,
            minConnections: configuration.databaseMinConnections ?? (keepsConnectionsOpen ? configuration.databaseMaxConnections : 0),
            maxAttempts: configuration.serializableAttempts, timeouts: configuration.databaseTimeouts,
            preparedStatements: configuration.preparedStatements, applicationName: applicationName, logger: logger)
    }

    /// Runs `body` with the store's pool running; stops the pool afterwards.
    public static func withStore<T: Sendable>(
        _ configuration: StratusConfiguration, logger: Logger, _ body: @Sendable (PostgresStore) async throws -> T
    ) async throws -> T {
        let store = try openStore(configuration, logger: logger)
        return try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await store.run() }
            defer { group.cancelAll() }
            return try await body(store)
        }
    }

    /// Fails with an operator-readable message unless every migration is applied (on a short-lived pool,
    /// because a pool runs once and the long-lived one belongs to the service group).
    public static func verifyMigrated(_ configuration: StratusConfiguration, logger: Logger) async throws {
        try await withStore(configuration, logger: logger) { store in try await verifyMigrated(store, logger: logger) }
    }

    /// Fails with an operator-readable message unless every migration is applied.
    public static func verifyMigrated(_ store: PostgresStore, logger: Logger) async throws {
        let migrations = try Migration.load(from: Migration.defaultDirectory())
        try await Migrator(store: store, migrations: migrations).verify(logger: logger)
    }

    /// Fails with an operator-readable message when the loaded librdkafka cannot talk to the broker.
    public static func verifyKafkaLibrary() throws {
        try Librdkafka.ensureSupported()
    }

    /// The owner of the work the API starts off its requests (sync pages read ahead, console
    /// maintenance runs), whose graceful shutdown waits for it until `shutdownDeadline`.
    public static func taskOwner(_ configuration: StratusConfiguration, logger: Logger) -> TaskOwner {
        TaskOwner(name: "stratus-api", deadline: configuration.shutdownDeadline, logger: logger)
    }

    /// `stratus-api`: the HTTP API with the relay embedded (unless `STRATUS_RELAY=off`).
    public static func runAPI(_ configuration: StratusConfiguration, logger: Logger) async throws {
        try await verifyMigrated(configuration, logger: logger)
        let store = try openStore(configuration, keepsConnectionsOpen: true, applicationName: "stratus-api", logger: logger)
        var services: [any Service] = try ProcessTracing.services(configuration.tracing, logger: logger) + [store]
        if configuration.embeddedRelay {
            try verifyKafkaLibrary()
            services.append(Relay(store: store, kafka: configuration.kafka, configuration: configuration.relay, logger: logger))
        }
        let kafka = configuration.kafka
        let tasks = taskOwner(configuration, logger: logger)
        var dependencies = APIDependencies(
            store: store,
            readiness: [
                ReadinessCheck(name: "database") { try await store.ping(logger: logger) },
                ReadinessCheck(name: "broker") {
                    _ = try await KafkaAdmin(configuration: kafka, logger: logger).partitionCount(topic: configuration.relay.topic, timeout: .seconds(3))
                },
            ],
            metrics: { Observability.render() }, blobs: configuration.blobStore.makeStore(),
            maintenance: Maintenance.launcher(store: store, broker: Maintenance.Broker(
                kafka: kafka, topic: configuration.relay.topic, consumerGroupSuffix: configuration.worker.consumerGroupSuffix), owner: tasks),
            tasks: tasks, email: emailSender(configuration.emailDelivery, allowInsecureLoopback: configuration.webhookAllowInsecureLoopback, logger: logger))
        if configuration.api.containerMetrics > 0 {
            let metrics = ContainerMetrics(limit: configuration.api.containerMetrics)
            dependencies.containerMetrics = metrics
            services.append(ContainerUsageRefresh(metrics: metrics, store: store, interval: configuration.api.containerMetricsInterval, logger: logger))
        }
        let app = buildApplication(dependencies, configuration: configuration.api, services: services, logger: logger)
        try await app.runService()
    }

    /// The sender of email messages the configuration names, if any.
    static func emailSender(_ delivery: EmailDelivery?, allowInsecureLoopback: Bool, logger: Logger) -> (any EmailSending)? {
        switch delivery {
        case nil: return nil
        case .smtp(let settings): return SMTPSender(settings: settings)
        case .webhook(let url, let secret):
            var webhook = WebhookSenderConfiguration()
            webhook.allowInsecureLoopback = allowInsecureLoopback
            return EmailWebhookSender(url: url, secret: secret, sender: WebhookSender(configuration: webhook, logger: logger))
        }
    }

    /// `stratus relay`: only the relay.
    public static func runRelay(_ configuration: StratusConfiguration, logger: Logger) async throws {
        try verifyKafkaLibrary()
        try await verifyMigrated(configuration, logger: logger)
        let store = try openStore(configuration, logger: logger)
        var services: [any Service] = try ProcessTracing.services(configuration.tracing, logger: logger) + [
            store, Relay(store: store, kafka: configuration.kafka, configuration: configuration.relay, logger: logger),
        ]
        if configuration.metricsPort > 0 {
            services.append(MetricsServer(host: configuration.api.host, port: configuration.metricsPort, logger: logger))
        }
        try await ServiceGroup(configuration: .init(services: services, gracefulShutdownSignals: [.sigterm, .sigint], logger: logger)).run()
    }

    /// A worker executable: the definition's projection behind its consumer group, and the
    /// services it runs beside it.
    public static func runWorker(_ definition: WorkerDefinition, _ configuration: StratusConfiguration, logger: Logger) async throws {
        try verifyKafkaLibrary()
        var logger = logger
        logger[metadataKey: "worker"] = "\(definition.name)"
        try await verifyMigrated(configuration, logger: logger)
        let store = try openStore(configuration, applicationName: definition.name, logger: logger)
        var services: [any Service] = try ProcessTracing.services(configuration.tracing, logger: logger) + [
            store, worker(definition, store: store, configuration, logger: logger),
        ]
        services += definition.services(WorkerContext(store: store, settings: configuration.workerSettings, logger: logger))
        if configuration.metricsPort > 0 {
            services.append(MetricsServer(host: configuration.api.host, port: configuration.metricsPort, logger: logger))
        }
        try await ServiceGroup(configuration: .init(services: services, gracefulShutdownSignals: [.sigterm, .sigint], logger: logger)).run()
    }

    /// The consumer of `definition`'s projection; a projection nobody waits for fetches with the
    /// background fetch wait.
    static func worker(_ definition: WorkerDefinition, store: PostgresStore, _ configuration: StratusConfiguration, logger: Logger) -> Worker {
        var worker = configuration.worker
        if definition.projection.urgency == .background { worker.fetchWait = configuration.backgroundFetchWait }
        return Worker(projection: definition.projection, store: store, kafka: configuration.kafka, configuration: worker, logger: logger)
    }

    /// The entry point of the thin executables: bootstrap, configure, run, and exit with a clear message on failure.
    public static func main(label: String, _ body: @Sendable (StratusConfiguration, Logger) async throws -> Void) async {
        let configuration: StratusConfiguration
        do {
            configuration = try StratusConfiguration.fromEnvironment()
        } catch {
            FileHandle.standardError.write(Data("\(label): \(error)\n".utf8))
            exit(2)
        }
        Observability.bootstrap(level: configuration.logLevel)
        let logger = Logger(label: label)
        configuration.logSecretKeySource(logger)
        do {
            try await body(configuration, logger)
        } catch {
            logger.critical("stopped", metadata: ["error": "\(error)"])
            FileHandle.standardError.write(Data("\(label): \(error)\n".utf8))
            exit(1)
        }
    }
}

/// Reads the containers' usage for `/metrics` every `interval` (`ContainerMetrics.refresh`), so a
/// scrape never counts anything; a failed read is logged and tried again at the next interval.
struct ContainerUsageRefresh: Service {
    let metrics: ContainerMetrics
    let store: PostgresStore
    let interval: Duration
    let logger: Logger

    func run() async throws {
        try await repeatPass(every: interval, what: "reading the containers' usage for /metrics", logger: logger) {
            try await metrics.refresh(store: store, logger: logger)
        }
    }
}
