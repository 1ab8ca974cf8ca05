import Foundation
import Logging
import StratusCore
import StratusKafka
import StratusPostgres
import StratusTesting
import StratusWorkers
import Synchronization
import XCTest

/// Remembers each batch the worker hands it (the events' ids) and when each event arrived.
private final class BatchLog: Sendable {
    /// Batches by their first event's id: a transaction tried again hands the same batch twice.
    private let batches = Mutex<[Int64: [Int64]]>([:])
    private let arrivals = Mutex<[Int64: ContinuousClock.Instant]>([:])

    func record(_ events: [EventEnvelope]) {
        guard let first = events.first else { return }
        batches.withLock { $0[first.id] = events.map(\.id) }
        let now = ContinuousClock.now
        arrivals.withLock { arrivals in
            for event in events where arrivals[event.id] == nil { arrivals[event.id] = now }
        }
    }

    /// The batches that held any of `ids`.
    func batches(holding ids: ClosedRange<Int64>) -> [[Int64]] {
        batches.withLock { $0.values.filter { $0.contains { ids.contains($0) } } }
    }

    func arrival(of id: Int64) -> ContinuousClock.Instant? { arrivals.withLock { $0[id] } }
}

private struct BatchRecordingProjection: Projection {
    let name = "test-batch-recorder"
    let log: BatchLog

    func apply(_ event: EventEnvelope, in transaction: Transaction, logger: Logger) async throws {
        log.record([event])
    }

    func apply(_ events: [EventEnvelope], in transaction: Transaction, logger: Logger) async throws {
        log.record(events)
    }

    func reset(in transaction: Transaction, logger: Logger) async throws {}
}

/// A worker's linger (`WorkerConfiguration.linger`): a stream of single events is applied several
/// to a transaction, and a lone event is applied at once.
final class WorkerLingerTests: XCTestCase {
    static let database = DatabaseID(container: "iCloud.test", environment: .development, scope: .private, owner: "_linger")

    func testAStreamOfEventsIsGatheredAndALoneEventIsNotHeld() async throws {
        let brokers = try TestSupport.kafkaBrokers()
        try await TestSupport.withMigratedStore { store, _ in
            let logger = TestSupport.logger
            let kafka = KafkaClientConfiguration(brokers: brokers)
            let topic = "test-linger-" + UUID().uuidString.prefix(8).lowercased()
            try await KafkaAdmin(configuration: kafka, logger: logger).createTopic(topic, partitions: 1, timeout: .seconds(10))
            let linger = Duration.seconds(2)
            var configuration = WorkerConfiguration()
            configuration.topic = topic
            configuration.consumerGroupSuffix = topic
            configuration.linger = linger
            configuration.reconcileInterval = .seconds(3600)
            // The events come straight to the broker, with no commit to wake an idle worker.
            configuration.idleAfter = nil
            let log = BatchLog()
            let worker = Worker(projection: BatchRecordingProjection(log: log), store: store, kafka: kafka, configuration: configuration, logger: logger)
            let producer = try KafkaProducer(configuration: kafka, logger: logger)
            let zoneKey = ZoneKey(database: Self.database, zoneName: "Stream")
            // Event n is the zone's nth, so the applier takes each in turn.
            func send(_ id: Int64) async throws -> ContinuousClock.Instant {
                let event = EventEnvelope(
                    id: id, zoneKey: zoneKey, zoneSequence: id, type: .zoneCreated, schemaVersion: 1, payload: Data("{}".utf8),
                    causation: Causation(requestID: "linger-\(id)"), createdAt: Int64(Date().timeIntervalSince1970 * 1000))
                let sent = ContinuousClock.now
                for result in try await producer.send(
                    [KafkaOutgoingMessage(topic: topic, key: Array(zoneKey.rawValue.utf8), value: Array(EventCoding.encode(event)))], timeout: .seconds(20)) {
                    try result.get()
                }
                return sent
            }
            func applied(_ id: Int64) async throws -> ContinuousClock.Instant {
                try await TestSupport.eventually(timeout: .seconds(30), "event \(id) to be applied") { log.arrival(of: id) != nil }
                return try XCTUnwrap(log.arrival(of: id))
            }

            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { try await worker.run() }
                defer { group.cancelAll() }
                // The first event waits for the worker to join its group.
                _ = try await send(1)
                _ = try await applied(1)
                // Ten events 20 ms apart, right behind it: the worker gathers them.
                for id in Int64(2)...11 {
                    _ = try await send(id)
                    try await Task.sleep(for: .milliseconds(20))
                }
                _ = try await applied(11)
                let streamed = log.batches(holding: 2...11)
                XCTAssertLessThanOrEqual(streamed.count, 3, "ten events 20 ms apart came in \(streamed.count) batches: \(streamed)")
                XCTAssertEqual(Set(streamed.flatMap { $0 }).intersection(Set(2...11)).count, 10)
                // After a pause longer than the linger an event is alone again, and applied at once.
                try await Task.sleep(for: linger + .milliseconds(500))
                let loneSent = try await send(12)
                let loneApplied = try await applied(12)
                XCTAssertLessThan(loneApplied - loneSent, linger / 2, "an event after a pause is not held for the linger")
                XCTAssertEqual(log.batches(holding: 12...12), [[12]])
            }
        }
    }
}
