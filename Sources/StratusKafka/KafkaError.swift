import CRdkafka

/// A Kafka failure: librdkafka's error code, its text, and whether it is fatal or worth retrying.
public struct KafkaError: Error, Sendable, CustomStringConvertible {
    /// librdkafka's `rd_kafka_resp_err_t` value.
    public var code: Int32
    /// What went wrong.
    public var message: String
    /// The client handle is unusable and must be destroyed and recreated.
    public var isFatal: Bool
    /// Trying again later may succeed.
    public var isRetriable: Bool

    /// Creates an error.
    public init(code: Int32, message: String, isFatal: Bool = false, isRetriable: Bool = true) {
        self.code = code
        self.message = message
        self.isFatal = isFatal
        self.isRetriable = isRetriable
    }

    init(_ error: rd_kafka_resp_err_t, context: String, isFatal: Bool = false) {
        let text = String(cString: rd_kafka_err2str(error))
        self.init(code: error.rawValue, message: "\(context): \(text)", isFatal: isFatal, isRetriable: !isFatal)
    }

    /// The message itself is refused (too large, malformed): sending it again can never succeed,
    /// whatever the broker's state.
    public var isMessageRejected: Bool {
        [RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE, RD_KAFKA_RESP_ERR_RECORD_LIST_TOO_LARGE, RD_KAFKA_RESP_ERR_INVALID_MSG,
         RD_KAFKA_RESP_ERR_INVALID_MSG_SIZE, RD_KAFKA_RESP_ERR_INVALID_RECORD].contains { $0.rawValue == code }
    }

    /// A topic the broker already has.
    public static let topicAlreadyExists: Int32 = RD_KAFKA_RESP_ERR_TOPIC_ALREADY_EXISTS.rawValue

    public var description: String { "KafkaError(\(code)): \(message)" }
}
