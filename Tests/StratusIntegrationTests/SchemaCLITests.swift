import Foundation
import StratusCore
@testable import StratusPostgres
import StratusTesting
import XCTest

/// `stratus schema export|import|deploy|reset`, run as an operator runs them (the built executable,
/// configured by environment variables), against the real PostgreSQL.
final class SchemaCLITests: XCTestCase {
    static let container = "iCloud.com.example.notes"

    func withDatabase(_ body: @Sendable (PostgresStore, [String: String]) async throws -> Void) async throws {
        try await PushAdminCLITests.withContainerDatabase(body)
    }

    static func cli(_ arguments: [String], _ settings: [String: String]) async throws -> (status: Int32, output: String) {
        try await PushAdminCLITests.cli(arguments, settings)
    }

    static func file(_ text: String) throws -> String {
        let url = FileManager.default.temporaryDirectory.appendingPathComponent("schema-\(UUID().uuidString.prefix(8)).ckdb")
        try text.write(to: url, atomically: true, encoding: .utf8)
        return url.path
    }

    func testAFileImportsExportsDeploysAndResetsThroughTheCLI() async throws {
        try await withDatabase { store, settings in
            // A file as CloudKit's tools export it comes back out as the same schema.
            let imported = try await Self.cli(["schema", "import", Self.container, try Self.file(SchemaLanguageFixture.exported)], settings)
            XCTAssertEqual(imported.status, 0, imported.output)
            XCTAssertTrue(imported.output.contains("imported 2 record types into development"), imported.output)
            let exportPath = FileManager.default.temporaryDirectory.appendingPathComponent("export-\(UUID().uuidString.prefix(8)).ckdb").path
            let exported = try await Self.cli(["schema", "export", Self.container, "--output", exportPath], settings)
            XCTAssertEqual(exported.status, 0, exported.output)
            let text = try String(contentsOfFile: exportPath, encoding: .utf8)
            XCTAssertEqual(try SchemaLanguage.parse(text).normalized, try SchemaLanguage.parse(SchemaLanguageFixture.exported).normalized)
            XCTAssertEqual(text, SchemaLanguage.print(try SchemaLanguage.parse(SchemaLanguageFixture.exported)))

            // Production is empty until deployed; an additive deploy is accepted.
            let emptyPath = exportPath + ".production"
            _ = try await Self.cli(["schema", "export", Self.container, "--environment", "production", "--output", emptyPath], settings)
            XCTAssertEqual(try String(contentsOfFile: emptyPath, encoding: .utf8), "DEFINE SCHEMA\n")
            let deployed = try await Self.cli(["schema", "deploy", Self.container], settings)
            XCTAssertEqual(deployed.status, 0, deployed.output)
            XCTAssertTrue(deployed.output.contains("deployed 2 record types to production"), deployed.output)
            // Each QUERYABLE or SORTABLE scalar field gets its field index; lists, locations and
            // references do not, nor do the system fields.
            for field in ["count", "score", "title"] {
                XCTAssertTrue(deployed.output.contains("built the field index of Note.\(field) ("), "\(field): \(deployed.output)")
            }
            XCTAssertFalse(deployed.output.contains("Note.tags") || deployed.output.contains("Note.location") || deployed.output.contains("___"), deployed.output)
            let indexes = try await QueryFieldIndexes(store: store).list(container: Self.container, environment: .production, logger: TestSupport.logger)
            let rebuilt = try await Self.cli(["schema", "build-indexes", Self.container], settings)
            XCTAssertEqual(rebuilt.status, 0, rebuilt.output)
            XCTAssertFalse(rebuilt.output.contains("built"), "nothing is built twice: \(rebuilt.output)")
            XCTAssertTrue(rebuilt.output.contains("production has \(indexes.count) field indexes"), rebuilt.output)
            let production = try await SchemaStore(store: store).schema(container: Self.container, environment: .production, logger: TestSupport.logger)
            XCTAssertEqual(production, try SchemaLanguage.parse(SchemaLanguageFixture.exported).normalized)

            // A destructive file is refused with every problem, and development keeps its schema.
            let destructive = try Self.file("DEFINE SCHEMA\nRECORD TYPE Note (title INT64, extra STRING);\n")
            let refused = try await Self.cli(["schema", "import", Self.container, destructive], settings)
            XCTAssertNotEqual(refused.status, 0, refused.output)
            for problem in ["import refused", "record type Users would be deleted", "field body of record type Note would be deleted",
                            "field title of record type Note would change type from STRING to INT64"] {
                XCTAssertTrue(refused.output.contains(problem), "\(problem): \(refused.output)")
            }
            let development = try await SchemaStore(store: store).schema(container: Self.container, environment: .development, logger: TestSupport.logger)
            XCTAssertEqual(development, production)

            // Additive work in development deploys; reset brings development back to production.
            let grown = try Self.file(SchemaLanguageFixture.exported + "\nRECORD TYPE Draft (d STRING QUERYABLE);\n")
            let grownImport = try await Self.cli(["schema", "import", Self.container, grown], settings)
            XCTAssertEqual(grownImport.status, 0, grownImport.output)
            XCTAssertTrue(grownImport.output.contains("built the field index of Draft.d ("), grownImport.output)
            let reset = try await Self.cli(["schema", "reset", Self.container], settings)
            XCTAssertEqual(reset.status, 0, reset.output)
            XCTAssertTrue(reset.output.contains("development reset to production's 2 record types"), reset.output)
            XCTAssertTrue(reset.output.contains("dropped the field index of Draft.d ("), reset.output)
            // It says what it deleted of development's data (here nothing) and that production was not touched.
            for line in ["deleted 0 custom zones of development, with their 0 records", "deleted 0 records of development's default zones",
                         "0 databases of development changed; production untouched"] {
                XCTAssertTrue(reset.output.contains(line), "\(line): \(reset.output)")
            }
            let grownAgain = try await Self.cli(["schema", "import", Self.container, grown], settings)
            XCTAssertEqual(grownAgain.status, 0, grownAgain.output)
            let again = try await Self.cli(["schema", "deploy", Self.container], settings)
            XCTAssertTrue(again.output.contains("deployed 3 record types"), again.output)
        }
    }

