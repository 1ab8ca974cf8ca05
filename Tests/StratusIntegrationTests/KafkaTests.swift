import Foundation
import StratusKafka
import StratusTesting
import Synchronization
import XCTest

/// The Kafka adapter against the real broker the test script starts.
final class KafkaTests: XCTestCase {
    func testLoadedLibraryIsNewEnough() throws {
        XCTAssertNoThrow(try Librdkafka.ensureSupported(), "loaded librdkafka \(Librdkafka.version)")
    }

    func testTopicsProduceConsumeCommitAndRewind() async throws {
        let configuration = KafkaClientConfiguration(brokers: try TestSupport.kafkaBrokers())
        let admin = KafkaAdmin(configuration: configuration, logger: TestSupport.logger)
        let topic = "kafka-test-" + UUID().uuidString.prefix(8).lowercased()
        let absent = try await admin.partitionCount(topic: topic, timeout: .seconds(10))
        XCTAssertNil(absent, "asking about a topic does not create it")
        try await admin.createTopic(topic, partitions: 3, timeout: .seconds(10))
        try await admin.createTopic(topic, partitions: 3, timeout: .seconds(10))
        let partitions = try await admin.partitionCount(topic: topic, timeout: .seconds(10))
        XCTAssertEqual(partitions, 3)

        let producer = try KafkaProducer(configuration: configuration, logger: TestSupport.logger)
        // Released at the end, the producer tears itself down on its own thread.
        let messages = (0..<100).map { index in
            KafkaOutgoingMessage(topic: topic, key: Array("key-\(index % 7)".utf8), value: Array("\(index)".utf8))
        }
        let results = try await producer.send(messages, timeout: .seconds(30))
        XCTAssertEqual(results.filter { if case .success = $0 { true } else { false } }.count, 100)
        let watermarks = try await admin.watermarks(topic: topic, timeout: .seconds(10))
        // Brokers count batched offsets differently (one broker advances the watermark per batch), so
        // only what every broker guarantees is checked: each partition that received messages moved.
        let used = Set(try await consume(configuration, group: "peek-\(UUID())", topic: topic, expecting: 100, commit: false).map(\.key))
        XCTAssertFalse(used.isEmpty)
        XCTAssertTrue(watermarks.values.contains { $0.high > 0 }, "\(watermarks)")

        let group = "kafka-test-group-" + UUID().uuidString.prefix(8)
        var received = try await consume(configuration, group: group, topic: topic, expecting: 100, commit: true)
        XCTAssertEqual(received.count, 100)
        for (key, values) in Dictionary(grouping: received, by: \.key) {
            XCTAssertEqual(values.map(\.value), values.map(\.value).sorted(), "per-key order is kept for \(key)")
        }
        let committed = try await admin.committedOffsets(groupID: group, topic: topic, timeout: .seconds(10))
        XCTAssertFalse(committed.isEmpty, "the group's commits are visible to the admin client")
        // After the commit the group has nothing more to read; rewinding makes it read everything again.
        received = try await consume(configuration, group: group, topic: topic, expecting: 0, commit: false, wait: .seconds(4))
        XCTAssertEqual(received.count, 0)
        try await admin.setCommittedOffsets(groupID: group, (0..<3).map { KafkaTopicPartitionOffset(topic: topic, partition: $0, offset: 0) }, timeout: .seconds(10))
        received = try await consume(configuration, group: group, topic: topic, expecting: 100, commit: false)
        XCTAssertEqual(received.count, 100)
    }

