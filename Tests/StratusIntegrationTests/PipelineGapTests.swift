import Foundation
import Hummingbird
import HummingbirdTesting
import Logging
import PostgresNIO
import StratusAPI
import StratusCore
import StratusKafka
@testable import StratusPostgres
import StratusRelay
import StratusTesting
import StratusWorkers
import XCTest

/// Counts how often each event reaches it, in a table the test creates: "exactly once" then becomes
/// a row count instead of something a real projection's idempotent upserts would hide.
private struct ApplicationCountingProjection: Projection {
    let name = "test-application-counter"

    func apply(_ event: EventEnvelope, in transaction: Transaction, logger: Logger) async throws {
        try await transaction.connection.query("""
            INSERT INTO test_applied (event_id, zone_key, zone_sequence, times) VALUES
                (\(event.id), \(event.zoneKey.rawValue), \(event.zoneSequence), 1)
            ON CONFLICT (event_id) DO UPDATE SET times = test_applied.times + 1
            """, logger: logger)
    }

    func reset(in transaction: Transaction, logger: Logger) async throws {
        try await transaction.connection.query("DELETE FROM test_applied", logger: logger)
    }
}

/// The parts of the pipeline the other suites leave uncovered: the batch applier the running worker
/// uses, dead letters, default-zone compare-and-set under contention, and readiness.
final class PipelineGapTests: XCTestCase {
    static let database = DatabaseID(container: "iCloud.test", environment: .development, scope: .private, owner: "_alice")

    // MARK: - Applier.apply(batch:)

