import CRdkafka
import Foundation
import Logging

/// A message read from Kafka.
public struct KafkaMessage: Sendable {
    /// The topic.
    public var topic: String
    /// The partition.
    public var partition: Int32
    /// The offset within the partition.
    public var offset: Int64
    /// The key, if any.
    public var key: [UInt8]?
    /// The value.
    public var value: [UInt8]
}

/// A position in a partition: for commits, the next offset to read.
public struct KafkaTopicPartitionOffset: Sendable, Hashable {
    /// The topic.
    public var topic: String
    /// The partition.
    public var partition: Int32
    /// The offset.
    public var offset: Int64

    /// Creates a position.
    public init(topic: String, partition: Int32, offset: Int64) {
        self.topic = topic
        self.partition = partition
        self.offset = offset
    }
}

/// A consumer group member with manual offset commits: offsets move only when the caller says its
/// effects are durable. Starts from the earliest offset when the group has none.
public final class KafkaConsumer: Sendable {
    private let handle: ClientHandle
    private let queue: DispatchQueueBox
    private let logger: Logger

    /// Joins `groupID` and subscribes to `topics`.
    public init(configuration: KafkaClientConfiguration, groupID: String, topics: [String], logger: Logger) throws {
        let conf = try KafkaConf.make(configuration.common + [
            ("group.id", groupID),
            ("enable.auto.commit", "false"),
            ("enable.auto.offset.store", "false"),
            ("auto.offset.reset", "earliest"),
            ("session.timeout.ms", "\(configuration.sessionTimeoutMilliseconds)"),
            ("heartbeat.interval.ms", "\(configuration.heartbeatIntervalMilliseconds)"),
            ("fetch.wait.max.ms", "\(configuration.fetchWaitMilliseconds)"),
            ("topic.metadata.refresh.interval.ms", "5000"),
        ], extra: configuration.extra)
        let pointer = try KafkaConf.client(RD_KAFKA_CONSUMER, conf: conf)
        rd_kafka_poll_set_consumer(pointer)
        let list = PartitionList.make(topics.map { KafkaTopicPartitionOffset(topic: $0, partition: RD_KAFKA_PARTITION_UA, offset: 0) })
        defer { rd_kafka_topic_partition_list_destroy(list) }
        let error = rd_kafka_subscribe(pointer, list)
        guard error == RD_KAFKA_RESP_ERR_NO_ERROR else {
            rd_kafka_destroy(pointer)
            throw KafkaError(error, context: "subscribe to \(topics.joined(separator: ","))")
        }
        self.handle = ClientHandle(pointer)
        self.queue = DispatchQueueBox(label: "stratus.kafka.consumer.\(groupID)")
        self.logger = logger
    }

    /// A released consumer leaves its group on its own queue; nothing here waits.
    deinit {
        let handle = handle
        queue.queue.async { Self.tearDown(handle) }
    }

    /// Up to `maxMessages` messages, waiting at most `timeout` for the first; empty on timeout.
    public func poll(maxMessages: Int, timeout: Duration) async throws -> [KafkaMessage] {
        let handle = handle
        let logger = logger
        let milliseconds = StratusKafka.milliseconds(timeout)
        return try await Blocking.run(on: queue) {
            guard let pointer = handle.pointer else { throw KafkaError(code: -1, message: "the consumer is closed", isFatal: true, isRetriable: false) }
            var messages: [KafkaMessage] = []
            var wait = milliseconds
            while messages.count < maxMessages {
                guard let raw = rd_kafka_consumer_poll(pointer, wait) else { break }
                defer { rd_kafka_message_destroy(raw) }
                wait = 0
                let message = raw.pointee
                if message.err != RD_KAFKA_RESP_ERR_NO_ERROR {
                    if message.err == RD_KAFKA_RESP_ERR__PARTITION_EOF { continue }
                    let error = KafkaError(message.err, context: "consume")
                    var errorText = [CChar](repeating: 0, count: 512)
                    if rd_kafka_fatal_error(pointer, &errorText, errorText.count) != RD_KAFKA_RESP_ERR_NO_ERROR {
                        throw KafkaError(code: error.code, message: "fatal consumer error: \(CText.string(errorText))", isFatal: true, isRetriable: false)
                    }
                    logger.debug("consumer notice", metadata: ["error": "\(error)"])
                    continue
                }
                let topic = String(cString: rd_kafka_topic_name(message.rkt))
                let value = message.payload.map { Array(UnsafeRawBufferPointer(start: $0, count: message.len)) } ?? []
                let key = message.key.map { Array(UnsafeRawBufferPointer(start: $0, count: message.key_len)) }
                messages.append(KafkaMessage(topic: topic, partition: message.partition, offset: message.offset, key: key, value: value))
            }
            return messages
        }
    }

