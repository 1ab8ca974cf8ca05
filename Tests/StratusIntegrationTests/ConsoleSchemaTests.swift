import Foundation
import HummingbirdTesting
import PostgresNIO
import StratusAPI
import StratusCore
import StratusPostgres
import StratusTesting
import XCTest

/// The console's schema page over HTTP against the real PostgreSQL: both environments' record
/// types, fields, index flags, roles, grants and `.ckdb` text; the two-step deploy (the additive
/// check shown, then the deploy on confirmation, a destructive one refused with every problem);
/// the two-step reset; forms without their CSRF token and operators of other containers refused.
final class ConsoleSchemaTests: XCTestCase {
    typealias Browser = ConsoleAuthTests.Browser
    static let container = ConsoleDataTests.container
    static let causation = Causation(requestID: "console-schema-test")

    static func form(_ csrf: String, _ fields: [String: String] = [:]) -> [String: String] {
        fields.merging(["csrf": csrf, "container": container]) { $1 }
    }

    static func importDevelopment(_ store: PostgresStore, _ text: String) async throws {
        let outcome = try await SchemaStore(store: store).importSchema(
            try SchemaLanguage.parse(text), container: container, causation: causation, logger: TestSupport.logger)
        guard case .applied = outcome else { return XCTFail("import refused: \(outcome)") }
    }

    static func production(_ store: PostgresStore) async throws -> Schema {
        try await SchemaStore(store: store).schema(container: container, environment: .production, logger: TestSupport.logger)
    }

