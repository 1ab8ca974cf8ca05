import Crypto
import Foundation
import HummingbirdTesting
import NIOHTTP1
import StratusCore
@testable import StratusPostgres
import StratusPush
import StratusPushTestSupport
import StratusTesting
import StratusWorkers
import XCTest

/// `stratus webhook create|list|delete` and `stratus apns set`, run as an operator runs them (the
/// built executable, configured by environment variables), and a webhook on a loopback http URL
/// called by the built stratus-subscriptions only when STRATUS_WEBHOOK_ALLOW_LOOPBACK allows it.
final class PushAdminCLITests: XCTestCase {
    static let container = "iCloud.com.example.notes"

    /// A migrated database with the container, and the environment the CLI needs to reach it.
    func withDatabase(_ body: @Sendable (PostgresStore, [String: String]) async throws -> Void) async throws {
        try await Self.withContainerDatabase(body)
    }

    /// The same, for every CLI test class.
    static func withContainerDatabase(_ body: @Sendable (PostgresStore, [String: String]) async throws -> Void) async throws {
        try await TestSupport.withMigratedStore { store, url in
            _ = try await ContainerStore(store: store).create(container: Self.container, label: "test", logger: TestSupport.logger)
            try await body(store, ["STRATUS_DATABASE_URL": url])
        }
    }

    static func cli(_ arguments: [String], _ settings: [String: String]) async throws -> (status: Int32, output: String) {
        try await StratusExecutable.run("stratus", arguments, settings: settings)
    }

    /// The value after `label: ` on its own line of `output`.
    static func value(_ label: String, in output: String) -> String? {
        output.split(separator: "\n").first { $0.hasPrefix("\(label): ") }.map { String($0.dropFirst(label.count + 2)) }
    }

    func testWebhooksAreCreatedListedAndDeletedAndBadURLsAreRefused() async throws {
        try await withDatabase { store, settings in
            let created = try await Self.cli(["webhook", "create", Self.container, "https://hooks.example.com/stratus"], settings)
            XCTAssertEqual(created.status, 0, created.output)
            let id = try XCTUnwrap(Self.value("id", in: created.output).flatMap(UUID.init(uuidString:)), created.output)
            let secret = try XCTUnwrap(Self.value("secret", in: created.output), created.output)
            let stored = try await DeliveryStore(store: store).webhook(id, logger: TestSupport.logger)
            XCTAssertEqual(stored?.url, "https://hooks.example.com/stratus")
            XCTAssertEqual(stored?.container, Self.container)
            XCTAssertEqual(stored.map { $0.secret.map { String(format: "%02x", $0) }.joined() }, secret, "the printed secret is the signing key, in hex")
            XCTAssertEqual(secret.count, 64)

            let loopback = try await Self.cli(["webhook", "create", Self.container, "http://127.0.0.1:9/hook", "--allow-insecure-loopback"], settings)
            XCTAssertEqual(loopback.status, 0, loopback.output)
            let loopbackID = try XCTUnwrap(Self.value("id", in: loopback.output), loopback.output)

            let list = try await Self.cli(["webhook", "list", Self.container], settings)
            XCTAssertEqual(list.status, 0, list.output)
            XCTAssertEqual(list.output.split(separator: "\n").filter { $0.contains("\t") }, [
                "\(id.uuidString.lowercased())\t\(Self.container)\thttps://hooks.example.com/stratus",
                "\(loopbackID)\t\(Self.container)\thttp://127.0.0.1:9/hook",
            ])
            XCTAssertFalse(list.output.contains(secret), "a list never shows a secret")
            let all = try await Self.cli(["webhook", "list"], settings)
            XCTAssertEqual(all.output.split(separator: "\n").filter { $0.contains("\t") }.count, 2, all.output)
            let other = try await Self.cli(["webhook", "list", "iCloud.other"], settings)
            XCTAssertEqual(other.status, 0, other.output)
            XCTAssertFalse(other.output.contains("\t"), other.output)

            // Refused, each with a message that says why, and nothing stored.
            let refused: [([String], String)] = [
                (["webhook", "create", Self.container, "http://hooks.example.com/stratus"], "refused webhook URL: the URL must use https"),
                (["webhook", "create", Self.container, "http://127.0.0.1:9/hook"], "refused webhook URL: the URL must use https"),
                (["webhook", "create", Self.container, "http://hooks.example.com/x", "--allow-insecure-loopback"],
                 "refused webhook URL: http is allowed only to a loopback host; use https"),
                (["webhook", "create", Self.container, "https://user:pw@hooks.example.com/"], "refused webhook URL: the URL carries a user name or password"),
                (["webhook", "create", Self.container, "not a url"], "refused webhook URL:"),
                (["webhook", "create", "iCloud.missing", "https://hooks.example.com/stratus"], "no container 'iCloud.missing'"),
                (["webhook", "delete", "nope"], "'nope' is not a webhook id"),
                (["webhook", "delete", UUID().uuidString], "no webhook"),
            ]
            for (arguments, message) in refused {
                let result = try await Self.cli(arguments, settings)
                XCTAssertNotEqual(result.status, 0, "\(arguments): \(result.output)")
                XCTAssertTrue(result.output.contains(message), "\(arguments): \(result.output)")
            }
            let kept = try await DeliveryStore(store: store).webhooks(container: nil, logger: TestSupport.logger)
            XCTAssertEqual(kept.count, 2)

            let deleted = try await Self.cli(["webhook", "delete", id.uuidString], settings)
            XCTAssertEqual(deleted.status, 0, deleted.output)
            let remaining = try await DeliveryStore(store: store).webhooks(container: nil, logger: TestSupport.logger)
            XCTAssertEqual(remaining.map(\.webhookID.uuidString), [loopbackID.uppercased()])
            let again = try await Self.cli(["webhook", "delete", id.uuidString], settings)
            XCTAssertNotEqual(again.status, 0)
            XCTAssertTrue(again.output.contains("no webhook"), again.output)
        }
    }

