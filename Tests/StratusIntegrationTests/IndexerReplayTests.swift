import Foundation
import PostgresNIO
import StratusCore
@testable import StratusPostgres
import StratusTesting
import StratusWorkers
import Synchronization
import XCTest

/// Looks taken at the live index, counted across tasks.
private final class Looks: Sendable {
    private let taken = Mutex(0)
    var count: Int { taken.withLock { $0 } }
    func add() { taken.withLock { $0 += 1 } }
}

/// `stratus replay stratus-indexer` rebuilds the query index into a new generation: queries keep
/// their answers while it runs, and it ends with the same index and zone directory.
final class IndexerReplayTests: XCTestCase {
    func testReplayKeepsTheLiveIndexServingAndRebuildsTheSameIndex() async throws {
        try await TestSupport.withMigratedStore { store, _ in
            let logger = TestSupport.logger
            let database = DatabaseID(container: "iCloud.test", environment: .development, scope: .private, owner: "_alice")
            let zone = ZoneID(zoneName: "Replayed", ownerRecordName: "_alice")
            _ = try await ZoneStore(store: store).modify([.create(zone)], in: database, causation: Causation(requestID: "r"), logger: logger)
            let records = RecordStore(store: store)
            for batch in 0..<4 {
                let commands = (0..<50).map { index in
                    RecordStore.Command(type: .create, input: RecordInput(
                        recordName: "r\(batch)-\(index)", recordType: "Item", fields: ["n": .int64(Int64(batch * 50 + index))]))
                }
                _ = try await records.modify(commands, zone: zone, in: database, atomic: true, causation: Causation(requestID: "r\(batch)"), deviceID: nil, logger: logger)
            }
            // The live index and the zone directory, as the running indexer builds them.
            let applier = Applier(projection: IndexerProjection(), store: store)
            let events = try await EventLog(store: store).events(after: 0, limit: 10_000, logger: logger)
            _ = try await applier.apply(batch: events, logger: logger)
            let before = try await Self.snapshot(store)
            XCTAssertEqual(before.live, 200)
            XCTAssertEqual(before.zones, ["Replayed"])

            // While the replay runs (in pages of 5 events), the live generation never loses a record.
            let looks = Looks()
            let smallest = try await withThrowingTaskGroup(of: Int?.self) { group in
                group.addTask {
                    // Not before the first look has ended: a replay this small can otherwise end
                    // before any look does (a loaded machine), and then nothing was checked.
                    try await TestSupport.eventually(timeout: .seconds(30), "a first look at the live index") { looks.count > 0 }
                    try await IndexerReplay(store: store, kafka: nil, topic: "unused").run(pageSize: 5, logger: logger)
                    return nil
                }
                group.addTask {
                    var smallest = Int.max
                    while !Task.isCancelled {
                        do {
                            smallest = min(smallest, try await Self.snapshot(store).live)
                            looks.add()
                        } catch where Task.isCancelled {
                            break  // the replay finished while this look was under way
                        }
                        try? await Task.sleep(for: .milliseconds(5))
                    }
                    return smallest
                }
                _ = try await group.next()
                group.cancelAll()
                var result = Int.max
                for try await value in group { if let value { result = value } }
                return result
            }
            XCTAssertEqual(smallest, 200, "queries kept their answers during the replay")
            let after = try await Self.snapshot(store)
            XCTAssertEqual(after.live, 200)
            XCTAssertGreaterThan(after.generation, before.generation, "the index was rebuilt into a new generation")
            XCTAssertEqual(after.documents, before.documents, "the rebuilt index holds the same documents")
            XCTAssertEqual(after.zones, ["Replayed"], "the zone directory was rebuilt")
        }
    }

