import Foundation
import Logging
import PostgresNIO
import StratusCore

/// Containers and their API tokens.
public struct ContainerStore: Sendable {
    let store: PostgresStore

    /// Creates the container store.
    public init(store: PostgresStore) { self.store = store }

    /// Creates the container if needed and a new API token for it; returns the token (shown once, stored as a digest).
    /// Refused (EXISTS) while the container is being deleted; once its deletion finished, the name is
    /// created afresh.
    public func create(container: String, label: String, logger: Logger) async throws -> String {
        let token = APIToken.generate()
        // One transaction, holding the container's row from its check to its token: a deletion
        // started meanwhile (which marks that row first) either comes before it, and is refused
        // here, or waits for it.
        try await store.readCommitted(logger: logger) { transaction in
            let connection = transaction.connection
            try await connection.query(
                "INSERT INTO containers (container) VALUES (\(container)) ON CONFLICT DO NOTHING", logger: logger)
            let busy = try await connection.query("""
                SELECT 1 FROM (SELECT deleting_at FROM containers WHERE container = \(container) FOR UPDATE) AS c WHERE c.deleting_at IS NOT NULL
                UNION ALL SELECT 1 FROM container_deletions WHERE container = \(container) AND finished_at IS NULL
                """, logger: logger)
            for try await _ in busy { throw ContainerDeletion.busy(container: container) }
            try await connection.query("DELETE FROM container_deletions WHERE container = \(container)", logger: logger)
            try await connection.query(
                "INSERT INTO api_tokens (token_digest, container, label) VALUES (\(Data(APIToken.digest(token))), \(container), \(label))",
                logger: logger)
        }
        return token
    }

    /// What an API token gives access to.
    public struct Access: Sendable, Equatable {
        /// The container the token belongs to.
        public var container: String
        /// Whether the container lets callers without a user read its public database.
        public var allowsAnonymousPublic: Bool
        /// The credential epoch of the user asked about, when the container's directory holds that user.
        public var credentialEpoch: Int64?
        /// Whether the session asked about is signed in (not revoked); nil when the user has no such
        /// session in the container, or none was asked about.
        public var sessionActive: Bool?
        /// Whether an operator suspended the container: its requests are refused.
        public var suspended: Bool
        /// Whether the container is being deleted (`ContainerDeletion`): its requests are refused.
        public var deleting = false
        /// The container's own limits (read with the rest, so they cost no statement of their own).
        public var limits: ContainerLimits

        /// Creates an answer.
        public init(
            container: String, allowsAnonymousPublic: Bool, credentialEpoch: Int64?, sessionActive: Bool? = nil, suspended: Bool = false,
            limits: ContainerLimits = ContainerLimits()
        ) {
            self.container = container
            self.allowsAnonymousPublic = allowsAnonymousPublic
            self.credentialEpoch = credentialEpoch
            self.sessionActive = sessionActive
            self.suspended = suspended
            self.limits = limits
        }
    }

    /// The container an API token belongs to, whether it lets anonymous callers read its public
    /// database and, for `user`, that user's credential epoch in the container's directory (read in
    /// the same statement) and whether `session` of that user is signed in; nil when the token is
    /// unknown. With `cache`, a recent answer may be served instead (`AccessCache` says how recent,
    /// and how changes end it).
    public func access(
        forAPIToken token: String, user: String? = nil, session: String? = nil, cache: AccessCache? = nil, logger: Logger
    ) async throws -> Access? {
        let digest = Data(APIToken.digest(token))
        guard let cache else { return try await access(digest: digest, user: user, session: session, logger: logger) }
        return try await cache.access(for: AccessCache.Key(digest: digest, user: user, session: session)) {
            try await access(digest: digest, user: user, session: session, logger: logger)
        }
    }

