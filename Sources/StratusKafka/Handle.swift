import CRdkafka
import Dispatch
#if canImport(Glibc)
import Glibc
#endif
import Synchronization

/// A serial queue for one client's blocking calls.
final class DispatchQueueBox: Sendable {
    let queue: DispatchQueue
    init(label: String) { queue = DispatchQueue(label: label) }
    static let shared = DispatchQueueBox(label: "stratus.kafka.admin")
}

/// An `rd_kafka_t` that is destroyed exactly once, and never while a call made through
/// `withPointer` is using it. librdkafka handles are thread-safe for the calls used here, but not
/// against their own destruction.
final class ClientHandle: @unchecked Sendable {
    private struct State {
        var reference: TopicRef?
        var users = 0
    }
    private let state: Mutex<State>

    init(_ pointer: OpaquePointer) { state = Mutex(State(reference: TopicRef(pointer: pointer))) }

    /// The live handle, or nil after `take()`: only for the thread that will destroy it.
    var pointer: OpaquePointer? { state.withLock { $0.reference?.pointer } }

    /// Runs `body` with the live handle, which `take()` does not hand out for destruction until
    /// `body` returns; nil (and `body` not run) once it was taken. `body` must not block.
    func withPointer<T>(_ body: (OpaquePointer) -> T) -> T? {
        let pointer = state.withLock { state -> OpaquePointer? in
            guard let reference = state.reference else { return nil }
            state.users += 1
            return reference.pointer
        }
        guard let pointer else { return nil }
        defer { state.withLock { $0.users -= 1 } }
        return body(pointer)
    }

    /// Takes the handle for destruction; later calls get nil. Waits until no `withPointer` call
    /// uses it (calls that never block): only on a thread of the client's own, never a task's.
    func take() -> OpaquePointer? {
        guard let pointer = state.withLock({ state -> OpaquePointer? in
            defer { state.reference = nil }
            return state.reference?.pointer
        }) else { return nil }
        while state.withLock({ $0.users }) > 0 { usleep(50) }
        return pointer
    }
}

/// Builds an `rd_kafka_topic_partition_list_t`; the caller destroys it.
enum PartitionList {
    static func make(_ offsets: [KafkaTopicPartitionOffset]) -> UnsafeMutablePointer<rd_kafka_topic_partition_list_t> {
        let list = rd_kafka_topic_partition_list_new(Int32(clamping: max(1, offsets.count)))!
        for entry in offsets {
            let element = rd_kafka_topic_partition_list_add(list, entry.topic, entry.partition)!
            element.pointee.offset = entry.offset
        }
        return list
    }

    static func entries(_ list: UnsafeMutablePointer<rd_kafka_topic_partition_list_t>) -> [(topic: String, partition: Int32, offset: Int64, error: rd_kafka_resp_err_t)] {
        (0..<Int(list.pointee.cnt)).map { index in
            let element = list.pointee.elems[index]
            return (String(cString: element.topic), element.partition, element.offset, element.err)
        }
    }
}

/// A librdkafka pointer (client or topic handle) passed between threads; librdkafka makes them thread-safe.
struct TopicRef: @unchecked Sendable {
    let pointer: OpaquePointer
}

/// Text from a C error buffer.
enum CText {
    static func string(_ buffer: [CChar]) -> String {
        String(decoding: buffer.prefix(while: { $0 != 0 }).map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}

/// A flag set once, read from any thread.
final class Flag: Sendable {
    private let value = Atomic<Bool>(false)
    var isSet: Bool { value.load(ordering: .acquiring) }
    /// Sets the flag; returns whether it was already set.
    func set() -> Bool { value.exchange(true, ordering: .acquiringAndReleasing) }
}