    /// The text search configuration belongs to the index generation: `simple` by default (no
    /// stemming), another one after a rebuild that asks for it, used alike by the documents the
    /// rebuild and the live indexer write and by the queries that read them.
    func testAReindexCanChangeTheSearchLanguage() async throws {
        try await TestSupport.withMigratedStore { store, _ in
            let logger = TestSupport.logger
            let database = DatabaseID(container: "iCloud.test", environment: .development, scope: .private, owner: "_alice")
            let zone = ZoneID(zoneName: "Words", ownerRecordName: "_alice")
            _ = try await ZoneStore(store: store).modify([.create(zone)], in: database, causation: Causation(requestID: "w"), logger: logger)
            let records = RecordStore(store: store)
            let applier = Applier(projection: IndexerProjection(), store: store)
            var applied: Int64 = 0
            func save(_ name: String, _ title: String) async throws {
                _ = try await records.modify([RecordStore.Command(type: .create, input: RecordInput(recordName: name, recordType: "Note", fields: ["title": .string(title)]))],
                                             zone: zone, in: database, atomic: true, causation: Causation(requestID: name), deviceID: nil, logger: logger)
                let events = try await EventLog(store: store).events(after: applied, limit: 100, logger: logger)
                _ = try await applier.apply(batch: events, logger: logger)
                applied = events.last?.id ?? applied
            }
            func matches(_ token: String, field: String = "title") async throws -> [String] {
                let query = try RecordQuery.parse(.object(["recordType": .string("Note"), "filterBy": .array([.object([
                    "fieldName": .string(field), "comparator": .string("CONTAINS_ALL_TOKENS"), "fieldValue": .object(["value": .string(token)]),
                ])])]))
                return try await QueryStore(store: store).run(query, in: database, scope: .zone("Words"), limit: 50, after: nil, logger: logger)
                    .records.map(\.record.recordName).sorted()
            }
            try await save("a", "Running quickly")
            let simpleRun = try await matches("run")
            XCTAssertEqual(simpleRun, [], "simple does not stem")
            let simpleRunning = try await matches("running")
            XCTAssertEqual(simpleRunning, ["a"])

            do {
                try await Reindex(store: store).run(language: "klingon", logger: logger)
                XCTFail("an unknown text search configuration is refused")
            } catch let error as StratusError {
                XCTAssertTrue(error.reason.contains("klingon"), error.reason)
            }
            try await Reindex(store: store).run(language: "english", logger: logger)
            let englishRun = try await matches("run")
            XCTAssertEqual(englishRun, ["a"], "the rebuilt documents are stemmed")
            try await save("b", "The runner runs")
            let afterLive = try await matches("run")
            XCTAssertEqual(afterLive, ["a", "b"], "the live indexer writes the new generation's language")
            let everything = try await matches("runs", field: "___all")
            XCTAssertEqual(everything, ["a", "b"])
            // A later rebuild without a language keeps the current one.
            try await Reindex(store: store).run(logger: logger)
            let kept = try await matches("run")
            XCTAssertEqual(kept, ["a", "b"])
        }
    }

