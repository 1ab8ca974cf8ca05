import Foundation
import HummingbirdTesting
import PostgresNIO
import StratusAPI
import StratusCore
@testable import StratusPostgres
import StratusTesting
import XCTest

/// Schemas against the real PostgreSQL: development grows in the save's transaction, a deployed
/// production refuses what its schema lacks (saves and queries), deploy and import only add.
final class SchemaTests: XCTestCase {
    typealias Fixture = RecordAPITests.Fixture
    typealias Body = RecordAPITests.Body
    static let causation = Causation(requestID: "schema-test")

    /// Makes the fixture container's development schema production's (empty until a deploy), so the
    /// next save may give a field another type, as saves under an earlier schema did.
    static func resetDevelopmentSchema(_ fixture: Fixture) async throws {
        _ = try await SchemaStore(store: fixture.store).reset(container: fixture.container, causation: causation, logger: TestSupport.logger)
    }

    static func production(_ path: String) -> String { path.replacingOccurrences(of: "/development/", with: "/production/") }

    /// records/modify in the public database's default zone of an environment.
    static func save(_ client: any TestClientProtocol, _ fixture: Fixture, production: Bool = false,
                     _ records: [(name: String, type: String, fields: Body)]) async throws -> (Int, [Body]) {
        let body: Body = ["operations": records.map { record in
            ["operationType": "forceUpdate", "record": ["recordName": record.name, "recordType": record.type, "fields": record.fields]] as Body
        }]
        let path = fixture.path("records/modify", database: "public")
        let (status, json) = try await RecordAPITests.post(client, production ? Self.production(path) : path, body)
        return (status, json["records"] as? [Body] ?? [json])
    }

    static func schemaEvents(_ store: PostgresStore) async throws -> [SchemaChanged] {
        try await store.withConnection { connection in
            var events: [SchemaChanged] = []
            for try await payload in try await connection.query(
                "SELECT payload::text FROM events WHERE type = 'schema.changed' ORDER BY id", logger: TestSupport.logger).decode(String.self) {
                events.append(try JSONDecoder().decode(SchemaChanged.self, from: Data(payload.utf8)))
            }
            return events
        }
    }