    func testTheSchemaPageShowsBothEnvironmentsAndDeploysInTwoSteps() async throws {
        try await RecordAPITests.withAPI { fixture, client in
            let store = fixture.store
            try await Self.importDevelopment(store, """
                DEFINE SCHEMA
                    CREATE ROLE Editor;
                    RECORD TYPE Note (
                        "___recordID" REFERENCE QUERYABLE,
                        title STRING QUERYABLE SEARCHABLE SORTABLE,
                        pages INT64 SORTABLE,
                        GRANT WRITE TO "_creator",
                        GRANT READ, WRITE TO Editor,
                        GRANT READ TO "_world"
                    );
                """)
            let browser = Browser(client)
            let csrf = try await ConsoleDataTests.signIn(browser, store: store)
            let chooser = try await browser.request("/console/containers/\(Self.container)")
            XCTAssertTrue(chooser.html.contains("href=\"/console/schema?container=\(Self.container)\""), chooser.html)

            let page = try await browser.request("/console/schema?container=\(Self.container)")
            XCTAssertEqual(page.status, 200, page.html)
            XCTAssertTrue(page.html.contains("id=\"schema-development\"") && page.html.contains("id=\"schema-production\""), page.html)
            let development = try XCTUnwrap(page.html.components(separatedBy: "id=\"schema-production\"").first)
            XCTAssertTrue(development.contains("<code>Note</code>") && development.contains("<code>Editor</code>"), development)
            XCTAssertTrue(development.contains(
                "<td class=\"mono\">title</td><td class=\"mono\">STRING</td><td class=\"mono\">QUERYABLE SEARCHABLE SORTABLE</td>"), development)
            XCTAssertTrue(development.contains("<td class=\"mono\">pages</td><td class=\"mono\">INT64</td><td class=\"mono\">SORTABLE</td>"), development)
            XCTAssertTrue(development.contains("GRANT READ, WRITE TO Editor"), development)
            XCTAssertTrue(development.contains("RECORD TYPE Note ("), "the .ckdb export view")
            let production = try XCTUnwrap(page.html.components(separatedBy: "id=\"schema-production\"").last)
            XCTAssertTrue(production.contains("Not deployed yet") && !production.contains("<code>Note</code>"), production)

            // The first post only shows the additive check; nothing is deployed.
            let check = try await browser.request("/console/schema/deploy", method: .post, form: Self.form(csrf))
            XCTAssertEqual(check.status, 200, check.html)
            XCTAssertTrue(check.html.contains("The additive check passed"), check.html)
            XCTAssertTrue(check.html.contains("<li>record type Note would be added</li>"), check.html)
            XCTAssertTrue(check.html.contains("<li>role Editor would be created</li>"), check.html)
            XCTAssertEqual(ConsoleAuthTests.field("confirm", in: check.html), "deploy")
            let undeployed = try await Self.production(store)
            XCTAssertTrue(undeployed.recordTypes.isEmpty, "the check deploys nothing")

            // Without the CSRF token, the confirmation is refused and nothing is deployed.
            let forged = try await browser.request("/console/schema/deploy", method: .post, form: ["container": Self.container, "confirm": "deploy"])
            XCTAssertEqual(forged.status, 403, forged.html)
            let stillUndeployed = try await Self.production(store)
            XCTAssertTrue(stillUndeployed.recordTypes.isEmpty)

            // The second post deploys through the store the CLI uses: production is enforced from now on.
            let deployed = try await browser.request("/console/schema/deploy", method: .post, form: Self.form(csrf, ["confirm": "deploy"]))
            XCTAssertEqual(deployed.status, 303, deployed.html)
            XCTAssertEqual(deployed.location, "/console/schema?container=\(Self.container)&done=deploy")
            let inProduction = try await Self.production(store)
            XCTAssertEqual(inProduction.recordType(named: "Note")?.field(named: "title")?.indexes, FieldIndexes.all)
            XCTAssertEqual(inProduction.roles, ["Editor"])
            let enforced = try await SchemaStore(store: store).isEnforced(container: Self.container, environment: .production, logger: TestSupport.logger)
            XCTAssertTrue(enforced)
            let after = try await browser.request(try XCTUnwrap(deployed.location))
            XCTAssertEqual(after.html.components(separatedBy: "was deployed to production.").count - 1, 1, "the notice, once: \(after.html)")
            let productionAfter = try XCTUnwrap(after.html.components(separatedBy: "id=\"schema-production\"").last)
            XCTAssertTrue(productionAfter.contains("Enforced") && productionAfter.contains("<code>Note</code>"), productionAfter)
            let again = try await browser.request("/console/schema/deploy", method: .post, form: Self.form(csrf))
            XCTAssertTrue(again.html.contains("id=\"no-changes\""), again.html)

            // Security roles: a user is given production's Editor role, listed with it, and has it taken away.
            let assign = Self.form(csrf, ["environment": "production", "role": "Editor", "user": "_alice"])
            let holders: PostgresQuery = """
                SELECT count(*)::bigint FROM schema_role_members
                WHERE environment = 'production' AND role_name = 'Editor' AND user_record_name = '_alice'
                """
            let forgedRole = try await browser.request("/console/schema/roles", method: .post, form: assign.filter { $0.key != "csrf" })
            XCTAssertEqual(forgedRole.status, 403)
            let assigned = try await browser.request("/console/schema/roles", method: .post, form: assign)
            XCTAssertEqual(assigned.status, 303, assigned.html)
            let held = try await ConsoleOperationsTests.scalar(store, holders)
            XCTAssertEqual(held, 1)
            let listed = try await browser.request(try XCTUnwrap(assigned.location))
            XCTAssertTrue(listed.html.contains("The role was assigned.") && listed.html.contains("aria-label=\"Take Editor away from _alice\""), listed.html)
            for (role, user, status) in [("Nobody", "_alice", 404), ("_world", "_alice", 404), ("Editor", "", 400), ("Editor", "a\u{1}b", 400), (String(repeating: "r", count: 300), "_alice", 400)] {
                let refused = try await browser.request("/console/schema/roles", method: .post, form: Self.form(csrf, [
                    "environment": "production", "role": role, "user": user,
                ]))
                XCTAssertEqual(refused.status, status, "\(role) to \(user): \(refused.html)")
            }
            let removed = try await browser.request("/console/schema/roles", method: .post, form: assign.merging(["remove": "true"]) { $1 })
            XCTAssertEqual(removed.status, 303, removed.html)
            let gone = try await ConsoleOperationsTests.scalar(store, holders)
            XCTAssertEqual(gone, 0)

            // Development loses what production has (no console or CLI command does that; SQL does):
            // the check lists every problem and offers no confirmation, and a confirmation posted anyway is refused.
            try await store.withConnection { connection in
                try await connection.query("""
                    DELETE FROM schema_fields WHERE container = \(Self.container) AND environment = 'development' AND field_name = 'pages'
                    """, logger: TestSupport.logger)
                try await connection.query("""
                    UPDATE schema_fields SET field_type = 'DOUBLE' WHERE container = \(Self.container) AND environment = 'development' AND field_name = 'title'
                    """, logger: TestSupport.logger)
            }
            for form in [Self.form(csrf), Self.form(csrf, ["confirm": "deploy"])] {
                let refused = try await browser.request("/console/schema/deploy", method: .post, form: form)
                XCTAssertEqual(refused.status, 409, refused.html)
                XCTAssertTrue(refused.html.contains("id=\"refused\""), refused.html)
                XCTAssertTrue(refused.html.contains("<li>field pages of record type Note would be deleted</li>"), refused.html)
                XCTAssertTrue(refused.html.contains("<li>field title of record type Note would change type from STRING to DOUBLE</li>"), refused.html)
                XCTAssertNil(ConsoleAuthTests.field("confirm", in: refused.html), "a refused deploy offers no confirmation")
            }
            let kept = try await Self.production(store)
            XCTAssertEqual(kept, inProduction, "a refused deploy changes nothing")

            // Reset, also in two steps: the first shows what development regains, the second makes it production's.
            let resetCheck = try await browser.request("/console/schema/reset", method: .post, form: Self.form(csrf))
            XCTAssertEqual(resetCheck.status, 200, resetCheck.html)
            XCTAssertTrue(resetCheck.html.contains("<li>field pages (INT64) would be added to record type Note</li>"), resetCheck.html)
            XCTAssertEqual(ConsoleAuthTests.field("confirm", in: resetCheck.html), "reset")
            XCTAssertTrue(resetCheck.html.contains("all of development&#39;s records and zones (in every database) deleted")
                          || resetCheck.html.contains("all of development's records and zones (in every database) deleted"), resetCheck.html)
            // A record of development, which the confirmed reset deletes.
            let database = DatabaseID(container: Self.container, environment: .development, scope: .private, owner: "_alice")
            let defaultZone = ZoneID(zoneName: ZoneID.defaultZoneName, ownerRecordName: "_alice")
            let records = RecordStore(store: store)
            _ = try await records.modify(
                [RecordStore.Command(type: .create, input: RecordInput(recordName: "doomed", recordType: "Note", fields: ["remark": .string("x")]))],
                zone: defaultZone, in: database, atomic: false, causation: Causation(requestID: "console-reset-test", userRecordName: "_alice"),
                deviceID: nil, logger: TestSupport.logger)
            let beforeReset = try await records.lookup(["doomed"], zone: defaultZone, in: database, logger: TestSupport.logger)
            XCTAssertEqual(beforeReset.count, 1)
            let developmentBefore = try await SchemaStore(store: store).schema(container: Self.container, environment: .development, logger: TestSupport.logger)
            XCTAssertNil(developmentBefore.recordType(named: "Note")?.field(named: "pages"), "the check resets nothing")
            let forgedReset = try await browser.request("/console/schema/reset", method: .post, form: ["container": Self.container, "confirm": "reset"])
            XCTAssertEqual(forgedReset.status, 403)
            let reset = try await browser.request("/console/schema/reset", method: .post, form: Self.form(csrf, ["confirm": "reset"]))
            XCTAssertEqual(reset.status, 303, reset.html)
            let developmentAfter = try await SchemaStore(store: store).schema(container: Self.container, environment: .development, logger: TestSupport.logger)
            XCTAssertEqual(developmentAfter, inProduction)
            let afterReset = try await records.lookup(["doomed"], zone: defaultZone, in: database, logger: TestSupport.logger)
            XCTAssertEqual(afterReset.count, 0, "the console's reset deletes development's data too")
            let deployable = try await browser.request("/console/schema/deploy", method: .post, form: Self.form(csrf))
            XCTAssertEqual(deployable.status, 200, deployable.html)
        }
    }

