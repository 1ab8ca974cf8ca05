import CRdkafka
import Foundation
import Logging

/// The low and high watermark of a partition.
public struct KafkaWatermarks: Sendable, Hashable {
    /// The first offset still held.
    public var low: Int64
    /// The offset the next message will get.
    public var high: Int64
}

/// Topic and consumer-group administration. Each call uses a short-lived client.
public struct KafkaAdmin: Sendable {
    let configuration: KafkaClientConfiguration
    let logger: Logger

    /// Creates the admin client.
    public init(configuration: KafkaClientConfiguration, logger: Logger) {
        self.configuration = configuration
        self.logger = logger
    }

    /// Creates a topic unless it exists, with the topic settings in `settings` (e.g. `retention.ms`);
    /// an existing topic keeps its own.
    public func createTopic(
        _ name: String, partitions: Int, replicationFactor: Int = 1, settings: [String: String] = [:], timeout: Duration
    ) async throws {
        let configuration = configuration
        try await Blocking.run(on: DispatchQueueBox.shared) {
            try withClient(configuration, RD_KAFKA_PRODUCER) { pointer in
                var errorText = [CChar](repeating: 0, count: 512)
                guard let partitionCount = Int32(exactly: partitions), let replicas = Int32(exactly: replicationFactor),
                      let topic = rd_kafka_NewTopic_new(name, partitionCount, replicas, &errorText, errorText.count)
                else {
                    throw KafkaError(code: -1, message: "invalid topic \(name): \(CText.string(errorText))", isFatal: false, isRetriable: false)
                }
                defer { rd_kafka_NewTopic_destroy(topic) }
                for (key, value) in settings.sorted(by: { $0.key < $1.key }) {
                    let error = rd_kafka_NewTopic_set_config(topic, key, value)
                    guard error == RD_KAFKA_RESP_ERR_NO_ERROR else { throw KafkaError(error, context: "topic setting \(key)") }
                }
                let queue = rd_kafka_queue_new(pointer)
                defer { rd_kafka_queue_destroy(queue) }
                var topics: [OpaquePointer?] = [topic]
                rd_kafka_CreateTopics(pointer, &topics, 1, nil, queue)
                guard let event = rd_kafka_queue_poll(queue, milliseconds(timeout)) else {
                    throw KafkaError(code: RD_KAFKA_RESP_ERR__TIMED_OUT.rawValue, message: "creating topic \(name) timed out")
                }
                defer { rd_kafka_event_destroy(event) }
                let eventError = rd_kafka_event_error(event)
                guard eventError == RD_KAFKA_RESP_ERR_NO_ERROR else { throw KafkaError(eventError, context: "create topic \(name)") }
                guard let result = rd_kafka_event_CreateTopics_result(event) else { return }
                var count = 0
                guard let results = rd_kafka_CreateTopics_result_topics(result, &count) else { return }
                for index in 0..<count {
                    let error = rd_kafka_topic_result_error(results[index])
                    if error != RD_KAFKA_RESP_ERR_NO_ERROR && error != RD_KAFKA_RESP_ERR_TOPIC_ALREADY_EXISTS {
                        throw KafkaError(error, context: "create topic \(name)")
                    }
                }
            }
        }
    }

    /// The topic's partition count, or nil when the broker does not have it. Asks for all topics so the
    /// question never creates the topic on brokers that auto-create.
    public func partitionCount(topic: String, timeout: Duration) async throws -> Int? {
        let configuration = configuration
        return try await Blocking.run(on: DispatchQueueBox.shared) {
            try withClient(configuration, RD_KAFKA_PRODUCER) { pointer in try partitions(of: topic, pointer, timeout)?.count }
        }
    }

    /// Low and high watermarks of every partition of a topic (empty when the topic is absent).
    public func watermarks(topic: String, timeout: Duration) async throws -> [Int32: KafkaWatermarks] {
        let configuration = configuration
        return try await Blocking.run(on: DispatchQueueBox.shared) {
            try withClient(configuration, RD_KAFKA_PRODUCER) { pointer in
                var result: [Int32: KafkaWatermarks] = [:]
                for partition in try partitions(of: topic, pointer, timeout) ?? [] {
                    var low: Int64 = 0, high: Int64 = 0
                    let error = rd_kafka_query_watermark_offsets(pointer, topic, partition, &low, &high, milliseconds(timeout))
                    guard error == RD_KAFKA_RESP_ERR_NO_ERROR else { throw KafkaError(error, context: "watermarks of \(topic)/\(partition)") }
                    result[partition] = KafkaWatermarks(low: low, high: high)
                }
                return result
            }
        }
    }

