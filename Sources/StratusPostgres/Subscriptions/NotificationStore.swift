import Crypto
import Foundation
import Logging
import PostgresNIO
import StratusCore

/// The per-user notification log: appended by stratus-subscriptions, read by the web courier, the
/// WebSocket push and `notifications/changes`.
public struct NotificationStore: Sendable {
    /// The channel a commit that logged notifications notifies, with `container/environment/subscriber`
    /// as payload, so the API wakes the couriers waiting for that user.
    public static let channel = "stratus_notifications"
    /// The channel a commit that added deliveries notifies; the dispatcher listens on it.
    public static let deliveryChannel = "stratus_deliveries"

    let store: PostgresStore

    /// Creates the notification store.
    public init(store: PostgresStore) { self.store = store }

    /// A logged notification.
    public struct Logged: Sendable, Hashable {
        public var position: Int64
        public var notificationID: UUID
        public var subscriptionID: String
        public var type: String
        public var reason: String?
        public var zoneID: ZoneID
        public var scope: String
        public var recordName: String?
        public var isRead: Bool
        /// The push payload (`aps`, `ck`).
        public var payload: JSONValue
        /// When it was logged, in milliseconds.
        public var createdAt: Int64
        /// The device the change came from, when the subscriber made it (its couriers skip it).
        public var deviceID: String?
    }

