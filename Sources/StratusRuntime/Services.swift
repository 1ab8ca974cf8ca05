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
    /// The projection each worker executable runs.
    public static func projection(named name: String) -> (any Projection)? {
        switch name {
        case "stratus-indexer": IndexerProjection()
        case "stratus-subscriptions": SubscriptionsProjection()
        // stratus-gc sees every record write once, off the request path: it keeps the records
        // table's planner statistics fresh after a load (a record lookup planned on a young,
        // unanalysed table scans the zone).
        case "stratus-gc": CompositeProjection(name: name, parts: [ExpiryProjection(), AssetReferenceProjection(name: name)], statisticsTable: "records")
        case "stratus-shares": SharesProjection()
        default: nil
        }
    }

    /// The worker names `stratus replay` accepts.
    public static let workerNames = MaintenanceJob.workers

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

    /// `stratus-api`: the HTTP API with the relay embedded (unless `STRATUS_RELAY=off`).
    public static func runAPI(_ configuration: StratusConfiguration, logger: Logger) async throws {
        try await verifyMigrated(configuration, logger: logger)
        let store = try openStore(configuration, keepsConnectionsOpen: true, applicationName: "stratus-api", logger: logger)
        var services: [any Service] = [store]
        if configuration.embeddedRelay {
            try verifyKafkaLibrary()
            services.append(Relay(store: store, kafka: configuration.kafka, configuration: configuration.relay, logger: logger))
        }
        let kafka = configuration.kafka
        let dependencies = APIDependencies(
            store: store,
            readiness: [
                ReadinessCheck(name: "database") { try await store.ping(logger: logger) },
                ReadinessCheck(name: "broker") {
                    _ = try await KafkaAdmin(configuration: kafka, logger: logger).partitionCount(topic: configuration.relay.topic, timeout: .seconds(3))
                },
            ],
            metrics: { Observability.render() }, blobs: configuration.blobStore.makeStore(),
            maintenance: Maintenance.launcher(store: store, broker: Maintenance.Broker(
                kafka: kafka, topic: configuration.relay.topic, consumerGroupSuffix: configuration.worker.consumerGroupSuffix)))
        let app = buildApplication(dependencies, configuration: configuration.api, services: services, logger: logger)
        try await app.runService()
    }

    /// `stratus relay`: only the relay.
    public static func runRelay(_ configuration: StratusConfiguration, logger: Logger) async throws {
        try verifyKafkaLibrary()
        try await verifyMigrated(configuration, logger: logger)
        let store = try openStore(configuration, logger: logger)
        var services: [any Service] = [store, Relay(store: store, kafka: configuration.kafka, configuration: configuration.relay, logger: logger)]
        if configuration.metricsPort > 0 {
            services.append(MetricsServer(host: configuration.api.host, port: configuration.metricsPort, logger: logger))
        }
        try await ServiceGroup(configuration: .init(services: services, gracefulShutdownSignals: [.sigterm, .sigint], logger: logger)).run()
    }

    /// A worker executable: its projection behind a consumer group.
    public static func runWorker(named name: String, _ configuration: StratusConfiguration, logger: Logger) async throws {
        guard let projection = projection(named: name) else { throw ConfigurationProblem("unknown worker \(name)") }
        try verifyKafkaLibrary()
        var logger = logger
        logger[metadataKey: "worker"] = "\(name)"
        try await verifyMigrated(configuration, logger: logger)
        let store = try openStore(configuration, applicationName: name, logger: logger)
        var worker = configuration.worker
        if projection.urgency == .background { worker.fetchWait = configuration.backgroundFetchWait }
        var services: [any Service] = [
            store, Worker(projection: projection, store: store, kafka: configuration.kafka, configuration: worker, logger: logger),
        ]
        if name == "stratus-subscriptions" {
            var webhookConfiguration = WebhookSenderConfiguration()
            webhookConfiguration.allowInsecureLoopback = configuration.webhookAllowInsecureLoopback
            let webhooks = WebhookSender(configuration: webhookConfiguration, logger: logger)
            let apns = APNsChannel(store: store, logger: logger)
            services.append(DeliveryDispatcher(
                store: store, channels: [WebhookChannel(sender: webhooks, store: store, logger: logger), apns],
                configuration: configuration.delivery, logger: logger
            ) {
                try? await webhooks.shutdown()
                await apns.shutdown()
            })
        }
        if name == "stratus-gc" {
            services.append(TombstoneCollector(store: store, retention: configuration.tombstoneRetention, logger: logger))
            services.append(OrphanAssetCollector(
                store: store, blobs: configuration.blobStore.makeStore(), grace: configuration.assetGrace,
                interval: configuration.assetCollectionInterval, logger: logger))
            services.append(ExpiredRecordCollector(store: store, configuration: configuration.expiry, logger: logger))
        }
        if configuration.metricsPort > 0 {
            services.append(MetricsServer(host: configuration.api.host, port: configuration.metricsPort, logger: logger))
        }
        try await ServiceGroup(configuration: .init(services: services, gracefulShutdownSignals: [.sigterm, .sigint], logger: logger)).run()
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