    func testDevelopmentSavesGrowTheSchemaInTheirTransaction() async throws {
        try await RecordAPITests.withAPI { fixture, client in
            let schemas = SchemaStore(store: fixture.store)
            var (status, records) = try await Self.save(client, fixture, [("a", "Note", ["title": ["value": "x"], "n": ["value": 1, "type": "INT64"]])])
            XCTAssertEqual(status, 200)
            XCTAssertNil(records.first?["serverErrorCode"], "\(records)")
            var schema = try await schemas.schema(container: fixture.container, environment: .development, logger: TestSupport.logger)
            var note = try XCTUnwrap(schema.recordType(named: "Note"))
            XCTAssertEqual(note.field(named: "title"), SchemaField(name: "title", type: SchemaFieldType(.string), indexes: .all))
            XCTAssertEqual(note.field(named: "n"), SchemaField(name: "n", type: SchemaFieldType(.int64), indexes: [.queryable, .sortable]))
            XCTAssertEqual(note.field(named: "___recordID")?.indexes, [])
            XCTAssertEqual(note.grants, RecordTypeSchema.defaultGrants)

            // A new field joins; a value of another type is refused naming the field, and nothing of
            // the request is kept (the record, the field it would have added).
            (status, records) = try await Self.save(client, fixture, [("b", "Note", ["extra": ["value": [1.5], "type": "DOUBLE_LIST"]])])
            XCTAssertNil(records.first?["serverErrorCode"], "\(records)")
            // An atomic request (a custom zone's) keeps nothing when one record fails.
            try await RecordAPITests.createZone(client, fixture, "Notes")
            (status, records) = try await RecordAPITests.modify(client, fixture, atomic: true, [
                ["operationType": "create", "record": ["recordName": "c", "recordType": "Note", "fields": ["more": ["value": "new"]]]],
                ["operationType": "create", "record": ["recordName": "d", "recordType": "Note", "fields": ["n": ["value": "seven"]]]],
            ])
            XCTAssertEqual(records.count, 2)
            XCTAssertEqual(records[1]["serverErrorCode"] as? String, "BAD_REQUEST")
            XCTAssertEqual(records[1]["reason"] as? String, "invalid attempt to set value type STRING for field 'n' for type 'Note', defined to be: INT64")
            XCTAssertEqual(records[0]["serverErrorCode"] as? String, "ATOMIC_ERROR")
            schema = try await schemas.schema(container: fixture.container, environment: .development, logger: TestSupport.logger)
            note = try XCTUnwrap(schema.recordType(named: "Note"))
            XCTAssertEqual(note.field(named: "extra")?.type, SchemaFieldType(.double, isList: true))
            XCTAssertNil(note.field(named: "more"), "a field of a failed atomic request is not kept")
            let events = try await Self.schemaEvents(fixture.store)
            XCTAssertEqual(events.map(\.cause), [.save, .save])
            XCTAssertEqual(events[0].added.first?.name, "Note")
            XCTAssertEqual(events[1].added, [RecordTypeSchema(name: "Note", fields: [SchemaField(name: "extra", type: SchemaFieldType(.double, isList: true), indexes: [.queryable])])])
            // A value sent without `type` is read as the field's type where that is exact.
            (status, records) = try await Self.save(client, fixture, [("e", "Note", ["extra": ["value": [2]], "n": ["value": 3]])])
            XCTAssertNil(records.first?["serverErrorCode"], "\(records)")
            XCTAssertEqual((records.first?["fields"] as? Body)?["extra"] as? NSDictionary, ["value": [2.0], "type": "DOUBLE_LIST"] as NSDictionary)
            // The schema is the environment's: production knows nothing of it.
            let production = try await schemas.schema(container: fixture.container, environment: .production, logger: TestSupport.logger)
            XCTAssertEqual(production, Schema())
        }
    }

    /// Writers of different records adding the same field race in their own transactions: one type wins,
    /// every stored value has it, and every loser is told why.
    func testConcurrentSavesAddingOneFieldAgreeOnItsType() async throws {
        try await RecordAPITests.withAPI { fixture, client in
            let outcomes = try await withThrowingTaskGroup(of: (Int, String?).self) { group in
                for index in 0..<12 {
                    group.addTask {
                        let value: Any = index % 2 == 0 ? ["value": index] : ["value": "text \(index)"]
                        let (_, records) = try await Self.save(client, fixture, [("r\(index)", "Race", ["shared": value])])
                        return (index, records.first?["serverErrorCode"] as? String)
                    }
                }
                var outcomes: [Int: String?] = [:]
                for try await (index, code) in group { outcomes[index] = code }
                return outcomes
            }
            let schema = try await SchemaStore(store: fixture.store).schema(container: fixture.container, environment: .development, logger: TestSupport.logger)
            let type = try XCTUnwrap(schema.recordType(named: "Race")?.field(named: "shared")?.type)
            let winners = type == SchemaFieldType(.int64) ? Set(stride(from: 0, to: 12, by: 2)) : Set(stride(from: 1, to: 12, by: 2))
            for (index, code) in outcomes {
                XCTAssertEqual(code, winners.contains(index) ? nil : "BAD_REQUEST", "record r\(index) with schema type \(type)")
            }
        }
    }