    /// Redelivered, overlapping, gapped and failing batches: every sequenced event of the log reaches
    /// the projection exactly once, each zone's events in sequence order, and the checkpoints end at
    /// each zone's last sequence.
    func testBatchApplyAppliesEverySequencedEventExactlyOnce() async throws {
        try await TestSupport.withMigratedStore { store, _ in
            let logger = TestSupport.logger
            try await store.withConnection { connection in
                _ = try await connection.query("""
                    CREATE TABLE test_applied (
                        event_id bigint PRIMARY KEY, zone_key text NOT NULL, zone_sequence bigint,
                        times bigint NOT NULL, position bigserial)
                    """, logger: logger)
            }
            // Zones written in turns, so their events interleave in the log as concurrent writers' do.
            let lengths = ["A": 8, "B": 4, "C": 3]
            let zones = ZoneStore(store: store)
            for round in 0..<8 {
                for name in ["A", "B", "C"] where round < lengths[name]! {
                    let zoneID = ZoneID(zoneName: name, ownerRecordName: Self.database.owner)
                    let command: ZoneCommand = round.isMultiple(of: 2) ? .create(zoneID) : .delete(zoneID)
                    _ = try await zones.modify([command], in: Self.database, causation: Causation(requestID: "batch-\(round)"), logger: logger)
                }
            }
            let log = try await EventLog(store: store).events(after: 0, limit: 1000, logger: logger)
            XCTAssertEqual(log.count, 15)
            var bySequence: [String: EventEnvelope] = [:]
            for event in log {
                let sequence = try XCTUnwrap(event.zoneSequence, "custom zone events are sequenced")
                bySequence["\(event.zoneKey.rawValue.split(separator: "/").last!)\(sequence)"] = event
            }
            let events = bySequence
            func batch(_ names: String...) throws -> [EventEnvelope] {
                try names.map { try XCTUnwrap(events[$0], "event \($0) is in the log") }
            }

            let applier = Applier(projection: ApplicationCountingProjection(), store: store)
            var applied = try await applier.apply(batch: try batch("A1", "B1", "A2", "A3", "B2"), logger: logger)
            XCTAssertEqual(applied, 5)
            applied = try await applier.apply(batch: try batch("A1", "B1", "A2", "A3", "B2"), logger: logger)
            XCTAssertEqual(applied, 0, "a redelivered batch takes no effect")
            // Overlapping the applied events, with an event twice within the batch.
            applied = try await applier.apply(batch: try batch("A2", "A3", "A4", "A4", "B2", "B3", "A5"), logger: logger)
            XCTAssertEqual(applied, 3, "only A4, B3 and A5 are new")

            // A batch that cannot be applied whole must take nothing with it, B4 included, or the
            // per-message retry that follows in the worker would apply B4 a second time.
            let ghost = EventEnvelope(
                id: 1_000_000, zoneKey: ZoneKey(database: Self.database, zoneName: "Ghost"), zoneSequence: 5, type: .zoneCreated,
                schemaVersion: 1, payload: Data("{}".utf8), causation: Causation(requestID: "ghost"), createdAt: 0)
            do {
                _ = try await applier.apply(batch: try batch("B4") + [ghost], logger: logger)
                XCTFail("a zone whose earlier events are not in the log cannot be applied")
            } catch let error as EventDecodingError {
                XCTAssertTrue(error.reason.contains("missing sequences"), error.reason)
            }
            let bAfterFailure = try await store.serializable(logger: logger) { transaction in
                try await CheckpointStore.lastSequence(worker: "test-application-counter", zoneKey: events["B4"]!.zoneKey, in: transaction)
            }
            XCTAssertEqual(bAfterFailure, 3, "the failed batch rolled back its checkpoint")

            // Gaps: A6, A7 and all of C before C3 never arrived; the applier pulls them from the log.
            applied = try await applier.apply(batch: try batch("A8", "A7", "C3", "B4"), logger: logger)
            XCTAssertEqual(applied, 7, "A6, A7, A8, C1, C2, C3 and B4")
            applied = try await applier.apply(batch: log, logger: logger)
            XCTAssertEqual(applied, 0, "the whole log again takes no effect")
            // The single-event path reads the checkpoints the batch path wrote.
            for name in ["A8", "B4", "C3", "A1"] {
                let outcome = try await applier.apply(try XCTUnwrap(events[name]), logger: logger)
                XCTAssertEqual(outcome, .duplicate, name)
            }

            let rows = try await store.withConnection { connection in
                let rows = try await connection.query(
                    "SELECT event_id, zone_key, zone_sequence, times FROM test_applied ORDER BY position", logger: logger)
                var result: [(id: Int64, zone: String, sequence: Int64, times: Int64)] = []
                for try await (id, zone, sequence, times) in rows.decode((Int64, String, Int64, Int64).self) {
                    result.append((id, zone, sequence, times))
                }
                return result
            }
            XCTAssertEqual(Set(rows.map(\.id)), Set(log.map(\.id)), "every event of the log reached the projection")
            XCTAssertEqual(rows.count, log.count)
            for row in rows where row.times != 1 {
                XCTFail("event \(row.id) (\(row.zone) #\(row.sequence)) was applied \(row.times) times")
            }
            for (zone, zoneRows) in Dictionary(grouping: rows, by: \.zone) {
                XCTAssertEqual(zoneRows.map(\.sequence), Array(1...Int64(zoneRows.count)), "\(zone) applied in sequence order, gaps filled first")
            }
            for (name, length) in lengths {
                let last = try await store.serializable(logger: logger) { transaction in
                    try await CheckpointStore.lastSequence(
                        worker: "test-application-counter", zoneKey: ZoneKey(database: Self.database, zoneName: name), in: transaction)
                }
                XCTAssertEqual(last, Int64(length), "checkpoint of zone \(name)")
            }
        }
    }

    // MARK: - Dead letters