    /// Logs drafts in the worker's transaction: each subscriber's next positions, the unread count, a
    /// delivery row per webhook of the container and per registered device (when the container has
    /// an APNs key), and a wake-up for waiting couriers. A draft logged before (same subscription and
    /// dedupe key) is skipped. Returns the drafts that were new.
    public static func log(_ drafts: [NotificationDraft], in transaction: Transaction) async throws -> [NotificationDraft] {
        // A batch's statements are few whatever its size: which drafts are new, the subscribers'
        // positions, the notifications with their deliveries, the wake-ups.
        var keys = Set<DraftKey>()
        let unique = drafts.filter { keys.insert(DraftKey($0)).inserted }
        guard !unique.isEmpty else { return [] }
        let connection = transaction.connection
        let logger = transaction.logger

        // Already logged? (Redelivery, replay.) Checked before taking positions, so positions stay gapless.
        let identities = JSONValue.array(unique.enumerated().map { index, draft in
            var object = draft.identity
            object["i"] = .int(Int64(index))
            return .object(object)
        })
        var seen = Set<Int>()
        for try await index in try await connection.query("""
            SELECT d.i FROM jsonb_to_recordset(\(identities.text)::jsonb) AS d(
                i int, container text, environment text, subscriber text, scope text, owner text, subscription_id text, dedupe_key text)
            WHERE EXISTS (
                SELECT 1 FROM notifications n
                WHERE n.container = d.container AND n.environment = d.environment AND n.subscriber = d.subscriber
                  AND n.scope = d.scope AND n.owner = d.owner AND n.subscription_id = d.subscription_id AND n.dedupe_key = d.dedupe_key)
            """, logger: logger).decode(Int.self) {
            seen.insert(index)
        }
        let new = unique.enumerated().filter { !seen.contains($0.offset) }.map(\.element)
        guard !new.isEmpty else { return [] }

        // Each subscriber's next positions and unread counts, in draft order.
        var added: [SubscriberKey: Int64] = [:]
        for draft in new { added[SubscriberKey(draft), default: 0] += 1 }
        let counts = JSONValue.array(added.map { key, count in
            .object(["container": .string(key.container), "environment": .string(key.environment), "subscriber": .string(key.subscriber), "added": .int(count)])
        })
        var next: [SubscriberKey: (position: Int64, unread: Int64)] = [:]
        for (container, environment, subscriber, last, unread) in try await collect(connection.query("""
            INSERT INTO notification_positions AS p (container, environment, subscriber, last_position, unread)
            SELECT container, environment, subscriber, added, added
            FROM jsonb_to_recordset(\(counts.text)::jsonb) AS c(container text, environment text, subscriber text, added bigint)
            ORDER BY container, environment, subscriber
            ON CONFLICT (container, environment, subscriber)
            DO UPDATE SET last_position = p.last_position + excluded.last_position, unread = p.unread + excluded.unread
            RETURNING container, environment, subscriber, last_position, unread
            """, logger: logger), as: (String, String, String, Int64, Int64).self) {
            let key = SubscriberKey(container: container, environment: environment, subscriber: subscriber)
            let count = added[key] ?? 0
            next[key] = (last - count + 1, unread - count + 1)
        }

        var rows: [JSONValue] = []
        rows.reserveCapacity(new.count)
        for draft in new {
            let key = SubscriberKey(draft)
            guard let (position, unread) = next[key] else { continue }
            next[key] = (position + 1, unread + 1)
            let notificationID = UUID()
            var row = draft.identity
            row["position"] = .int(position)
            row["notification_id"] = .string(notificationID.uuidString)
            row["event_id"] = .int(draft.eventID)
            row["notification_type"] = .string(draft.type.rawValue)
            row["reason"] = draft.reason.map { .string($0.rawValue) } ?? .null
            row["zone_name"] = .string(draft.zoneID.zoneName)
            row["zone_owner"] = .string(draft.zoneID.ownerRecordName)
            row["record_name"] = draft.recordName.map(JSONValue.string) ?? .null
            row["collapse_id"] = draft.collapseID.map(JSONValue.string) ?? .null
            row["device_id"] = draft.deviceID.map(JSONValue.string) ?? .null
            row["trace_parent"] = draft.traceParent.map(JSONValue.string) ?? .null
            row["payload"] = draft.payload(notificationID: notificationID, badge: unread)
            rows.append(.object(row))
        }
        // The notifications, and a delivery per webhook of the container and per registered device
        // (when the container has an APNs key).
        try await connection.query("""
            WITH logged AS (
                INSERT INTO notifications (container, environment, subscriber, position, notification_id, scope, owner, subscription_id,
                                           dedupe_key, event_id, notification_type, reason, zone_name, zone_owner, record_name, collapse_id,
                                           device_id, payload, trace_parent)
                SELECT container, environment, subscriber, position, notification_id, scope, owner, subscription_id,
                       dedupe_key, event_id, notification_type, reason, zone_name, zone_owner, record_name, collapse_id, device_id, payload,
                       trace_parent
                FROM jsonb_to_recordset(\(JSONValue.array(rows).text)::jsonb) AS n(
                    container text, environment text, subscriber text, position bigint, notification_id uuid, scope text, owner text,
                    subscription_id text, dedupe_key text, event_id bigint, notification_type text, reason text, zone_name text,
                    zone_owner text, record_name text, collapse_id text, device_id text, payload jsonb, trace_parent text)
                RETURNING notification_id, container, environment, subscriber)
            INSERT INTO notification_deliveries (notification_id, channel, target)
            SELECT l.notification_id, 'webhook', w.webhook_id::text FROM logged l JOIN webhooks w ON w.container = l.container
            UNION ALL
            SELECT l.notification_id, 'apns', d.apns_environment || ':' || d.device_token
            FROM logged l
            JOIN device_tokens d ON d.container = l.container AND d.environment = l.environment AND d.subscriber = l.subscriber
            JOIN apns_credentials a ON a.container = d.container
            """, logger: logger)
        // Wakes the couriers waiting for these subscribers, and the dispatcher.
        let woken = added.keys.map { "\($0.container)/\($0.environment)/\($0.subscriber)" }.sorted()
        try await connection.query("""
            SELECT pg_notify(\(channel), key) FROM unnest(\(woken)::text[]) AS key
            UNION ALL SELECT pg_notify(\(deliveryChannel), '')
            """, logger: logger)
        return new
    }

    /// A draft's place in the log's uniqueness: the same subscription and change. The client's
    /// subscription id and the dedupe key (which holds zone names) compare by their bytes, as the
    /// log's unique key does: two ids Swift calls equal ("é" and "e" + U+0301) are two subscriptions.
    private struct DraftKey: Hashable {
        var subscriber: SubscriberKey
        var scope: String
        var owner: String
        var subscriptionID: ExactName
        var dedupeKey: ExactName

        init(_ draft: NotificationDraft) {
            subscriber = SubscriberKey(draft)
            scope = draft.owner.database.scope.rawValue
            owner = draft.owner.database.owner
            subscriptionID = ExactName(draft.owner.subscription.subscriptionID)
            dedupeKey = ExactName(draft.dedupeKey)
        }
    }

    /// Whose log a draft goes to.
    private struct SubscriberKey: Hashable {
        var container: String
        var environment: String
        var subscriber: String

        init(container: String, environment: String, subscriber: String) {
            self.container = container
            self.environment = environment
            self.subscriber = subscriber
        }

        init(_ draft: NotificationDraft) {
            self.init(container: draft.owner.database.container, environment: draft.owner.database.environment.rawValue, subscriber: draft.owner.subscriber)
        }
    }

