import Foundation
import Logging
import PostgresNIO
import StratusCore

/// What `stratus export` reads from the current tables (never from the event log), a page at a
/// time in key order so a container of any size is walked in bounded memory, and the one row
/// `stratus import` writes itself: a user of the directory (zones, records, shares and
/// subscriptions go through their stores' write paths).
public struct ArchiveStore: Sendable {
    let store: PostgresStore

    /// Creates the store.
    public init(store: PostgresStore) { self.store = store }

    /// Whether the container exists.
    public func containerExists(_ container: String, logger: Logger) async throws -> Bool {
        try await store.withConnection { connection in
            try await !collect(connection.query("SELECT 1 FROM containers WHERE container = \(container)", logger: logger), as: Int.self).isEmpty
        }
    }

    /// The container's users after `after` (by record name), at most `limit`; only `user` when given.
    public func users(container: String, user: String?, after: String, limit: Int, logger: Logger) async throws -> [ArchiveUser] {
        try await store.withConnection { connection in
            let rows = try await connection.query("""
                SELECT user_record_name, login, email, given_name, family_name, discoverable FROM users
                WHERE container = \(container) AND user_record_name > \(after) AND (\(user)::text IS NULL OR user_record_name = \(user))
                ORDER BY user_record_name LIMIT \(limit)
                """, logger: logger)
            var users: [ArchiveUser] = []
            for try await row in rows.decode((String, String, String?, String?, String?, Bool).self) {
                users.append(ArchiveUser(userRecordName: row.0, login: row.1, emailAddress: row.2, givenName: row.3, familyName: row.4, discoverable: row.5))
            }
            return users
        }
    }

    /// Where a walk over zones stands: after this environment, scope, owner and zone name.
    public struct ZonePosition: Sendable, Hashable {
        public var environment = ""
        public var scope = ""
        public var owner = ""
        public var zoneName = ""

        /// The start of a walk.
        public init() {}

        /// The position after a zone.
        public init(_ zone: ArchiveZone) {
            environment = zone.environment.rawValue
            scope = zone.scope.rawValue
            owner = zone.owner
            zoneName = zone.zoneName
        }
    }

    /// The container's zones that hold something, after `after`, at most `limit`, in key order:
    /// the live custom zones, and each default zone with a record. For a user's export, only their
    /// private database's zones and the public default zone (where only their records are read).
    /// `records` of each is left empty for the caller to name.
    public func zones(container: String, user: String?, after: ZonePosition, limit: Int, logger: Logger) async throws -> [ArchiveZone] {
        try await store.withConnection { connection in
            // Crosses owners: a container's export walks every database of it (each node's, when sharded).
            let rows = try await connection.query("""
                SELECT environment, scope, owner, zone_name, ttl FROM (
                    SELECT environment, scope, owner, zone_name, default_time_to_live AS ttl FROM zones
                    WHERE container = \(container) AND NOT deleted AND zone_name <> \(ZoneID.defaultZoneName) AND scope = 'private'
                      AND (\(user)::text IS NULL OR owner = \(user))
                    UNION
                    SELECT DISTINCT environment, scope, owner, zone_name, NULL::bigint FROM records
                    WHERE container = \(container) AND zone_name = \(ZoneID.defaultZoneName) AND scope IN ('private', 'public')
                      AND (\(user)::text IS NULL OR owner = \(user) OR (scope = 'public' AND created_by = \(user)))
                ) AS found
                WHERE (environment, scope, owner, zone_name) > (\(after.environment), \(after.scope), \(after.owner), \(after.zoneName))
                ORDER BY environment, scope, owner, zone_name LIMIT \(limit)
                """, logger: logger)
            var zones: [ArchiveZone] = []
            for try await row in rows.decode((String, String, String, String, Int64?).self) {
                guard let environment = Environment(rawValue: row.0), let scope = DatabaseScope(rawValue: row.1) else { continue }
                zones.append(ArchiveZone(environment: environment, scope: scope, owner: row.2, zoneName: row.3, defaultTimeToLive: row.4, records: []))
            }
            return zones
        }
    }