    func testOperatorsLimitedToAnotherContainerCannotSeeOrChangeItsSchema() async throws {
        try await RecordAPITests.withAPI { fixture, client in
            let store = fixture.store
            try await Self.importDevelopment(store, "DEFINE SCHEMA RECORD TYPE Note (title STRING QUERYABLE);")
            _ = try await ContainerStore(store: store).create(container: "iCloud.other", label: "test", logger: TestSupport.logger)
            let browser = Browser(client)
            let csrf = try await ConsoleDataTests.signIn(browser, store: store, containers: ["iCloud.other"])
            let page = try await browser.request("/console/schema?container=\(Self.container)")
            XCTAssertEqual(page.status, 403, page.html)
            XCTAssertFalse(page.html.contains("<code>Note</code>"), page.html)
            for action in ["deploy", "reset"] {
                let check = try await browser.request("/console/schema/\(action)", method: .post, form: Self.form(csrf))
                XCTAssertEqual(check.status, 403, check.html)
                let confirmed = try await browser.request("/console/schema/\(action)", method: .post, form: Self.form(csrf, ["confirm": action]))
                XCTAssertEqual(confirmed.status, 403, confirmed.html)
            }
            let role = try await browser.request("/console/schema/roles", method: .post, form: Self.form(csrf, [
                "environment": "development", "role": "Editor", "user": "_alice",
            ]))
            XCTAssertEqual(role.status, 403, role.html)
            let production = try await Self.production(store)
            XCTAssertTrue(production.recordTypes.isEmpty, "nothing was deployed")
            let own = try await browser.request("/console/schema?container=iCloud.other")
            XCTAssertEqual(own.status, 200, own.html)
            let missing = try await browser.request("/console/schema?container=iCloud.missing")
            XCTAssertEqual(missing.status, 403)
            let signedOut = try await Browser(client).request("/console/schema?container=\(Self.container)")
            XCTAssertEqual(signedOut.status, 303)
            XCTAssertEqual(signedOut.location, "/console/signin")
        }
    }
}
