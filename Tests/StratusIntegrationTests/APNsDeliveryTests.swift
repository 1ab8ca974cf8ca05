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

/// APNs delivery end to end: a device registered with tokens/register, the container's provider
/// key, a save that fires subscriptions, and the dispatcher sending the logged notifications to an
/// HTTP/2-over-TLS server that checks each request as APNs would.
final class APNsDeliveryTests: XCTestCase {
    typealias Body = [String: Any]
    func testTheDispatcherSendsEachNotificationToTheDeviceAsAPNsExpectsAndDropsAnUnregisteredDevice() async throws {
        let key = P256.Signing.PrivateKey()
        let (teamID, keyID, topic) = ("TEAM123456", "KEY7654321", "com.example.notes")
        let device = String(repeating: "0f1e", count: 16)
        let expectation = APNsExpectation(publicKey: key.publicKey, teamID: teamID, keyID: keyID, topic: topic)
        let keyPEM = key.pemRepresentation
        // The first two pushes are accepted; every later one finds the device gone, as APNs answers
        // for an app that was removed.
        let reply: @Sendable (APNsReceivedRequest, Int) -> (status: Int, reason: String?) = { _, index in index < 2 ? (200, nil) : (410, "Unregistered") }
        try await SubscriptionTests.withStack { fixture, client, _ in
            try await APNsTestServer.with(expecting: expectation, reply: reply) { server in
                let logger = TestSupport.logger
                try await DeliveryStore(store: fixture.store).setAPNsKey(
                    .init(container: fixture.container, teamID: teamID, keyID: keyID, privateKey: keyPEM, topic: topic), logger: logger)
                let (registered, answer) = try await RecordAPITests.post(
                    client, SubscriptionTests.notificationsPath(fixture, "tokens/register"), ["apnsEnvironment": "development", "apnsToken": device])
                XCTAssertEqual(registered, 200, "\(answer)")
                try await RecordAPITests.createZone(client, fixture, "Q")
                // One visible notification (an alert, collapsed by the record's title) and one silent.
                _ = try await SubscriptionTests.modify(client, fixture, [
                    SubscriptionTests.create(SubscriptionTests.querySubscription("alerts", extra: [
                        "notificationInfo": ["alertBody": "New item", "shouldBadge": true, "collapseIDKey": "title"],
                    ])),
                    SubscriptionTests.create(SubscriptionTests.querySubscription("silent")),
                ])
                try await SubscriptionTests.save(client, fixture, "pushed", count: 1, title: "groceries", operation: "create")
                let log = try await SubscriptionTests.waitForNotifications(client, fixture, count: 2)
                let logged = try await Self.loggedPayloads(fixture.store)
                XCTAssertEqual(Set(logged.keys), Set(log.compactMap { ($0["notificationID"] as? String).flatMap(UUID.init(uuidString:)) }))

                var configuration = APNsSenderConfiguration()
                configuration.trustedCertificatesPEM = [server.caPEM]
                let channel = APNsChannel(
                    store: fixture.store, configuration: configuration,
                    environments: ["development": APNsEnvironment(baseURL: server.baseURL)], logger: logger)
                let dispatcher = DeliveryDispatcher(store: fixture.store, channels: [channel], logger: logger)
                do {
                try await withThrowingTaskGroup(of: Void.self) { group in
                    group.addTask { try await dispatcher.run() }
                    defer { group.cancelAll() }
                    try await TestSupport.eventually(timeout: .seconds(30), "both deliveries to be acknowledged") {
                        // A first attempt may fail before it reaches the server (seen as the first test of a
                        // freshly started test process) and be retried; the server still sees each push once.
                        try await Self.deliveries(fixture.store).map(Self.outcome) == ["delivered", "delivered"]
                    }

                    let requests = server.requests
                    XCTAssertEqual(requests.count, 2)
                    for request in requests {
                        XCTAssertEqual(request.problems, [], "request \(request.path) breaks APNs's rules")
                        XCTAssertEqual(request.version, .http2)
                        XCTAssertEqual(request.method, .POST)
                        XCTAssertEqual(request.path, "/3/device/\(device)")
                        XCTAssertEqual(request.headers["apns-topic"], [topic])
                        let id = try XCTUnwrap(request.headers.first(name: "apns-id").flatMap(UUID.init(uuidString:)), "apns-id is the notification id")
                        let notification = try XCTUnwrap(log.first { $0["notificationID"] as? String == id.uuidString.lowercased() })
                        let payload = try XCTUnwrap(logged[id])
                        XCTAssertEqual(try Self.json(request.body), payload, "the payload is the logged notification's")
                        let aps = try XCTUnwrap(payload["aps"])
                        XCTAssertEqual(payload["ck"]?["nid"], .string(id.uuidString.lowercased()))
                        switch notification["subscriptionID"] as? String {
                        case "alerts":
                            XCTAssertEqual(aps["alert"]?["body"], .string("New item"))
                            XCTAssertEqual(request.headers["apns-push-type"], ["alert"])
                            XCTAssertEqual(request.headers["apns-priority"], ["10"])
                            XCTAssertEqual(request.headers["apns-collapse-id"], ["groceries"], "the collapseIDKey field's value")
                        case "silent":
                            XCTAssertEqual(aps["content-available"], .int(1))
                            XCTAssertNil(aps["alert"])
                            XCTAssertEqual(request.headers["apns-push-type"], ["background"])
                            XCTAssertEqual(request.headers["apns-priority"], ["5"])
                            XCTAssertEqual(request.headers["apns-collapse-id"], [], "no collapseIDKey, no collapse id")
                        default:
                            XCTFail("a push for no subscription of the test: \(notification)")
                        }
                    }
                    XCTAssertEqual(Set(requests.compactMap { $0.headers.first(name: "apns-id").flatMap(UUID.init(uuidString:)) }), Set(logged.keys),
                                   "one push per notification")

                    // The next save's pushes find the device unregistered: dead at once, and the device forgotten.
                    try await SubscriptionTests.save(client, fixture, "later", count: 2, title: "chores", operation: "create")
                    try await TestSupport.eventually(timeout: .seconds(30), "the pushes to the unregistered device to be given up") {
                        try await Self.deliveries(fixture.store).map(Self.outcome) == ["delivered", "delivered", "dead:1", "dead:1"]
                    }
                }
                } catch {
                    // The sender's HTTP client must be shut down on every path; what the deliveries
                    // came to says why the wait failed.
                    let states = (try? await Self.deliveries(fixture.store)) ?? []
                    await channel.shutdown()
                    XCTFail("deliveries: \(states); requests the server saw: \(server.requests.count)")
                    throw error
                }
                let dead = try await Self.deliveries(fixture.store).filter { $0.state == "dead:1" }
                XCTAssertTrue(dead.allSatisfy { $0.error?.contains("410") == true && $0.error?.contains("Unregistered") == true }, "\(dead)")
                XCTAssertEqual(server.requests.count, 4, "an unregistered device is never tried again")
                let devices = try await Self.deviceTokens(fixture.store)
                XCTAssertEqual(devices, [], "the device token is removed")
                await channel.shutdown()

                // Without a device, a new notification queues no push.
                try await SubscriptionTests.save(client, fixture, "unheard", count: 3, operation: "create")
                _ = try await SubscriptionTests.waitForNotifications(client, fixture, count: 6)
                let deliveries = try await Self.deliveries(fixture.store)
                XCTAssertEqual(deliveries.count, 4)
            }
        }
    }

