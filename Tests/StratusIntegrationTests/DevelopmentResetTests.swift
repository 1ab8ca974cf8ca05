import Foundation
import HummingbirdTesting
import PostgresNIO
import StratusCore
@testable import StratusPostgres
import StratusTesting
import XCTest

/// `stratus schema reset` as CloudKit's reset of development: the schema becomes production's and
/// every zone and record of development (every database) is deleted through the write path — events
/// the query index applies — while production keeps everything.
final class DevelopmentResetTests: XCTestCase {
    typealias Body = RecordAPITests.Body
    static let causation = Causation(requestID: "development-reset-test")

    static func production(_ path: String) -> String { path.replacingOccurrences(of: "/development/", with: "/production/") }

    static func note(_ name: String, _ title: String) -> Body {
        ["operationType": "create", "record": RecordAPITests.note(name, ["title": ["value": title]])]
    }

    static func zoneNames(_ client: any TestClientProtocol, _ path: String) async throws -> [String] {
        let (status, body) = try await RecordAPITests.post(client, path, [:])
        XCTAssertEqual(status, 200, "\(body)")
        return (body["zones"] as? [Body] ?? []).compactMap { ($0["zoneID"] as? Body)?["zoneName"] as? String }
    }

    func testResetDeletesEveryZoneAndRecordOfDevelopmentAndLeavesProductionAlone() async throws {
        try await QueryTests.withStack(indexer: false) { fixture, client in
            let store = fixture.store
            let schemas = SchemaStore(store: store)
            _ = try await schemas.importSchema(try SchemaLanguage.parse("""
                DEFINE SCHEMA
                RECORD TYPE Note (title STRING QUERYABLE, GRANT WRITE TO "_creator", GRANT CREATE TO "_icloud", GRANT READ TO "_world");
                """),
                                               container: fixture.container, causation: Self.causation, logger: TestSupport.logger)
            guard case .applied(let deployed) = try await schemas.deploy(container: fixture.container, causation: Self.causation, logger: TestSupport.logger) else {
                return XCTFail("the deploy only adds")
            }
            // Development: two users' zones and default zones, and the public database; a save grows its schema.
            try await RecordAPITests.createZone(client, fixture, "Notes")
            try await RecordAPITests.createZone(client, fixture, "Bobs", user: "_bob")
            var (status, _) = try await RecordAPITests.modify(client, fixture, [Self.note("n1", "a"), Self.note("n2", "b"), Self.note("n3", "c")])
            XCTAssertEqual(status, 200)
            (status, _) = try await RecordAPITests.modify(client, fixture, zone: "Bobs", user: "_bob", [Self.note("b1", "bob")])
            XCTAssertEqual(status, 200)
            (status, _) = try await RecordAPITests.modify(client, fixture, zone: nil, [["operationType": "create", "record": RecordAPITests.note("r1", ["grown": ["value": 1]])]])
            XCTAssertEqual(status, 200)
            for (user, name) in [("_alice", "p1"), ("_bob", "p2")] {
                let (publicStatus, saved) = try await RecordAPITests.modify(client, fixture, zone: nil, user: user, database: "public", [Self.note(name, user)])
                XCTAssertEqual(publicStatus, 200)
                XCTAssertNil(saved.first?["serverErrorCode"], "\(saved)")
            }
            // Production: a zone with a record, and a public record.
            (status, _) = try await RecordAPITests.post(client, Self.production(fixture.path("zones/modify")),
                                                        ["operations": [["operationType": "create", "zone": ["zoneID": ["zoneName": "Notes"]]]]])
            XCTAssertEqual(status, 200)
            for (database, zone, name) in [("private", "Notes", "n1"), ("public", nil, "p1")] as [(String, String?, String)] {
                var body: Body = ["operations": [Self.note(name, "production")]]
                if let zone { body["zoneID"] = ["zoneName": zone] }
                let (saved, reply) = try await RecordAPITests.post(client, Self.production(fixture.path("records/modify", database: database)), body)
                XCTAssertEqual(saved, 200)
                XCTAssertNil((reply["records"] as? [Body])?.first?["serverErrorCode"], "\(reply)")
            }
            try await QueryTests.applyEventLog(store)
            let grown = try await schemas.schema(container: fixture.container, environment: .development, logger: TestSupport.logger)
            XCTAssertNotNil(grown.recordType(named: "Note")?.field(named: "grown"), "development grew")
            let eventsBefore = try await EventLog(store: store).events(after: 0, limit: 10_000, logger: TestSupport.logger).count

            // Small batches: the reset goes round until nothing is left.
            let report = try await DevelopmentReset(store: store).run(container: fixture.container, causation: Self.causation, batch: 2, logger: TestSupport.logger)
            XCTAssertEqual(report.schema, .applied(deployed))
            XCTAssertEqual(report.zones, [.private: 2])
            XCTAssertEqual(report.zoneRecords, [.private: 4])
            XCTAssertEqual(report.records, [.private: 1, .public: 2])
            XCTAssertEqual(report.databases, 3)
            XCTAssertEqual(report.summary, [
                "deleted 2 (private: 2) custom zones of development, with their 4 (private: 4) records",
                "deleted 3 (public: 2, private: 1) records of development's default zones",
                "3 databases of development changed; production untouched",
            ])

            // Every deletion is an event, as a client's: two zone.deleted, a record.deleted per default-zone record.
            let events = try await EventLog(store: store).events(after: 0, limit: 10_000, logger: TestSupport.logger).dropFirst(eventsBefore)
            XCTAssertEqual(events.filter { $0.type == .zoneDeleted }.count, 2)
            XCTAssertEqual(events.filter { $0.type == RecordDeleted.eventType }.count, 3)
            XCTAssertEqual(events.filter { $0.type == SchemaChanged.eventType }.count, 1)

            // Development: only _defaultZone, nothing found, nothing to sync, nothing indexed.
            let aliceZones = try await Self.zoneNames(client, fixture.path("zones/list"))
            XCTAssertEqual(aliceZones, ["_defaultZone"])
            let bobZones = try await Self.zoneNames(client, fixture.path("zones/list", user: "_bob"))
            XCTAssertEqual(bobZones, ["_defaultZone"])
            let (_, databaseChanges) = try await RecordAPITests.post(client, fixture.path("zones/changes"), [:])
            XCTAssertEqual((databaseChanges["zones"] as? [Body])?.count, 0, "a fresh token sees no zone: \(databaseChanges)")
            let (gone, zoneChanges) = try await RecordAPITests.post(client, fixture.path("records/changes"), ["zoneID": ["zoneName": "Notes"]])
            XCTAssertEqual(gone, 404, "\(zoneChanges)")
            XCTAssertEqual(zoneChanges["serverErrorCode"] as? String, "ZONE_NOT_FOUND")
            let privateDefault = try await RecordAPITests.lookup(client, fixture, zone: "_defaultZone", ["r1"])
            XCTAssertEqual(privateDefault.first?["serverErrorCode"] as? String, "NOT_FOUND", "\(privateDefault)")
            let publicLookup = try await SecurityRoleReadTests.lookup(client, fixture, user: "_alice", ["p1", "p2"])
            XCTAssertEqual(publicLookup["p1"]?["serverErrorCode"] as? String, "NOT_FOUND", "\(publicLookup)")
            XCTAssertEqual(publicLookup["p2"]?["serverErrorCode"] as? String, "NOT_FOUND", "\(publicLookup)")
            try await QueryTests.applyEventLog(store)
            let developmentRows = try await Self.indexed(store, environment: .development)
            XCTAssertEqual(developmentRows, 0, "the query index keeps none of development's records")
            let (_, publicQuery) = try await SecurityRoleReadTests.query(client, fixture, user: "_alice", type: "Note")
            XCTAssertEqual(QueryTests.names(publicQuery), [])
            let developmentSchema = try await schemas.schema(container: fixture.container, environment: .development, logger: TestSupport.logger)
            XCTAssertEqual(developmentSchema, deployed, "development's schema is production's")

            // Production keeps its zone, its records and their index rows.
            let productionZones = try await Self.zoneNames(client, Self.production(fixture.path("zones/list")))
            XCTAssertEqual(productionZones, ["_defaultZone", "Notes"])
            let (_, productionRecord) = try await RecordAPITests.post(client, Self.production(fixture.path("records/lookup")),
                                                                      ["zoneID": ["zoneName": "Notes"], "records": [["recordName": "n1"]]])
            XCTAssertNotNil((productionRecord["records"] as? [Body])?.first?["fields"], "\(productionRecord)")
            let (_, productionPublic) = try await RecordAPITests.post(client, Self.production(fixture.path("records/lookup", database: "public")),
                                                                      ["records": [["recordName": "p1"]]])
            XCTAssertNotNil((productionPublic["records"] as? [Body])?.first?["fields"], "\(productionPublic)")
            let productionRows = try await Self.indexed(store, environment: .production)
            XCTAssertEqual(productionRows, 2)

            // A second reset finds nothing to delete.
            let again = try await DevelopmentReset(store: store).run(container: fixture.container, causation: Self.causation, logger: TestSupport.logger)
            XCTAssertEqual(again.databases, 0)
            XCTAssertEqual(again.summary.first, "deleted 0 custom zones of development, with their 0 records")
        }
    }

    /// Live rows of the query index in an environment.
    static func indexed(_ store: PostgresStore, environment: StratusCore.Environment) async throws -> Int {
        try await store.withConnection { connection in
            let rows = try await connection.query("""
                SELECT count(*)::int8 FROM query_index.records WHERE environment = \(environment.rawValue) AND NOT deleted
                """, logger: TestSupport.logger)
            for try await count in rows.decode(Int64.self) { return Int(count) }
            return 0
        }
    }
}
