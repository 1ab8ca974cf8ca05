import Foundation
import Logging
import PostgresNIO
import StratusCore

/// Push deliveries of logged notifications (webhooks, APNs) and the per-container settings they use.
public struct DeliveryStore: Sendable {
    let store: PostgresStore

    /// Creates the delivery store.
    public init(store: PostgresStore) { self.store = store }

    /// A webhook endpoint of a container.
    public struct Webhook: Sendable, Hashable {
        public var webhookID: UUID
        public var container: String
        public var url: String
        public var secret: [UInt8]
    }

    /// A container's APNs provider key.
    public struct APNsKey: Sendable, Hashable {
        public var container: String
        public var teamID: String
        public var keyID: String
        /// The `.p8` key's PEM text.
        public var privateKey: String
        public var topic: String

        /// Creates a key record.
        public init(container: String, teamID: String, keyID: String, privateKey: String, topic: String) {
            self.container = container
            self.teamID = teamID
            self.keyID = keyID
            self.privateKey = privateKey
            self.topic = topic
        }
    }

    /// A delivery claimed for sending: what to send where, and how often it was tried.
    public struct Due: Sendable, Hashable {
        public var deliveryID: Int64
        public var channel: String
        public var target: String
        /// Attempts before this one.
        public var attempts: Int
        public var notificationID: UUID
        public var container: String
        public var environment: String
        public var subscriber: String
        public var subscriptionID: String
        public var type: String
        public var reason: String?
        public var zoneID: ZoneID
        public var scope: String
        public var recordName: String?
        public var collapseID: String?
        public var payload: String
        /// When the notification was logged, in milliseconds (for the delivery lag).
        public var loggedAt: Int64
        /// The trace of the write that caused it (`TraceContext`), nil when it was not traced.
        public var traceParent: String?
    }

    /// Registers a webhook for a container with a new secret; returns it (the secret is shown once).
    public func createWebhook(container: String, url: String, logger: Logger) async throws -> Webhook {
        var generator = SystemRandomNumberGenerator()
        let webhook = Webhook(webhookID: UUID(), container: container, url: url, secret: (0..<32).map { _ in .random(in: .min ... .max, using: &generator) })
        try await store.withConnection { connection in
            try await connection.query("""
                INSERT INTO webhooks (webhook_id, container, url, secret) VALUES (\(webhook.webhookID), \(container), \(url), \(Data(webhook.secret)))
                """, logger: logger)
        }
        return webhook
    }

    /// The webhooks of a container (all containers when nil).
    public func webhooks(container: String?, logger: Logger) async throws -> [Webhook] {
        try await store.withConnection { connection in
            let rows = try await connection.query("""
                SELECT webhook_id, container, url, secret FROM webhooks WHERE \(container)::text IS NULL OR container = \(container) ORDER BY created_at
                """, logger: logger)
            var found: [Webhook] = []
            for try await (id, container, url, secret) in rows.decode((UUID, String, String, Data).self) {
                found.append(Webhook(webhookID: id, container: container, url: url, secret: Array(secret)))
            }
            return found
        }
    }

    /// One webhook, by id.
    public func webhook(_ id: UUID, logger: Logger) async throws -> Webhook? {
        try await store.withConnection { connection in
            let rows = try await connection.query(
                "SELECT webhook_id, container, url, secret FROM webhooks WHERE webhook_id = \(id)", logger: logger)
            for try await (id, container, url, secret) in rows.decode((UUID, String, String, Data).self) {
                return Webhook(webhookID: id, container: container, url: url, secret: Array(secret))
            }
            return nil
        }
    }

    /// Removes a webhook and its pending deliveries; false when there was none.
    public func deleteWebhook(_ id: UUID, logger: Logger) async throws -> Bool {
        try await store.serializable(logger: logger) { transaction in
            try await transaction.connection.query(
                "DELETE FROM notification_deliveries WHERE channel = 'webhook' AND target = \(id.uuidString.lowercased()) AND state = 'pending'",
                logger: transaction.logger)
            return try await !collect(transaction.connection.query("DELETE FROM webhooks WHERE webhook_id = \(id) RETURNING 1", logger: transaction.logger)
                , as: Int.self).isEmpty
        }
    }