    /// Unreadable bytes and an event whose payload cannot be applied end up in `worker_dead_letters`
    /// under the worker's name, and the valid zone events queued behind them on the same partition
    /// still reach the indexer's zone directory.
    func testWorkerSetsPoisonMessagesAsideAndKeepsApplying() async throws {
        let brokers = try TestSupport.kafkaBrokers()
        try await TestSupport.withMigratedStore { store, _ in
            let logger = TestSupport.logger
            let kafka = KafkaClientConfiguration(brokers: brokers)
            let topic = "test-dead-letters-" + UUID().uuidString.prefix(8).lowercased()
            // One partition: the valid events are behind the poison in one ordered stream, so they
            // arrive only if the worker gets past it.
            try await KafkaAdmin(configuration: kafka, logger: logger).createTopic(topic, partitions: 1, timeout: .seconds(10))
            let zones = ZoneStore(store: store)
            for name in ["Alpha", "Beta"] {
                _ = try await zones.modify([.create(ZoneID(zoneName: name, ownerRecordName: Self.database.owner))], in: Self.database,
                                           causation: Causation(requestID: "dead-letters"), logger: logger)
            }
            let log = try await EventLog(store: store).events(after: 0, limit: 10, logger: logger)
            guard log.count == 2 else { return XCTFail("expected two zone events, got \(log.count)") }
            let (alpha, beta) = (log[0], log[1])

            let garbage: [UInt8] = [0xDE, 0xAD, 0xBE, 0xEF, 0x00, 0xFF, 0x7B, 0x22]
            // A well-formed envelope whose payload is no zone: it decodes, then fails in the projection.
            let unappliable = EventEnvelope(
                id: 1_000_000, zoneKey: ZoneKey(database: Self.database, zoneName: "Bogus"), zoneSequence: 1, type: .zoneCreated,
                schemaVersion: 1, payload: Data(#"{"not":"a zone"}"#.utf8), causation: Causation(requestID: "bogus"),
                createdAt: Int64(Date().timeIntervalSince1970 * 1000))
            let unappliableBytes = Array(EventCoding.encode(unappliable))

            var configuration = WorkerConfiguration()
            configuration.topic = topic

            configuration.consumerGroupSuffix = topic
            configuration.maxApplyAttempts = 3
            configuration.maxBackoff = .milliseconds(200)
            // Only Kafka may deliver: the reconciler would apply Alpha and Beta from the event log and
            // hide a partition stuck behind the poison.
            configuration.reconcileInterval = .seconds(3600)
            let worker = Worker(projection: IndexerProjection(), store: store, kafka: kafka, configuration: configuration, logger: logger)
            let producer = try KafkaProducer(configuration: kafka, logger: logger)
            // Released at the end, the producer tears itself down on its own thread.
            func send(_ values: [(key: String, value: [UInt8])]) async throws {
                let results = try await producer.send(
                    values.map { KafkaOutgoingMessage(topic: topic, key: Array($0.key.utf8), value: $0.value) }, timeout: .seconds(20))
                for result in results { try result.get() }
            }
            func directory() async throws -> Set<String> {
                Set(try await IndexZoneStore.all(store: store, logger: logger).map(\.zoneKey))
            }

            let deadLetterOffsets: [Int64] = try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { try await worker.run() }
                defer { group.cancelAll() }
                // Undecodable bytes and a valid event, in one send so they may share a poll.
                try await send([("garbage", garbage), (alpha.zoneKey.rawValue, Array(EventCoding.encode(alpha)))])
                try await TestSupport.eventually("Alpha behind the undecodable message to be applied") {
                    try await directory().contains(alpha.zoneKey.rawValue)
                }
                // Both decode, so the worker tries them as one batch first; the batch fails on the
                // bogus payload and the worker must fall back to one by one.
                try await send([(unappliable.zoneKey.rawValue, unappliableBytes), (beta.zoneKey.rawValue, Array(EventCoding.encode(beta)))])
                try await TestSupport.eventually("Beta behind the unappliable event to be applied") {
                    try await directory().contains(beta.zoneKey.rawValue)
                }
                let offsets = try await Self.deadLetters(store).map(\.offset)
                // The broker numbers offsets its own way, so only "the commit moved past the poison" is checked.
                try await TestSupport.eventually("the worker to commit past the dead letters") {
                    let committed = try await KafkaAdmin(configuration: kafka, logger: logger)
                        .committedOffsets(groupID: worker.consumerGroup, topic: topic, timeout: .seconds(5))
                    return (committed[0] ?? -1) > (offsets.max() ?? .max)
                }
                return offsets
            }
            XCTAssertEqual(deadLetterOffsets.count, 2)

            let letters = try await Self.deadLetters(store)
            XCTAssertEqual(letters.count, 2, "exactly the two poison messages, not the valid events")
            XCTAssertEqual(letters.map(\.worker), ["stratus-indexer", "stratus-indexer"])
            XCTAssertEqual(letters.map(\.topic), [topic, topic])
            XCTAssertEqual(letters.map(\.partition), [0, 0])
            XCTAssertEqual(letters.map(\.value), [Data(garbage), Data(unappliableBytes)], "the message is kept as it came")
            XCTAssertTrue(letters[0].reason.hasPrefix("undecodable event"), letters[0].reason)
            XCTAssertFalse(letters[1].reason.isEmpty)
            XCTAssertLessThan(letters[0].offset, letters[1].offset)

            let expected = try await ZoneStore(store: store).list(in: Self.database, logger: logger)
            let indexed = try await IndexZoneStore.all(store: store, logger: logger)
            XCTAssertEqual(Dictionary(uniqueKeysWithValues: indexed.map { ($0.zoneKey, $0.incarnation) }),
                           Dictionary(uniqueKeysWithValues: expected.map { ($0.key.rawValue, $0.incarnation) }))
            for (zoneKey, sequence) in [(alpha.zoneKey, Int64(1)), (beta.zoneKey, 1), (unappliable.zoneKey, 1)] {
                let last = try await store.serializable(logger: logger) { transaction in
                    try await CheckpointStore.lastSequence(worker: "stratus-indexer", zoneKey: zoneKey, in: transaction)
                }
                // A dead letter moves its zone's checkpoint past it, so the zone's later events are
                // never held behind it (nor gap-filled through it again).
                XCTAssertEqual(last, sequence, "checkpoint of \(zoneKey)")
            }
        }
    }

