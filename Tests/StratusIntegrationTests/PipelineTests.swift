import Foundation
import Logging
import PostgresNIO
import StratusCore
import StratusKafka
@testable import StratusPostgres
@testable import StratusRelay
import StratusTesting
import StratusWorkers
import XCTest

/// The event pipeline end to end: serializable write + event → relay → Kafka → worker.
struct PipelineFixture: Sendable {
    let database = DatabaseID(container: "iCloud.test", environment: .development, scope: .private, owner: "_alice")

    func kafka(_ brokers: String) -> KafkaClientConfiguration {
        KafkaClientConfiguration(brokers: brokers)
    }

    func uniqueTopic() -> String { "test-events-" + UUID().uuidString.prefix(8).lowercased() }

    /// Relay and worker settings for one test topic of `partitions` partitions.
    func configurations(topic: String, partitions: Int = 4) -> (relay: RelayConfiguration, worker: WorkerConfiguration) {
        var relay = RelayConfiguration()
        relay.topic = topic
        relay.partitions = partitions
        var worker = WorkerConfiguration()
        worker.topic = topic
        // A group of the test's own: a member another test left behind (or killed) never holds up its rebalance.
        worker.consumerGroupSuffix = topic
        return (relay, worker)
    }

    /// Creates, deletes and re-creates zones: `rounds` times over `zoneCount` zones.
    func workload(_ store: PostgresStore, zoneCount: Int, rounds: Int, prefix: String = "Z") async throws {
        let zones = ZoneStore(store: store)
        for round in 0..<rounds {
            for index in 0..<zoneCount {
                let zoneID = ZoneID(zoneName: "\(prefix)\(index)", ownerRecordName: database.owner)
                let command: ZoneCommand = (round + index) % 3 == 2 ? .delete(zoneID) : .create(zoneID)
                _ = try await zones.modify([command], in: database, causation: Causation(requestID: "w\(round)"), logger: TestSupport.logger)
            }
        }
    }

    /// The live zones according to the write path: what the indexer's directory must converge to.
    func expectedDirectory(_ store: PostgresStore) async throws -> [String: UUID] {
        var expected: [String: UUID] = [:]
        for zone in try await ZoneStore(store: store).list(in: database, logger: TestSupport.logger) {
            expected[zone.key.rawValue] = zone.incarnation
        }
        return expected
    }

    func directory(_ store: PostgresStore) async throws -> [String: UUID] {
        Dictionary(uniqueKeysWithValues: try await IndexZoneStore.all(store: store, logger: TestSupport.logger).map { ($0.zoneKey, $0.incarnation) })
    }

    func runServices<T: Sendable>(_ services: [any Sendable & RunnableService], _ body: @Sendable () async throws -> T) async throws -> T {
        try await withThrowingTaskGroup(of: Void.self) { group in
            for service in services { group.addTask { try await service.run() } }
            defer { group.cancelAll() }
            return try await body()
        }
    }

}

final class PipelineTests: XCTestCase {
    let fixture = PipelineFixture()

    /// The relay's wake-up: a fire wakes one wait; a wait that was woken leaves nothing behind, so the
    /// next wait sleeps until its timeout instead of returning at once (an idle relay must not spin).
    func testSignalWakesOnceAndAWokenWaitLeavesNoFireBehind() async throws {
        let signal = Signal()
        let clock = ContinuousClock()
        signal.fire()
        var started = clock.now
        await signal.wait(timeout: .seconds(30))
        XCTAssertLessThan(clock.now - started, .seconds(5), "a pending fire returns at once")
        for _ in 0..<3 {
            started = clock.now
            await signal.wait(timeout: .milliseconds(300))
            XCTAssertGreaterThanOrEqual(clock.now - started, .milliseconds(250), "a wait nobody fires lasts until its timeout")
        }
        started = clock.now
        Task {
            try await Task.sleep(for: .milliseconds(50))
            signal.fire()
        }
        await signal.wait(timeout: .seconds(30))
        XCTAssertLessThan(clock.now - started, .seconds(5), "a fire wakes the waiter")
        started = clock.now
        await signal.wait(timeout: .milliseconds(300))
        XCTAssertGreaterThanOrEqual(clock.now - started, .milliseconds(250), "the woken wait's timer left no fire behind")
    }

