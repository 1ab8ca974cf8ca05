import Foundation
import Logging
import StratusKafka
import StratusPostgres

/// `stratus replay stratus-indexer`: rebuilds everything the indexer owns without taking queries
/// down. The query index is built into a new generation while the live one keeps answering and is
/// swapped in atomically (`Reindex`); then the zone directory and the indexer's checkpoints are
/// rebuilt from the log and its consumer group is moved (`Rebuild`, records left alone).
public struct IndexerReplay: Sendable {
    let store: PostgresStore
    let kafka: KafkaClientConfiguration?
    let topic: String
    let start: RebuildStart

    /// Creates the replay; without Kafka configuration the consumer group is left alone.
    public init(store: PostgresStore, kafka: KafkaClientConfiguration?, topic: String, start: RebuildStart = .automatic) {
        self.store = store
        self.kafka = kafka
        self.topic = topic
        self.start = start
    }

    /// Runs both passes; `progress` hears each page of each. Returns the events of the index pass.
    @discardableResult
    public func run(pageSize: Int = 1000, logger: Logger, progress: @Sendable (Rebuild.Progress) -> Void = { _ in }) async throws -> Int {
        let (_, events) = try await Reindex(store: store).run(pageSize: pageSize, start: start, logger: logger, progress: progress)
        try await Rebuild(
            projection: IndexerProjection(includesRecords: false), store: store, kafka: kafka, topic: topic, start: start,
            seed: { _, zones, transaction in try await IndexZoneStore.seed(zones, in: transaction) }
        ).run(pageSize: pageSize, logger: logger, progress: progress)
        return events
    }
}