    struct DeadLetter: Sendable {
        var worker: String
        var topic: String
        var partition: Int32
        var offset: Int64
        var value: Data
        var reason: String
    }

    static func deadLetters(_ store: PostgresStore) async throws -> [DeadLetter] {
        try await store.withConnection { connection in
            let rows = try await connection.query("""
                SELECT worker, topic, partition, "offset", value, reason FROM worker_dead_letters ORDER BY "offset"
                """, logger: TestSupport.logger)
            var letters: [DeadLetter] = []
            for try await (worker, topic, partition, offset, value, reason) in rows.decode((String, String, Int32, Int64, Data, String).self) {
                letters.append(DeadLetter(worker: worker, topic: topic, partition: partition, offset: offset, value: value, reason: reason))
            }
            return letters
        }
    }

    // MARK: - Default zone compare-and-set over HTTP

    typealias Body = [String: Any]

    static func post(_ client: any TestClientProtocol, _ uri: String, _ json: Any) async throws -> (Int, Body) {
        let data = try JSONSerialization.data(withJSONObject: json)
        return try await client.execute(uri: uri, method: .post, body: ByteBuffer(data: data)) { response in
            let object = try? JSONSerialization.jsonObject(with: Data(buffer: response.body), options: [.fragmentsAllowed]) as? Body
            return (Int(response.status.code), object ?? [:])
        }
    }

    static func counter(_ record: Body) -> Int? {
        ((record["fields"] as? Body)?["count"] as? Body)?["value"] as? Int
    }

    struct Tally: Sendable {
        var acknowledged: [String: Int] = [:]
        /// The change tags the server reported for acknowledged writes, by record.
        var acknowledgedTags: [String: [String]] = [:]
        var conflicts = 0
        var serverErrors: [String] = []
        var unexpected: [String] = []
        var total: Int { acknowledged.values.reduce(0, +) }
    }

