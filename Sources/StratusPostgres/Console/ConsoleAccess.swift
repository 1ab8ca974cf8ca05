import Foundation
import Logging
import PostgresNIO
import StratusCore

/// What the console's access page lists and changes for one container: its API tokens (by the
/// digest the database keeps: a token itself is shown once, when made), its server-to-server keys
/// and its user directory. Keys and users are made through `ServerKeyStore` and `UserStore`.
public struct ConsoleAccess: Sendable {
    let store: PostgresStore

    /// Creates the reader.
    public init(store: PostgresStore) { self.store = store }

    /// An API token as listed: its digest (hex, not a secret), label and age.
    public struct APITokenEntry: Sendable, Equatable {
        public var digest: String
        public var label: String
        public var createdAt: Date
    }

    /// The container's API tokens, newest first, at most `limit`.
    public func apiTokens(container: String, limit: Int, logger: Logger) async throws -> [APITokenEntry] {
        try await store.withConnection { connection in
            let rows = try await connection.query(
                "SELECT encode(token_digest, 'hex'), label, created_at FROM api_tokens WHERE container = \(container) ORDER BY created_at DESC LIMIT \(limit)",
                logger: logger)
            var tokens: [APITokenEntry] = []
            for try await (digest, label, created) in rows.decode((String, String, Date).self) {
                tokens.append(APITokenEntry(digest: digest, label: label, createdAt: created))
            }
            return tokens
        }
    }

    /// Revokes one of the container's API tokens by its digest: calls with it fail from now on.
    /// False when the container has no such token.
    public func revokeAPIToken(container: String, digest: String, logger: Logger) async throws -> Bool {
        let digest = digest.lowercased()
        guard digest.utf8.count == 64, digest.utf8.allSatisfy({ (48...57).contains($0) || (97...102).contains($0) }) else { return false }
        return try await store.withConnection { connection in
            let rows = try await connection.query(
                "DELETE FROM api_tokens WHERE container = \(container) AND token_digest = decode(\(digest), 'hex') RETURNING 1", logger: logger)
            for try await _ in rows { return true }
            return false
        }
    }

    /// A server-to-server key as listed.
    public struct ServerKeyEntry: Sendable, Equatable {
        public var keyID: String
        public var label: String
        public var createdAt: Date
        public var revokedAt: Date?
    }

    /// The container's server-to-server keys, newest first, at most `limit`.
    public func serverKeys(container: String, limit: Int, logger: Logger) async throws -> [ServerKeyEntry] {
        try await store.withConnection { connection in
            let rows = try await connection.query(
                "SELECT key_id, label, created_at, revoked_at FROM server_keys WHERE container = \(container) ORDER BY created_at DESC LIMIT \(limit)",
                logger: logger)
            var keys: [ServerKeyEntry] = []
            for try await (id, label, created, revoked) in rows.decode((String, String, Date, Date?).self) {
                keys.append(ServerKeyEntry(keyID: id, label: label, createdAt: created, revokedAt: revoked))
            }
            return keys
        }
    }

    /// Revokes one of the container's active server-to-server keys; false when it has no such key.
    public func revokeServerKey(container: String, keyID: String, logger: Logger) async throws -> Bool {
        try await store.withConnection { connection in
            let rows = try await connection.query(
                """
                UPDATE server_keys SET revoked_at = now() WHERE container = \(container) AND key_id = \(keyID.lowercased()) AND revoked_at IS NULL
                RETURNING 1
                """, logger: logger)
            for try await _ in rows { return true }
            return false
        }
    }

    /// A user of the container's directory as listed (never the password hash).
    public struct UserEntry: Sendable, Equatable {
        public var login: String
        public var userRecordName: String
        public var createdAt: Date
    }

    /// The container's directory users in login order after `after`, at most `limit`.
    public func users(container: String, after: String?, limit: Int, logger: Logger) async throws -> [UserEntry] {
        try await store.withConnection { connection in
            let rows = try await connection.query(
                """
                SELECT login, user_record_name, created_at FROM users WHERE container = \(container) AND login > \(after ?? "")
                ORDER BY login LIMIT \(limit)
                """, logger: logger)
            var users: [UserEntry] = []
            for try await (login, name, created) in rows.decode((String, String, Date).self) {
                users.append(UserEntry(login: login, userRecordName: name, createdAt: created))
            }
            return users
        }
    }
}
