import Foundation
import Logging
import PostgresNIO
import StratusCore
import StratusKafka
@testable import StratusPostgres
import StratusRelay
import StratusTesting
import StratusWorkers
import XCTest

/// One tenant's worst records never stop the pipeline for the others: what cannot be delivered is
/// refused at write time, and an event that fails for good gets a terminal state while every other
/// zone's events keep flowing (real PostgreSQL and broker).
final class PoisonEventTests: XCTestCase {
    static let mallory = DatabaseID(container: "iCloud.poison", environment: .development, scope: .private, owner: "_mallory")
    static let alice = DatabaseID(container: "iCloud.poison", environment: .development, scope: .private, owner: "_alice")
    static let zone = "Notes"

    func testARecordWhoseEventCannotBeDeliveredIsRefusedAtWriteTime() async throws {
        try await TestSupport.withMigratedStore { store, _ in
            try await Self.createZones(store)
            // Under the 1 MB field limit, but its event would pass the broker's message limit.
            let outcome = try await Self.save(store, Self.mallory, "huge", text: String(repeating: "x", count: 960_000))
            guard case .failure(let failure) = outcome else { return XCTFail("a record whose event exceeds the limit was accepted") }
            XCTAssertEqual(failure.error.code, .limitExceeded)
            XCTAssertTrue(failure.error.reason.contains("event limit is 950000"), failure.error.reason)
            let events = try await EventLog(store: store).events(after: 0, limit: 100, logger: TestSupport.logger)
            XCTAssertFalse(events.contains { $0.type == RecordSaved.eventType }, "a refused write appends no event")
            // One under the limit is accepted, and its event's message is no bigger than its JSON (no base64).
            let accepted = try await Self.save(store, Self.mallory, "large", text: String(repeating: "y", count: 750_000))
            guard case .success = accepted else { return XCTFail("a 750 KB record was refused: \(accepted)") }
            let large = try await EventLog(store: store).events(after: 0, limit: 100, logger: TestSupport.logger).last!
            let message = EventCoding.encodeEnvelope(large)
            XCTAssertLessThan(message.count, 760_000, "the envelope carries the payload as JSON")
            XCTAssertLessThanOrEqual(message.count + large.zoneKey.rawValue.utf8.count, 950_000)
            let decoded = try EventCoding.decoder.decode(EventEnvelope.self, from: message)
            XCTAssertEqual(try decoded.decode(RecordSaved.self).record.recordName, "large")
        }
    }

    /// The broker refuses one tenant's event for good (here: a relay whose message limit is lower
    /// than the write path's): the event is marked rejected, the other tenant's events are published
    /// and indexed within the normal lag, and the indexer still gets the rejected event from the log.
    func testAnEventTheBrokerRefusesNeverWedgesTheRelay() async throws {
        // Batches of two: the refused events fill whole batches, as 500 of them fill the default one.
        try await Self.withPipeline(relaySettings: ["message.max.bytes": "200000"], relayBatch: 2) { store in
            // Mallory's worst: a burst of events the broker will not take, more than a relay batch.
            for index in 0..<3 {
                let outcome = try await Self.save(store, Self.mallory, "big\(index)", text: String(repeating: "z", count: 300_000))
                guard case .success = outcome else { return XCTFail("\(outcome)") }
            }
            let started = ContinuousClock.now
            _ = try await Self.save(store, Self.alice, "after", text: "still served")
            try await TestSupport.eventually(timeout: .seconds(30), "the other tenant's record to be indexed") { try await Self.indexed(store, "after") }
            XCTAssertLessThan(ContinuousClock.now - started, .seconds(10), "the other tenant waited on the poison events")
            try await TestSupport.eventually(timeout: .seconds(30), "the relay to empty its backlog") {
                try await EventLog(store: store).backlog(logger: TestSupport.logger).count == 0
            }
            let rejected = try await Self.rejectedEvents(store)
            XCTAssertEqual(rejected.count, 3, "each refused event has its terminal state")
            XCTAssertTrue(rejected.allSatisfy { $0.contains("too large") || $0.contains("size") }, "\(rejected)")
            // Mallory's next small event reaches the indexer, which fills the gap from the event log.
            _ = try await Self.save(store, Self.mallory, "small", text: "tiny")
            try await TestSupport.eventually(timeout: .seconds(30), "the gap to be filled from the log") {
                let small = try await Self.indexed(store, "small")
                let big = try await Self.indexed(store, "big2")
                return small && big
            }
        }
    }