    func testDeployedProductionRefusesWhatItsSchemaLacks() async throws {
        try await RecordAPITests.withAPI { fixture, client in
            let schemas = SchemaStore(store: fixture.store)
            // Before its first deploy production takes saves as it always did.
            var (_, records) = try await Self.save(client, fixture, production: true, [("old", "Legacy", ["x": ["value": 1]])])
            XCTAssertNil(records.first?["serverErrorCode"], "\(records)")
            let isEnforced = try await schemas.isEnforced(container: fixture.container, environment: .production, logger: TestSupport.logger)
            XCTAssertFalse(isEnforced)

            (_, records) = try await Self.save(client, fixture, [("a", "Note", ["title": ["value": "x"], "n": ["value": 1]])])
            XCTAssertNil(records.first?["serverErrorCode"], "\(records)")
            guard case .applied = try await schemas.deploy(container: fixture.container, causation: Self.causation, logger: TestSupport.logger) else {
                return XCTFail("an additive deploy is applied")
            }
            let enforced = try await schemas.isEnforced(container: fixture.container, environment: .production, logger: TestSupport.logger)
            XCTAssertTrue(enforced)

            for (fields, type, reason) in [
                (["title": ["value": "ok"]] as Body, "Note", nil),
                (["title": ["value": "x"]], "Other", "Cannot create new type Other in production schema"),
                (["title": ["value": "x"], "extra": ["value": 2]], "Note", "Cannot create or modify field 'extra' in record type 'Note' in production schema"),
                (["n": ["value": "one"]], "Note", "invalid attempt to set value type STRING for field 'n' for type 'Note', defined to be: INT64"),
            ] as [(Body, String, String?)] {
                (_, records) = try await Self.save(client, fixture, production: true, [("p\(type)\(fields.keys.sorted())", type, fields)])
                XCTAssertEqual(records.first?["reason"] as? String, reason, "\(records)")
                XCTAssertEqual(records.first?["serverErrorCode"] as? String, reason == nil ? nil : "BAD_REQUEST")
            }
            let production = try await schemas.schema(container: fixture.container, environment: .production, logger: TestSupport.logger)
            XCTAssertNil(production.recordType(named: "Other"), "production never grows")
            XCTAssertNil(production.recordType(named: "Note")?.field(named: "extra"))
        }
    }

    func testDeployedProductionRefusesQueriesOnFieldsWithoutTheirFlag() async throws {
        try await RecordAPITests.withAPI { fixture, client in
            let schemas = SchemaStore(store: fixture.store)
            let file = """
                DEFINE SCHEMA
                RECORD TYPE Note ("___modTime" TIMESTAMP SORTABLE, title STRING QUERYABLE, body STRING SEARCHABLE, n INT64 SORTABLE,
                                  GRANT READ TO "_world");
                """
            guard case .applied = try await schemas.importSchema(try SchemaLanguage.parse(file), container: fixture.container, causation: Self.causation, logger: TestSupport.logger),
                  case .applied = try await schemas.deploy(container: fixture.container, causation: Self.causation, logger: TestSupport.logger) else {
                return XCTFail("import and deploy are applied")
            }
            func query(_ query: Body, production: Bool = true) async throws -> (Int, Body) {
                let path = fixture.path("records/query", database: "public")
                return try await RecordAPITests.post(client, production ? Self.production(path) : path, ["query": query])
            }
            let equals: (String) -> Body = { ["comparator": "EQUALS", "fieldName": $0, "fieldValue": ["value": "x"]] }
            let tokens: (String) -> Body = { ["comparator": "CONTAINS_ANY_TOKENS", "fieldName": $0, "fieldValue": ["value": "x"]] }
            let allowed: [Body] = [
                ["recordType": "Note", "filterBy": [equals("title"), tokens("body")], "sortBy": [["fieldName": "n"], ["fieldName": "___modTime"]]],
                ["recordType": "Note"],
            ]
            for body in allowed {
                let (status, json) = try await query(body)
                XCTAssertEqual(status, 200, "\(body): \(json)")
            }
            for (body, flag, field) in [
                (["recordType": "Note", "filterBy": [equals("body")]] as Body, "queryable", "body"),
                (["recordType": "Note", "filterBy": [tokens("title")]], "searchable", "title"),
                (["recordType": "Note", "sortBy": [["fieldName": "title"]]], "sortable", "title"),
                (["recordType": "Note", "sortBy": [["fieldName": "___createTime"]]], "sortable", "___createTime"),
                (["recordType": "Unknown", "filterBy": [equals("title")]], "queryable", "title"),
            ] as [(Body, String, String)] {
                let (status, json) = try await query(body)
                XCTAssertEqual(status, 400, "\(body)")
                XCTAssertEqual(json["serverErrorCode"] as? String, "BAD_REQUEST")
                XCTAssertTrue((json["reason"] as? String)?.hasPrefix("Field '\(field)' is not marked \(flag)") == true, "\(json)")
                // Development serves every field.
                let (developmentStatus, _) = try await query(body, production: false)
                XCTAssertEqual(developmentStatus, 200, "\(body)")
            }
        }
    }