    func testAPNsKeysAreSetOnlyWhenTheKeyFileHoldsAP256Key() async throws {
        try await withDatabase { store, settings in
            let folder = FileManager.default.temporaryDirectory.appendingPathComponent("stratus-apns-\(UUID().uuidString)")
            try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
            defer { try? FileManager.default.removeItem(at: folder) }
            let key = P256.Signing.PrivateKey()
            let good = folder.appendingPathComponent("AuthKey.p8")
            try Data(key.pemRepresentation.utf8).write(to: good)
            let garbage = folder.appendingPathComponent("garbage.p8")
            try Data("-----BEGIN PRIVATE KEY-----\nbm90IGEga2V5\n-----END PRIVATE KEY-----\n".utf8).write(to: garbage)
            func set(_ file: String, container: String = Self.container, teamID: String = "TEAM123456") -> [String] {
                ["apns", "set", container, "--team-id", teamID, "--key-id", "KEY7654321", "--key-file", file, "--topic", "com.example.notes"]
            }

            let accepted = try await Self.cli(set(good.path), settings)
            XCTAssertEqual(accepted.status, 0, accepted.output)
            let stored = try await DeliveryStore(store: store).apnsKey(container: Self.container, logger: TestSupport.logger)
            XCTAssertEqual(stored, DeliveryStore.APNsKey(
                container: Self.container, teamID: "TEAM123456", keyID: "KEY7654321", privateKey: key.pemRepresentation, topic: "com.example.notes"))
            XCTAssertFalse(accepted.output.contains(key.pemRepresentation), "the key is never printed")

            let refused: [([String], String)] = [
                (set(garbage.path), "refused APNs key: the private key of key id KEY7654321 is not a PEM-encoded P-256 key"),
                (set(folder.appendingPathComponent("missing.p8").path), "cannot read"),
                (set(good.path, container: "iCloud.missing"), "no container 'iCloud.missing'"),
                (set(good.path, teamID: ""), "the team id must be non-empty"),
            ]
            for (arguments, message) in refused {
                let result = try await Self.cli(arguments, settings)
                XCTAssertNotEqual(result.status, 0, "\(arguments): \(result.output)")
                XCTAssertTrue(result.output.contains(message), "\(arguments): \(result.output)")
            }
            let kept = try await DeliveryStore(store: store).apnsKey(container: Self.container, logger: TestSupport.logger)
            XCTAssertEqual(kept, stored, "a refused key leaves the one set before")
        }
    }