    private func consume(
        _ configuration: KafkaClientConfiguration, group: String, topic: String, expecting count: Int, commit: Bool, wait: Duration = .seconds(40)
    ) async throws -> [(key: String, value: Int)] {
        let consumer = try KafkaConsumer(configuration: configuration, groupID: group, topics: [topic], logger: TestSupport.logger)
        // Released at the end, the consumer leaves its group on its own queue.
        var received: [(key: String, value: Int)] = []
        let deadline = ContinuousClock.now + wait
        while ContinuousClock.now < deadline, count == 0 || received.count < count {
            let batch = try await consumer.poll(maxMessages: 100, timeout: .milliseconds(500))
            received += batch.map { (String(decoding: $0.key ?? [], as: UTF8.self), Int(String(decoding: $0.value, as: UTF8.self)) ?? -1) }
            if commit, !batch.isEmpty {
                var next: [Int32: KafkaTopicPartitionOffset] = [:]
                for message in batch { next[message.partition] = KafkaTopicPartitionOffset(topic: topic, partition: message.partition, offset: message.offset + 1) }
                try await consumer.commit(Array(next.values))
            }
        }
        return received
    }

    /// A send waiting for a broker that does not answer returns as soon as its task is cancelled,
    /// its message failed as retriable, rather than after `message.timeout.ms` (a relay told to
    /// stop while its broker is away held its process that long).
    func testACancelledSendReturnsAtOnceWithItsMessagesFailed() async throws {
        var configuration = KafkaClientConfiguration(brokers: "127.0.0.1:9")
        configuration.messageTimeoutMilliseconds = 60_000
        let producer = try KafkaProducer(configuration: configuration, logger: TestSupport.logger)
        let clock = ContinuousClock()
        let sending = Task {
            try await producer.send([KafkaOutgoingMessage(topic: "cancelled-send", key: Array("k".utf8), value: Array("v".utf8))], timeout: .seconds(60))
        }
        // Setup, not an assertion: the send has produced its message and waits for the report.
        try await Task.sleep(for: .milliseconds(300))
        let cancelled = clock.now
        sending.cancel()
        let results = try await sending.value
        XCTAssertLessThan(clock.now - cancelled, .seconds(5), "the cancelled send returned without waiting for its report")
        XCTAssertEqual(results.count, 1)
        guard case .failure(let error) = results.first else { return XCTFail("an undelivered message cannot succeed: \(results)") }
        XCTAssertTrue(error.isRetriable, "\(error)")
        XCTAssertFalse(error.isFatal, "\(error)")
        await producer.close()
    }

    /// Sends racing a producer's close: senders send again as soon as a send returns (the purge at
    /// the end of closing answers them all at once, right before the producer is destroyed), so some
    /// send always races the destruction. Every send returns or throws, and none reaches librdkafka
    /// while the poll thread destroys the producer (which corrupted the heap, now and then).
    func testSendsRacingCloseNeverTouchADestroyedProducer() async throws {
        var configuration = KafkaClientConfiguration(brokers: "127.0.0.1:9")
        configuration.messageTimeoutMilliseconds = 3_000
        for _ in 0..<3 {
            let producer = try KafkaProducer(configuration: configuration, logger: TestSupport.logger)
            let closed = Box()
            let answered = await withTaskGroup(of: Int.self) { group in
                for index in 0..<64 {
                    group.addTask {
                        var answered = 0
                        while !closed.value.load(ordering: .acquiring) {
                            let message = KafkaOutgoingMessage(topic: "race-\(index % 4)", key: [UInt8(index)], value: [1, 2, 3])
                            if let results = try? await producer.send([message], timeout: .seconds(10)) {
                                XCTAssertEqual(results.count, 1)
                            }
                            answered += 1
                            // A refused send returns at once: let the closing task have a thread too.
                            try? await Task.sleep(for: .milliseconds(1))
                        }
                        return answered
                    }
                }
                group.addTask {
                    await producer.close()
                    closed.value.store(true, ordering: .releasing)
                    return 0
                }
                var total = 0
                for await count in group { total += count }
                return total
            }
            XCTAssertGreaterThanOrEqual(answered, 64, "every sender was answered at least once")
            XCTAssertEqual(producer.fatalError?.message, "the producer is closed")
        }
    }
}

/// A flag the senders of a test read while another task sets it.
private final class Box: Sendable {
    let value = Atomic<Bool>(false)
}