    func testDeployAndImportOnlyAddAndResetReturnsToProduction() async throws {
        try await TestSupport.withMigratedStore { store, _ in
            let schemas = SchemaStore(store: store)
            let container = "iCloud.com.example.schema"
            let first = try SchemaLanguage.parse("""
                DEFINE SCHEMA
                CREATE ROLE Editor;
                RECORD TYPE Item (a STRING QUERYABLE, b INT64, GRANT WRITE TO Editor);
                RECORD TYPE Gone (x STRING);
                """)
            guard case .applied = try await schemas.importSchema(first, container: container, causation: Self.causation, logger: TestSupport.logger),
                  case .applied(let deployed) = try await schemas.deploy(container: container, causation: Self.causation, logger: TestSupport.logger) else {
                return XCTFail("a first import and deploy only add")
            }
            XCTAssertEqual(deployed, first.normalized)
            let production = try await schemas.schema(container: container, environment: .production, logger: TestSupport.logger)
            XCTAssertEqual(production, first.normalized, "production is development's schema, roles and grants included")

            // A file that deletes a type and a field and changes a type is refused with every problem, and changes nothing.
            let destructive = try SchemaLanguage.parse("DEFINE SCHEMA RECORD TYPE Item (b DOUBLE, c STRING);")
            let refused = try await schemas.importSchema(destructive, container: container, causation: Self.causation, logger: TestSupport.logger)
            XCTAssertEqual(refused, .refused([
                .deletedRecordType("Gone"),
                .deletedField(recordType: "Item", field: "a"),
                .changedType(recordType: "Item", field: "b", from: SchemaFieldType(.int64), to: SchemaFieldType(.double)),
            ]))
            let development = try await schemas.schema(container: container, environment: .development, logger: TestSupport.logger)
            XCTAssertEqual(development, first.normalized)

            // Development grown by a save deploys; then reset brings development back to production.
            let records = RecordStore(store: store)
            let database = DatabaseID(container: container, environment: .development, scope: .public, owner: "_public")
            let saved = try await records.modify([RecordStore.Command(type: .forceUpdate, input: RecordInput(recordName: "r", recordType: "New", fields: ["v": .int64(1)]))],
                zone: ZoneID(zoneName: ZoneID.defaultZoneName, ownerRecordName: "_public"), in: database, atomic: false, causation: Self.causation, deviceID: nil, logger: TestSupport.logger)
            XCTAssertNoThrow(try saved[0].get())
            guard case .applied(let grown) = try await schemas.deploy(container: container, causation: Self.causation, logger: TestSupport.logger) else {
                return XCTFail("an additive deploy is applied")
            }
            XCTAssertEqual(grown.recordType(named: "New")?.field(named: "v")?.type, SchemaFieldType(.int64))
            let later = try SchemaLanguage.parse(SchemaLanguage.print(grown) + "\nRECORD TYPE Draft (d STRING);")
            guard case .applied = try await schemas.importSchema(later, container: container, causation: Self.causation, logger: TestSupport.logger),
                  case .applied(let reset) = try await schemas.reset(container: container, causation: Self.causation, logger: TestSupport.logger) else {
                return XCTFail("import and reset are applied")
            }
            XCTAssertNil(reset.recordType(named: "Draft"))
            let afterReset = try await schemas.schema(container: container, environment: .development, logger: TestSupport.logger)
            XCTAssertEqual(afterReset, grown)
            let events = try await Self.schemaEvents(store)
            XCTAssertEqual(events.map(\.cause), [.import, .deploy, .save, .deploy, .import, .reset])
            XCTAssertEqual(events.last?.recordTypes, ["Gone", "Item", "New"])
        }
    }
}