    /// A rebuild while the live indexer keeps writing the same generation: it completes, and the
    /// generation it swaps in holds every record, each at its latest version.
    func testAReindexUnderLiveWritesCompletesWithEveryRecord() async throws {
        try await TestSupport.withMigratedStore { store, _ in
            let logger = TestSupport.logger
            let database = DatabaseID(container: "iCloud.test", environment: .development, scope: .private, owner: "_alice")
            let zone = ZoneID(zoneName: "Busy", ownerRecordName: "_alice")
            _ = try await ZoneStore(store: store).modify([.create(zone)], in: database, causation: Causation(requestID: "b"), logger: logger)
            let records = RecordStore(store: store)
            let applier = Applier(projection: IndexerProjection(), store: store)
            @Sendable func write(_ round: Int) async throws {
                // New records and new versions of earlier ones, so both writers touch the same rows.
                let commands = (0..<20).map { index in
                    RecordStore.Command(type: .forceUpdate, input: RecordInput(
                        recordName: "r\((round * 7 + index) % 120)", recordType: "Item", fields: ["round": .int64(Int64(round))]))
                }
                _ = try await records.modify(commands, zone: zone, in: database, atomic: true, causation: Causation(requestID: "w\(round)"), deviceID: nil, logger: logger)
            }
            var applied: Int64 = 0
            for round in 0..<30 { try await write(round) }
            let backlog = try await EventLog(store: store).events(after: 0, limit: 10_000, logger: logger)
            _ = try await applier.apply(batch: backlog, logger: logger)
            applied = backlog.last?.id ?? 0
            let start = applied
            let rounds = try await withThrowingTaskGroup(of: Int.self) { group in
                group.addTask {
                    try await Reindex(store: store).run(pageSize: 25, logger: logger)
                    return -1
                }
                group.addTask {
                    // The live indexer: writes, then applies them, until the rebuild is done.
                    var position = start
                    var round = 30
                    while !Task.isCancelled {
                        do {
                            try await write(round)
                            let events = try await EventLog(store: store).events(after: position, limit: 1000, logger: logger)
                            _ = try await applier.apply(batch: events, logger: logger)
                            position = events.last?.id ?? position
                            round += 1
                        } catch where Task.isCancelled {
                            break
                        }
                    }
                    return round - 30
                }
                var rounds = 0
                let first = try await group.next()
                group.cancelAll()
                for try await value in group where value >= 0 { rounds = value }
                if let first, first >= 0 { rounds = first }
                return rounds
            }
            XCTAssertGreaterThan(rounds, 0, "writes ran while the index was rebuilt")
            // Whatever was written after the last round the live indexer applied, apply now.
            let rest = try await EventLog(store: store).events(after: 0, limit: 100_000, logger: logger)
            _ = try await applier.apply(batch: rest, logger: logger)
            let indexed = try await Self.snapshot(store)
            let expected = try await store.withConnection { connection in
                var documents: [String] = []
                for try await (name, fields) in try await connection.query("""
                    SELECT record_name, fields::text FROM records WHERE zone_name = 'Busy' ORDER BY record_name
                    """, logger: logger).decode((String, String).self) {
                    documents.append("\(name)=\(fields)")
                }
                return documents
            }
            XCTAssertEqual(indexed.live, 120)
            XCTAssertEqual(indexed.documents.map { $0.replacingOccurrences(of: " ", with: "") }, expected.map { $0.replacingOccurrences(of: " ", with: "") },
                           "every record at its latest version")
        }
    }

    /// A rebuild that writes several pages at once (pages of two events, four at a time) builds
    /// the very rows the live indexer built, across every kind of field, updates, deletions and a
    /// zone deleted and created again (whose deletion must not overtake the saves before it), and
    /// reports its progress in the log's order.
    func testAReindexOfPagesAtOnceBuildsWhatTheLiveIndexerBuilt() async throws {
        try await TestSupport.withMigratedStore { store, _ in
            let logger = TestSupport.logger
            let (database, kept, dropped, zones, records) = try await Self.twoZones(store)
            func fields(_ index: Int) -> [String: FieldValue] {
                ["title": .string("item \(index) Wörter, words: \(index % 3)"), "n": .int64(Int64(index)), "ratio": .double(Double(index) / 8),
                 "when": .timestamp(1_700_000_000_000 + Int64(index)), "tags": .list(.string, [.string("t\(index % 2)"), .string("all")]),
                 "huge": .double(1_152_921_504_606_846_976)]
            }
            func modify(_ zone: ZoneID, _ commands: [RecordStore.Command]) async throws {
                _ = try await records.modify(commands, zone: zone, in: database, atomic: true, causation: Causation(requestID: "m"), deviceID: nil, logger: logger)
            }
            for zone in [kept, dropped] {
                try await modify(zone, (0..<12).map { RecordStore.Command(type: .create, input: RecordInput(recordName: "r\($0)", recordType: "Item", fields: fields($0))) })
            }
            try await modify(kept, (0..<4).map { RecordStore.Command(type: .forceUpdate, input: RecordInput(recordName: "r\($0)", recordType: "Item", fields: fields($0 + 100))) })
            try await modify(kept, [RecordStore.Command(type: .forceDelete, input: RecordInput(recordName: "r5"))])
            _ = try await zones.modify([.delete(dropped)], in: database, causation: Causation(requestID: "d"), logger: logger)
            _ = try await zones.modify([.create(dropped)], in: database, causation: Causation(requestID: "c"), logger: logger)
            try await modify(dropped, [RecordStore.Command(type: .create, input: RecordInput(recordName: "again", recordType: "Item", fields: fields(7)))])
            let events = try await EventLog(store: store).events(after: 0, limit: 10_000, logger: logger)
            _ = try await Applier(projection: IndexerProjection(), store: store).apply(batch: events, logger: logger)
            let served = try await Self.rows(store)
            XCTAssertEqual(served.count, 12 - 1 + 1, "every record of Kept but the deleted one, and the one saved after Dropped was deleted")

            let positions = PositionLog()
            let (generation, count) = try await Reindex(store: store).run(pageSize: 2, concurrency: 4, logger: logger) { progress in
                positions.append(progress.position, events: progress.events)
            }
            XCTAssertEqual(count, events.count)
            let reported = positions.values
            XCTAssertEqual(reported.map(\.position), reported.map(\.position).sorted(), "progress in the log's order")
            XCTAssertEqual(Set(reported.map(\.position)).count, reported.count)
            XCTAssertEqual(reported.last?.position, events.last?.id)
            XCTAssertEqual(reported.last?.events, events.count)
            let rebuilt = try await Self.rows(store)
            let live = try await QueryIndexGenerations(store: store).live(logger: logger)
            XCTAssertEqual(live, generation)
            XCTAssertEqual(rebuilt, served, "the rebuilt generation holds the live one's rows, value for value")
        }
    }