    /// Sets (or replaces) a container's APNs key.
    public func setAPNsKey(_ key: APNsKey, logger: Logger) async throws {
        try await store.withConnection { connection in
            try await connection.query("""
                INSERT INTO apns_credentials (container, team_id, key_id, private_key, topic)
                VALUES (\(key.container), \(key.teamID), \(key.keyID), \(key.privateKey), \(key.topic))
                ON CONFLICT (container) DO UPDATE SET team_id = EXCLUDED.team_id, key_id = EXCLUDED.key_id,
                    private_key = EXCLUDED.private_key, topic = EXCLUDED.topic, created_at = now()
                """, logger: logger)
        }
    }

    /// A container's APNs key, if it has one.
    public func apnsKey(container: String, logger: Logger) async throws -> APNsKey? {
        try await store.withConnection { connection in
            let rows = try await connection.query(
                "SELECT team_id, key_id, private_key, topic FROM apns_credentials WHERE container = \(container)", logger: logger)
            for try await (team, key, pem, topic) in rows.decode((String, String, String, String).self) {
                return APNsKey(container: container, teamID: team, keyID: key, privateKey: pem, topic: topic)
            }
            return nil
        }
    }

    /// Claims due deliveries: at most `limit`, and at most `perTarget` for any one target, so a slow
    /// receiver holds only a few of the dispatcher's slots. A claimed delivery is not due again
    /// until `lease` passes (a dispatcher that dies mid-send leaves it to be sent again).
    /// Targets in `excluding` (those with `perTarget` deliveries already in flight) are left alone.
    public func claim(limit: Int, perTarget: Int, excluding: [String] = [], lease: Duration, logger: Logger) async throws -> [Due] {
        let leaseMilliseconds = Int64(lease / .milliseconds(1))
        return try await store.withConnection { connection in
            // Crosses owners: the dispatcher claims the due deliveries of every subscriber on its node.
            let rows = try await connection.query("""
                WITH due AS (
                    SELECT delivery_id FROM (
                        SELECT delivery_id, row_number() OVER (PARTITION BY target ORDER BY next_attempt_at) AS rank
                        FROM (SELECT delivery_id, target, next_attempt_at FROM notification_deliveries
                              WHERE state = 'pending' AND next_attempt_at <= now() AND NOT (target = ANY(\(excluding)::text[]))
                              ORDER BY next_attempt_at LIMIT \(limit * 4)
                              FOR UPDATE SKIP LOCKED) AS candidates) AS ranked
                    WHERE rank <= \(perTarget) LIMIT \(limit)),
                claimed AS (
                    UPDATE notification_deliveries d SET next_attempt_at = now() + \(leaseMilliseconds) * interval '1 millisecond'
                    FROM due WHERE d.delivery_id = due.delivery_id
                    RETURNING d.delivery_id, d.channel, d.target, d.attempts, d.notification_id)
                SELECT c.delivery_id, c.channel, c.target, c.attempts, c.notification_id, n.container, n.environment, n.subscriber,
                       n.subscription_id, n.notification_type, n.reason, n.zone_name, n.zone_owner, n.scope, n.record_name, n.collapse_id,
                       n.payload::text, (extract(epoch FROM n.created_at) * 1000)::bigint, n.trace_parent
                FROM claimed c JOIN notifications n ON n.notification_id = c.notification_id
                """, logger: logger)
            var due: [Due] = []
            for try await row in rows.decode(
                (Int64, String, String, Int, UUID, String, String, String, String, String, String?, String, String, String, String?, String?, String, Int64, String?).self
            ) {
                due.append(Due(
                    deliveryID: row.0, channel: row.1, target: row.2, attempts: row.3, notificationID: row.4, container: row.5,
                    environment: row.6, subscriber: row.7, subscriptionID: row.8, type: row.9, reason: row.10,
                    zoneID: ZoneID(zoneName: row.11, ownerRecordName: row.12), scope: row.13, recordName: row.14, collapseID: row.15,
                    payload: row.16, loggedAt: row.17, traceParent: row.18))
            }
            return due
        }
    }