    /// The subscriber's notifications after `position`, oldest first, at most `limit`; and whether more follow.
    public func changes(
        container: String, environment: StratusCore.Environment, subscriber: String, after position: Int64, limit: Int, logger: Logger
    ) async throws -> (notifications: [Logged], moreComing: Bool) {
        try await store.withConnection { connection in
            let rows = try await connection.query("""
                SELECT position, notification_id, subscription_id, notification_type, reason, zone_name, zone_owner, scope, record_name,
                       is_read, payload::text, (extract(epoch FROM created_at) * 1000)::bigint, device_id
                FROM notifications
                WHERE container = \(container) AND environment = \(environment.rawValue) AND subscriber = \(subscriber) AND position > \(position)
                ORDER BY position LIMIT \(limit + 1)
                """, logger: logger)
            var logged: [Logged] = []
            for try await row in rows.decode((Int64, UUID, String, String, String?, String, String, String, String?, Bool, String, Int64, String?).self) {
                let payload = (try? EventCoding.decoder.decode(JSONValue.self, from: Data(row.10.utf8))) ?? .object([:])
                logged.append(Logged(
                    position: row.0, notificationID: row.1, subscriptionID: row.2, type: row.3, reason: row.4,
                    zoneID: ZoneID(zoneName: row.5, ownerRecordName: row.6), scope: row.7, recordName: row.8, isRead: row.9,
                    payload: payload, createdAt: row.11, deviceID: row.12))
            }
            let more = logged.count > limit
            if more { logged.removeLast() }
            return (logged, more)
        }
    }

    /// Marks the subscriber's notifications read; returns the ids that were unread and now are read.
    public func markRead(
        _ ids: [UUID], container: String, environment: StratusCore.Environment, subscriber: String, logger: Logger
    ) async throws -> Set<UUID> {
        try await store.serializable(logger: logger) { transaction in
            let marked = try await collect(transaction.connection.query("""
                UPDATE notifications SET is_read = true
                WHERE container = \(container) AND environment = \(environment.rawValue) AND subscriber = \(subscriber)
                  AND notification_id = ANY(\(ids)) AND NOT is_read
                RETURNING notification_id
                """, logger: transaction.logger), as: UUID.self)
            if !marked.isEmpty {
                try await transaction.connection.query("""
                    UPDATE notification_positions SET unread = greatest(0, unread - \(Int64(marked.count)))
                    WHERE container = \(container) AND environment = \(environment.rawValue) AND subscriber = \(subscriber)
                    """, logger: transaction.logger)
            }
            return Set(marked)
        }
    }

    // MARK: Web courier and device tokens

    /// Who a courier token belongs to and what it has been handed.
    public struct Courier: Sendable, Hashable {
        public var container: String
        public var environment: StratusCore.Environment
        public var subscriber: String
        public var apnsEnvironment: String
        /// The last position handed to this courier.
        public var delivered: Int64
        /// The device the token was made for (`X-Stratus-Device-ID` of `tokens/create`): the
        /// courier skips the notifications of that device's own changes.
        public var deviceID: String?
    }

    /// Makes a courier token for the user; it starts at the user's current position (what was logged
    /// before is fetched with `notifications/changes`). At most `maxPerSubscriber` tokens are kept
    /// per user: the least recently used beyond that are dropped. `deviceID`: the device it is made
    /// for, whose own changes it is not handed.
    public func createCourier(
        container: String, environment: StratusCore.Environment, subscriber: String, apnsEnvironment: String, deviceID: String? = nil,
        maxPerSubscriber: Int, logger: Logger
    ) async throws -> String {
        let token = Self.newToken()
        try await store.serializable(logger: logger) { transaction in
            let connection = transaction.connection
            try await connection.query("""
                INSERT INTO courier_tokens (token_digest, container, environment, subscriber, apns_environment, device_id, delivered)
                VALUES (\(Self.digest(token)), \(container), \(environment.rawValue), \(subscriber), \(apnsEnvironment), \(deviceID),
                        coalesce((SELECT last_position FROM notification_positions
                                  WHERE container = \(container) AND environment = \(environment.rawValue) AND subscriber = \(subscriber)), 0))
                """, logger: transaction.logger)
            try await connection.query("""
                DELETE FROM courier_tokens WHERE token_digest IN (
                    SELECT token_digest FROM courier_tokens
                    WHERE container = \(container) AND environment = \(environment.rawValue) AND subscriber = \(subscriber)
                    ORDER BY last_seen_at DESC OFFSET \(maxPerSubscriber))
                """, logger: transaction.logger)
        }
        return token
    }

