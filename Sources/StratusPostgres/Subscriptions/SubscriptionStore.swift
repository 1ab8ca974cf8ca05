import Foundation
import Logging
import PostgresNIO
import StratusCore

/// Subscriptions: `subscriptions/modify`, `list` and `lookup` for the API, and the candidates of an
/// event for stratus-subscriptions.
public struct SubscriptionStore: Sendable {
    let store: PostgresStore

    /// Creates the subscription store.
    public init(store: PostgresStore) { self.store = store }

    /// One operation of `subscriptions/modify`.
    public enum Operation: Sendable {
        /// Save (create or replace) a subscription.
        case create(Subscription)
        /// Replace a subscription that exists.
        case update(Subscription)
        /// Delete a subscription that exists.
        case delete(subscriptionID: String)
    }

    /// The outcome of one operation: the subscription as saved, or the id of the deleted one.
    public enum Outcome: Sendable, Hashable {
        case saved(Subscription)
        case deleted(subscriptionID: String)
    }

    /// Applies the operations of one request in one transaction; each gets its own outcome, and a
    /// failed one changes nothing of its own. At most `maxPerSubscriber` subscriptions per user and database.
    public func modify(
        _ operations: [Operation], in database: DatabaseID, subscriber: String, maxPerSubscriber: Int, logger: Logger
    ) async throws -> [Result<Outcome, StratusError>] {
        try await store.serializable(logger: logger) { transaction in
            let connection = transaction.connection
            var outcomes: [Result<Outcome, StratusError>] = []
            for operation in operations {
                switch operation {
                case .create(let subscription), .update(let subscription):
                    let exists = try await Self.exists(subscription.subscriptionID, database: database, subscriber: subscriber, on: connection, logger: logger)
                    if case .update = operation, !exists {
                        outcomes.append(.failure(StratusError(.notFound, "Subscription '\(ClientText.excerpt(subscription.subscriptionID))' does not exist")))
                        continue
                    }
                    if let zone = subscription.zoneID, !zone.isDefaultZone,
                       try await !Self.zoneExists(zone.zoneName, database: database, on: connection, logger: logger) {
                        outcomes.append(.failure(StratusError(.zoneNotFound, "Zone '\(ClientText.excerpt(zone.zoneName))' does not exist")))
                        continue
                    }
                    if !exists {
                        let count = try await collect(connection.query("""
                            SELECT count(*) FROM subscriptions
                            WHERE container = \(database.container) AND environment = \(database.environment.rawValue) AND scope = \(database.scope.rawValue)
                              AND owner = \(database.owner) AND subscriber = \(subscriber)
                            """, logger: logger), as: Int64.self).first ?? Int64(0)
                        guard count < maxPerSubscriber else {
                            outcomes.append(.failure(StratusError(.limitExceeded,
                                "A user may have at most \(maxPerSubscriber) subscriptions in a database; delete one first")))
                            continue
                        }
                    }
                    let definition = String(decoding: subscription.json.serialized(), as: UTF8.self)
                    try await connection.query("""
                        INSERT INTO subscriptions (container, environment, scope, owner, subscriber, subscription_id, subscription_type,
                                                   zone_name, record_type, definition, created_at)
                        VALUES (\(database.container), \(database.environment.rawValue), \(database.scope.rawValue), \(database.owner), \(subscriber),
                                \(subscription.subscriptionID), \(subscription.type.rawValue), \(subscription.zoneID?.zoneName),
                                \(subscription.query?.recordType), \(definition)::jsonb, (extract(epoch FROM now()) * 1000)::bigint)
                        ON CONFLICT (container, environment, scope, owner, subscriber, subscription_id) DO UPDATE SET
                            subscription_type = EXCLUDED.subscription_type, zone_name = EXCLUDED.zone_name, record_type = EXCLUDED.record_type,
                            definition = EXCLUDED.definition, created_at = EXCLUDED.created_at
                        """, logger: logger)
                    outcomes.append(.success(.saved(subscription)))
                case .delete(let subscriptionID):
                    let rows = try await collect(connection.query("""
                        DELETE FROM subscriptions
                        WHERE container = \(database.container) AND environment = \(database.environment.rawValue) AND scope = \(database.scope.rawValue)
                          AND owner = \(database.owner) AND subscriber = \(subscriber) AND subscription_id = \(subscriptionID)
                        RETURNING 1
                        """, logger: logger), as: Int.self)
                    outcomes.append(rows.isEmpty
                        ? .failure(StratusError(.notFound, "Subscription '\(ClientText.excerpt(subscriptionID))' does not exist"))
                        : .success(.deleted(subscriptionID: subscriptionID)))
                }
            }
            return outcomes
        }
    }

    /// The user's subscriptions in a database, by id.
    public func list(in database: DatabaseID, subscriber: String, logger: Logger) async throws -> [Subscription] {
        try await store.withConnection { connection in
            let rows = try await connection.query("""
                SELECT definition::text FROM subscriptions
                WHERE container = \(database.container) AND environment = \(database.environment.rawValue) AND scope = \(database.scope.rawValue)
                  AND owner = \(database.owner) AND subscriber = \(subscriber)
                ORDER BY subscription_id
                """, logger: logger)
            var subscriptions: [Subscription] = []
            for try await definition in rows.decode(String.self) {
                subscriptions.append(try Self.subscription(definition, database: database))
            }
            return subscriptions
        }
    }