    /// Commits, synchronously, the next offset to read for each partition.
    public func commit(_ offsets: [KafkaTopicPartitionOffset]) async throws {
        guard !offsets.isEmpty else { return }
        let handle = handle
        try await Blocking.run(on: queue) {
            guard let pointer = handle.pointer else { throw KafkaError(code: -1, message: "the consumer is closed", isFatal: true, isRetriable: false) }
            let list = PartitionList.make(offsets)
            defer { rd_kafka_topic_partition_list_destroy(list) }
            let error = rd_kafka_commit(pointer, list, 0)
            guard error == RD_KAFKA_RESP_ERR_NO_ERROR else { throw KafkaError(error, context: "commit") }
        }
    }

    /// Stops fetching the assigned partitions until `resume()`: no fetch requests reach the broker
    /// meanwhile; the group membership (heartbeats) goes on. Returns how many partitions it paused
    /// (0 before the group has assigned any). Partitions assigned later are fetched as usual.
    @discardableResult
    public func pause() async throws -> Int { try await setPaused(true) }

    /// Fetches the assigned partitions again, from where the caller's consumption stands.
    ///
    /// librdkafka's fetcher notices resumed partitions only at its next timer, about 0.2 s later; a
    /// request to each partition leader (their latest offsets, answered at once) wakes it now.
    public func resume() async throws {
        guard try await setPaused(false) > 0 else { return }
        let handle = handle
        try await Blocking.run(on: queue) {
            guard let pointer = handle.pointer else { return }
            var assignment: UnsafeMutablePointer<rd_kafka_topic_partition_list_t>?
            guard rd_kafka_assignment(pointer, &assignment) == RD_KAFKA_RESP_ERR_NO_ERROR, let assignment else { return }
            defer { rd_kafka_topic_partition_list_destroy(assignment) }
            for index in 0..<Int(assignment.pointee.cnt) { assignment.pointee.elems[index].offset = Int64(RD_KAFKA_OFFSET_END) }
            // Only the wake-up matters; the answer (or its failure) does not.
            _ = rd_kafka_offsets_for_times(pointer, assignment, 1000)
        }
    }

    private func setPaused(_ paused: Bool) async throws -> Int {
        let handle = handle
        return try await Blocking.run(on: queue) {
            guard let pointer = handle.pointer else { throw KafkaError(code: -1, message: "the consumer is closed", isFatal: true, isRetriable: false) }
            var assignment: UnsafeMutablePointer<rd_kafka_topic_partition_list_t>?
            guard rd_kafka_assignment(pointer, &assignment) == RD_KAFKA_RESP_ERR_NO_ERROR, let assignment else { return 0 }
            defer { rd_kafka_topic_partition_list_destroy(assignment) }
            guard assignment.pointee.cnt > 0 else { return 0 }
            let error = paused ? rd_kafka_pause_partitions(pointer, assignment) : rd_kafka_resume_partitions(pointer, assignment)
            guard error == RD_KAFKA_RESP_ERR_NO_ERROR else { throw KafkaError(error, context: paused ? "pause" : "resume") }
            return Int(assignment.pointee.cnt)
        }
    }

    /// Messages behind the end of the assigned partitions (from cached watermarks; no broker round trip).
    public func lag() throws -> Int64 {
        guard let pointer = handle.pointer else { return 0 }
        var assignment: UnsafeMutablePointer<rd_kafka_topic_partition_list_t>?
        guard rd_kafka_assignment(pointer, &assignment) == RD_KAFKA_RESP_ERR_NO_ERROR, let assignment else { return 0 }
        defer { rd_kafka_topic_partition_list_destroy(assignment) }
        rd_kafka_position(pointer, assignment)
        var lag: Int64 = 0
        for entry in PartitionList.entries(assignment) {
            var low: Int64 = 0, high: Int64 = 0
            guard rd_kafka_get_watermark_offsets(pointer, entry.topic, entry.partition, &low, &high) == RD_KAFKA_RESP_ERR_NO_ERROR, high >= 0 else { continue }
            lag += max(0, high - (entry.offset >= 0 ? entry.offset : low))
        }
        return lag
    }

    /// Leaves the group and destroys the consumer, on the consumer's own queue (leaving can take a
    /// while: librdkafka commits and waits for the group), so no cooperative thread is held. Safe to
    /// call more than once.
    public func close() async {
        let handle = handle
        _ = try? await Blocking.run(on: queue) { Self.tearDown(handle) }
    }

    private static func tearDown(_ handle: ClientHandle) {
        guard let pointer = handle.take() else { return }
        rd_kafka_consumer_close(pointer)
        rd_kafka_destroy(pointer)
    }
}