    /// The courier a token names, or nil.
    public func courier(token: String, logger: Logger) async throws -> Courier? {
        guard token.utf8.count <= 128 else { return nil }
        return try await store.withConnection { connection in
            // Crosses owners: a courier's token names its subscriber only through its digest; sharded, the
            // directory maps the token to the subscriber's node.
            let rows = try await connection.query("""
                UPDATE courier_tokens SET last_seen_at = now() WHERE token_digest = \(Self.digest(token))
                RETURNING container, environment, subscriber, apns_environment, delivered, device_id
                """, logger: logger)
            for try await (container, environment, subscriber, apns, delivered, device) in rows.decode((String, String, String, String, Int64, String?).self) {
                guard let environment = StratusCore.Environment(rawValue: environment) else { return nil }
                return Courier(
                    container: container, environment: environment, subscriber: subscriber, apnsEnvironment: apns, delivered: delivered, deviceID: device)
            }
            return nil
        }
    }

    /// Records that a courier was handed everything up to `position` (never moves back).
    public func advanceCourier(token: String, to position: Int64, logger: Logger) async throws {
        try await store.withConnection { connection in
            // Crosses owners: a courier's token names its subscriber only through its digest; sharded, the
            // directory maps the token to the subscriber's node.
            try await connection.query("""
                UPDATE courier_tokens SET delivered = greatest(delivered, \(position)), last_seen_at = now() WHERE token_digest = \(Self.digest(token))
                """, logger: logger)
        }
    }

    /// Registers an APNs device token for the user (taking it over from whoever registered it before).
    public func registerDevice(
        container: String, environment: StratusCore.Environment, subscriber: String, apnsEnvironment: String, deviceToken: String,
        maxPerSubscriber: Int, logger: Logger
    ) async throws {
        try await store.serializable(logger: logger) { transaction in
            try await transaction.connection.query("""
                INSERT INTO device_tokens (container, environment, apns_environment, device_token, subscriber)
                VALUES (\(container), \(environment.rawValue), \(apnsEnvironment), \(deviceToken), \(subscriber))
                ON CONFLICT (container, environment, apns_environment, device_token) DO UPDATE SET subscriber = EXCLUDED.subscriber, created_at = now()
                """, logger: transaction.logger)
            try await transaction.connection.query("""
                DELETE FROM device_tokens WHERE (container, environment, apns_environment, device_token) IN (
                    SELECT container, environment, apns_environment, device_token FROM device_tokens
                    WHERE container = \(container) AND environment = \(environment.rawValue) AND subscriber = \(subscriber)
                    ORDER BY created_at DESC OFFSET \(maxPerSubscriber))
                """, logger: transaction.logger)
        }
    }

    static func newToken() -> String {
        var generator = SystemRandomNumberGenerator()
        let bytes = (0..<32).map { _ in UInt8.random(in: .min ... .max, using: &generator) }
        return Data(bytes).base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }

    static func digest(_ token: String) -> Data { Data(SHA256.hash(data: Data(token.utf8))) }
}

extension NotificationStore {
    /// Listens for logged notifications until cancelled, calling `onNotify` with each payload
    /// (`container/environment/subscriber`); holds one connection of its own (never one of the
    /// requests' pool) while it listens. Returns when the connection ends (the caller listens again).
    public func listen(logger: Logger, _ onNotify: @escaping @Sendable (String) -> Void) async throws {
        try await store.withDedicatedConnection { connection in
            try await connection.listen(on: Self.channel) { notifications in
                onNotify("")
                for try await notification in notifications { onNotify(notification.payload) }
            }
        }
    }
}

extension NotificationDraft {
    /// The columns that make a notification unique, as a JSON object for a statement's record set.
    fileprivate var identity: [String: JSONValue] {
        let database = owner.database
        return [
            "container": .string(database.container), "environment": .string(database.environment.rawValue), "subscriber": .string(owner.subscriber),
            "scope": .string(database.scope.rawValue), "owner": .string(database.owner),
            "subscription_id": .string(owner.subscription.subscriptionID), "dedupe_key": .string(dedupeKey),
        ]
    }
}

extension JSONValue {
    /// The JSON text, for a statement parameter.
    fileprivate var text: String { String(decoding: serialized(), as: UTF8.self) }
}
