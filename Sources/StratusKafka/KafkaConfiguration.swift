import Dispatch
import CRdkafka

/// Connection settings shared by producers, consumers and the admin client.
public struct KafkaClientConfiguration: Sendable {
    /// Bootstrap brokers, `host:port[,host:port]`.
    public var brokers: String
    /// The client id the broker sees.
    public var clientID: String = "stratus"
    /// Consumer group session timeout; low values make group joins fast on small brokers.
    public var sessionTimeoutMilliseconds: Int = 6000
    /// Consumer group heartbeat interval.
    public var heartbeatIntervalMilliseconds: Int = 1000
    /// The longest a consumer's fetch waits at the broker for new messages. A broker that looks for
    /// new messages during a fetch only now and then (the development broker does, more rarely the
    /// longer the wait) adds part of it to every event's delivery, so it bounds the commit-to-worker
    /// lag; lower means more fetches while events flow. Idle workers stop fetching altogether
    /// (`WorkerConfiguration.idleAfter`).
    public var fetchWaitMilliseconds: Int = 25
    /// How long the producer keeps trying to deliver one message before reporting failure.
    public var messageTimeoutMilliseconds: Int = 30000
    /// Further librdkafka settings, applied last.
    public var extra: [String: String] = [:]

    /// Creates a configuration for the given brokers.
    public init(brokers: String) { self.brokers = brokers }

    var common: [(String, String)] {
        [("bootstrap.servers", brokers), ("client.id", clientID), ("log_level", "3")]
    }
}

/// An owned `rd_kafka_conf_t` under construction.
enum KafkaConf {
    static func make(_ settings: [(String, String)], extra: [String: String]) throws -> OpaquePointer {
        guard let conf = rd_kafka_conf_new() else { throw KafkaError(code: -1, message: "cannot allocate a configuration", isFatal: true, isRetriable: false) }
        var errorText = [CChar](repeating: 0, count: 512)
        for (key, value) in settings + extra.sorted(by: { $0.key < $1.key }) {
            if rd_kafka_conf_set(conf, key, value, &errorText, errorText.count) != RD_KAFKA_CONF_OK {
                rd_kafka_conf_destroy(conf)
                throw KafkaError(code: -1, message: "invalid setting \(key): \(CText.string(errorText))", isFatal: true, isRetriable: false)
            }
        }
        return conf
    }

    /// Creates a client handle, taking ownership of `conf`.
    static func client(_ type: rd_kafka_type_t, conf: OpaquePointer) throws -> OpaquePointer {
        var errorText = [CChar](repeating: 0, count: 512)
        guard let handle = rd_kafka_new(type, conf, &errorText, errorText.count) else {
            rd_kafka_conf_destroy(conf)
            throw KafkaError(code: -1, message: "cannot create a Kafka client: \(CText.string(errorText))", isFatal: true, isRetriable: false)
        }
        return handle
    }
}

/// The librdkafka that is loaded at run time.
public enum Librdkafka {
    /// The loaded library's version text.
    public static var version: String { String(cString: rd_kafka_version_str()) }

    /// The oldest version known to talk to every broker Stratus supports.
    static let minimumVersion: Int32 = 0x0203_00ff

    /// Throws unless the loaded librdkafka is at least 2.3: older ones cannot parse some brokers' ApiVersion replies.
    public static func ensureSupported() throws {
        guard rd_kafka_version() >= minimumVersion else {
            throw KafkaError(
                code: -1,
                message: "librdkafka \(version) is too old (2.3 or newer is needed); run scripts/install-deps.sh, which places a newer one in .deps/librdkafka",
                isFatal: true, isRetriable: false)
        }
    }
}

/// Runs blocking librdkafka calls off the cooperative thread pool.
enum Blocking {
    static func run<T: Sendable>(on queue: DispatchQueueBox, _ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            queue.queue.async {
                continuation.resume(with: Result { try body() })
            }
        }
    }
}
