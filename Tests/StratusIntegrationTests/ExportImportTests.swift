import Foundation
import Hummingbird
import HummingbirdTesting
import PostgresNIO
import StratusAPI
import StratusBlobStore
import StratusCore
import StratusPostgres
import StratusRelay
import StratusTesting
import StratusWorkers
import Synchronization
import XCTest

/// `stratus export` and `stratus import` end to end: a container with several users' private zones,
/// default-zone and public records, assets, shares (accepted) and subscriptions is exported by the
/// CLI, damaged copies of the archive are refused with nothing loaded, and the archive is imported
/// into a second Stratus on a database of its own; there a full sync of every zone (private and
/// shared), the subscriptions, and queries answered by the index its own indexer builds from the
/// imported events all answer what the original answers: the same records, fields and asset bytes.
final class ExportImportTests: XCTestCase {
    typealias Body = [String: Any]

    /// One Stratus: a migrated database with the container, the API over a blob folder of its own,
    /// and the relay and indexer on a topic of its own.
    struct Stack: Sendable {
        var fixture: SharingTests.Fixture
        var settings: [String: String]
    }

    static func withStack(
        users: [String]?, _ body: @Sendable (Stack, PostgresStore, any TestClientProtocol) async throws -> Void
    ) async throws {
        let brokers = try TestSupport.kafkaBrokers()
        let directory = NSTemporaryDirectory() + "stratus-archive-\(UUID().uuidString)"
        defer { try? FileManager.default.removeItem(atPath: directory) }
        try await TestSupport.withMigratedStore { store, url in
            let token = try await ContainerStore(store: store).create(container: SharingTests.container, label: "test", logger: TestSupport.logger)
            // The second stack's users come from the archive.
            var names = users ?? []
            if users == nil { names = try await SharingTests.createUsers(store: store, container: SharingTests.container) }
            var configuration = APIConfiguration(secretKey: SecretKey.generate())
            configuration.port = 0
            let apiConfiguration = configuration
            let fixture = SharingTests.Fixture(apiToken: token, secretKey: configuration.secretKey, alice: names[0], bob: names[1], carol: names[2], dave: names[3])
            let pipeline = PipelineFixture()
            let topic = pipeline.uniqueTopic()
            let (relayConfiguration, workerConfiguration) = pipeline.configurations(topic: topic, partitions: 2)
            let kafka = pipeline.kafka(brokers)
            let relay = Relay(store: store, kafka: kafka, configuration: relayConfiguration, logger: TestSupport.logger)
            let indexer = Worker(projection: IndexerProjection(), store: store, kafka: kafka, configuration: workerConfiguration, logger: TestSupport.logger)
            let dependencies = APIDependencies(store: store, readiness: [], metrics: { "" }, blobs: FileSystemBlobStore(directory: directory))
            let settings = ["STRATUS_DATABASE_URL": url, "STRATUS_ASSET_STORE": "filesystem", "STRATUS_ASSET_DIR": directory]
            try await pipeline.runServices([relay, indexer]) {
                let router = buildRouter(dependencies, configuration: apiConfiguration)
                try await Application(router: router, logger: TestSupport.logger).test(.router) { client in
                    try await body(Stack(fixture: fixture, settings: settings), store, client)
                }
            }
        }
    }