    /// The names of a zone's live records after `after`, at most `limit`, in order; only those
    /// `createdBy` created when given (a user's public records).
    public func recordNames(
        zone: ZoneID, in database: DatabaseID, createdBy: String?, after: String, limit: Int, logger: Logger
    ) async throws -> [String] {
        try await store.withConnection { connection in
            let rows = try await connection.query("""
                SELECT record_name FROM records
                WHERE \(zone: zone.zoneName, of: database) AND record_name > \(after) AND (\(createdBy)::text IS NULL OR created_by = \(createdBy))
                  AND \(unescaped: RecordExpirySQL.live)
                ORDER BY record_name LIMIT \(limit)
                """, logger: logger)
            return try await collect(rows, as: String.self)
        }
    }

    /// Where a walk over subscriptions stands.
    public struct SubscriptionPosition: Sendable, Hashable {
        public var key: [String] = ["", "", "", "", ""]

        /// The start of a walk.
        public init() {}
    }

    /// The container's subscriptions after `after`, at most `limit`, in key order; only those of
    /// `user`'s making when given.
    public func subscriptions(
        container: String, user: String?, after: inout SubscriptionPosition, limit: Int, logger: Logger
    ) async throws -> [ArchiveSubscription] {
        let start = after.key
        let found: [(ArchiveSubscription, [String])] = try await store.withConnection { connection in
            // Crosses owners: a container's export walks every database of it (each node's, when sharded).
            let rows = try await connection.query("""
                SELECT environment, scope, owner, subscriber, subscription_id, definition::text FROM subscriptions
                WHERE container = \(container) AND (\(user)::text IS NULL OR subscriber = \(user))
                  AND (environment, scope, owner, subscriber, subscription_id) > (\(start[0]), \(start[1]), \(start[2]), \(start[3]), \(start[4]))
                ORDER BY environment, scope, owner, subscriber, subscription_id LIMIT \(limit)
                """, logger: logger)
            var found: [(ArchiveSubscription, [String])] = []
            for try await row in rows.decode((String, String, String, String, String, String).self) {
                guard let environment = Environment(rawValue: row.0), let scope = DatabaseScope(rawValue: row.1) else { continue }
                let definition = try EventCoding.decoder.decode(JSONValue.self, from: Data(row.5.utf8))
                found.append((ArchiveSubscription(environment: environment, scope: scope, owner: row.2, subscriber: row.3, definition: definition),
                              [row.0, row.1, row.2, row.3, row.4]))
            }
            return found
        }
        if let last = found.last { after.key = last.1 }
        return found.map(\.0)
    }

    /// Adds an archived user to the directory under the same record name, without a password (the
    /// user sets one again, or signs in through a provider). A user already there with that record
    /// name and login is left as it is; a login or email address taken by another user is refused.
    public func restore(_ user: ArchiveUser, container: String, logger: Logger) async throws {
        let login = try UserStore.validate(login: user.login)
        try await store.withConnection { connection in
            let existing = try await collect(connection.query("""
                SELECT login FROM users WHERE container = \(container) AND user_record_name = \(user.userRecordName)
                """, logger: logger), as: String.self)
            if let found = existing.first {
                guard found == login else {
                    throw StratusError(.exists, "the user '\(ClientText.excerpt(user.userRecordName))' exists in the target with another login")
                }
                return
            }
            let rows = try await connection.query("""
                INSERT INTO users (container, login, user_record_name, password_hash, email, given_name, family_name, discoverable)
                SELECT \(container), \(login), \(user.userRecordName), \(PasswordHash.noPassword), \(user.emailAddress), \(user.givenName),
                       \(user.familyName), \(user.discoverable)
                FROM containers c WHERE c.container = \(container)
                ON CONFLICT DO NOTHING RETURNING 1
                """, logger: logger)
            for try await _ in rows { return }
            throw StratusError(.exists, "the login or email address of '\(ClientText.excerpt(user.userRecordName))' is another user's in the target")
        }
    }
}
