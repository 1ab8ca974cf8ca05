import Foundation
import Logging
import PostgresNIO
import StratusCore

/// A registered server-to-server key as the API needs it.
public struct ServerKey: Sendable {
    /// The key id (hex SHA-256 of the DER public key).
    public var keyID: String
    /// The container it belongs to.
    public var container: String
    /// The public key.
    public var publicKey: ServerPublicKey
    /// The user record name requests signed with it act as.
    public var userRecordName: String
    /// Whether an operator suspended the container: its requests are refused.
    public var containerSuspended: Bool = false
    /// Whether the key's container is being deleted: its requests are refused.
    public var containerDeleting: Bool = false
    /// The container's own limits.
    public var containerLimits = ContainerLimits()
}

/// Server-to-server keys: registered by an operator, looked up on every signed request.
public struct ServerKeyStore: Sendable {
    let store: PostgresStore

    /// Creates the key store.
    public init(store: PostgresStore) { self.store = store }

    /// Registers a public key for a container; registering the same key again returns the same id.
    /// Throws NOT_FOUND for an unknown container and EXISTS when the key belongs to another container.
    public func register(container: String, publicKey: ServerPublicKey, label: String, logger: Logger) async throws -> ServerKey {
        let keyID = publicKey.keyID
        return try await store.withConnection { connection in
            let known = try await connection.query("SELECT 1 FROM containers WHERE container = \(container)", logger: logger)
            var exists = false
            for try await _ in known { exists = true }
            guard exists else { throw StratusError(.notFound, "no container '\(ClientText.excerpt(container))'") }
            try await connection.query(
                """
                INSERT INTO server_keys (key_id, container, public_key, user_record_name, label)
                VALUES (\(keyID), \(container), \(publicKey.der), \(UserRecordName.generate()), \(label))
                ON CONFLICT (key_id) DO UPDATE SET revoked_at = NULL WHERE server_keys.container = \(container)
                """, logger: logger)
            let rows = try await connection.query(
                "SELECT container, user_record_name FROM server_keys WHERE key_id = \(keyID)", logger: logger)
            for try await (owner, user) in rows.decode((String, String).self) {
                guard owner == container else { throw StratusError(.exists, "this key is registered for another container") }
                return ServerKey(keyID: keyID, container: owner, publicKey: publicKey, userRecordName: user)
            }
            throw StratusError(.internalError, "the key was not stored")
        }
    }

    /// The active (not revoked) key with this id, or nil.
    public func key(id: String, logger: Logger) async throws -> ServerKey? {
        guard id.utf8.count == 64, id.allSatisfy(\.isHexDigit) else { return nil }
        return try await store.withConnection { connection in
            let rows = try await connection.query(
                """
                SELECT k.container, k.public_key, k.user_record_name, c.suspended_at IS NOT NULL, c.deleting_at IS NOT NULL,
                       \(unescaped: ContainerLimitsRow.columns)
                FROM server_keys AS k JOIN containers AS c USING (container)
                WHERE k.key_id = \(id.lowercased()) AND k.revoked_at IS NULL
                """, logger: logger)
            for try await (container, der, user, suspended, deleting, rate, burst, userRate, userBurst, quota, subscriptions, records, zones, bytes, assetBytes)
                in rows.decode((String, Data, String, Bool, Bool, Double?, Double?, Double?, Double?, Int64?, Int32?, Int64?, Int64?, Int64?, Int64?).self) {
                var key = ServerKey(
                    keyID: id.lowercased(), container: container, publicKey: try ServerPublicKey(der: der), userRecordName: user, containerSuspended: suspended,
                    containerLimits: ContainerLimitsRow.limits((rate, burst, userRate, userBurst, quota, subscriptions, records, zones, bytes, assetBytes)))
                key.containerDeleting = deleting
                return key
            }
            return nil
        }
    }

    /// Revokes a key; returns whether an active key was revoked.
    public func revoke(id: String, logger: Logger) async throws -> Bool {
        try await store.withConnection { connection in
            let rows = try await connection.query(
                "UPDATE server_keys SET revoked_at = now() WHERE key_id = \(id.lowercased()) AND revoked_at IS NULL RETURNING key_id",
                logger: logger)
            for try await _ in rows { return true }
            return false
        }
    }
}