    func testRelayPublishesEveryEventInZoneOrder() async throws {
        let brokers = try TestSupport.kafkaBrokers()
        let topic = fixture.uniqueTopic()
        let fixture = fixture
        try await TestSupport.withMigratedStore { store, _ in
            try await fixture.workload(store, zoneCount: 6, rounds: 5)
            var relayConfiguration = RelayConfiguration()
            relayConfiguration.topic = topic
            relayConfiguration.partitions = 3
            let relay = Relay(store: store, kafka: fixture.kafka(brokers), configuration: relayConfiguration, logger: TestSupport.logger)
            let total = try await EventLog(store: store).lastID(logger: TestSupport.logger)
            // Each event row's version (the transaction that wrote it): publishing must not rewrite it.
            let rowVersions: @Sendable () async throws -> [Int64: String] = {
                try await store.withConnection { connection in
                    var versions: [Int64: String] = [:]
                    for try await (id, version) in try await connection.query("SELECT id, xmin::text FROM events", logger: TestSupport.logger)
                        .decode((Int64, String).self) { versions[id] = version }
                    return versions
                }
            }
            let written = try await rowVersions()
            XCTAssertEqual(written.count, Int(total))
            try await fixture.runServices([relay]) {
                try await TestSupport.eventually("the relay to publish everything") {
                    try await EventLog(store: store).backlog(logger: TestSupport.logger).count == 0
                }
                let published = try await rowVersions()
                XCTAssertEqual(published, written, "the relay rewrote event rows: the log is written once")
                // More events while the relay runs arrive through LISTEN/NOTIFY.
                try await fixture.workload(store, zoneCount: 2, rounds: 2, prefix: "Late")
                try await TestSupport.eventually("the relay to publish the late events") {
                    try await EventLog(store: store).backlog(logger: TestSupport.logger).count == 0
                }
            }
            let expectedCount = try await EventLog(store: store).lastID(logger: TestSupport.logger)
            XCTAssertGreaterThan(expectedCount, total)
            let consumer = try KafkaConsumer(configuration: fixture.kafka(brokers), groupID: "reader-\(UUID())", topics: [topic], logger: TestSupport.logger)
            // Released at the end, the consumer leaves its group on its own queue.
            var received: [EventEnvelope] = []
            let deadline = ContinuousClock.now + .seconds(60)
            while received.count < expectedCount, ContinuousClock.now < deadline {
                for message in try await consumer.poll(maxMessages: 500, timeout: .seconds(1)) {
                    let event = try EventCoding.decoder.decode(EventEnvelope.self, from: Data(message.value))
                    XCTAssertEqual(message.key.map { String(decoding: $0, as: UTF8.self) }, event.zoneKey.rawValue, "keyed by zone")
                    received.append(event)
                }
            }
            XCTAssertEqual(Set(received.map(\.id)).count, Int(expectedCount), "every event arrives")
            for (key, events) in Dictionary(grouping: received, by: \.zoneKey) {
                let sequences = events.compactMap(\.zoneSequence)
                XCTAssertEqual(sequences, Array(1...Int64(sequences.count)), "zone \(key) in order, without gaps")
            }
        }
    }

    /// A topic that holds nothing while the log holds published events lost them, even when the
    /// relay saved no watermarks for it (the broker came back empty in the relay's first seconds, a
    /// database restored to before they were saved): the relay publishes the log again, once.
    func testAnEmptyTopicWithoutSavedWatermarksGetsTheLogAgainWhenTheLogHoldsPublishedEvents() async throws {
        let brokers = try TestSupport.kafkaBrokers()
        let (first, second) = (fixture.uniqueTopic(), fixture.uniqueTopic())
        let fixture = fixture
        try await TestSupport.withMigratedStore { store, _ in
            try await fixture.workload(store, zoneCount: 2, rounds: 2)
            let total = try await EventLog(store: store).lastID(logger: TestSupport.logger)
            var configuration = RelayConfiguration()
            configuration.topic = first
            configuration.partitions = 2
            let relay = Relay(store: store, kafka: fixture.kafka(brokers), configuration: configuration, logger: TestSupport.logger)
            // An empty topic and a log nothing was published from: nothing to send again.
            try await relay.verifyTopic()
            let unsent = try await EventLog(store: store).backlog(logger: TestSupport.logger).count
            XCTAssertEqual(unsent, total)
            try await fixture.runServices([relay]) {
                try await TestSupport.eventually("the relay to publish everything") {
                    try await EventLog(store: store).backlog(logger: TestSupport.logger).count == 0
                }
            }
            // The same log, and a topic that holds nothing with no watermarks saved for it.
            configuration.topic = second
            let restarted = Relay(store: store, kafka: fixture.kafka(brokers), configuration: configuration, logger: TestSupport.logger)
            let saved = try await RelayStore(store: store).watermarks(topic: second, logger: TestSupport.logger)
            XCTAssertEqual(saved, [:])
            try await restarted.verifyTopic()
            let requeued = try await EventLog(store: store).backlog(logger: TestSupport.logger).count
            XCTAssertEqual(requeued, total, "every event is queued again")
            // Checked again before anything is sent: the log holds no published event, nothing changes.
            try await restarted.verifyTopic()
            let again = try await EventLog(store: store).backlog(logger: TestSupport.logger).count
            XCTAssertEqual(again, total)
            try await fixture.runServices([restarted]) {
                try await TestSupport.eventually("the relay to publish the log again") {
                    try await EventLog(store: store).backlog(logger: TestSupport.logger).count == 0
                }
            }
            let held = try await KafkaAdmin(configuration: fixture.kafka(brokers), logger: TestSupport.logger)
                .watermarks(topic: second, timeout: .seconds(10)).values.map(\.high).reduce(0, +)
            XCTAssertGreaterThan(held, 0, "the new topic holds what was sent again")
        }
    }

