import Logging
import Metrics
import ServiceLifecycle
import StratusCore
import StratusPostgres

/// How long the event log keeps events and how stratus-gc prunes it (`EventLogRetention`).
public struct EventRetentionConfiguration: Sendable {
    /// What each pass keeps: the window, the partitions' size, the partitions kept ahead.
    public var settings: EventRetention.Settings
    /// How often stratus-gc runs a pass.
    public var interval: Duration

    public init(settings: EventRetention.Settings = .init(windowMilliseconds: 7 * 86_400_000), interval: Duration = .seconds(300)) {
        self.settings = settings
        self.interval = interval
    }
}

/// Prunes the event log now and then inside stratus-gc: drops the partitions every worker and the
/// relay have passed and the window no longer holds, and creates the partitions ahead.
public struct EventLogPruner: Service {
    let retention: EventLogRetention
    let configuration: EventRetentionConfiguration
    let logger: Logger
    let dropped = Counter(label: "stratus_gc_event_partitions_dropped_total")

    /// Creates the pruner.
    public init(store: PostgresStore, configuration: EventRetentionConfiguration, logger: Logger) {
        self.retention = EventLogRetention(store: store)
        self.configuration = configuration
        self.logger = logger
    }

    /// The workers whose checkpoints must have passed an event before it is pruned: every worker.
    public static var workers: [String] { WorkerDefinition.all.map(\.name) }

    public func run() async throws {
        try await repeatPass(every: configuration.interval, what: "event log retention", logger: logger) { try await pruneOnce() }
    }

    /// One pass; returns what it did.
    @discardableResult
    public func pruneOnce() async throws -> EventRetention.Plan {
        let plan = try await retention.pass(settings: configuration.settings, workers: Self.workers, logger: logger)
        if !plan.drop.isEmpty { dropped.increment(by: plan.drop.count) }
        return plan
    }
}