    func testTheWorkerCallsALoopbackWebhookOverHTTPOnlyWhenItsConfigurationAllowsIt() async throws {
        try await WebhookReceiver.with(reply: { _ in .answer(status: 200) }) { receiver in
            try await APIPipelineFixture.withStack(projection: SubscriptionsProjection(), relay: true, worker: false) { fixture, client, _, location in
                let settings = location.settings.merging(["STRATUS_KAFKA_BACKGROUND_FETCH_WAIT_MS": "100"]) { $1 }
                let created = try await Self.cli(["webhook", "create", fixture.container, receiver.url(), "--allow-insecure-loopback"], settings)
                XCTAssertEqual(created.status, 0, created.output)
                let secret = try XCTUnwrap(Self.value("secret", in: created.output), created.output)
                try await RecordAPITests.createZone(client, fixture, "Q")
                _ = try await SubscriptionTests.modify(client, fixture, [SubscriptionTests.create(SubscriptionTests.querySubscription("all"))])

                // Without the setting the worker refuses plain http, as it does for any other host.
                try await StratusExecutable.with("stratus-subscriptions", settings: settings) { worker in
                    try await SubscriptionTests.save(client, fixture, "refused", count: 1, operation: "create")
                    try await TestSupport.eventually(timeout: .seconds(90), "the delivery to be refused") {
                        try await Self.deliveries(fixture.store).first?.state == "dead"
                    }
                    // Stopped, not killed: it leaves the consumer group, so the next one joins at once.
                    let status = await worker.stop(signal: SIGTERM)
                    XCTAssertEqual(status, 0, "a stopped worker exits cleanly:\n\(worker.output().suffix(3000))")
                }
                let refused = try await Self.deliveries(fixture.store)
                XCTAssertEqual(refused.count, 1)
                XCTAssertTrue(refused.first?.error?.contains("the endpoint is refused") == true, "\(refused)")
                XCTAssertEqual(receiver.requests.count, 0)

                // With it, the next notification reaches the receiver, signed with the printed secret.
                try await StratusExecutable.with("stratus-subscriptions", settings: settings.merging(["STRATUS_WEBHOOK_ALLOW_LOOPBACK": "true"]) { $1 }) { _ in
                    try await SubscriptionTests.save(client, fixture, "allowed", count: 1, operation: "create")
                    try await TestSupport.eventually(timeout: .seconds(90), "the delivery to be acknowledged") {
                        let deliveries = try await Self.deliveries(fixture.store)
                        if deliveries.count == 2, deliveries[1].state == "dead" {
                            throw TestSupport.MissingServer(description: "the allowed delivery was given up: \(deliveries[1].error ?? "")")
                        }
                        return deliveries.map(\.state) == ["dead", "delivered"]
                    }
                }
                let request = try XCTUnwrap(receiver.requests.first)
                XCTAssertEqual(receiver.requests.count, 1)
                let body = try XCTUnwrap(JSONSerialization.jsonObject(with: request.body) as? [String: Any])
                XCTAssertEqual(body["recordName"] as? String, "allowed")
                let timestamp = try XCTUnwrap(request.headers.first(name: "X-Stratus-Timestamp").flatMap { Int64($0) })
                let secretBytes = stride(from: 0, to: secret.count, by: 2).compactMap { offset -> UInt8? in
                    let start = secret.index(secret.startIndex, offsetBy: offset)
                    return UInt8(secret[start..<secret.index(start, offsetBy: 2)], radix: 16)
                }
                XCTAssertTrue(WebhookSignature.verify(
                    body: request.body, timestamp: timestamp, secret: Data(secretBytes),
                    signature: request.headers.first(name: "X-Stratus-Signature") ?? ""), "signed with the secret the CLI printed")
            }
        }
    }

    /// The webhook deliveries, oldest first.
    static func deliveries(_ store: PostgresStore) async throws -> [(state: String, error: String?)] {
        try await store.withConnection { connection in
            let rows = try await connection.query(
                "SELECT state, last_error FROM notification_deliveries WHERE channel = 'webhook' ORDER BY delivery_id", logger: TestSupport.logger)
            var found: [(String, String?)] = []
            for try await row in rows.decode((String, String?).self) { found.append(row) }
            return found
        }
    }
}
