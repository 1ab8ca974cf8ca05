import Foundation
import Logging
import PostgresNIO
import StratusConnections
import StratusCore

/// The identities of the user directory: email addresses, names and discoverability, and the
/// lookups of users/caller, users/discover and users/lookup/*. Lookups find discoverable users only.
public struct UserDirectory: Sendable {
    let store: PostgresStore

    /// Creates the directory's identity store.
    public init(store: PostgresStore) { self.store = store }

    private typealias Row = (String, String?, String?, String?, Bool)

    /// The columns every identity query selects, in `Row`'s order.
    private static let columns = "user_record_name, email, given_name, family_name, discoverable"

    /// The identities a query selecting `columns` finds.
    private func identities(_ query: PostgresQuery, logger: Logger) async throws -> [UserIdentity] {
        try await store.withConnection { connection in
            var found: [UserIdentity] = []
            for try await row in try await connection.query(query, logger: logger).decode(Row.self) {
                found.append(UserIdentity(
                    userRecordName: row.0, emailAddress: row.1, nameComponents: NameComponents(givenName: row.2, familyName: row.3), discoverable: row.4))
            }
            return found
        }
    }

    /// The identity of a user of the container's directory; nil for a user the directory does not
    /// hold (a server key's user, or one a development token named).
    public func identity(container: String, userRecordName: String, logger: Logger) async throws -> UserIdentity? {
        try await identities(
            "SELECT \(unescaped: Self.columns) FROM users WHERE container = \(container) AND user_record_name = \(userRecordName)", logger: logger
        ).first
    }

    /// The discoverable users with these email addresses (compared without regard to capitals).
    public func discoverable(container: String, emailAddresses: [String], logger: Logger) async throws -> [UserIdentity] {
        guard !emailAddresses.isEmpty else { return [] }
        let lowered = emailAddresses.map { $0.lowercased() }
        return try await identities(
            "SELECT \(unescaped: Self.columns) FROM users WHERE container = \(container) AND lower(email) = ANY(\(lowered)) AND discoverable",
            logger: logger)
    }

    /// The discoverable users with these user record names.
    public func discoverable(container: String, userRecordNames: [String], logger: Logger) async throws -> [UserIdentity] {
        guard !userRecordNames.isEmpty else { return [] }
        return try await identities(
            "SELECT \(unescaped: Self.columns) FROM users WHERE container = \(container) AND user_record_name = ANY(\(userRecordNames)) AND discoverable",
            logger: logger)
    }

    /// The first `limit` discoverable users of the container, in user record name order.
    public func discoverable(container: String, limit: Int, logger: Logger) async throws -> [UserIdentity] {
        let limit = max(0, limit)
        return try await identities(
            "SELECT \(unescaped: Self.columns) FROM users WHERE container = \(container) AND discoverable ORDER BY user_record_name LIMIT \(limit)",
            logger: logger)
    }

    /// Changes a directory user's identity: NOT_FOUND for an unknown login, EXISTS when another
    /// user of the container has the email address.
    public func change(container: String, login: String, _ change: UserIdentityChange, logger: Logger) async throws {
        let login = try UserStore.validate(login: login)
        let change = try change.validated()
        guard !change.isEmpty else { return }
        do {
            try await store.withConnection { connection in
                let rows = try await connection.query(
                    """
                    UPDATE users SET
                        email = CASE WHEN \(change.emailAddress)::text IS NULL THEN email ELSE NULLIF(\(change.emailAddress)::text, '') END,
                        given_name = CASE WHEN \(change.givenName)::text IS NULL THEN given_name ELSE NULLIF(\(change.givenName)::text, '') END,
                        family_name = CASE WHEN \(change.familyName)::text IS NULL THEN family_name ELSE NULLIF(\(change.familyName)::text, '') END,
                        discoverable = COALESCE(\(change.discoverable)::boolean, discoverable),
                        updated_at = now()
                    WHERE container = \(container) AND login = \(login) RETURNING 1
                    """, logger: logger)
                for try await _ in rows { return }
                throw StratusError(.notFound, "no such login in this container")
            }
        } catch where PostgresErrors.sqlState(error) == "23505" {
            throw StratusError(.exists, "another user of this container has that email address")
        }
    }

    /// Sets the container's sign-up option: whether users the directory gains from now on start
    /// discoverable. Returns false when the container does not exist.
    @discardableResult
    public func setDiscoverableByDefault(container: String, _ discoverable: Bool, logger: Logger) async throws -> Bool {
        try await store.withConnection { connection in
            let rows = try await connection.query(
                "UPDATE containers SET users_discoverable_by_default = \(discoverable) WHERE container = \(container) RETURNING 1", logger: logger)
            for try await _ in rows { return true }
            return false
        }
    }
}
