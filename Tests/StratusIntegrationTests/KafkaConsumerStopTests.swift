import Foundation
import StratusKafka
import StratusTesting
import Synchronization
import XCTest

/// A consumer whose broker dies while a commit is on its way: the commit gives up within its time
/// limit with a retriable error, and closing finishes, behind the waiting commit or after it. A
/// synchronous commit waited for an answer for good (librdkafka keeps looking for the group's
/// coordinator), and a worker told to stop then never exited.
final class KafkaConsumerStopTests: XCTestCase {
    /// The commit reaches the broker, which dies without answering: the commit throws a retriable
    /// error in time, and closing after it (the commit still pending inside librdkafka) finishes.
    func testACommitTheDeadBrokerNeverAnsweredGivesUpAndCloseFinishes() async throws {
        let (broker, consumer, offsets) = try await consumerWithAMessage()
        defer { broker.kill() }
        let commit = try await commitToABrokerThatDies(broker, consumer, offsets, timeout: .seconds(3))
        try await TestSupport.eventually(timeout: .seconds(20), "the commit to give up") { commit.result != nil }
        let result = try XCTUnwrap(commit.result)
        let error = try XCTUnwrap(result.error, "a commit no broker answered cannot succeed")
        XCTAssertTrue(error.isRetriable, "\(error)")
        XCTAssertFalse(error.isFatal, "\(error)")

        // With the broker already gone a commit gives up too (librdkafka answers this one itself).
        let again = Outcome()
        Task { await again.record { try await consumer.commit(offsets) } }
        try await TestSupport.eventually(timeout: .seconds(20), "a commit with the broker gone to give up") { again.result != nil }
        XCTAssertEqual(again.result?.error?.isRetriable, true, "\(String(describing: again.result?.error))")

        let close = Outcome()
        Task { await close.record { await consumer.close() } }
        try await TestSupport.eventually(timeout: .seconds(15), "close to finish after the commits gave up") { close.result != nil }
    }

    /// Closing while a commit waits for the dead broker's answer finishes in time, and the commit returns.
    func testCloseBehindACommitTheDeadBrokerNeverAnsweredFinishes() async throws {
        let (broker, consumer, offsets) = try await consumerWithAMessage()
        defer { broker.kill() }
        let commit = try await commitToABrokerThatDies(broker, consumer, offsets)
        let close = Outcome()
        Task { await close.record { await consumer.close() } }
        try await TestSupport.eventually(timeout: .seconds(15), "close to finish behind the waiting commit") { close.result != nil }
        try await TestSupport.eventually(timeout: .seconds(5), "the commit to return once the consumer closed") { commit.result != nil }
        XCTAssertNotNil(commit.result?.error, "a commit no broker answered cannot succeed")
    }

    /// Starts a commit that reaches the broker but is never answered: the broker is stopped
    /// (SIGSTOP) before the commit and killed a second later, so the request is on its connection
    /// when the broker dies, as when a broker dies under a busy worker.
    private func commitToABrokerThatDies(
        _ broker: Broker, _ consumer: KafkaConsumer, _ offsets: [KafkaTopicPartitionOffset], timeout: Duration = .seconds(10)
    ) async throws -> Outcome {
        try broker.freeze()
        let commit = Outcome()
        Task { await commit.record { try await consumer.commit(offsets, timeout: timeout) } }
        // Setup, not an assertion: the time for the commit to be sent to the stopped broker.
        try await Task.sleep(for: .seconds(1))
        broker.kill()
        return commit
    }

    /// A broker of the test's own, with a consumer that has read the one message on a new topic,
    /// and the offsets that commit it (committed once, so the group's coordinator is known).
    private func consumerWithAMessage() async throws -> (Broker, KafkaConsumer, [KafkaTopicPartitionOffset]) {
        let broker = try Broker()
        try broker.start()
        let configuration = KafkaClientConfiguration(brokers: broker.address)
        let topic = "stop-test-" + UUID().uuidString.prefix(8).lowercased()
        try await KafkaAdmin(configuration: configuration, logger: TestSupport.logger).createTopic(topic, partitions: 1, timeout: .seconds(10))
        let producer = try KafkaProducer(configuration: configuration, logger: TestSupport.logger)
        let sent = try await producer.send([KafkaOutgoingMessage(topic: topic, key: Array("key".utf8), value: Array("1".utf8))], timeout: .seconds(30))
        await producer.close()
        guard case .success = sent.first else { throw KafkaError(code: -1, message: "the message was not sent: \(sent)") }

        let consumer = try KafkaConsumer(configuration: configuration, groupID: "stop-test-\(UUID())", topics: [topic], logger: TestSupport.logger)
        var received: [KafkaMessage] = []
        try await TestSupport.eventually(timeout: .seconds(40), "the consumer to read the message") {
            received += try await consumer.poll(maxMessages: 10, timeout: .milliseconds(500))
            return !received.isEmpty
        }
        let offsets = received.map { KafkaTopicPartitionOffset(topic: $0.topic, partition: $0.partition, offset: $0.offset + 1) }
        try await consumer.commit(offsets)
        return (broker, consumer, offsets)
    }
}

/// What a call made in a task of its own threw, once it returned.
private final class Outcome: Sendable {
    struct Result: Sendable {
        var error: KafkaError?
    }

    private let state = Mutex<Result?>(nil)

    var result: Result? { state.withLock { $0 } }

    func record(_ body: () async throws -> Void) async {
        var failure: KafkaError?
        do {
            try await body()
        } catch let error as KafkaError {
            failure = error
        } catch {
            failure = KafkaError(code: -1, message: "\(error)", isFatal: true, isRetriable: false)
        }
        state.withLock { $0 = Result(error: failure) }
    }
}
