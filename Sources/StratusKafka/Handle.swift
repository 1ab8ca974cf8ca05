import CRdkafka
import Dispatch
import Synchronization

/// A serial queue for one client's blocking calls.
final class DispatchQueueBox: Sendable {
    let queue: DispatchQueue
    init(label: String) { queue = DispatchQueue(label: label) }
    static let shared = DispatchQueueBox(label: "stratus.kafka.admin")
}

/// An `rd_kafka_t` that is destroyed exactly once. librdkafka handles are thread-safe for the calls used here.
final class ClientHandle: @unchecked Sendable {
    private let state: Mutex<TopicRef?>

    init(_ pointer: OpaquePointer) { state = Mutex(TopicRef(pointer: pointer)) }

    /// The live handle, or nil after `take()`.
    var pointer: OpaquePointer? { state.withLock { $0 }?.pointer }

    /// Takes the handle for destruction; later calls get nil.
    func take() -> OpaquePointer? {
        state.withLock { reference in
            defer { reference = nil }
            return reference
        }?.pointer
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