    /// What became of one attempt.
    public enum Result: Sendable, Hashable {
        case delivered
        /// Try again after `delay`.
        case retry(reason: String, delay: Duration)
        /// Give up for good (also when attempts ran out).
        case dead(reason: String)
        /// The target is gone (an unregistered device): drop the delivery and the device token.
        case unregistered(reason: String)
    }

    /// Records the outcome of an attempt.
    public func complete(_ due: Due, _ result: Result, logger: Logger) async throws {
        try await store.serializable(logger: logger) { transaction in
            let connection = transaction.connection
            let id = due.deliveryID
            switch result {
            case .delivered:
                try await connection.query("""
                    UPDATE notification_deliveries SET state = 'delivered', attempts = attempts + 1, delivered_at = now(), last_error = NULL
                    WHERE delivery_id = \(id)
                    """, logger: transaction.logger)
            case .retry(let reason, let delay):
                let milliseconds = Int64(delay / .milliseconds(1))
                try await connection.query("""
                    UPDATE notification_deliveries SET attempts = attempts + 1, last_error = \(String(reason.prefix(500))),
                        next_attempt_at = now() + \(milliseconds) * interval '1 millisecond'
                    WHERE delivery_id = \(id)
                    """, logger: transaction.logger)
            case .dead(let reason), .unregistered(let reason):
                try await connection.query("""
                    UPDATE notification_deliveries SET state = 'dead', attempts = attempts + 1, last_error = \(String(reason.prefix(500)))
                    WHERE delivery_id = \(id)
                    """, logger: transaction.logger)
                if case .unregistered = result, let colon = due.target.firstIndex(of: ":") {
                    // Crosses owners: APNs names only the device token it refused (each node removes its own
                    // rows of it, when sharded).
                    try await connection.query("""
                        DELETE FROM device_tokens
                        WHERE container = \(due.container) AND environment = \(due.environment)
                          AND apns_environment = \(String(due.target[..<colon])) AND device_token = \(String(due.target[due.target.index(after: colon)...]))
                        """, logger: transaction.logger)
                }
            }
        }
    }

    /// Waits until a pending delivery is due: listens for commits that add deliveries first, then
    /// looks for the earliest due one, so a delivery added in between is not missed. Returns at
    /// once when one is due, else after a notification, the earliest due time or `timeout`.
    public func waitForDeliveries(upTo timeout: Duration, logger: Logger) async throws {
        try await store.withDedicatedConnection { connection in
            try await connection.listen(on: NotificationStore.deliveryChannel) { notifications in
                let rows = try await connection.query("""
                    SELECT (extract(epoch FROM min(next_attempt_at) - now()) * 1000)::float8 FROM notification_deliveries WHERE state = 'pending'
                    """, logger: logger)
                var wait = timeout
                for try await milliseconds in rows.decode(Double?.self) {
                    if let milliseconds { wait = min(wait, .milliseconds(Int64(max(0, milliseconds.rounded(.up))))) }
                }
                guard wait > .zero else { return }
                let until = wait
                await withTaskGroup(of: Void.self) { group in
                    group.addTask { do { for try await _ in notifications { return } } catch {} }
                    group.addTask { try? await Task.sleep(for: until) }
                    await group.next()
                    group.cancelAll()
                }
            }
        }
    }

    /// Deliveries by channel and state (for /metrics and docs/operations.md).
    public func counts(logger: Logger) async throws -> [String: [String: Int64]] {
        try await store.withConnection { connection in
            var counts: [String: [String: Int64]] = [:]
            let rows = try await connection.query(
                "SELECT channel, state, count(*) FROM notification_deliveries GROUP BY 1, 2", logger: logger)
            for try await (channel, state, count) in rows.decode((String, String, Int64).self) { counts[channel, default: [:]][state] = count }
            return counts
        }
    }
}
