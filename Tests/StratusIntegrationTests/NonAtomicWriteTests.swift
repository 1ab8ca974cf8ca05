import Foundation
import PostgresNIO
import StratusCore
@testable import StratusPostgres
import StratusTesting
import XCTest

/// A non-atomic request of a custom zone is written in one transaction, each item under a savepoint
/// (`RecordStore.modifyTogether`): an item that fails is undone alone, with whatever it wrote before
/// it failed, and the others commit together; a request the transaction cannot finish as a whole
/// is written item by item, as before.
final class NonAtomicWriteTests: XCTestCase {
    private static let database = DatabaseID(container: "iCloud.nonatomic", environment: .development, scope: .private, owner: "_u")
    private static let zone = ZoneID(zoneName: "Batch", ownerRecordName: "_u")

    private static func modify(
        _ store: PostgresStore, _ commands: [RecordStore.Command], limits: RecordStore.Limits = RecordStore.Limits()
    ) async throws -> [Result<RecordStore.Outcome, RecordStore.Failure>] {
        try await RecordStore(store: store).modify(
            commands, zone: zone, in: database, atomic: false, causation: Causation(requestID: "batch", userRecordName: "_u"), deviceID: nil,
            limits: limits, logger: TestSupport.logger)
    }

    private static func create(_ name: String, type: String = "Note", _ fields: [String: FieldValue]) -> RecordStore.Command {
        RecordStore.Command(type: .create, input: RecordInput(recordName: name, recordType: type, fields: fields))
    }

    /// Each outcome's error code (nil: stored or deleted).
    private static func codes(_ outcomes: [Result<RecordStore.Outcome, RecordStore.Failure>]) -> [String?] {
        outcomes.map { outcome in
            if case .failure(let failure) = outcome { failure.error.code.rawValue } else { nil }
        }
    }

    /// The transactions (`xmin`) that wrote the named records' rows, one per distinct value.
    private static func writers(_ store: PostgresStore, _ names: [String]) async throws -> Int64 {
        try await TestSupport.count(store, """
            SELECT count(DISTINCT xmin::text) FROM records
            WHERE container = \(database.container) AND owner = \(database.owner) AND zone_name = \(zone.zoneName) AND record_name = ANY(\(names))
            """)
    }

    func testAFailedItemIsUndoneAloneWithWhatItWroteAndTheOthersCommitTogether() async throws {
        try await TestSupport.withMigratedStore { store, _ in
            _ = try await ZoneStore(store: store).modify([.create(Self.zone)], in: Self.database, causation: Causation(requestID: "z"), logger: TestSupport.logger)
            _ = try await Self.modify(store, ["existing", "existing2", "old", "stale"].map { Self.create($0, ["v": .int64(0)]) })
            // `stale` has expired (and awaits collection).
            _ = try await TestSupport.count(store, "WITH expired AS (UPDATE records SET expires_at = 1 WHERE record_name = 'stale' RETURNING 1) SELECT count(*) FROM expired")
            var limits = RecordStore.Limits()
            limits.maxRecordBytes = 300
            let outcomes = try await Self.modify(store, [
                Self.create("a", ["v": .int64(1)]),
                // Refused before it writes anything.
                Self.create("existing", ["v": .int64(9)]),
                // Grows the schema (a new record type and field) and is then refused for its size:
                // the growth goes with it.
                Self.create("big", type: "Wide", ["w": .string(String(repeating: "x", count: 400))]),
                Self.create("b", ["v": .int64(3)]),
                RecordStore.Command(type: .update, input: RecordInput(recordName: "missing", recordType: "Note", changeTag: "t")),
                // Deletes the expired record it finds (a write), then finds no record to update.
                RecordStore.Command(type: .update, input: RecordInput(recordName: "stale", recordType: "Note", changeTag: "t")),
                // Writes the saves before it (a delete reads the rows back), then deletes.
                RecordStore.Command(type: .forceDelete, input: RecordInput(recordName: "old")),
                // Refused after that write, which stays.
                Self.create("existing2", ["v": .int64(10)]),
            ], limits: limits)
            XCTAssertEqual(Self.codes(outcomes), [nil, "EXISTS", "LIMIT_EXCEEDED", nil, "NOT_FOUND", "NOT_FOUND", nil, "EXISTS"])

            let found = try await RecordStore(store: store).lookup(
                ["a", "b", "existing", "existing2", "old", "big"], zone: Self.zone, in: Self.database, logger: TestSupport.logger)
            XCTAssertEqual(found.mapValues { $0.fields["v"] }, [
                ExactName("a"): .int64(1), ExactName("b"): .int64(3), ExactName("existing"): .int64(0), ExactName("existing2"): .int64(0),
            ],
                           "what is reported stored is stored, and only that")
            let staleRows = try await TestSupport.count(store, "SELECT count(*) FROM records WHERE record_name = 'stale'")
            XCTAssertEqual(staleRows, 1, "the refused update's delete of the expired record was undone with it (the collector deletes it, with its event)")
            let schema = try await SchemaStore(store: store).schema(container: Self.database.container, environment: .development, logger: TestSupport.logger)
            XCTAssertEqual(Set(schema.recordTypes.map(\.name)), ["Note"], "the refused record's schema growth was undone with it")
            let writers = try await Self.writers(store, ["a", "b"])
            XCTAssertEqual(writers, 1, "the request's saves were written together, in one transaction")

            // Its zone's history holds exactly what was stored (a device that synced nothing yet is
            // not told of `old`, created and deleted since), and its log the events of that alone.
            let page = try await SyncStore(store: store).changes(
                zone: Self.zone, in: Self.database, incarnation: nil, since: 0, limit: 100, logger: TestSupport.logger)
            XCTAssertEqual(Set(page.changes.map(\.recordName)), ["existing", "existing2", "a", "b"], "an expired record is not synced")
            let events = try await TestSupport.count(store, """
                SELECT count(*) FROM events WHERE type IN ('record.saved', 'record.deleted')
                """)
            XCTAssertEqual(events, 7, "four saves before, then two saves and a delete: no event of a refused item")
            let schemaEvents = try await TestSupport.count(store, "SELECT count(*) FROM events WHERE type LIKE 'schema.%'")
            let noteSchemaEvents = try await TestSupport.count(store, "SELECT count(*) FROM events WHERE type LIKE 'schema.%' AND payload::text NOT LIKE '%Wide%'")
            XCTAssertEqual(schemaEvents, noteSchemaEvents, "no schema event of the refused growth")
        }
    }

