import Foundation
import HummingbirdTesting
import PostgresNIO
@testable import StratusAPI
import StratusBlobStore
import StratusCore
import StratusPostgres
import StratusTesting
import StratusWorkers
import XCTest

/// Deleting a container (`ContainerDeletion`, docs/operations.md "Deleting a container"): two
/// containers with users, zones, records, public records, shares, assets and subscriptions; one is
/// deleted by the CLI, killed part-way by PID and run again. Its requests are refused from the start,
/// no table holds a row naming it afterwards (found from the catalog), nor the blob store its bytes;
/// the other container keeps everything; the name may be created again, fresh.
final class ContainerDeletionTests: XCTestCase {
    typealias Body = [String: Any]
    static let doomed = "iCloud.com.example.doomedtenant"
    static let kept = "iCloud.com.example.keptcontainer"

    /// One live API over a fresh database, with both containers and their users' data made.
    static func withTwoContainers(
        _ body: @Sendable (PostgresStore, [String: String], any TestClientProtocol, SharingTests.Fixture, SharingTests.Fixture, String) async throws -> Void
    ) async throws {
        let directory = NSTemporaryDirectory() + "stratus-container-deletion-\(UUID().uuidString)"
        defer { try? FileManager.default.removeItem(atPath: directory) }
        try await TestSupport.withMigratedStore { store, url in
            var configuration = APIConfiguration(secretKey: SecretKey.generate())
            configuration.port = 0
            var fixtures: [SharingTests.Fixture] = []
            for container in [doomed, kept] {
                let token = try await ContainerStore(store: store).create(container: container, label: "test", logger: TestSupport.logger)
                let names = try await SharingTests.createUsers(store: store, container: container)
                var fixture = SharingTests.Fixture(
                    apiToken: token, secretKey: configuration.secretKey, alice: names[0], bob: names[1], carol: names[2], dave: names[3])
                fixture.container = container
                fixtures.append(fixture)
            }
            let made = fixtures
            let dependencies = APIDependencies(store: store, readiness: [], metrics: { "" }, blobs: FileSystemBlobStore(directory: directory))
            let settings = ["STRATUS_DATABASE_URL": url, "STRATUS_ASSET_STORE": "filesystem", "STRATUS_ASSET_DIR": directory]
            try await buildApplication(dependencies, configuration: configuration, services: [], logger: TestSupport.logger).test(.live) { client in
                for fixture in made {
                    try await UserDeletionTests.makeData(client, fixture)
                    // A record and a zone of a user outside the directory: found by the catalog's sweep.
                    let stranger = WebAuthToken(userRecordName: "_stranger", container: fixture.container, expiresAt: Int64(Date().timeIntervalSince1970) + 3600)
                    let path = "/database/1/\(fixture.container)/development/private/zones/modify?ckAPIToken=\(fixture.apiToken)"
                        + "&ckWebAuthToken=\(stranger.signed(with: fixture.secretKey))"
                    _ = try await SharingTests.ok(client, path, [
                        "operations": [["operationType": "create", "zone": ["zoneID": ["zoneName": "Stranger"]]]],
                    ])
                }
                try await body(store, settings, client, made[0], made[1], directory)
            }
        }
    }

    /// The status and error code of a request to a container.
    static func zonesList(_ client: any TestClientProtocol, _ fixture: SharingTests.Fixture) async throws -> (Int, String?, String) {
        let (status, body) = try await SharingTests.send(client, fixture.path("zones/list", as: fixture.bob), [:])
        return (status, body["serverErrorCode"] as? String, body["reason"] as? String ?? "")
    }

    /// The blob files holding an asset of `container`.
    static func blobs(of container: String, _ store: PostgresStore, _ directory: String) async throws -> Int {
        let ids: [UUID] = try await store.withConnection { connection in
            let rows = try await connection.query(
                "SELECT coalesce(blob_id, asset_id) FROM assets WHERE container = \(container)", logger: TestSupport.logger)
            var ids: [UUID] = []
            for try await id in rows.decode(UUID.self) { ids.append(id) }
            return ids
        }
        let names = Set(ids.map { $0.uuidString.lowercased() })
        guard let files = FileManager.default.enumerator(atPath: directory) else { return 0 }
        return files.compactMap { $0 as? String }.filter { file in names.contains { file.lowercased().contains($0) } }.count
    }