    /// 8 clients each make 10 increments stick by read-modify-write with change tags on 2 records of
    /// the private `_defaultZone`: every acknowledged increment is in the final values, each write's
    /// event is based on a distinct earlier tag (no lost update), nobody sees a 5xx, and neither the
    /// zones table nor the events carry a counter for the default zone.
    func testDefaultZoneWritesAreCompareAndSetPerRecordWithoutAZoneCounter() async throws {
        try await RecordAPITests.withAPI { fixture, client in
            let names = ["c0", "c1"]
            let (status, created) = try await Self.post(client, fixture.path("records/modify"), [
                "operations": names.map { ["operationType": "create", "record": ["recordName": $0, "recordType": "Counter", "fields": ["count": ["value": 0]]]] },
            ])
            XCTAssertEqual(status, 200)
            XCTAssertEqual((created["records"] as? [Body])?.compactMap { $0["serverErrorCode"] as? String }, [], "\(created)")

            let clients = 8, incrementsEach = 10
            let tally = try await withThrowingTaskGroup(of: Tally.self) { group in
                for index in 0..<clients {
                    group.addTask {
                        var tally = Tally()
                        var attempts = 0
                        // Bounded so a server that never acknowledges fails the test instead of hanging it.
                        while tally.total < incrementsEach, attempts < 2000 {
                            attempts += 1
                            let name = names[(index + attempts) % names.count]
                            // No zoneID anywhere: the request addresses the default zone.
                            let (lookupStatus, looked) = try await Self.post(client, fixture.path("records/lookup"), ["records": [["recordName": name]]])
                            guard lookupStatus < 500 else { tally.serverErrors.append("lookup \(lookupStatus) \(looked)"); continue }
                            guard let current = (looked["records"] as? [Body])?.first, let tag = current["recordChangeTag"] as? String,
                                  let count = Self.counter(current) else {
                                tally.unexpected.append("lookup \(lookupStatus) \(looked)")
                                continue
                            }
                            let (status, reply) = try await Self.post(client, fixture.path("records/modify"), [
                                "operations": [["operationType": "update", "record": [
                                    "recordName": name, "recordType": "Counter", "recordChangeTag": tag, "fields": ["count": ["value": count + 1]],
                                ]]],
                            ])
                            guard status < 500 else { tally.serverErrors.append("modify \(status) \(reply)"); continue }
                            let record = (reply["records"] as? [Body])?.first ?? reply
                            switch record["serverErrorCode"] as? String {
                            case nil where status == 200:
                                tally.acknowledged[name, default: 0] += 1
                                tally.acknowledgedTags[name, default: []].append(record["recordChangeTag"] as? String ?? "(none)")
                            case "CONFLICT": tally.conflicts += 1
                            default: tally.unexpected.append("modify \(status) \(reply)")
                            }
                        }
                        return tally
                    }
                }
                var total = Tally()
                for try await part in group {
                    total.acknowledged.merge(part.acknowledged, uniquingKeysWith: +)
                    total.acknowledgedTags.merge(part.acknowledgedTags, uniquingKeysWith: +)
                    total.conflicts += part.conflicts
                    total.serverErrors += part.serverErrors
                    total.unexpected += part.unexpected
                }
                return total
            }
            XCTAssertEqual(tally.serverErrors, [], "no request may get a 5xx")
            XCTAssertEqual(tally.unexpected, [])
            XCTAssertEqual(tally.total, clients * incrementsEach, "every client got its increments acknowledged")
            XCTAssertGreaterThan(tally.conflicts, 0, "8 clients on 2 records must collide, or the test proves nothing about compare-and-set")

            let (_, final) = try await Self.post(client, fixture.path("records/lookup"), ["records": names.map { ["recordName": $0] }])
            let records = final["records"] as? [Body] ?? []
            XCTAssertEqual(records.count, names.count)
            var finalTags: [String: String] = [:]
            for record in records {
                let name = record["recordName"] as? String ?? "?"
                finalTags[name] = record["recordChangeTag"] as? String
                XCTAssertEqual(Self.counter(record), tally.acknowledged[name, default: 0], "every acknowledged increment of \(name) is in its value")
            }

            // The event log tells the same story write by write: each save of a record is based on
            // a different earlier tag, and they chain from the create to the final tag.
            let log = try await EventLog(store: fixture.store).events(after: 0, limit: 1000, logger: TestSupport.logger)
            let saves = try log.filter { $0.type == RecordSaved.eventType }.map { (event: $0, saved: try $0.decode(RecordSaved.self)) }
            XCTAssertEqual(saves.count, names.count + clients * incrementsEach, "one event per acknowledged write")
            for save in saves {
                XCTAssertTrue(save.saved.zoneID.isDefaultZone)
                XCTAssertNil(save.event.zoneSequence, "default zone events carry no zone sequence")
                XCTAssertNil(save.saved.record.version)
            }
            for name in names {
                let mine = saves.map(\.saved).filter { $0.record.recordName == name }
                var next: [String: String] = [:]
                var roots: [String] = []
                for saved in mine {
                    guard let previous = saved.previousChangeTag else { roots.append(saved.record.changeTag); continue }
                    XCTAssertNil(next[previous], "two acknowledged writes of \(name) were both based on tag \(previous): a lost update")
                    next[previous] = saved.record.changeTag
                }
                XCTAssertEqual(roots.count, 1, "one create of \(name)")
                var tag = roots.first
                var length = roots.count
                var chain = Set(roots)
                while let current = tag, let following = next[current] {
                    tag = following
                    length += 1
                    chain.insert(following)
                }
                // Names the writes behind a wrong final value: acknowledged, yet neither stored nor logged.
                let vanished = (tally.acknowledgedTags[name] ?? []).filter { !chain.contains($0) }
                XCTAssertEqual(vanished, [], "acknowledged writes of \(name) whose tags never reached the record or the event log")
                XCTAssertEqual(length, mine.count, "the writes of \(name) form one chain")
                XCTAssertEqual(tag, finalTags[name], "the chain of \(name) ends at its current tag")
            }

            let zoneRows = try await fixture.store.withConnection { connection in
                let rows = try await connection.query(
                    "SELECT count(*)::bigint FROM zones WHERE zone_name = \(ZoneID.defaultZoneName)", logger: TestSupport.logger)
                var count: Int64 = -1
                for try await value in rows.decode(Int64.self) { count = value }
                return count
            }
            XCTAssertEqual(zoneRows, 0, "default zones have no counter row")
            print("default zone read-modify-write: \(tally.total) acknowledged, \(tally.conflicts) conflicts")
        }
    }