    func testARequestThatSavesAShareIsWrittenItemByItem() async throws {
        try await TestSupport.withMigratedStore { store, _ in
            _ = try await ZoneStore(store: store).modify([.create(Self.zone)], in: Self.database, causation: Causation(requestID: "z"), logger: TestSupport.logger)
            // The root points at the share, which names no root itself: in one transaction the two
            // would pass together, as in an atomic request; item by item the share is refused.
            let outcomes = try await Self.modify(store, [
                RecordStore.Command(type: .create, input: RecordInput(recordName: "root", recordType: "Note", share: .some("s"))),
                RecordStore.Command(type: .create, input: RecordInput(recordName: "s", recordType: ShareRecord.recordType)),
            ])
            let codes = Self.codes(outcomes)
            XCTAssertEqual(codes.last, "BAD_REQUEST", "\(outcomes)")
            let found = try await RecordStore(store: store).lookup(["s"], zone: Self.zone, in: Self.database, logger: TestSupport.logger)
            XCTAssertTrue(found.isEmpty)
        }
    }

    func testARequestRefusedAtItsCloseIsWrittenItemByItem() async throws {
        try await TestSupport.withMigratedStore { store, _ in
            _ = try await ZoneStore(store: store).modify([.create(Self.zone)], in: Self.database, causation: Causation(requestID: "z"), logger: TestSupport.logger)
            // Room for two of the three records: the quota is checked as the transaction closes,
            // so the request falls back to a transaction per item and the third alone is refused.
            let record = ["t": FieldValue.string(String(repeating: "y", count: 1_000))]
            var limits = RecordStore.Limits()
            limits.userQuotaBytes = 2_600
            let outcomes = try await Self.modify(store, ["q1", "q2", "q3"].map { Self.create($0, record) }, limits: limits)
            XCTAssertEqual(Self.codes(outcomes), [nil, nil, "QUOTA_EXCEEDED"])
            let found = try await RecordStore(store: store).lookup(["q1", "q2", "q3"], zone: Self.zone, in: Self.database, logger: TestSupport.logger)
            XCTAssertEqual(Set(found.keys), [ExactName("q1"), ExactName("q2")])
            let writers = try await Self.writers(store, ["q1", "q2"])
            XCTAssertEqual(writers, 2, "each stored in a transaction of its own")
        }
    }
}