    /// A record of ~660 KB of distinct words is indexed (its search document capped), and an event
    /// that can never apply is set aside with the checkpoint moving past it: the zone's later events
    /// and every other zone's still reach the index, and a reindex completes around it.
    func testARecordOrEventThatCannotApplyNeverStallsTheIndexer() async throws {
        try await Self.withPipeline { store in
            // Distinct words (0, 1, 2, … in base 36 behind a letter) until ~660 KB: far past what one
            // PostgreSQL text search document may hold.
            var text = "w0"
            var next = 1
            while text.utf8.count < 660_000 {
            text += " w" + String(next * 7919, radix: 36)
            next += 1
            }
            let words = text
            let started = ContinuousClock.now
            _ = try await Self.save(store, Self.mallory, "words", text: words)
            let poison = try await Self.appendUndecodableEvent(store, Self.mallory)
            _ = try await Self.save(store, Self.mallory, "later", text: "after the poison")
            _ = try await Self.save(store, Self.alice, "other", text: "another tenant")
            try await TestSupport.eventually(timeout: .seconds(30), "every good record to be indexed") {
                var all = true
                for name in ["words", "later", "other"] where !(try await Self.indexed(store, name)) { all = false }
                return all
            }
            XCTAssertLessThan(ContinuousClock.now - started, .seconds(15), "the indexer was held up")
            let letters = try await Self.deadLetters(store)
            XCTAssertEqual(letters.map(\.eventID), [poison], "only the poison event is set aside")
            let checkpoint = try await Self.checkpoint(store, Self.mallory)
            let counter = try await Self.zoneCounter(store, Self.mallory)
            XCTAssertEqual(checkpoint, counter, "the checkpoint moved past the poison event")
            // Full-text search finds a word from the start of the capped document.
            let found = try await Self.searchFinds(store, "w0")
            XCTAssertTrue(found)
            // A reindex under the live indexer completes around the poison event.
            let (generation, _) = try await Reindex(store: store).run(pageSize: 2, logger: TestSupport.logger)
            let live = try await QueryIndexGenerations(store: store).live(logger: TestSupport.logger)
            XCTAssertEqual(live, generation)
            for name in ["words", "later", "other", "warmup"] {
                let present = try await Self.indexed(store, name)
                XCTAssertTrue(present, "\(name) is in the rebuilt generation")
            }
            let letters2 = try await Self.deadLetters(store)
            XCTAssertEqual(letters2.filter { $0.eventID == poison }.count, 2, "the reindex recorded the poison event too")
        }
    }

    /// A reindex stopped part-way (an operator's Ctrl-C) leaves no half-built generation behind for
    /// the live indexer to keep writing, and the live generation keeps serving.
    func testAStoppedReindexLeavesNoHalfBuiltGeneration() async throws {
        try await TestSupport.withMigratedStore { store, _ in
            try await Self.createZones(store)
            for index in 0..<6 { _ = try await Self.save(store, Self.alice, "r\(index)", text: "text \(index)") }
            let generations = QueryIndexGenerations(store: store)
            let live = try await generations.live(logger: TestSupport.logger)
            let pages = AttemptCounter()
            let reindex = Task {
                try await Reindex(store: store).run(pageSize: 1, logger: TestSupport.logger) { _ in
                    pages.increment()
                    withUnsafeCurrentTask { $0?.cancel() }
                }
            }
            if case .success = await reindex.result { XCTFail("a cancelled reindex finished") }
            XCTAssertEqual(pages.value, 1)
            let stillLive = try await generations.live(logger: TestSupport.logger)
            XCTAssertEqual(stillLive, live, "the live generation still serves")
            let leftovers = try await store.withConnection { connection in
                let rows = try await connection.query("""
                    SELECT (SELECT count(*) FROM query_index.generations WHERE state = 'building')
                         + (SELECT count(*) FROM query_index.records WHERE generation <> \(live))
                    """, logger: TestSupport.logger)
                var count: Int64 = -1
                for try await value in rows.decode(Int64.self) { count = value }
                return count
            }
            XCTAssertEqual(leftovers, 0, "the half-built generation and its rows are gone")
        }
    }

    // MARK: - Helpers

    /// Both tenants' zones, the relay (with extra broker settings) and the indexer on a topic of
    /// the test's own, running and warmed up (one record indexed) before `body`.
    static func withPipeline(relaySettings: [String: String] = [:], relayBatch: Int = 500, _ body: @Sendable (PostgresStore) async throws -> Void) async throws {
        let brokers = try TestSupport.kafkaBrokers()
        try await TestSupport.withMigratedStore { store, _ in
            try await createZones(store)
            let topic = "poison-" + UUID().uuidString.prefix(8).lowercased()
            var relayKafka = KafkaClientConfiguration(brokers: brokers)
            relayKafka.extra = relaySettings
            var relayConfiguration = RelayConfiguration()
            relayConfiguration.topic = topic
            relayConfiguration.partitions = 2
            relayConfiguration.batchSize = relayBatch
            var workerConfiguration = WorkerConfiguration()
            workerConfiguration.topic = topic
            workerConfiguration.consumerGroupSuffix = topic
            let relay = Relay(store: store, kafka: relayKafka, configuration: relayConfiguration, logger: TestSupport.logger)
            let indexer = Worker(projection: IndexerProjection(), store: store, kafka: KafkaClientConfiguration(brokers: brokers),
                                 configuration: workerConfiguration, logger: TestSupport.logger)
            try await PipelineFixture().runServices([relay, indexer]) {
                _ = try await save(store, alice, "warmup", text: "hello")
                try await TestSupport.eventually(timeout: .seconds(60), "the indexer to start") { try await indexed(store, "warmup") }
                try await body(store)
            }
        }
    }