    /// The named subscriptions of the user in a database (absent ones are missing from the answer).
    public func lookup(_ ids: [String], in database: DatabaseID, subscriber: String, logger: Logger) async throws -> [String: Subscription] {
        try await store.withConnection { connection in
            let rows = try await connection.query("""
                SELECT subscription_id, definition::text FROM subscriptions
                WHERE container = \(database.container) AND environment = \(database.environment.rawValue) AND scope = \(database.scope.rawValue)
                  AND owner = \(database.owner) AND subscriber = \(subscriber) AND subscription_id = ANY(\(ids))
                """, logger: logger)
            var found: [String: Subscription] = [:]
            for try await (id, definition) in rows.decode((String, String).self) {
                found[id] = try Self.subscription(definition, database: database)
            }
            return found
        }
    }

    /// The subscriptions an event of `zoneName` in `database` may fire: query subscriptions of the
    /// record type (nil: none) for that zone or every zone, zone subscriptions of the zone, and the
    /// database's database subscriptions. Served by `subscriptions_by_target`, so its cost does not
    /// grow with unrelated subscriptions.
    public static func candidates(
        database: DatabaseID, zoneName: String, recordType: String?, in transaction: Transaction
    ) async throws -> [OwnedSubscription] {
        let rows = try await transaction.prepared("""
            SELECT subscriber, definition::text, created_at FROM subscriptions
            WHERE container = \(database.container) AND environment = \(database.environment.rawValue) AND scope = \(database.scope.rawValue)
              AND owner = \(database.owner)
              AND ((record_type = \(recordType) AND (zone_name = \(zoneName) OR zone_name IS NULL))
                   OR (record_type IS NULL AND (zone_name = \(zoneName) OR zone_name IS NULL)))
            """)
        var owned: [OwnedSubscription] = []
        for try await (subscriber, definition, createdAt) in rows.decode((String, String, Int64).self) {
            // A definition that no longer reads (e.g. stricter rules of a later release) fires nothing.
            guard let subscription = try? subscription(definition, database: database) else { continue }
            owned.append(OwnedSubscription(database: database, subscriber: subscriber, subscription: subscription, createdAt: createdAt))
        }
        return owned
    }

    /// The `database` subscriptions the participants saved in their shared databases of one
    /// container and environment (the only kind a shared database takes): what a change of a zone
    /// shared with them fires. Served by the table's key (its leading columns, `owner` a list).
    public static func sharedDatabaseCandidates(
        container: String, environment: StratusCore.Environment, participants: [String], in transaction: Transaction
    ) async throws -> [OwnedSubscription] {
        guard !participants.isEmpty else { return [] }
        let rows = try await transaction.connection.query("""
            SELECT owner, subscriber, definition::text, created_at FROM subscriptions
            WHERE container = \(container) AND environment = \(environment.rawValue) AND scope = \(DatabaseScope.shared.rawValue)
              AND owner = ANY(\(participants)) AND subscription_type = \(SubscriptionType.database.rawValue)
            """, logger: transaction.logger)
        var owned: [OwnedSubscription] = []
        for try await (owner, subscriber, definition, createdAt) in rows.decode((String, String, String, Int64).self) {
            let database = DatabaseID(container: container, environment: environment, scope: .shared, owner: owner)
            guard let subscription = try? subscription(definition, database: database) else { continue }
            owned.append(OwnedSubscription(database: database, subscriber: subscriber, subscription: subscription, createdAt: createdAt))
        }
        return owned
    }

    /// Deletes a `firesOnce` subscription that fired — the very one (same save time), so a later
    /// save of the same id survives a replay of the old event.
    public static func deleteFired(_ owned: OwnedSubscription, in transaction: Transaction) async throws {
        let database = owned.database
        try await transaction.connection.query("""
            DELETE FROM subscriptions
            WHERE container = \(database.container) AND environment = \(database.environment.rawValue) AND scope = \(database.scope.rawValue)
              AND owner = \(database.owner) AND subscriber = \(owned.subscriber)
              AND subscription_id = \(owned.subscription.subscriptionID) AND created_at = \(owned.createdAt)
            """, logger: transaction.logger)
    }

    /// How many subscriptions exist, by type (for /metrics).
    public func counts(logger: Logger) async throws -> [String: Int64] {
        try await store.withConnection { connection in
            var counts: [String: Int64] = [:]
            // Crosses owners: an operator's figures over a whole container or all of them (asked of every node, when sharded).
            let rows = try await connection.query("SELECT subscription_type, count(*) FROM subscriptions GROUP BY 1", logger: logger)
            for try await (type, count) in rows.decode((String, Int64).self) { counts[type] = count }
            return counts
        }
    }

    static func subscription(_ definition: String, database: DatabaseID) throws -> Subscription {
        let json = try EventCoding.decoder.decode(JSONValue.self, from: Data(definition.utf8))
        return try Subscription.stored(json, scope: database.scope, databaseOwner: database.owner)
    }

    static func exists(_ id: String, database: DatabaseID, subscriber: String, on connection: PostgresConnection, logger: Logger) async throws -> Bool {
        try await !collect(connection.query("""
            SELECT 1 FROM subscriptions
            WHERE container = \(database.container) AND environment = \(database.environment.rawValue) AND scope = \(database.scope.rawValue)
              AND owner = \(database.owner) AND subscriber = \(subscriber) AND subscription_id = \(id)
            """, logger: logger), as: Int.self).isEmpty
    }

    static func zoneExists(_ zoneName: String, database: DatabaseID, on connection: PostgresConnection, logger: Logger) async throws -> Bool {
        try await !collect(connection.query("""
            SELECT 1 FROM zones
            WHERE container = \(database.container) AND environment = \(database.environment.rawValue) AND scope = \(database.scope.rawValue)
              AND owner = \(database.owner) AND zone_name = \(zoneName) AND NOT deleted
            """, logger: logger), as: Int.self).isEmpty
    }
}
