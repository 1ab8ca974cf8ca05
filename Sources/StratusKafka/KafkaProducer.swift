import CRdkafka
import Foundation
import Logging
import Synchronization

/// A message to produce.
public struct KafkaOutgoingMessage: Sendable {
    /// The topic.
    public var topic: String
    /// The key: messages with one key go to one partition, in order.
    public var key: [UInt8]
    /// The value.
    public var value: [UInt8]

    /// Creates a message.
    public init(topic: String, key: [UInt8], value: [UInt8]) {
        self.topic = topic
        self.key = key
        self.value = value
    }
}

/// An idempotent producer (`enable.idempotence`, `acks=all`): per partition, messages are written
/// once and in order, even across internal retries.
///
/// librdkafka's blocking calls never run on Swift's cooperative threads: delivery reports are
/// served by the producer's own poll thread, and that thread also tears the producer down (a
/// bounded flush, then destroy) once `close()` is called or the producer is released; `close()`
/// only waits for it without holding a thread.
public final class KafkaProducer: Sendable {
    private let handle: ClientHandle
    private let topics = TopicCache()
    private let closed = Flag()
    private let finished = Completion()
    private let logger: Logger

    /// Creates the producer and its delivery-report thread.
    public init(configuration: KafkaClientConfiguration, logger: Logger) throws {
        let conf = try KafkaConf.make(configuration.common + [
            ("enable.idempotence", "true"),
            ("acks", "all"),
            ("linger.ms", "5"),
            ("message.timeout.ms", "\(configuration.messageTimeoutMilliseconds)"),
            ("topic.metadata.refresh.interval.ms", "10000"),
        ], extra: configuration.extra)
        rd_kafka_conf_set_dr_msg_cb(conf, deliveryReport)
        self.handle = ClientHandle(try KafkaConf.client(RD_KAFKA_PRODUCER, conf: conf))
        self.logger = logger
        let handle = self.handle
        let closed = self.closed
        let topics = self.topics
        let finished = self.finished
        let thread = Thread {
            while !closed.isSet, let pointer = handle.pointer {
                rd_kafka_poll(pointer, 100)
            }
            Self.tearDown(handle, topics: topics)
            finished.complete()
        }
        thread.name = "stratus-kafka-producer"
        thread.start()
    }

    /// A released producer is torn down by its poll thread; nothing here waits.
    deinit { _ = closed.set() }

    /// The fatal error the producer is in, if any: then it must be closed and recreated.
    public var fatalError: KafkaError? {
        var errorText = [CChar](repeating: 0, count: 512)
        guard let error = handle.withPointer({ rd_kafka_fatal_error($0, &errorText, errorText.count) }) else {
            return KafkaError(code: -1, message: "the producer is closed", isFatal: true, isRetriable: false)
        }
        guard error != RD_KAFKA_RESP_ERR_NO_ERROR else { return nil }
        return KafkaError(code: error.rawValue, message: "fatal producer error: \(CText.string(errorText))", isFatal: true, isRetriable: false)
    }

    /// Produces the messages in order and waits for every delivery report; one result per message.
    /// Throws when the producer is in a fatal state. A cancelled send stops waiting at once: each
    /// message whose report has not come fails as retriable (it may still be delivered), so a
    /// process told to stop while its broker is away is not held until `message.timeout.ms`.
    public func send(_ messages: [KafkaOutgoingMessage], timeout: Duration) async throws -> [Result<Void, KafkaError>] {
        if let fatalError { throw fatalError }
        guard !messages.isEmpty else { return [] }
        let batch = DeliveryBatch(count: messages.count)
        for (index, message) in messages.enumerated() {
            await produce(message, index: index, batch: batch)
        }
        // A report always comes within message.timeout.ms; this is only a backstop, a timer on a
        // dispatch queue (not a task of its own), which runs out even if the caller is cancelled.
        let backstop = DispatchWorkItem { batch.expire() }
        DispatchQueue.global().asyncAfter(deadline: .now() + (timeout + .seconds(5)) / .seconds(1), execute: backstop)
        let results = await withTaskCancellationHandler {
            await withCheckedContinuation { batch.start($0) }
        } onCancel: {
            batch.expire(KafkaError(code: RD_KAFKA_RESP_ERR__MSG_TIMED_OUT.rawValue, message: "the send was cancelled before its delivery report came"))
        }
        backstop.cancel()
        if results.contains(where: { if case .failure = $0 { true } else { false } }), let fatalError { throw fatalError }
        return results
    }

    private func produce(_ message: KafkaOutgoingMessage, index: Int, batch: DeliveryBatch) async {
        let token = Unmanaged.passRetained(DeliveryToken(batch: batch, index: index)).toOpaque()
        while true {
            // The topic handle and the produce call run while the poll thread cannot tear the
            // producer down (rd_kafka_produce with RD_KAFKA_MSG_F_COPY never blocks).
            let outcome = handle.withPointer { pointer -> (status: Int32, error: rd_kafka_resp_err_t)? in
                guard let topic = topicHandle(message.topic, pointer) else { return nil }
                let status = message.value.withUnsafeBytes { value in
                    message.key.withUnsafeBytes { key in
                        rd_kafka_produce(
                            topic, RD_KAFKA_PARTITION_UA, RD_KAFKA_MSG_F_COPY,
                            UnsafeMutableRawPointer(mutating: value.baseAddress), value.count,
                            key.baseAddress, key.count, token)
                    }
                }
                // The error is the calling thread's: read it before anything else runs here.
                return (status, status == 0 ? RD_KAFKA_RESP_ERR_NO_ERROR : rd_kafka_last_error())
            }
            guard let attempt = outcome ?? nil else {
                Unmanaged<DeliveryToken>.fromOpaque(token).release()
                batch.complete(index, .failure(KafkaError(code: -1, message: "the producer is closed", isFatal: true, isRetriable: false)))
                return
            }
            if attempt.status == 0 { return }
            if attempt.error == RD_KAFKA_RESP_ERR__QUEUE_FULL, !closed.isSet {
                // The local queue drains as the poll thread serves delivery reports; wait without
                // holding a thread.
                try? await Task.sleep(for: .milliseconds(5))
                continue
            }
            Unmanaged<DeliveryToken>.fromOpaque(token).release()
            batch.complete(index, .failure(KafkaError(attempt.error, context: "produce to \(message.topic)")))
            return
        }
    }