    /// A rebuild's page writes its saves as one statement and its deletions as another, passing
    /// over the events the index does not hold, up to a zone's deletion; what it builds, deletion
    /// markers included, is what a rebuild one event at a time builds, and its served rows are the
    /// live indexer's.
    func testARebuildPageWritesItsSavesAndDeletionsAsOneStatementEachAndBuildsWhatOneEventAtATimeBuilds() async throws {
        try await TestSupport.withMigratedStore { store, _ in
            let logger = TestSupport.logger
            let (database, kept, dropped, zones, records) = try await Self.twoZones(store)
            func modify(_ zone: ZoneID, _ type: RecordOperationType, _ names: [String], value: Int = 0) async throws {
                let commands = names.map {
                    RecordStore.Command(type: type, input: RecordInput(recordName: $0, recordType: "Item", fields: type == .forceDelete ? [:] : ["title": .string("\($0) v\(value)")]))
                }
                _ = try await records.modify(commands, zone: zone, in: database, atomic: true, causation: Causation(requestID: "m"), deviceID: nil, logger: logger)
            }
            try await modify(kept, .create, (0..<10).map { "r\($0)" })
            try await modify(dropped, .create, ["d0", "d1"])
            try await modify(kept, .forceDelete, ["r1", "r2"])
            _ = try await zones.modify([.create(ZoneID(zoneName: "Between", ownerRecordName: "_alice"))], in: database, causation: Causation(requestID: "b"), logger: logger)
            try await modify(kept, .forceUpdate, ["r3", "r4"], value: 1)
            try await modify(kept, .forceDelete, ["r3", "r9"])
            try await modify(kept, .create, ["r1"], value: 2)
            try await modify(kept, .forceDelete, ["r1"])
            try await modify(kept, .create, ["r1"], value: 3)
            _ = try await zones.modify([.delete(dropped)], in: database, causation: Causation(requestID: "d"), logger: logger)
            _ = try await zones.modify([.create(dropped)], in: database, causation: Causation(requestID: "c"), logger: logger)
            try await modify(dropped, .create, ["d1"], value: 4)
            try await modify(kept, .forceDelete, ["r0"])

            let events = try await EventLog(store: store).events(after: 0, limit: 10_000, logger: logger)
            let kinds = QueryIndexGenerations.Page(events).steps.map { step -> String in
                switch step {
                case .saves(let saves): "saves \(saves.count)"
                case .deletions(let deletions): "deletions \(deletions.count)"
                case .event(let event): event.type.rawValue
                }
            }
            XCTAssertEqual(kinds, ["saves 16", "deletions 5", EventType.zoneDeleted.rawValue, "saves 1", "deletions 1"],
                           "one statement of saves and one of deletions on each side of the zone's deletion; the zones created are passed over")
            _ = try await Applier(projection: IndexerProjection(), store: store).apply(batch: events, logger: logger)
            let served = try await Self.rows(store)
            XCTAssertEqual(served.count, 10 - 4 + 1, "r0, r2, r3 and r9 deleted, r1 saved again after its deletions; d1 saved after Dropped was deleted")

            _ = try await Reindex(store: store).run(pageSize: 1, concurrency: 1, logger: logger)
            let oneAtATime = try await Self.rowsWithMarkers(store)
            XCTAssertEqual(oneAtATime.filter { $0.hasSuffix("| marker") }.count, 4, "a marker for each record deleted and not saved again")
            _ = try await Reindex(store: store).run(pageSize: 1000, concurrency: 2, logger: logger)
            let inOnePage = try await Self.rowsWithMarkers(store)
            XCTAssertEqual(inOnePage, oneAtATime, "a page's statements build what one event at a time builds, markers included")
            let rebuilt = try await Self.rows(store)
            XCTAssertEqual(rebuilt, served)
        }
    }

