import Foundation
import Hummingbird
import HummingbirdTesting
import StratusAPI
import StratusCore
@testable import StratusPostgres
import StratusPush
import StratusTesting
@testable import StratusWorkers
import Synchronization
import XCTest

/// Webhook delivery end to end: a notification logged by stratus-subscriptions reaches a real HTTP
/// receiver through the dispatcher, signed, retried with backoff while the receiver fails, and
/// acknowledged exactly once.
final class WebhookDeliveryTests: XCTestCase {
    typealias Body = [String: Any]

    /// What the receiver saw: each request's attempt header, idempotency key, and whether its signature verified.
    final class Received: Sendable {
        let requests = Mutex<[(attempt: String, key: String, verified: Bool, body: Data)]>([])
    }

    func testAReceiverThatFailsThreeTimesGetsTheNotificationExactlyOnceAfterRetries() async throws {
        try await SubscriptionTests.withStack { fixture, client, _ in
            let received = Received()
            let secret = Mutex<Data>(Data())
            let router = Router()
            router.post("/hook") { request, _ -> Response in
                let body = Data(buffer: try await request.body.collect(upTo: 1 << 20))
                let timestamp = Int64(request.headers[.init("X-Stratus-Timestamp")!] ?? "") ?? 0
                let verified = WebhookSignature.verify(
                    body: body, timestamp: timestamp, secret: secret.withLock { $0 }, signature: request.headers[.init("X-Stratus-Signature")!] ?? "")
                let count = received.requests.withLock { requests in
                    requests.append((request.headers[.init("X-Stratus-Delivery-Attempt")!] ?? "", request.headers[.init("X-Stratus-Idempotency-Key")!] ?? "", verified, body))
                    return requests.count
                }
                return Response(status: count <= 3 ? .internalServerError : .ok)
            }
            let receiver = Application(router: router, configuration: .init(address: .hostname("127.0.0.1", port: 0)), logger: TestSupport.logger)
            try await receiver.test(.live) { receiverClient in
                let port = try XCTUnwrap(receiverClient.port)
                let webhook = try await DeliveryStore(store: fixture.store).createWebhook(
                    container: fixture.container, url: "http://127.0.0.1:\(port)/hook", logger: TestSupport.logger)
                secret.withLock { $0 = Data(webhook.secret) }
                try await RecordAPITests.createZone(client, fixture, "Q")
                _ = try await SubscriptionTests.modify(client, fixture, [SubscriptionTests.create(SubscriptionTests.querySubscription("all"))])
                try await SubscriptionTests.save(client, fixture, "hooked", count: 1, operation: "create")
                _ = try await SubscriptionTests.waitForNotifications(client, fixture, count: 1)

                var senderConfiguration = WebhookSenderConfiguration()
                senderConfiguration.allowInsecureLoopback = true
                let sender = WebhookSender(configuration: senderConfiguration, logger: TestSupport.logger)
                var configuration = DeliveryConfiguration()
                configuration.backoffBase = .milliseconds(20)
                configuration.backoffMaximum = .milliseconds(100)
                let dispatcher = DeliveryDispatcher(
                    store: fixture.store, channels: [WebhookChannel(sender: sender, store: fixture.store, logger: TestSupport.logger)],
                    configuration: configuration, logger: TestSupport.logger)
                try await withThrowingTaskGroup(of: Void.self) { group in
                    group.addTask { try await dispatcher.run() }
                    defer { group.cancelAll() }
                    try await TestSupport.eventually(timeout: .seconds(30), "the delivery to be acknowledged") {
                        try await Self.states(fixture.store) == ["delivered:4"]
                    }
                }
                try await sender.shutdown()
                let requests = received.requests.withLock { $0 }
                XCTAssertEqual(requests.map(\.attempt), ["1", "2", "3", "4"], "three failures, then one success, and nothing after it")
                XCTAssertEqual(Set(requests.map(\.key)).count, 1, "every attempt carries the same idempotency key")
                XCTAssertTrue(requests.allSatisfy(\.verified), "every request is signed with the webhook's secret")
                let body = try XCTUnwrap(JSONSerialization.jsonObject(with: requests[3].body) as? Body)
                XCTAssertEqual(body["recordName"] as? String, "hooked")
                XCTAssertEqual(body["queryNotificationReason"] as? String, "recordCreated")
                XCTAssertEqual(body["notificationID"] as? String, requests[3].key)
                XCTAssertNotNil((body["payload"] as? Body)?["ck"])
                let counts = try await DeliveryStore(store: fixture.store).counts(logger: TestSupport.logger)
                XCTAssertEqual(counts, ["webhook": ["delivered": 1]], "the operations' count of deliveries by channel and state")
            }
        }
    }

