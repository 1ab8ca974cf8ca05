import Foundation
import Logging
import StratusCore
import StratusKafka
import StratusPostgres

/// Rebuilds a worker's projection from the beginning of the PostgreSQL event log (which, unlike a
/// broker, never loses the beginning), then points the worker's consumer group at the topic's end
/// as it was before the rebuild started, so the running worker resumes without a gap.
public struct Rebuild: Sendable {
    let applier: Applier
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
    public init(projection: any Projection, store: PostgresStore, kafka: KafkaClientConfiguration?, topic: String, consumerGroupSuffix: String? = nil) {
        self.applier = Applier(projection: projection, store: store)
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
        try await applier.reset(logger: logger)
        let count = try await LogReplay.run(store: store, pageSize: pageSize, logger: logger, progress: progress) { page in
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
}
