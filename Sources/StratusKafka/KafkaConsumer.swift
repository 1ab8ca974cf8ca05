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
    /// Set by `close()` before it waits for the queue, so a commit waiting there gives way to it.
    private let closing = Flag()

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
        let logger = logger
        queue.queue.async { Self.tearDown(handle, timeout: Self.defaultCloseTimeout, logger: logger) }
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

    /// Commits the next offset to read for each partition, and waits for the broker's answer at
    /// most `timeout`; past it, throws a retriable error, and the consumer can be closed or used
    /// again. librdkafka retries a commit whose broker died before answering for as long as it finds
    /// no coordinator for the group, so a synchronous commit could wait for good, on the consumer's
    /// queue, with `close()` behind it. A commit given up may still be applied later; until then what
    /// it covers is delivered again, which the workers apply idempotently. A commit waiting when
    /// `close()` is called gives way to it at once.
    public func commit(_ offsets: [KafkaTopicPartitionOffset], timeout: Duration = .seconds(10)) async throws {
        guard !offsets.isEmpty else { return }
        let handle = handle
        let closing = closing
        try await Blocking.run(on: queue) {
            guard let pointer = handle.pointer, !closing.isSet else {
                throw KafkaError(code: -1, message: "the consumer is closed", isFatal: true, isRetriable: false)
            }
            guard let answers = rd_kafka_queue_new(pointer) else {
                throw KafkaError(code: -1, message: "commit: cannot allocate a queue", isFatal: false, isRetriable: true)
            }
            // An answer that comes after the wait ends is dropped with the queue.
            defer { rd_kafka_queue_destroy(answers) }
            let list = PartitionList.make(offsets)
            defer { rd_kafka_topic_partition_list_destroy(list) }
            let error = rd_kafka_commit_queue(pointer, list, answers, nil, nil)
            guard error == RD_KAFKA_RESP_ERR_NO_ERROR else { throw KafkaError(error, context: "commit") }
            let deadline = ContinuousClock.now + timeout
            while true {
                if closing.isSet {
                    throw KafkaError(code: -1, message: "commit: the consumer is closing; its answer was not awaited", isFatal: true, isRetriable: false)
                }
                let remaining = deadline - ContinuousClock.now
                guard remaining > .zero else {
                    throw KafkaError(RD_KAFKA_RESP_ERR__TIMED_OUT, context: "commit: no answer within \(timeout)")
                }
                // In slices, so that a close waiting behind the commit is noticed.
                guard let event = rd_kafka_queue_poll(answers, min(StratusKafka.milliseconds(remaining), 100)) else { continue }
                defer { rd_kafka_event_destroy(event) }
                guard rd_kafka_event_type(event) == RD_KAFKA_EVENT_OFFSET_COMMIT else { continue }
                let error = rd_kafka_event_error(event)
                guard error == RD_KAFKA_RESP_ERR_NO_ERROR else { throw KafkaError(error, context: "commit") }
                // A partition the commit did not reach carries its own error.
                if let list = rd_kafka_event_topic_partition_list(event),
                   let failed = PartitionList.entries(list).first(where: { $0.error != RD_KAFKA_RESP_ERR_NO_ERROR }) {
                    throw KafkaError(failed.error, context: "commit of \(failed.topic)/\(failed.partition)")
                }
                return
            }
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

    /// How long `close()` waits for the consumer to leave its group, unless told otherwise.
    public static let defaultCloseTimeout: Duration = .seconds(5)

    /// Leaves the group and destroys the consumer, on the consumer's own queue (leaving can take a
    /// while: librdkafka waits for the group), so no cooperative thread is held. Leaving waits at most
    /// `timeout`: with the broker gone, or a commit librdkafka still retries, it never ends, and the
    /// consumer is then destroyed without it (the group drops the member when its session times
    /// out). A commit waiting on the queue gives way first. Safe to call more than once.
    public func close(timeout: Duration = KafkaConsumer.defaultCloseTimeout) async {
        _ = closing.set()
        let handle = handle
        let logger = logger
        _ = try? await Blocking.run(on: queue) { Self.tearDown(handle, timeout: timeout, logger: logger) }
    }

    private static func tearDown(_ handle: ClientHandle, timeout: Duration, logger: Logger) {
        guard let pointer = handle.take() else { return }
        if leave(pointer, timeout: timeout) {
            rd_kafka_destroy(pointer)
        } else {
            logger.notice("the consumer did not leave its group; destroying it without leaving", metadata: ["timeout": "\(timeout)"])
            rd_kafka_destroy_flags(pointer, RD_KAFKA_DESTROY_F_NO_CONSUMER_CLOSE)
        }
    }

    /// Asks the consumer to leave its group and serves the events of leaving for at most `timeout`;
    /// whether it left (false also when librdkafka refuses, e.g. after a fatal error).
    private static func leave(_ pointer: OpaquePointer, timeout: Duration) -> Bool {
        guard let events = rd_kafka_queue_new(pointer) else { return false }
        defer { rd_kafka_queue_destroy(events) }
        if let error = rd_kafka_consumer_close_queue(pointer, events) {
            rd_kafka_error_destroy(error)
            return false
        }
        let deadline = ContinuousClock.now + timeout
        while rd_kafka_consumer_closed(pointer) == 0 {
            let remaining = deadline - ContinuousClock.now
            guard remaining > .zero else { return false }
            guard let event = rd_kafka_queue_poll(events, min(StratusKafka.milliseconds(remaining), 100)) else { continue }
            // The partitions taken away as the consumer leaves: given up, as librdkafka does itself
            // when nobody handles its rebalances.
            if rd_kafka_event_type(event) == RD_KAFKA_EVENT_REBALANCE { _ = rd_kafka_assign(pointer, nil) }
            rd_kafka_event_destroy(event)
        }
        return true
    }
}