    // MARK: - Readiness

    /// `/ready` with the checks the runtime builds: 503 naming the broker while nothing listens at its
    /// address, 200 once the database and the broker both answer.
    func testReadyAnswers503WithoutTheBrokerAnd200WithIt() async throws {
        let brokers = try TestSupport.kafkaBrokers()
        // A port that was free a moment ago: nothing listens there.
        let nowhere = "127.0.0.1:\(try Broker.freePort())"
        try await TestSupport.withMigratedStore { store, _ in
            let down = try await Self.ready(store: store, brokers: nowhere)
            XCTAssertEqual(down.status, 503)
            XCTAssertEqual(down.state, "not ready")
            XCTAssertEqual(down.checks, ["database": "ok", "broker": "unreachable"])

            let up = try await Self.ready(store: store, brokers: brokers)
            XCTAssertEqual(up.status, 200)
            XCTAssertEqual(up.state, "ready")
            XCTAssertEqual(up.checks, ["database": "ok", "broker": "ok"])
        }
    }

    /// GET /ready on a router whose checks are built as `StratusProcess.runAPI` builds them (that code
    /// is inline there, so it is mirrored here).
    static func ready(store: PostgresStore, brokers: String) async throws -> (status: Int, state: String?, checks: [String: String]) {
        let logger = TestSupport.logger
        let kafka = KafkaClientConfiguration(brokers: brokers)
        let topic = RelayConfiguration().topic
        let readiness = [
            ReadinessCheck(name: "database") { try await store.ping(logger: logger) },
            ReadinessCheck(name: "broker") {
                _ = try await KafkaAdmin(configuration: kafka, logger: logger).partitionCount(topic: topic, timeout: .seconds(3))
            },
        ]
        let router = buildRouter(APIDependencies(store: store, readiness: readiness, metrics: { "" }),
                                 configuration: APIConfiguration(secretKey: SecretKey.generate()))
        return try await Application(router: router, logger: logger).test(.router) { client in
            try await client.execute(uri: "/ready", method: .get) { response in
                let object = try JSONSerialization.jsonObject(with: Data(buffer: response.body)) as? Body ?? [:]
                return (Int(response.status.code), object["status"] as? String, object["checks"] as? [String: String] ?? [:])
            }
        }
    }
}