    private func topicHandle(_ name: String, _ pointer: OpaquePointer) -> OpaquePointer? {
        let reference = TopicRef(pointer: pointer)
        return topics.map.withLock { topics -> TopicRef? in
            if let existing = topics[name] { return existing }
            guard let created = rd_kafka_topic_new(reference.pointer, name, nil) else { return nil }
            topics[name] = TopicRef(pointer: created)
            return topics[name]
        }?.pointer
    }

    /// Stops the producer: its poll thread flushes briefly (2 s at most), fails what is still
    /// queued and destroys it. Returns once that is done, without blocking a thread meanwhile.
    /// Safe to call more than once.
    public func close() async {
        _ = closed.set()
        await finished.wait()
    }

    /// The blocking part of closing, on the poll thread.
    private static func tearDown(_ handle: ClientHandle, topics: TopicCache) {
        // From here no send reaches librdkafka (it fails as closed), and none is still inside it.
        guard let pointer = handle.take() else { return }
        rd_kafka_flush(pointer, 2000)
        rd_kafka_purge(pointer, Int32(RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT))
        rd_kafka_poll(pointer, 0)
        let topicHandles = topics.map.withLock { topics in
            defer { topics.removeAll() }
            return Array(topics.values)
        }
        for topic in topicHandles { rd_kafka_topic_destroy(topic.pointer) }
        rd_kafka_destroy(pointer)
    }
}

/// A producer's topic handles by name.
final class TopicCache: Sendable {
    let map = Mutex<[String: TopicRef]>([:])
}

/// Something that happens once; any number of tasks wait for it without holding a thread.
final class Completion: Sendable {
    private let state = Mutex<(done: Bool, waiters: [CheckedContinuation<Void, Never>])>((false, []))

    /// Marks it done and resumes every waiter.
    func complete() {
        let waiters = state.withLock { state in
            state.done = true
            defer { state.waiters = [] }
            return state.waiters
        }
        for waiter in waiters { waiter.resume() }
    }

    /// Returns once `complete()` was called.
    func wait() async {
        await withCheckedContinuation { continuation in
            let done = state.withLock { state in
                if !state.done { state.waiters.append(continuation) }
                return state.done
            }
            if done { continuation.resume() }
        }
    }
}

/// One `send` call's outstanding delivery reports.
final class DeliveryBatch: Sendable {
    private struct State {
        var results: [Result<Void, KafkaError>?]
        var remaining: Int
        var continuation: CheckedContinuation<[Result<Void, KafkaError>], Never>?
        var finished = false
    }

    private let state: Mutex<State>

    init(count: Int) { state = Mutex(State(results: Array(repeating: nil, count: count), remaining: count)) }

    /// Waits with `continuation` for the reports, resuming it at once when they are all in.
    func start(_ continuation: CheckedContinuation<[Result<Void, KafkaError>], Never>) {
        finish { state in
            state.continuation = continuation
            return state.remaining == 0
        }
    }

    func complete(_ index: Int, _ result: Result<Void, KafkaError>) {
        finish { state in
            guard state.results[index] == nil else { return false }
            state.results[index] = result
            state.remaining -= 1
            return state.remaining == 0
        }
    }

    /// Reports every message still outstanding as failed with `error` (by default: timed out).
    func expire(_ error: KafkaError = KafkaError(code: RD_KAFKA_RESP_ERR__MSG_TIMED_OUT.rawValue, message: "no delivery report in time")) {
        finish { state in
            for index in state.results.indices where state.results[index] == nil {
                state.results[index] = .failure(error)
            }
            state.remaining = 0
            return true
        }
    }

    private func finish(_ update: (inout State) -> Bool) {
        let done = state.withLock { state -> (CheckedContinuation<[Result<Void, KafkaError>], Never>, [Result<Void, KafkaError>])? in
            guard !state.finished, update(&state), let continuation = state.continuation else { return nil }
            state.finished = true
            state.continuation = nil
            return (continuation, state.results.map { $0! })
        }
        if let (continuation, results) = done {
            continuation.resume(returning: results)
        }
    }
}

/// The opaque pointer a message carries to its delivery report.
final class DeliveryToken {
    let batch: DeliveryBatch
    let index: Int
    init(batch: DeliveryBatch, index: Int) {
        self.batch = batch
        self.index = index
    }
}

/// librdkafka's delivery report callback, on the poll thread.
private func deliveryReport(_: OpaquePointer?, _ message: UnsafePointer<rd_kafka_message_t>?, _: UnsafeMutableRawPointer?) {
    guard let message, let opaque = message.pointee._private else { return }
    let token = Unmanaged<DeliveryToken>.fromOpaque(opaque).takeRetainedValue()
    let error = message.pointee.err
    token.batch.complete(token.index, error == RD_KAFKA_RESP_ERR_NO_ERROR ? .success(()) : .failure(KafkaError(error, context: "delivery")))
}