    private func access(digest: Data, user: String?, session: String?, logger: Logger) async throws -> Access? {
        let statements = store.statements
        return try await store.withConnection { connection in
            let rows = try await connection.query(
                """
                SELECT t.container, c.allow_anonymous_public, c.suspended_at IS NOT NULL, c.deleting_at IS NOT NULL,
                       \(unescaped: ContainerLimitsRow.columns),
                       (SELECT u.credential_epoch FROM users u WHERE u.user_record_name = \(user) AND u.container = t.container),
                       (SELECT s.revoked_at IS NULL FROM sessions s
                        WHERE s.session_id = \(session) AND s.user_record_name = \(user) AND s.container = t.container)
                FROM api_tokens t JOIN containers c USING (container)
                WHERE t.token_digest = \(digest)
                """, preparedIn: statements, logger: logger)
            for try await (container, anonymous, suspended, deleting, rate, burst, userRate, userBurst, quota, subscriptions, records, zones, bytes, assetBytes, epoch, active)
                in rows.decode((String, Bool, Bool, Bool, Double?, Double?, Double?, Double?, Int64?, Int32?, Int64?, Int64?, Int64?, Int64?, Int64?, Bool?).self) {
                var access = Access(
                    container: container, allowsAnonymousPublic: anonymous, credentialEpoch: epoch, sessionActive: active, suspended: suspended,
                    limits: ContainerLimitsRow.limits((rate, burst, userRate, userBurst, quota, subscriptions, records, zones, bytes, assetBytes)))
                access.deleting = deleting
                return access
            }
            return nil
        }
    }

    /// Lets (or stops letting) callers without a user read the container's public database.
    /// Returns false when the container does not exist.
    @discardableResult
    public func setAnonymousPublicReads(container: String, allowed: Bool, logger: Logger) async throws -> Bool {
        try await store.withConnection { connection in
            let rows = try await connection.query(
                "UPDATE containers SET allow_anonymous_public = \(allowed) WHERE container = \(container) RETURNING 1", logger: logger)
            for try await _ in rows { return true }
            return false
        }
    }

    /// The web origins whose pages may call the container from a browser: `.some(nil)` for any
    /// origin, nil when the container does not exist.
    public func allowedOrigins(container: String, logger: Logger) async throws -> [String]?? {
        try await store.withConnection { connection in
            let rows = try await connection.query("SELECT allowed_origins FROM containers WHERE container = \(container)", logger: logger)
            for try await origins in rows.decode([String]?.self) { return .some(origins) }
            return nil
        }
    }

    /// Sets the web origins whose pages may call the container (nil: any origin, `AllowedOrigins`
    /// checks the list). Returns false when the container does not exist.
    @discardableResult
    public func setAllowedOrigins(container: String, origins: [String]?, logger: Logger) async throws -> Bool {
        try await store.withConnection { connection in
            let rows = try await connection.query(
                "UPDATE containers SET allowed_origins = \(origins) WHERE container = \(container) RETURNING 1", logger: logger)
            for try await _ in rows { return true }
            return false
        }
    }

    /// Names the heir of the container's public records (`UserDeletion.publicRecordsFate`; nil: none,
    /// they are deleted with their creator). Refused (NOT_FOUND) for a user the container's directory
    /// does not hold; false when there is no such container.
    public func setPublicRecordsHeir(container: String, heir: String?, logger: Logger) async throws -> Bool {
        try await store.withConnection { connection in
            if let heir {
                var known = false
                for try await _ in try await connection.query(
                    "SELECT 1 FROM users WHERE container = \(container) AND user_record_name = \(heir)", logger: logger) { known = true }
                guard known else { throw StratusError(.notFound, "container '\(ClientText.excerpt(container))' has no user '\(ClientText.excerpt(heir))'") }
            }
            let rows = try await connection.query(
                "UPDATE containers SET public_records_heir = \(heir) WHERE container = \(container) RETURNING 1", logger: logger)
            for try await _ in rows { return true }
            return false
        }
    }

    /// The heir of the container's public records, if it names one.
    public func publicRecordsHeir(container: String, logger: Logger) async throws -> String? {
        try await store.withConnection { connection in
            let rows = try await connection.query("SELECT public_records_heir FROM containers WHERE container = \(container)", logger: logger)
            for try await heir in rows.decode(String?.self) { return heir }
            return nil
        }
    }

    /// Whether the container exists.
    public func exists(container: String, logger: Logger) async throws -> Bool {
        try await store.withConnection { connection in
            let rows = try await connection.query("SELECT 1 FROM containers WHERE container = \(container)", logger: logger)
            for try await _ in rows { return true }
            return false
        }
    }

    /// The container an API token belongs to, or nil when the token is unknown.
    public func container(forAPIToken token: String, logger: Logger) async throws -> String? {
        try await store.withConnection { connection in
            let rows = try await connection.query(
                "SELECT container FROM api_tokens WHERE token_digest = \(Data(APIToken.digest(token)))", logger: logger)
            for try await container in rows.decode(String.self) { return container }
            return nil
        }
    }
}
