import Foundation
import Hummingbird
import StratusCore
import StratusPostgres

/// A user's subscriptions and latest notifications, with each notification's delivery status per
/// channel and target (`/console/subscriptions?container=…&environment=…&user=…`).
struct ConsoleSubscriptionsPage<Context: StratusRequestContext>: Sendable {
    let routes: ConsoleRoutes<Context>

    /// Subscriptions and notifications a page lists.
    static var pageSize: Int { 50 }

    func register(on router: Router<Context>) {
        router.get("/console/subscriptions") { request, context in await routes.page(request, context) { try await page(request, context) } }
    }

    func page(_ request: Request, _ context: Context) async throws -> Response {
        let session = try await routes.session(request, context)
        var items = ConsoleDataPages<Context>.items(request)
        items["database"] = "private"
        // The user's private database names the container, environment and user, checked as every data page checks them.
        let database = try ConsoleDatabase(items, session: session).database
        let reader = ConsoleSubscriptions(store: routes.data.store)
        let subscriptions = try await reader.subscriptions(
            container: database.container, environment: database.environment, subscriber: database.owner, limit: Self.pageSize, logger: context.logger)
        let before = items["before"].flatMap { Int64($0) }
        let notifications = try await reader.notifications(
            container: database.container, environment: database.environment, subscriber: database.owner, before: before, limit: Self.pageSize,
            logger: context.logger)
        let time = ISO8601DateFormatter()
        var values: [String: Any] = [
            "user": database.owner, "environment": database.environment.rawValue,
            "subscriptions": subscriptions.map { subscription -> [String: Any] in
                var entry: [String: Any] = ["scope": subscription.scope, "id": subscription.subscriptionID, "type": subscription.type,
                                            "definition": subscription.definition]
                if let zone = subscription.zoneName { entry["zone"] = zone }
                if let recordType = subscription.recordType { entry["recordType"] = recordType }
                return entry
            },
            "noSubscriptions": subscriptions.isEmpty, "noNotifications": notifications.isEmpty, "pageSize": Self.pageSize,
            "notifications": notifications.map { notification -> [String: Any] in
                var entry: [String: Any] = [
                    "position": notification.position, "id": notification.notificationID.uuidString.lowercased(), "type": notification.type,
                    "subscription": notification.subscriptionID, "zone": notification.zoneName, "read": notification.isRead ? "read" : "unread",
                    "created": time.string(from: notification.createdAt),
                    "deliveries": notification.deliveries.map { delivery -> [String: Any] in
                        var entry: [String: Any] = ["channel": delivery.channel, "target": String(delivery.target.prefix(64)), "state": delivery.state,
                                                    "attempts": delivery.attempts]
                        if let error = delivery.lastError { entry["error"] = error }
                        return entry
                    },
                    "noDeliveries": notification.deliveries.isEmpty,
                ]
                if let reason = notification.reason { entry["reason"] = reason }
                if let record = notification.recordName { entry["record"] = record }
                return entry
            },
        ]
        if notifications.count == Self.pageSize, let last = notifications.last {
            values["older"] = "/console/subscriptions?" + [("container", database.container), ("environment", database.environment.rawValue),
                                                          ("user", database.owner), ("before", String(last.position))]
                .map { "\($0.0)=\(ConsolePage.escape($0.1))" }.joined(separator: "&")
        }
        return ConsolePage.render("subscriptions", title: "Subscriptions of \(database.owner)", session: session, crumbs: [
            ("Containers", "/console"), (database.container, "/console/containers/\(ConsolePage.escape(database.container))"),
        ], values)
    }
}