    func testADeletedContainerLeavesNoRowAndTheOtherKeepsEverything() async throws {
        try await Self.withTwoContainers { store, settings, client, doomed, kept, directory in
            let before = try await UserDeletionTests.tablesHolding(Self.doomed, store)
            XCTAssertTrue(before.isSuperset(of: ["public.records", "public.zones", "public.events", "public.users", "public.assets", "public.container_usage"]),
                          "\(before.sorted())")
            let keptBefore = try await UserDeletionTests.tablesHolding(Self.kept, store)
            let doomedBlobs = try await Self.blobs(of: Self.doomed, store, directory)
            XCTAssertGreaterThan(doomedBlobs, 0)
            let keptBlobs = try await Self.blobs(of: Self.kept, store, directory)
            XCTAssertGreaterThan(keptBlobs, 0)
            let files = FileManager.default.enumerator(atPath: directory)?.allObjects.count ?? 0

            // Without a terminal and without --yes, nothing happens.
            let unconfirmed = try await StratusExecutable.run("stratus", ["container", "delete", Self.doomed], settings: settings)
            XCTAssertNotEqual(unconfirmed.status, 0, unconfirmed.output)
            XCTAssertTrue(unconfirmed.output.contains("--yes"), unconfirmed.output)
            let (serving, _, _) = try await Self.zonesList(client, doomed)
            XCTAssertEqual(serving, 200)

            // The CLI's deletion, paused after one user (a test setting), killed there by PID.
            let arguments = ["container", "delete", Self.doomed, "--yes", "--actor", "operator"]
            try await StratusExecutable.with(
                "stratus", arguments, settings: settings.merging(["STRATUS_TEST_CONTAINER_DELETION_PAUSE_AFTER_USERS": "1"]) { _, new in new }
            ) { child in
                try await TestSupport.eventually("the deletion to reach its pause") {
                    try child.requireRunning()
                    return try await ContainerDeletionStore(store: store).progress(container: Self.doomed, logger: TestSupport.logger)
                        .map { $0.step == .users && $0.usersDeleted == 1 } ?? false
                }
                // Refused while it runs, with a clear error; the other container serves.
                let (status, code, reason) = try await Self.zonesList(client, doomed)
                XCTAssertEqual(status, 403)
                XCTAssertEqual(code, "ACCESS_DENIED")
                XCTAssertTrue(reason.contains("being deleted"), reason)
                let (other, _, _) = try await Self.zonesList(client, kept)
                XCTAssertEqual(other, 200)
                kill(child.processIdentifier, SIGKILL)
                _ = await child.exited()
            }
            let shown = try await StratusExecutable.run("stratus", ["container", "deletion", Self.doomed], settings: settings)
            XCTAssertEqual(shown.status, 0, shown.output)
            XCTAssertTrue(shown.output.contains("step users, users 1"), shown.output)
            let busy = try await StratusExecutable.run("stratus", ["container", "create", Self.doomed], settings: settings)
            XCTAssertNotEqual(busy.status, 0, "a container being deleted is not created again: \(busy.output)")

            // Run again: it takes the job up where it stopped and finishes it.
            let finished = try await StratusExecutable.run("stratus", arguments, settings: settings)
            XCTAssertEqual(finished.status, 0, finished.output)
            XCTAssertTrue(finished.output.contains("step done, users 4"), finished.output)
            XCTAssertTrue(finished.output.contains("deleted \(Self.doomed)"), finished.output)
            let (after, _, _) = try await Self.zonesList(client, doomed)
            XCTAssertTrue([401, 403].contains(after), "requests are refused after: \(after)")

            let left = try await UserDeletionTests.tablesHolding(Self.doomed, store)
            XCTAssertEqual(left, ["public.audit_log", "public.container_deletions"], "only the audit log and the job's row name it")
            XCTAssertEqual(FileManager.default.enumerator(atPath: directory)?.allObjects.count ?? 0, files - doomedBlobs, "its blobs are gone")
            let keptAfter = try await UserDeletionTests.tablesHolding(Self.kept, store)
            XCTAssertEqual(keptAfter.subtracting(["public.audit_log"]), keptBefore.subtracting(["public.audit_log"]), "the other container keeps its rows")
            let keptBlobsAfter = try await Self.blobs(of: Self.kept, store, directory)
            XCTAssertEqual(keptBlobsAfter, keptBlobs)
            let (other, _, _) = try await Self.zonesList(client, kept)
            XCTAssertEqual(other, 200)
            let audited = try await AuditLog(store: store).entries(AuditLog.Filter(action: AuditAction.containerDelete.rawValue), limit: 10, logger: TestSupport.logger)
            XCTAssertEqual(audited.map(\.container), [Self.doomed])

            // The name is created again, fresh.
            let created = try await StratusExecutable.run("stratus", ["container", "create", Self.doomed], settings: settings)
            XCTAssertEqual(created.status, 0, created.output)
            let show = try await StratusExecutable.run("stratus", ["container", "show", Self.doomed], settings: settings)
            for line in ["state: serving", "users: 0", "zones: 0", "records: 0", "record-bytes: 0"] {
                XCTAssertTrue(show.output.contains(line), "\(line): \(show.output)")
            }
            let gone = try await ContainerDeletionStore(store: store).progress(container: Self.doomed, logger: TestSupport.logger)
            XCTAssertNil(gone, "a new container of the name has no deletion")
        }
    }

