import Foundation
import Logging
import PostgresNIO
import StratusCore

/// What the console's subscriptions page reads: a user's subscriptions, and their latest
/// notifications with each one's delivery to every push target (webhook or APNs device).
public struct ConsoleSubscriptions: Sendable {
    let store: PostgresStore

    /// Creates the reader.
    public init(store: PostgresStore) { self.store = store }

    /// A subscription as listed.
    public struct Subscription: Sendable, Equatable {
        public var scope: String
        public var subscriptionID: String
        public var type: String
        public var zoneName: String?
        public var recordType: String?
        /// The subscription dictionary as stored, as JSON text.
        public var definition: String
    }

    /// A user's subscriptions in one environment (every database), at most `limit`.
    public func subscriptions(container: String, environment: Environment, subscriber: String, limit: Int, logger: Logger) async throws -> [Subscription] {
        try await store.withConnection { connection in
            // Crosses owners: an operator's list of one user's subscriptions in every database, found by subscriber.
            let rows = try await connection.query(
                """
                SELECT scope, subscription_id, subscription_type, zone_name, record_type, left(definition::text, 4000) FROM subscriptions
                WHERE container = \(container) AND environment = \(environment.rawValue) AND subscriber = \(subscriber)
                ORDER BY scope, subscription_id LIMIT \(limit)
                """, logger: logger)
            var found: [Subscription] = []
            for try await (scope, id, type, zone, recordType, definition) in rows.decode((String, String, String, String?, String?, String).self) {
                found.append(Subscription(scope: scope, subscriptionID: id, type: type, zoneName: zone, recordType: recordType, definition: definition))
            }
            return found
        }
    }

    /// One push of a notification to one target.
    public struct Delivery: Sendable, Equatable {
        public var channel: String
        public var target: String
        /// `pending`, `delivered` or `dead`.
        public var state: String
        public var attempts: Int
        public var lastError: String?
    }

    /// A notification as listed, with its deliveries.
    public struct Notification: Sendable, Equatable {
        public var position: Int64
        public var notificationID: UUID
        public var type: String
        public var reason: String?
        public var subscriptionID: String
        public var zoneName: String
        public var recordName: String?
        public var isRead: Bool
        public var createdAt: Date
        public var deliveries: [Delivery]
    }

    /// The most deliveries read for one page of notifications.
    static let maxDeliveries = 2_000

    /// A user's latest notifications in one environment, newest first, at most `limit`, before
    /// `position` (nil: from the newest), each with its deliveries.
    public func notifications(
        container: String, environment: Environment, subscriber: String, before position: Int64?, limit: Int, logger: Logger
    ) async throws -> [Notification] {
        try await store.withConnection { connection in
            let rows = try await connection.query(
                """
                SELECT position, notification_id, notification_type, reason, subscription_id, zone_name, record_name, is_read, created_at
                FROM notifications WHERE container = \(container) AND environment = \(environment.rawValue) AND subscriber = \(subscriber)
                  AND position < \(position ?? Int64.max)
                ORDER BY position DESC LIMIT \(limit)
                """, logger: logger)
            var notifications: [Notification] = []
            for try await (position, id, type, reason, subscription, zone, record, read, created) in rows.decode(
                (Int64, UUID, String, String?, String, String, String?, Bool, Date).self)
            {
                notifications.append(Notification(
                    position: position, notificationID: id, type: type, reason: reason, subscriptionID: subscription, zoneName: zone,
                    recordName: record, isRead: read, createdAt: created, deliveries: []))
            }
            guard !notifications.isEmpty else { return notifications }
            let deliveries = try await connection.query(
                """
                SELECT notification_id, channel, target, state, attempts, left(last_error, 500) FROM notification_deliveries
                WHERE notification_id = ANY(\(notifications.map(\.notificationID)))
                ORDER BY delivery_id LIMIT \(Self.maxDeliveries)
                """, logger: logger)
            var byNotification: [UUID: [Delivery]] = [:]
            for try await (id, channel, target, state, attempts, error) in deliveries.decode((UUID, String, String, String, Int32, String?).self) {
                byNotification[id, default: []].append(Delivery(channel: channel, target: target, state: state, attempts: Int(attempts), lastError: error))
            }
            return notifications.map { notification in
                var notification = notification
                notification.deliveries = byNotification[notification.notificationID] ?? []
                return notification
            }
        }
    }
}
