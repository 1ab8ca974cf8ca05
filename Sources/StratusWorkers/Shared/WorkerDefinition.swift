import Logging
import ServiceLifecycle
import StratusBlobStore
import StratusKafka
import StratusPostgres

/// Everything that makes one worker: its name (executable, checkpoints' owner, consumer group), the
/// projection it keeps from the event log, what else it runs in its process (periodic passes, the
/// push dispatcher) from the settings it reads, and how `stratus replay` rebuilds it. One value per
/// worker, each in the worker's own folder (`Indexer/`, `Subscriptions/`, `GC/`, `Shares/`); the
/// executables, the runtime and the admin commands pick a definition instead of naming the worker.
public struct WorkerDefinition: Sendable {
    /// The worker's name: its executable, its checkpoints' owner and, unless a suffix is configured,
    /// its consumer group, e.g. `stratus-indexer`.
    public let name: String
    /// What it keeps from the event log, applied batch by batch behind its consumer group.
    public let projection: any Projection
    private let makeServices: @Sendable (WorkerContext) -> [any Service]
    private let makeReplay: @Sendable (ReplaySource, Logger, @escaping @Sendable (Rebuild.Progress) -> Void) async throws -> Int

    /// Creates a definition. `services`: what the worker runs beside its consumer (none by default);
    /// `seed`: how its projection's state is written from a snapshot of the current tables, so that
    /// a rebuild after the log was pruned starts there and applies the tail (nil: such a rebuild is
    /// refused); `replay`: how `stratus replay` rebuilds it (by default a `Rebuild` of its projection
    /// with that seed).
    public init(
        name: String, projection: any Projection,
        services: @escaping @Sendable (WorkerContext) -> [any Service] = { _ in [] },
        seed: Rebuild.Seed? = nil,
        replay: (@Sendable (ReplaySource, Logger, @escaping @Sendable (Rebuild.Progress) -> Void) async throws -> Int)? = nil
    ) {
        self.name = name
        self.projection = projection
        self.makeServices = services
        self.makeReplay = replay ?? { source, logger, progress in
            try await Rebuild(
                projection: projection, store: source.store, kafka: source.kafka, topic: source.topic,
                consumerGroupSuffix: source.consumerGroupSuffix, seed: seed
            ).run(logger: logger, progress: progress)
        }
    }

    /// Every worker, in the order the console and `stratus replay`'s help list them.
    public static let all: [WorkerDefinition] = [.indexer, .subscriptions, .gc, .shares]

    /// The worker of this name, or nil.
    public static func named(_ name: String) -> WorkerDefinition? {
        all.first { $0.name == name }
    }

    /// The consumer group it reads in under `configuration` (its name, with the configured suffix).
    public func consumerGroup(_ configuration: WorkerConfiguration) -> String {
        configuration.consumerGroup(for: name)
    }

    /// What the worker runs beside its consumer, in the process `context` describes.
    public func services(_ context: WorkerContext) -> [any Service] {
        makeServices(context)
    }

    /// Rebuilds the worker from the event log (`stratus replay <name>`); returns the events read.
    public func replay(from source: ReplaySource, logger: Logger, progress: @escaping @Sendable (Rebuild.Progress) -> Void) async throws -> Int {
        try await makeReplay(source, logger, progress)
    }
}

/// The settings the workers' own services read, each some worker's (`StratusConfiguration`
/// reads them from the environment).
public struct WorkerSettings: Sendable {
    /// stratus-gc: how long tombstones are kept (`TombstoneCollector`).
    public var tombstoneRetention: Duration
    /// stratus-gc: where asset bytes live, how long an asset no record holds is kept and how often
    /// orphans are looked for (`OrphanAssetCollector`).
    public var blobStore: BlobStoreConfiguration
    public var assetGrace: Duration
    public var assetCollectionInterval: Duration
    /// stratus-gc: how expired records are collected (`ExpiredRecordCollector`).
    public var expiry: ExpiryConfiguration
    /// stratus-subscriptions: how pushes are sent (`DeliveryDispatcher`), and whether webhooks may
    /// be called over plain http on a loopback host.
    public var delivery: DeliveryConfiguration
    public var webhookAllowInsecureLoopback: Bool
    /// stratus-gc: how long the event log keeps events (`EventLogPruner`).
    public var eventRetention: EventRetentionConfiguration

    public init(
        tombstoneRetention: Duration, blobStore: BlobStoreConfiguration, assetGrace: Duration, assetCollectionInterval: Duration,
        expiry: ExpiryConfiguration, delivery: DeliveryConfiguration, webhookAllowInsecureLoopback: Bool,
        eventRetention: EventRetentionConfiguration = EventRetentionConfiguration()
    ) {
        self.tombstoneRetention = tombstoneRetention
        self.blobStore = blobStore
        self.assetGrace = assetGrace
        self.assetCollectionInterval = assetCollectionInterval
        self.expiry = expiry
        self.delivery = delivery
        self.webhookAllowInsecureLoopback = webhookAllowInsecureLoopback
        self.eventRetention = eventRetention
    }
}

/// What a worker's services are made with: its process's store, settings and logger.
public struct WorkerContext: Sendable {
    public var store: PostgresStore
    public var settings: WorkerSettings
    public var logger: Logger

    public init(store: PostgresStore, settings: WorkerSettings, logger: Logger) {
        self.store = store
        self.settings = settings
        self.logger = logger
    }
}

/// What a replay reads and moves: the store whose event log it reads, and the broker (without
/// Kafka configuration the worker's consumer group is left alone).
public struct ReplaySource: Sendable {
    public var store: PostgresStore
    public var kafka: KafkaClientConfiguration?
    public var topic: String
    public var consumerGroupSuffix: String?

    public init(store: PostgresStore, kafka: KafkaClientConfiguration?, topic: String, consumerGroupSuffix: String? = nil) {
        self.store = store
        self.kafka = kafka
        self.topic = topic
        self.consumerGroupSuffix = consumerGroupSuffix
    }
}