    /// Alice's private database with the zones Kept and Dropped, and the stores that write them.
    static func twoZones(_ store: PostgresStore) async throws -> (DatabaseID, kept: ZoneID, dropped: ZoneID, ZoneStore, RecordStore) {
        let database = DatabaseID(container: "iCloud.test", environment: .development, scope: .private, owner: "_alice")
        let kept = ZoneID(zoneName: "Kept", ownerRecordName: "_alice"), dropped = ZoneID(zoneName: "Dropped", ownerRecordName: "_alice")
        let zones = ZoneStore(store: store)
        _ = try await zones.modify([.create(kept), .create(dropped)], in: database, causation: Causation(requestID: "z"), logger: TestSupport.logger)
        return (database, kept, dropped, zones, RecordStore(store: store))
    }

    /// Every row of the live generation, deletion markers included, in a fixed order.
    static func rowsWithMarkers(_ store: PostgresStore) async throws -> [String] {
        try await store.withConnection { connection in
            var rows: [String] = []
            for try await row in try await connection.query("""
                SELECT concat_ws(' | ', zone_name, record_name, record_type, version, record::text, search::text, CASE WHEN deleted THEN 'marker' ELSE 'row' END)
                FROM query_index.records WHERE generation = (SELECT generation FROM query_index.generations WHERE state = 'live')
                ORDER BY zone_name, record_name
                """, logger: TestSupport.logger).decode(String.self) {
                rows.append(row)
            }
            return rows
        }
    }

    /// Every served row of the live generation, whole, in a fixed order.
    static func rows(_ store: PostgresStore) async throws -> [String] {
        try await store.withConnection { connection in
            var rows: [String] = []
            for try await row in try await connection.query("""
                SELECT concat_ws(' | ', zone_name, record_name, record_type, version, created_at, modified_at, record::text, search::text)
                FROM query_index.records WHERE generation = (SELECT generation FROM query_index.generations WHERE state = 'live') AND NOT deleted
                ORDER BY zone_name, record_name
                """, logger: TestSupport.logger).decode(String.self) {
                rows.append(row)
            }
            return rows
        }
    }

    /// Progress reports, in the order they came.
    final class PositionLog: Sendable {
        private let log = Mutex<[(position: Int64, events: Int)]>([])
        func append(_ position: Int64, events: Int) { log.withLock { $0.append((position, events)) } }
        var values: [(position: Int64, events: Int)] { log.withLock { $0 } }
    }

    struct Snapshot {
        var generation: Int
        var live: Int
        var documents: [String]
        var zones: [String]
    }

    static func snapshot(_ store: PostgresStore) async throws -> Snapshot {
        try await store.withConnection { connection in
            let logger = TestSupport.logger
            // The live generation and its documents in one statement, as a query reads them: read in
            // two, a swap and the old generation's clean-up between them would leave none to count.
            var generation = 0
            var documents: [String] = []
            for try await (live, name, fields) in try await connection.query("""
                SELECT g.generation, r.record_name, (r.record->'fields')::text
                FROM query_index.generations g
                LEFT JOIN query_index.records r ON r.generation = g.generation AND NOT r.deleted
                WHERE g.state = 'live' ORDER BY r.record_name
                """, logger: logger).decode((Int, String?, String?).self) {
                generation = live
                if let name, let fields { documents.append("\(name)=\(fields)") }
            }
            var zones: [String] = []
            for try await name in try await connection.query("SELECT zone_name FROM index_zones ORDER BY zone_name", logger: logger).decode(String.self) {
                zones.append(name)
            }
            return Snapshot(generation: generation, live: documents.count, documents: documents, zones: zones)
        }
    }
}
