import Foundation
import Hummingbird
import HummingbirdTesting
import PostgresNIO
import StratusAPI
import StratusBlobStore
import StratusCore
import StratusKafka
import StratusPostgres
import StratusRelay
import StratusTesting
import StratusWorkers
import XCTest

/// Deleting a user end to end (`stratus user delete`): a user with private zones, default-zone and
/// public records, an asset, a subscription, a session, a share of their own and a participation in
/// another's is deleted by the CLI, killed part-way by PID and run again; then a marker that was
/// only in their data is found in no column of any table, in no event of the log, in no message of
/// the topic (read from its start after the broker came back empty and the relay published the
/// log again, the operator's step for a memory-only broker) and in no file of the blob store,
/// while another user's marker is still found in each.
final class UserDeletionTests: XCTestCase {
    typealias Body = [String: Any]
    static let doomed = "DOOMED-7f3a9c"
    static let kept = "KEPT-19c2e4"

    func testADeletedUserLeavesNoTraceAndOthersKeepTheirs() async throws {
        let broker = try Broker()
        try broker.start()
        defer { broker.kill() }
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("stratus-deletion-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let blobs = FileSystemBlobStore(directory: directory)
        let pipeline = PipelineFixture()
        let topic = pipeline.uniqueTopic()
        try await TestSupport.withMigratedStore { store, url in
            let token = try await ContainerStore(store: store).create(container: SharingTests.container, label: "test", logger: TestSupport.logger)
            let names = try await SharingTests.createUsers(store: store, container: SharingTests.container)
            var configuration = APIConfiguration(secretKey: SecretKey.generate())
            configuration.port = 0
            let fixture = SharingTests.Fixture(apiToken: token, secretKey: configuration.secretKey, alice: names[0], bob: names[1], carol: names[2], dave: names[3])
            let (alice, bob) = (fixture.alice, fixture.bob)
            var relayConfiguration = pipeline.configurations(topic: topic, partitions: 2).relay
            relayConfiguration.verifyInterval = .seconds(1)
            var workerConfiguration = pipeline.configurations(topic: topic, partitions: 2).worker
            workerConfiguration.reconcileInterval = .seconds(2)
            workerConfiguration.reconcileGrace = .seconds(1)
            let kafka = pipeline.kafka(broker.address)
            let relay = Relay(store: store, kafka: kafka, configuration: relayConfiguration, logger: TestSupport.logger)
            let indexer = Worker(projection: IndexerProjection(), store: store, kafka: kafka, configuration: workerConfiguration, logger: TestSupport.logger)
            let dependencies = APIDependencies(store: store, readiness: [], metrics: { "" }, blobs: blobs)
            let app = buildApplication(dependencies, configuration: configuration, services: [], logger: TestSupport.logger)
            try await pipeline.runServices([relay, indexer]) {
                try await app.test(.live) { client in
                    try await Self.makeData(client, fixture)
                    _ = try await SessionStore(store: store).create(
                        container: SharingTests.container, userRecordName: alice, method: .password, expiresAt: Int64(Date().timeIntervalSince1970) + 3600,
                        logger: TestSupport.logger)
                    // Before: each marker is in the tables, the log, the index and the blob store.
                    try await TestSupport.eventually("the indexer to index both users' records") {
                        let doomed = try await Self.tablesHolding(Self.doomed, store), kept = try await Self.tablesHolding(Self.kept, store)
                        return doomed.contains("query_index.records") && kept.contains("query_index.records")
                    }
                    try await SharingTests.expectSharedZones(client, fixture, bob, 1)
                    let before = try await Self.tablesHolding(Self.doomed, store)
                    XCTAssertTrue(before.isSuperset(of: ["public.records", "public.events", "public.subscriptions"]), "\(before.sorted())")
                    XCTAssertTrue(try Self.filesHolding(Self.doomed, directory) > 0)

                    // The CLI's deletion, paused after one zone (a test setting), killed there by PID.
                    let settings = ["STRATUS_DATABASE_URL": url, "STRATUS_ASSET_STORE": "filesystem", "STRATUS_ASSET_DIR": directory]
                    let arguments = ["user", "delete", SharingTests.container, "--user", alice, "--actor", "operator"]
                    try await StratusExecutable.with(
                        "stratus", arguments, settings: settings.merging(["STRATUS_TEST_DELETION_PAUSE_AFTER_ZONES": "1"]) { _, new in new }
                    ) { child in
                        try await TestSupport.eventually("the deletion to reach its pause") {
                            try child.requireRunning()
                            return try await UserDeletionStore(store: store).progress(container: SharingTests.container, user: alice, logger: TestSupport.logger)
                                .map { $0.step == .zones && $0.zonesDeleted == 1 } ?? false
                        }
                        kill(child.processIdentifier, SIGKILL)
                        _ = await child.exited()
                    }
                    let shown = try await StratusExecutable.run("stratus", ["user", "deletion", SharingTests.container, "--user", alice], settings: settings)
                    XCTAssertEqual(shown.status, 0, shown.output)
                    XCTAssertTrue(shown.output.contains("zones: 1 zones"), shown.output)
                    // Run again: it takes the job up where it stopped and finishes it.
                    let finished = try await StratusExecutable.run("stratus", arguments, settings: settings)
                    XCTAssertEqual(finished.status, 0, finished.output)
                    XCTAssertTrue(finished.output.contains("done: 3 zones"), finished.output)
                    XCTAssertTrue(finished.output.contains("deleted \(alice)"), finished.output)
                    let again = try await StratusExecutable.run("stratus", arguments, settings: settings)
                    XCTAssertEqual(again.status, 0, "a finished deletion run again changes nothing: \(again.output)")
                    XCTAssertTrue(again.output.contains("done: 3 zones"), again.output)
                    let unknown = try await StratusExecutable.run("stratus", ["user", "delete", SharingTests.container, "--user", "_nobody"], settings: settings)
                    XCTAssertNotEqual(unknown.status, 0, unknown.output)
                    XCTAssertTrue(unknown.output.contains("has no user '_nobody'"), unknown.output)
                    let audited = try await AuditLog(store: store).entries(AuditLog.Filter(), limit: 10, logger: TestSupport.logger)
                    XCTAssertEqual(
                        audited.filter { $0.action == AuditAction.userDelete.rawValue }.map(\.subject), [alice, alice], "each operator's deletion names the user")

                    // Others: bob keeps his zone, records and asset; alice's share ended (her zone is gone
                    // from his shared database) and she is gone from his share's participants.
                    try await TestSupport.eventually("the indexer to apply the deletion") {
                        try await !Self.tablesHolding(Self.doomed, store).contains("query_index.records")
                    }
                    let bobsShare = try await SharingTests.ok(client, fixture.path("records/lookup", as: bob), [
                        "zoneID": ["zoneName": "BobTrip"], "records": [["recordName": "bob-share"]],
                    ])
                    let participants = SharingTests.list(SharingTests.list(bobsShare, "records").first ?? [:], "participants")
                    XCTAssertFalse(participants.isEmpty, "\(bobsShare)")
                    XCTAssertNil(participants.first { (($0["userIdentity"] as? Body)?["lookupInfo"] as? Body)?["userRecordName"] as? String == alice })
                    try await SharingTests.expectSharedZones(client, fixture, bob, 0)
                    let bobsZones = SharingTests.list(try await SharingTests.ok(client, fixture.path("zones/list", as: bob), [:]), "zones")
                    XCTAssertEqual(bobsZones.compactMap { ($0["zoneID"] as? Body)?["zoneName"] as? String }.sorted(), ["BobTrip", "_defaultZone"])
                }
                // The broker comes back empty (a memory-only broker's restart, the operator's step):
                // the relay publishes the redacted log again, which a consumer reads from the start.
                broker.kill()
                try broker.start()
                let lastID = try await EventLog(store: store).lastID(logger: TestSupport.logger)
                let consumer = try KafkaConsumer(configuration: kafka, groupID: "deletion-check-\(topic)", topics: [topic], logger: TestSupport.logger)
                var messages: [String: String] = [:]
                try await TestSupport.eventually(timeout: .seconds(90), "the relay to publish the whole log again") {
                    for message in try await consumer.poll(maxMessages: 500, timeout: .milliseconds(500)) {
                        let text = String(decoding: message.value, as: UTF8.self)
                        if let envelope = try? EventCoding.decoder.decode(EventEnvelope.self, from: Data(message.value)) { messages["\(envelope.id)"] = text }
                    }
                    return (1...lastID).allSatisfy { messages["\($0)"] != nil }
                }
                await consumer.close()
                XCTAssertNil(messages.values.first { $0.contains(Self.doomed) }, "the topic holds no message with the deleted user's data")
                XCTAssertNotNil(messages.values.first { $0.contains(Self.kept) }, "the topic still holds the other user's")
            }
            let after = try await Self.tablesHolding(Self.doomed, store)
            XCTAssertEqual(after, [], "no table holds the deleted user's data")
            let kept = try await Self.tablesHolding(Self.kept, store)
            XCTAssertTrue(kept.isSuperset(of: ["public.records", "public.events", "query_index.records"]), "\(kept.sorted())")
            XCTAssertEqual(try Self.filesHolding(Self.doomed, directory), 0, "no blob holds the deleted user's bytes")
            XCTAssertGreaterThan(try Self.filesHolding(Self.kept, directory), 0, "the other user's asset stays")
        }
    }

    /// A container whose heir of public records is set (`stratus container set
    /// --public-records-heir`, shown by `container show`): the deleted user's public record is
    /// handed to the heir instead of deleted. Afterwards the deleted user's marker is only in that
    /// record's contents (its row, its events, its index row: the app's data, now the heir's);
    /// nothing of the public database names the deleted user; the heir may change the record, and
    /// another user sees it unchanged (the same fields and change tag).
    func testAContainersHeirTakesADeletedUsersPublicRecords() async throws {
        try await Self.withLiveAPI { fixture, store, settings, client in
            let logger = TestSupport.logger
            let (alice, bob, carol) = (fixture.alice, fixture.bob, fixture.carol)
            let directory = settings["STRATUS_ASSET_DIR"] ?? ""
            let follower = LogFollower([IndexerProjection()], store: store)
            // The heir, set and shown by the CLI; a user the directory does not hold is refused.
            let refused = try await StratusExecutable.run(
                "stratus", ["container", "set", SharingTests.container, "--public-records-heir", "_nobody"], settings: settings)
            XCTAssertNotEqual(refused.status, 0, refused.output)
            XCTAssertTrue(refused.output.contains("has no user '_nobody'"), refused.output)
            let set = try await StratusExecutable.run(
                "stratus", ["container", "set", SharingTests.container, "--public-records-heir", carol], settings: settings)
            XCTAssertEqual(set.status, 0, set.output)
            let shown = try await StratusExecutable.run("stratus", ["container", "show", SharingTests.container], settings: settings)
            XCTAssertTrue(shown.output.contains("public-records-heir: \(carol)"), shown.output)

            try await Self.makeData(client, fixture)
            func lookup(_ user: String) async throws -> Body {
                let answer = try await SharingTests.ok(client, fixture.path("records/lookup", "public", as: user), ["records": [["recordName": "p-alice"]]])
                return try XCTUnwrap(SharingTests.list(answer, "records").first)
            }
            let before = try await lookup(bob)
            try await follower.applyAll()

            _ = try await UserDeletionStore(store: store).start(container: SharingTests.container, user: alice, requestedBy: "operator", logger: logger)
            let finished = try await UserDeletionRunner(store: store, blobs: FileSystemBlobStore(directory: directory), logger: logger).runOnce()
            XCTAssertEqual(finished, 1)
            let progress = try await UserDeletionStore(store: store).progress(container: SharingTests.container, user: alice, logger: logger)
            XCTAssertEqual(progress?.step, .done)
            XCTAssertEqual(progress?.recordsHandedOver, 1)
            try await follower.applyAll()

            // The marker: only in the handed-over record's contents (the log's partitions,
            // `events_*`, are listed beside it).
            let holding = try await Self.tablesHolding(Self.doomed, store).filter { !$0.hasPrefix("public.events_") }
            XCTAssertEqual(holding, ["public.records", "public.events", "query_index.records"], "\(holding.sorted())")
            let elsewhere = try await TestSupport.count(store, """
                SELECT (SELECT count(*) FROM records WHERE fields::text LIKE \("%\(Self.doomed)%") AND record_name <> 'p-alice')
                     + (SELECT count(*) FROM events WHERE payload::text LIKE \("%\(Self.doomed)%")
                          AND payload->'record'->>'recordName' IS DISTINCT FROM 'p-alice')
                     + (SELECT count(*) FROM query_index.records WHERE record::text LIKE \("%\(Self.doomed)%") AND record_name <> 'p-alice')
                """)
            XCTAssertEqual(elsewhere, 0, "the deleted user's data is in no other record, event or index row")
            // Nothing of the public database names the deleted user; the record names the heir.
            let naming = try await TestSupport.count(store, """
                SELECT (SELECT count(*) FROM records WHERE scope = 'public' AND (created_by = \(alice) OR modified_by = \(alice) OR fields::text LIKE \("%\(alice)%")))
                     + (SELECT count(*) FROM events WHERE split_part(zone_key, '/', 3) = 'public'
                          AND (payload::text LIKE \("%\(alice)%") OR causation::text LIKE \("%\(alice)%")))
                     + (SELECT count(*) FROM query_index.records WHERE scope = 'public' AND record::text LIKE \("%\(alice)%"))
                """)
            XCTAssertEqual(naming, 0, "the public database names the deleted user nowhere")
            let heirs = try await TestSupport.count(store, """
                SELECT count(*) FROM records WHERE scope = 'public' AND record_name = 'p-alice' AND created_by = \(carol) AND modified_by = \(carol)
                """)
            XCTAssertEqual(heirs, 1)
            let carolsBytes = try await TestSupport.count(store, "SELECT coalesce(sum(bytes), 0)::int8 FROM storage_usage WHERE owner = \(carol)")
            XCTAssertGreaterThan(carolsBytes, 0, "the record's bytes count against the heir")
            XCTAssertEqual(try Self.filesHolding(Self.doomed, directory), 0, "the deleted user's own asset is gone")

            // Another user sees the record unchanged but for its creator; the heir may change it.
            let after = try await lookup(bob)
            func title(_ record: Body) -> String? { ((record["fields"] as? Body)?["title"] as? Body)?["value"] as? String }
            XCTAssertEqual(title(after), "\(Self.doomed) public")
            XCTAssertEqual(title(after), title(before))
            XCTAssertEqual(after["recordChangeTag"] as? String, before["recordChangeTag"] as? String)
            XCTAssertEqual((after["created"] as? Body)?["userRecordName"] as? String, carol)
            let changed = try await SharingTests.ok(client, fixture.path("records/modify", "public", as: carol), ["operations": [[
                "operationType": "update",
                "record": ["recordName": "p-alice", "recordType": "Note", "recordChangeTag": after["recordChangeTag"] ?? "", "fields": ["title": ["value": "carol's now"]]],
            ]]])
            XCTAssertNil(SharingTests.list(changed, "records").first?["serverErrorCode"], "\(changed)")
            let bobs = try await SharingTests.ok(client, fixture.path("records/modify", "public", as: bob), ["operations": [[
                "operationType": "forceUpdate", "record": ["recordName": "p-alice", "recordType": "Note", "fields": ["title": ["value": "bob's"]]],
            ]]])
            XCTAssertNotNil(SharingTests.list(bobs, "records").first?["serverErrorCode"], "another user still may not: \(bobs)")
        }
    }

    /// A migrated database with the container and alice, bob, carol and dave in its directory
    /// (`prepare` runs first, on the database as migrated), and the API served live over it with
    /// asset bytes in a folder of its own. `body` gets the fixture, the store, the settings the
    /// `stratus` CLI needs for the same database and folder, and a client.
    static func withLiveAPI(
        prepare: @Sendable (PostgresStore) async throws -> Void = { _ in },
        _ body: @Sendable (SharingTests.Fixture, PostgresStore, [String: String], any TestClientProtocol) async throws -> Void
    ) async throws {
        let directory = NSTemporaryDirectory() + "stratus-live-\(UUID().uuidString)"
        defer { try? FileManager.default.removeItem(atPath: directory) }
        try await TestSupport.withMigratedStore { store, url in
            try await prepare(store)
            let token = try await ContainerStore(store: store).create(container: SharingTests.container, label: "test", logger: TestSupport.logger)
            let names = try await SharingTests.createUsers(store: store, container: SharingTests.container)
            var configuration = APIConfiguration(secretKey: SecretKey.generate())
            configuration.port = 0
            let fixture = SharingTests.Fixture(apiToken: token, secretKey: configuration.secretKey, alice: names[0], bob: names[1], carol: names[2], dave: names[3])
            let dependencies = APIDependencies(store: store, readiness: [], metrics: { "" }, blobs: FileSystemBlobStore(directory: directory))
            let settings = ["STRATUS_DATABASE_URL": url, "STRATUS_ASSET_STORE": "filesystem", "STRATUS_ASSET_DIR": directory]
            try await buildApplication(dependencies, configuration: configuration, services: [], logger: TestSupport.logger).test(.live) { client in
                try await body(fixture, store, settings, client)
            }
        }
    }

    /// A user's own request: refused without a recent sign-in; with one, answered once they are
    /// signed out everywhere, and stratus-gc's runner deletes the rest.
    func testAUserWhoSignedInRecentlyDeletesTheirOwnAccount() async throws {
        try await SharingTests.withFixture { fixture, store, client in
            let sessions = SessionStore(store: store)
            let expiresAt = Int64(Date().timeIntervalSince1970) + 3600
            func token(_ user: String, session: String?) -> String {
                WebAuthToken(userRecordName: user, container: fixture.container, expiresAt: expiresAt, credentialEpoch: 1, sessionID: session)
                    .signed(with: fixture.secretKey)
            }
            func delete(_ token: String) async throws -> (Int, Body) {
                try await SharingTests.send(
                    client, "/auth/1/\(fixture.container)/account/delete?ckAPIToken=\(fixture.apiToken)&ckWebAuthToken=\(token)", [:] as Body)
            }
            let (carol, dave) = (fixture.carol, fixture.dave)
            // A sign-in of two hours ago, or a token of no session, is not enough.
            let old = try await sessions.create(container: fixture.container, userRecordName: carol, method: .password, expiresAt: expiresAt, logger: TestSupport.logger)
            _ = try await TestSupport.count(store, "UPDATE sessions SET created_at = now() - interval '2 hours' WHERE session_id = \(old) RETURNING 1::bigint")
            for refused in [token(carol, session: old), token(carol, session: nil)] {
                let (status, answer) = try await delete(refused)
                XCTAssertEqual(status, 401, "\(answer)")
                XCTAssertEqual(answer["serverErrorCode"] as? String, "AUTHENTICATION_FAILED")
                XCTAssertTrue((answer["reason"] as? String)?.contains("sign in again") ?? false, "\(answer)")
            }
            let (anonymous, _) = try await SharingTests.send(client, "/auth/1/\(fixture.container)/account/delete?ckAPIToken=\(fixture.apiToken)", [:] as Body)
            XCTAssertEqual(anonymous, 401)

            // Dave signed in just now, and has a zone with a record.
            let session = try await sessions.create(container: fixture.container, userRecordName: dave, method: .password, expiresAt: expiresAt, logger: TestSupport.logger)
            let daves = token(dave, session: session)
            let path = "/database/1/\(fixture.container)/development/private/zones/modify?ckAPIToken=\(fixture.apiToken)&ckWebAuthToken=\(daves)"
            _ = try await SharingTests.ok(client, path, ["operations": [["operationType": "create", "zone": ["zoneID": ["zoneName": "Mine"]]]]])
            let (status, answer) = try await delete(daves)
            XCTAssertEqual(status, 200, "\(answer)")
            XCTAssertEqual(answer["userRecordName"] as? String, dave)
            XCTAssertEqual(answer["step"] as? String, UserDeletion.Step.zones.rawValue, "answered once signed out")
            let (after, _) = try await SharingTests.send(client, path, ["operations": [] as [Body]])
            XCTAssertEqual(after, 401, "every token of the user is refused from the answer on")

            let runner = UserDeletionRunner(store: store, blobs: FileSystemBlobStore(directory: NSTemporaryDirectory() + "stratus-none-\(UUID().uuidString)"), logger: TestSupport.logger)
            let finished = try await runner.runOnce()
            XCTAssertEqual(finished, 1)
            let progress = try await UserDeletionStore(store: store).progress(container: fixture.container, user: dave, logger: TestSupport.logger)
            XCTAssertEqual(progress?.step, .done)
            XCTAssertEqual(progress?.zonesDeleted, 1)
            let zonesLeft = try await TestSupport.count(store, "SELECT count(*) FROM zones WHERE owner = \(dave)")
            let daveLeft = try await TestSupport.count(store, "SELECT count(*) FROM users WHERE user_record_name = \(dave)")
            let carolLeft = try await TestSupport.count(store, "SELECT count(*) FROM users WHERE user_record_name = \(carol)")
            XCTAssertEqual([zonesLeft, daveLeft, carolLeft], [0, 0, 1], "the user is gone, with their zone; the refused user stays")
            let again = try await runner.runOnce()
            XCTAssertEqual(again, 0, "nothing is left to run")
        }
    }

    /// Alice (to be deleted): three zones (one of them shared with bob, who accepts), records in
    /// them, in her default zone and in the public database, an asset, a subscription, and a
    /// participation in bob's share. Bob: a zone shared with alice, a public record, an asset.
    static func makeData(_ client: any TestClientProtocol, _ fixture: SharingTests.Fixture) async throws {
        let (alice, bob) = (fixture.alice, fixture.bob)
        func zones(_ user: String, _ names: [String]) async throws {
            _ = try await SharingTests.ok(client, fixture.path("zones/modify", as: user), [
                "operations": names.map { ["operationType": "create", "zone": ["zoneID": ["zoneName": $0]]] },
            ])
        }
        func save(_ user: String, _ database: String = "private", zone: String?, _ records: [Body]) async throws -> [Body] {
            var body: Body = ["operations": records.map { ["operationType": "create", "record": $0] }]
            if let zone { body["zoneID"] = ["zoneName": zone] }
            let answer = try await SharingTests.ok(client, fixture.path("records/modify", database, as: user), body)
            let saved = SharingTests.list(answer, "records")
            XCTAssertNil(saved.first { $0["serverErrorCode"] != nil }, "\(answer)")
            return saved
        }
        func note(_ name: String, _ text: String) -> Body { ["recordName": name, "recordType": "Note", "fields": ["title": ["value": text]]] }
        func upload(_ user: String, zone: String, record: String, _ text: String) async throws -> Body {
            let answer = try await SharingTests.ok(client, fixture.path("assets/upload", as: user), [
                "zoneID": ["zoneName": zone], "tokens": [["recordType": "Photo", "recordName": record, "fieldName": "image"]],
            ])
            let url = try XCTUnwrap(URL(string: try XCTUnwrap((answer["tokens"] as? [Body])?.first?["url"] as? String)))
            let (status, uploaded) = try await AssetTests.send(client, url.path, Array("bytes of \(text)".utf8))
            XCTAssertEqual(status, 200, "\(uploaded)")
            return try XCTUnwrap(uploaded["singleFile"] as? Body)
        }
        try await zones(alice, ["Trip", "Notes", "Extra"])
        try await zones(bob, ["BobTrip"])
        _ = try await save(alice, zone: "Notes", [note("n1", "\(doomed) notes"), note("n2", "\(doomed) more")])
        _ = try await save(alice, zone: "Extra", [note("e1", "\(doomed) extra")])
        _ = try await save(alice, zone: nil, [note("d1", "\(doomed) default")])
        _ = try await save(alice, "public", zone: nil, [note("p-alice", "\(doomed) public")])
        _ = try await save(bob, "public", zone: nil, [note("p-bob", "\(kept) public")])
        // A public record alice deleted herself: its saved events hold her data too.
        _ = try await save(alice, "public", zone: nil, [note("p-gone", "\(doomed) public, deleted by herself")])
        let deleted = try await SharingTests.ok(client, fixture.path("records/modify", "public", as: alice), [
            "operations": [["operationType": "forceDelete", "record": ["recordName": "p-gone"]]],
        ])
        XCTAssertEqual(SharingTests.list(deleted, "records").first?["deleted"] as? Bool, true, "\(deleted)")
        let photo = try await upload(alice, zone: "Notes", record: "photo", doomed)
        _ = try await save(alice, zone: "Notes", [["recordName": "photo", "recordType": "Photo", "fields": ["image": ["value": photo]]]])
        let bobsPhoto = try await upload(bob, zone: "BobTrip", record: "bob-photo", kept)
        _ = try await save(bob, zone: "BobTrip", [["recordName": "bob-photo", "recordType": "Photo", "fields": ["image": ["value": bobsPhoto]]]])
        // Alice's share of Trip with bob, bob's share of BobTrip with alice; each accepts the other's.
        let aliceShare = try await save(alice, zone: "Trip", [
            ["recordName": "trip", "recordType": "Trip", "fields": ["title": ["value": "\(doomed) trip"]], "share": ["recordName": "alice-share"]],
            ["recordName": "alice-share", "recordType": "cloudkit.share", "publicPermission": "NONE",
             "participants": [SharingTests.participant(bob, "READ_WRITE")]],
        ])
        let bobShare = try await save(bob, zone: "BobTrip", [
            ["recordName": "bob-trip", "recordType": "Trip", "fields": ["title": ["value": "\(kept) trip"]],
             "share": ["recordName": "bob-share"]],
            ["recordName": "bob-share", "recordType": "cloudkit.share", "publicPermission": "NONE",
             "participants": [SharingTests.participant(alice, "READ_WRITE")]],
        ])
        for (user, share) in [(bob, aliceShare[1]), (alice, bobShare[1])] {
            let accepted = SharingTests.list(try await SharingTests.ok(client, fixture.path("records/accept", "public", as: user), [
                "shortGUIDs": [["value": try XCTUnwrap(share["shortGUID"] as? String)]],
            ]), "results")
            XCTAssertEqual(accepted.first?["participantStatus"] as? String, "ACCEPTED", "\(accepted)")
        }
        _ = try await SharingTests.ok(client, fixture.path("subscriptions/modify", as: alice), ["operations": [[
            "operationType": "create",
            "subscription": ["subscriptionID": "\(doomed)-subscription", "subscriptionType": "query", "firesOn": ["create"],
                             "query": ["recordType": "Note", "filterBy": []], "zoneID": ["zoneName": "Notes"]],
        ]]])
    }

    /// The tables (`schema.table`) with a row whose text, or a binary column, holds `marker`.
    static func tablesHolding(_ marker: String, _ store: PostgresStore) async throws -> Set<String> {
        let tables: [(String, String, [String])] = try await store.withConnection { connection in
            let rows = try await connection.query("""
                SELECT t.table_schema, t.table_name,
                       coalesce(array_agg(c.column_name::text) FILTER (WHERE c.data_type = 'bytea'), ARRAY[]::text[])
                FROM information_schema.tables t
                LEFT JOIN information_schema.columns c ON c.table_schema = t.table_schema AND c.table_name = t.table_name
                WHERE t.table_type = 'BASE TABLE' AND t.table_schema NOT IN ('pg_catalog', 'information_schema')
                GROUP BY t.table_schema, t.table_name
                """, logger: TestSupport.logger)
            var tables: [(String, String, [String])] = []
            for try await row in rows.decode((String, String, [String]).self) { tables.append(row) }
            return tables
        }
        var holding: Set<String> = []
        for (schema, table, binary) in tables {
            let binaryMatch = binary.map { "position(convert_to($1, 'UTF8') in t.\"\($0)\") > 0" }
            let condition = (["t::text LIKE '%' || $1 || '%'"] + binaryMatch).joined(separator: " OR ")
            var binds = PostgresBindings()
            binds.append(marker)
            let count = try await TestSupport.count(store, PostgresQuery(
                unsafeSQL: "SELECT count(*) FROM \"\(schema)\".\"\(table)\" t WHERE \(condition)", binds: binds))
            if count > 0 { holding.insert("\(schema).\(table)") }
        }
        return holding
    }

    /// How many files under `directory` hold `marker`.
    static func filesHolding(_ marker: String, _ directory: String) throws -> Int {
        guard let files = FileManager.default.enumerator(atPath: directory) else { return 0 }
        var count = 0
        for case let file as String in files {
            guard let data = FileManager.default.contents(atPath: directory + "/" + file) else { continue }
            if data.range(of: Data(marker.utf8)) != nil { count += 1 }
        }
        return count
    }
}
