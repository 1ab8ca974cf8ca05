import Crypto
import Foundation
import HummingbirdTesting
import PostgresNIO
import StratusAPI
import StratusCore
import StratusKafka
import StratusPostgres
import StratusRuntime
import StratusTesting
import XCTest

/// Every administrative action of the admin CLI and the console leaves exactly its audit entry:
/// the CLI's subcommands (from the built executable's own description of itself) and the
/// console's POST routes (from the router) are held to `AuditCatalog`, and then each is run and
/// its one new entry checked — its action, who, from where, its request id, and no secret.
final class AuditCoverageTests: XCTestCase {
    typealias Browser = ConsoleAuthTests.Browser

    /// The CLI's leaf subcommands, as typed after `stratus`, from `stratus --experimental-dump-help`.
    static func cliCommands() async throws -> Set<String> {
        let dump = try await StratusExecutable.run("stratus", ["--experimental-dump-help"], settings: [:])
        XCTAssertEqual(dump.status, 0, dump.output)
        let json = try XCTUnwrap(dump.output.firstIndex(of: "{").map { String(dump.output[$0...]) }, dump.output)
        let root = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(json.utf8)) as? [String: Any])
        var leaves: Set<String> = []
        func walk(_ command: [String: Any], _ path: [String]) {
            let subcommands = (command["subcommands"] as? [[String: Any]] ?? []).filter { ($0["commandName"] as? String) != "help" }
            if subcommands.isEmpty, !path.isEmpty { leaves.insert(path.joined(separator: " ")) }
            for subcommand in subcommands { walk(subcommand, path + [subcommand["commandName"] as? String ?? "?"]) }
        }
        walk(try XCTUnwrap(root["command"] as? [String: Any]), [])
        return leaves
    }

    func testEveryCLISubcommandIsInTheAuditCatalog() async throws {
        let commands = try await Self.cliCommands()
        XCTAssertTrue(commands.contains("key revoke") && commands.contains("audit verify"), "\(commands.sorted())")
        XCTAssertEqual(commands.subtracting(AuditCatalog.cliCommands.keys).sorted(), [], "a subcommand the audit catalog does not name: say what it audits")
        XCTAssertEqual(Set(AuditCatalog.cliCommands.keys).subtracting(commands).sorted(), [], "the catalog names a subcommand the CLI does not have")
    }

    func testEveryConsolePostIsInTheAuditCatalog() throws {
        let posts = Set(try OpenAPIContractTests.router().routes.filter { $0.method == .post }.map(\.path.description).filter { $0.hasPrefix("/console") })
        XCTAssertTrue(posts.contains("/console/access/tokens/create"), "\(posts.sorted())")
        XCTAssertEqual(posts.subtracting(AuditCatalog.consolePosts.keys).sorted(), [], "a console form the audit catalog does not name: say what it audits")
        XCTAssertEqual(Set(AuditCatalog.consolePosts.keys).subtracting(posts).sorted(), [], "the catalog names a console route that does not exist")
    }

    /// The entries after `sequence`, oldest first.
    static func entries(after sequence: Int64, _ store: PostgresStore) async throws -> [AuditEntry] {
        try await AuditLog(store: store).entries(AuditLog.Filter(), limit: AuditLog.maxPage, logger: TestSupport.logger)
            .filter { $0.sequence > sequence }.reversed()
    }

    /// Checks that exactly one entry, of `action`, followed `sequence`; returns it.
    @discardableResult
    static func single(
        _ action: AuditAction, after sequence: inout Int64, _ store: PostgresStore, _ what: String, file: StaticString = #filePath, line: UInt = #line
    ) async throws -> AuditEntry? {
        let new = try await entries(after: sequence, store)
        XCTAssertEqual(new.map(\.action), [action.rawValue], "\(what) leaves exactly its entry", file: file, line: line)
        sequence = new.last?.sequence ?? sequence
        return new.last
    }

    func testEveryCLICommandThatChangesSomethingLeavesExactlyItsEntry() async throws {
        try await TestSupport.withMigratedStore { store, url in
            let topic = "test-audit-" + UUID().uuidString.prefix(8).lowercased()
            let brokers = try TestSupport.kafkaBrokers()
            // The topic a relay would have made: the replay moves the worker's group to its end.
            try await KafkaAdmin(configuration: KafkaClientConfiguration(brokers: brokers), logger: TestSupport.logger)
                .createTopic(topic, partitions: 1, timeout: .seconds(10))
            let settings = ["STRATUS_DATABASE_URL": url, "STRATUS_KAFKA_BROKERS": brokers, "STRATUS_TOPIC": topic, "STRATUS_CONSUMER_GROUP_SUFFIX": topic]
            let folder = FileManager.default.temporaryDirectory.appendingPathComponent("stratus-audit-\(UUID().uuidString)")
            try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
            defer { try? FileManager.default.removeItem(at: folder) }
            func file(_ name: String, _ text: String) throws -> String {
                let path = folder.appendingPathComponent(name).path
                try Data(text.utf8).write(to: URL(fileURLWithPath: path))
                return path
            }
            let password = try file("password", "a user password\n")
            let serverKey = P256.Signing.PrivateKey().publicKey
            let publicKey = try file("public.pem", serverKey.pemRepresentation)
            let keyID = try ServerPublicKey(der: serverKey.derRepresentation).keyID
            let apnsKey = P256.Signing.PrivateKey().pemRepresentation
            let p8 = try file("AuthKey.p8", apnsKey)
            let schema = try file("schema.ckdb", "DEFINE SCHEMA CREATE ROLE Editor; RECORD TYPE Note (title STRING QUERYABLE, GRANT WRITE TO Editor);")
            let container = "iCloud.com.example.audit"
            var secrets: [String] = ["a user password", apnsKey]
            var sequence: Int64 = 0
            var walked: Set<String> = []

            /// Runs a command as the operator `auditor` (`--actor`); checks its one entry; returns the output.
            @discardableResult
            func run(_ command: String, _ arguments: [String], _ action: AuditAction, container expected: String = "", subject: String? = nil) async throws -> String {
                let result = try await StratusExecutable.run("stratus", command.split(separator: " ").map(String.init) + arguments + ["--actor", "auditor"], settings: settings)
                XCTAssertEqual(result.status, 0, "\(command): \(result.output)")
                walked.insert(command)
                let entry = try await Self.single(action, after: &sequence, store, command)
                XCTAssertEqual(entry?.channel, "cli", command)
                XCTAssertEqual(entry?.actor, "auditor", command)
                XCTAssertEqual(entry?.origin, ProcessInfo.processInfo.hostName, command)
                XCTAssertEqual(entry?.requestID.hasPrefix("cli-"), true, command)
                XCTAssertEqual(entry?.container, expected, command)
                if let subject { XCTAssertEqual(entry?.subject, subject, command) }
                return result.output
            }

            try await run("migrate", [], .databaseMigrate)
            try await run("container create", [container, "--label", "audit"], .containerCreate, container: container)
            let created = try await AuditLog(store: store).entries(.init(action: "container.create"), limit: 1, logger: TestSupport.logger)
            let token = try XCTUnwrap(created.first)
            XCTAssertTrue(token.details.contains("token="), token.details)
            try await run("container set", [container, "--anonymous-public-reads", "false"], .containerSettings, container: container)
            try await run("container suspend", [container, "--reason", "an audit"], .containerSuspend, container: container)
            try await run("container resume", [container], .containerResume, container: container)
            try await run("key create", [container, "--public-key", publicKey], .keyCreate, container: container, subject: keyID)
            try await run("key revoke", [keyID], .keyRevoke, subject: keyID)
            let createdUser = try await run(
                "user create", [container, "--login", "carol@example.com", "--password-file", password], .userCreate, container: container, subject: "carol@example.com")
            // The new user's record name is the output's line that starts with an underscore.
            let carol = try XCTUnwrap(createdUser.split(separator: "\n").last { $0.hasPrefix("_") }.map(String.init), createdUser)
            try await run("user set", [container, "--login", "carol@example.com", "--given-name", "Carol"], .userChange, container: container)
            try await run("user password", [container, "--login", "carol@example.com", "--password-file", password], .userPassword, container: container)
            let webAuthToken = try await run("user token", [container, "--user", "_carol"], .userToken, container: container, subject: "_carol")
            // The token is the line of the output without a space (the log's lines have them).
            secrets.append(try XCTUnwrap(webAuthToken.split(separator: "\n").last { !$0.contains(" ") && $0.count > 40 }.map(String.init), webAuthToken))
            let issuer = "https://issuer.example.com"
            try await run(
                "container auth add", [container, "--issuer", issuer, "--jwks-url", "https://issuer.example.com/keys", "--audience", "com.example.audit"],
                .issuerTrust, container: container, subject: issuer)
            try await run("container auth remove", [container, "--issuer", issuer], .issuerDistrust, container: container, subject: issuer)
            try await run("container set", [container, "--sign-up", "invite-only"], .containerSettings, container: container)
            let mode = try await EmailSignUpStore(store: store).mode(container: container, logger: TestSupport.logger)
            XCTAssertEqual(mode, .inviteOnly)
            try await run("container invite", [container, "--email", "Dan@Example.com"], .signUpInvite, container: container, subject: "dan@example.com")
            try await run("container invite", [container, "--email", "dan@example.com", "--remove"], .signUpUninvite, container: container, subject: "dan@example.com")
            let sessions = SessionStore(store: store)
            let expiresAt = Int64(Date().timeIntervalSince1970) + 3600
            let sessionID = try await sessions.create(container: container, userRecordName: carol, method: .password, expiresAt: expiresAt, logger: TestSupport.logger)
            _ = try await sessions.create(container: container, userRecordName: carol, method: .password, expiresAt: expiresAt, logger: TestSupport.logger)
            try await run("session revoke", [container, sessionID], .sessionRevoke, container: container, subject: sessionID)
            try await run("session revoke-all", [container, "--user", carol], .sessionRevokeAll, container: container, subject: carol)
            let webhook = try await run("webhook create", [container, "https://hooks.example.com/in?secret=hook-credential"], .webhookCreate, container: container)
            let webhookID = try XCTUnwrap(PushAdminCLITests.value("id", in: webhook), webhook)
            secrets += [try XCTUnwrap(PushAdminCLITests.value("secret", in: webhook)), "hook-credential"]
            try await run("webhook delete", [webhookID], .webhookDelete, subject: webhookID)
            try await run("apns set", [container, "--team-id", "TEAM123456", "--key-id", "KEY7654321", "--key-file", p8, "--topic", "com.example.audit"], .apnsSet, container: container, subject: "KEY7654321")
            try await run("schema import", [container, schema], .schemaImport, container: container)
            try await run("schema deploy", [container], .schemaDeploy, container: container)
            try await run("schema reset", [container], .schemaReset, container: container)
            try await run("schema build-indexes", [container], .schemaBuildIndexes, container: container)
            try await run("schema assign-role", [container, "Editor", "_carol"], .roleAssign, container: container, subject: "_carol")
            try await run("schema assign-role", [container, "Editor", "_carol", "--remove"], .roleRemove, container: container, subject: "_carol")
            try await run("operator create", ["auditor@example.com", "--password-file", password], .operatorCreate, subject: "auditor@example.com")
            try await run("republish", ["--from", "1"], .eventsRepublish)
            try await run("events prune", [], .eventsPrune)
            try await run("reindex", [], .indexReindex)
            try await run("replay", ["stratus-gc"], .workerReplay, subject: "stratus-gc")
            let archive = NSTemporaryDirectory() + "stratus-audit-\(UUID().uuidString).tar"
            defer { try? FileManager.default.removeItem(atPath: archive) }
            try await run("export", [container, "--output", archive], .archiveExport, container: container)
            let copy = container + ".copy"
            _ = try await ContainerStore(store: store).create(container: copy, label: "copy", logger: TestSupport.logger)
            try await run("import", [archive, "--container", copy, "--map-user", "\(carol)=\(carol)-copy"], .archiveImport, container: copy, subject: archive)
            try await run("user delete", [container, "--user", carol], .userDelete, container: container, subject: carol)
            let gone = container + ".gone"
            _ = try await ContainerStore(store: store).create(container: gone, label: "gone", logger: TestSupport.logger)
            try await run("container delete", [gone, "--yes"], .containerDelete, container: gone)

            let audited = Set(AuditCatalog.cliCommands.filter { !$0.value.actions.isEmpty }.keys)
            XCTAssertEqual(audited.subtracting(walked).sorted(), [], "every audited subcommand is walked here")

            // Commands that change nothing append nothing; a refused command appends nothing either.
            for arguments in [["webhook", "list"], ["schema", "export", container], ["container", "auth", "list", container], ["container", "list"],
                              ["container", "invitations", container], ["session", "list", container, "--user", carol],
                              ["user", "deletion", container, "--user", carol], ["container", "deletion", gone], ["audit", "list"], ["audit", "verify"]] {
                let result = try await StratusExecutable.run("stratus", arguments, settings: settings)
                XCTAssertEqual(result.status, 0, "\(arguments): \(result.output)")
            }
            let refused = try await StratusExecutable.run("stratus", ["key", "revoke", "no-such-key"], settings: settings)
            XCTAssertNotEqual(refused.status, 0, refused.output)
            for arguments in [["container", "invite", container, "--email", "nobody@example.com", "--remove"], ["container", "set", container, "--sign-up", "sometimes"],
                              ["container", "invite", container, "--email", "not an address"]] {
                let refusal = try await StratusExecutable.run("stratus", arguments, settings: settings)
                XCTAssertNotEqual(refusal.status, 0, "\(arguments): \(refusal.output)")
            }
            let none = try await Self.entries(after: sequence, store)
            XCTAssertEqual(none.map(\.action), [], "reads and refusals append nothing")

            // Without --actor, the OS user.
            let plain = try await StratusExecutable.run("stratus", ["migrate"], settings: settings)
            XCTAssertEqual(plain.status, 0, plain.output)
            let byOS = try await Self.single(.databaseMigrate, after: &sequence, store, "migrate")
            XCTAssertEqual(byOS?.actor, String(cString: getpwuid(getuid())!.pointee.pw_name))

            // No entry holds a secret: tokens, passwords, keys and credentials are named by id or digest.
            let all = try await Self.entries(after: 0, store)
            for secret in secrets where !secret.isEmpty {
                XCTAssertFalse(all.contains { String(decoding: $0.canonical, as: UTF8.self).contains(secret) }, "an entry holds a secret")
            }
            let verification = try await AuditLog(store: store).verify(logger: TestSupport.logger)
            XCTAssertNil(verification.problem)
            XCTAssertEqual(verification.verified, Int64(all.count))
        }
    }

    func testEveryConsoleFormThatChangesSomethingLeavesExactlyItsEntry() async throws {
        try await RecordAPITests.withAPI(maintenance: true) { fixture, client in
            let store = fixture.store
            let container = ConsoleDataTests.container
            let browser = Browser(client)
            var sequence: Int64 = 0
            var walked: Set<String> = []
            let csrf = try await ConsoleDataTests.signIn(browser, store: store)
            walked.insert("/console/signin")
            let signIn = try await Self.single(.consoleSignIn, after: &sequence, store, "sign-in")
            XCTAssertEqual(signIn?.actor, "ops@example.com")

            /// Posts a form; checks its status and its one entry (none for `nil`); returns the page.
            @discardableResult
            func post(
                _ path: String, _ fields: [String: String], status: Int = 303, _ action: AuditAction?, container expected: String = container,
                subject: String? = nil
            ) async throws -> Browser.Page {
                let page = try await browser.request(path, method: .post, form: fields.merging(["csrf": csrf]) { $1 })
                XCTAssertEqual(page.status, status, "\(path): \(page.html)")
                walked.insert(path)
                guard let action else {
                    let none = try await Self.entries(after: sequence, store)
                    XCTAssertEqual(none.map(\.action), [], "\(path) appends nothing")
                    return page
                }
                let entry = try await Self.single(action, after: &sequence, store, path)
                XCTAssertEqual(entry?.channel, "console", path)
                XCTAssertEqual(entry?.actor, "ops@example.com", path)
                XCTAssertEqual(entry?.container, expected, path)
                XCTAssertEqual(entry?.requestID.isEmpty, false, path)
                if let subject { XCTAssertEqual(entry?.subject, subject, path) }
                return page
            }

            // A refused form (no CSRF token) appends nothing.
            let forged = try await browser.request("/console/zones", method: .post, form: ConsoleDataTests.alice.merging(["zoneName": "Audit"]) { $1 })
            XCTAssertEqual(forged.status, 403)
            let afterForged = try await Self.entries(after: sequence, store)
            XCTAssertEqual(afterForged.count, 0)

            // Data.
            let alice = ConsoleDataTests.alice
            try await post("/console/zones", alice.merging(["zoneName": "Audit"]) { $1 }, .zoneCreate, subject: "Audit")
            try await post("/console/record/save", alice.merging([
                "zone": "Audit", "recordName": "r1", "recordType": "Note", "fields": "{\"title\": {\"value\": \"a private title\"}}",
            ]) { $1 }, .recordSave, subject: "r1")
            let saved = try await Self.entries(after: 0, store).last
            XCTAssertFalse(saved?.details.contains("a private title") ?? true, "a record's values stay out of the log")
            try await post("/console/record/delete", alice.merging(["zone": "Audit", "recordName": "r1"]) { $1 }, .recordDelete, subject: "r1")

            // Operations: dead letters, runs.
            let zoneKey = "\(container)/development/private/_alice/Audit"
            let deadLetters = try await store.withConnection { connection in
                let rows = try await connection.query("""
                    INSERT INTO worker_dead_letters (worker, event_id, zone_key, value, reason)
                    SELECT 'stratus-indexer', id, zone_key, '\\x00'::bytea, 'refused' FROM events WHERE zone_key = \(zoneKey) ORDER BY id LIMIT 2
                    RETURNING id
                    """, logger: TestSupport.logger)
                var ids: [Int64] = []
                for try await id in rows.decode(Int64.self) { ids.append(id) }
                return ids
            }
            XCTAssertEqual(deadLetters.count, 2)
            try await post("/console/operations/dead-letters/retry", ["id": "\(deadLetters[0])"], .deadLetterRetry, container: "", subject: "\(deadLetters[0])")
            try await post("/console/operations/dead-letters/discard", ["id": "\(deadLetters[1])"], .deadLetterDiscard, container: "", subject: "\(deadLetters[1])")
            let reindex = try await post("/console/operations/runs", ["job": "reindex"], .indexReindex, container: "")
            _ = try await ConsoleMaintenanceTests.finished(browser, try ConsoleMaintenanceTests.runID(reindex))
            let replay = try await post("/console/operations/runs", ["job": "replay:stratus-gc"], .workerReplay, container: "", subject: "stratus-gc")
            _ = try await ConsoleMaintenanceTests.finished(browser, try ConsoleMaintenanceTests.runID(replay))

            // Access.
            let created = try await post("/console/access/tokens/create", ["container": container, "label": "audit"], status: 201, .tokenCreate)
            let token = try XCTUnwrap(created.html.range(of: "<code id=\"new-token\">[0-9a-f]{64}</code>", options: .regularExpression).map {
                String(created.html[$0].dropFirst("<code id=\"new-token\">".count).prefix(64))
            })
            let digest = AuditEntry.hex(APIToken.digest(token))
            try await post("/console/access/tokens/revoke", ["container": container, "digest": digest], .tokenRevoke, subject: digest)
            let key = P256.Signing.PrivateKey()
            let keyID = try ServerPublicKey(der: key.publicKey.derRepresentation).keyID
            try await post("/console/access/keys/create", ["container": container, "publicKey": key.publicKey.pemRepresentation], .keyCreate, subject: keyID)
            try await post("/console/access/keys/revoke", ["container": container, "keyID": keyID], .keyRevoke, subject: keyID)
            try await post("/console/access/users/create", ["container": container, "login": "dave@example.com", "password": "a user password"], .userCreate, subject: "dave@example.com")
            let dave = try await store.withConnection { connection in
                var name = ""
                for try await value in try await connection.query(
                    "SELECT user_record_name FROM users WHERE container = \(container) AND login = 'dave@example.com'", logger: TestSupport.logger
                ).decode(String.self) { name = value }
                return name
            }
            try await post("/console/access/users/delete", ["container": container, "userRecordName": dave], .userDelete, subject: dave)
            let deletion = try await UserDeletionStore(store: store).progress(container: container, user: dave, logger: TestSupport.logger)
            XCTAssertEqual(deletion?.step, .zones, "the console's deletion signs the user out at once; stratus-gc runs the rest")

            // Sign-in: sign-up, invitations, trusted issuers, a user's sessions.
            try await post("/console/access/sign-up", ["container": container, "mode": "invite-only"], .containerSettings)
            let identity = try await browser.request("/console/access/identity?container=\(container)")
            XCTAssertTrue(identity.html.contains("<strong id=\"sign-up-mode\">invite-only</strong>"), identity.html)
            try await post("/console/access/sign-up", ["container": container, "mode": "sometimes"], status: 400, nil)
            try await post("/console/access/invitations/create", ["container": container, "email": "Erin@Example.com"], .signUpInvite, subject: "erin@example.com")
            let invited = try await browser.request("/console/access/identity?container=\(container)")
            XCTAssertTrue(invited.html.contains("<td>erin@example.com</td>"), invited.html)
            try await post("/console/access/invitations/remove", ["container": container, "email": "erin@example.com"], .signUpUninvite, subject: "erin@example.com")
            try await post("/console/access/invitations/remove", ["container": container, "email": "erin@example.com"], status: 404, nil)
            let issuer = "https://issuer.example.com"
            try await post(
                "/console/access/issuers/add", ["container": container, "issuer": issuer, "jwksURL": "https://issuer.example.com/keys", "audiences": "com.a, com.b", "webClientID": "com.b"],
                .issuerTrust, subject: issuer)
            let trusted = try await IdentityStore(store: store).trustedIssuers(container: container, logger: TestSupport.logger)
            XCTAssertEqual(trusted.map(\.audiences), [["com.a", "com.b"]])
            XCTAssertEqual(trusted.map(\.webClientID), ["com.b"], "the hosted page's web client id, from the form")
            try await post("/console/access/issuers/remove", ["container": container, "issuer": issuer], .issuerDistrust, subject: issuer)
            let sessions = SessionStore(store: store)
            let expiresAt = Int64(Date().timeIntervalSince1970) + 3600
            // Another user's sessions (dave's deletion above signed him out for good).
            try await post("/console/access/users/create", ["container": container, "login": "frank@example.com", "password": "a user password"], .userCreate, subject: "frank@example.com")
            let frank = try await store.withConnection { connection in
                var name = ""
                let rows = try await connection.query("SELECT user_record_name FROM users WHERE login = 'frank@example.com'", logger: TestSupport.logger)
                for try await found in rows.decode(String.self) { name = found }
                return name
            }
            let sessionID = try await sessions.create(container: container, userRecordName: frank, method: .password, expiresAt: expiresAt, logger: TestSupport.logger)
            _ = try await sessions.create(container: container, userRecordName: frank, method: .password, expiresAt: expiresAt, logger: TestSupport.logger)
            let listed = try await browser.request("/console/access/sessions?container=\(container)&user=\(frank)")
            XCTAssertTrue(listed.html.contains(sessionID), listed.html)
            try await post("/console/access/sessions/revoke", ["container": container, "user": frank, "sessionID": sessionID], .sessionRevoke, subject: sessionID)
            let afterRevoke = try await sessions.list(container: container, userRecordName: frank, logger: TestSupport.logger)
            XCTAssertEqual(afterRevoke.filter { $0.isActive(now: Int64(Date().timeIntervalSince1970)) }.count, 1)
            try await post("/console/access/sessions/revoke-all", ["container": container, "user": frank], .sessionRevokeAll, subject: frank)
            let afterAll = try await sessions.list(container: container, userRecordName: frank, logger: TestSupport.logger)
            XCTAssertEqual(afterAll.filter { $0.isActive(now: Int64(Date().timeIntervalSince1970)) }.count, 0)

            // Schema: the first post only checks and appends nothing.
            try await ConsoleSchemaTests.importDevelopment(store, "DEFINE SCHEMA CREATE ROLE Editor; RECORD TYPE Note (title STRING QUERYABLE, GRANT WRITE TO Editor);")
            try await post("/console/schema/deploy", ["container": container], status: 200, nil)
            try await post("/console/schema/deploy", ["container": container, "confirm": "deploy"], .schemaDeploy)
            try await post("/console/schema/reset", ["container": container, "confirm": "reset"], .schemaReset)
            let role = ["container": container, "environment": "production", "role": "Editor", "user": "_alice"]
            try await post("/console/schema/roles", role, .roleAssign, subject: "_alice")
            try await post("/console/schema/roles", role.merging(["remove": "true"]) { $1 }, .roleRemove, subject: "_alice")

            // Tenancy: the container's limits, a suspension and a resumption.
            try await post("/console/tenancy/limits", ["container": container, "user-quota-bytes": "1000000"], .containerSettings)
            try await post("/console/tenancy/origins", ["container": container, "allowed-origins": "https://app.example\nhttp://localhost:3000"], .containerSettings)
            try await post("/console/tenancy/origins", ["container": container, "allowed-origins": "ftp://app.example"], status: 400, nil)
            let origins = try await ContainerStore(store: store).allowedOrigins(container: container, logger: TestSupport.logger)
            XCTAssertEqual(origins, .some(["https://app.example", "http://localhost:3000"]), "a refused form changes nothing")
            try await post("/console/tenancy/suspend", ["container": container, "reason": "an audit"], .containerSuspend)
            try await post("/console/tenancy/resume", ["container": container], .containerResume)
            let gone = container + ".gone"
            _ = try await ContainerStore(store: store).create(container: gone, label: "gone", logger: TestSupport.logger)
            try await post("/console/tenancy/delete", ["container": gone, "confirm": "not it"], status: 400, nil)
            try await post("/console/tenancy/delete", ["container": gone, "confirm": gone], .containerDelete, container: gone)

            // The audit page lists them, newest first, filtered.
            let page = try await browser.request("/console/audit?action=key.create")
            XCTAssertEqual(page.status, 200, page.html)
            XCTAssertTrue(page.html.contains(keyID) && !page.html.contains("<td class=\"mono\">key.revoke</td>"), page.html)
            let byContainer = try await browser.request("/console/audit?container=\(container)&actor=ops%40example.com")
            XCTAssertTrue(
                byContainer.html.contains("<td class=\"mono\">role.remove</td>") && !byContainer.html.contains("<td class=\"mono\">console.signin</td>"),
                byContainer.html)

            try await post("/console/signout", [:], .consoleSignOut, container: "")
            XCTAssertEqual(Set(AuditCatalog.consolePosts.keys).subtracting(walked).sorted(), [], "every console form is walked here")
            let verification = try await AuditLog(store: store).verify(logger: TestSupport.logger)
            XCTAssertNil(verification.problem)
        }
    }
}
