import Foundation
import HummingbirdTesting
import PostgresNIO
import StratusAPI
import StratusCore
import StratusPostgres
import StratusTesting
import XCTest

/// The console's subscriptions page against the real pipeline: a user's subscriptions (saved through
/// the API), the notifications stratus-subscriptions' projection logged for them, and each one's
/// delivery to the container's webhook with its state.
final class ConsoleSubscriptionsTests: XCTestCase {
    typealias Browser = ConsoleAuthTests.Browser

    func testAUsersSubscriptionsAndNotificationsShowTheirDeliveryStatus() async throws {
        try await SubscriptionTests.withStack { fixture, client, _ in
            let browser = Browser(client)
            _ = try await ConsoleDataTests.signIn(browser, store: fixture.store)
            let webhook = try await DeliveryStore(store: fixture.store).createWebhook(
                container: ConsoleDataTests.container, url: "https://hooks.example.com/stratus", logger: TestSupport.logger)
            try await RecordAPITests.createZone(client, fixture, "Q")
            let (status, _) = try await SubscriptionTests.modify(client, fixture, [
                SubscriptionTests.create(["subscriptionID": "zone-q", "subscriptionType": "zone", "zoneID": ["zoneName": "Q"]]),
            ])
            XCTAssertEqual(status, 200)
            let link = "/console/subscriptions?container=\(ConsoleDataTests.container)&environment=development&user=_alice"
            let zones = try await browser.request(ConsoleDataTests.link("/console/zones", ConsoleDataTests.alice))
            XCTAssertTrue(zones.html.contains("href=\"\(link.replacingOccurrences(of: "&", with: "&amp;"))\""), zones.html)
            let empty = try await browser.request(link)
            XCTAssertEqual(empty.status, 200, empty.html)
            XCTAssertTrue(empty.html.contains("<td class=\"mono\">zone-q</td><td>zone</td><td>private</td><td>Q</td>"), empty.html)
            XCTAssertTrue(empty.html.contains("No notifications."))

            try await SubscriptionTests.save(client, fixture, "item-1", count: 1)
            var page = empty
            try await TestSupport.eventually(timeout: .seconds(60), "the notification of the save") {
                page = try await browser.request(link)
                return page.html.contains("id=\"notification-")
            }
            XCTAssertTrue(page.html.contains("zone-q"))
            XCTAssertTrue(page.html.contains("webhook <span class=\"mono\">\(webhook.webhookID.uuidString.lowercased())</span>: <strong>pending</strong>, 0 attempts")
                || page.html.contains("webhook <span class=\"mono\">\(webhook.webhookID.uuidString)</span>: <strong>pending</strong>, 0 attempts"), page.html)

            // A delivery given up shows its state and last error (as the dispatcher leaves it).
            try await fixture.store.withConnection { connection in
                try await connection.query(
                    "UPDATE notification_deliveries SET state = 'dead', attempts = 8, last_error = 'HTTP 500 <from receiver>'", logger: TestSupport.logger)
            }
            let dead = try await browser.request(link)
            XCTAssertTrue(dead.html.contains("<strong>dead</strong>, 8 attempts — HTTP 500 &lt;from receiver&gt;"), dead.html)

            let other = try await browser.request("/console/subscriptions?container=\(ConsoleDataTests.container)&environment=development&user=_bob")
            XCTAssertTrue(other.html.contains("No subscriptions.") && other.html.contains("No notifications."), "another user's page shows none of alice's")
            let noUser = try await browser.request("/console/subscriptions?container=\(ConsoleDataTests.container)&environment=development")
            XCTAssertEqual(noUser.status, 400)
        }
    }
}