    static func createZones(_ store: PostgresStore) async throws {
        for database in [mallory, alice] {
            _ = try await ZoneStore(store: store).modify([.create(ZoneID(zoneName: zone, ownerRecordName: database.owner))], in: database,
                                                         causation: Causation(requestID: "setup"), logger: TestSupport.logger)
        }
    }

    static func save(_ store: PostgresStore, _ database: DatabaseID, _ name: String, text: String) async throws -> Result<RecordStore.Outcome, RecordStore.Failure> {
        try await RecordStore(store: store).modify(
            [RecordStore.Command(type: .forceReplace, input: RecordInput(recordName: name, recordType: "Note", fields: ["body": .string(text)]))],
            zone: ZoneID(zoneName: zone, ownerRecordName: database.owner), in: database, atomic: true,
            causation: Causation(requestID: "poison", userRecordName: database.owner), deviceID: nil, logger: TestSupport.logger)[0]
    }

    static func indexed(_ store: PostgresStore, _ name: String) async throws -> Bool {
        try await store.withConnection { connection in
            let rows = try await connection.query("""
                SELECT count(*)::bigint FROM query_index.records r JOIN query_index.generations g ON g.generation = r.generation AND g.state = 'live'
                WHERE r.record_name = \(name) AND NOT r.deleted
                """, logger: TestSupport.logger)
            for try await count in rows.decode(Int64.self) { return count > 0 }
            return false
        }
    }

    static func searchFinds(_ store: PostgresStore, _ word: String) async throws -> Bool {
        try await store.withConnection { connection in
            let rows = try await connection.query("""
                SELECT count(*)::bigint FROM query_index.records r JOIN query_index.generations g ON g.generation = r.generation AND g.state = 'live'
                WHERE r.search @@ to_tsquery(g.language, \(word))
                """, logger: TestSupport.logger)
            for try await count in rows.decode(Int64.self) { return count > 0 }
            return false
        }
    }

    static func rejectedEvents(_ store: PostgresStore) async throws -> [String] {
        try await store.withConnection { connection in
            let rows = try await connection.query("SELECT publish_error FROM events WHERE publish_error IS NOT NULL ORDER BY id", logger: TestSupport.logger)
            var reasons: [String] = []
            for try await reason in rows.decode(String.self) { reasons.append(reason.lowercased()) }
            return reasons
        }
    }

    static func deadLetters(_ store: PostgresStore) async throws -> [(eventID: Int64?, reason: String)] {
        try await store.withConnection { connection in
            let rows = try await connection.query(
                "SELECT event_id, reason FROM worker_dead_letters WHERE worker = 'stratus-indexer' ORDER BY id", logger: TestSupport.logger)
            var letters: [(Int64?, String)] = []
            for try await (id, reason) in rows.decode((Int64?, String).self) { letters.append((id, reason)) }
            return letters
        }
    }

    static func checkpoint(_ store: PostgresStore, _ database: DatabaseID) async throws -> Int64 {
        try await store.withConnection { connection in
            let key = ZoneKey(database: database, zoneName: zone).rawValue
            let rows = try await connection.query(
                "SELECT last_sequence FROM worker_checkpoints WHERE worker = 'stratus-indexer' AND zone_key = \(key)", logger: TestSupport.logger)
            for try await sequence in rows.decode(Int64.self) { return sequence }
            return 0
        }
    }

    static func zoneCounter(_ store: PostgresStore, _ database: DatabaseID) async throws -> Int64 {
        try await store.withConnection { connection in
            let key = ZoneKey(database: database, zoneName: zone).rawValue
            let rows = try await connection.query("SELECT change_counter FROM zones WHERE zone_key = \(key)", logger: TestSupport.logger)
            for try await counter in rows.decode(Int64.self) { return counter }
            return 0
        }
    }

    /// Appends, as the write path would (the zone's next sequence, under its lock), an event whose
    /// payload cannot be read: a stand-in for any event a worker can never apply. Returns its id.
    static func appendUndecodableEvent(_ store: PostgresStore, _ database: DatabaseID) async throws -> Int64 {
        let key = ZoneKey(database: database, zoneName: zone).rawValue
        return try await store.serializable(logger: TestSupport.logger, lock: key) { transaction in
            let rows = try await transaction.connection.query("""
                WITH bumped AS (UPDATE zones SET change_counter = change_counter + 1, modified_at = now() WHERE zone_key = \(key) RETURNING change_counter)
                INSERT INTO events (zone_key, zone_sequence, type, schema_version, payload, causation)
                SELECT \(key), change_counter, 'record.saved', 1, '{"not":"a record"}'::jsonb, '{"requestID":"poison"}'::jsonb FROM bumped
                RETURNING id
                """, logger: transaction.logger)
            for try await id in rows.decode(Int64.self) {
                try await transaction.connection.query("SELECT pg_notify('stratus_events', '')", logger: transaction.logger)
                return id
            }
            throw StratusError(.internalError, "no event appended")
        }
    }
}