    /// Sets a consumer group's committed offsets. The group must have no active members.
    public func setCommittedOffsets(groupID: String, _ offsets: [KafkaTopicPartitionOffset], timeout: Duration) async throws {
        guard !offsets.isEmpty else { return }
        let configuration = configuration
        try await Blocking.run(on: DispatchQueueBox.shared) {
            try withClient(configuration, RD_KAFKA_CONSUMER, group: groupID) { pointer in
                let list = PartitionList.make(offsets)
                defer { rd_kafka_topic_partition_list_destroy(list) }
                let error = rd_kafka_commit(pointer, list, 0)
                guard error == RD_KAFKA_RESP_ERR_NO_ERROR else { throw KafkaError(error, context: "commit offsets of group \(groupID)") }
                for entry in PartitionList.entries(list) where entry.error != RD_KAFKA_RESP_ERR_NO_ERROR {
                    throw KafkaError(entry.error, context: "commit offset of group \(groupID) on \(entry.topic)/\(entry.partition)")
                }
            }
        }
    }

    /// A consumer group's committed offsets for a topic (partitions without a commit are left out).
    public func committedOffsets(groupID: String, topic: String, timeout: Duration) async throws -> [Int32: Int64] {
        let configuration = configuration
        return try await Blocking.run(on: DispatchQueueBox.shared) {
            try withClient(configuration, RD_KAFKA_CONSUMER, group: groupID) { pointer in
                let partitions = try partitions(of: topic, pointer, timeout) ?? []
                guard !partitions.isEmpty else { return [:] }
                let list = PartitionList.make(partitions.map { KafkaTopicPartitionOffset(topic: topic, partition: $0, offset: -1001) })
                defer { rd_kafka_topic_partition_list_destroy(list) }
                let error = rd_kafka_committed(pointer, list, milliseconds(timeout))
                guard error == RD_KAFKA_RESP_ERR_NO_ERROR else { throw KafkaError(error, context: "committed offsets of group \(groupID)") }
                var result: [Int32: Int64] = [:]
                for entry in PartitionList.entries(list) where entry.offset >= 0 { result[entry.partition] = entry.offset }
                return result
            }
        }
    }
}

/// A duration as librdkafka's millisecond timeouts: whole milliseconds, clamped to `Int32` (a huge
/// duration, or a NaN the division cannot give, would otherwise trap).
func milliseconds(_ duration: Duration) -> Int32 {
    let milliseconds = (duration / .milliseconds(1)).rounded(.towardZero)
    return Int32(exactly: milliseconds) ?? (milliseconds < 0 ? .min : .max)
}

private func withClient<T>(_ configuration: KafkaClientConfiguration, _ type: rd_kafka_type_t, group: String? = nil, _ body: (OpaquePointer) throws -> T) throws -> T {
    var settings = configuration.common
    if let group { settings += [("group.id", group), ("enable.auto.commit", "false")] }
    let pointer = try KafkaConf.client(type, conf: KafkaConf.make(settings, extra: configuration.extra))
    defer {
        if type == RD_KAFKA_CONSUMER { rd_kafka_consumer_close(pointer) }
        rd_kafka_destroy(pointer)
    }
    return try body(pointer)
}

private func partitions(of topic: String, _ pointer: OpaquePointer, _ timeout: Duration) throws -> [Int32]? {
    var metadata: UnsafePointer<rd_kafka_metadata>?
    let error = rd_kafka_metadata(pointer, 1, nil, &metadata, milliseconds(timeout))
    guard error == RD_KAFKA_RESP_ERR_NO_ERROR, let metadata else { throw KafkaError(error, context: "metadata") }
    defer { rd_kafka_metadata_destroy(metadata) }
    for index in 0..<Int(metadata.pointee.topic_cnt) {
        let entry = metadata.pointee.topics[index]
        guard String(cString: entry.topic) == topic else { continue }
        if entry.err == RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART { return nil }
        return (0..<Int(entry.partition_cnt)).map { entry.partitions[$0].id }
    }
    return nil
}
