import Foundation
import HummingbirdTesting
import HummingbirdWSClient
import StratusAPI
import StratusCore
import StratusTesting
@testable import StratusWorkers
import Synchronization
import XCTest

/// The web courier as a WebSocket, against stratus-api's real server on a real port (the upgrade
/// shares the port with HTTP) with the relay and stratus-subscriptions' worker: a real WebSocket
/// client receives what is logged for it, an unknown token never gets a socket, and a client that
/// closes ends the server's push.
final class CourierWebSocketTests: XCTestCase {
    typealias Fixture = RecordAPITests.Fixture
    typealias Body = [String: Any]

    static func withLiveStack(_ body: @Sendable (Fixture, any TestClientProtocol, NotificationHub) async throws -> Void) async throws {
        try await APIPipelineFixture.withStack(projection: SubscriptionsProjection(), pipeline: true, live: true) { fixture, client, dependencies in
            try await body(fixture, client, dependencies.hub)
        }
    }

    /// A courier token for `_alice`; its WebSocket URL (on the test's port) and its long poll's path.
    static func courier(_ client: any TestClientProtocol, _ fixture: Fixture) async throws -> (webSocket: String, poll: String, token: String) {
        let (status, created) = try await RecordAPITests.post(client, SubscriptionTests.notificationsPath(fixture, "tokens/create"), [:])
        XCTAssertEqual(status, 200, "\(created)")
        let token = try XCTUnwrap(created["apnsToken"] as? String)
        let url = try XCTUnwrap(created["webSocketURL"] as? String)
        let poll = try XCTUnwrap(created["webcourierURL"] as? String)
        XCTAssertTrue(url.hasPrefix("ws://"), url)
        XCTAssertTrue(url.hasSuffix("/courier/\(token)/websocket"), url)
        XCTAssertEqual(url.dropFirst("ws://".count), poll.dropFirst("http://".count) + "/websocket")
        let path = try XCTUnwrap(url.range(of: "/device/").map { String(url[$0.lowerBound...]) })
        let port = try XCTUnwrap(client.port)
        return ("ws://127.0.0.1:\(port)\(path)", String(path.dropLast("/websocket".count)), token)
    }

    func testTheWebSocketPushesWhatIsLoggedAndTheClientClosingEndsThePush() async throws {
        try await Self.withLiveStack { fixture, client, hub in
            try await RecordAPITests.createZone(client, fixture, "Q")
            _ = try await SubscriptionTests.modify(client, fixture, [SubscriptionTests.create(SubscriptionTests.querySubscription("all"))])
            let courier = try await Self.courier(client, fixture)
            // Logged before the socket opens: pushed first, as the token has not been handed it.
            try await SubscriptionTests.save(client, fixture, "early", count: 1, operation: "create")
            _ = try await SubscriptionTests.waitForNotifications(client, fixture, count: 1)

            let (messages, received) = AsyncStream<String>.makeStream()
            let logger = TestSupport.logger
            async let closed = WebSocketClient.connect(url: courier.webSocket, logger: logger) { inbound, outbound, _ in
                var iterator = inbound.messages(maxSize: 1 << 20).makeAsyncIterator()
                for _ in 0..<2 {
                    guard case .text(let text) = try await iterator.next() else { break }
                    received.yield(text)
                }
                received.finish()
                try await outbound.close(.normalClosure, reason: "done")
            }
            var iterator = messages.makeAsyncIterator()
            let first = try Self.object(await iterator.next())
            XCTAssertEqual(first["recordName"] as? String, "early")
            // The push now waits in the hub; a save made then arrives as it is logged.
            try await TestSupport.eventually(timeout: .seconds(10), "the WebSocket's push to wait") { hub.waiting == 1 }
            try await SubscriptionTests.save(client, fixture, "pushed", count: 2, operation: "create")
            let second = try Self.object(await iterator.next())
            XCTAssertEqual(second["recordName"] as? String, "pushed")
            XCTAssertEqual(second["subscriptionID"] as? String, "all")
            XCTAssertEqual(second["queryNotificationReason"] as? String, first["queryNotificationReason"] as? String)
            // The dictionary of the long poll's list form, member for member.
            XCTAssertEqual(Set(second.keys), ["notificationID", "notificationType", "subscriptionID", "zoneID", "databaseScope", "isRead",
                                              "createdAt", "payload", "queryNotificationReason", "recordName"])
            _ = try await closed
            // The client closed: the server's push task ended and left the hub.
            try await TestSupport.eventually(timeout: .seconds(10), "the push to end when the client closed") { hub.waiting == 0 }
            // What the socket handed out is handed out once: the long poll finds nothing left, in
            // Apple's shape (204, no notification) and in the list form.
            let (empty, nothing) = try await SubscriptionTests.poll(client, courier.poll + "?timeout=0")
            XCTAssertEqual(empty, 204)
            XCTAssertEqual(nothing, [])
            let (status, polled) = try await SubscriptionTests.get(client, courier.poll + "?format=list&timeout=0")
            XCTAssertEqual(status, 200)
            XCTAssertEqual((polled["notifications"] as? [Body])?.count, 0)
        }
    }

    func testAnUnknownTokenIsRefusedBeforeTheUpgrade() async throws {
        try await Self.withLiveStack { fixture, client, hub in
            let port = try XCTUnwrap(client.port)
            let courier = try await Self.courier(client, fixture)
            func upgrade(_ path: String) async throws -> String {
                let connection = try RawConnection(port: port, receiveTimeout: 10)
                let request = "GET \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                    + "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
                let reply = await RawConnection.offThePool {
                    guard connection.send(Array(request.utf8)) else { return (bytes: [UInt8](), closed: true) }
                    return connection.receive { String(decoding: $0, as: UTF8.self).contains("\r\n\r\n") }
                }
                return String(decoding: reply.bytes, as: UTF8.self)
            }
            let base = "/device/1/\(fixture.container)/development/courier"
            for token in ["nope", String(repeating: "a", count: 64), String(repeating: "b", count: 4_000)] {
                let answer = try await upgrade("\(base)/\(token)/websocket")
                XCTAssertTrue(answer.hasPrefix("HTTP/1.1 4"), "\(token.prefix(8)): \(answer.prefix(200))")
            }
            let known = try await upgrade(try XCTUnwrap(URL(string: courier.webSocket)).path)
            XCTAssertTrue(known.hasPrefix("HTTP/1.1 101"), String(known.prefix(200)))
            // A real client is refused too, and no push was started for it.
            do {
                try await WebSocketClient.connect(url: "ws://127.0.0.1:\(port)\(base)/nope/websocket", logger: TestSupport.logger) { _, _, _ in
                    XCTFail("an unknown token got a socket")
                }
                XCTFail("an unknown token was upgraded")
            } catch {}
            // Without the upgrade the path is no HTTP route.
            let (plain, _) = try await SubscriptionTests.get(client, "\(base)/nope/websocket")
            XCTAssertEqual(plain, 404)
            try await TestSupport.eventually(timeout: .seconds(10), "no push left waiting") { hub.waiting == 0 }
        }
    }

    static func object(_ text: String?) throws -> Body {
        let text = try XCTUnwrap(text, "the socket ended before a message came")
        return try XCTUnwrap(JSONSerialization.jsonObject(with: Data(text.utf8)) as? Body, text)
    }
}