    func testDestructiveDeploysAndBadFilesAreRefusedWithWhereAndWhy() async throws {
        try await withDatabase { store, settings in
            let imported = try await Self.cli(["schema", "import", Self.container, try Self.file("DEFINE SCHEMA RECORD TYPE A (a STRING, b INT64);")], settings)
            XCTAssertEqual(imported.status, 0, imported.output)
            let deployed = try await Self.cli(["schema", "deploy", Self.container], settings)
            XCTAssertEqual(deployed.status, 0, deployed.output)
            // Development loses what production has behind the CLI's back (a reset to another state
            // is no CLI command): the deploy lists each loss and changes nothing.
            try await store.withConnection { connection in
                try await connection.query("""
                    DELETE FROM schema_fields WHERE container = \(Self.container) AND environment = 'development' AND field_name = 'a'
                    """, logger: TestSupport.logger)
                try await connection.query("""
                    UPDATE schema_fields SET field_type = 'DOUBLE' WHERE container = \(Self.container) AND environment = 'development' AND field_name = 'b'
                    """, logger: TestSupport.logger)
            }
            let refused = try await Self.cli(["schema", "deploy", Self.container], settings)
            XCTAssertNotEqual(refused.status, 0, refused.output)
            XCTAssertTrue(refused.output.contains("deploy refused"), refused.output)
            XCTAssertTrue(refused.output.contains("field a of record type A would be deleted"), refused.output)
            XCTAssertTrue(refused.output.contains("field b of record type A would change type from INT64 to DOUBLE"), refused.output)
            let production = try await SchemaStore(store: store).schema(container: Self.container, environment: .production, logger: TestSupport.logger)
            XCTAssertEqual(production.recordType(named: "A")?.field(named: "b")?.type, SchemaFieldType(.int64))

            let bad = try Self.file("DEFINE SCHEMA\nRECORD TYPE B (\n  x STRNG\n);\n")
            let located = try await Self.cli(["schema", "import", Self.container, bad], settings)
            XCTAssertNotEqual(located.status, 0, located.output)
            XCTAssertTrue(located.output.contains("\(bad): line 3, column 5: expected a field type"), located.output)
            // Roles are assigned by the operator, only roles the schema creates.
            let roled = try Self.file("DEFINE SCHEMA CREATE ROLE Editor; RECORD TYPE A (a STRING, b INT64, GRANT WRITE TO Editor);")
            let withRole = try await Self.cli(["schema", "import", Self.container, roled], settings)
            XCTAssertEqual(withRole.status, 0, withRole.output)
            let assigned = try await Self.cli(["schema", "assign-role", Self.container, "Editor", "_ed", "--environment", "development"], settings)
            XCTAssertEqual(assigned.status, 0, assigned.output)
            XCTAssertTrue(assigned.output.contains("_ed holds Editor in development"), assigned.output)
            let roles = try await store.withConnection { connection in
                try await SchemaStore.roles(of: "_ed", container: Self.container, environment: .development, on: connection, logger: TestSupport.logger)
            }
            XCTAssertEqual(roles, ["Editor"])
            for (arguments, message) in [
                (["schema", "assign-role", Self.container, "Editor", "_ed"], "the production schema of '\(Self.container)' creates no role 'Editor'"),
                (["schema", "assign-role", Self.container, "_world", "_ed"], "_world is built in"),
                (["schema", "deploy", "iCloud.missing"], "no container 'iCloud.missing'"),
                (["schema", "export", Self.container, "--environment", "staging"], "development or production"),
                (["schema", "import", Self.container, "/nonexistent/file.ckdb"], "cannot read /nonexistent/file.ckdb"),
            ] {
                let result = try await Self.cli(arguments, settings)
                XCTAssertNotEqual(result.status, 0, "\(arguments): \(result.output)")
                XCTAssertTrue(result.output.contains(message), "\(arguments): \(result.output)")
            }
        }
    }
}

/// The exported file the core tests read too (Tests/Fixtures/Note.ckdb).
enum SchemaLanguageFixture {
    static var exported: String {
        (try? String(contentsOf: TestSupport.repositoryRoot.appendingPathComponent("Tests/Fixtures/Note.ckdb"), encoding: .utf8)) ?? ""
    }
}