    /// A receiver that always fails is given up after the configured number of attempts.
    func testADeliveryIsGivenUpAfterTheConfiguredAttempts() async throws {
        try await SubscriptionTests.withStack { fixture, client, _ in
            let attempts = Mutex(0)
            let router = Router()
            router.post("/down") { _, _ -> Response in
                attempts.withLock { $0 += 1 }
                return Response(status: .serviceUnavailable)
            }
            let receiver = Application(router: router, configuration: .init(address: .hostname("127.0.0.1", port: 0)), logger: TestSupport.logger)
            try await receiver.test(.live) { receiverClient in
                let port = try XCTUnwrap(receiverClient.port)
                _ = try await DeliveryStore(store: fixture.store).createWebhook(
                    container: fixture.container, url: "http://127.0.0.1:\(port)/down", logger: TestSupport.logger)
                try await RecordAPITests.createZone(client, fixture, "Q")
                _ = try await SubscriptionTests.modify(client, fixture, [SubscriptionTests.create(SubscriptionTests.querySubscription("all"))])
                try await SubscriptionTests.save(client, fixture, "doomed", count: 1, operation: "create")
                var senderConfiguration = WebhookSenderConfiguration()
                senderConfiguration.allowInsecureLoopback = true
                let sender = WebhookSender(configuration: senderConfiguration, logger: TestSupport.logger)
                var configuration = DeliveryConfiguration()
                configuration.maxAttempts = 3
                configuration.backoffBase = .milliseconds(20)
                configuration.backoffMaximum = .milliseconds(50)
                let dispatcher = DeliveryDispatcher(
                    store: fixture.store, channels: [WebhookChannel(sender: sender, store: fixture.store, logger: TestSupport.logger)],
                    configuration: configuration, logger: TestSupport.logger)
                try await withThrowingTaskGroup(of: Void.self) { group in
                    group.addTask { try await dispatcher.run() }
                    defer { group.cancelAll() }
                    try await TestSupport.eventually(timeout: .seconds(30), "the delivery to be given up") {
                        try await Self.states(fixture.store) == ["dead:3"]
                    }
                }
                try await sender.shutdown()
                XCTAssertEqual(attempts.withLock { $0 }, 3, "three attempts, then none")
            }
        }
    }

    /// A receiver that holds its answers never holds up another receiver's deliveries.
    func testASlowReceiverDoesNotHoldUpAnother() async throws {
        try await SubscriptionTests.withStack { fixture, client, _ in
            let slowCount = Mutex(0)
            let slowAnswered = Mutex(0)
            let fastNames = Mutex<[String]>([])
            let (release, releaser) = AsyncStream<Void>.makeStream()
            let router = Router()
            router.post("/slow") { _, _ -> Response in
                slowCount.withLock { $0 += 1 }
                for await _ in release { break }
                slowAnswered.withLock { $0 += 1 }
                return Response(status: .ok)
            }
            router.post("/fast") { request, _ -> Response in
                let body = Data(buffer: try await request.body.collect(upTo: 1 << 20))
                let name = (try? JSONSerialization.jsonObject(with: body) as? Body)?["recordName"] as? String ?? "?"
                fastNames.withLock { $0.append(name) }
                return Response(status: .ok)
            }
            let receiver = Application(router: router, configuration: .init(address: .hostname("127.0.0.1", port: 0)), logger: TestSupport.logger)
            try await receiver.test(.live) { receiverClient in
                let port = try XCTUnwrap(receiverClient.port)
                let deliveries = DeliveryStore(store: fixture.store)
                _ = try await deliveries.createWebhook(container: fixture.container, url: "http://127.0.0.1:\(port)/slow", logger: TestSupport.logger)
                _ = try await deliveries.createWebhook(container: fixture.container, url: "http://127.0.0.1:\(port)/fast", logger: TestSupport.logger)
                try await RecordAPITests.createZone(client, fixture, "Q")
                _ = try await SubscriptionTests.modify(client, fixture, [SubscriptionTests.create(SubscriptionTests.querySubscription("all"))])

                var senderConfiguration = WebhookSenderConfiguration()
                senderConfiguration.allowInsecureLoopback = true
                let sender = WebhookSender(configuration: senderConfiguration, logger: TestSupport.logger)
                let dispatcher = DeliveryDispatcher(
                    store: fixture.store, channels: [WebhookChannel(sender: sender, store: fixture.store, logger: TestSupport.logger)],
                    logger: TestSupport.logger)
                try await withThrowingTaskGroup(of: Void.self) { group in
                    group.addTask { try await dispatcher.run() }
                    defer { group.cancelAll() }
                    try await SubscriptionTests.save(client, fixture, "first", count: 1, operation: "create")
                    try await TestSupport.eventually(timeout: .seconds(20), "both receivers to get the first notification") {
                        slowCount.withLock { $0 } == 1 && fastNames.withLock { $0 } == ["first"]
                    }
                    // The slow receiver still holds its answer (the sender waits up to 10 s for it).
                    try await SubscriptionTests.save(client, fixture, "second", count: 2, operation: "create")
                    try await TestSupport.eventually(timeout: .seconds(8), "the fast receiver to get the second notification while the slow one holds") {
                        fastNames.withLock { $0 } == ["first", "second"]
                    }
                    XCTAssertEqual(slowAnswered.withLock { $0 }, 0, "the slow receiver has answered nothing yet")
                    XCTAssertGreaterThanOrEqual(slowCount.withLock { $0 }, 1)
                    releaser.finish()
                }
                try await sender.shutdown()
            }
        }
    }

    static func states(_ store: PostgresStore) async throws -> [String] {
        try await store.withConnection { connection in
            let rows = try await connection.query("SELECT state || ':' || attempts FROM notification_deliveries", logger: TestSupport.logger)
            var states: [String] = []
            for try await state in rows.decode(String.self) { states.append(state) }
            return states
        }
    }
}