    func testAnExportedContainerImportsIntoAFreshStackAndAnswersTheSame() async throws {
        let archive = NSTemporaryDirectory() + "stratus-export-\(UUID().uuidString).tar"
        defer { try? FileManager.default.removeItem(atPath: archive) }
        let source = Mutex<(users: [String], answers: [String: String])>(([], [:]))
        try await Self.withStack(users: nil) { stack, _, client in
            let fixture = stack.fixture
            try await UserDeletionTests.makeData(client, fixture)
            _ = try await SharingTests.ok(client, fixture.path("records/modify", as: fixture.carol).replacingOccurrences(of: "/development/", with: "/production/"), [
                "operations": [["operationType": "create", "record": ["recordName": "prod", "recordType": "Note", "fields": ["title": ["value": "in production"]]]]],
            ])
            // The original's answers, once its index holds every record.
            try await TestSupport.eventually("the original's index to hold every record") {
                let answers = try await Self.answers(client, fixture)
                return answers["query public Note"]?.contains("p-bob") == true && answers["query Notes Note"]?.contains("n2") == true
            }
            let answers = try await Self.answers(client, fixture)
            source.withLock { $0 = ([fixture.alice, fixture.bob, fixture.carol, fixture.dave], answers) }
            let exported = try await StratusExecutable.run("stratus", ["export", SharingTests.container, "--output", archive], settings: stack.settings)
            XCTAssertEqual(exported.status, 0, exported.output)
            XCTAssertTrue(exported.output.contains("4 users,"), exported.output)
        }
        let (users, expected) = source.withLock { $0 }
        XCTAssertTrue(Set(expected.keys).isSuperset(of: ["alice private Notes", "alice private _defaultZone", "bob shared Trip", "alice shared BobTrip",
                                                        "alice subscriptions", "carol private _defaultZone"]), "\(expected.keys.sorted())")
        let bytes = try Array(Data(contentsOf: URL(fileURLWithPath: archive)))
        let files = try Self.files(bytes)
        XCTAssertEqual(files.last?.path, ArchiveLayout.manifest)
        XCTAssertEqual(files.filter { $0.path.hasPrefix("assets/") }.count, 2)
        XCTAssertTrue(files.contains { $0.path == "schema/production.ckdb" })

        try await Self.withStack(users: users) { stack, store, client in
            // Damaged copies are refused, each with its reason, and nothing of them is loaded.
            let asset = try XCTUnwrap(files.first { $0.path.hasPrefix("assets/") })
            var flipped = bytes
            flipped[Int(asset.offset) + 2] ^= 0x20
            var hostile = ArchiveTar.header(path: "x", size: 0)
            hostile.replaceSubrange(0..<8, with: Array("../evil\0".utf8))
            hostile = ArchiveTar.sealed(hostile)
            var huge = ArchiveTar.header(path: "assets/" + UUID().uuidString.lowercased(), size: 0)
            huge.replaceSubrange(124..<135, with: Array("77777777777".utf8))
            huge = ArchiveTar.sealed(huge)
            let damaged: [(String, [UInt8], String)] = [
                ("a flipped byte", flipped, "does not match the manifest"),
                ("a truncated archive", Array(bytes.prefix(bytes.count - 3_000)), "truncated"),
                ("a path out of the archive", hostile + bytes, "outside its own layout"),
                ("a hostile size", huge + bytes, "larger than"),
                ("a file the manifest does not list", Array(ArchiveTar.header(path: "zones/000009.jsonl", size: 0)) + bytes, "does not list"),
            ]
            for (what, content, reason) in damaged {
                let path = archive + ".damaged"
                try Data(content).write(to: URL(fileURLWithPath: path))
                defer { try? FileManager.default.removeItem(atPath: path) }
                let refused = try await StratusExecutable.run("stratus", ["import", path], settings: stack.settings)
                XCTAssertNotEqual(refused.status, 0, "\(what): \(refused.output)")
                XCTAssertTrue(refused.output.contains("Archive refused, nothing was loaded"), "\(what): \(refused.output)")
                XCTAssertTrue(refused.output.contains(reason), "\(what) is refused for '\(reason)': \(refused.output)")
            }
            for table in ["users", "zones", "records", "assets", "subscriptions", "events"] {
                let rows = try await TestSupport.count(store, PostgresQuery(unsafeSQL: "SELECT count(*) FROM \(table)"))
                XCTAssertEqual(rows, 0, "a refused archive leaves nothing in \(table)")
            }

            let imported = try await StratusExecutable.run("stratus", ["import", archive], settings: stack.settings)
            XCTAssertEqual(imported.status, 0, imported.output)
            XCTAssertTrue(imported.output.contains("2 share acceptances"), imported.output)
            // The imported records are events like a client's: the new stack's indexer indexes them.
            var answers: [String: String] = [:]
            // Waits for the answers to equal the original's; on a timeout, says which still differ, and how.
            func settle(_ what: String, after run: String) async throws {
                do {
                    try await TestSupport.eventually(what) {
                        answers = try await Self.answers(client, stack.fixture)
                        return answers == expected
                    }
                } catch {
                    let differing = Set(answers.keys).union(expected.keys).sorted().filter { answers[$0] != expected[$0] }
                        .map { "\($0):\n  now      \(answers[$0] ?? "none")\n  expected \(expected[$0] ?? "none")" }
                    XCTFail("differing answers after \(run):\n\(differing.joined(separator: "\n"))")
                    throw error
                }
            }
            try await settle("the new stack's index to answer as the original's", after: "the import (\(imported.output))")
            XCTAssertEqual(answers, expected)
            // Run again (an import that stopped is run again): the same answers.
            let again = try await StratusExecutable.run("stratus", ["import", archive], settings: stack.settings)
            XCTAssertEqual(again.status, 0, again.output)
            try await settle("the index to apply the second import", after: "the second import (\(again.output))")
            XCTAssertEqual(answers, expected)

            // Into another container of the same Stratus: user record names are unique across it,
            // so each archived user is renamed; a container that does not exist is refused.
            let unknown = try await StratusExecutable.run("stratus", ["import", archive, "--container", "iCloud.com.example.none"], settings: stack.settings)
            XCTAssertNotEqual(unknown.status, 0, unknown.output)
            XCTAssertTrue(unknown.output.contains("no container 'iCloud.com.example.none'"), unknown.output)
            let copy = "iCloud.com.example.copy"
            _ = try await ContainerStore(store: store).create(container: copy, label: "copy", logger: TestSupport.logger)
            let mapped = try await StratusExecutable.run(
                "stratus", ["import", archive, "--container", copy] + users.flatMap { ["--map-user", "\($0)=\($0)-copy"] }, settings: stack.settings)
            XCTAssertEqual(mapped.status, 0, mapped.output)
            func count(_ sql: String, _ container: String, _ owner: String? = nil) async throws -> Int64 {
                var binds = PostgresBindings()
                binds.append(container)
                binds.append(owner ?? "")
                return try await TestSupport.count(store, PostgresQuery(unsafeSQL: sql, binds: binds))
            }
            let records = "SELECT count(*) FROM records WHERE container = $1 AND ($2 = '' OR owner = $2)"
            let original = try await count(records, SharingTests.container)
            XCTAssertGreaterThan(original, 0)
            let copied = try await count(records, copy)
            XCTAssertEqual(copied, original)
            let (renamedAlice, alice) = (try await count(records, copy, users[0] + "-copy"), try await count(records, SharingTests.container, users[0]))
            XCTAssertEqual(renamedAlice, alice)
            XCTAssertGreaterThan(alice, 0)
            let participants = "SELECT count(*) FROM share_participants WHERE container = $1 AND user_record_name = $2 AND acceptance_status = 'ACCEPTED'"
            let (accepted, acceptedBefore) = (try await count(participants, copy, users[1] + "-copy"), try await count(participants, SharingTests.container, users[1]))
            XCTAssertEqual(accepted, acceptedBefore, "the renamed bob owns his share and accepted the renamed alice's again")
            XCTAssertEqual(accepted, 2)
        }
    }