    func testApplierSkipsRedeliveriesAndFillsGapsFromTheEventLog() async throws {
        let fixture = fixture
        try await TestSupport.withMigratedStore { store, _ in
            let zoneID = ZoneID(zoneName: "Gap", ownerRecordName: fixture.database.owner)
            for command in [ZoneCommand.create(zoneID), .delete(zoneID), .create(zoneID), .delete(zoneID)] {
                _ = try await ZoneStore(store: store).modify([command], in: fixture.database, causation: Causation(requestID: "gap"), logger: TestSupport.logger)
            }
            let events = try await EventLog(store: store).events(after: 0, limit: 100, logger: TestSupport.logger)
            guard events.count == 4 else { return XCTFail("expected four events, got \(events.count)") }
            let applier = Applier(projection: IndexerProjection(), store: store)
            // The last event first: its three predecessors are pulled from the event log.
            let first = try await applier.apply(events[3], logger: TestSupport.logger)
            XCTAssertEqual(first, .applied(filledGap: 3))
            for event in events {
                let again = try await applier.apply(event, logger: TestSupport.logger)
                XCTAssertEqual(again, .duplicate)
            }
            let directory = try await fixture.directory(store)
            let expected = try await fixture.expectedDirectory(store)
            XCTAssertEqual(directory, expected)
        }
    }

    func testWorkerAppliesOnceDespiteRedeliveryAndReplayRebuildsIdentically() async throws {
        let brokers = try TestSupport.kafkaBrokers()
        let topic = fixture.uniqueTopic()
        let fixture = fixture
        try await TestSupport.withMigratedStore { store, _ in
            let (relayConfiguration, workerConfiguration) = fixture.configurations(topic: topic)
            let kafka = fixture.kafka(brokers)
            let relay = Relay(store: store, kafka: kafka, configuration: relayConfiguration, logger: TestSupport.logger)
            try await store.withConnection { connection in
                try await connection.query("CREATE TABLE test_applications (event_id bigint NOT NULL)", logger: TestSupport.logger)
            }
            let worker = Worker(projection: CountingIndexer(), store: store, kafka: kafka, configuration: workerConfiguration, logger: TestSupport.logger)
            try await fixture.runServices([relay, worker]) {
                try await fixture.workload(store, zoneCount: 8, rounds: 6)
                let expected = try await fixture.expectedDirectory(store)
                XCTAssertFalse(expected.isEmpty)
                try await TestSupport.eventually("the indexer to catch up") { try await fixture.directory(store) == expected }
                // Publish everything again: every event is delivered a second time and must change nothing.
                let again = try await EventLog(store: store).republish(from: 1, logger: TestSupport.logger)
                XCTAssertGreaterThan(again, 0)
                try await TestSupport.eventually("the relay to re-send") {
                    try await EventLog(store: store).backlog(logger: TestSupport.logger).count == 0
                }
                // The worker has read every message, the second copies included, once its group's
                // committed offsets reach the topic's end.
                let admin = KafkaAdmin(configuration: kafka, logger: TestSupport.logger)
                try await TestSupport.eventually("the worker to consume the redelivered events") {
                    let ends = try await admin.watermarks(topic: topic, timeout: .seconds(5))
                    let committed = try await admin.committedOffsets(groupID: worker.consumerGroup, topic: topic, timeout: .seconds(5))
                    return !ends.isEmpty && ends.allSatisfy { partition, marks in committed[partition] ?? 0 >= marks.high }
                }
                let after = try await fixture.directory(store)
                XCTAssertEqual(after, expected)
                // Each event's effects were applied exactly once: the table has no unique key, so a
                // second application would have left a second row.
                let counts = try await store.withConnection { connection in
                    var counts: [Int64: Int] = [:]
                    let rows = try await connection.query("SELECT event_id, count(*)::int8 FROM test_applications GROUP BY event_id", logger: TestSupport.logger)
                    for try await (id, count) in rows.decode((Int64, Int64).self) { counts[id] = Int(count) }
                    return counts
                }
                let lastID = try await EventLog(store: store).lastID(logger: TestSupport.logger)
                XCTAssertEqual(counts.count, Int(lastID), "every event was applied")
                XCTAssertEqual(counts.filter { $0.value != 1 }, [:], "no event was applied twice")
            }
            let live = try await IndexZoneStore.all(store: store, logger: TestSupport.logger)
            let count = try await Rebuild(projection: IndexerProjection(), store: store, kafka: kafka, topic: topic, consumerGroupSuffix: topic)
                .run(logger: TestSupport.logger)
            let lastID = try await EventLog(store: store).lastID(logger: TestSupport.logger)
            XCTAssertEqual(count, Int(lastID))
            let rebuilt = try await IndexZoneStore.all(store: store, logger: TestSupport.logger)
            XCTAssertEqual(rebuilt, live, "a replay rebuilds the same state")
        }
    }

