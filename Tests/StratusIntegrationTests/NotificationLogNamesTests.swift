import Foundation
import StratusCore
@testable import StratusPostgres
import StratusTesting
import XCTest

/// The notification log keys a change by the subscription's id and the change's dedupe key as
/// PostgreSQL compares them, by their bytes: two subscriptions whose ids Swift calls equal ("é" and
/// "e" + U+0301) each get their notification of one change (real PostgreSQL).
final class NotificationLogNamesTests: XCTestCase {
    func testTwoSubscriptionIDsSwiftCallsEqualEachGetTheirNotification() async throws {
        try await TestSupport.withMigratedStore { store, _ in
            let database = DatabaseID(container: "iCloud.test", environment: .development, scope: .private, owner: "_alice")
            let zone = ZoneID(zoneName: "Z", ownerRecordName: "_alice")
            func draft(_ subscriptionID: String) -> NotificationDraft {
                let subscription = Subscription(
                    subscriptionID: subscriptionID, type: .zone, zoneID: zone, query: nil, queryJSON: nil, firesOn: [.create], firesOnce: false,
                    notificationInfo: nil)
                return NotificationDraft(
                    owner: OwnedSubscription(database: database, subscriber: "_alice", subscription: subscription, createdAt: 0),
                    eventID: 1, dedupeKey: "zone/Z/request/r", zoneID: zone, reason: nil, recordName: nil, fields: [:], collapseID: nil)
            }
            let composed = draft("\u{E9}"), decomposed = draft("e\u{301}")
            XCTAssertEqual(composed.owner.subscription.subscriptionID, decomposed.owner.subscription.subscriptionID, "Swift calls the ids equal")
            let logged = try await store.serializable(logger: TestSupport.logger) { transaction in
                try await NotificationStore.log([composed, decomposed, composed], in: transaction)
            }
            XCTAssertEqual(logged.map { Array($0.owner.subscription.subscriptionID.utf8) }, [Array("\u{E9}".utf8), Array("e\u{301}".utf8)],
                           "each id once, the repeated draft skipped")
            let again = try await store.serializable(logger: TestSupport.logger) { transaction in
                try await NotificationStore.log([decomposed], in: transaction)
            }
            XCTAssertEqual(again.count, 0, "a draft logged before is skipped")
        }
    }
}