    /// `stratus export` and `stratus import`, each killed by PID half-way (at a test setting's pause)
    /// and run again with the same arguments, end as a run never killed: the killed export leaves
    /// nothing at its path, and run again writes the same files as an export never killed; the
    /// killed import leaves a half-loaded container, and run again it finishes the load without
    /// doing anything twice: the same records, zones, events per record, assets, acceptances,
    /// subscriptions and users as an import never killed.
    func testAKilledExportOrImportRunAgainEndsAsOneNeverKilled() async throws {
        let folder = NSTemporaryDirectory() + "stratus-resume-\(UUID().uuidString)"
        let out = folder + "/out"
        try FileManager.default.createDirectory(atPath: out, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let (archive, reference) = (out + "/resumed.tar", folder + "/reference.tar")
        @Sendable func settings(_ url: String, _ blobs: String) -> [String: String] {
            ["STRATUS_DATABASE_URL": url, "STRATUS_ASSET_STORE": "filesystem", "STRATUS_ASSET_DIR": folder + "/" + blobs]
        }
        /// Runs `arguments` with a pause after three records, waits for the pause and kills it there.
        @Sendable func killHalfWay(_ arguments: [String], _ settings: [String: String], pause: String) async throws {
            try await StratusExecutable.with("stratus", arguments, settings: settings.merging([pause: "3"]) { _, new in new }) { child in
                try await TestSupport.eventually("\(arguments[0]) to reach its pause") {
                    try child.requireRunning()
                    return child.output().contains("\(arguments[0]) paused")
                }
                kill(child.processIdentifier, SIGKILL)
                _ = await child.exited()
            }
        }
        try await UserDeletionTests.withLiveAPI { fixture, source, sourceSettings, client in
            let logger = TestSupport.logger
            try await UserDeletionTests.makeData(client, fixture)
            let total = try await TestSupport.count(source, "SELECT count(*) FROM records")

            // The export: killed after three records, nothing is left at its path; run again, the
            // same files (each path, size and checksum) as an export never killed.
            let exportArguments = ["export", SharingTests.container, "--output", archive]
            try await killHalfWay(exportArguments, sourceSettings, pause: "STRATUS_TEST_EXPORT_PAUSE_AFTER_RECORDS")
            XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: out), [], "a killed export leaves no archive, whole or part")
            let resumed = try await StratusExecutable.run("stratus", exportArguments, settings: sourceSettings)
            XCTAssertEqual(resumed.status, 0, resumed.output)
            let straight = try await StratusExecutable.run("stratus", ["export", SharingTests.container, "--output", reference], settings: sourceSettings)
            XCTAssertEqual(straight.status, 0, straight.output)
            let check = ArchiveImport(store: source, blobs: FileSystemBlobStore(directory: folder + "/unused"))
            let (resumedFiles, referenceFiles) = (try await check.verify(path: archive, logger: logger), try await check.verify(path: reference, logger: logger))
            XCTAssertEqual(resumedFiles.manifest.files, referenceFiles.manifest.files)
            XCTAssertEqual(resumedFiles.records, Int(total))

            // The import: killed after its first records, half-loaded; run again, it ends where an
            // import never killed ends.
            try await TestSupport.withMigratedStore { target, targetURL in
                _ = try await ContainerStore(store: target).create(container: SharingTests.container, label: "test", logger: logger)
                try await killHalfWay(["import", archive], settings(targetURL, "target"), pause: "STRATUS_TEST_IMPORT_PAUSE_AFTER_RECORDS")
                let half = try await TestSupport.count(target, "SELECT count(*) FROM records")
                XCTAssertGreaterThan(half, 0)
                XCTAssertLessThan(half, total, "the killed import loaded part of the archive")
                let finished = try await StratusExecutable.run("stratus", ["import", archive], settings: settings(targetURL, "target"))
                XCTAssertEqual(finished.status, 0, finished.output)
                XCTAssertTrue(finished.output.contains("\(total - half) records (0 expired meanwhile, \(half) loaded before)"), finished.output)
                try await TestSupport.withMigratedStore { fresh, freshURL in
                    _ = try await ContainerStore(store: fresh).create(container: SharingTests.container, label: "test", logger: logger)
                    let once = try await StratusExecutable.run("stratus", ["import", archive], settings: settings(freshURL, "fresh"))
                    XCTAssertEqual(once.status, 0, once.output)
                    let (resumedState, onceState) = (try await Self.loaded(target), try await Self.loaded(fresh))
                    XCTAssertEqual(resumedState.count, onceState.count)
                    for (what, lines) in onceState {
                        XCTAssertFalse(lines.isEmpty, what)
                        XCTAssertEqual(resumedState[what], lines, what)
                    }
                    XCTAssertEqual(onceState["records"]?.count, Int(total))
                }
            }
        }
    }

    /// What an import leaves in a database, as sorted lines per table: records without what each
    /// import makes anew (change tags, times, asset receipts), the events per record, the assets,
    /// zones, share participants, subscriptions and users.
    static func loaded(_ store: PostgresStore) async throws -> [String: [String]] {
        let queries: [String: String] = [
            "records": """
                SELECT concat_ws('|', environment, scope, owner, zone_name, record_name, record_type, created_by, parent, share, expires_at,
                                 regexp_replace(fields::text, '"(receipt|referenceChecksum)": "[^"]*"', '', 'g'))
                FROM records
                """,
            "events": """
                SELECT concat_ws('|', type, zone_key, coalesce(payload->'record'->>'recordName', payload->>'recordName'), count(*))
                FROM events GROUP BY type, zone_key, coalesce(payload->'record'->>'recordName', payload->>'recordName')
                """,
            "assets": "SELECT concat_ws('|', environment, scope, owner, zone_name, record_name, size, state) FROM assets",
            "zones": "SELECT concat_ws('|', environment, scope, owner, zone_name, deleted, change_counter) FROM zones",
            "participants": "SELECT concat_ws('|', environment, owner, zone_name, share_name, user_record_name, acceptance_status) FROM share_participants",
            "subscriptions": "SELECT concat_ws('|', environment, scope, owner, subscriber, subscription_id) FROM subscriptions",
            "users": "SELECT user_record_name FROM users",
        ]
        var lines: [String: [String]] = [:]
        for (what, query) in queries {
            lines[what] = try await store.withConnection { connection in
                var found: [String] = []
                for try await line in try await connection.query(PostgresQuery(unsafeSQL: query + " ORDER BY 1"), logger: TestSupport.logger).decode(String.self) {
                    found.append(line)
                }
                return found
            }
        }
        return lines
    }

    /// A user's own export: refused without a recent sign-in; with one, a streamed archive of their
    /// data only (their zones, their public record, their subscription and asset), which an import
    /// checks whole and accepts.
    func testAUserWhoSignedInRecentlyDownloadsTheirOwnArchive() async throws {
        try await SharingTests.withFixture { fixture, store, client in
            try await UserDeletionTests.makeData(client, fixture)
            let sessions = SessionStore(store: store)
            let expiresAt = Int64(Date().timeIntervalSince1970) + 3600
            func export(_ session: String?) async throws -> (Int, HTTPFields, [UInt8]) {
                let token = WebAuthToken(userRecordName: fixture.alice, container: fixture.container, expiresAt: expiresAt, credentialEpoch: 1, sessionID: session)
                    .signed(with: fixture.secretKey)
                let uri = "/auth/1/\(fixture.container)/account/export?ckAPIToken=\(fixture.apiToken)&ckWebAuthToken=\(token)"
                return try await client.execute(uri: uri, method: .post, headers: [:], body: ByteBuffer()) { response in
                    (Int(response.status.code), response.headers, Array(buffer: response.body))
                }
            }
            let old = try await sessions.create(container: fixture.container, userRecordName: fixture.alice, method: .password, expiresAt: expiresAt, logger: TestSupport.logger)
            _ = try await TestSupport.count(store, "UPDATE sessions SET created_at = now() - interval '2 hours' WHERE session_id = \(old) RETURNING 1::bigint")
            for refused in [old, nil] {
                let (status, _, body) = try await export(refused)
                XCTAssertEqual(status, 401)
                XCTAssertTrue(String(decoding: body, as: UTF8.self).contains("sign in again"), String(decoding: body, as: UTF8.self))
            }
            let session = try await sessions.create(container: fixture.container, userRecordName: fixture.alice, method: .password, expiresAt: expiresAt, logger: TestSupport.logger)
            let (status, headers, bytes) = try await export(session)
            XCTAssertEqual(status, 200, String(decoding: bytes.prefix(500), as: UTF8.self))
            XCTAssertEqual(headers[.contentType], "application/x-tar")
            let path = NSTemporaryDirectory() + "stratus-own-\(UUID().uuidString).tar"
            defer { try? FileManager.default.removeItem(atPath: path) }
            try Data(bytes).write(to: URL(fileURLWithPath: path))
            let verified = try await ArchiveImport(store: store, blobs: FileSystemBlobStore(directory: NSTemporaryDirectory())).verify(path: path, logger: TestSupport.logger)
            XCTAssertEqual(verified.manifest.user, fixture.alice)
            XCTAssertEqual(verified.records, 8, "n1, n2, photo, e1, d1, trip, alice-share and p-alice")
            let text = String(decoding: bytes, as: UTF8.self)
            XCTAssertTrue(text.contains("\(UserDeletionTests.doomed) public") && text.contains("\(UserDeletionTests.doomed)-subscription"))
            XCTAssertFalse(text.contains(UserDeletionTests.kept), "nothing of another user's data")
            XCTAssertEqual(try Self.files(bytes).filter { $0.path.hasPrefix("assets/") }.count, 1)
        }
    }

    /// What the stack answers, normalized to what an import keeps: per user, a full sync of each
    /// zone of their private and shared databases and their subscriptions; queries of the public
    /// database and of a private zone. Change tags, stamps, short GUIDs and asset receipts are new
    /// after an import; an asset is compared by its size, checksum and downloaded bytes.
    static func answers(_ client: any TestClientProtocol, _ fixture: SharingTests.Fixture) async throws -> [String: String] {
        var answers: [String: String] = [:]
        for (label, user) in [("alice", fixture.alice), ("bob", fixture.bob), ("carol", fixture.carol)] {
            for database in ["private", "shared"] {
                let zones = SharingTests.list(try await SharingTests.ok(client, fixture.path("zones/list", database, as: user), [:]), "zones")
                for zone in zones {
                    let zoneID = try XCTUnwrap(zone["zoneID"] as? Body)
                    var records: [Body] = []
                    var token: String?
                    // A default zone has no change tracking: its records are read by a query.
                    if zoneID["zoneName"] as? String == "_defaultZone" {
                        records = SharingTests.list(try await SharingTests.ok(
                            client, fixture.path("records/query", database, as: user), ["zoneID": zoneID, "query": ["recordType": "Note"]]), "records")
                        answers["\(label) \(database) _defaultZone"] = try await normalized(records, client)
                        continue
                    }
                    repeat {
                        var body: Body = ["zoneID": zoneID]
                        if let token { body["syncToken"] = token }
                        let page = try await SharingTests.ok(client, fixture.path("records/changes", database, as: user), body)
                        records += SharingTests.list(page, "records")
                        token = (page["moreComing"] as? Bool) == true ? page["syncToken"] as? String : nil
                    } while token != nil
                    answers["\(label) \(database) \(zoneID["zoneName"] ?? "")"] = try await normalized(records, client)
                }
            }
            let subscriptions = SharingTests.list(try await SharingTests.ok(client, fixture.path("subscriptions/list", as: user), [:]), "subscriptions")
            if !subscriptions.isEmpty { answers["\(label) subscriptions"] = try canonical(subscriptions) }
        }
        let carolsProduction = fixture.path("records/query", as: fixture.carol).replacingOccurrences(of: "/development/", with: "/production/")
        answers["query production Note"] = try await normalized(
            SharingTests.list(try await SharingTests.ok(client, carolsProduction, ["query": ["recordType": "Note"]]), "records"), client)
        answers["query public Note"] = try await normalized(SharingTests.list(try await SharingTests.ok(
            client, fixture.path("records/query", "public", as: fixture.alice), ["query": ["recordType": "Note"]]), "records"), client)
        answers["query Notes Note"] = try await normalized(SharingTests.list(try await SharingTests.ok(
            client, fixture.path("records/query", as: fixture.alice), ["zoneID": ["zoneName": "Notes"], "query": ["recordType": "Note"]]), "records"), client)
        return answers
    }

    static func normalized(_ records: [Body], _ client: any TestClientProtocol) async throws -> String {
        var kept: [Body] = []
        for var record in records.sorted(by: { ($0["recordName"] as? String ?? "") < ($1["recordName"] as? String ?? "") }) {
            for key in ["recordChangeTag", "created", "modified", "shortGUID", "url"] { record[key] = nil }
            var fields = record["fields"] as? Body ?? [:]
            for (name, field) in fields {
                guard var field = field as? Body, let asset = field["value"] as? Body, let url = asset["downloadURL"] as? String else { continue }
                let (status, _, bytes) = try await AssetTests.get(client, url)
                XCTAssertEqual(status, 200)
                field["value"] = ["size": asset["size"] ?? 0, "fileChecksum": asset["fileChecksum"] ?? "", "bytes": Data(bytes).base64EncodedString()]
                fields[name] = field
            }
            record["fields"] = fields
            kept.append(record)
        }
        return try canonical(kept)
    }

    static func canonical(_ value: Any) throws -> String {
        String(decoding: try JSONSerialization.data(withJSONObject: value, options: [.sortedKeys]), as: UTF8.self)
    }

    /// The files of an archive: path and where their bytes start.
    static func files(_ bytes: [UInt8]) throws -> [(path: String, offset: Int64)] {
        var reader = ArchiveTarReader()
        var files: [(path: String, offset: Int64)] = []
        for event in try reader.feed(bytes) {
            if case .file(let header, let offset) = event { files.append((header.path, offset)) }
        }
        try reader.finish()
        return files
    }
}
