import Foundation
import Logging
import StratusCore
import StratusKafka
import StratusPostgres

/// Where a rebuild starts.
public enum RebuildStart: Sendable, Equatable {
    /// From a snapshot once retention has pruned the log, else from the log's beginning.
    case automatic
    /// From the log's first event (refused once the log was pruned).
    case log
    /// From a snapshot of the current tables at a log position, then the log's tail after it.
    case snapshot

    /// Whether the rebuild starts from a snapshot; refuses `.log` on a pruned log.
    func usesSnapshot(store: PostgresStore, logger: Logger) async throws -> Bool {
        if self == .snapshot { return true }
        let prunedBelow = try await EventLogRetention(store: store).prunedBelow(logger: logger)
        if self == .log, prunedBelow > 0 {
            throw StratusError(.badRequest, "the event log was pruned below event \(prunedBelow): a rebuild must start from a snapshot")
        }
        return prunedBelow > 0
    }
}

/// Rebuilds a worker's projection from the PostgreSQL event log, then points the worker's consumer
/// group at the topic's end as it was before the rebuild started, so the running worker resumes
/// without a gap. While the log holds its beginning the rebuild reads all of it; once retention
/// pruned it, a projection that can be seeded from the current tables (`seed`) starts from a
/// snapshot of them at a log position (`LogSnapshot`) and reads the tail after it, and one that
/// cannot is refused.
public struct Rebuild: Sendable {
    /// Writes a projection's state as a snapshot of the current tables holds it, in the transaction
    /// that has just reset the projection.
    public typealias Seed = @Sendable (LogSnapshot, [LogSnapshot.Zone], Transaction) async throws -> Void

    let applier: Applier
    let seed: Seed?
    let start: RebuildStart
    let store: PostgresStore
    let kafka: KafkaClientConfiguration?
    let topic: String
    let consumerGroup: String

    /// Progress of a rebuild.
    public struct Progress: Sendable {
        /// Events read so far.
        public var events: Int
        /// The last event id when the rebuild started.
        public var target: Int64
        /// The event id reached.
        public var position: Int64
        /// Events per second so far.
        public var eventsPerSecond: Double
    }

    /// Creates a rebuild of a projection; without Kafka configuration the consumer group is left alone.
    public init(
        projection: any Projection, store: PostgresStore, kafka: KafkaClientConfiguration?, topic: String, consumerGroupSuffix: String? = nil,
        start: RebuildStart = .automatic, seed: Seed? = nil
    ) {
        self.applier = Applier(projection: projection, store: store)
        self.seed = seed
        self.start = start
        var worker = WorkerConfiguration()
        worker.consumerGroupSuffix = consumerGroupSuffix
        self.consumerGroup = worker.consumerGroup(for: projection.name)
        self.store = store
        self.kafka = kafka
        self.topic = topic
    }

    /// Runs the rebuild; `progress` is called after every page. Returns the number of events read.
    @discardableResult
    public func run(pageSize: Int = 1000, logger: Logger, progress: @Sendable (Progress) -> Void = { _ in }) async throws -> Int {
        // The topic's end before anything is read: every message below it was committed to the event
        // log before this point, so the rebuild covers it; everything after is consumed live.
        var ends: [KafkaTopicPartitionOffset] = []
        if let kafka {
            let admin = KafkaAdmin(configuration: kafka, logger: logger)
            let watermarks = try await admin.watermarks(topic: topic, timeout: .seconds(10))
            ends = watermarks.map { KafkaTopicPartitionOffset(topic: topic, partition: $0.key, offset: $0.value.high) }
        }
        let position = try await begin(logger: logger)
        let count = try await LogReplay.run(store: store, after: position, pageSize: pageSize, logger: logger, progress: progress) { page in
            do {
                _ = try await applier.apply(batch: page, logger: logger)
            } catch where PostgresStore.isPermanent(error) {
                // One event of the page fails for good: event by event, each under a savepoint, so it
                // alone becomes a dead letter and the replay goes on.
                for event in page { try await applier.apply(event, logger: logger) }
            }
        }
        if let kafka, !ends.isEmpty {
            let admin = KafkaAdmin(configuration: kafka, logger: logger)
            do {
                try await admin.setCommittedOffsets(groupID: consumerGroup, ends, timeout: .seconds(30))
            } catch {
                // A running worker keeps its own position; its checkpoints make that position safe.
                logger.warning("could not move the consumer group (is the worker running?); it keeps its position",
                               metadata: ["error": "\(error)"])
            }
        }
        return count
    }

    /// Resets the projection and its checkpoints; from a snapshot, writes the snapshot's state and
    /// positions in the same transaction. Returns the log position the replay goes on after.
    func begin(logger: Logger) async throws -> Int64 {
        guard try await start.usesSnapshot(store: store, logger: logger) else {
            try await applier.reset(logger: logger)
            return 0
        }
        guard let seed else {
            throw StratusError(.badRequest, "the event log was pruned: \(applier.projection.name) cannot be rebuilt from its tail alone")
        }
        let applier = applier, store = store
        return try await LogSnapshot.with(store: store, logger: logger) { snapshot in
            let zones = try await snapshot.zones()
            try await store.serializable(logger: logger) { transaction in
                let projection = applier.projection
                try await projection.reset(in: transaction, logger: logger)
                try await CheckpointStore.reset(worker: projection.name, in: transaction)
                try await seed(snapshot, zones, transaction)
                try await CheckpointStore.seed(
                    worker: projection.name, zones: zones.map { ($0.zoneKey, $0.changeCounter) }, eventID: snapshot.position, in: transaction)
            }
            return snapshot.position
        }
    }
}