    /// A deletion started by another process is heard by two caching API processes within a
    /// second: every request is refused with the deletion's error, and a new token is refused too.
    func testADeletionIsHeardByEveryAPIProcessWithinASecond() async throws {
        try await TestSupport.withMigratedStore { store, url in
            let container = ContainerTenancyTests.container
            let apiToken = try await ContainerStore(store: store).create(container: container, label: "test", logger: TestSupport.logger)
            let query = AuthTests.path("records/query") + "?ckAPIToken=\(apiToken)"
            let queryBody = try AuthTests.json(["query": ["recordType": "Note"]])
            try await ContainerTenancyTests.withTwoCachingAPIs(store: store, url: url, secretKey: SecretKey.generate()) { other, first, second in
                for client in [first, second] {
                    let (status, answer) = try await AuthTests.send(client, query, body: queryBody)
                    XCTAssertEqual(status, 200, "served (and cached) before the deletion: \(answer)")
                }
                let started = try await ContainerDeletionStore(store: other).start(container: container, requestedBy: "test", logger: TestSupport.logger)
                XCTAssertEqual(started.step, .users)
                for (name, client) in [("first", first), ("second", second)] {
                    try await TestSupport.eventually(timeout: .seconds(1), "the \(name) API process to refuse the container being deleted") {
                        try await AuthTests.send(client, query, body: queryBody).0 != 200
                    }
                    let (status, answer) = try await AuthTests.send(client, query, body: queryBody)
                    XCTAssertEqual(status, 403, "\(answer)")
                    XCTAssertEqual(answer["serverErrorCode"] as? String, "ACCESS_DENIED", "\(answer)")
                    XCTAssertTrue((answer["reason"] as? String ?? "").contains("being deleted"), "\(answer)")
                }
                do {
                    _ = try await ContainerStore(store: other).create(container: container, label: "again", logger: TestSupport.logger)
                    XCTFail("a container being deleted gets no new token")
                } catch let error as StratusError {
                    XCTAssertEqual(error.code, .exists)
                }
            }
        }
    }

    /// The console's form: a wrong confirmation changes nothing; the right one refuses the
    /// container's requests at once, the page shows the deletion, and stratus-gc's runner finishes it.
    func testTheConsoleStartsADeletionThatTheRunnerFinishes() async throws {
        try await Self.withTwoContainers { store, _, client, doomed, kept, directory in
            let browser = ConsoleAuthTests.Browser(client)
            let csrf = try await ConsoleDataTests.signIn(browser, store: store)
            let page = try await browser.request("/console/containers/\(Self.doomed)")
            XCTAssertTrue(page.html.contains("id=\"delete-container\""), page.html)
            let wrong = try await browser.request(
                "/console/tenancy/delete", method: .post, form: ["csrf": csrf, "container": Self.doomed, "confirm": Self.kept])
            XCTAssertEqual(wrong.status, 400, wrong.html)
            let (serving, _, _) = try await Self.zonesList(client, doomed)
            XCTAssertEqual(serving, 200, "a wrong confirmation changes nothing")

            let started = try await browser.request(
                "/console/tenancy/delete", method: .post, form: ["csrf": csrf, "container": Self.doomed, "confirm": Self.doomed])
            XCTAssertTrue([200, 303].contains(started.status), started.html)
            let (status, code, _) = try await Self.zonesList(client, doomed)
            XCTAssertEqual(status, 403)
            XCTAssertEqual(code, "ACCESS_DENIED")
            let deleting = try await browser.request("/console/containers/\(Self.doomed)")
            XCTAssertTrue(deleting.html.contains("id=\"container-deletion\""), deleting.html)
            XCTAssertFalse(deleting.html.contains("id=\"delete-container\""), deleting.html)
            let audited = try await AuditLog(store: store).entries(AuditLog.Filter(action: AuditAction.containerDelete.rawValue), limit: 10, logger: TestSupport.logger)
            XCTAssertEqual(audited.map(\.channel), ["console"])

            let runner = UserDeletionRunner(store: store, blobs: FileSystemBlobStore(directory: directory), logger: TestSupport.logger)
            let finished = try await runner.runOnce()
            XCTAssertGreaterThanOrEqual(finished, 1)
            let progress = try await ContainerDeletionStore(store: store).progress(container: Self.doomed, logger: TestSupport.logger)
            XCTAssertEqual(progress?.step, .done)
            let left = try await UserDeletionTests.tablesHolding(Self.doomed, store)
            XCTAssertEqual(left, ["public.audit_log", "public.container_deletions"])
            let (other, _, _) = try await Self.zonesList(client, kept)
            XCTAssertEqual(other, 200)
        }
    }
}