    /// The broker is killed mid-run and comes back empty: no event is lost, and the worker's state
    /// ends equal to a fresh replay.
    func testBrokerRestartLosesNoEvent() async throws {
        let broker = try Broker()
        try broker.start()
        defer { broker.kill() }
        let topic = fixture.uniqueTopic()
        let fixture = fixture
        try await TestSupport.withMigratedStore { store, _ in
            var relayConfiguration = RelayConfiguration()
            relayConfiguration.topic = topic
            relayConfiguration.partitions = 4
            relayConfiguration.verifyInterval = .seconds(2)
            relayConfiguration.maxBackoff = .seconds(1)
            relayConfiguration.sendTimeout = .seconds(5)
            var workerConfiguration = WorkerConfiguration()
            workerConfiguration.topic = topic
            workerConfiguration.consumerGroupSuffix = topic
            workerConfiguration.maxBackoff = .seconds(1)
            workerConfiguration.reconcileInterval = .seconds(3)
            workerConfiguration.reconcileGrace = .seconds(2)
            let kafka = fixture.kafka(broker.address)
            let relay = Relay(store: store, kafka: kafka, configuration: relayConfiguration, logger: TestSupport.logger)
            let worker = Worker(projection: IndexerProjection(), store: store, kafka: kafka, configuration: workerConfiguration, logger: TestSupport.logger)
            try await fixture.runServices([relay, worker]) {
                try await fixture.workload(store, zoneCount: 6, rounds: 3, prefix: "Before")
                let before = try await fixture.expectedDirectory(store)
                try await TestSupport.eventually("the indexer to catch up before the restart") { try await fixture.directory(store) == before }

                broker.kill()
                try await fixture.workload(store, zoneCount: 6, rounds: 3, prefix: "During")
                try await Task.sleep(for: .seconds(2))
                try broker.start()
                try await fixture.workload(store, zoneCount: 6, rounds: 3, prefix: "After")

                let expected = try await fixture.expectedDirectory(store)
                try await TestSupport.eventually(timeout: .seconds(120), "the indexer to converge after the restart") {
                    try await fixture.directory(store) == expected
                }
            }
            let live = try await IndexZoneStore.all(store: store, logger: TestSupport.logger)
            try await Rebuild(projection: IndexerProjection(), store: store, kafka: nil, topic: topic).run(logger: TestSupport.logger)
            let rebuilt = try await IndexZoneStore.all(store: store, logger: TestSupport.logger)
            XCTAssertEqual(rebuilt, live)
        }
    }
}

/// The indexer, recording each application of an event in a table without a unique key, in the
/// transaction that applies it: an event applied twice leaves two rows.
struct CountingIndexer: Projection {
    let indexer = IndexerProjection()
    var name: String { indexer.name }

    func apply(_ event: EventEnvelope, in transaction: Transaction, logger: Logger) async throws {
        try await indexer.apply(event, in: transaction, logger: logger)
        try await transaction.connection.query("INSERT INTO test_applications (event_id) VALUES (\(event.id))", logger: logger)
    }

    func reset(in transaction: Transaction, logger: Logger) async throws {
        try await indexer.reset(in: transaction, logger: logger)
    }
}

/// Anything with a `run()`: the relay, workers and the store.
protocol RunnableService { func run() async throws }
extension Relay: RunnableService {}
extension Worker: RunnableService {}