    /// Every logged notification's payload, by notification id.
    static func loggedPayloads(_ store: PostgresStore) async throws -> [UUID: JSONValue] {
        try await store.withConnection { connection in
            let rows = try await connection.query("SELECT notification_id, payload::text FROM notifications", logger: TestSupport.logger)
            var payloads: [UUID: JSONValue] = [:]
            for try await (id, payload) in rows.decode((UUID, String).self) { payloads[id] = try json(Data(payload.utf8)) }
            return payloads
        }
    }

    /// A delivery's state, with the attempts a delivered one took left out.
    static func outcome(_ delivery: (state: String, error: String?)) -> String {
        delivery.state.hasPrefix("delivered:") ? "delivered" : delivery.state
    }

    /// The APNs deliveries, oldest first: `state:attempts` and the last error.
    static func deliveries(_ store: PostgresStore) async throws -> [(state: String, error: String?)] {
        try await store.withConnection { connection in
            let rows = try await connection.query(
                "SELECT state || ':' || attempts, last_error FROM notification_deliveries WHERE channel = 'apns' ORDER BY delivery_id",
                logger: TestSupport.logger)
            var found: [(String, String?)] = []
            for try await row in rows.decode((String, String?).self) { found.append(row) }
            return found
        }
    }

    static func deviceTokens(_ store: PostgresStore) async throws -> [String] {
        try await store.withConnection { connection in
            let rows = try await connection.query("SELECT device_token FROM device_tokens", logger: TestSupport.logger)
            var found: [String] = []
            for try await token in rows.decode(String.self) { found.append(token) }
            return found
        }
    }

    static func json(_ data: Data) throws -> JSONValue {
        try EventCoding.decoder.decode(JSONValue.self, from: data)
    }
}
